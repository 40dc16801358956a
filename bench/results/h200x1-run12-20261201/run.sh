# Issue 7 follow-up on the H200: the client pipeline ramp, two put copy workers, rpc_spin_us,
# concurrency on one GPU, sparse offload. Outputs in $OUT. (Run from the repository root with the
# build staged in .devrun and its libraries in .devlibs.)
export LD_LIBRARY_PATH=$PWD/.devlibs NCCL_NVLS_ENABLE=0
B=.devrun/bin/egmstore
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s)
  timeout $limit "$@" > $OUT/$name.txt 2> $OUT/$name.err; echo "== $name rc=$? ($(( $(date +%s) - t0 )) s)"; }
step data-gpu 150 $B bench data --memory gpu --pool egm --protocol nvlink --workload single,batch --sizes 4KiB,64KiB,16MiB,64MiB --keys 8192 --block 64KiB --clients 1 --seconds 1 --pool-size 4GiB --out $OUT/data-gpu.json
step data-gpu-spin30 60 $B bench data --memory gpu --pool egm --protocol nvlink --workload single --sizes 4KiB,64KiB --clients 1 --seconds 1 --no-ceiling --rpc-spin-us 30 --pool-size 1GiB --out $OUT/data-gpu-spin30.json
step data-gpu-clients 90 $B bench data --memory gpu --pool egm --protocol nvlink --workload single --sizes 4KiB,1MiB,16MiB --clients 1,4 --seconds 1 --no-ceiling --pool-size 4GiB --out $OUT/data-gpu-clients.json
step sparse 100 python3 bench/gpu/sparse_offload.py --egmstore $B --pythonpath .devrun/python --out $OUT/sparse
for f in data-gpu data-gpu-spin30 data-gpu-clients; do echo "## $f"; grep -E "^(single|batch|ceiling)" $OUT/$f.txt; done
sed -n 1,12p $OUT/sparse/summary.txt
