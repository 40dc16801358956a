#!/usr/bin/env bash
# issue 19, session 22: the real-GPU tests on e573de8 (test_gpu_egm_pool measuring MemAvailable),
# then the KV-cache scenario with the EGM pool.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur
date -u
for t in $B/tests/gpu_test_*; do echo "== $t"; EGM_TEST_BINARY=$B/bin/egmstore timeout 90 $t 2>&1 | grep -v "^20..-..-..T" | tail -12; done > $OUT/gpu-tests.log 2>&1
cat $OUT/gpu-tests.log
timeout 300 /opt/torch/.venv/bin/python3 tests/gpu/kv_scenario/run.py --egmstore $B/bin/egmstore --out /tmp/kv --python /opt/torch/.venv/bin/python3 --gpus 0,0 > $OUT/kv-scenario-egm.log 2>&1
echo "kv scenario rc $?"; tail -25 $OUT/kv-scenario-egm.log
cp build-gpu/run6.sh $OUT/device.sh
