#!/usr/bin/env bash
# Fails when a C source or header differs from the repository's .clang-format, or when a file
# under src/<layer>/ includes a header of a layer it does not link to (an upward include).
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' | grep -v '^build')
bad=0
for f in $files; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "check-format: $f is not clang-formatted (run: clang-format -i $f)"
        bad=1
    fi
done
[ $bad -eq 0 ] && echo "check-format: $(echo "$files" | wc -w) files formatted"

# --- include edges -----------------------------------------------------------------------------
# The allowed graph is CMakeLists.txt's, not a copy: each `egm_layer(egm_<lib> <dir> deps...)`
# links <dir> to the layers it names, and the `egmstore` command (src/tools) links what
# `target_link_libraries(egmstore_cli ...)` names. A layer may include its own headers and those
# of every layer it reaches through these links. The Python extension sees the public headers only.
cmake_calls() { # each call of $1 in CMakeLists.txt: its arguments on one line (comments dropped)
    sed 's/#.*//' CMakeLists.txt | tr '\n' ' ' | grep -oE "(^|[^a-z_])$1\([^)]*\)" |
        sed -E "s/^.*$1\(//; s/\)$//; s/[[:space:]]+/ /g"
}
declare -A dir_of links
while read -r lib dir rest; do
    dir_of[$lib]=$dir
    links[$dir]=$rest
done < <(cmake_calls egm_layer
    cmake_calls target_link_libraries | sed -n 's/^ *egmstore_cli PRIVATE /egmstore_cli tools /p')
if [ -z "${links[common]+set}" ] || [ -z "${links[tools]+set}" ]; then
    echo "check-format: cannot read the layers from CMakeLists.txt's egm_layer calls"
    exit 1
fi
reach() { # the layers <dir> may include, itself first
    local todo=("$1") seen=" " d lib
    while [ ${#todo[@]} -gt 0 ]; do
        d=${todo[0]}
        todo=("${todo[@]:1}")
        [[ $seen == *" $d "* ]] && continue
        seen+="$d "
        for lib in ${links[$d]:-}; do
            if [ -n "${dir_of[$lib]:-}" ]; then todo+=("${dir_of[$lib]}"); fi
        done
    done
    echo "$seen"
}
edges_bad=0
nfiles=0
for f in $(git ls-files 'src/*.c' 'src/*.h' 'python/*.c' 'python/*.h'); do
    if [[ $f == python/* ]]; then
        who=python
        allowed=" "
        may="only the public <egmstore/...> headers"
    else
        who=${f#src/}
        who=${who%%/*}
        if [ -z "${links[$who]+set}" ]; then
            echo "check-format: $f: src/$who is not a layer of CMakeLists.txt (egm_layer)"
            edges_bad=1
            continue
        fi
        allowed=$(reach "$who")
        may="the layers it links to:${allowed% }"
    fi
    nfiles=$((nfiles + 1))
    while IFS=: read -r line inc; do
        case $inc in
        bench | tests | fuzz) ;; # nothing in the product includes the benchmarks or the tests
        *) [ -n "${links[$inc]+set}" ] || continue ;; # a generated, public or same-folder header
        esac
        if [[ $allowed != *" $inc "* ]]; then
            echo "check-format: $f:$line includes $inc/, an upward or sideways include;" \
                "$who may include $may (CMakeLists.txt)"
            edges_bad=1
        fi
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][a-z_]+/' "$f" |
        sed 's/^\([0-9]*\):.*include[[:space:]]*["<]\([a-z_]*\)\/.*/\1:\2/')
done
if [ $edges_bad -eq 0 ]; then
    echo "check-format: $nfiles files include only layers they link to"
else
    bad=1
fi
exit $bad
