#!/usr/bin/env bash
# Installs every Debian 12 package that egmstore's build, tests and demo need.
# Skips what is already installed; needs root (or sudo) only when something is missing.
# Then makes the Python virtual environment .venv (from Debian's /usr/bin/python3, with its
# system site packages) with python/requirements-test.txt (pytest, numpy: an error if it fails),
# and tries python/requirements-mooncake.txt (Mooncake's wheel: without it the differential test
# in tests/python FAILS, saying so) and python/requirements-bench.txt (matplotlib for
# bench/report.py's plots). Those two only warn here, so that the build and the demo go on, and
# a failed one is tried again on the next run (only a file that installed gets its stamp).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
    build-essential cmake ninja-build pkg-config # gcc and g++ (integration/cmake_install builds C++)
    protobuf-c-compiler libprotobuf-c-dev
    libmicrohttpd-dev
    libcmocka-dev
    clang-format
    clang libclang-rt-14-dev # fuzz/: libFuzzer and the sanitizers' runtimes (make fuzz)
    python3-dev python3-venv
    libibverbs1
    redis-server redis-tools # bench/meta/run.sh measures Redis next to the master
    prometheus               # promtool: CI checks the master's /metrics with `promtool check metrics`
    etcd-server              # master HA: the election tests start a real etcd (src/ha, docs/ha.md)
    iproute2                 # test_ha_partition: `ip` links its simulated hosts (tests/support/netns.c)
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

# .venv: a requirements file is installed again only when it changed, or when its last install
# failed: .venv/.egm-stamp-<name> holds the hash of the file that installed.
venv=.venv

pip_install() { # FILE: 0 when it is installed (now or before)
    local req=$1 stamp want
    stamp=$venv/.egm-stamp-$(basename "$req" .txt)
    want=$(sha256sum "$req" | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    rm -f "$stamp"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" || return 1
    echo "$want" >"$stamp"
    echo "install-deps: $req installed into $venv"
}

install_venv() {
    local test=python/requirements-test.txt mc=python/requirements-mooncake.txt
    local bench=python/requirements-bench.txt
    if [ ! -x "$venv/bin/python" ]; then
        echo "install-deps: creating $venv from /usr/bin/python3"
        /usr/bin/python3 -m venv --system-site-packages "$venv"
    fi
    rm -f "$venv/.egm-requirements" # the one stamp of earlier versions, written even on failure
    if ! pip_install "$test"; then
        echo "install-deps: error: $test did not install into $venv (see pip's message above);" \
            "the tests need it" >&2
        exit 1
    fi
    if ! pip_install "$mc"; then
        echo "install-deps: warning: $(grep -v '^#' "$mc" | head -1) (Mooncake's wheel) did not" \
            "install into $venv: the differential test against Mooncake (python/pytest) will FAIL" \
            "until it does; the next run of this script tries again" >&2
    fi
    if ! pip_install "$bench"; then
        echo "install-deps: warning: $(grep -v '^#' "$bench" | head -1) did not install into $venv:" \
            "bench/report.py writes its markdown without plots; the next run of this script tries" \
            "again" >&2
    fi
    echo "install-deps: $venv ready ($("$venv/bin/python" -m pytest --version 2>&1))"
}

install_debian
install_venv
