#!/bin/bash
export LD_LIBRARY_PATH="$PWD/.devlibs"
P=build-shm/probe
for i in 1 2 3; do for v in base nt; do
  echo "== $v --run 1, run $i"
  $P/egmstore-$v bench data --workload single --sizes 16MiB --clients 1 --protocol shm --memory host --seconds 2 --run 1 --out $OUT/$v-run1-$i.json 2>&1 | grep -E "^bench: (ceiling|single)" | sed 's/  */ /g'
done; done
