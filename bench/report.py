#!/usr/bin/env python3
"""bench/report.py: benchmark JSON (schema 1: a suite document or any tool's) -> a markdown
report with tables per workload (egmstore next to its ceiling, Redis and Mooncake, with the
ratios) and the issue's goals marked met / short, plus PNG plots drawn with matplotlib
(bandwidth vs size per transport with the ceiling line; latency CDF, or p50/p99 bars without
samples; batch throughput vs block size; ops/s by client count).

  bench/report.py bench/results/cpu2-suite-20261201.json            # -> .md and -*.png beside it
  bench/report.py a.json b.json --md out.md --plots-dir plots/

Without matplotlib (python/requirements-bench.txt) it writes the markdown only and says so.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "py"))
import benchlib as bl  # noqa: E402

SMALL = (4 * bl.KiB, 64 * bl.KiB)
ZC_CALLS = {"put_from", "get_into", "batch_put_from", "batch_get_into", "get_into+put_from"}


# ---- selecting records ------------------------------------------------------------------

def variant(r):
    """'c' for the C tools, 'zc' for Python zero-copy calls, 'bytes' for put/get of bytes."""
    if r.get("api") != "python":
        return "c"
    call = r.get("call")
    return "zc" if call is None or call in ZC_CALLS else "bytes"


def find(recs, **kw):
    out = []
    for r in recs:
        ok = True
        for k, v in kw.items():
            got = variant(r) if k == "variant" else r.get(k)
            if callable(v):
                if not v(got):
                    ok = False
                    break
            elif got != v:
                ok = False
                break
        if ok:
            out.append(r)
    return out


def best(recs, **kw):
    """The record with the most ops/s among those matching (None if none)."""
    c = [r for r in find(recs, **kw) if r.get("ops_s")]
    return max(c, key=lambda r: r["ops_s"]) if c else None


def ceil_ratio(a, c):
    """a's share of the ceiling c: by p50-based GB/s (one call's bytes / its p50) when both have
    it, else by mean GB/s. On a shared machine one stalled call (other work) drags a short
    ceiling measurement's mean down by several times; the p50 rate is the steadier figure."""
    if a is not None and c is not None and a.get("gbps_p50") and c.get("gbps_p50"):
        return ratio(a, c, "gbps_p50")
    return ratio(a, c, "gbps")


def ceil_gbps(c):
    return None if c is None else (c.get("gbps_p50") or c.get("gbps"))


def ratio(a, b, field="ops_s"):
    """a / b, or None when either is missing or had errors (a failed call's speed means nothing)."""
    if a is None or b is None or not a.get(field) or not b.get(field):
        return None
    if a.get("errors") or b.get("errors"):
        return None
    return a[field] / b[field]


def op_ok(op):
    """Ceiling records of `op` (cuMemcpy has put = HBM -> host and get = host -> HBM), or of
    any op when None; memcpy's op is "copy" and matches every op."""
    return lambda o: op is None or o in (op, "copy", None)


def ceiling(recs, nbytes, transport=None, op=None, batch=1):
    """The ceiling record of one copy of nbytes (of a batch's blocks when batch > 1): the C
    tool's when it ran, else store_bench's."""
    kw = dict(workload="ceiling", bytes=nbytes, batch=batch, op=op_ok(op))
    if transport:
        kw["transport"] = transport
    return best(recs, api="c", **kw) or best(recs, **kw)


def ceiling_for(recs, nbytes, transport="memcpy", op=None):
    """The ceiling measured at the size nearest to nbytes (the C tool's when it ran): a batch
    of N x block moves N x block bytes, which a copy of that size bounds."""
    import math

    cands = [r for r in find(recs, workload="ceiling", transport=transport, batch=1, op=op_ok(op))
             if r.get("bytes") and r.get("gbps")]
    if not cands or not nbytes:
        return None
    pref = [r for r in cands if r.get("api") == "c"] or cands
    return min(pref, key=lambda r: (abs(math.log(r["bytes"] / nbytes)), -r["gbps"]))


def egm_local(recs, **kw):
    """egmstore's same-host figure: the C tool over shm when it ran, else the Python facade
    over shm (zero-copy calls). Returns (record, label)."""
    r = best(recs, system="egmstore", api="c", transport="shm", **kw)
    if r:
        return r, "C shm"
    r = best(recs, system="egmstore", api="python", transport="shm", variant="zc", **kw)
    return (r, "py shm") if r else (None, None)


# ---- formatting ---------------------------------------------------------------------------

def fnum(x):
    if x is None:
        return "-"
    if x >= 1e6:
        return "%.2fM" % (x / 1e6)
    if x >= 1e4:
        return "%.1fk" % (x / 1e3)
    if x >= 100:
        return "%.0f" % x
    return "%.3g" % x


def fus(x):
    if x is None:
        return "-"
    return "%.0f" % x if x >= 100 else "%.1f" % x


def cell(r, unit):
    if r is None:
        return "-"
    if r.get("errors"):
        err = " **%d errors**" % r["errors"]
    else:
        err = ""
    if unit == "GB/s":
        main = "-" if r.get("gbps") is None else "%.2f" % r["gbps"]
    else:
        main = fnum(r.get("ops_s"))
    return "%s (%s/%s us)%s" % (main, fus(r.get("p50_us")), fus(r.get("p99_us")), err)


def fratio(x):
    return "-" if x is None else "%.2fx" % x


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out)


def unit_for(size):
    return "GB/s" if size >= bl.MiB else "ops/s"


def drop_empty_columns(header, rows, keep=1):
    cols = [i for i in range(len(header)) if i < keep or any(row[i] not in ("-", "", None) for row in rows)]
    return [header[i] for i in cols], [[row[i] for i in cols] for row in rows]


# ---- sections -----------------------------------------------------------------------------

def section_single(recs, host_only=True):
    """Single objects, one client, host memory: one table per op."""
    out = []
    single = find(recs, workload="single", total_clients=1, batch=1, memory="host")
    sizes = sorted({r["bytes"] for r in single if r.get("bytes")})
    if not sizes:
        return out
    out.append("## Single objects, one client (host memory)\n")
    out.append("Cells: ops/s below 1 MiB, GB/s from 1 MiB, then (p50/p99 us). *C*: `egmstore bench data` "
               "(C client library); *py*: bench/py/store_bench.py through Mooncake's Python API "
               "(egmstore's facade / Mooncake itself; zero-copy `put_from`/`get_into` on registered "
               "buffers). Redis: redis-benchmark SET/GET over loopback tcp. Ceiling: memcpy of the "
               "same size in one process (the C tool's when it ran), as GB/s at its p50.\n")
    for op in ("put", "get"):
        rows = []
        for size in sizes:
            u = unit_for(size)
            ceil = ceiling(recs, size, "memcpy")
            c_shm = best(single, system="egmstore", api="c", transport="shm", op=op, bytes=size)
            c_tcp = best(single, system="egmstore", api="c", transport="tcp", op=op, bytes=size)
            p_shm = best(single, system="egmstore", api="python", transport="shm", variant="zc", op=op, bytes=size)
            p_tcp = best(single, system="egmstore", api="python", transport="tcp", variant="zc", op=op, bytes=size)
            mc = best(single, system="mooncake", variant="zc", op=op, bytes=size)
            rd = best(single, system="redis", op=op, bytes=size)
            egm = c_shm or p_shm
            rows.append([bl.fmt_size(size), u,
                         "-" if ceil is None else "%.2f GB/s" % ceil_gbps(ceil),
                         cell(c_shm, u), cell(c_tcp, u), cell(p_shm, u), cell(p_tcp, u), cell(mc, u), cell(rd, u),
                         fratio(ceil_ratio(egm, ceil)), fratio(ratio(egm, rd)),
                         fratio(ratio(p_shm, mc)), fratio(ratio(p_tcp, mc))])
        header = ["size", "unit", "ceiling", "egmstore C shm", "egmstore C tcp", "egmstore py shm",
                  "egmstore py tcp", "Mooncake py tcp", "Redis tcp", "egm shm / ceiling",
                  "egm shm / Redis", "egm py shm / Mooncake", "egm py tcp / Mooncake"]
        header, rows = drop_empty_columns(header, rows, keep=2)
        out.append("### %s\n" % op.capitalize())
        out.append(table(header, rows) + "\n")
    out.append("*egm shm*: the C tool's shm figure when it ran, else the facade's. Ratios of ops/s "
               "(equal to ratios of GB/s at one size); against the ceiling, of GB/s at the p50 on both "
               "sides (one stalled call on a busy machine drags a short ceiling's mean down).\n")
    return out


def section_bytes(recs):
    single = find(recs, workload="single", total_clients=1, batch=1, api="python", variant="bytes")
    sizes = sorted({r["bytes"] for r in single if r.get("bytes")})
    if not sizes:
        return []
    out = ["## put/get of bytes (Python), one client\n",
           "`put(key, bytes)` / `get(key) -> bytes`: the value is copied between Python objects and "
           "the store (Mooncake through its client's local buffer).\n"]
    rows = []
    for size in sizes:
        u = unit_for(size)
        for op in ("put", "get"):
            s = best(single, system="egmstore", transport="shm", op=op, bytes=size)
            t = best(single, system="egmstore", transport="tcp", op=op, bytes=size)
            m = best(single, system="mooncake", op=op, bytes=size)
            rows.append([bl.fmt_size(size), op, u, cell(s, u), cell(t, u), cell(m, u),
                         fratio(ratio(s, m)), fratio(ratio(t, m))])
    out.append(table(["size", "op", "unit", "egmstore py shm", "egmstore py tcp", "Mooncake py tcp",
                      "shm / Mooncake", "tcp / Mooncake"], rows) + "\n")
    return out


def section_concurrency(recs):
    single = find(recs, workload="single", batch=1, memory="host")
    counts = sorted({r["total_clients"] for r in single if r["total_clients"] > 1})
    if not counts:
        return []
    sizes = sorted({r["bytes"] for r in single if r["total_clients"] > 1 and r.get("bytes")})
    out = ["## Concurrency: ops/s with 1 and %s clients\n" % ", ".join(map(str, counts)),
           "Clients in all: threads x processes. Python clients are threads sharing one store "
           "(*thr*) or processes with a store each (*proc*); the C tool's are threads with a "
           "client each (the best of its thread/process mixes with that total); Redis clients are "
           "redis-benchmark connections (-c). Cells: ops/s summed over the clients (p50/p99 us "
           "of one call).\n"]
    rows = []
    for size in sizes:
        for op in ("put", "get"):
            for n in [1] + counts:
                kw = dict(op=op, bytes=size, total_clients=n)
                c = best(single, system="egmstore", api="c", transport="shm", **kw)
                pt = best(single, system="egmstore", api="python", transport="shm", variant="zc", procs=1, **kw)
                pp = best(single, system="egmstore", api="python", transport="shm", variant="zc",
                          procs=lambda p: p is not None and p > 1, **kw) if n > 1 else pt
                tt = best(single, system="egmstore", api="python", transport="tcp", variant="zc", **kw)
                mt = best(single, system="mooncake", variant="zc", procs=1, **kw)
                mp = best(single, system="mooncake", variant="zc",
                          procs=lambda p: p is not None and p > 1, **kw) if n > 1 else mt
                rd = best(single, system="redis", **kw)
                egm = c or best(single, system="egmstore", api="python", transport="shm", variant="zc", **kw)
                if not (c or pt or pp or tt or mt or mp):
                    continue  # e.g. Redis alone at a size the stores ran with one client only
                rows.append([bl.fmt_size(size), op, n, cell(c, "ops/s"), cell(pt, "ops/s"),
                             cell(pp, "ops/s") if n > 1 else "", cell(tt, "ops/s"), cell(mt, "ops/s"),
                             cell(mp, "ops/s") if n > 1 else "", cell(rd, "ops/s"),
                             fratio(ratio(egm, rd)), fratio(ratio(pt, mt)),
                             fratio(ratio(pp, mp)) if n > 1 else ""])
    header = ["size", "op", "clients", "egmstore C shm", "egm py shm thr", "egm py shm proc",
              "egm py tcp (best)", "Mooncake thr", "Mooncake proc", "Redis", "egm / Redis",
              "egm / Mooncake thr", "egm / Mooncake proc"]
    header, rows = drop_empty_columns(header, rows, keep=3)
    out.append(table(header, rows) + "\n")
    out.append("*egm / Redis*: the C tool over shm when it ran, else the best Python shm figure.\n")
    return out


def section_batch(recs):
    batch = find(recs, workload="batch", memory="host")
    shapes = sorted({(r["batch"], r["bytes"]) for r in batch if r.get("bytes")}, key=lambda x: (x[1], x[0]))
    if not shapes:
        return []
    out = ["## Batches (host memory)\n",
           "One call moves N keys (`batch_put_from` / `batch_get_into`; Redis: N pipelined SET/GET, "
           "-P N, whose shape may differ from the store's batch: its N is in its own column). "
           "Cells: GB/s (p50/p99 us of one call).\n"]
    rows = []
    blocks = sorted({b for _, b in shapes})
    for block in blocks:
        for op in ("put", "get"):
            for n in sorted({n for n, b in shapes if b == block and find(batch, bytes=block, batch=n, op=op,
                                                                           system=lambda s: s != "redis")}):
                kw = dict(op=op, bytes=block, batch=n, total_clients=1)
                c = best(batch, system="egmstore", api="c", transport="shm", **kw)
                ct = best(batch, system="egmstore", api="c", transport="tcp", **kw)
                ps = best(batch, system="egmstore", api="python", transport="shm", **kw)
                pt = best(batch, system="egmstore", api="python", transport="tcp", **kw)
                m = best(batch, system="mooncake", **kw)
                rd = best(batch, system="redis", op=op, bytes=block, total_clients=1)
                # the C tool's ceiling of this batch (its blocks copied to scattered places),
                # else one copy of the batch's bytes
                ceil = ceiling(recs, block, "memcpy", batch=n) or ceiling_for(recs, n * block)
                egm = c or ps
                rows.append(["%d x %s" % (n, bl.fmt_size(block)), op, cell(c, "GB/s"), cell(ct, "GB/s"),
                             cell(ps, "GB/s"), cell(pt, "GB/s"), cell(m, "GB/s"),
                             ("-P %d: " % rd["batch"] + cell(rd, "GB/s")) if rd else "-",
                             fratio(ratio(egm, rd, "gbps")), fratio(ratio(ps, m, "gbps")),
                             fratio(ceil_ratio(egm, ceil))])
    header = ["batch", "op", "egmstore C shm", "egmstore C tcp", "egm py shm", "egm py tcp",
              "Mooncake py tcp", "Redis", "egm / Redis (GB/s)", "egm py shm / Mooncake",
              "egm / ceiling (copy of N x block)"]
    header, rows = drop_empty_columns(header, rows, keep=2)
    out.append(table(header, rows) + "\n")
    return out


def section_mixed(recs):
    mixed = find(recs, workload="mixed")
    if not mixed:
        return []
    out = ["## Mixed reads and writes\n",
           "Gets of preloaded keys chosen by the distribution, puts of new keys; one latency sample "
           "per call. Columns: each system, API, transport (and GPU memory) measured. Cells: ops/s "
           "(p50/p99 us).\n"]

    def label(r):
        return series_label(r) + (" (GPU)" if r.get("memory") == "gpu" else "")

    order = ("egmstore C", "egmstore py", "Mooncake", "Redis")
    labels = sorted({label(r) for r in mixed},
                    key=lambda l: (next((i for i, o in enumerate(order) if l.startswith(o)), len(order)), l))
    rows = []
    combos = sorted({(r.get("dist") or "-", r.get("read_ratio"), r["bytes"], r["total_clients"],
                      (r.get("procs") or 1) > 1) for r in mixed}, key=lambda x: (x[0], x[2], x[3], x[4]))
    for dist, rr, size, n, multi in combos:
        kw = dict(dist=lambda d, x=dist: (d or "-") == x, bytes=size, total_clients=n,
                  procs=lambda p, m=multi: ((p or 1) > 1) == m)
        found = {}
        for r in find(mixed, **kw):
            lab = label(r)
            if r.get("ops_s") and (lab not in found or r["ops_s"] > found[lab]["ops_s"]):
                found[lab] = r
        s_, t_, m_ = (found.get("egmstore py shm"), found.get("egmstore py tcp"), found.get("Mooncake py tcp"))
        rows.append([dist, rr, bl.fmt_size(size), n, "proc" if multi else "thr"]
                    + [cell(found.get(l), "ops/s") for l in labels]
                    + [fratio(ratio(s_, m_)), fratio(ratio(t_, m_)),
                       fratio(ratio(found.get("egmstore C nvlink (GPU)"), found.get("egmstore C tcp-staging (GPU)")))])
    header = ["dist", "reads", "size", "clients", "as"] + labels + [
        "egm py shm / Mooncake", "egm py tcp / Mooncake", "nvlink / tcp-staging"]
    header, rows = drop_empty_columns(header, rows, keep=5)
    out.append(table(header, rows) + "\n")
    return out


def section_meta(recs):
    meta = find(recs, workload="meta")
    if not meta:
        return []
    out = ["## Metadata round trips (`egmstore bench meta`)\n",
           "The master's calls alone (fake segments, no data moves). Cells: calls/s, keys/s, p50/p99 us.\n"]
    rows = []
    for r in sorted(meta, key=lambda r: (r.get("batch", 1), r.get("op") or "", r.get("clients", 1))):
        rows.append([r.get("op"), r.get("batch"), r.get("clients"), r.get("transport"), fnum(r.get("ops_s")),
                     fnum(r.get("keys_s")), fus(r.get("p50_us")), fus(r.get("p99_us")), r.get("errors")])
    out.append(table(["op", "batch", "clients", "transport", "calls/s", "keys/s", "p50 us", "p99 us", "errors"], rows) + "\n")
    return out


def section_gpu(recs):
    gpu = [r for r in recs if r.get("memory") == "gpu" and r.get("workload") in ("single", "batch")]
    if not gpu:
        return []
    out = ["## GPU memory\n",
           "Cells: GB/s (p50/p99 us). Ceiling: cuMemcpy HBM <-> pinned host in the same run (put: "
           "HBM -> host, get: host -> HBM); *staging*: tcp (or shm) from GPU memory through a "
           "pinned staging buffer, the conventional path. egmstore nvlink and staging: the C tool "
           "(`egmstore bench data --memory gpu`); *Python*: bench/py/store_bench.py --memory gpu, the "
           "Mooncake-API facade over nvlink and Mooncake Store (CUDA 13 build) over its tcp transport "
           "with the same script, so *Python nvlink / Mooncake* compares like with like.\n"]
    rows = []
    for wl in ("single", "batch"):
        shapes = sorted({(r["bytes"], r.get("batch", 1), r["total_clients"]) for r in gpu
                         if r.get("workload") == wl and r.get("bytes")})
        for size, n, total in shapes:
            for op in ("put", "get"):
                kw = dict(workload=wl, bytes=size, batch=n, op=op, total_clients=total)
                nv = best(gpu, system="egmstore", transport="nvlink", variant="c", **kw)
                nvpy = best(gpu, system="egmstore", transport="nvlink", variant="zc", **kw)
                st = best(gpu, system="egmstore", transport="tcp-staging", **kw)
                ss = best(gpu, system="egmstore", transport="shm-staging", **kw)
                mc = best(gpu, system="mooncake", **kw)
                ceil = (ceiling(recs, size * n, "cuMemcpy", op) or ceiling(recs, size, "cuMemcpy", op, n)
                        or ceiling_for(recs, size * n, "cuMemcpy", op))
                if not (nv or nvpy or st or ss or mc):
                    continue
                rows.append([wl, "%d x %s" % (n, bl.fmt_size(size)) if n > 1 else bl.fmt_size(size), op, total,
                             "-" if ceil is None else "%.2f" % ceil_gbps(ceil), cell(nv, "GB/s"), cell(st, "GB/s"),
                             cell(ss, "GB/s"), cell(nvpy, "GB/s"), cell(mc, "GB/s"), fratio(ceil_ratio(nv, ceil)),
                             fratio(ratio(nv, st, "gbps")), fratio(ratio(nvpy, mc, "gbps"))])
    if not rows:
        return []
    header = ["workload", "size", "op", "clients", "ceiling GB/s", "egmstore nvlink", "egmstore tcp-staging",
              "egmstore shm-staging", "egmstore nvlink (Python)", "Mooncake tcp (Python)", "nvlink / ceiling",
              "nvlink / tcp-staging", "Python nvlink / Mooncake"]
    header, rows = drop_empty_columns(header, rows, keep=4)
    out.append(table(header, rows) + "\n")
    return out


COVERED = {"single", "batch", "mixed", "meta", "ceiling"}


def section_other(recs):
    """Workloads the sections above do not lay out (sparse, interference, full, ...): every
    record with its main fields, so nothing measured is left out of the report."""
    other = [r for r in recs if r.get("workload") not in COVERED and r.get("op") != "failed"]
    if not other:
        return []
    out = ["## Other workloads\n"]
    for wl in sorted({r.get("workload") or "-" for r in other}):
        rows = []
        for r in [x for x in other if (x.get("workload") or "-") == wl]:
            rows.append([r.get("system"), r.get("api"), r.get("transport"), r.get("op"), r.get("memory"),
                         bl.fmt_size(r.get("bytes")) if r.get("bytes") else "-", r.get("batch"),
                         "%s x %s" % (r.get("clients"), r.get("procs") or 1),
                         "-" if r.get("gbps") is None else "%.2f" % r["gbps"], fnum(r.get("ops_s")),
                         fus(r.get("p50_us")), fus(r.get("p99_us")), r.get("errors")])
        out.append("### %s\n" % wl)
        out.append(table(["system", "api", "transport", "op", "memory", "bytes", "batch", "clients x procs", "GB/s",
                          "ops/s", "p50 us", "p99 us", "errors"], rows) + "\n")
    return out


# ---- goals --------------------------------------------------------------------------------

def goals(recs):
    """(goal, measured, verdict) rows for the issue's goals."""
    rows = []

    def verdict(ok):
        return "not measured" if ok is None else ("met" if ok else "**short**")

    # GPU goals
    def gpu_single(op, size):
        return best(recs, workload="single", transport="nvlink", variant="c", op=op, bytes=size, total_clients=1)

    vals = []
    for size in sorted({r["bytes"] for r in find(recs, workload="single", transport="nvlink") if r.get("bytes", 0) >= 16 * bl.MiB}):
        for op in ("put", "get"):
            c = ceiling(recs, size, "cuMemcpy", op)
            q = ceil_ratio(gpu_single(op, size), c)
            if q is not None:
                vals.append((size, op, q))
    rows.append(["nvlink single >= 16 MiB: >= 95% of the raw copy ceiling",
                 ", ".join("%s %s %.0f%%" % (bl.fmt_size(s), o, q * 100) for s, o, q in vals) or "-",
                 verdict(all(q >= 0.95 for _, _, q in vals) if vals else None)])
    vals = []
    for op in ("put", "get"):
        b = best(recs, workload="batch", transport="nvlink", variant="c", op=op, batch=8192, bytes=64 * bl.KiB)
        c = (ceiling(recs, 8192 * 64 * bl.KiB, "cuMemcpy", op) or ceiling(recs, 64 * bl.KiB, "cuMemcpy", op, 8192)
             or ceiling_for(recs, 8192 * 64 * bl.KiB, "cuMemcpy", op))
        q = ceil_ratio(b, c)
        if q is not None:
            vals.append((op, q))
    rows.append(["nvlink batch 8192 x 64 KiB: >= 90% of the ceiling",
                 ", ".join("%s %.0f%%" % (o, q * 100) for o, q in vals) or "-",
                 verdict(all(q >= 0.90 for _, q in vals) if vals else None)])
    g4 = gpu_single("get", 4 * bl.KiB)
    rows.append(["nvlink 4 KiB Get end to end: p50 <= 30 us, p99 <= 60 us",
                 "p50 %s us, p99 %s us" % (fus(g4["p50_us"]), fus(g4["p99_us"])) if g4 else "-",
                 verdict(None if g4 is None else (g4["p50_us"] <= 30 and g4["p99_us"] <= 60))])
    vals = []
    for r in find(recs, workload="single", transport="nvlink", total_clients=1,
                  bytes=lambda b: b is not None and bl.MiB <= b <= 64 * bl.MiB):
        st = best(recs, workload="single", transport="tcp-staging", op=r["op"], bytes=r["bytes"], total_clients=1)
        q = ratio(r, st, "gbps")
        if q is not None:
            vals.append((r["bytes"], r["op"], q))
    rows.append(["nvlink vs staging path at 1 MiB .. 64 MiB: >= 2x",
                 "%.1fx .. %.1fx (%d points)" % (min(q for *_, q in vals), max(q for *_, q in vals), len(vals)) if vals else "-",
                 verdict(all(q >= 2 for *_, q in vals) if vals else None)])

    # CPU goals
    shm16, lab = egm_local(recs, workload="single", op="get", bytes=16 * bl.MiB, total_clients=1, batch=1)
    shm16p, _ = egm_local(recs, workload="single", op="put", bytes=16 * bl.MiB, total_clients=1, batch=1)
    c16 = ceiling(recs, 16 * bl.MiB, "memcpy")
    q1, q2 = ceil_ratio(shm16, c16), ceil_ratio(shm16p, c16)
    rows.append(["shm on CPU, 16 MiB objects: >= 80%% of memcpy bandwidth (%s)" % (lab or "-"),
                 "get %s, put %s" % ("-" if q1 is None else "%.0f%%" % (q1 * 100), "-" if q2 is None else "%.0f%%" % (q2 * 100)),
                 verdict(None if q1 is None else (q1 >= 0.8 and (q2 is None or q2 >= 0.8)))])
    g4s, lab = egm_local(recs, workload="single", op="get", bytes=4 * bl.KiB, total_clients=1, batch=1)
    rows.append(["shm on CPU, 4 KiB Get p50 <= 20 us (%s)" % (lab or "-"),
                 "p50 %s us" % fus(g4s["p50_us"]) if g4s else "-",
                 verdict(None if g4s is None else g4s["p50_us"] <= 20)])
    # small objects vs Redis and Mooncake
    small = sorted({r["bytes"] for r in find(recs, workload="single", system="egmstore")
                    if r.get("bytes") and SMALL[0] <= r["bytes"] <= SMALL[1]})
    counts = sorted({r["total_clients"] for r in find(recs, workload="single", system="egmstore")})
    vs_redis, vs_mc = [], []
    for size in small:
        for n in counts:
            for op in ("put", "get"):
                kw = dict(workload="single", op=op, bytes=size, total_clients=n, batch=1)
                egm, _ = egm_local(recs, **kw)
                rd = best(recs, system="redis", **kw)
                q = ratio(egm, rd)
                if q is not None:
                    vs_redis.append((size, n, op, q))
                egp = best(recs, system="egmstore", api="python", transport="shm", variant="zc", **kw)
                mc = best(recs, system="mooncake", variant="zc", **kw)
                q = ratio(egp, mc)
                if q is not None:
                    vs_mc.append((size, n, op, q))

    def span(vals):
        if not vals:
            return "-"
        lo = min(vals, key=lambda v: v[-1])
        hi = max(vals, key=lambda v: v[-1])
        return "%.2fx .. %.2fx (lowest: %s %s, %d client%s; %d points)" % (
            lo[-1], hi[-1], bl.fmt_size(lo[0]), lo[2], lo[1], "" if lo[1] == 1 else "s", len(vals))

    rows.append(["CPU small objects (4 KiB .. 64 KiB, 1 and 8 clients): ops/s >= Redis GET/SET",
                 span(vs_redis), verdict(all(v[-1] >= 1 for v in vs_redis) if vs_redis else None)])
    rows.append(["CPU small objects: >= 3x Mooncake at the same concurrency (Python API both)",
                 span(vs_mc), verdict(all(v[-1] >= 3 for v in vs_mc) if vs_mc else None)])
    eg = best(recs, workload="single", system="egmstore", api="python", transport="shm", variant="zc",
              op="get", bytes=16 * bl.MiB, total_clients=1, batch=1)
    mc = best(recs, workload="single", system="mooncake", variant="zc", op="get", bytes=16 * bl.MiB, total_clients=1, batch=1)
    q = ratio(eg, mc)
    rows.append(["16 MiB Get over shm >= 4x Mooncake over tcp (Python API both)",
                 "-" if q is None else "%.2fx (%.2f vs %.2f GB/s)" % (q, eg["gbps"], mc["gbps"]),
                 verdict(None if q is None else q >= 4)])
    # scaling
    sc = []
    for size in sorted({r["bytes"] for r in find(recs, workload="single", system="egmstore",
                                                 total_clients=lambda c: c > 1) if r.get("bytes")}):
        for op in ("get",):
            one = egm_local(recs, workload="single", op=op, bytes=size, total_clients=1, batch=1)[0]
            many = [r for r in find(recs, workload="single", system="egmstore", op=op, bytes=size,
                                    transport="shm", total_clients=lambda c: c > 1)
                    if r.get("api") == (one or {}).get("api")]
            m = max(many, key=lambda r: r.get("ops_s") or 0) if many else None
            q = ratio(m, one)
            if q is not None:
                sc.append("%s %s: %.2fx at %d clients" % (bl.fmt_size(size), op, q, m["total_clients"]))
    rows.append(["Throughput scales with clients until the link or pool bandwidth is reached",
                 "; ".join(sc) or "-", "see the concurrency table" if sc else "not measured"])
    return rows


# ---- plots --------------------------------------------------------------------------------

def series_label(r):
    sysname = {"egmstore": "egmstore", "mooncake": "Mooncake", "redis": "Redis", "ceiling": "ceiling"}.get(r["system"], r["system"])
    api = {"c": "C", "python": "py"}.get(r.get("api"), r.get("api"))
    if r["system"] == "redis":
        return "Redis (tcp)"
    v = variant(r)
    return "%s %s %s%s" % (sysname, api, r.get("transport"), " bytes" if v == "bytes" else "")


def plots(recs, prefix):
    """Draws the PNGs; returns [(title, path)] or raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    # 1. bandwidth vs size per transport, with the ceiling line
    for memory, title in (("host", "host memory"), ("gpu", "GPU memory")):
        single = [r for r in find(recs, workload="single", total_clients=1, batch=1, memory=memory)
                  if r.get("gbps") and r.get("op") in ("put", "get")]
        if not single:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
        for ax, op in zip(axes, ("put", "get")):
            groups = {}
            for r in find(single, op=op):
                groups.setdefault(series_label(r), {})
                cur = groups[series_label(r)].get(r["bytes"])
                if cur is None or r["gbps"] > cur:
                    groups[series_label(r)][r["bytes"]] = r["gbps"]
            for label, pts in sorted(groups.items()):
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], marker="o", label=label)
            ceil = [r for r in find(recs, workload="ceiling", batch=1, op=op_ok(op)) if r.get("gbps")
                    and (r.get("transport") == "cuMemcpy") == (memory == "gpu")]
            if ceil:
                pts = {}
                for r in ceil:
                    pts[r["bytes"]] = max(pts.get(r["bytes"], 0), r["gbps"])
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], "k--", label="ceiling (%s)" % ceil[0].get("transport"))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("object size (bytes)")
            ax.set_title("%s, one client, %s" % (op, title))
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("GB/s")
        axes[1].legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = "%s-bandwidth-%s.png" % (prefix, memory)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(("Bandwidth vs object size (%s)" % title, path))

    # 2. latency: CDF at 4 KiB when samples exist, else p50/p99 bars
    lat = [r for r in find(recs, workload="single", total_clients=1, batch=1, bytes=4 * bl.KiB)
           if r.get("p50_us") and r.get("op") in ("put", "get")]
    if lat:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
        cdf = any(len(r.get("samples_us") or []) > 2 for r in lat)
        for ax, op in zip(axes, ("put", "get")):
            rs = sorted(find(lat, op=op), key=series_label)
            if cdf:
                for r in rs:
                    s = sorted(r.get("samples_us") or [])
                    if len(s) > 2:
                        ax.plot(s, [i / (len(s) - 1) for i in range(len(s))], label=series_label(r))
                    elif r.get("p50_us"):
                        ax.plot([r["p50_us"], r["p99_us"]], [0.5, 0.99], "x", label=series_label(r) + " (p50, p99)")
                ax.set_xscale("log")
                ax.set_xlabel("latency of one call (us)")
                ax.set_title("%s 4 KiB: latency CDF, one client" % op)
            else:
                names = [series_label(r) for r in rs]
                xs = range(len(rs))
                ax.bar([x - 0.2 for x in xs], [r["p50_us"] for r in rs], 0.4, label="p50")
                ax.bar([x + 0.2 for x in xs], [r["p99_us"] for r in rs], 0.4, label="p99")
                ax.set_xticks(list(xs))
                ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
                ax.set_ylabel("us")
                ax.set_title("%s 4 KiB: p50 / p99, one client" % op)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("fraction of calls" if cdf else "us")
        axes[1].legend(fontsize=7, loc="lower right" if cdf else "upper right")
        fig.tight_layout()
        path = "%s-latency-4KiB.png" % prefix
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(("Latency of 4 KiB calls (%s)" % ("CDF" if cdf else "p50/p99"), path))

    # 3. batch throughput vs block size
    batch = [r for r in find(recs, workload="batch", total_clients=1) if r.get("gbps")]
    if batch:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
        for ax, op in zip(axes, ("put", "get")):
            groups = {}
            for r in find(batch, op=op):
                label = series_label(r) + ("" if r["system"] != "redis" else " -P %d" % r["batch"])
                pts = groups.setdefault(label, {})
                pts[r["bytes"]] = max(pts.get(r["bytes"], 0), r["gbps"])
            for label, pts in sorted(groups.items()):
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("block size (bytes)")
            ax.set_title("batch %s: GB/s vs block size" % op)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("GB/s")
        axes[1].legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = "%s-batch.png" % prefix
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(("Batch throughput vs block size", path))

    # 4. ops/s by client count at the small sizes
    conc = [r for r in find(recs, workload="single", batch=1, memory="host",
                            bytes=lambda b: b is not None and SMALL[0] <= b <= SMALL[1]) if r.get("ops_s")]
    counts = sorted({r["total_clients"] for r in conc})
    if len(counts) > 1:
        sizes = sorted({r["bytes"] for r in conc if r["total_clients"] > 1})
        fig, axes = plt.subplots(1, len(sizes) or 1, figsize=(6 * max(1, len(sizes)), 4.5), squeeze=False)
        for ax, size in zip(axes[0], sizes):
            labels, groups = [], {}
            for r in find(conc, bytes=size, op="get"):
                lab = series_label(r) + (" proc" if (r.get("procs") or 1) > 1 else "")
                if variant(r) == "bytes":
                    continue
                groups.setdefault(lab, {})
                groups[lab][r["total_clients"]] = max(groups[lab].get(r["total_clients"], 0), r["ops_s"])
            labels = sorted(groups)
            width = 0.8 / max(1, len(counts))
            for i, n in enumerate(counts):
                ax.bar([x + i * width for x in range(len(labels))], [groups[l].get(n, 0) for l in labels],
                       width, label="%d client%s" % (n, "s" if n > 1 else ""))
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))])
            ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
            ax.set_yscale("log")
            ax.set_ylabel("get ops/s")
            ax.set_title("get %s: ops/s by client count" % bl.fmt_size(size))
            ax.legend(fontsize=7)
            ax.grid(True, axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        path = "%s-concurrency.png" % prefix
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(("Get ops/s by client count", path))
    return made


# ---- main ---------------------------------------------------------------------------------

def load(paths):
    docs, recs = [], []
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        docs.append((p, doc))
        for r in doc.get("results", []):
            r = dict(r)
            r.setdefault("tool", doc.get("tool"))
            # clients are per process (as `egmstore bench data` counts them)
            r["total_clients"] = (r.get("clients") or 1) * (r.get("procs") or 1)
            recs.append(r)
    return docs, recs


def header_lines(docs):
    out = []
    for path, doc in docs:
        m = doc.get("machine") or {}
        gpus = ", ".join("%s (driver %s, CUDA %s)" % (g.get("name"), g.get("driver"), g.get("cuda"))
                         for g in m.get("gpus") or []) or "none"
        out.append("- `%s`: tool %s, commit %s%s, machine %s: %s, %s cores, %.1f GiB, %s; GPUs: %s"
                   % (os.path.basename(path), doc.get("tool"), doc.get("commit"), " (dirty)" if doc.get("dirty") else "",
                      m.get("host"), m.get("cpu"), m.get("cores"), (m.get("memory_bytes") or 0) / bl.GiB,
                      m.get("kernel"), gpus))
        if doc.get("loadavg"):
            la = doc["loadavg"]
            out.append("  - load average (1/5/15 min) at the start %s, at the end %s; the run took %s s"
                       % ("/".join("%.1f" % x for x in la.get("start") or []),
                          "/".join("%.1f" % x for x in la.get("end") or []), doc.get("seconds")))
        for s in doc.get("steps", []):
            out.append("  - step `%s`: %s (%s)%s" % (s["step"], s["status"], s["message"],
                                                     ", %d records" % s["records"] if s.get("records") else ""))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("json", nargs="+", help="schema-1 JSON documents (a suite's, or single tools')")
    ap.add_argument("--md", help="markdown output (default: the first JSON's name with .md)")
    ap.add_argument("--plots-dir", help="folder of the PNGs (default: beside the markdown)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    docs, recs = load(a.json)
    md = a.md or os.path.splitext(a.json[0])[0] + ".md"
    plot_dir = a.plots_dir or os.path.dirname(os.path.abspath(md))
    os.makedirs(plot_dir, exist_ok=True)
    prefix = os.path.join(plot_dir, os.path.splitext(os.path.basename(md))[0])
    ok = [r for r in recs if r.get("op") != "failed"]
    failed = [r for r in recs if r.get("op") == "failed"]

    lines = ["# %s\n" % (a.title or "Benchmark report: " + ", ".join(os.path.basename(p) for p in a.json)),
             "Generated by bench/report.py from:\n"]
    lines += header_lines(docs)
    lines.append("")
    lines.append("GB/s are decimal (1e9 bytes/s); latencies are of one call as the user makes it (a batch "
                 "call is one sample); p50/p99 in microseconds. Errors (failed calls or wrong bytes in a "
                 "verified get) are shown in a cell when not 0, and no ratio is taken of such a figure.\n")
    lines.append("## Goals (issue 7)\n")
    lines.append(table(["goal", "measured", "verdict"], goals(ok)) + "\n")
    for sec in (section_single, section_bytes, section_concurrency, section_batch, section_mixed,
                section_meta, section_gpu, section_other):
        lines += sec(ok)
    if failed:
        lines.append("## Failed measurements\n")
        for r in failed:
            lines.append("- %s %s %s %s: %s" % (r.get("system"), r.get("workload"), r.get("transport"),
                                                bl.fmt_size(r.get("bytes")) if r.get("bytes") else "", r.get("message")))
        lines.append("")
    note = None
    if not a.no_plots:
        try:
            made = plots(ok, prefix)
            if made:
                lines.append("## Plots\n")
                for title, path in made:
                    rel = os.path.relpath(path, os.path.dirname(os.path.abspath(md)))
                    lines.append("### %s\n\n![%s](%s)\n" % (title, title, rel))
        except ImportError as exc:
            note = ("plots not drawn: matplotlib is not importable (%s); install it with "
                    "`.venv/bin/pip install -r python/requirements-bench.txt`" % exc)
            lines.append("*%s.*\n" % note)
    with open(md, "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    print("report: wrote %s%s" % (md, "" if note is None else "; " + note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
