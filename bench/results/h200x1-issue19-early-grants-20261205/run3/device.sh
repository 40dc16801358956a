#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur
date -u
mkdir -p $OUT/single
start=$(date +%s)
timeout 470 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --what data --workload single --sizes 4KiB,1MiB --rounds 4 --clients 1,8 --seconds 3 --out /tmp/hc2 > $OUT/single/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc2/summary.md $OUT/single/ 2>/dev/null
(cd /tmp/hc2 && tar czf $OUT/single/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/single/summary.md
