#!/usr/bin/env bash
# issue 19, session 26: "standby" = 2783425 (Removes the pool describes: removal entries),
# "base" = 49c771a (build-gpu/cur); 8 clients' (and 1 client's) single 4 KiB puts, 5 rounds of 3 s,
# without the mode "on"; then the real-GPU tests on the new build.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/new V=$PWD/build-gpu/cur
date -u; nproc; nvidia-smi -L
start=$(date +%s)
for r in A B; do
    left=$(( 420 - ($(date +%s) - start) ))
    cl=1,8; [ $r = B ] && cl=8
    need=330; [ $r = B ] && need=170
    [ $left -lt $need ] && { echo "skip $r: $left s left"; continue; }
    o=/tmp/hc26$r; t0=$(date +%s)
    timeout $((left-5)) bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --baseline $V/bin/egmstore \
        --what data --workload single --sizes 4KiB --rounds 5 --clients $cl --seconds 3 --no-on --out $o > $o.log 2>&1
    echo "== $r: ha_cost rc $? in $(( $(date +%s) - t0 )) s"
    grep -E "^\| (op|single put)" $o/summary.md; cat $o/cpu.md
    grep -h "removes_described" $o/metrics-standby-*.txt | head -3
    python3 bench/meta/rpc_time.py $o > $o/rpc-time.md 2>&1; cat $o/rpc-time.md
    (python3 bench/meta/put_call_time.py $o; python3 bench/meta/put_call_time.py --mode base $o) > $o/put-call-time.txt 2>&1; cat $o/put-call-time.txt
    cp $o.log $o/data.log; cp build-gpu/run26b.sh $o/device.sh
    (cd $o && tar czf $OUT/run26$r.tar.gz --exclude etcd .)
done
export EGM_TEST_BINARY=$B/bin/egmstore
left=$(( 480 - ($(date +%s) - start) ))
echo "left $left s for the GPU tests"
if [ $left -gt 60 ]; then
  for t in $B/tests/gpu_test_*; do echo "== $t"; timeout 40 $t 2>&1 | tail -4; done > $OUT/gpu-tests.log 2>&1
  grep -E "PASSED|FAILED|==|SKIP" $OUT/gpu-tests.log
fi
