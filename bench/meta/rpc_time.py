#!/usr/bin/env python3
"""The leader's time per RPC type in `bench/meta/ha_cost.sh --what data` runs: for each mode,
the calls and the mean time (us) of each type, from the metrics-MODE-ROUND.txt files (the
egm_master_rpc_duration_seconds sums and counts after the run: every phase of it together);
the median over the rounds, range in brackets. Also the SlabGrants answered early and, where
the files have them, how the journal's batches reached the standby: sent by a waiting request's
thread or by the standby's sender thread, how many left while an earlier one was in flight, and
how many replies were held meanwhile (medians).

Usage: bench/meta/rpc_time.py DIR [TYPE...]  (default types: SlabGrant Commit Remove)
"""
import glob
import os
import re
import statistics
import sys

ORDER = ("off", "on", "standby", "spin", "late", "base")  # ha_cost.sh's
BATCHES = 'egm_master_ha_journal_batches_total{sender="%s"}'
SAMPLE = re.compile(r'^egm_master_rpc_duration_seconds_(sum|count)\{type="([A-Za-z]+)"\} (\S+)$')


def read(path):
    rpc, counters = {}, {}
    for line in open(path):
        m = SAMPLE.match(line.strip())
        if m:
            rpc.setdefault(m.group(2), {})[m.group(1)] = float(m.group(3))
        elif line.startswith(("egm_master_slab_grants", "egm_master_ha_")):
            name, value = line.split()
            counters[name] = float(value)
    return rpc, counters


def spread(values):
    return "%.1f (%.1f-%.1f)" % (statistics.median(values), min(values), max(values))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    folder, types = sys.argv[1], sys.argv[2:] or ["SlabGrant", "Commit", "Remove"]
    found = {re.sub(r"^metrics-(.*)-\d+\.txt$", r"\1", os.path.basename(f))
             for f in glob.glob(os.path.join(folder, "metrics-*-*.txt"))}
    modes = [m for m in ORDER if m in found] + sorted(found - set(ORDER))
    if not modes:
        sys.exit("rpc_time: no %s/metrics-MODE-ROUND.txt" % folder)
    print("| mode | rounds | early grants | " + " | ".join("%s calls | %s us" % (t, t) for t in types) + " |")
    print("|---|---|---|" + "---|---|" * len(types))
    for mode in modes:
        runs = [read(f) for f in sorted(glob.glob(os.path.join(folder, "metrics-%s-*.txt" % mode)))]
        if any(t not in r[0] or "count" not in r[0][t] for r in runs for t in types):
            sys.exit("rpc_time: %s lacks the RPC sums (a run before ha_cost.sh kept them)" % mode)
        cells = []
        for t in types:
            counts = [r[0][t]["count"] for r in runs]
            means = [1e6 * r[0][t]["sum"] / r[0][t]["count"] if r[0][t]["count"] else 0.0 for r in runs]
            cells.append("%.0f | %s" % (statistics.median(counts), spread(means)))
        early = [r[1].get("egm_master_slab_grants_early_total", 0) / max(r[1].get("egm_master_slab_grants_total", 0), 1)
                 for r in runs]
        print("| %s | %d | %.2f | %s |" % (mode, len(runs), statistics.median(early), " | ".join(cells)))
    journal = [(mode, [read(f)[1] for f in sorted(glob.glob(os.path.join(folder, "metrics-%s-*.txt" % mode)))])
               for mode in modes]
    journal = [(mode, runs) for mode, runs in journal if all(BATCHES % "request" in r for r in runs)]
    if journal:
        print()
        print("| mode | batches by requests | by the sender thread | pipelined | replies held |")
        print("|---|---|---|---|---|")
        for mode, runs in journal:
            cells = [statistics.median(r.get(name, 0) for r in runs)
                     for name in (BATCHES % "request", BATCHES % "thread",
                                  "egm_master_ha_journal_batches_pipelined_total",
                                  "egm_master_ha_replies_held_total")]
            print("| %s | %s |" % (mode, " | ".join("%.0f" % c for c in cells)))


if __name__ == "__main__":
    main()
