#!/usr/bin/env bash
# bench/py/stage-mooncake-gpu.sh [--wheel WHL] [--cudart-wheel WHL] DEST: packs what
# `store_bench.py --system mooncake --memory gpu` needs of Mooncake Store for CUDA 13 (PyPI
# mooncake-transfer-engine-cuda13) into ONE archive, DEST/mooncake-cuda13.tar.xz, small enough
# to travel with the working tree to the GPU machine (whose wheel cannot be installed there:
# nothing outside it can be reached). bench/py/unpack-mooncake-gpu.sh unpacks it there.
#
# The archive (top folder mooncake-cuda13/) holds:
#   site/mooncake/              the package's Python files, _store*.so (the C++ Store binding)
#                               and mooncake_master; not the other binaries (mooncake_client,
#                               transfer_engine_bench, engine.so, _ep, libmooncake_pg*, ...)
#   site/mooncake_transfer_engine_cuda13.libs/
#                               the wheel's bundled libraries that _store*.so and mooncake_master
#                               load (the DT_NEEDED closure through their RPATH), one copy of
#                               each: a second file with the same build id (libetcd_wrapper,
#                               libasio) is a symbolic link to the first
#   site/*.dist-info/METADATA   so that importlib.metadata gives the version
#   cudart/libcudart.so.13      from PyPI nvidia-cuda-runtime 13.0.x: used only where the GPU
#                               machine's PyTorch brings no libcudart.so.13
#   syslibs/                    libraries from THIS machine that the binaries need outside the
#                               wheel (libibverbs, libmlx5, libnuma, libcurl, libgssapi_krb5 and
#                               what they load; never glibc, libstdc++, libgcc_s, libz): the
#                               unpack step uses only those the GPU machine lacks
# Shared objects are stripped of debug information (strip --strip-debug). libcuda.so.1 comes
# from the GPU machine's driver.
#
# Without --wheel the wheels are downloaded with pip (PyPI must be reachable):
#   mooncake-transfer-engine-cuda13==$MOONCAKE_VERSION (default 0.3.14), cp312 manylinux_2_28
#   nvidia-cuda-runtime==13.0.*
set -euo pipefail

MOONCAKE_VERSION=${MOONCAKE_VERSION:-0.3.14}
PYVER=${MOONCAKE_PYVER:-3.12}

usage() {
    cat <<EOF
Usage: bench/py/stage-mooncake-gpu.sh [--wheel WHL] [--cudart-wheel WHL] DEST

  DEST                folder for mooncake-cuda13.tar.xz (created; an old archive is replaced)
  --wheel WHL         the mooncake-transfer-engine-cuda13 wheel (default: pip download of
                      version \$MOONCAKE_VERSION=$MOONCAKE_VERSION for CPython \$MOONCAKE_PYVER=$PYVER)
  --cudart-wheel WHL  the nvidia-cuda-runtime 13 wheel (default: pip download of 13.0.*)
EOF
}

die() {
    echo "stage-mooncake-gpu.sh: error: $*" >&2
    exit 1
}
wheel="" cudart_wheel="" dest=""
while [ $# -gt 0 ]; do
    case $1 in
    --wheel | --cudart-wheel)
        [ $# -ge 2 ] || die "$1 needs a file"
        [ "$1" = --wheel ] && wheel=$(realpath "$2") || cudart_wheel=$(realpath "$2")
        shift 2
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    -*) die "unknown option \"$1\" (--help)" ;;
    *)
        [ -z "$dest" ] || die "one DEST only (--help)"
        dest=$1
        shift
        ;;
    esac
done
[ -n "$dest" ] || {
    usage >&2
    exit 2
}
for tool in readelf strip ldd xz tar python3; do
    command -v "$tool" >/dev/null || die "$tool not found"
done

work=$(mktemp -d /tmp/stage-mooncake-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
pip_download() { # dir spec platform...
    local dir=$1 spec=$2 plats=()
    shift 2
    for p in "$@"; do plats+=(--platform "$p"); done
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" \
        --implementation cp "${plats[@]}" -d "$dir" "$spec" >&2 || die "pip download $spec failed"
    ls "$dir"/*.whl
}
if [ -z "$wheel" ]; then
    wheel=$(pip_download "$work/dl" "mooncake-transfer-engine-cuda13==$MOONCAKE_VERSION" \
        manylinux_2_28_x86_64)
fi
if [ -z "$cudart_wheel" ]; then
    cudart_wheel=$(pip_download "$work/dl-cudart" "nvidia-cuda-runtime==13.0.*" \
        manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)
fi
[ -f "$wheel" ] || die "no wheel $wheel"
[ -f "$cudart_wheel" ] || die "no wheel $cudart_wheel"

unzip_to() { python3 -m zipfile -e "$1" "$2"; }
unzip_to "$wheel" "$work/w"
unzip_to "$cudart_wheel" "$work/c"
w=$work/w
libsdir=$(cd "$w" && ls -d mooncake_transfer_engine_cuda13.libs 2>/dev/null) ||
    die "$wheel has no mooncake_transfer_engine_cuda13.libs/ (not the cuda13 wheel?)"
store_so=$(cd "$w" && ls mooncake/_store.cpython-*.so 2>/dev/null | head -1)
[ -n "$store_so" ] || die "$wheel has no mooncake/_store*.so"
[ -f "$w/mooncake/mooncake_master" ] || die "$wheel has no mooncake/mooncake_master"

top=$work/out/mooncake-cuda13
site=$top/site
mkdir -p "$site/mooncake" "$site/$libsdir" "$top/cudart" "$top/syslibs"

# Python files of the package (no *_jit sources: they are for the EP/PG extensions)
(cd "$w" && find mooncake -name "*_jit" -prune -o \( -name "*.py" -o -name py.typed \) -print) |
    while read -r f; do
        mkdir -p "$site/$(dirname "$f")"
        cp "$w/$f" "$site/$f"
    done
distinfo=$(cd "$w" && ls -d mooncake_transfer_engine_cuda13-*.dist-info)
mkdir -p "$site/$distinfo"
cp "$w/$distinfo/METADATA" "$site/$distinfo/"

# The DT_NEEDED closure of _store*.so and mooncake_master, resolved in the wheel through each
# object's RPATH ($ORIGIN, $ORIGIN/../<libs>); anything else is external.
declare -A inwheel=() external=() buildid=()
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
queue=("$store_so" mooncake/mooncake_master)
while [ ${#queue[@]} -gt 0 ]; do
    f=${queue[0]}
    queue=("${queue[@]:1}")
    [ -n "${inwheel[$f]:-}" ] && continue
    inwheel[$f]=1
    for n in $(needed "$w/$f"); do
        if [ -f "$w/mooncake/$n" ]; then
            queue+=("mooncake/$n")
        elif [ -f "$w/$libsdir/$n" ]; then
            queue+=("$libsdir/$n")
        else
            external[$n]=1
        fi
    done
done
for f in "${!inwheel[@]}"; do
    id=$(readelf -n "$w/$f" 2>/dev/null | sed -n 's/.*Build ID: *//p')
    if [ -n "$id" ] && [ -n "${buildid[$id]:-}" ]; then
        # the same file under a second name: a link to the first copy
        first=${buildid[$id]}
        ln -s "$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], os.path.dirname(sys.argv[2])))' \
            "$site/$first" "$site/$f")" "$site/$f"
        echo "stage-mooncake-gpu.sh: $f is $first (build id $id): linked" >&2
        continue
    fi
    [ -n "$id" ] && buildid[$id]=$f
    cp "$w/$f" "$site/$f"
    chmod 755 "$site/$f" # the zip extraction keeps no mode bits
    strip --strip-debug "$site/$f" || die "strip $f failed"
done

# cudart fallback
cudart=$(cd "$work/c" && find . -name "libcudart.so.13" | head -1)
[ -n "$cudart" ] || die "$cudart_wheel has no libcudart.so.13"
cp "$work/c/$cudart" "$top/cudart/"

# External libraries from this machine (for a GPU machine that lacks them); the CUDA driver
# and runtime, glibc and the C++/compiler runtimes are never copied.
skip_lib() {
    case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | \
        libdl.so.* | librt.so.* | libutil.so.* | libresolv.so.* | libanl.so.* | libnsl.so.* | \
        libnss_*.so.* | libstdc++.so.* | libgcc_s.so.* | libz.so.* | libcuda.so.* | \
        libcudart.so.* | libnvidia-*) return 0 ;;
    esac
    return 1
}
declare -A sys=()
for n in "${!external[@]}"; do
    skip_lib "$n" && continue
    p=$(ldconfig -p | awk -v n="$n" '$1 == n && /x86-64/ {print $NF; exit}')
    [ -n "$p" ] || die "external library $n is not on this machine (needed by the wheel's binaries; apt-get install it, e.g. ibverbs-providers for libmlx5.so.1)"
    sys[$n]=$p
    while read -r soname arrow path _; do
        if [ "$arrow" = "=>" ] && [ "${path:0:1}" = / ] && ! skip_lib "$soname"; then
            sys[$soname]=$path
        fi
    done < <(ldd "$p")
done
for n in "${!sys[@]}"; do
    cp -L "${sys[$n]}" "$top/syslibs/$n"
    chmod u+w "$top/syslibs/$n"
    strip --strip-debug "$top/syslibs/$n" 2>/dev/null || true
done

cat >"$top/MANIFEST.txt" <<EOF
mooncake-cuda13 staged by bench/py/stage-mooncake-gpu.sh on $(date -u +%FT%TZ)
wheel: $(basename "$wheel")
cudart: $(basename "$cudart_wheel")
needed outside the wheel: $(printf '%s\n' "${!external[@]}" | sort | tr '\n' ' ')
syslibs (from $(. /etc/os-release && echo "$PRETTY_NAME")): $(printf '%s\n' "${!sys[@]}" | sort | tr '\n' ' ')
EOF

mkdir -p "$dest"
archive=$(realpath "$dest")/mooncake-cuda13.tar.xz
tar -C "$work/out" --owner=0 --group=0 --sort=name -cf - mooncake-cuda13 | xz -9e -T2 >"$archive.tmp"
mv "$archive.tmp" "$archive"
cat "$top/MANIFEST.txt" >&2
echo "stage-mooncake-gpu.sh: $archive: $(stat -c %s "$archive") bytes ($(du -sh "$top" | cut -f1) unpacked)" >&2
echo "stage-mooncake-gpu.sh: on the GPU machine: bench/py/unpack-mooncake-gpu.sh $archive" >&2
