#!/usr/bin/env bash
# issue 19, session 25: "standby" = build-gpu/smart (HEAD 2b11273 + RPC threads that never wait a
# round trip on a connection whose peer pipelines: src/rpc/server.c `pipelined`), "base" =
# build-gpu/cur (HEAD 2b11273); 1 and 8 clients' single 4 KiB puts, 5 rounds of 2 s, with the
# clients' put phases; then the real-GPU tests and the KV scenario on the smart build.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/smart V=$PWD/build-gpu/cur
date -u; nproc; nvidia-smi -L
mkdir -p $OUT/ab
start=$(date +%s)
timeout 400 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --baseline $V/bin/egmstore --what data \
    --workload single --sizes 4KiB --rounds 5 --clients 1,8 --seconds 2 --out /tmp/hc15 > $OUT/ab/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc15/summary.md $OUT/ab/summary-ab.md; cp /tmp/hc15/cpu.md $OUT/ab/ 2>/dev/null
(cd /tmp/hc15 && tar czf $OUT/ab/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/ab/summary-ab.md $OUT/ab/cpu.md
python3 bench/meta/rpc_time.py /tmp/hc15 > $OUT/ab/rpc-time.md 2>&1; cat $OUT/ab/rpc-time.md
(python3 bench/meta/put_call_time.py /tmp/hc15; python3 bench/meta/put_call_time.py --mode base /tmp/hc15) 2>&1 | tee $OUT/ab/put-call-time.txt
cp build-gpu/run15.sh $OUT/ab/device.sh
export EGM_TEST_BINARY=$B/bin/egmstore
for t in $B/tests/gpu_test_*; do echo "== $t"; timeout 40 $t 2>&1 | tail -6; done > $OUT/gpu-tests.log 2>&1
grep -E "passed|failed|==" $OUT/gpu-tests.log
left=$(( 470 - ($(date +%s) - start) ))
echo "left $left s"
if [ $left -gt 90 ]; then
  timeout $((left-10)) /opt/torch/.venv/bin/python3 tests/gpu/kv_scenario/run.py --egmstore $B/bin/egmstore --out /tmp/kv --python /opt/torch/.venv/bin/python3 --gpus 0,0 > $OUT/kv-scenario-egm.log 2>&1
  echo "kv rc $?"; grep -E "PASS|FAIL" $OUT/kv-scenario-egm.log | tail -22
fi
