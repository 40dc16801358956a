#!/usr/bin/env bash
# issue 19, session 24, run 12: the real-GPU tests on HEAD, then run 11's A/B again:
# "standby" = the client's slab-log entry written without asking the CUDA driver where its stack
# buffer lives (egm_te_op_t.local_host), "base" = HEAD (46d2341); 8 clients' single 4 KiB puts,
# 5 rounds of 3 s.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur V=$PWD/build-gpu/hostlog
date -u; nproc; nvidia-smi -L
export EGM_TEST_BINARY=$B/bin/egmstore
for t in $B/tests/gpu_test_*; do echo "== $t"; timeout 40 $t 2>&1 | tail -6; done > $OUT/gpu-tests.log 2>&1
grep -E "PASSED|FAILED|passed|failed|==" $OUT/gpu-tests.log
mkdir -p $OUT/ab
start=$(date +%s)
timeout 250 bash bench/meta/ha_cost.sh --egmstore $V/bin/egmstore --baseline $B/bin/egmstore --what data \
    --workload single --sizes 4KiB --rounds 5 --clients 8 --seconds 3 --out /tmp/hc12 > $OUT/ab/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc12/summary.md $OUT/ab/summary-ab.md; cp /tmp/hc12/cpu.md $OUT/ab/ 2>/dev/null
(cd /tmp/hc12 && tar czf $OUT/ab/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/ab/summary-ab.md $OUT/ab/cpu.md
python3 bench/meta/rpc_time.py /tmp/hc12 > $OUT/ab/rpc-time.md 2>&1; cat $OUT/ab/rpc-time.md
python3 bench/meta/put_call_time.py /tmp/hc12 2>&1 | tee $OUT/ab/put-call-time.txt
cp build-gpu/run12.sh $OUT/ab/device.sh
