#!/bin/bash
export LD_LIBRARY_PATH="$PWD/.devlibs"
P=build-shm/probe
bench() { $1 bench data --workload single --sizes 16MiB --clients 1 --protocol shm --memory host "${@:2}" 2>&1 | grep -E "^bench: (ceiling|single)|rror" | sed 's/  */ /g'; }
echo "== nt first"; $P/nt 150
# A/B, same bench code (f512b93 vs f512b93 + prefault)
for i in 1 2; do for v in base new nt; do
  echo "== $v warm run $i (default --run)"; bench $P/egmstore-$v --seconds 3 --out $OUT/$v-warm$i.json
done; done
for v in base new nt; do echo "== $v warm --run 1"; bench $P/egmstore-$v --seconds 3 --run 1; done
# A client process joining a running cluster: pages exist (written by an earlier process), its mapping is fresh
for v in base new nt; do
  B=$P/egmstore-$v; port=$((50170 + RANDOM % 100))
  $B master --port $port --listen-address 127.0.0.1 --http-port -1 --log-level warn > /tmp/m-$v.log 2>&1 & m=$!
  sleep 0.5
  $B provider --master 127.0.0.1:$port --global-segment-size 2GiB --local-hostname 127.0.0.1 --log-level warn > /tmp/p-$v.log 2>&1 & p=$!
  for k in $(seq 50); do grep -q "provider ready" /tmp/p-$v.log && break; sleep 0.2; done
  for r in 1 2 3; do echo "== $v joining client, process $r (fresh mapping; pages allocated from process 2 on)"; bench $B --master 127.0.0.1:$port --iters 40 --no-ceiling; done
  kill $p; wait $p; kill $m; wait $m
done
