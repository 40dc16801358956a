#!/usr/bin/env bash
# Installs every Debian 12 package that egmstore's build, tests and demo need.
# Skips what is already installed; needs root (or sudo) only when something is missing.
# Then makes the Python virtual environment .venv (from Debian's /usr/bin/python3, with its
# system site packages) with python/requirements-test.txt, and tries
# python/requirements-mooncake.txt (only a warning if that fails: the differential test skips)
# and python/requirements-bench.txt (matplotlib for bench/report.py's plots; only a warning too).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
    build-essential cmake ninja-build pkg-config
    protobuf-c-compiler libprotobuf-c-dev
    libmicrohttpd-dev
    libcmocka-dev
    clang-format
    clang libclang-rt-14-dev # fuzz/: libFuzzer and the sanitizers' runtimes (make fuzz)
    python3-dev python3-venv
    libibverbs1
    redis-server redis-tools # bench/meta/run.sh measures Redis next to the master
    prometheus               # promtool: CI checks the master's /metrics with `promtool check metrics`
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

install_debian() {
    if [ ${#missing[@]} -eq 0 ]; then
        echo "install-deps: all ${#packages[@]} Debian packages present"
        return
    fi
    echo "install-deps: installing ${missing[*]}"
    if [ "$(id -u)" -eq 0 ]; then
        sudo=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        echo "install-deps: error: missing Debian packages: ${missing[*]}" >&2
        echo "install-deps: run this script as root (or with passwordless sudo), or install them:" >&2
        echo "    apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
    echo "install-deps: Debian packages done"
}

# .venv: pip installs run again only when a requirements file changed (a stamp holds their hash).
install_venv() {
    local venv=.venv req=python/requirements-test.txt mc=python/requirements-mooncake.txt
    local bench=python/requirements-bench.txt
    local stamp=$venv/.egm-requirements
    local want
    want=$(cat "$req" "$mc" "$bench" | sha256sum | cut -d' ' -f1)
    if [ ! -x "$venv/bin/python" ]; then
        echo "install-deps: creating $venv from /usr/bin/python3"
        /usr/bin/python3 -m venv --system-site-packages "$venv"
    fi
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        echo "install-deps: $venv up to date"
        return
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$mc"; then
        echo "install-deps: warning: $(grep -v '^#' "$mc" | head -1) did not install;" \
            "the differential test against Mooncake will be skipped" >&2
    fi
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$bench"; then
        echo "install-deps: warning: $(grep -v '^#' "$bench" | head -1) did not install;" \
            "bench/report.py will write its markdown without plots" >&2
    fi
    echo "$want" >"$stamp"
    echo "install-deps: $venv ready ($("$venv/bin/python" -m pytest --version 2>&1))"
}

install_debian
install_venv
