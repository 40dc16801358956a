#!/usr/bin/env bash
# bench/meta/run.sh: the master's metadata round trips (`egmstore bench meta`) against Redis
# GET/SET (redis-benchmark) on the same machine, in one run, with the same key count, client
# counts and transport (issue 6). Builds nothing. Writes one JSON (machine, every raw figure,
# medians, ratios against the goals) and a markdown table; prints the table. See README.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)

usage() {
    cat <<EOF
Usage: bench/meta/run.sh [--egmstore PATH] [--clients 1,8,64] [--keys 100000] [--seconds 1]
                         [--rounds 3] [--batch 128] [--value-size 64] [--transport both|unix|tcp]
                         [--out PREFIX] [--note TEXT] [--redis-dir DIR | --redis-server PATH
                         --redis-benchmark PATH --redis-cli PATH]

  --egmstore PATH   the egmstore binary (default build/bin/egmstore); nothing is built
  --redis-server PATH, --redis-benchmark PATH, --redis-cli PATH
                    the Redis programs (default: from PATH). Each one given runs with its own
                    folder first in LD_LIBRARY_PATH, so a copy with its shared libraries next to
                    it works on a machine without the packages (bench/meta/stage-redis.sh)
  --redis-dir DIR   the three from DIR (DIR/redis-server, ...), as stage-redis.sh DIR leaves them
  --clients LIST    concurrent clients (egmstore client threads, redis-benchmark -c)
  --keys K          keys read at random: egmstore --keys, redis-benchmark -r (Redis is preloaded
                    with the same K keys so that GET hits)
  --seconds S       length of every measurement (egmstore --seconds; redis-benchmark -n is sized
                    from a short probe run to last about S)
  --rounds R        repeat everything R times, interleaved; the tables show medians
  --batch B         keys per egmstore batch call; Redis pipeline depth (-P) and MGET/MSET width
  --value-size N    Redis value bytes (redis-benchmark -d)
  --transport T     unix: egmstore's local socket (what the client library uses on one host) and
                    Redis's unix socket; tcp: both over 127.0.0.1; both (default): each in turn
  --out PREFIX      writes PREFIX.json and PREFIX.md
                    (default bench/results/meta-<host>-<yyyymmdd>)
  --note TEXT       a line about the conditions, kept in the JSON and the table
EOF
}

egm=$root/build/bin/egmstore
clients=1,8,64
keys=100000
seconds=1
rounds=3
batch=128
value_size=64
transport=both
out=""
note=""
redis_server=""
redis_benchmark=""
redis_cli=""
redis_dir=""
while [ $# -gt 0 ]; do
    case $1 in
    --egmstore) egm=$2 ;;
    --clients) clients=$2 ;;
    --keys) keys=$2 ;;
    --seconds) seconds=$2 ;;
    --rounds) rounds=$2 ;;
    --batch) batch=$2 ;;
    --value-size) value_size=$2 ;;
    --transport) transport=$2 ;;
    --out) out=$2 ;;
    --note) note=$2 ;;
    --redis-server) redis_server=$2 ;;
    --redis-benchmark) redis_benchmark=$2 ;;
    --redis-cli) redis_cli=$2 ;;
    --redis-dir) redis_dir=$2 ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "run.sh: unknown argument \"$1\" (--help lists them)" >&2
        exit 2
        ;;
    esac
    [ $# -ge 2 ] || {
        echo "run.sh: $1 needs a value" >&2
        exit 2
    }
    shift 2
done

die() {
    echo "run.sh: error: $*" >&2
    exit 1
}
is_uint() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ]; }
is_uint "$keys" 1 || die "--keys: \"$keys\", must be an integer >= 1"
is_uint "$rounds" 1 || die "--rounds: \"$rounds\", must be an integer >= 1"
is_uint "$batch" 1 || die "--batch: \"$batch\", must be an integer >= 1"
is_uint "$value_size" 1 || die "--value-size: \"$value_size\", must be an integer >= 1"
[[ $seconds =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--seconds: \"$seconds\", must be a number of seconds"
[[ $clients =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--clients: \"$clients\", must be a list such as 1,8,64"
case $transport in
both) transports="unix tcp" ;;
unix | tcp) transports=$transport ;;
*) die "--transport: \"$transport\", must be both, unix or tcp" ;;
esac
[ -x "$egm" ] || die "--egmstore: $egm is not an executable (build it first, or pass its path)"
command -v python3 >/dev/null || die "python3 not found"

# The Redis programs: given (--redis-dir, --redis-*) or from PATH. A given one runs through
# `env` with its folder first in LD_LIBRARY_PATH (the libraries stage-redis.sh copies next to
# it); `env` execs it, so that $! of a background start is the program's own pid.
# redis_tool ARRAY NAME GIVEN: sets ARRAY to the command that runs NAME.
redis_tool() {
    local -n cmd=$1
    local name=$2 given=$3 flag=--$2 dir
    if [ -z "$given" ] && [ -n "$redis_dir" ]; then
        given=$redis_dir/$name
        flag="--redis-dir $redis_dir:"
    fi
    if [ -z "$given" ]; then
        given=$(command -v "$name") ||
            die "$name not found in PATH (scripts/install-deps.sh, apt-get install redis-server" \
                "redis-tools, or --redis-dir DIR with a copy made by bench/meta/stage-redis.sh)"
        cmd=("$given")
    else
        if [ ! -f "$given" ] || [ ! -x "$given" ]; then
            die "$flag $given is not an executable"
        fi
        dir=$(cd "$(dirname "$given")" && pwd)
        cmd=(env "LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            "$dir/$(basename "$given")")
    fi
    # Here, not in the middle of a run, when a copied program misses a library.
    local out
    out=$("${cmd[@]}" --version 2>&1) ||
        die "$name does not run (a missing shared library? bench/meta/stage-redis.sh copies" \
            "them): $out"
}
redis_server_cmd=()
redis_benchmark_cmd=()
redis_cli_cmd=()
redis_tool redis_server_cmd redis-server "$redis_server"
redis_tool redis_benchmark_cmd redis-benchmark "$redis_benchmark"
redis_tool redis_cli_cmd redis-cli "$redis_cli"

if [ -z "$out" ]; then
    base=$root/bench/results/meta-$(hostname -s)-$(date -u +%Y%m%d)
    out=$base
    for i in 2 3 4 5 6 7 8 9; do
        [ -e "$out.json" ] || break
        out=$base-$i
    done
fi
mkdir -p "$(dirname "$out")"

# Progress on a terminal only.
say() { if [ -t 2 ]; then echo "run.sh: $*" >&2; fi; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/egm-bench-meta.XXXXXX")
redis_pid=""
keep_tmp=0
cleanup() {
    if [ -n "$redis_pid" ]; then
        kill "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    if [ $keep_tmp = 1 ]; then
        echo "run.sh: the measurements are kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
load_before=$(loadavg)
# The checkout when the run starts (others may commit meanwhile).
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no -- src include proto bench/meta \
    2>/dev/null | head -1)

# ---- Redis: a loopback port from bind(0) and a unix socket in its own folder, no persistence --
sock=$tmp/redis.sock
started=0
for _ in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "${redis_server_cmd[@]}" --bind 127.0.0.1 --port "$port" --unixsocket "$sock" --unixsocketperm 700 \
        --save '' --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" --daemonize no \
        --maxclients 1000 &
    redis_pid=$!
    for _ in $(seq 100); do
        if ! kill -0 "$redis_pid" 2>/dev/null; then break; fi
        if [ "$("${redis_cli_cmd[@]}" -s "$sock" ping 2>/dev/null)" = PONG ]; then
            started=1
            break
        fi
        sleep 0.1
    done
    [ $started = 1 ] && break
    # The port may have been taken between bind(0) and redis-server's bind: try another.
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
done
[ $started = 1 ] || {
    cat "$tmp/redis.log" >&2 || true
    die "redis-server did not start"
}
redis_version=$("${redis_server_cmd[@]}" --version)
say "redis-server pid $redis_pid on 127.0.0.1:$port and $sock"

# Same keys as redis-benchmark's -r expands (key:%012d), so that GET finds a value.
python3 - "$keys" "$value_size" <<'EOF' | "${redis_cli_cmd[@]}" -s "$sock" --pipe >"$tmp/preload.log"
import sys
keys, size = int(sys.argv[1]), int(sys.argv[2])
value = b"v" * size
out = sys.stdout.buffer
for i in range(keys):
    k = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, size, value))
EOF
dbsize=$("${redis_cli_cmd[@]}" -s "$sock" dbsize)
[ "$dbsize" = "$keys" ] || die "Redis preload: $dbsize keys, expected $keys"

# ---- measurements -------------------------------------------------------------------------
value=$(printf 'v%.0s' $(seq "$value_size"))
mget=(MGET)
mset=(MSET)
for _ in $(seq "$batch"); do
    mget+=("key:__rand_int__")
    mset+=("key:__rand_int__" "$value")
done

# One redis-benchmark measurement: a short probe sizes -n to last about SECONDS.
# redis_run TR ROUND NAME CLIENTS THREADS PIPELINE KEYS_PER_REQUEST SECONDS [COMMAND...]
# THREADS 0 = redis-benchmark's default: one event loop for all connections.
redis_run() {
    local tr=$1 round=$2 name=$3 c=$4 threads=$5 pipe=$6 per=$7 secs=$8
    shift 8
    local conn=(-s "$sock")
    [ "$tr" = tcp ] && conn=(-h 127.0.0.1 -p "$port")
    local targs=()
    [ "$threads" -gt 0 ] && targs=(--threads "$threads")
    local test=()
    [ $# -eq 0 ] && test=(-t "${name,,}")
    local n=$((c * pipe * 20))
    [ "$n" -lt 2000 ] && n=2000
    local line rps
    line=$("${redis_benchmark_cmd[@]}" "${conn[@]}" -c "$c" "${targs[@]}" -P "$pipe" -r "$keys" \
        -d "$value_size" -n "$n" --csv "${test[@]}" "$@" | tail -1)
    rps=$(echo "$line" | awk -F'","' '{print $2}')
    n=$(python3 -c "import math,sys; print(max($n, int(math.ceil(float(sys.argv[1]) * $secs))))" "$rps")
    line=$("${redis_benchmark_cmd[@]}" "${conn[@]}" -c "$c" "${targs[@]}" -P "$pipe" -r "$keys" \
        -d "$value_size" -n "$n" --csv "${test[@]}" "$@" | tail -1)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tr" "$round" "$name" "$c" "$threads" \
        "$pipe" "$per" "$n" "$line" >>"$tmp/redis.tsv"
}

# redis-benchmark's default single event loop for every measurement that is compared: with
# --threads it ends a run only on its 250 ms throughput timer (showThroughput), so the elapsed
# time is rounded up to a multiple of 250 ms and the rate reads low, by up to 25% in a 1 s run.
redis_level() {
    local tr=$1 round=$2 c=$3
    redis_run "$tr" "$round" GET "$c" 0 1 1 "$seconds"
    redis_run "$tr" "$round" SET "$c" 0 1 1 "$seconds"
    # Batch analogues: pipelines of B single-key commands, and one command of B keys.
    redis_run "$tr" "$round" GET "$c" 0 "$batch" 1 "$seconds"
    redis_run "$tr" "$round" SET "$c" 0 "$batch" 1 "$seconds"
    redis_run "$tr" "$round" MGET "$c" 0 1 "$batch" "$seconds" "${mget[@]}"
    redis_run "$tr" "$round" MSET "$c" 0 1 "$batch" "$seconds" "${mset[@]}"
    # Reference: one thread per connection, as egmstore's bench has, run for at least 5 s so
    # that the 250 ms rounding costs at most 5%.
    if [ "$c" -gt 1 ]; then
        redis_run "$tr" "$round" GET "$c" "$c" 1 1 \
            "$(python3 -c "import sys; print(max(5.0, float(sys.argv[1])))" "$seconds")"
    fi
    # SET and MSET overwrite keys of the same keyspace: DBSIZE stays K.
}

egm_level() {
    local tr=$1 round=$2 c=$3
    local f=$tmp/egm-$tr-$round-$c
    local targ=auto
    [ "$tr" = tcp ] && targ=tcp
    if ! "$egm" bench meta --clients "$c" --seconds "$seconds" --keys "$keys" --batch "$batch" \
        --transport "$targ" --http-port -1 --out "$f.json" >"$f.out" 2>"$f.err"; then
        cat "$f.err" >&2
        die "egmstore bench meta failed ($tr, $c clients)"
    fi
    python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["config"]["transport"]
sys.exit(0 if t == sys.argv[2] else "egmstore used the %s transport, not %s" % (t, sys.argv[2]))' \
        "$f.json" "$tr"
}

IFS=, read -r -a levels <<<"$clients"
: >"$tmp/redis.tsv"
t_start=$(date +%s)
for round in $(seq "$rounds"); do
    for tr in $transports; do
        for c in "${levels[@]}"; do
            say "round $round/$rounds, $tr, $c clients"
            # Alternate who goes first, so that drift in the machine's load favours neither.
            if [ $((round % 2)) = 1 ]; then
                egm_level "$tr" "$round" "$c"
                redis_level "$tr" "$round" "$c"
            else
                redis_level "$tr" "$round" "$c"
                egm_level "$tr" "$round" "$c"
            fi
        done
    done
done
say "measured in $(($(date +%s) - t_start)) s"
load_after=$(loadavg)

keep_tmp=1 # until they are combined
python3 "$root/bench/meta/combine.py" --tmp "$tmp" --out "$out" \
    --egmstore "$egm" --commit "$commit" --dirty "${dirty:+1}" --redis-version "$redis_version" \
    --redis-benchmark-version "$("${redis_benchmark_cmd[@]}" --version)" --load-before "$load_before" \
    --load-after "$load_after" --note "$note" --clients "$clients" --keys "$keys" \
    --seconds "$seconds" --rounds "$rounds" --batch "$batch" --value-size "$value_size" \
    --transports "$transports"
keep_tmp=0
echo "run.sh: wrote $out.json and $out.md" >&2
