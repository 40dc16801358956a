#!/usr/bin/env python3
"""Summarises bench/meta/profile.sh's perf output: CPU per operation by role and by category.

Reads, in --dir: {egm,redis}-{server,client}.stat (perf stat -x,), {egm,redis}.data (perf
record -g, cpu-clock) with {egm,redis}.pids ("server_pid client_pid") and
{egm,redis}-{stat,record}.ops (operations the server counted in each window: the master's
egm_master_rpc_requests_total for the RPC, Redis's cmdstat_get calls). Standard library only.

Caveat printed with the numbers: without hardware counters (a VM) cpu-clock samples taken while
interrupts were off land where they are turned back on, so "context switch" and "wakeup" are
the cost of switching and waking, not time spent in those few functions.
"""
import argparse
import collections
import csv
import json
import os
import re
import subprocess

MALLOC = {"malloc", "free", "calloc", "realloc", "cfree", "_int_malloc", "_int_free",
          "malloc_consolidate", "__libc_malloc", "__libc_free", "__libc_calloc", "_int_realloc",
          "tcache_init", "unlink_chunk", "__default_morecore", "sysmalloc", "_int_free_merge_chunk",
          "_int_free_create_chunk", "_int_free_maybe_consolidate", "je_malloc", "je_free"}
SWITCH = {"__schedule", "schedule", "finish_task_switch.isra.0", "finish_task_switch",
          "schedule_hrtimeout_range_clock", "schedule_hrtimeout_range", "preempt_schedule_irq"}
WAKE = {"try_to_wake_up", "__wake_up_common", "__wake_up_sync_key", "__wake_up",
        "sock_def_readable", "ep_poll_callback", "default_wake_function", "pollwake",
        "__wake_up_common_lock", "autoremove_wake_function"}


def read_stat(path):
    """{event: value} from perf stat -x, output."""
    out = {}
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) < 3 or row[0].startswith("#") or row[0] in ("", "<not counted>",
                                                                     "<not supported>"):
                continue
            try:
                out[row[2]] = float(row[0])
            except ValueError:
                pass
    return out


def window_ops(d, system, mode):
    """Operations the server counted during the window."""
    with open(os.path.join(d, "%s-%s.ops" % (system, mode))) as f:
        return float(f.read())


def categorize(frames, user_names):
    """frames: [(sym, dso)] leaf first. Returns a category name."""
    syms = [s for s, _ in frames]
    leaf, dso = frames[0]
    if dso.startswith("[kernel"):
        syscall = None
        for s in syms:
            m = re.match(r"__(?:x64|se|do)_sys_(\w+)", s)
            if m:
                syscall = m.group(1)
                break
        if any(s in SWITCH for s in syms):
            return "kernel: context switch" + (" (in %s)" % syscall if syscall else " (preempted)")
        if any(s in WAKE for s in syms):
            return "kernel: waking the peer" + (" (in %s)" % syscall if syscall else "")
        if syscall:
            return "kernel: %s work" % syscall
        return "kernel: entry/exit, interrupts"
    base = os.path.basename(dso)
    if base == "redis-check-rdb":  # Debian's redis-server is a link to it
        base = "redis-server"
    if "protobuf-c" in base:
        return "user: protobuf-c"
    if base.startswith("libc"):
        if leaf in MALLOC or "malloc" in leaf or leaf.startswith("_int_"):
            return "user: libc malloc/free"
        if re.match(r"__(mem|str)\w*", leaf) or leaf.startswith(("mem", "str")):
            return "user: libc mem*/str*"
        if "pthread" in leaf or "lll_" in leaf or "futex" in leaf:
            return "user: libc locks"
        return "user: libc syscall stubs, other"
    if base in user_names:
        return "user: %s %s" % (base, leaf)
    return "user: %s" % base


def perf_samples(d, label):
    """{pid: Counter(category)} from perf script."""
    txt = subprocess.run(["perf", "script", "-i", os.path.join(d, label + ".data"), "-F",
                          "pid,tid,ip,sym,dso"], capture_output=True, text=True).stdout
    by_pid = collections.defaultdict(collections.Counter)
    user_names = {"egmstore", "redis-server", "redis-benchmark", "redis-check-rdb"}
    for block in txt.split("\n\n"):
        lines = [l for l in block.strip("\n").split("\n") if l.strip()]
        if not lines:
            continue
        head = lines[0].split()
        pid = int(head[0].split("/")[0])
        frames = []
        for l in lines[1:]:
            m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", l)
            if m:
                sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))
                frames.append((sym, m.group(2)))
        if frames:
            by_pid[pid][categorize(frames, user_names)] += 1
    return by_pid


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--op", default="exist")
    p.add_argument("--clients", type=int)
    p.add_argument("--window", type=float)
    p.add_argument("--load", default="")
    a = p.parse_args()
    titles = {"egm": "egmstore %s x1" % {"exist": "ExistKey", "get_replica_list":
                                         "GetReplicaList"}[a.op],
              "redis": "Redis GET, redis-benchmark (one event loop for all connections)",
              "redis-threads": "Redis GET, redis-benchmark --threads %d (one thread per "
                               "connection, as egmstore's bench)" % a.clients}
    print("CPU per operation, %d clients, %g s window in a steady phase (load average %s)"
          % (a.clients, a.window, a.load))
    for system in ("egm", "redis", "redis-threads"):
        if not os.path.exists(os.path.join(a.dir, system + "-server.stat")):
            continue
        stats = {role: read_stat(os.path.join(a.dir, "%s-%s.stat" % (system, role)))
                 for role in ("server", "client")}
        # Operations in perf stat's own window: one send system call per request on the
        # client side (egmstore: sendmsg; redis-benchmark: sendto/write; -P 1 either way).
        ops = sum(stats["client"].get("syscalls:sys_enter_" + n, 0)
                  for n in ("sendmsg", "sendto", "write", "writev"))
        print("\n== %s: %.0f ops/s in the perf stat window (client sends; the server's own "
              "counter, read around it: %.0f/s)"
              % (titles[system], ops / a.window, window_ops(a.dir, system, "stat") / a.window))
        cpu = {}
        for role in ("server", "client"):
            st = stats[role]
            cpu[role] = st.get("task-clock", 0) * 1000.0 / ops  # msec -> us per op
            calls = {k.split("sys_enter_")[1]: v / ops for k, v in st.items()
                     if k.startswith("syscalls:sys_enter_") and v > 0}
            print("  %-7s CPU %5.2f us/op, %4.2f context switches/op, %4.2f syscalls/op (%s)"
                  % (role + ("s" if role == "client" else ""), cpu[role],
                     st.get("context-switches", 0) / ops,
                     st.get("raw_syscalls:sys_enter", 0) / ops,
                     ", ".join("%s %.2f" % kv for kv in sorted(calls.items(),
                                                                key=lambda kv: -kv[1])
                               if kv[1] >= 0.01)))
        with open(os.path.join(a.dir, system + ".pids")) as f:
            spid, cpid = (int(x) for x in f.read().split())
        samples = perf_samples(a.dir, system)
        rec_ops_s = window_ops(a.dir, system, "record") / a.window
        print("  where it goes (perf record: %% of the role's samples, x the perf stat run's "
              "CPU/op = us/op; %.0f ops/s while recording):" % rec_ops_s)
        for role, pid in (("server", spid), ("clients", cpid)):
            c = samples.get(pid, collections.Counter())
            total = sum(c.values())
            if total == 0:
                continue
            role_cpu = cpu["server" if role == "server" else "client"]
            user = sum(n for cat, n in c.items() if cat.startswith("user:")) / total
            print("   %s (%d samples): user space %.0f%% = %.2f us/op, kernel %.0f%% = %.2f us/op"
                  % (role, total, 100 * user, user * role_cpu, 100 * (1 - user),
                     (1 - user) * role_cpu))
            shown = 0
            for cat, n in c.most_common():
                share = n / total
                if shown >= 14 or share < 0.01:
                    break
                shown += 1
                print("     %5.1f%%  %5.2f us  %s"
                      % (100 * share, share * cpu["server" if role == "server" else "client"],
                         cat))
    print("\nNo hardware counters here: samples taken with interrupts off land where they come "
          "back on, so 'context switch' and 'waking the peer' are the cost of those operations.")


if __name__ == "__main__":
    main()
