#!/usr/bin/env bash
# device run: issue 19 H200 measurement (early grants) + real-GPU tests + KV scenario
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur
nproc; date -u; git log --oneline -1 2>/dev/null || true
ldd $B/bin/egmstore | grep -i "not found"
mkdir -p $OUT/data
start=$(date +%s)
timeout 430 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --what data --rounds 3 --clients 1,8 --seconds 1 --late-grants --out /tmp/hc > $OUT/data/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc/*summary* $OUT/data/ 2>/dev/null
(cd /tmp/hc && tar czf $OUT/data/ha-cost-data.tar.gz --exclude etcd . )
tail -40 $OUT/data/data.log | grep -v "^bench: single\|^bench: batch"
for t in $B/tests/gpu_test_*; do echo "== $t"; timeout 40 $t 2>&1 | tail -4; done > $OUT/gpu-tests.log 2>&1
grep -E "PASSED|FAILED|==" $OUT/gpu-tests.log
left=$(( 590 - ($(date +%s) - start) ))
echo "left $left s"
if [ $left -gt 90 ]; then
  timeout $((left-10)) /opt/torch/.venv/bin/python3 tests/gpu/kv_scenario/run.py --egmstore $B/bin/egmstore --out /tmp/kv --python /opt/torch/.venv/bin/python3 --gpus 0,0 > $OUT/kv-scenario-egm.log 2>&1
  echo "kv rc $?"; grep -E "PASS|FAIL" $OUT/kv-scenario-egm.log | tail -22
fi
