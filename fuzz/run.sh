#!/usr/bin/env bash
# Fuzzes every libFuzzer target of fuzz/ for N seconds (default 20) from its committed corpus
# (fuzz/corpus/<target>) and regression inputs (fuzz/regressions/<target>), one target after
# the other; fails if any target crashes, leaks, hangs or breaks one of its checks.
#   fuzz/run.sh [seconds-per-target] [target ...]
# Builds build-fuzz first when needed (clang, -DEGM_FUZZ=ON; EGM_FUZZ_BUILD names another dir).
# New inputs go to <build>/fuzz-work/<target>, kept between runs (the committed corpus is not
# touched); a failing input is saved as <build>/fuzz-crashes/<target>-crash-<sha1> (copy it to
# fuzz/regressions/<target>/ with the fix). Prints each target's executions (libFuzzer's final
# stats) and the total.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-20}
shift || true
build=${EGM_FUZZ_BUILD:-build-fuzz}
jobs=${JOBS:-$(nproc)}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
    echo "usage: fuzz/run.sh [seconds-per-target] [target ...]" >&2
    exit 2
fi

if [ ! -f "$build/build.ninja" ] || ! grep -q '^EGM_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "fuzz: configuring $build (clang, EGM_FUZZ=ON)"
    CC=${CC_FUZZ:-clang} cmake -S . -B "$build" -G Ninja -DEGM_FUZZ=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j "$jobs" --target egm_fuzz_targets

# The targets: fuzz/CMakeLists.txt's list (written at configure time), or those named.
if [ $# -gt 0 ]; then
    targets=("$@")
else
    read -r -a targets <"$build/fuzz/targets.txt"
fi
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz: no targets found in $build/fuzz/targets.txt: nothing would be fuzzed" >&2
    exit 1
fi

work=$build/fuzz-work
crashes=$build/fuzz-crashes
mkdir -p "$work" "$crashes"
total=0
failed=()
for t in "${targets[@]}"; do
    bin=$build/fuzz/fuzz_$t
    if [ ! -x "$bin" ]; then
        echo "fuzz: no target $t ($bin)" >&2
        failed+=("$t")
        continue
    fi
    mkdir -p "$work/$t"
    log=$work/$t.log
    rc=0
    "$bin" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$crashes/$t-" \
        "$work/$t" "fuzz/corpus/$t" "fuzz/regressions/$t" >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\).*/cov \1, features \2, corpus \3/p')
    total=$((total + ${execs:-0}))
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        echo "fuzz: $t: FAILED (exit $rc) after ${execs:-?} executions; the report:"
        grep -E 'ERROR|SUMMARY|fuzz: check failed|Test unit written|^    #[0-9]' "$log" | head -30
        echo "fuzz: whole log: $log"
    else
        echo "fuzz: $t: ${execs:-0} executions in ${secs} s (${rate:-0}/s), ${cov:-no stats}"
    fi
done
echo "fuzz: ${#targets[@]} targets, $total executions, ${#failed[@]} failed${failed:+: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
