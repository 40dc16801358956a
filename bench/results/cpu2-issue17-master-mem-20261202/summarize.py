#!/usr/bin/env python3
"""Summarizes run.sh's output directory: memory per object (median, min..max) of base and
head, and for bench meta each (op, batch, clients) row's keys/s: medians of base and head,
and head/base per interleaved round (round r's head against round r's base), median and
range. usage: summarize.py DIR > table.md"""
import json, statistics, sys, glob, os

d = sys.argv[1]

def jsonl(name):
    with open(os.path.join(d, name)) as f:
        return [json.loads(l) for l in f if l.strip()]

def rng(v, fmt="%.1f"):
    return (fmt + " (" + fmt + ".." + fmt + ")") % (statistics.median(v), min(v), max(v))

print("## Memory per object (egm-master-mem: 500,000 objects, 60-byte keys, 1 replica, 64 segments)\n")
print("| path | base heap B/object | head heap B/object | base RSS | head RSS | base commit ns/key | head commit ns/key |")
print("|---|---|---|---|---|---|---|")
for label, name in (("PutStart+PutEnd", "mem-%s.jsonl"), ("Commit, 128 keys per call", "mem-commit-%s.jsonl")):
    b, h = jsonl(name % "base"), jsonl(name % "head")
    cols = [rng([x["heap_bytes_per_object"] for x in b]), rng([x["heap_bytes_per_object"] for x in h]),
            rng([x["rss_bytes_per_object"] for x in b]), rng([x["rss_bytes_per_object"] for x in h])]
    if "Commit" in label:
        cols += [rng([x["commit_ns_per_key"] for x in b], "%.0f"), rng([x["commit_ns_per_key"] for x in h], "%.0f")]
    else:
        cols += ["", ""]
    print("| %s | %s |" % (label, " | ".join(cols)))
print("\nmedian (min..max) of %d runs each, base and head interleaved\n" % len(b))

rounds = sorted(int(os.path.basename(p)[len("meta-base-"):-5]) for p in glob.glob(os.path.join(d, "meta-base-*.json")))
rows = {}
for r in rounds:
    for side in ("base", "head"):
        p = os.path.join(d, "meta-%s-%d.json" % (side, r))
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for x in json.load(f)["results"]:
                rows.setdefault((x["rpc"], x["batch"], x["clients"]), {}).setdefault(side, {})[r] = x["keys_per_s"]
print("## bench meta keys/s (egmstore bench meta --clients 1,8 --batch 1024 --seconds 1, in-process master)\n")
print("| call | keys/call | clients | base keys/s | head keys/s | head/base per round: median (min..max) |")
print("|---|---|---|---|---|---|")
for (rpc, batch, clients), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
    b, h = v.get("base", {}), v.get("head", {})
    common = sorted(set(b) & set(h))
    if not common:
        continue
    ratios = [h[r] / b[r] for r in common if b[r] > 0]
    print("| %s | %d | %d | %.0f | %.0f | %s |" % (rpc, batch, clients, statistics.median(b.values()),
          statistics.median(h.values()), rng(ratios, "%.2f")))
print("\n%d interleaved rounds (base, head, base, head, ...)" % len(rounds))
