#!/bin/bash
# A/B on the H200: A = build-gpu/n (9e2360e), B = build-gpu/w (+ one GetReplicaList for a pipelined get of <= 64 keys).
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$PWD/.devlibs
export EGM_TEST_BINARY=$PWD/build-gpu/w/bin/egmstore
for t in build-gpu/w/tests/gpu_test_gpu_*; do
  timeout 200 $t > $OUT/$(basename $t).txt 2>&1; echo "$(basename $t) rc $?"
done
for r in 1 2 3; do for v in n w; do
  B=build-gpu/$v
  timeout 150 python3 bench/gpu/engine_workload.py --egmstore $B/bin/egmstore --pythonpath $B/python --out $OUT/ew-$v$r --cases vllm,kv-medium > $OUT/ew-$v$r.txt 2>&1; echo "ew $v$r rc $?"
  grep -E "^\| (vllm|kv)[^|]*\| (put|get|get, looked up) \|" $OUT/ew-$v$r.txt | awk -F'|' -v t=$v$r '{print t, $2, $3, $6}'
done; done
