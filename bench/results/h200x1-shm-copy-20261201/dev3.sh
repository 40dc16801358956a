#!/bin/bash
export LD_LIBRARY_PATH="$PWD/.devlibs"
echo "== pop"; build-shm/probe/pop
for i in 1 2; do
 for v in base new; do
  B=build-shm/bin/egmstore; [ $v = base ] && B=build-shm/probe/egmstore-base
  echo "== $v warm run $i"
  $B bench data --workload single --sizes 16MiB --clients 1 --protocol shm --memory host --seconds 3 --out $OUT/$v-warm$i.json 2>&1 | grep -E "^bench: (ceiling|single)" | sed 's/  */ /g'
  echo "== $v no-warm run $i"
  $B bench data --workload single --sizes 16MiB --clients 1 --protocol shm --memory host --no-warm --iters 60 2>&1 | grep -E "^bench: (ceiling|single)|rror" | sed 's/  */ /g'
 done
done
