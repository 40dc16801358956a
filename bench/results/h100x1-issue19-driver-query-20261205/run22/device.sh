#!/usr/bin/env bash
# issue 19, session 24: "standby" = the client writing its slab-log entry without asking the CUDA
# driver where the entry's stack buffer lives (egm_te_op_t.local_host), "base" = HEAD (46d2341),
# 8 clients' single 4 KiB puts, 6 rounds of 3 s, with CPU records; then the real-GPU tests and
# the KV scenario on HEAD.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur V=$PWD/build-gpu/hostlog
date -u; nproc; nvidia-smi -L
mkdir -p $OUT/ab
start=$(date +%s)
timeout 320 bash bench/meta/ha_cost.sh --egmstore $V/bin/egmstore --baseline $B/bin/egmstore --what data \
    --workload single --sizes 4KiB --rounds 6 --clients 8 --seconds 3 --out /tmp/hc11 > $OUT/ab/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc11/summary.md /tmp/hc11/cpu.md $OUT/ab/ 2>/dev/null
(cd /tmp/hc11 && tar czf $OUT/ab/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/ab/summary.md $OUT/ab/cpu.md
python3 bench/meta/rpc_time.py /tmp/hc11 > $OUT/ab/rpc-time.md 2>&1; cat $OUT/ab/rpc-time.md
python3 bench/meta/put_call_time.py /tmp/hc11 2>&1 | tee $OUT/ab/put-call-time.txt
cp build-gpu/run11.sh $OUT/ab/device.sh
for t in $B/tests/gpu_test_*; do echo "== $t"; timeout 40 $t 2>&1 | tail -4; done > $OUT/gpu-tests.log 2>&1
grep -E "PASSED|FAILED|==" $OUT/gpu-tests.log
left=$(( 570 - ($(date +%s) - start) ))
echo "left $left s"
if [ $left -gt 90 ]; then
  timeout $((left-10)) /opt/torch/.venv/bin/python3 tests/gpu/kv_scenario/run.py --egmstore $B/bin/egmstore --out /tmp/kv --python /opt/torch/.venv/bin/python3 --gpus 0,0 > $OUT/kv-scenario-egm.log 2>&1
  echo "kv rc $?"; grep -E "PASS|FAIL" $OUT/kv-scenario-egm.log | tail -22
fi
