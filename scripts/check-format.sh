#!/usr/bin/env bash
# Fails when a C source or header differs from the repository's .clang-format.
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
exit $bad
