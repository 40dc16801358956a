#!/bin/sh
# Builds and runs the segment allocator benchmark against an existing build
# (for libegm_common.a, and libegm_alloc_tracking.a: it checks that it freed
# everything): bench/alloc/run.sh [build-dir [seed [steady-only]]] > result.json
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
out=$build/bin/egm-alloc-bench
mkdir -p "$build/bin"
${CC:-cc} -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes \
    -Wmissing-prototypes -Wformat=2 -Wvla -Werror \
    -I"$root" -I"$root/include" -I"$root/src" -I"$build/gen" \
    "$root/bench/alloc/alloc_bench.c" "$root/bench/alloc/firstfit.c" \
    "$root/src/master/allocator.c" "$build/libegm_common.a" \
    "$build/libegm_alloc_tracking.a" -lpthread -o "$out"
exec "$out" "$@"
