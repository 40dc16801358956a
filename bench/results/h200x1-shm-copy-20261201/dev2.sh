#!/bin/bash
export LD_LIBRARY_PATH="$PWD/.devlibs"
B=build-shm/bin/egmstore
run() { $B bench data --workload single --sizes 16MiB --clients 1 --protocol shm --memory host --seconds 3 "$@" 2>&1 | grep -E "^bench: (ceiling|single|a client)"; }
echo "== mt"; build-shm/probe/mt
for i in 1 2; do
echo "== pool 160MiB (8 slots = 128 MiB working set, fits L3) run $i"; run --pool-size 160MiB --out $OUT/small$i.json
echo "== pool 2GiB (102 slots) run $i"; run --out $OUT/big$i.json
done
echo "== pool 2GiB --no-warm"; run --no-warm --iters 40 --out $OUT/nowarm.json
