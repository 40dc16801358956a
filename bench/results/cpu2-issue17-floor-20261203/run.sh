#!/bin/bash
# The single-object rates of issue 17's CPU goals next to their floor, one run:
# egm-rtt-floor (an empty synchronous round trip), redis-benchmark SET/GET of 4 KiB,
# egmstore bench data single 4 KiB put/get over shm; at 1 and 8 clients, 3 rounds.
#   run.sh BUILD OUT   (BUILD: a build folder with bin/egmstore and bin/egm-rtt-floor)
set -euo pipefail
build=$1; out=$2; mkdir -p "$out"
port=6399
redis-server --port $port --save "" --appendonly no --daemonize yes --pidfile "$out/redis.pid" >/dev/null
trap 'redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true' EXIT
sleep 0.5
for round in 1 2 3; do
  for s in 1 2; do
    "$build/bin/egm-rtt-floor" --clients 1,8 --seconds 2 --server-threads $s >> "$out/floor.jsonl"
  done
  for c in 1 8; do
    echo "round $round clients $c" >> "$out/redis.csv"
    redis-benchmark -p $port -t set,get -d 4096 -n 100000 -c $c --csv >> "$out/redis.csv"
  done
  for mode in shared per-thread; do
    extra=(); [ $mode = per-thread ] && extra=(--client-per-thread)
    echo "round $round $mode" >> "$out/egmstore.txt"
    "$build/bin/egmstore" bench data --workload single --sizes 4KiB --protocol shm --clients 1,8 \
      --seconds 2 --no-ceiling "${extra[@]}" --log-level warn 2>/dev/null | grep -E "^(workload|single)" >> "$out/egmstore.txt"
  done
done
