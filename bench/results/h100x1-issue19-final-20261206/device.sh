#!/usr/bin/env bash
# issue 19, session 28: "new" = 493fa3f (final code of Removes the pool describes),
# "base" = 49c771a (build-gpu/cur). Usage: run27.sh PHASE...
#   abN: 8 clients' (and with ab1, 1 client's) single 4 KiB puts, 5 rounds of 3 s, no mode "on"
#   gpu: the real-GPU tests on the new build; kv: the KV-cache scenario (EGM pool, 2 workers on GPU 0)
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/new V=$PWD/build-gpu/cur
date -u; nproc; nvidia-smi -L; grep -m1 "model name" /proc/cpuinfo
start=$(date +%s); budget=${BUDGET:-585}
left() { echo $(( budget - ($(date +%s) - start) )); }
for p in "$@"; do
  case $p in
  ab*)
    cl=8; need=170; [ $p = ab1 ] && { cl=1,8; need=330; }
    [ $(left) -lt $need ] && { echo "skip $p: $(left) s left"; continue; }
    o=/tmp/hc27$p; t0=$(date +%s)
    timeout $(( $(left) - 5 )) bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --baseline $V/bin/egmstore \
        --what data --workload single --sizes 4KiB --rounds 5 --clients $cl --seconds 3 --no-on --out $o > $o.log 2>&1
    echo "== $p: ha_cost rc $? in $(( $(date +%s) - t0 )) s"
    grep -E "^\| (op|single put)" $o/summary.md; cat $o/cpu.md
    grep -h "removes_described\|remove" $o/metrics-standby-*.txt | head -4
    python3 bench/meta/rpc_time.py $o > $o/rpc-time.md 2>&1; cat $o/rpc-time.md
    (python3 bench/meta/put_call_time.py $o; python3 bench/meta/put_call_time.py --mode base $o) > $o/put-call-time.txt 2>&1; cat $o/put-call-time.txt
    cp $o.log $o/data.log; cp build-gpu/run27.sh $o/device.sh
    (cd $o && tar czf $OUT/run27$p.tar.gz --exclude etcd .) ;;
  gpu)
    [ $(left) -lt 130 ] && { echo "skip gpu: $(left) s left"; continue; }
    export EGM_TEST_BINARY=$B/bin/egmstore
    for t in $B/tests/gpu_test_*; do echo "== $t"; timeout 40 $t 2>&1 | tail -4; done > $OUT/gpu-tests.log 2>&1
    grep -E "PASSED|FAILED|==|SKIP" $OUT/gpu-tests.log ;;
  kv)
    [ $(left) -lt 60 ] && { echo "skip kv: $(left) s left"; continue; }
    timeout $(( $(left) - 5 )) /opt/torch/.venv/bin/python3 tests/gpu/kv_scenario/run.py --egmstore $B/bin/egmstore \
        --out /tmp/kv --python /opt/torch/.venv/bin/python3 --gpus 0,0 > $OUT/kv.log 2>&1
    echo "kv rc $?"; tail -6 $OUT/kv.log ;;
  esac
done
echo "done at $(( $(date +%s) - start )) s"
