#!/usr/bin/env python3
"""Single puts of `bench/meta/ha_cost.sh --what data` runs, standby against off, two ways.

union: keys/s over the time at least one client was inside a put call (what the summary
reports); per-client-busy: each client's calls over the time that client spent inside calls
(the put calls' own cost, whatever the clients did between them); busy/wall: the share of the
phase the clients spent inside calls. Medians over the rounds, range in brackets.
Then, where bench data recorded the client's put phases (put_phases_s): a put call's mean
microseconds in each (rpc: master calls, a Commit's included; transfer: the copies; place:
placing in the client's slabs, SlabGrants included; log: slab-log entries, the slabs' lock
included; rest: the call less those), off and MODE, medians over the rounds.

Usage: bench/meta/put_call_time.py [--mode MODE] DIR...  (each DIR holds a run's
meta-MODE-ROUND.json files, directly or in data/, as ha_cost.sh --out writes them; MODE, default
standby, is the mode set against off: e.g. base, late)
"""
import glob
import json
import os
import statistics
import sys


def load(run, mode):
    folder = run if glob.glob(os.path.join(run, "meta-off-*.json")) else os.path.join(run, "data")
    rounds = []
    for r in range(1, 100):
        f = os.path.join(folder, "meta-%s-%d.json" % (mode, r))
        if not os.path.exists(f):
            break
        d = json.load(open(f))
        rounds.append({(x["workload"], x["op"], x["bytes"], x["clients"]): x for x in d["results"]})
    if not rounds:
        sys.exit("put_call_time: no %s/meta-%s-1.json" % (folder, mode))
    return rounds


def span(values):
    return "%.2f (%.2f-%.2f)" % (statistics.median(values), min(values), max(values))


args = sys.argv[1:]
mode = "standby"
if args[:1] == ["--mode"] and len(args) > 1:
    mode, args = args[1], args[2:]
for run in args or sys.exit(__doc__):
    print("==", run, mode)
    off, standby = load(run, "off"), load(run, mode)
    for k in sorted(off[0]):
        if k[0] != "single" or k[1] != "put":
            continue
        pairs = list(zip(standby, off))
        busy = [(s[k]["calls"] / s[k]["client_seconds"]) / (o[k]["calls"] / o[k]["client_seconds"])
                for s, o in pairs]
        union = [s[k]["keys_s"] / o[k]["keys_s"] for s, o in pairs]
        share = lambda rounds: statistics.median(x[k]["client_seconds"] / x[k]["wall_seconds"]
                                                 for x in rounds)
        print(k, "union", span(union), "per-client-busy", span(busy),
              "busy/wall %s %.2f off %.2f" % (mode, share(standby), share(off)))
        for name, rounds in (("off", off), (mode, standby)):
            if not all("put_phases_s" in x[k] for x in rounds):
                continue
            us = {}
            for x in rounds:
                ph = x[k]["put_phases_s"]
                parts = dict(ph, rest=ph["call"] - sum(v for p, v in ph.items() if p != "call"))
                for p, v in parts.items():
                    us.setdefault(p, []).append(v / x[k]["calls"] * 1e6)
            print("  us per put, %s:" % name,
                  " ".join("%s %.1f" % (p, statistics.median(v)) for p, v in us.items()))
