#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur
date -u
for t in $B/tests/gpu_test_*; do echo "== $t"; EGM_TEST_BINARY=$B/bin/egmstore timeout 60 $t 2>&1 | grep -v "^20..-..-..T" | tail -6; done > $OUT/gpu-tests.log 2>&1
cat $OUT/gpu-tests.log
mkdir -p $OUT/one
start=$(date +%s)
timeout 400 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --what data --workload single --sizes 1MiB --rounds 5 --clients 8 --seconds 3 --late-grants --out /tmp/hc1 > $OUT/one/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc1/summary.md $OUT/one/ 2>/dev/null
(cd /tmp/hc1 && tar czf $OUT/one/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/one/summary.md
