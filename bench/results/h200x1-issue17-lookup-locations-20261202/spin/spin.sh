#!/usr/bin/env bash
# Spin experiment: the new build, engine_workload with client / master spin variants, twice.
set -u
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B=build-gpu
i=0
for round in 1 2; do
 for v in base cspin mspin both; do
  i=$((i+1))
  case $v in
   base) a="";;
   cspin) a="--client-config rpc_spin_us=300";;
   mspin) a="--master-arg=--rpc-server-spin-us=1000";;
   both) a="--client-config rpc_spin_us=300 --master-arg=--rpc-server-spin-us=1000";;
  esac
  s=$(date +%s)
  timeout 100 python3 bench/gpu/engine_workload.py --egmstore $B/bin/egmstore --pythonpath $B/python \
    --out "$OUT/s$i-$v" --cases vllm,single-16m,lat-4k $a > "$OUT/s$i-$v.txt" 2>&1
  rc=$?; echo "== $i $v rc=$rc $(( $(date +%s) - s ))s"
  grep -E "^\| (vllm-16|single-16m|lat-4k)" "$OUT/s$i-$v.txt" | grep -v "lat-4k hot"
 done
done
