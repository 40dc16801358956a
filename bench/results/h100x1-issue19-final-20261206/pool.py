#!/usr/bin/env python3
"""Pools the rounds of runs 30-33 (each run's ha-cost-data.tar.gz): per round,
keys/s of "standby" and "base" against "off" of the same round, for each
single 4 KiB op and client count; prints the median, the quartiles and how
many rounds reached 0.90. Usage: python3 pool.py [DIR]"""
import io, json, re, statistics, sys, tarfile
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
rounds = {}  # (op, clients) -> mode -> [ratio]
for run in sorted(root.glob("run*/ha-cost-data.tar.gz")):
    with tarfile.open(run) as tar:
        metas = {}
        for m in tar.getmembers():
            g = re.fullmatch(r"(?:\./)?meta-(\w+)-(\d+)\.json", m.name)
            if g:
                metas[(g[1], int(g[2]))] = json.load(io.TextIOWrapper(tar.extractfile(m)))
    for (mode, i), meta in metas.items():
        if mode == "off":
            continue
        off = {(r["op"], r["clients"]): r["keys_s"] for r in metas[("off", i)]["results"]}
        for r in meta["results"]:
            k = (r["op"], r["clients"])
            rounds.setdefault(k, {}).setdefault(mode, []).append(r["keys_s"] / off[k])
for (op, clients), modes in sorted(rounds.items()):
    for mode, v in sorted(modes.items(), reverse=True):
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        print(f"single {op} 4KiB, {clients} clients, {mode}/off: {len(v)} rounds, median "
              f"{statistics.median(v):.2f} (quartiles {q[0]:.2f}-{q[2]:.2f}, range "
              f"{min(v):.2f}-{max(v):.2f}), {sum(x >= 0.90 for x in v)} of {len(v)} at 0.90 or more")
