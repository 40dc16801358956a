#!/usr/bin/env bash
# bench/py/unpack-mooncake-gpu.sh ARCHIVE [DIR]: the GPU machine's half of
# bench/py/stage-mooncake-gpu.sh. Extracts ARCHIVE (mooncake-cuda13.tar.xz) into DIR (default
# /tmp/mooncake-cuda13-run; an old one is replaced), finds a libcudart.so.13 (PyTorch's
# nvidia/*/lib first, else the archive's cudart/), links into DIR/extra/ only those of the
# archive's syslibs/ that this machine lacks, writes DIR/env.sh and checks that
# `import mooncake.store` and mooncake_master load with it. Prints the environment:
#   PYTHONPATH=...  LD_LIBRARY_PATH=...  MOONCAKE_MASTER=...  MOONCAKE_PACKAGE=...
# Use: `. DIR/env.sh` (or the printed lines), then store_bench.py --system mooncake --memory gpu.
# Exit 0 when it loads, 1 otherwise (the reason on stderr).
set -euo pipefail

die() {
    echo "unpack-mooncake-gpu.sh: error: $*" >&2
    exit 1
}
[ $# -ge 1 ] && [ $# -le 2 ] && [ "${1:0:1}" != - ] || {
    echo "Usage: bench/py/unpack-mooncake-gpu.sh ARCHIVE [DIR]" >&2
    exit 2
}
archive=$1
dir=${2:-/tmp/mooncake-cuda13-run}
py=${PYTHON:-python3}
[ -f "$archive" ] || die "no archive $archive (make it with bench/py/stage-mooncake-gpu.sh)"
rm -rf "$dir"
mkdir -p "$dir"
if command -v xz >/dev/null; then
    tar -C "$dir" -xJf "$archive" || die "cannot extract $archive"
else # no xz program: Python's lzma
    "$py" -c 'import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
        "$archive" "$dir" || die "cannot extract $archive (no xz; Python's lzma failed)"
fi
dir=$(cd "$dir" && pwd)
top=$dir/mooncake-cuda13
site=$top/site
master=$site/mooncake/mooncake_master
store_so=$(ls "$site"/mooncake/_store.cpython-*.so 2>/dev/null | head -1)
[ -x "$master" ] && [ -n "$store_so" ] || die "$archive lacks mooncake_master or _store*.so"

# The extension's Python version must be this interpreter's.
tag=$(basename "$store_so" | sed -n 's/_store\.cpython-\([0-9]*\)-.*/\1/p')
have=$("$py" -c 'import sys; print("%d%d" % sys.version_info[:2])')
[ "$tag" = "$have" ] || die "the archive is for CPython ${tag:0:1}.${tag:1} but $py is ${have:0:1}.${have:1} (stage it with MOONCAKE_PYVER=${have:0:1}.${have:1})"

# libcudart.so.13: PyTorch's CUDA libraries (site-packages/nvidia/*/lib), else the archive's.
cudart_dir=$("$py" - <<'EOF' 2>/dev/null || true
import glob, importlib.util, os
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations or []) if spec else []:
    for d in sorted(glob.glob(os.path.join(base, "*", "lib"))):
        if os.path.exists(os.path.join(d, "libcudart.so.13")):
            print(d)
            raise SystemExit(0)
EOF
)
cudart_from="PyTorch's CUDA libraries"
if [ -z "$cudart_dir" ]; then
    cudart_dir=$top/cudart
    cudart_from="the archive (nvidia-cuda-runtime 13.0; no libcudart.so.13 beside PyTorch)"
fi
ld=$cudart_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# Libraries this machine lacks: linked from syslibs/ into extra/, until ldd finds everything
# (syslibs of the archive's own dependencies included).
mkdir -p "$dir/extra"
for _ in 1 2 3 4 5 6; do
    missing=$(for f in "$store_so" "$master" "$dir"/extra/*; do
        if [ -e "$f" ]; then
            LD_LIBRARY_PATH=$dir/extra:$ld ldd "$f" 2>/dev/null | awk '/not found/ {print $1}'
        fi
    done | sort -u)
    added=0
    for n in $missing; do
        if [ -f "$top/syslibs/$n" ] && [ ! -e "$dir/extra/$n" ]; then
            ln -s "$top/syslibs/$n" "$dir/extra/$n"
            added=1
        fi
    done
    [ $added = 1 ] || break
done
extra=$(ls "$dir/extra")
if [ -n "$extra" ]; then ld=$dir/extra:$ld; fi
still=$(for n in $missing; do if [ ! -e "$dir/extra/$n" ]; then echo "$n"; fi; done | tr '\n' ' ')

cat >"$dir/env.sh" <<EOF
# Mooncake Store for CUDA 13 unpacked by bench/py/unpack-mooncake-gpu.sh from $archive
export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH}
export LD_LIBRARY_PATH=$ld
export MOONCAKE_MASTER=$master
export MOONCAKE_PACKAGE=mooncake-transfer-engine-cuda13
EOF
echo "unpack-mooncake-gpu.sh: $(head -2 "$top/MANIFEST.txt" | tail -1); libcudart.so.13 from $cudart_from" >&2
echo "unpack-mooncake-gpu.sh: from the archive's syslibs: ${extra:-none}" | tr '\n' ' ' >&2
echo >&2
[ -z "${still// /}" ] || echo "unpack-mooncake-gpu.sh: still missing: $still" >&2

# Does it load? (libcuda.so.1 is the driver's: without it nothing loads)
if ! out=$(. "$dir/env.sh" && "$py" -c 'import mooncake.store as s; print(s.MooncakeDistributedStore.__name__)' 2>&1); then
    echo "$out" | tail -5 >&2
    die "import mooncake.store fails with $dir/env.sh"
fi
if (. "$dir/env.sh" && ldd "$master" | grep -q "not found"); then
    die "mooncake_master misses libraries: $(. "$dir/env.sh" && ldd "$master" | grep "not found" | tr -s ' \t\n' ' ')"
fi
sed -n 's/^export //p' "$dir/env.sh" | sed 's/\${PYTHONPATH:+:\$PYTHONPATH}//'
