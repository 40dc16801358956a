#!/usr/bin/env bash
# The GPU suite and benchmarks, run on the H200 machine from the repository root
# with a build folder made on the Debian machine (binaries are portable there;
# libraries the GPU image lacks travel in .devlibs/). Output goes to $OUT.
#   scripts/gpu-suite.sh BUILD_DIR OUT_DIR
set -u
build=${1:-build}
out=${2:-${OUT:-/tmp/egm-gpu-out}}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$out/gpu-suite.log"
exec > >(tee -a "$log") 2>&1

echo "== machine"
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
numactl -H 2>/dev/null | head -3 || cat /sys/devices/system/node/online
missing=$(ldd "$build/bin/egmstore" "$build/tests/gpu_test_gpu_nvlink" | grep "not found" | sort -u)
[ -n "$missing" ] && echo "missing libraries: $missing"

echo "== gpu tests"
rc=0
for t in "$build"/tests/gpu_test_*; do
    EGM_TEST_BINARY="$PWD/$build/bin/egmstore" timeout 600 "$t" || rc=1
done

echo "== benchmark"
bin="$build/bin/egmstore"
"$bin" master --port 50051 --listen-address 127.0.0.1 --log-level warn > "$out/master.log" 2>&1 &
master=$!
sleep 1
"$bin" provider --master 127.0.0.1:50051 --pool-memory host_numa --global-segment-size 4GiB \
    --max-mr-size 1GiB --local-hostname 127.0.0.1 --log-level warn > "$out/provider.log" 2>&1 &
provider=$!
for i in $(seq 1 120); do grep -q "provider ready" "$out/provider.log" && break; sleep 0.5; done
cat "$out/provider.log"
timeout 400 "$build/bin/egm-gpu-bench" --master 127.0.0.1:50051 --out "$out/gpu-bench.json" || rc=1
kill -TERM "$provider"; wait "$provider"; echo "provider exit $?"
kill -TERM "$master"; wait "$master"; echo "master exit $?"
echo "gpu suite rc=$rc"
exit $rc
