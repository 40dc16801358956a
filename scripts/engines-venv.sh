#!/bin/sh
# The venv of `make test-engines` (docs/testing.md): created on first use, reused while
# tests/engines/requirements-*.txt are unchanged (a stamp holds their hash, written only after
# a complete install). About 10 GB (torch's PyPI wheel brings the CUDA libraries).
#   scripts/engines-venv.sh [VENV]     (default .venv-engines; EGM_ENGINES_PYTHON picks the
#                                       interpreter, default /usr/bin/python3: Python 3.11)
set -eu
cd "$(dirname "$0")/.."
venv=${1:-.venv-engines}
python=${EGM_ENGINES_PYTHON:-/usr/bin/python3}
lock=tests/engines/requirements-lock.txt
engines=tests/engines/requirements-engines.txt
stamp="$venv/.egm-engines-stamp"
want=$(cat "$lock" "$engines" | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
    echo "== engines venv $venv: up to date (reused)"
    exit 0
fi
echo "== engines venv $venv: installing (torch and the engines from PyPI: minutes, about 10 GB)"
rm -f "$stamp"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps -r "$lock"
"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps -r "$engines"
echo "$want" > "$stamp"
echo "== engines venv $venv: ready"
