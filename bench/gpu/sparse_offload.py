#!/usr/bin/env python3
"""Sparse-attention offload (issue 7): the whole KV pool lives in the EGM pool, and every decode
step fetches a new random top-k selection of its blocks with one batch get into a bounded HBM
buffer, as Mooncake's EGM RFC describes the use case.

  sparse_offload.py --egmstore BUILD/bin/egmstore --out DIR [--blocks 131072 --block-size 64KiB
                    --topk 2048 --steps 300] [--config nvlink_max_inflight_bytes=8MiB ...]
  sparse_offload.py --egmstore BUILD/bin/egmstore --out DIR --fake-gpu     # no GPU: flow only

It starts `egmstore master` and an `egmstore provider` with an EGM pool (HOST_NUMA memory,
posix_fd handles, nvlink), fills the pool with --blocks blocks put from HBM (each block a
pattern of its id), then runs --steps decode steps: a uniform random selection of --topk blocks
(new each step), one batch_get_into of all of them into an HBM buffer of --topk blocks, a
sample of --verify blocks checked against their pattern (zeroed before the get, so a get that
moved nothing shows). Step latency is one batch call as the engine makes it. The ceiling is a
torch copy of the same bytes (pinned host -> HBM, one contiguous tensor) in the same run.

Writes DIR/sparse.json (schema 1, workload "sparse", docs/benchmarks.md) and DIR/summary.txt;
exits 1 when a check failed (a wrong or missing block, a failed call, the copier's groups not
what the --config bounds give).
"""

import argparse
import os
import random
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpulib  # noqa: E402
from gpulib import benchlib  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--egmstore", required=True, help="the egmstore binary (BUILD/bin/egmstore)")
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument("--pythonpath", default=None,
                   help="folder holding the egmstore package (default BIN/../python)")
    p.add_argument("--device", default="cuda:0", help="the GPU (torch device)")
    p.add_argument("--fake-gpu", action="store_true",
                   help="no GPU: egmstore's fake libcuda.so.1 on LD_LIBRARY_PATH (BUILD/fake-cuda), "
                   "buffers in its device memory, no torch; small defaults; checks the flow only")
    p.add_argument("--blocks", type=int, default=None, help="blocks in the pool (131072; fake 1024)")
    p.add_argument("--block-size", default=None, help="bytes per block (64KiB; fake 16KiB)")
    p.add_argument("--topk", type=int, default=None, help="blocks fetched per step (2048; fake 64)")
    p.add_argument("--steps", type=int, default=None, help="timed decode steps (300; fake 20)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (10; fake 2)")
    p.add_argument("--verify", default="64",
                   help="blocks checked per step, or 'all' (default 64; fake: all)")
    p.add_argument("--fill-batch", type=int, default=2048, help="blocks per put while filling")
    p.add_argument("--pool-size", default="auto",
                   help="EGM pool capacity (auto: the blocks at most 80%% full, whole chunks)")
    p.add_argument("--max-mr-size", default=None, help="pool chunk size (1GiB; fake 16MiB)")
    p.add_argument("--ceiling-reps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="client configuration key for the store (repeatable), e.g. "
                   "nvlink_max_inflight_bytes=8MiB (docs/configuration.md)")
    p.add_argument("--json", default=None, help="the JSON file (default OUT/sparse.json)")
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long: 8192 blocks, top-256, 30 steps (fake: its defaults)")
    a = p.parse_args(argv)
    fake = a.fake_gpu
    if a.smoke and not fake:
        a.blocks, a.topk = a.blocks or 8192, a.topk or 256
        a.steps = a.steps if a.steps is not None else 30
    a.blocks = a.blocks or (1024 if fake else 131072)
    a.block_size = gpulib.parse_size(a.block_size or ("16KiB" if fake else "64KiB"))
    a.topk = a.topk or (64 if fake else 2048)
    a.steps = a.steps if a.steps is not None else (20 if fake else 300)
    a.warmup = a.warmup if a.warmup is not None else (2 if fake else 10)
    a.max_mr_size = gpulib.parse_size(a.max_mr_size or ("16MiB" if fake else "1GiB"))
    if fake and a.verify == "64":
        a.verify = "all"
    a.verify = a.topk if a.verify == "all" else int(a.verify)
    if a.block_size % 8 or a.block_size < 8:
        p.error("--block-size must be a multiple of 8 bytes")
    if not 1 <= a.topk <= a.blocks:
        p.error("--topk must be 1..--blocks")
    if a.steps < 1 or a.verify < 0:
        p.error("--steps >= 1, --verify >= 0")
    a.verify = min(a.verify, a.topk)
    a.store_config = {}
    for kv in a.config:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            p.error("--config %r: expected KEY=VALUE" % kv)
        a.store_config[k.strip()] = v.strip()
    a.json = a.json or os.path.join(a.out, "sparse.json")
    return a


class Checks:
    def __init__(self, say):
        self.say, self.items = say, []

    def __call__(self, name, ok, detail=""):
        self.items.append({"name": name, "ok": bool(ok), "detail": detail})
        self.say("[%s] %s%s" % ("PASS" if ok else "FAIL", name, ": " + detail if detail else ""))
        return ok

    def ok(self):
        return bool(self.items) and all(c["ok"] for c in self.items)


def keys_for(blocks):
    return ["sparse/L0/B%07d" % b for b in range(blocks)]


def fill_pool(a, be, store, names, say):
    """Every block put once from an HBM staging buffer (--fill-batch blocks per call)."""
    B, fb = a.block_size, min(a.fill_batch, a.blocks)
    staging = be.alloc(fb * B)
    store.register_buffer(staging.ptr, staging.nbytes)
    samples, errors, t_all = [], 0, time.perf_counter()
    last = t_all
    for s in range(0, a.blocks, fb):
        ids = list(range(s, min(s + fb, a.blocks)))
        be.fill(staging, B, ids)
        ptrs = [staging.ptr + i * B for i in range(len(ids))]
        t0 = time.perf_counter_ns()
        res = store.batch_put_from([names[b] for b in ids], ptrs, [B] * len(ids))
        samples.append(time.perf_counter_ns() - t0)
        errors += sum(1 for r in res if r is not None)
        if sys.stderr.isatty() and time.perf_counter() - last > 1:
            last = time.perf_counter()
            sys.stderr.write("\r  fill %d/%d blocks" % (s + len(ids), a.blocks))
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    secs = sum(samples) / 1e9
    store.unregister_buffer(staging.ptr)
    say("filled %d blocks of %s (%s) in %.2f s wall, %d failed puts" % (
        a.blocks, gpulib.fmt_size(B), gpulib.fmt_size(a.blocks * B), time.perf_counter() - t_all,
        errors))
    rec = benchlib.record(workload="sparse", system="egmstore", api="python", transport="nvlink",
                          op="put", memory="gpu", bytes=B, batch=fb, dist=None, calls=len(samples),
                          seconds=round(secs, 6), errors=errors, phase="fill",
                          **benchlib.latency_stats(samples))
    rec.pop("samples_us", None)
    return rec, errors


def run_steps(a, be, store, names, say, checks):
    B, K = a.block_size, a.topk
    buf = be.alloc(K * B)
    store.register_buffer(buf.ptr, buf.nbytes)
    rng = random.Random(a.seed)
    ptrs = [buf.ptr + j * B for j in range(K)]
    sizes = [B] * K
    samples, errors, mismatches, verified = [], 0, 0, 0
    per_step_groups = []
    bad_steps = []
    before = gpulib.copy_counters(store)
    last = time.perf_counter()
    for step in range(a.warmup + a.steps):
        sel = rng.sample(range(a.blocks), K)
        keys = [names[b] for b in sel]
        check_pos = sorted(rng.sample(range(K), a.verify)) if a.verify < K else list(range(K))
        be.zero(buf, B, check_pos)
        c0 = gpulib.copy_counters(store) if step == a.warmup else None
        t0 = time.perf_counter_ns()
        res = store.batch_get_into(keys, ptrs, sizes)
        dt = time.perf_counter_ns() - t0
        bad = [r for r in res if r != B]
        if c0 is not None:
            c1 = gpulib.copy_counters(store)
            per_step_groups.append(c1["copy_groups_total"] - c0["copy_groups_total"])
        mism = be.mismatches(buf, B, check_pos, [sel[j] for j in check_pos])
        if step >= a.warmup:
            samples.append(dt)
            errors += len(bad)
            mismatches += mism
            verified += len(check_pos)
            if (bad or mism) and len(bad_steps) < 5:
                bad_steps.append({"step": step, "failed": [repr(r) for r in bad[:3]],
                                  "mismatches": mism})
        if sys.stderr.isatty() and time.perf_counter() - last > 1:
            last = time.perf_counter()
            sys.stderr.write("\r  step %d/%d" % (step + 1, a.warmup + a.steps))
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    after = gpulib.copy_counters(store)
    delta = gpulib.counters_delta(after, before)
    # Control: the check must see a wrong block (the last step's first block against the
    # pattern of another id).
    other = (sel[0] + 1) % a.blocks
    control = be.mismatches(buf, B, [0], [other]) if a.blocks > 1 else None
    store.unregister_buffer(buf.ptr)
    return {"samples": samples, "errors": errors, "mismatches": mismatches, "verified": verified,
            "bad_steps": bad_steps, "copy_delta": delta, "copy_after": after, "control": control,
            "groups_first_timed_step": per_step_groups[0] if per_step_groups else None}


def main(argv=None):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    started = int(time.time() * 1000)
    B, K = a.block_size, a.topk
    data = a.blocks * B
    pool = (gpulib.pool_bytes(data + K * B, a.max_mr_size, a.max_mr_size)
            if a.pool_size == "auto" else gpulib.parse_size(a.pool_size))
    a.pythonpath = a.pythonpath or gpulib.default_pythonpath(a.egmstore)
    cluster = gpulib.Cluster(a, pool, a.max_mr_size)
    say = cluster.say
    checks = Checks(say)
    results, extra = [], {}
    config = {"blocks": a.blocks, "block_bytes": B, "topk": K, "step_bytes": K * B,
              "pool_data_bytes": data, "pool_bytes": pool, "max_mr_size": a.max_mr_size,
              "steps": a.steps, "warmup": a.warmup, "verify_per_step": a.verify,
              "fill_batch": a.fill_batch, "seed": a.seed, "store_config": a.store_config,
              "fake_gpu": a.fake_gpu, "device": "fake" if a.fake_gpu else a.device,
              "egmstore": a.egmstore, "pythonpath": a.pythonpath, "dist": "uniform"}
    say("== sparse-attention offload: %d blocks x %s = %s in the EGM pool (%s capacity, chunks "
        "of %s); each step one batch get of %d random blocks (%s) into an HBM buffer of %d "
        "blocks; %d steps after %d warm-up; %d blocks verified per step%s" % (
            a.blocks, gpulib.fmt_size(B), gpulib.fmt_size(data), gpulib.fmt_size(pool),
            gpulib.fmt_size(a.max_mr_size), K, gpulib.fmt_size(K * B), K, a.steps, a.warmup,
            a.verify, "; store config %s" % a.store_config if a.store_config else ""))
    if a.fake_gpu:
        say("NOTE: --fake-gpu: egmstore's fake CUDA driver (host memory): this checks the flow, "
            "the checks and the records; its figures are not GPU figures")
    store = None
    try:
        import backends

        be = backends.FakeBackend(0) if a.fake_gpu else backends.TorchBackend(a.device)
        extra["gpu"] = be.info
        say("device: %s" % be.name)
        # the ceiling first: nothing else runs yet
        c = be.ceiling_h2d(K * B, a.ceiling_reps)
        cst = benchlib.latency_stats(c["samples_ns"])
        best = min(c["samples_ns"])
        ceil_best = K * B / (best / 1e9) / 1e9
        ceil_p50 = K * B / (cst["p50_us"] / 1e6) / 1e9
        crec = benchlib.record(workload="ceiling", system="ceiling", api="python",
                               transport=c["transport"], op="get", memory="gpu", bytes=K * B,
                               batch=1, calls=len(c["samples_ns"]),
                               seconds=round(sum(c["samples_ns"]) / 1e9, 6), what=c["what"],
                               gbps_best=round(ceil_best, 3), **cst)
        crec.pop("samples_us", None)
        results.append(crec)
        say("ceiling (%s): best %.2f GB/s, p50 %.2f GB/s over %d copies" % (
            c["what"], ceil_best, ceil_p50, len(c["samples_ns"])))

        cluster.start()
        egmstore = gpulib.import_egmstore(a.pythonpath)
        cfg = {"master_server_addr": cluster.addr, "protocol": "nvlink"}
        cfg.update(a.store_config)
        store = egmstore.Store(cfg)
        names = keys_for(a.blocks)
        frec, ferr = fill_pool(a, be, store, names, say)
        results.append(frec)
        checks("pool filled: every block put", ferr == 0, "%d failed puts" % ferr)
        pm = cluster.provider_metrics()
        extra["provider_metrics_after_fill"] = {k: v for k, v in pm.items()
                                                if k.startswith("egm_client_pool")}

        r = run_steps(a, be, store, names, say, checks)
        st = benchlib.latency_stats(r["samples"])
        secs = sum(r["samples"]) / 1e9
        rec = benchlib.record(workload="sparse", system="egmstore", api="python",
                              transport="nvlink", op="get", memory="gpu", bytes=B, batch=K,
                              dist="uniform", calls=len(r["samples"]), seconds=round(secs, 6),
                              errors=r["errors"] + r["mismatches"], phase="decode",
                              pool_blocks=a.blocks, verified_blocks=r["verified"],
                              mismatches=r["mismatches"], ceiling_gbps=round(ceil_best, 3),
                              store_config=a.store_config, copy=r["copy_delta"], **st)
        rec["pct_of_ceiling"] = round(100 * rec["gbps_p50"] / ceil_best, 1) if ceil_best else None
        rec["samples_us"] = st["samples_us"]
        results.append(rec)
        steps = len(r["samples"])
        say("decode steps: p50 %.1f us, p99 %.1f us, max %.1f us per step of %s; %.2f GB/s at the "
            "p50 (%.0f%% of the ceiling), %.2f GB/s mean; %d failed gets, %d of %d verified "
            "blocks wrong" % (st["p50_us"], st["p99_us"], st["max_us"], gpulib.fmt_size(K * B),
                              rec["gbps_p50"], rec["pct_of_ceiling"] or 0, rec["gbps"],
                              r["errors"], r["mismatches"], r["verified"]))
        d = r["copy_delta"]
        say("copier per step: %.2f groups, %.2f kernel launches, %.2f batch calls, %.2f engine "
            "copies, %.2f chunks" % tuple(
                d.get(k, 0) / max(1, steps + a.warmup)
                for k in ("copy_groups_total", "copy_kernel_launches_total",
                          "copy_batch_calls_total", "copy_engine_copies_total",
                          "copy_chunks_total")))
        checks("every get answered its block size", r["errors"] == 0,
               "%d failed of %d" % (r["errors"], steps * K) +
               ("; first: %s" % r["bad_steps"][:2] if r["bad_steps"] else ""))
        checks("verified blocks hold their pattern", r["mismatches"] == 0 and r["verified"] > 0,
               "%d of %d wrong" % (r["mismatches"], r["verified"]))
        checks("control: a block checked against another block's pattern is caught",
               r["control"] == 1, "mismatches %s (want 1)" % r["control"])
        bound = gpulib.parse_size(a.store_config.get("nvlink_max_inflight_bytes", "0"))
        chunk = gpulib.parse_size(a.store_config.get("nvlink_chunk_size", "0"))
        want = gpulib.expected_groups(B, K, bound, chunk)
        got = r["groups_first_timed_step"]
        checks("copier groups per step as the bounds give", got == want,
               "%s groups in a step, %d expected (nvlink_max_inflight_bytes %s, "
               "nvlink_chunk_size %s)" % (got, want, gpulib.fmt_size(bound) if bound else "0",
                                          gpulib.fmt_size(chunk) if chunk else "0"))
        store.close()
        store = None
        codes = cluster.stop()
        checks("provider and master exit 0 on SIGTERM", all(v == 0 for v in codes.values()),
               str(codes))
    except SystemExit:
        raise
    except Exception as e:  # a daemon not ready, a store error: a failed run
        traceback.print_exc()
        checks("benchmark ran to the end", False, "%s: %s" % (type(e).__name__, e))
    finally:
        if store is not None:
            try:
                store.close()
            except Exception:
                pass
        cluster.kill()
    doc = benchlib.document("sparse_offload.py", config, results, started, checks=checks.items,
                            ok=checks.ok(), **extra)
    gpulib.write_results(a, doc, render, say)
    return 0 if checks.ok() else 1


def render(doc):
    c = doc["config"]
    out = ["sparse-attention offload: %d blocks x %s in the EGM pool, top-%d per step (%s), "
           "%s" % (c["blocks"], gpulib.fmt_size(c["block_bytes"]), c["topk"],
                   gpulib.fmt_size(c["step_bytes"]),
                   "FAKE GPU (flow only, not a measurement)" if c["fake_gpu"] else
                   doc.get("gpu", {}).get("name", c["device"]))]
    if c["store_config"]:
        out.append("store config: %s" % c["store_config"])
    out.append("%-8s %-6s %10s %10s %10s %10s %9s %7s" % (
        "workload", "op", "p50 us", "p99 us", "GB/s p50", "GB/s mean", "%ceil", "errors"))
    for r in doc["results"]:
        out.append("%-8s %-6s %10s %10s %10s %10s %9s %7s" % (
            r["workload"], r["op"], r.get("p50_us"), r.get("p99_us"),
            "%.2f" % r["gbps_p50"] if r.get("gbps_p50") else "-",
            "%.2f" % r["gbps"] if r.get("gbps") else "-",
            "%.1f%%" % r["pct_of_ceiling"] if r.get("pct_of_ceiling") else "-", r["errors"]))
    for ch in doc.get("checks", []):
        out.append("[%s] %s%s" % ("PASS" if ch["ok"] else "FAIL", ch["name"],
                                  ": " + ch["detail"] if ch["detail"] else ""))
    out.append("result: %s" % ("PASS" if doc.get("ok") else "FAIL"))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
