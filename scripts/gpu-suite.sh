#!/usr/bin/env bash
# The GPU suite and benchmarks, run on the H200 machine from the repository root
# with a build folder made on the Debian machine (binaries are portable there;
# libraries the GPU image lacks travel in .devlibs/). Output goes to $OUT.
#   scripts/gpu-suite.sh BUILD_DIR OUT_DIR [all|egm|kv|bench|mooncake-gpu|scale]
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
# $build/python: an EGM pool over nvlink, then a host (memfd) pool. Workers A and B
# on GPUs 0 and 1, or both on GPU 0 when there is one; with 3 or more GPUs one
# worker per GPU on a ring (worker i stores prompt i, worker i+1 fetches it).
# KV_GPUS names the workers' GPUs (e.g. 0,0,0,0: a ring of four on GPU 0).
kv_scenario() {
    local gpus ngpu rc=0
    ngpu=$(nvidia-smi -L | grep -c "^GPU ")
    if [ -n "${KV_GPUS:-}" ]; then gpus=$KV_GPUS
    elif [ "$ngpu" -ge 3 ]; then gpus=$(seq -s, 0 $((ngpu - 1)))
    elif [ "$ngpu" = 2 ]; then gpus=0,1
    else gpus=0,0
    fi
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

# Benchmarks (issue 7; docs/benchmarks.md), about 6-8 minutes on one H200: `egmstore bench
# data` with GPU buffers over nvlink and tcp-staging (single 4 KiB..256 MiB, batch 8192 x 64 KiB,
# the 4 KiB get latency among the singles), bench/gpu/sparse_offload.py (unbounded, then
# nvlink_max_inflight_bytes=8MiB), bench/gpu/interference.py with 64 KiB blocks and with 16 MiB
# objects (NCCL all-reduce with two GPUs; with one, the d2d-proxy, which is NOT NCCL). Each step
# has its own timeout and its own log; the timeouts add up to 520 s, under the device's 600 s. Everything is written under $out/bench/, then packed into
# $out/bench-results.tar.gz and the folder removed (the device returns only a few files);
# $out/bench-summary.txt holds every step's summary table and checks.
# EGM_BENCH_FAKE=1: the same steps on egmstore's fake CUDA driver ($build/fake-cuda; no GPU, no
# torch), with small sizes: a test of this mode, not a measurement.
bench() {
    local bin="$build/bin/egmstore" py="$build/python" dir="$out/bench" rc=0
    local ngpu fake=() sizes=4KiB,64KiB,1MiB,16MiB,64MiB,256MiB keys=8192 secs=2 pool=4GiB
    local sparse=() intf_small=() intf_large=() t=1
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
    intf_large=(--kv-block 16MiB --kv-batch 4 --kv-keys 64 --settings
        "unbounded;inflight-8MiB:nvlink_max_inflight_bytes=8MiB;chunk-1MiB:nvlink_chunk_size=1MiB;low-priority:nvlink_low_priority_stream=true")
    if [ "${EGM_BENCH_FAKE:-0}" = 1 ]; then
        export LD_LIBRARY_PATH="$PWD/$build/fake-cuda:$LD_LIBRARY_PATH" EGM_FAKE_CUDA_FABRIC=0
        fake=(--fake-gpu)
        sizes=4KiB,64KiB,1MiB keys=256 secs=0.2 pool=512MiB ngpu=1 t=4
        intf_large=(--kv-block 1MiB --kv-batch 4 --kv-keys 32 --settings
            "unbounded;inflight-256KiB:nvlink_max_inflight_bytes=256KiB;chunk-64KiB:nvlink_chunk_size=64KiB")
        echo "== bench: EGM_BENCH_FAKE=1: fake CUDA driver, small sizes: a test of this mode, no GPU figure"
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "== bench: $ngpu GPU(s), python $(python3 --version 2>&1 | cut -d" " -f2), torch $(python3 -c "import torch; print(torch.__version__)" 2>/dev/null || echo none)"
    step() { # name timeout command...: runs it with its output in $dir/name.log, says how it ended
        local name=$1 limit=$2 t0 r
        shift 2
        t0=$(date +%s)
        echo "== bench $name: $*"
        timeout "$limit" "$@" > "$dir/$name.log" 2>&1
        r=$?
        tail -n 40 "$dir/$name.log"
        echo "== bench $name: rc=$r ($(($(date +%s) - t0)) s)"
        [ $r -eq 0 ] || rc=1
        return $r
    }
    step data-gpu $((150 * t)) "$bin" bench data --memory gpu --pool egm --protocol nvlink,tcp \
        --workload single,batch --sizes "$sizes" --keys "$keys" --block 64KiB --clients 1 \
        --seconds "$secs" --pool-size "$pool" --out "$dir/data-gpu.json"
    # The isolated call: a check between every two single calls (--run 1), nvlink only.
    step data-gpu-run1 $((60 * t)) "$bin" bench data --memory gpu --pool egm --protocol nvlink \
        --workload single --sizes "$sizes" --clients 1 --run 1 --no-ceiling \
        --seconds "$secs" --pool-size "$pool" --out "$dir/data-gpu-run1.json"
    step sparse $((90 * t)) python3 bench/gpu/sparse_offload.py --egmstore "$bin" \
        --pythonpath "$py" --out "$dir/sparse" "${fake[@]}"
    step sparse-inflight-8MiB $((90 * t)) python3 bench/gpu/sparse_offload.py --egmstore "$bin" \
        --pythonpath "$py" --out "$dir/sparse-inflight-8MiB" \
        --config nvlink_max_inflight_bytes="$([ ${#fake[@]} -gt 0 ] && echo 256KiB || echo 8MiB)" "${fake[@]}"
    step interference $((100 * t)) python3 bench/gpu/interference.py --egmstore "$bin" \
        --pythonpath "$py" --out "$dir/interference" "${fake[@]}"
    step interference-large $((90 * t)) python3 bench/gpu/interference.py --egmstore "$bin" \
        --pythonpath "$py" --out "$dir/interference-large" "${intf_large[@]}" "${fake[@]}"
    python3 bench/report.py --no-plots --md "$dir/report.md" --title "GPU benchmarks ($ngpu GPU)" \
        "$dir"/data-gpu.json "$dir"/sparse*/sparse.json "$dir"/interference*/interference.json \
        > "$dir/report.log" 2>&1 || echo "== bench: report.py failed (see report.log in the tarball)"
    {
        echo "# bench summaries ($(date -u +%FT%TZ), $ngpu GPU(s)${fake[*]:+, FAKE GPU})"
        for f in "$dir"/sparse*/summary.txt "$dir"/interference*/summary.txt; do
            [ -f "$f" ] && { echo; echo "## ${f#"$dir"/}"; cat "$f"; }
        done
        echo
        echo "## data-gpu (egmstore bench data, table)"
        sed -n "/^workload /,\$p" "$dir/data-gpu.log"
    } > "$out/bench-summary.txt"
    tar czf "$out/bench-results.tar.gz" -C "$out" bench && rm -rf "$dir"
    echo "== bench: rc=$rc; $out/bench-summary.txt, $out/bench-results.tar.gz ($(du -h "$out/bench-results.tar.gz" | cut -f1))"
    return $rc
}

# Mooncake Store with GPU buffers next to egmstore's facade (issue 7; docs/benchmarks.md), at
# most 9 minutes (timeouts 180 s and 330 s, each with a grace before SIGKILL): bench/py/store_bench.py --memory gpu (single 4 KiB..64 MiB, batches 1024 and
# 8192 x 64 KiB, put_from/get_into and their batch forms from HBM, every get checked on the GPU)
# for egmstore (the facade over nvlink, an EGM pool) and for Mooncake Store's CUDA 13 build over
# its tcp transport (segment in host memory, the client's buffers in HBM), the same script.
# Mooncake comes from $MOONCAKE_GPU_ARCHIVE (default BUILD/mooncake-cuda13.tar.xz, made on the
# Debian machine by bench/py/stage-mooncake-gpu.sh BUILD), unpacked to /tmp by
# bench/py/unpack-mooncake-gpu.sh; without the archive the Mooncake step is skipped, said so.
# Writes $out/store-gpu-egmstore.json, $out/store-gpu-mooncake.json, $out/store-gpu-report.md
# (bench/report.py: the GPU table with the Python nvlink / Mooncake ratio) and the logs in
# $out/store-gpu-logs.tar.gz. EGM_BENCH_FAKE=1: egmstore's fake CUDA driver, --smoke, and the
# mooncake package python3 imports (no archive): a test of this mode, not a measurement.
mooncake_gpu() {
    local dir="$out/store-gpu" rc=0 r archive=${MOONCAKE_GPU_ARCHIVE:-$build/mooncake-cuda13.tar.xz}
    local args=(--memory gpu --device "${STORE_GPU_DEVICE:-0}" --progress) jsons=()
    local run=/tmp/mooncake-cuda13-run title="store_bench.py with GPU buffers: egmstore and Mooncake"
    if [ "${EGM_BENCH_FAKE:-0}" = 1 ]; then
        export LD_LIBRARY_PATH="$PWD/$build/fake-cuda:$LD_LIBRARY_PATH" EGM_FAKE_CUDA_FABRIC=0
        args+=(--fake-gpu --smoke)
        title="$title (FAKE GPU: a test of the mode)"
        echo "== store-gpu: EGM_BENCH_FAKE=1: fake CUDA driver, --smoke: a test of this mode, no GPU figure"
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "== store-gpu: python $(python3 --version 2>&1 | cut -d" " -f2), torch $(python3 -c "import torch; print(torch.__version__)" 2>/dev/null || echo none)"
    echo "== store-gpu egmstore: store_bench.py --system egmstore ${args[*]}"
    timeout -k 20 180 python3 bench/py/store_bench.py --system egmstore --egm-build "$build" "${args[@]}" \
        --out "$out/store-gpu-egmstore.json" --log-dir "$dir/egmstore" > "$dir/egmstore.log" 2>&1
    r=$?
    tail -n 30 "$dir/egmstore.log"
    echo "== store-gpu egmstore: rc=$r"
    [ $r -eq 0 ] || rc=1
    [ -f "$out/store-gpu-egmstore.json" ] && jsons+=("$out/store-gpu-egmstore.json")
    local env_sh=""
    if [ "${EGM_BENCH_FAKE:-0}" = 1 ]; then
        env_sh=/dev/null
    elif [ ! -f "$archive" ]; then
        echo "== store-gpu mooncake: SKIPPED: no $archive (make it on the Debian machine with" \
            "bench/py/stage-mooncake-gpu.sh $build, and carry it; or set MOONCAKE_GPU_ARCHIVE)"
    elif bench/py/unpack-mooncake-gpu.sh "$archive" "$run" > "$dir/unpack.log" 2>&1; then
        cat "$dir/unpack.log"
        env_sh=$run/env.sh
    else
        cat "$dir/unpack.log"
        echo "== store-gpu mooncake: FAILED: $archive does not load here (unpack-mooncake-gpu.sh above)"
        rc=1
    fi
    if [ -n "$env_sh" ]; then
        echo "== store-gpu mooncake: store_bench.py --system mooncake ${args[*]}"
        (
            # shellcheck disable=SC1090
            . "$env_sh"
            timeout -k 30 330 python3 bench/py/store_bench.py --system mooncake "${args[@]}" \
                --out "$out/store-gpu-mooncake.json" --log-dir "$dir/mooncake" > "$dir/mooncake.log" 2>&1
        )
        r=$?
        tail -n 30 "$dir/mooncake.log"
        echo "== store-gpu mooncake: rc=$r"
        [ $r -eq 0 ] || rc=1
        [ -f "$out/store-gpu-mooncake.json" ] && jsons+=("$out/store-gpu-mooncake.json")
    fi
    if [ ${#jsons[@]} -gt 0 ]; then
        python3 bench/report.py --no-plots --md "$out/store-gpu-report.md" --title "$title" "${jsons[@]}" > "$dir/report.log" 2>&1 || echo "== store-gpu: report.py failed (report.log in the tarball)"
        sed -n "/^## GPU memory/,/^## [^G]/p" "$out/store-gpu-report.md" 2>/dev/null | grep "^|"
    fi
    rm -rf "$run"
    tar czf "$out/store-gpu-logs.tar.gz" -C "$out" store-gpu && rm -rf "$dir"
    echo "== store-gpu: rc=$rc; $out/store-gpu-*.json, $out/store-gpu-report.md, $out/store-gpu-logs.tar.gz"
    return $rc
}

# Scale (issue 9; docs/benchmarks.md "Scale: eight GPUs"): bench/gpu/scale.py, one worker per
# GPU; on a one-GPU machine two workers share GPU 0 (--gpus 0,0) so that the concurrent path
# runs. Under 300 s on one H200 (timeout 290 s). Writes $out/scale.json, $out/scale-summary.txt,
# $out/topology.txt and $out/topology.json; the logs (provider's chunk lines, numa_maps, the
# workers') in $out/scale-logs.tar.gz. SCALE_ARGS adds flags (e.g. "--workers 16").
# EGM_BENCH_FAKE=1: the fake CUDA driver (2 GPUs over 2 nodes), small sizes: a test of the mode.
scale() {
    local dir="$out/scale" ngpu gpus=() fake=() r
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
    [ "$ngpu" = 1 ] && gpus=(--gpus 0,0)
    if [ "${EGM_BENCH_FAKE:-0}" = 1 ]; then
        export LD_LIBRARY_PATH="$PWD/$build/fake-cuda:$LD_LIBRARY_PATH" EGM_FAKE_CUDA_FABRIC=0
        fake=(--fake-gpu)
        gpus=()
        echo "== scale: EGM_BENCH_FAKE=1: fake CUDA driver, small sizes: a test of this mode, no GPU figure"
    fi
    rm -rf "$dir"
    echo "== scale: $ngpu GPU(s) ${gpus[*]}, python $(python3 --version 2>&1 | cut -d" " -f2), torch $(python3 -c "import torch; print(torch.__version__)" 2>/dev/null || echo none), numactl $(command -v numactl || echo none), numastat $(command -v numastat || echo none)"
    # shellcheck disable=SC2086
    timeout -k 20 290 python3 bench/gpu/scale.py --egmstore "$build/bin/egmstore" \
        --pythonpath "$build/python" --out "$dir" "${gpus[@]}" "${fake[@]}" ${SCALE_ARGS:-}
    r=$?
    for f in scale.json topology.txt topology.json; do
        [ -f "$dir/$f" ] && cp "$dir/$f" "$out/$f"
    done
    [ -f "$dir/summary.txt" ] && cp "$dir/summary.txt" "$out/scale-summary.txt"
    tar czf "$out/scale-logs.tar.gz" -C "$out" scale && rm -rf "$dir"
    echo "== scale: rc=$r; $out/scale-summary.txt, $out/scale.json, $out/topology.txt, $out/scale-logs.tar.gz"
    return $r
}

case "${3:-all}" in
scale)
    scale
    exit $?
    ;;
bench)
    bench
    exit $?
    ;;
mooncake-gpu)
    mooncake_gpu
    exit $?
    ;;
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
