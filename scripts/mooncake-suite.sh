#!/usr/bin/env bash
# Mooncake's own Python store tests (mooncake-wheel/tests/test_distributed_object_store.py and
# test_replicated_distributed_object_store.py), unmodified, against egmstore through the
# mooncake.store stand-in; `make test-mooncake-suite` (docs/mooncake-compat.md). Opt-in: the
# tests come from a Mooncake checkout at test time, never from this repository.
#
#   scripts/mooncake-suite.sh BUILD [VENV]
#     BUILD            a configured build folder (its bin/egmstore and python/)
#     VENV             the suite's venv (default .venv-mcsuite): pytest, no Mooncake
#   MOONCAKE_SRC       a Mooncake checkout (a work tree) or a git directory (bare or .git);
#                      unset: `git clone --depth 1` of MOONCAKE_REPO into BUILD/mooncake-suite
#   MOONCAKE_REPO      default https://github.com/kvcache-ai/Mooncake
#   MOONCAKE_REF       the commit of a git directory to read the tests from (default HEAD)
#   SUITE_AGAINST      egmstore (default), or mooncake: the same run against the real Mooncake
#                      (mooncake_master and the wheel of python/requirements-mooncake.txt in
#                      MOONCAKE_VENV, default .venv), for the baseline
#   PYTEST_ARGS        more pytest arguments (e.g. "-k get_hostname")
#
# It starts what the suite expects, as Mooncake's CI (scripts/run_tests.sh there) does: a
# master with a 500 ms read lease (DEFAULT_KV_LEASE_TTL=500), on a free port given to the
# suite in MASTER_SERVER; no storage process: the suite's stores contribute their own
# segments (3200 MB, 1600 MB), and its test_client_tear_down expects what a store wrote to be
# gone once that store closed. Exit status: pytest's; 2 when the tests cannot be fetched or
# something the run needs is missing (never a silent skip).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/mooncake-suite.sh BUILD [VENV]}
build=$(cd "$build" && pwd)
venv=${2:-.venv-mcsuite}
against=${SUITE_AGAINST:-egmstore}
repo_url=${MOONCAKE_REPO:-https://github.com/kvcache-ai/Mooncake}
ref=${MOONCAKE_REF:-HEAD}
files=(conftest.py test_distributed_object_store.py test_replicated_distributed_object_store.py)
sub=mooncake-wheel/tests

die() { echo "mooncake-suite: error: $*" >&2; exit 2; }

work="$build/mooncake-suite"
rm -rf "$work/tests" "$work/logs"
mkdir -p "$work/tests/$sub" "$work/logs"
tests="$work/tests/$sub"

# ---- the tests, from MOONCAKE_SRC or a fresh clone ----------------------------------------
src=${MOONCAKE_SRC:-}
if [ -z "$src" ]; then
    src="$work/clone"
    rm -rf "$src"
    echo "== mooncake-suite: git clone --depth 1 $repo_url (MOONCAKE_SRC unset)"
    git clone -q --depth 1 "$repo_url" "$src" ||
        die "cannot fetch Mooncake's tests: 'git clone --depth 1 $repo_url' failed; set" \
            "MOONCAKE_SRC to a Mooncake checkout or git directory (or MOONCAKE_REPO to a mirror)"
fi
[ -e "$src" ] || die "MOONCAKE_SRC=$src does not exist"
if [ -d "$src/$sub" ]; then  # a work tree: the files as they are there
    for f in "${files[@]}"; do
        [ -f "$src/$sub/$f" ] || die "$src/$sub/$f is missing: not a Mooncake checkout?"
        cp "$src/$sub/$f" "$tests/$f"
    done
    commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "not a git work tree")
elif git --git-dir="$src" rev-parse --verify -q "$ref^{commit}" >/dev/null 2>&1; then
    for f in "${files[@]}"; do
        git --git-dir="$src" show "$ref:$sub/$f" > "$tests/$f" 2>/dev/null ||
            die "$src has no $sub/$f at $ref: not Mooncake's repository?"
    done
    commit=$(git --git-dir="$src" rev-parse "$ref^{commit}")
else
    die "MOONCAKE_SRC=$src is neither a checkout holding $sub/ nor a git directory with $ref"
fi
echo "== mooncake-suite: Mooncake's $sub from $src at $commit, against $against"

# ---- the Python that runs them ------------------------------------------------------------
if [ "$against" = egmstore ]; then
    req=tests/mooncake_suite/requirements.txt
    want=$(sha256sum "$req" | cut -c1-16)
    stamp="$venv/.egm-mcsuite-stamp"
    if ! { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; }; then
        echo "== mooncake-suite: making the venv $venv (pytest from PyPI)"
        rm -f "$stamp"
        [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps -r "$req" ||
            die "pip could not install $req into $venv"
        echo "$want" > "$stamp"
    fi
    python="$venv/bin/python"
    purelib=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp "$build/python/egmstore_mooncake.pth" "$purelib/"
    export PYTHONPATH="$build/python" EGMSTORE_AS_MOONCAKE=1
    "$python" -c '
import mooncake.store, egmstore.mooncake
assert mooncake.store.MooncakeDistributedStore is egmstore.mooncake.MooncakeDistributedStore
' || die "mooncake.store in $venv is not egmstore's stand-in (is the real Mooncake installed there?)"
elif [ "$against" = mooncake ]; then
    mvenv=${MOONCAKE_VENV:-.venv}
    python="$mvenv/bin/python"
    [ -x "$mvenv/bin/mooncake_master" ] && [ -x "$mvenv/bin/mooncake_http_metadata_server" ] ||
        die "no mooncake_master in $mvenv/bin: install python/requirements-mooncake.txt there"
    unset EGMSTORE_AS_MOONCAKE
else
    die "SUITE_AGAINST must be egmstore or mooncake, not '$against'"
fi

python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")  # the suite runs elsewhere

# ---- the master (and, for Mooncake, its metadata server), stopped on exit ------------------
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
         for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; }
trap stop EXIT
wait_listen() { # PORT PID NAME: bounded (20 s)
    for _ in $(seq 200); do
        kill -0 "$2" 2>/dev/null || die "$3 exited; log in $work/logs"
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    die "$3 did not listen on port $1 within 20 s; log in $work/logs"
}
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

lease_ms=500  # as Mooncake's CI; the suite reads it from DEFAULT_KV_LEASE_TTL
if [ "$against" = egmstore ]; then
    fifo="$work/logs/master.out"
    "$build/bin/egmstore" master --port 0 --http-port 0 --listen-address 127.0.0.1 \
        --default-kv-lease-ttl "$lease_ms" > "$fifo" 2> "$work/logs/master.log" &
    pids+=($!)
    port=
    for _ in $(seq 200); do
        port=$(sed -n 's/^egmstore master listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$fifo")
        [ -n "$port" ] && break
        kill -0 "${pids[0]}" 2>/dev/null || die "egmstore master exited; $work/logs/master.log"
        sleep 0.1
    done
    [ -n "$port" ] || die "egmstore master did not start within 20 s; $work/logs/master.log"
    metadata=http://127.0.0.1:8080/metadata  # Mooncake CI's value; egmstore reads none
else
    port=$(free_port); meta_port=$(free_port); metrics_port=$(free_port)
    "$mvenv/bin/mooncake_http_metadata_server" --port "$meta_port" > "$work/logs/metadata.log" 2>&1 &
    pids+=($!)
    wait_listen "$meta_port" "${pids[-1]}" mooncake_http_metadata_server
    "$mvenv/bin/mooncake_master" --default_kv_lease_ttl="$lease_ms" --rpc_port="$port" \
        --metrics_port="$metrics_port" > "$work/logs/master.log" 2>&1 &
    pids+=($!)
    wait_listen "$port" "${pids[-1]}" mooncake_master
    metadata=http://127.0.0.1:$meta_port/metadata
fi
echo "== mooncake-suite: master on 127.0.0.1:$port (read lease $lease_ms ms); logs in $work/logs"

# ---- the suite ---------------------------------------------------------------------------
cd "$tests"
set +e
MC_METADATA_SERVER=$metadata DEFAULT_KV_LEASE_TTL=$lease_ms MASTER_SERVER=127.0.0.1:$port \
    timeout 1200 "$python" -m pytest -v -rfE -p no:cacheprovider --rootdir "$work/tests" \
    --junitxml="$work/junit-$against.xml" ${PYTEST_ARGS:-} "${files[@]:1}"
rc=$?
set -e
echo "== mooncake-suite: against $against: pytest exit $rc; JUnit in $work/junit-$against.xml"
exit $rc
