#!/usr/bin/env python3
"""Combines bench/meta/run.sh's measurements into one JSON and a markdown table.

Inputs in --tmp: egm-<transport>-<round>-<clients>.json (egmstore bench meta --out) and
redis.tsv (one redis-benchmark --csv line per measurement, after run.sh's own columns).
Figures are medians over rounds; a ratio is median egmstore / median Redis, with the range of
the per-round ratios next to it. Standard library only.
"""
import argparse
import csv
import glob
import hashlib
import json
import os
import platform
import re
import statistics
import time

EGM_OPS = [
    ("exist", "ExistKey"),
    ("get_replica_list", "GetReplicaList"),
    ("put_start_end", "PutStart+PutEnd"),
]
SINGLE_GOAL = 1.0  # single-key ops/s >= Redis GET ops/s, same concurrency
BATCH_GOAL = 5.0  # batch keys/s >= 5x Redis GET ops/s, same concurrency


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def os_name():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "unknown"


def redis_label(name, threads, pipe, per):
    if pipe > 1:
        return "%s -P%d" % (name, pipe)
    if per > 1:
        return "%s%d" % (name, per)
    return name + " --threads" if threads > 0 else name


def load(args):
    egm = []  # rows: transport, round, clients, op, batch, figures
    for path in sorted(glob.glob(os.path.join(args.tmp, "egm-*-*-*.json"))):
        m = re.match(r"egm-(\w+)-(\d+)-(\d+)\.json$", os.path.basename(path))
        with open(path) as f:
            doc = json.load(f)
        for r in doc["results"]:
            egm.append(
                {
                    "transport": m.group(1),
                    "round": int(m.group(2)),
                    "clients": r["clients"],
                    "op": r["op"],
                    "rpc": r["rpc"],
                    "batch": r["batch"],
                    "calls_per_s": r["calls_per_s"],
                    "keys_per_s": r["keys_per_s"],
                    "p50_us": r["p50_us"],
                    "p99_us": r["p99_us"],
                    "calls": r["calls"],
                    "errors": r["errors"],
                    "ping_failures": doc.get("ping_failures", 0),
                    "egmstore_commit": doc.get("commit"),
                    "egmstore_commit_dirty": doc.get("commit_dirty"),
                }
            )
    redis = []
    with open(os.path.join(args.tmp, "redis.tsv")) as f:
        for line in f:
            tr, rnd, name, c, threads, pipe, per, n, csvline = line.rstrip("\n").split("\t", 8)
            fields = next(csv.reader([csvline]))
            # test, rps, avg, min, p50, p95, p99, max (ms); the test name is the command line
            rps, _avg, _min, p50, _p95, p99, _max = (float(x) for x in fields[-7:])
            threads, pipe, per = int(threads), int(pipe), int(per)
            redis.append(
                {
                    "transport": tr,
                    "round": int(rnd),
                    "clients": int(c),
                    "test": redis_label(name, threads, pipe, per),
                    "command": name,
                    "threads": threads if threads > 0 else "default (one event loop)",
                    "pipeline": pipe,
                    "keys_per_request": per,
                    "requests": int(n),
                    "requests_per_s": rps,
                    "keys_per_s": rps * per,
                    "p50_us": p50 * 1000.0,
                    "p99_us": p99 * 1000.0,
                }
            )
    return egm, redis


def median_table(rows, key_fields, value_fields):
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in key_fields), []).append(r)
    out = {}
    for k, rs in groups.items():
        out[k] = {v: statistics.median(r[v] for r in rs) for v in value_fields}
        out[k]["rounds"] = {r["round"]: r for r in rs}
    return out


def ratio(num, den, num_field, den_field):
    """Median ratio and the range of per-round ratios."""
    if num is None or den is None or den[den_field] == 0:
        return None
    per_round = []
    for rnd, r in num["rounds"].items():
        d = den["rounds"].get(rnd)
        if d is not None and d[den_field] > 0:
            per_round.append(r[num_field] / d[den_field])
    return {
        "ratio": num[num_field] / den[den_field],
        "round_min": min(per_round) if per_round else None,
        "round_max": max(per_round) if per_round else None,
    }


def fmt_rate(x):
    if x is None:
        return "-"
    if x >= 1e6:
        return "%.2fM" % (x / 1e6)
    if x >= 1e3:
        return "%.1fk" % (x / 1e3)
    return "%.0f" % x


def fmt_ratio(r, goal=None):
    if r is None:
        return "-"
    s = "%.2f" % r["ratio"]
    if r["round_min"] is not None and r["round_max"] is not None and r["round_min"] != r["round_max"]:
        s += " (%.2f-%.2f)" % (r["round_min"], r["round_max"])
    if goal is not None:
        s = ("**%s** ok" if r["ratio"] >= goal else "**%s** short") % s
    return s


def main():
    p = argparse.ArgumentParser()
    for a in (
        "tmp",
        "out",
        "egmstore",
        "commit",
        "dirty",
        "redis-version",
        "redis-benchmark-version",
        "load-before",
        "load-after",
        "note",
        "clients",
        "transports",
    ):
        p.add_argument("--" + a, default="")
    p.add_argument("--keys", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--rounds", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--value-size", type=int)
    args = p.parse_args()

    egm_rows, redis_rows = load(args)
    levels = [int(c) for c in args.clients.split(",")]
    transports = args.transports.split()
    B = args.batch
    egm_med = median_table(
        egm_rows,
        ("transport", "clients", "op", "batch"),
        ("calls_per_s", "keys_per_s", "p50_us", "p99_us"),
    )
    redis_med = median_table(
        redis_rows,
        ("transport", "clients", "test"),
        ("requests_per_s", "keys_per_s", "p50_us", "p99_us"),
    )

    def E(tr, c, op, batch):
        return egm_med.get((tr, c, op, batch))

    def R(tr, c, test):
        return redis_med.get((tr, c, test))

    summary, ratios, goals = [], [], []
    for tr in transports:
        for c in levels:
            for op, title in EGM_OPS:
                for batch in (1, B):
                    m = E(tr, c, op, batch)
                    if m is not None:
                        summary.append(
                            {
                                "system": "egmstore",
                                "transport": tr,
                                "clients": c,
                                "op": title,
                                "batch": batch,
                                "calls_per_s": m["calls_per_s"],
                                "keys_per_s": m["keys_per_s"],
                                "p50_us": m["p50_us"],
                                "p99_us": m["p99_us"],
                            }
                        )
            for test in ("GET", "SET", "GET --threads", "GET -P%d" % B, "SET -P%d" % B,
                         "MGET%d" % B, "MSET%d" % B):
                m = R(tr, c, test)
                if m is not None:
                    summary.append(
                        {
                            "system": "redis",
                            "transport": tr,
                            "clients": c,
                            "op": test,
                            "requests_per_s": m["requests_per_s"],
                            "keys_per_s": m["keys_per_s"],
                            "p50_us": m["p50_us"],
                            "p99_us": m["p99_us"],
                        }
                    )
            get = R(tr, c, "GET")
            get1 = R(tr, c, "GET --threads")
            for op, title in EGM_OPS:
                single, batched = E(tr, c, op, 1), E(tr, c, op, B)
                rows = [
                    ("%s / Redis GET" % title, single, "calls_per_s", get, "requests_per_s",
                     SINGLE_GOAL),
                    ("%s / Redis GET (redis-benchmark --threads C)" % title, single, "calls_per_s",
                     get1, "requests_per_s", None),
                    ("%s x%d keys/s / Redis GET" % (title, B), batched, "keys_per_s", get,
                     "requests_per_s", BATCH_GOAL),
                ]
                if op == "put_start_end":
                    rows += [
                        ("%s / Redis SET" % title, single, "calls_per_s", R(tr, c, "SET"),
                         "requests_per_s", None),
                        ("%s x%d keys/s / Redis SET -P%d keys/s" % (title, B, B), batched,
                         "keys_per_s", R(tr, c, "SET -P%d" % B), "keys_per_s", None),
                        ("%s x%d keys/s / Redis MSET%d keys/s" % (title, B, B), batched,
                         "keys_per_s", R(tr, c, "MSET%d" % B), "keys_per_s", None),
                    ]
                else:
                    rows += [
                        ("%s x%d keys/s / Redis GET -P%d keys/s" % (title, B, B), batched,
                         "keys_per_s", R(tr, c, "GET -P%d" % B), "keys_per_s", None),
                        ("%s x%d keys/s / Redis MGET%d keys/s" % (title, B, B), batched,
                         "keys_per_s", R(tr, c, "MGET%d" % B), "keys_per_s", None),
                    ]
                for name, num, nf, den, df, goal in rows:
                    r = ratio(num, den, nf, df)
                    if r is None:
                        continue
                    entry = {"transport": tr, "clients": c, "ratio_of": name, **r}
                    if goal is not None:
                        entry["goal"] = goal
                        entry["goal_met"] = r["ratio"] >= goal
                        goals.append(entry)
                    ratios.append(entry)

    egm_commits = sorted({(r["egmstore_commit"], r["egmstore_commit_dirty"]) for r in egm_rows},
                         key=str)
    doc = {
        "benchmark": "bench/meta/run.sh (egmstore bench meta vs redis-benchmark, issue 6)",
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "hostname": platform.node(),
            "cpu_model": cpu_model(),
            "nproc": os.cpu_count(),
            "kernel": "%s %s" % (platform.system(), platform.release()),
            "os": os_name(),
            "loadavg_before": args.load_before,
            "loadavg_after": args.load_after,
            "note": args.note,
        },
        "commit": args.commit,
        "checkout_dirty": args.dirty == "1",
        "egmstore": {
            "binary": os.path.abspath(args.egmstore),
            "binary_mtime_utc": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(args.egmstore))),
            "binary_sha256": sha256(args.egmstore),
            "commit_reported_by_binary": [{"commit": c, "dirty": d} for c, d in egm_commits],
        },
        "redis": {"server": args.redis_version, "benchmark": args.redis_benchmark_version},
        "config": {
            "clients": levels,
            "keys": args.keys,
            "seconds_per_measurement": args.seconds,
            "rounds": args.rounds,
            "batch": B,
            "redis_value_size": args.value_size,
            "transports": transports,
            "egmstore_invocation": "egmstore bench meta --clients C --seconds S --keys K --batch B "
            "--transport auto|tcp --http-port -1 --out F (master embedded in the bench process)",
            "redis_threads": "redis-benchmark's default single event loop for all compared "
            "figures: with --threads it stops only on its 250 ms showThroughput timer, so elapsed "
            "time is rounded up to 250 ms steps and rates read low; 'GET --threads' (one thread "
            "per connection, as egmstore's bench has, run >= 5 s) is kept for reference",
            "redis_server": "redis-server --save '' --appendonly no, io-threads default (1), "
            "preloaded with K keys key:%012d of value_size bytes",
            "goals": {"single_key_vs_redis_get": SINGLE_GOAL, "batch_keys_vs_redis_get": BATCH_GOAL},
        },
        "summary_median": summary,
        "ratios": ratios,
        "goals": goals,
        "raw": {"egmstore": egm_rows, "redis": redis_rows},
    }
    with open(args.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    md = render_md(doc, args, levels, transports, B, E, R)
    with open(args.out + ".md", "w") as f:
        f.write(md)
    print(md, end="")


def render_md(doc, args, levels, transports, B, E, R):
    m = doc["machine"]
    lines = [
        "# egmstore master metadata vs Redis (`bench/meta/run.sh`)",
        "",
        "%s; %s x %s, %s, %s; load average %s before, %s after."
        % (doc["time_utc"], m["nproc"], m["cpu_model"], m["kernel"], m["os"], m["loadavg_before"],
           m["loadavg_after"]),
        "Commit %s%s, egmstore binary built %s; %s; %s."
        % (doc["commit"][:12], " (checkout dirty)" if doc["checkout_dirty"] else "",
           doc["egmstore"]["binary_mtime_utc"], doc["redis"]["server"],
           doc["redis"]["benchmark"]),
        "%d keys, %g s per measurement, median of %d rounds (per-round ratio range in "
        "parentheses), batches of %d, Redis values %d bytes, redis-benchmark with its default single event loop "
        "(see README)."
        % (args.keys, args.seconds, args.rounds, B, args.value_size),
    ]
    if m["note"]:
        lines.append("Note: %s" % m["note"])
    ratio_map = {(r["transport"], r["clients"], r["ratio_of"]): r for r in doc["ratios"]}

    def RA(tr, c, name, goal=None):
        return fmt_ratio(ratio_map.get((tr, c, name)), goal)

    def v(x, field):
        return fmt_rate(x[field]) if x is not None else "-"

    def lat(x):
        return "%.0f / %.0f" % (x["p50_us"], x["p99_us"]) if x is not None else "-"

    for tr in transports:
        lines += [
            "",
            "## %s transport" % tr,
            "",
            "Single key, ops/s (goal: each >= Redis GET at the same clients):",
            "",
            "| clients | ExistKey | GetReplicaList | PutStart+PutEnd | Redis GET | Redis SET "
            "| ExistKey / GET | GetReplicaList / GET | Put / GET | Put / SET |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in levels:
            lines.append(
                "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                % (c, v(E(tr, c, "exist", 1), "calls_per_s"),
                   v(E(tr, c, "get_replica_list", 1), "calls_per_s"),
                   v(E(tr, c, "put_start_end", 1), "calls_per_s"),
                   v(R(tr, c, "GET"), "requests_per_s"), v(R(tr, c, "SET"), "requests_per_s"),
                   RA(tr, c, "ExistKey / Redis GET", SINGLE_GOAL),
                   RA(tr, c, "GetReplicaList / Redis GET", SINGLE_GOAL),
                   RA(tr, c, "PutStart+PutEnd / Redis GET", SINGLE_GOAL),
                   RA(tr, c, "PutStart+PutEnd / Redis SET")))
        lines += [
            "",
            "Batches of %d, keys/s (goal: each >= 5x Redis GET ops/s at the same clients):" % B,
            "",
            "| clients | ExistKey x%d | GetReplicaList x%d | PutStart+PutEnd x%d | 5 x Redis GET "
            "| ExistKey / GET | GetReplicaList / GET | Put / GET |" % (B, B, B),
            "|---|---|---|---|---|---|---|---|",
        ]
        for c in levels:
            get = R(tr, c, "GET")
            lines.append(
                "| %d | %s | %s | %s | %s | %s | %s | %s |"
                % (c, v(E(tr, c, "exist", B), "keys_per_s"),
                   v(E(tr, c, "get_replica_list", B), "keys_per_s"),
                   v(E(tr, c, "put_start_end", B), "keys_per_s"),
                   fmt_rate(5 * get["requests_per_s"]) if get else "-",
                   RA(tr, c, "ExistKey x%d keys/s / Redis GET" % B, BATCH_GOAL),
                   RA(tr, c, "GetReplicaList x%d keys/s / Redis GET" % B, BATCH_GOAL),
                   RA(tr, c, "PutStart+PutEnd x%d keys/s / Redis GET" % B, BATCH_GOAL)))
        lines += [
            "",
            "Batch analogues in Redis, keys/s, and egmstore's batch against them:",
            "",
            "| clients | GET -P%d | MGET%d | SET -P%d | MSET%d | ExistKey x%d / GET -P%d "
            "| GetReplicaList x%d / GET -P%d | GetReplicaList x%d / MGET%d | Put x%d / SET -P%d "
            "| Put x%d / MSET%d |" % ((B,) * 14),
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in levels:
            lines.append(
                "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                % (c, v(R(tr, c, "GET -P%d" % B), "keys_per_s"),
                   v(R(tr, c, "MGET%d" % B), "keys_per_s"),
                   v(R(tr, c, "SET -P%d" % B), "keys_per_s"),
                   v(R(tr, c, "MSET%d" % B), "keys_per_s"),
                   RA(tr, c, "ExistKey x%d keys/s / Redis GET -P%d keys/s" % (B, B)),
                   RA(tr, c, "GetReplicaList x%d keys/s / Redis GET -P%d keys/s" % (B, B)),
                   RA(tr, c, "GetReplicaList x%d keys/s / Redis MGET%d keys/s" % (B, B)),
                   RA(tr, c, "PutStart+PutEnd x%d keys/s / Redis SET -P%d keys/s" % (B, B)),
                   RA(tr, c, "PutStart+PutEnd x%d keys/s / Redis MSET%d keys/s" % (B, B))))
        lines += [
            "",
            "Latency p50 / p99, us (one call; PutStart+PutEnd: both round trips; Redis -P%d: "
            "as redis-benchmark reports it), and Redis GET with one thread per connection (reference):" % B,
            "",
            "| clients | ExistKey | GetReplicaList | PutStart+PutEnd | Redis GET | Redis SET "
            "| ExistKey x%d | MGET%d | Redis GET --threads C ops/s | ExistKey / GET --threads C |"
            % (B, B),
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in levels:
            lines.append(
                "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                % (c, lat(E(tr, c, "exist", 1)), lat(E(tr, c, "get_replica_list", 1)),
                   lat(E(tr, c, "put_start_end", 1)), lat(R(tr, c, "GET")), lat(R(tr, c, "SET")),
                   lat(E(tr, c, "exist", B)), lat(R(tr, c, "MGET%d" % B)),
                   v(R(tr, c, "GET --threads"), "requests_per_s"),
                   RA(tr, c, "ExistKey / Redis GET (redis-benchmark --threads C)")))
    short = [g for g in doc["goals"] if not g["goal_met"]]
    lines += ["", "Goals: %d of %d met." % (len(doc["goals"]) - len(short), len(doc["goals"]))]
    for g in short:
        lines.append("- short: %s, %s, %d clients: %.2f < %g"
                     % (g["ratio_of"], g["transport"], g["clients"], g["ratio"], g["goal"]))
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
