#!/bin/bash
export LD_LIBRARY_PATH="$PWD/.devlibs"
echo "== ksweep"; build-shm/probe/ksweep
for i in 1 2; do
 for v in base new; do
  B=build-shm/probe/egmstore-$v
  echo "== $v warm run $i"
  $B bench data --workload single --sizes 16MiB --clients 1 --protocol shm --memory host --seconds 3 --out $OUT/$v-warm$i.json 2>&1 | grep -E "^bench: (ceiling|single)" | sed 's/  */ /g'
 done
done
