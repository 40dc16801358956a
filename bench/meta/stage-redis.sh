#!/usr/bin/env bash
# bench/meta/stage-redis.sh DIR: copies redis-server, redis-benchmark and redis-cli (from PATH,
# or the folder given with --from) into DIR with the shared libraries they load, so that
# `bench/meta/run.sh --redis-dir DIR` runs them on a machine without the packages (the GPU
# machine): run.sh puts DIR first in their LD_LIBRARY_PATH.
#
# Copied: every library ldd resolves except glibc's own (libc, libm, libpthread, libdl, librt,
# ld-linux, ...), which must come from the machine that runs them and cannot be mixed with
# another glibc. Libraries a base Ubuntu/Debian image also has (libstdc++, libsystemd, ...) are
# copied too, so the folder also works on a minimal image; the copies serve only these three
# programs. The target's glibc must be at least the newest version the copies need (printed).
set -euo pipefail

usage() {
    cat <<EOF
Usage: bench/meta/stage-redis.sh [--from DIR] DEST

  DEST        folder to fill (created; existing files of the same names are replaced)
  --from DIR  take the programs from DIR instead of PATH
EOF
}

from=""
dest=""
while [ $# -gt 0 ]; do
    case $1 in
    --from)
        [ $# -ge 2 ] || {
            echo "stage-redis.sh: --from needs a folder" >&2
            exit 2
        }
        from=$2
        shift 2
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    -*)
        echo "stage-redis.sh: unknown option \"$1\" (--help)" >&2
        exit 2
        ;;
    *)
        [ -z "$dest" ] || {
            echo "stage-redis.sh: one DEST only (--help)" >&2
            exit 2
        }
        dest=$1
        shift
        ;;
    esac
done
[ -n "$dest" ] || {
    usage >&2
    exit 2
}
die() {
    echo "stage-redis.sh: error: $*" >&2
    exit 1
}
command -v ldd >/dev/null || die "ldd not found"

# glibc and the loader: never copied.
is_glibc() {
    case $1 in
    linux-vdso.so.* | linux-gate.so.* | ld-linux*.so.* | ld64.so.* | libc.so.* | libm.so.* | \
        libmvec.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libutil.so.* | \
        libresolv.so.* | libanl.so.* | libnsl.so.* | libBrokenLocale.so.* | libthread_db.so.* | \
        libc_malloc_debug.so.* | libnss_*.so.*) return 0 ;;
    esac
    return 1
}

declare -A srcs=() libs=()
for name in redis-server redis-benchmark redis-cli; do
    if [ -n "$from" ]; then
        src=$from/$name
    else
        src=$(command -v "$name") ||
            die "$name not found in PATH (apt-get install redis-server redis-tools, or --from DIR)"
    fi
    if [ ! -f "$src" ] || [ ! -x "$src" ]; then
        die "$src is not an executable"
    fi
    srcs[$name]=$src
done
mkdir -p "$dest"
for name in redis-server redis-benchmark redis-cli; do
    src=${srcs[$name]}
    # -L: Debian's redis-server is a link to redis-check-rdb; the copy keeps the name it is
    # run by, which decides what it does.
    cp -L -f "$src" "$dest/$name"
    out=$(ldd "$src") || die "ldd $src failed: $out"
    if grep -q "not found" <<<"$out"; then
        die "$src misses libraries here: $(grep "not found" <<<"$out" | tr -s ' \t\n' ' ')"
    fi
    # "libfoo.so.1 => /lib/.../libfoo.so.1 (0x...)": the name it is loaded by, and the file.
    while read -r soname arrow path _; do
        if [ "$arrow" = "=>" ] && [ "${path:0:1}" = / ] && ! is_glibc "$soname"; then
            libs[$soname]=$path
        fi
    done <<<"$out"
done

for soname in "${!libs[@]}"; do
    cp -L -f "${libs[$soname]}" "$dest/$soname"
done

# The newest glibc symbol version any copied file needs (objdump is in binutils).
need_glibc=""
if command -v objdump >/dev/null; then
    need_glibc=$(for f in redis-server redis-benchmark redis-cli "${!libs[@]}"; do
        objdump -T "$dest/$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' || true
    done | sort -V -u | tail -1)
fi

echo "stage-redis.sh: copied redis-server, redis-benchmark, redis-cli and ${#libs[@]} libraries" \
    "to $dest: $(printf '%s\n' "${!libs[@]}" | sort | tr '\n' ' ')" >&2
[ -z "$need_glibc" ] || echo "stage-redis.sh: the machine that runs them needs glibc >=" \
    "${need_glibc#GLIBC_} (ldd --version)" >&2
echo "stage-redis.sh: use: bench/meta/run.sh --redis-dir $dest ..." >&2
