#!/usr/bin/env bash
# bench/meta/ha_cost.sh: what enable_ha costs the master's metadata calls (issue 19's cost goal):
# `egmstore bench meta --master` against an external master started without enable_ha ("off"),
# with it alone ("on": election and fencing only) and with it and a standby master in sync
# ("standby": every change also waits for the standby to hold it, docs/ha.md "State handover"),
# on a one-member etcd it starts itself, interleaved ROUNDS times; then the median ratio to "off"
# of keys/s and the p50 per op, batch and client count, with the range over the rounds.
# With --what data, the same modes run `egmstore bench data` instead (the CPU suite's puts
# and gets through a provider over shm: single 4 KiB and 1 MiB objects and batches of
# 256 x 64 KiB, after a pass writing the pool once; leases of 1 s), with a provider of 2 GiB started against the
# master after the standby is in sync.
# With --standby-spin US, a fourth mode "spin": the standby with rpc_server_spin_us US (its RPC
# threads poll for the next HaApply instead of sleeping between them).
# With --late-grants, a mode "late": a standby in sync, and both masters with ha_early_grants
# false (every SlabGrant waits for the standby: docs/ha.md "Grants the standbys do not hold yet").
# With --what data, the leader's SlabGrant and Commit counters and its per-RPC time (the
# egm_master_rpc_duration_seconds sums and counts) after each run go to metrics-MODE-ROUND.txt;
# --workload and --sizes narrow the data runs to some of bench data's (default single,batch and
# 4KiB,1MiB), to measure one figure over more rounds.
# With --baseline PATH, a mode "base": "standby" with every process (masters, provider, bench)
# run from another egmstore binary, e.g. the build before a change, against the same "off".
# With --no-on, the mode "on" is left out (to give the others more rounds in the same time).
# With --standby-cpus LIST (taskset's form, e.g. 12-15), the standby and etcd run on those CPUs and
# the leader, the provider and the bench's clients on the others, in every mode: as on hosts of
# their own, so that the standby's CPU takes nothing from the clients (the figure then shows the
# protocol's cost; without it, that of a standby sharing the clients' host).
# With --what data, the CPU the host spent during each bench run goes to cpu-MODE-ROUND.txt and a
# table in cpu.md: cores busy on average (from /proc/stat), and those of the leader, the standby
# and the provider (their utime + stime): whether a standby's cost is its round trips or cores
# taken from the clients.
# Usage: bench/meta/ha_cost.sh [--egmstore PATH] [--rounds 3] [--clients 1,8] [--seconds 1]
#                              [--what meta|data] [--workload single,batch] [--sizes 4KiB,1MiB]
#                              [--standby-spin US] [--late-grants] [--baseline PATH]
#                              [--standby-cpus LIST] [--no-on] [--out DIR]
# Needs etcd (Debian's etcd-server) and python3. Builds nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
egm=$root/build/bin/egmstore rounds=3 clients=1,8 seconds=1 out= what=meta spin= late=
workload=single,batch sizes=4KiB,1MiB baseline= standby_cpus= on=on
while [ $# -gt 0 ]; do
    case $1 in
    --what) what=$2; shift 2 ;;
    --egmstore) egm=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --standby-spin) spin=$2; shift 2 ;;
    --late-grants) late=1; shift ;;
    --workload) workload=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --standby-cpus) standby_cpus=$2; shift 2 ;;
    --no-on) on=; shift ;;
    *) sed -n 2,35p "$0"; exit 2 ;;
    esac
done
case $what in meta | data) ;; *) echo "ha_cost: --what is meta or data, not '$what'" >&2; exit 2 ;; esac
command -v etcd > /dev/null || { echo "ha_cost: etcd is missing (scripts/install-deps.sh installs it)" >&2; exit 2; }
# pin_main / pin_standby: the command prefixes that put a process on its CPUs (none by default).
pin_main=() pin_standby=()
if [ -n "$standby_cpus" ]; then
    command -v taskset > /dev/null || { echo "ha_cost: --standby-cpus needs taskset (util-linux)" >&2; exit 2; }
    main_cpus=$(python3 - "$standby_cpus" << 'PY'
import os, sys
want = set()
for part in sys.argv[1].split(","):
    lo, _, hi = part.partition("-")
    want.update(range(int(lo), int(hi or lo) + 1))
have = os.sched_getaffinity(0)
if not want or not want < have:
    sys.exit("ha_cost: --standby-cpus %s: not a part of this process's CPUs %s" % (sys.argv[1], sorted(have)))
print(",".join(str(c) for c in sorted(have - want)))
PY
) || exit 2
    pin_main=(taskset -c "$main_cpus") pin_standby=(taskset -c "$standby_cpus")
    echo "ha_cost: standby and etcd on CPUs $standby_cpus, the rest on $main_cpus" >&2
fi
out=${out:-$(mktemp -d /tmp/egm-ha-cost-XXXXXX)}
mkdir -p "$out"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cp=$(free_port) pp=$(free_port) mp=$(free_port) sp=$(free_port) hp=$(free_port)
"${pin_standby[@]}" etcd --data-dir "$out/etcd" --listen-client-urls http://127.0.0.1:$cp --advertise-client-urls http://127.0.0.1:$cp \
    --listen-peer-urls http://127.0.0.1:$pp --initial-advertise-peer-urls http://127.0.0.1:$pp \
    --initial-cluster default=http://127.0.0.1:$pp --log-level error > "$out/etcd.log" 2>&1 &
etcd_pid=$!
master_pid= standby_pid= provider_pid=
cleanup() {
    [ -n "$provider_pid" ] && kill $provider_pid 2> /dev/null
    [ -n "$master_pid" ] && kill $master_pid 2> /dev/null
    [ -n "$standby_pid" ] && kill $standby_pid 2> /dev/null
    kill $etcd_pid 2> /dev/null
    rm -rf "$out/etcd"
}
trap cleanup EXIT
# CPU jiffies: the host's busy and total (/proc/stat), then each pid's utime + stime (0 if none).
cpu_snap() {
    awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, b+$5+$6; exit}' /proc/stat
    local pid v
    for pid in "$@"; do
        v=
        [ -n "$pid" ] && v=$(sed 's/.*) //' /proc/$pid/stat 2> /dev/null | awk '{print $12+$13}') || true
        echo "${v:-0}"
    done
}
healthy() { python3 -c 'import sys, urllib.request; sys.exit(b"true" not in urllib.request.urlopen(sys.argv[1], timeout=1).read())' "$1" 2> /dev/null; }
for _ in $(seq 100); do healthy http://127.0.0.1:$cp/health && break; sleep 0.1; done
modes="off${on:+ on} standby${spin:+ spin}${late:+ late}${baseline:+ base}"
for r in $(seq "$rounds"); do
    for mode in $modes; do
        bin=$egm
        [ $mode = base ] && bin=$baseline
        extra=()
        # A cluster id per run: no in-sync set of an earlier run holds a new standby back.
        [ $mode != off ] && extra=(--enable-ha true --etcd-endpoints 127.0.0.1:$cp --cluster-id "cost-$mode-$r")
        # data: force-removed objects' space comes back after a lease of 1 s (not 5) between phases
        [ $what = data ] && extra+=(--default-kv-lease-ttl 1000)
        [ $mode = late ] && extra+=(--ha-early-grants false)
        "${pin_main[@]}" "$bin" master --port $mp --http-port $hp --listen-address 127.0.0.1 "${extra[@]}" > "$out/master-$mode-$r.log" 2>&1 &
        master_pid=$!
        # Ready (and, with HA, elected) when a ping answers: bench meta's first calls need a leader.
        for _ in $(seq 100); do "$bin" ls --master 127.0.0.1:$mp > /dev/null 2>&1 && break; sleep 0.1; done
        if [ $mode = standby ] || [ $mode = spin ] || [ $mode = late ] || [ $mode = base ]; then
            sextra=()
            [ $mode = spin ] && sextra=(--rpc-server-spin-us "$spin")
            "${pin_standby[@]}" "$bin" master --port $sp --http-port -1 --listen-address 127.0.0.1 "${extra[@]}" "${sextra[@]}" \
                > "$out/standby-$mode-$r.log" 2>&1 &
            standby_pid=$!
            for _ in $(seq 200); do
                python3 -c 'import sys, urllib.request; sys.exit(b"\"standbys_in_sync\":1" not in urllib.request.urlopen(sys.argv[1], timeout=1).read())' \
                    http://127.0.0.1:$hp/health 2> /dev/null && break
                sleep 0.1
            done
        fi
        echo "ha_cost: round $r, enable_ha $mode" >&2
        if [ $what = meta ]; then
            "${pin_main[@]}" "$bin" bench meta --master 127.0.0.1:$mp --clients "$clients" --seconds "$seconds" \
                --out "$out/meta-$mode-$r.json" > "$out/meta-$mode-$r.txt"
        else
            "${pin_main[@]}" "$bin" provider --master 127.0.0.1:$mp --global-segment-size 2GiB --max-mr-size 1GiB \
                --local-hostname 127.0.0.1 > "$out/provider-$mode-$r.log" 2>&1 &
            provider_pid=$!
            for _ in $(seq 100); do grep -q "provider ready" "$out/provider-$mode-$r.log" && break; sleep 0.1; done
            before=$(cpu_snap "$master_pid" "$standby_pid" "$provider_pid")
            "${pin_main[@]}" "$bin" bench data --master 127.0.0.1:$mp --http-port $hp --default-kv-lease-ttl 1000 --workload "$workload" --sizes "$sizes" \
                --keys 256 --clients "$clients" --protocol shm --seconds "$seconds" --no-ceiling --warm \
                --out "$out/meta-$mode-$r.json" > "$out/meta-$mode-$r.txt"
            after=$(cpu_snap "$master_pid" "$standby_pid" "$provider_pid")
            # cores = jiffies / (elapsed jiffies / online CPUs, all of which /proc/stat counts); the
            # whole bench run, its warm-up included
            paste -d ' ' <(echo "$before" | tr '\n' ' ') <(echo "$after" | tr '\n' ' ') | awk -v n="$(getconf _NPROCESSORS_ONLN)" '{
                t = ($7 - $2) / n; if (t <= 0) t = 1
                printf "host %.2f leader %.2f standby %.2f provider %.2f\n", ($6 - $1) / t, ($8 - $3) / t, ($9 - $4) / t, ($10 - $5) / t
            }' > "$out/cpu-$mode-$r.txt"
            python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().splitlines():
    if l.startswith(("egm_master_slab_grants", "egm_master_commits_total", "egm_master_ha_commits",
                     "egm_master_ha_removes", "egm_master_rpc_duration_seconds_sum",
                     "egm_master_rpc_duration_seconds_count",
                     "egm_master_ha_journal_batches", "egm_master_ha_replies_held")):
        print(l)' http://127.0.0.1:$hp/metrics > "$out/metrics-$mode-$r.txt" || true
            kill $provider_pid; wait $provider_pid 2> /dev/null || true
            provider_pid=
        fi
        kill $master_pid; wait $master_pid 2> /dev/null || true
        master_pid=
        if [ -n "$standby_pid" ]; then kill $standby_pid; wait $standby_pid 2> /dev/null || true; standby_pid=; fi
    done
done
python3 - "$out" "$rounds" "$modes" << 'PY'
import json, statistics, sys
out, rounds, modes = sys.argv[1], int(sys.argv[2]), tuple(sys.argv[3].split())
def label(r):  # bench meta: the op; bench data: workload, op and object size
    return r["op"] if "workload" not in r else "%s %s %dKiB" % (r["workload"], r["op"], r["bytes"] // 1024)
def load(f):
    d = json.load(open(f))
    return {(label(r), r["batch"], r["clients"]): (r.get("keys_per_s", r.get("keys_s")), r["p50_us"])
            for r in d["results"]}
runs = {m: [load(f"{out}/meta-{m}-{r}.json") for r in range(1, rounds + 1)] for m in modes}
others = modes[1:]
lines = ["| op | batch | clients | keys/s off | " + " | ".join("%s/off (range)" % m for m in others) +
         " | p50 us off | " + " | ".join(others) + " |",
         "|---|---|---|---|" + "---|" * (2 * len(others) + 1)]
def ratio(m, k):
    r = [a[k][0] / b[k][0] for a, b in zip(runs[m], runs["off"])]
    return "%.2f (%.2f-%.2f)" % (statistics.median(r), min(r), max(r))
for k in sorted(runs["off"][0], key=str):
    p50 = [statistics.median(x[k][1] for x in runs[m]) for m in modes]
    lines.append("| %s | %d | %d | %.0f | " % (k[0], k[1], k[2], statistics.median(x[k][0] for x in runs["off"])) +
                 " | ".join(ratio(m, k) for m in others) + " | " + " | ".join("%.1f" % v for v in p50) + " |")
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
import os
cpu = {m: [dict(zip(*[iter(open(f).read().split())] * 2)) for f in
           (f"{out}/cpu-{m}-{r}.txt" for r in range(1, rounds + 1)) if os.path.exists(f)] for m in modes}
if all(cpu.values()):
    cols = ("host", "leader", "standby", "provider")
    rows = ["| mode | " + " | ".join("cores: %s" % c for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for m in modes:
        rows.append("| %s | " % m + " | ".join("%.2f (%.2f-%.2f)" % (
            statistics.median(float(x[c]) for x in cpu[m]), min(float(x[c]) for x in cpu[m]),
            max(float(x[c]) for x in cpu[m])) for c in cols) + " |")
    open(f"{out}/cpu.md", "w").write("\n".join(rows) + "\n")
    print("\n" + "\n".join(rows))
PY
echo "ha_cost: files in $out" >&2
