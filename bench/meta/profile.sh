#!/usr/bin/env bash
# bench/meta/profile.sh: where a single-key metadata round trip spends its CPU, next to Redis GET
# under the same load (issue 6). For each system it measures a window in the middle of one
# steady phase: perf stat (CPU time, context switches, system calls by name, per process) in one
# run and perf record (cpu-clock samples with kernel stacks) in another, then prints CPU per
# operation by role (server, clients) and by where it goes (bench/meta/perf_summary.py).
# The egmstore master runs as its own process here (`egmstore master`), as redis-server does,
# so that server and client time separate by pid. Needs perf and root (or perf_event_paranoid
# <= 1). Builds nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
usage() {
    cat <<EOF
Usage: bench/meta/profile.sh [--egmstore PATH] [--clients 8] [--seconds 4]
                             [--op exist|get_replica_list] [--keys 100000] [--out DIR]

  --egmstore PATH  the egmstore binary (default build/bin/egmstore)
  --clients N      concurrent clients (egmstore client threads, redis-benchmark -c)
  --seconds S      phase length; the window measured is its middle S-1 seconds
  --op OP          the egmstore phase profiled (single key): exist or get_replica_list
  --keys K         keys preloaded in both
  --out DIR        keeps perf.data files and the summary there (default: a temp dir, removed)
EOF
}
egm=$root/build/bin/egmstore
clients=8
seconds=4
op=exist
keys=100000
out=""
while [ $# -gt 0 ]; do
    case $1 in
    --egmstore) egm=$2 ;;
    --clients) clients=$2 ;;
    --seconds) seconds=$2 ;;
    --op) op=$2 ;;
    --keys) keys=$2 ;;
    --out) out=$2 ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "profile.sh: unknown argument \"$1\"" >&2
        exit 2
        ;;
    esac
    [ $# -ge 2 ] || {
        echo "profile.sh: $1 needs a value" >&2
        exit 2
    }
    shift 2
done
die() {
    echo "profile.sh: error: $*" >&2
    exit 1
}
is_uint() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ]; }
is_uint "$clients" 1 || die "--clients: \"$clients\", must be an integer >= 1"
is_uint "$seconds" 2 || die "--seconds: \"$seconds\", must be an integer >= 2"
is_uint "$keys" 1 || die "--keys: \"$keys\", must be an integer >= 1"
case $op in
exist) phase_index=0 rpc=ExistKey ;;
get_replica_list) phase_index=1 rpc=GetReplicaList ;;
*) die "--op: \"$op\", must be exist or get_replica_list" ;;
esac
[ -x "$egm" ] || die "--egmstore: $egm is not an executable"
for tool in perf redis-server redis-benchmark redis-cli python3; do
    command -v "$tool" >/dev/null || die "$tool not found (apt-get install linux-perf redis-server redis-tools)"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/egm-meta-profile.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [ -n "$out" ]; then
        mkdir -p "$out"
        cp -r "$tmp"/. "$out"/
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
window=$((seconds - 1))
syscalls=sendto,recvfrom,sendmsg,recvmsg,read,write,writev,poll,ppoll,epoll_wait,epoll_pwait,epoll_ctl,futex
sc_events=syscalls:sys_enter_${syscalls//,/,syscalls:sys_enter_}

# measure LABEL SERVER_PID CLIENT_PID MODE COUNTER: perf stat (MODE stat) or perf record (MODE
# record) of both processes over the window; COUNTER prints the server's count of the operation
# (read before and after: the operations in the window, in $tmp/LABEL-MODE.ops).
measure() {
    local label=$1 spid=$2 cpid=$3 mode=$4 counter=$5 before after
    before=$($counter)
    if [ "$mode" = stat ]; then
        perf stat -x, -e "task-clock,context-switches,raw_syscalls:sys_enter,$sc_events" \
            -p "$spid" -o "$tmp/$label-server.stat" -- sleep "$window" &
        local a=$!
        perf stat -x, -e "task-clock,context-switches,raw_syscalls:sys_enter,$sc_events" \
            -p "$cpid" -o "$tmp/$label-client.stat" -- sleep "$window"
        wait $a
    else
        echo "$spid $cpid" >"$tmp/$label.pids"
        perf record -q -e cpu-clock -F 2999 -g -p "$spid,$cpid" -o "$tmp/$label.data" \
            -- sleep "$window" 2>>"$tmp/perf-record.log"
    fi
    after=$($counter)
    echo $((after - before)) >"$tmp/$label-$mode.ops"
}

# ---- egmstore: a master process and the bench against it ---------------------------------
# The master's count of the profiled RPC, from its /metrics.
egm_count() {
    python3 - "$hport" "$rpc" <<'EOF'
import re, sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
m = re.search(r'^egm_master_rpc_requests_total\{type="%s"\} (\d+)' % sys.argv[2], text, re.M)
print(m.group(1))
EOF
}

egm_once() {
    local mode=$1 port
    port=$(free_port)
    hport=$(free_port)
    "$egm" master --port "$port" --listen-address 127.0.0.1 --http-port "$hport" --log-level warn \
        >"$tmp/master.log" 2>&1 &
    local mpid=$!
    pids+=("$mpid")
    for _ in $(seq 100); do
        "$egm" ls --master "127.0.0.1:$port" >/dev/null 2>&1 && break
        sleep 0.1
    done
    "$egm" bench meta --master "127.0.0.1:$port" --clients "$clients" --seconds "$seconds" \
        --keys "$keys" --out "$tmp/egm-$mode.json" >"$tmp/egm-$mode.out" 2>"$tmp/egm-$mode.err" &
    local bpid=$!
    pids+=("$bpid")
    # The phases start right after the preload; skip to the middle of the one asked for.
    for _ in $(seq 600); do
        grep -qs preloaded "$tmp/egm-$mode.err" && break
        sleep 0.05
    done
    grep -qs preloaded "$tmp/egm-$mode.err" || die "egmstore bench did not start: $(cat "$tmp/egm-$mode.err")"
    sleep "$(python3 -c "print(0.5 + $phase_index * $seconds)")"
    measure "egm" "$mpid" "$bpid" "$mode" egm_count
    wait "$bpid" || die "egmstore bench failed: $(tail -5 "$tmp/egm-$mode.err")"
    kill "$mpid"
    wait "$mpid" 2>/dev/null || true
    pids=()
}

redis_count() {
    redis-cli -s "$tmp/redis.sock" info commandstats | sed -n 's/^cmdstat_get:calls=\([0-9]*\),.*/\1/p'
}

# ---- Redis: redis-server and redis-benchmark GET, the same clients and keys -----------------
# redis_once MODE LABEL THREADS: THREADS 0 = redis-benchmark's single event loop, else --threads.
redis_once() {
    local mode=$1 label=$2 threads=$3 port targs=()
    [ "$threads" -gt 0 ] && targs=(--threads "$threads")
    port=$(free_port)
    redis-server --bind 127.0.0.1 --port "$port" --unixsocket "$tmp/redis.sock" \
        --unixsocketperm 700 --save '' --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
    local rpid=$!
    pids+=("$rpid")
    for _ in $(seq 100); do
        [ "$(redis-cli -s "$tmp/redis.sock" ping 2>/dev/null)" = PONG ] && break
        sleep 0.1
    done
    python3 - "$keys" <<'EOF' | redis-cli -s "$tmp/redis.sock" --pipe >/dev/null
import sys
out = sys.stdout.buffer
for i in range(int(sys.argv[1])):
    k = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$64\r\n%s\r\n" % (len(k), k, b"v" * 64))
EOF
    # -n from a probe, so that the run lasts about --seconds
    local rps n
    rps=$(redis-benchmark -s "$tmp/redis.sock" -c "$clients" "${targs[@]}" -r "$keys" -d 64 \
        -n 20000 --csv -t get | tail -1 | awk -F'","' '{print $2}')
    n=$(python3 -c "print(int(float('$rps') * $seconds * 2))")
    redis-benchmark -s "$tmp/redis.sock" -c "$clients" "${targs[@]}" -r "$keys" -d 64 -n "$n" \
        --csv -t get >"$tmp/$label-$mode.csv" &
    local bpid=$!
    pids+=("$bpid")
    sleep 0.5
    measure "$label" "$rpid" "$bpid" "$mode" redis_count
    kill "$bpid" 2>/dev/null || true # sized to outlast the window
    wait "$bpid" 2>/dev/null || true
    kill "$rpid"
    wait "$rpid" 2>/dev/null || true
    pids=()
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for mode in stat record; do
    egm_once "$mode"
    redis_once "$mode" redis 0
    redis_once "$mode" redis-threads "$clients"
done
python3 "$root/bench/meta/perf_summary.py" --dir "$tmp" --op "$op" --clients "$clients" \
    --window "$window" --load "$load_before / $(cut -d' ' -f1-3 /proc/loadavg)" |
    tee "$tmp/summary.txt"
