#!/usr/bin/env bash
# The GPU suite and benchmarks, run on the H200 machine from the repository root
# with a build folder made on the Debian machine (binaries are portable there;
# libraries the GPU image lacks travel in .devlibs/). Output goes to $OUT.
#   scripts/gpu-suite.sh BUILD_DIR OUT_DIR [all|egm|kv]
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
nvidia-smi topo -m 2>/dev/null | head -8
missing=$(ldd "$build/bin/egmstore" "$build/tests/gpu_test_gpu_nvlink" | grep "not found" | sort -u)
[ -n "$missing" ] && echo "missing libraries: $missing"

# EGM pool setup timing: a 64 GiB pool (auto NUMA nodes, 1 GiB chunks) with 1,
# 4 and 16 allocation threads; setup and teardown wall times from the log.
egm_setup() {
    local bin="$build/bin/egmstore" size=${EGM_POOL_SIZE:-64GiB}
    echo "== egm pool plan ($size)"
    "$bin" provider --plan-only --enable-egm-store-pool true --global-segment-size "$size" \
        --max-mr-size 1GiB
    "$bin" master --port 50061 --listen-address 127.0.0.1 --log-level warn > "$out/egm-master.log" 2>&1 &
    local master=$!
    sleep 1
    for threads in 1 4 16; do
        local log="$out/egm-provider-t$threads.log"
        "$bin" provider --master 127.0.0.1:50061 --enable-egm-store-pool true \
            --global-segment-size "$size" --max-mr-size 1GiB --egm-setup-threads "$threads" \
            --provider-http-port 0 --local-hostname 127.0.0.1 > "$log" 2>&1 &
        local provider=$!
        local free0=$(awk '/^MemFree/{print $2}' /proc/meminfo)
        for i in $(seq 1 600); do grep -q "provider ready" "$log" && break; sleep 0.2; done
        local free1=$(awk '/^MemFree/{print $2}' /proc/meminfo)
        grep -h "provider ready\|EGM pool setup:\|vmm pool:" "$log"
        local t0=$(date +%s.%N)
        kill -TERM "$provider"; wait "$provider"; local prc=$?
        local t1=$(date +%s.%N)
        local free2=$(awk '/^MemFree/{print $2}' /proc/meminfo)
        echo "egm setup threads=$threads: provider exit $prc, teardown $(awk "BEGIN{print $t1 - $t0}") s"
        echo "egm setup threads=$threads: MemFree GiB before/ready/after: $(awk "BEGIN{printf \"%.1f / %.1f / %.1f\", $free0/1048576, $free1/1048576, $free2/1048576}")"
    done
    kill -TERM "$master"; wait "$master"
}

# The KV-cache scenario (tests/gpu/kv_scenario) through the Python package in
# $build/python: an EGM pool over nvlink, then a host (memfd) pool. Workers on
# GPUs 0 and 1, or both on GPU 0 when there is one.
kv_scenario() {
    local gpus=0,1 rc=0
    [ "$(nvidia-smi -L | wc -l)" -lt 2 ] && gpus=0,0
    echo "== python $(python3 --version 2>&1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1)"
    for pool in egm host; do
        echo "== kv scenario: pool $pool, gpus $gpus"
        timeout 500 python3 tests/gpu/kv_scenario/run.py --egmstore "$build/bin/egmstore" \
            --pythonpath "$build/python" --out "$out/kv-$pool" --gpus "$gpus" --pool "$pool" ${KV_ARGS:-}
        local r=$?
        echo "kv scenario pool $pool: rc=$r"
        [ $r -eq 0 ] || rc=1
    done
    return $rc
}

case "${3:-all}" in
egm)
    egm_setup
    exit 0
    ;;
kv)
    kv_scenario
    exit $?
    ;;
esac

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
egm_setup
echo "gpu suite rc=$rc"
exit $rc
