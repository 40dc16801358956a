#!/bin/bash
export LD_LIBRARY_PATH="$PWD/.devlibs"
B=build-shm/bin/egmstore
echo "== machine"; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; lscpu | grep -i "cache\|numa"
for f in enabled shmem_enabled defrag; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f)"; done
cat /proc/sys/kernel/numa_balancing 2>/dev/null; grep -i "huge\|MemTotal\|MemFree" /proc/meminfo; ldd --version | head -1; uptime
echo "== probe"; build-shm/probe/probe ${PROBE_ITERS:-100}
echo "== bench"
for i in 1 2 3; do
  $B bench data --workload single --sizes 16MiB --clients 1 --protocol shm --memory host --seconds ${SECS:-3} --out $OUT/b$i.json 2>&1 | grep -E "^bench: (ceiling|single)"
  grep thp_ /proc/vmstat | grep -v " 0$" | tr '\n' ' '; echo
done
