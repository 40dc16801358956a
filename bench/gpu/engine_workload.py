#!/usr/bin/env python3
"""The engine workload against the link's ceiling (issue 17): the calls vLLM, SGLang and LMCache
make through Mooncake's API (../shared/reference/engines.md), from a writer process and a reader
process, each figure next to the HBM <-> pinned-host ceiling measured in the same run, every byte
checked, and the client's phase breakdown (egm_client_{put,get}_*_seconds_total) per case.

    python3 bench/gpu/engine_workload.py --egmstore build/bin/egmstore --out OUT [--quick]

Cases (both processes are warm unless named "first"):
  vllm-N      vLLM 0.33's pattern: one key per block, 64 pieces of 32 KiB each (32 layers x K,V
              regions), batch_put_from_multi_buffers / batch_get_into_multi_buffers, N keys a call
  kv-medium   tests/gpu/kv_scenario medium's shape: 1024 keys x 2 pieces x 32 KiB in one call
  batch-64k   8192 x 64 KiB, one batch_put_from / batch_get_into
  single-16m  put_from / get_into of 16 MiB
  lat-4k      4 KiB get_into latency: a hot key (the same key again) and cold keys (each once),
              and cold keys each looked up first (is_exist, as LMCache does before it reads)
  first       the writer's and reader's very first calls (16 keys x 2 MiB multi-buffer, then
              single 2 MiB puts/gets) against the same calls warm
  host-64k    256 x 64 KiB batches from / into a registered pinned host buffer (SGLang, LMCache)
Every get case (but lat-4k) runs twice, on keys written for each: as it is, and "looked up": each
call preceded by the lookup engines make before they read (batch_is_exist, or is_exist for one key),
timed apart; its rows give the get alone and the lookup plus the get.
The master and an EGM-pool provider are started here (gpulib.Cluster). Needs torch and a GPU.
Writes OUT/engine_workload.json and prints a table.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PIECE = 32 * KiB  # one layer's K (or V) of one 16-token block: 8 heads x 128 x 16 x bf16
REGIONS = 64  # 32 layers x K, V
SLOTS = 512  # blocks per region in each process (16 MiB a region, 1 GiB in all)
FLAT = 640 * MiB  # the flat buffer: 8192 x 64 KiB, 16 MiB singles, 4 KiB objects
PHASES = ("call", "rpc", "transfer", "place", "log")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--egmstore", required=True, help="BUILD/bin/egmstore")
    p.add_argument("--pythonpath", help="egmstore package folder (default BUILD/python)")
    p.add_argument("--out", required=True)
    p.add_argument("--pool", default="16GiB", help="EGM pool size (default 16GiB)")
    p.add_argument("--chunk", default="1GiB", help="pool chunk (max_mr_size)")
    p.add_argument("--reps", type=int, default=5, help="timed calls per case and size")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    p.add_argument("--device", default="cuda:0", help="the writer's GPU")
    p.add_argument("--reader-device", default=None, help="the reader's GPU (default: the writer's)")
    p.add_argument("--cases", default="first,vllm,kv-medium,batch-64k,single-16m,lat-4k,host-64k")
    p.add_argument("--client-config", action="append", default=[], metavar="KEY=VALUE",
                   help="an egmstore configuration key for the writer and reader (setup's dict "
                        "form; docs/configuration.md), e.g. rpc_spin_us=50; repeatable")
    p.add_argument("--master-arg", action="append", default=[], metavar="ARG",
                   help="an argument added to the master's command line, e.g. "
                        "--master-arg=--rpc-server-spin-us=200; repeatable")
    p.add_argument("--role", choices=("writer", "reader"), help=argparse.SUPPRESS)
    p.add_argument("--master", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---- the two worker processes ---------------------------------------------------------------


class Worker:
    """One process's store and buffers: REGIONS regions of SLOTS blocks of PIECE bytes (the KV
    cache), a flat buffer, a pinned host buffer; every block filled with, or checked against, the
    pattern of an id (word i of block `id` is (id << 32) + i)."""

    def __init__(self, a):
        import torch

        self.t = torch
        self.dev = torch.device(a.device)
        torch.cuda.set_device(self.dev)
        sys.path.insert(0, a.pythonpath)
        from egmstore.mooncake import MooncakeDistributedStore, ReplicateConfig

        self.rc = ReplicateConfig()
        self.store = MooncakeDistributedStore()
        # setup's dict form: the engines' seven keys plus egmstore's own (--client-config).
        self.setup_config = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                             "global_segment_size": "0", "local_buffer_size": "0",
                             "protocol": "nvlink", "master_server_addr": a.master}
        for kv in a.client_config:
            key, _, value = kv.partition("=")
            self.setup_config[key] = value
        self.regions = [torch.zeros(SLOTS * PIECE // 8, dtype=torch.int64, device=self.dev)
                        for _ in range(REGIONS)]
        self.flat = torch.zeros(FLAT // 8, dtype=torch.int64, device=self.dev)
        self.host = torch.zeros(256 * 64 * KiB // 8, dtype=torch.int64).pin_memory()
        self.base = {}
        torch.cuda.synchronize()
        self.started = False

    def start(self):
        """setup() and register_buffer() of every buffer: their wall time."""
        t0 = time.perf_counter()
        rc = self.store.setup(self.setup_config)
        t1 = time.perf_counter()
        if rc != 0:
            raise RuntimeError(f"setup returned {rc}")
        for b in self.regions + [self.flat, self.host]:
            rc = self.store.register_buffer(b.data_ptr(), b.numel() * 8)
            if rc != 0:
                raise RuntimeError(f"register_buffer returned {rc}")
        self.started = True
        return {"setup_s": t1 - t0, "register_s": time.perf_counter() - t1}

    def _arange(self, words, device):
        k = (words, str(device))
        if k not in self.base:
            self.base[k] = self.t.arange(words, dtype=self.t.int64, device=device)
        return self.base[k]

    def _expected(self, ids, words, device):
        ids_t = self.t.tensor(ids, dtype=self.t.int64, device=device)
        return self._arange(words, device).unsqueeze(0) + (ids_t << 32).unsqueeze(1)

    def _rows(self, tensor, block):
        return tensor.view(-1, block // 8)

    def fill(self, blocks):
        """blocks: [(tensor, block bytes, row, id)] grouped by (tensor, block): pattern in."""
        for (tensor, block), rows in self._group(blocks).items():
            pos = self.t.tensor([r for r, _ in rows], dtype=self.t.int64, device=tensor.device)
            self._rows(tensor, block).index_copy_(0, pos, self._expected([i for _, i in rows], block // 8, tensor.device))
        self.t.cuda.synchronize()

    def zero(self, blocks):
        for (tensor, block), rows in self._group(blocks).items():
            pos = self.t.tensor([r for r, _ in rows], dtype=self.t.int64, device=tensor.device)
            self._rows(tensor, block).index_fill_(0, pos, 0)
        self.t.cuda.synchronize()

    def bad(self, blocks):
        """How many blocks differ from their pattern."""
        n = 0
        for (tensor, block), rows in self._group(blocks).items():
            pos = self.t.tensor([r for r, _ in rows], dtype=self.t.int64, device=tensor.device)
            got = self._rows(tensor, block).index_select(0, pos)
            exp = self._expected([i for _, i in rows], block // 8, tensor.device)
            n += int((got != exp).any(dim=1).sum().item())
        return n

    @staticmethod
    def _group(blocks):
        out = {}
        for tensor, block, row, ident in blocks:
            out.setdefault((id(tensor), block), (tensor, block, []))[2].append((row, ident))
        return {(v[0], v[1]): v[2] for v in out.values()}

    def metrics(self):
        text = self.store._c.metrics()
        vals = {}
        for line in text.splitlines():
            if line.startswith("egm_client_") and " " in line:
                name, _, value = line.rpartition(" ")
                vals[name] = float(value)
        return vals

    def ptr(self, tensor, block, row):
        return tensor.data_ptr() + row * block


def ident_of(case, rep, k):
    """The same number in writer and reader (Python's hash() of a str differs per process)."""
    return zlib.crc32(f"{case}/{rep}/{k}".encode())


def layout(w, case, n, rep, reader):
    """Keys of one call and their blocks: (keys, ptrs per key, sizes per key, blocks to fill or
    check). The reader uses other slots than the writer (a copy that reads its own buffer fails
    the check)."""
    def slot(i, span):
        return (span - 1 - i) if reader else i

    keys, ptrs, sizes, blocks = [], [], [], []
    if case.startswith("vllm") or case == "first":
        for k in range(n):
            key = f"{case}/r{rep}/blk{k}"
            s = slot(k, SLOTS)
            ident = (ident_of(case, rep, k) & 0xFFFFFF) << 6
            keys.append(key)
            ptrs.append([w.ptr(w.regions[r], PIECE, s) for r in range(REGIONS)])
            sizes.append([PIECE] * REGIONS)
            blocks += [(w.regions[r], PIECE, s, ident + r) for r in range(REGIONS)]
    elif case == "kv-medium":
        for k in range(n):
            layer, s = k % 32, slot(k // 32, SLOTS)
            ident = (ident_of(case, rep, k) & 0xFFFFFF) << 6
            keys.append(f"{case}/r{rep}/L{layer}/B{k // 32}")
            ptrs.append([w.ptr(w.regions[2 * layer + h], PIECE, s) for h in (0, 1)])
            sizes.append([PIECE, PIECE])
            blocks += [(w.regions[2 * layer + h], PIECE, s, ident + h) for h in (0, 1)]
    else:
        block = {"batch-64k": 64 * KiB, "single-16m": 16 * MiB, "lat-4k": 4 * KiB,
                 "host-64k": 64 * KiB, "first-single": 2 * MiB}[case]
        tensor = w.host if case == "host-64k" else w.flat
        span = tensor.numel() * 8 // block
        for k in range(n):
            s = slot(k, span)
            keys.append(f"{case}/r{rep}/{k}")
            ptrs.append(w.ptr(tensor, block, s))
            sizes.append(block)
            blocks.append((tensor, block, s, ident_of(case, rep, k) & 0x7FFFFFFF))
    return keys, ptrs, sizes, blocks


def call(w, op, case, keys, ptrs, sizes):
    """One timed store call: (seconds, ok keys, codes that were not ok)."""
    s = w.store
    multi = isinstance(ptrs[0], list)
    t0 = time.perf_counter()
    if op == "put":
        if multi:
            codes = s.batch_put_from_multi_buffers(keys, ptrs, sizes, w.rc)
        elif len(keys) == 1 and case != "host-64k":
            codes = [s.put_from(keys[0], ptrs[0], sizes[0], w.rc)]
        else:
            codes = s.batch_put_from(keys, ptrs, sizes, w.rc)
        dt = time.perf_counter() - t0
        ok = sum(1 for c in codes if c == 0)
    else:
        if multi:
            codes = s.batch_get_into_multi_buffers(keys, ptrs, sizes)
        elif len(keys) == 1 and case != "host-64k":
            codes = [s.get_into(keys[0], ptrs[0], sizes[0])]
        else:
            codes = s.batch_get_into(keys, ptrs, sizes)
        dt = time.perf_counter() - t0
        ok = sum(1 for c in codes if c > 0)
    return dt, ok, sorted({c for c in codes if (c != 0 if op == "put" else c <= 0)})


def phases_delta(before, after, op):
    # a get has no place or log phase (0)
    d = {p: after.get(f"egm_client_{op}_{p}_seconds_total", 0) - before.get(f"egm_client_{op}_{p}_seconds_total", 0)
         for p in PHASES}
    d["copy_run"] = after.get("egm_client_te_copy_run_seconds_total", 0) - before.get(
        "egm_client_te_copy_run_seconds_total", 0)
    d["calls"] = after.get(f"egm_client_{op}_calls_total", 0) - before.get(f"egm_client_{op}_calls_total", 0)
    return d


def master_rpc(cluster):
    """The master's RPC counters: {type: (requests, seconds handling them)}."""
    import gpulib

    code, body = cluster.run.http(cluster.master_http_port, "/metrics")
    if code != 200:
        return {}
    out = {}
    for name, v in gpulib.prom(body).items():
        m = re.match(r'egm_master_rpc_duration_seconds_(count|sum)\{type="([^"]+)"\}$', name)
        if m:
            n, s = out.get(m.group(2), (0, 0.0))
            out[m.group(2)] = (v, s) if m.group(1) == "count" else (n, v)
    return out


def master_rpc_delta(before, after, calls):
    """Per call of the case: each RPC type's requests and the master's ms handling them."""
    d = {}
    for t, (n, s) in after.items():
        n0, s0 = before.get(t, (0, 0.0))
        if n > n0:
            d[t] = {"requests_per_call": (n - n0) / calls, "ms_per_call": (s - s0) * 1e3 / calls}
    return d


def lookup(w, keys):
    """The lookup engines make before a read: (seconds, keys found)."""
    t0 = time.perf_counter()
    if len(keys) == 1:
        found = [w.store.is_exist(keys[0])]
    else:
        found = w.store.batch_is_exist(keys)
    return time.perf_counter() - t0, sum(1 for c in found if c == 1)


def run_case(w, op, case, n, reps, first_rep=0, looked_up=False):
    """reps calls of n keys (rep numbers first_rep..): per-call seconds, checks, phases. looked_up
    (gets): each call preceded by lookup(), timed apart; a key it misses counts as not ok."""
    times, lookups, bad, ok, codes, per_call = [], [], 0, 0, set(), []
    before = w.metrics()
    for rep in range(first_rep, first_rep + reps):
        keys, ptrs, sizes, blocks = layout(w, case, n, rep, reader=(op == "get"))
        if op == "put":
            w.fill(blocks)
        else:
            w.zero(blocks)
        found = n
        if looked_up:
            dt, found = lookup(w, keys)
            lookups.append(dt)
        m0 = w.metrics()
        dt, k_ok, k_codes = call(w, op, case, keys, ptrs, sizes)
        times.append(dt)
        ph = phases_delta(m0, w.metrics(), op)
        per_call.append({k: ph[k] for k in PHASES + ("copy_run",)})
        ok += min(k_ok, found)
        codes |= set(k_codes)
        if op == "get":
            bad += w.bad(blocks)
    nbytes = sum(sum(s) if isinstance(s, list) else s for s in layout(w, case, n, 0, False)[2])
    r = {"case": case, "op": op, "keys": n, "bytes_per_call": nbytes, "calls": reps,
         "seconds": times, "ok_keys": ok, "expected_keys": n * reps, "bad_blocks": bad,
         "codes": sorted(codes), "phases": phases_delta(before, w.metrics(), op),
         "per_call_phases": per_call}
    if looked_up:
        r["lookup_seconds"] = lookups
    return r


def latency(w, op, case, hot, rep=0, looked_up=False):
    """4 KiB: the writer puts 1000 objects a rep (reps 0 and 1); the reader gets one key 2000
    times (hot) or each of the 1000 of a rep once (cold), looked_up: each just after is_exist
    (timed apart; the lookup plus the get also reported)."""
    if op == "put":
        return run_case(w, "put", "lat-4k", 1000, 2)
    keys, ptrs, sizes, blocks = layout(w, "lat-4k", 1000, rep, reader=True)
    samples, both, bad = [], [], 0
    s = w.store
    order = [0] * 2001 if hot else list(range(1000))
    for j, k in enumerate(order):
        t0 = time.perf_counter_ns()
        if looked_up and s.is_exist(keys[k]) != 1:
            bad += 1
        t1 = time.perf_counter_ns()
        rc = s.get_into(keys[k], ptrs[k], sizes[k])
        t2 = time.perf_counter_ns()
        if rc != 4 * KiB:
            bad += 1
        if not (hot and j == 0):
            samples.append((t2 - t1) / 1e3)
            both.append((t2 - t0) / 1e3)
    bad += w.bad(blocks if not hot else blocks[:1])
    samples.sort()
    both.sort()
    r = {"case": case, "op": "get", "samples": len(samples), "bad": bad,
         "p50_us": samples[len(samples) // 2], "p99_us": samples[int(len(samples) * 0.99)]}
    if looked_up:
        r["lookup_and_get_p50_us"] = both[len(both) // 2]
        r["lookup_and_get_p99_us"] = both[int(len(both) * 0.99)]
    return r


def worker_main(a):
    w = Worker(a)
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints never mix into the protocol
    for line in sys.stdin:
        req = json.loads(line)
        try:
            res = serve(w, a.role, req)
        except Exception as e:  # reported, the run goes on
            res = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(res) + "\n")
        out.flush()
        if req["what"] == "exit":
            break
    if w.started:
        w.store.close()


def serve(w, role, req):
    what, op = req["what"], ("put" if role == "writer" else "get")
    if what == "exit":
        return {}
    if what == "first":
        # The process's very first calls, before anything was mapped: start, then 16 x 2 MiB
        # multi-buffer, then 4 single 2 MiB calls; the same again warm.
        t = w.start()
        res = {"start": t}
        res["first_multi"] = run_case(w, op, "first", 16, 1, 0)
        res["first_single"] = run_case(w, op, "first-single", 1, 4, 0)
        res["warm_multi"] = run_case(w, op, "first", 16, 1, 1)
        res["warm_single"] = run_case(w, op, "first-single", 1, 4, 4)
        # A warm call after the process sat idle for a second, as the first calls do while
        # the harness starts the other process: what idling alone costs (wake-ups, caches).
        time.sleep(1.0)
        res["idle_single"] = run_case(w, op, "first-single", 1, 1, 8)
        return res
    if not w.started:
        w.start()
    if what == "lat-4k":
        if op == "put":
            return {"put": latency(w, "put", "lat-4k", False)}
        return {"hot": latency(w, "get", "lat-4k hot", True),
                "cold": latency(w, "get", "lat-4k cold", False),
                "cold_looked_up": latency(w, "get", "lat-4k cold, looked up", False, 1, True)}
    return run_case(w, op, what, req["keys"], req["reps"], req.get("first_rep", 0),
                    req.get("looked_up", False))


# ---- the driver -----------------------------------------------------------------------------


class Proc:
    def __init__(self, a, role, device):
        argv = [sys.executable, os.path.abspath(__file__), "--role", role, "--master", a.master_addr,
                "--egmstore", a.egmstore, "--out", a.out, "--pythonpath", a.pythonpath,
                "--device", device]
        for kv in a.client_config:
            argv += ["--client-config", kv]
        self.log = open(os.path.join(a.out, f"{role}.log"), "w")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, text=True)

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited ({self.log.name})")
        return json.loads(line)

    def close(self):
        try:
            self.ask({"what": "exit"})
        except Exception:
            pass
        self.p.wait(60)


def ceiling(device, nbytes=256 * MiB):
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def best(fn):
        fn()
        torch.cuda.synchronize(device)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize(device)
            ts.append(time.perf_counter() - t0)
        return nbytes / min(ts) / 1e9

    d2h = best(lambda: host.copy_(src, non_blocking=True))
    h2d = best(lambda: src.copy_(host, non_blocking=True))
    del src, host
    torch.cuda.empty_cache()
    return {"bytes": nbytes, "put_GBps": d2h, "get_GBps": h2d,
            "what": "torch copy HBM -> pinned host (put's direction), pinned host -> HBM (get's)"}


def host_memcpy_ceiling(nbytes=256 * MiB):
    import torch

    a = torch.ones(nbytes, dtype=torch.uint8).pin_memory()
    b = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    b.copy_(a)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        ts.append(time.perf_counter() - t0)
    return nbytes / min(ts) / 1e9


def summarize(r, ceil_GBps):
    if "seconds" not in r:
        return r
    ts = r["seconds"]
    r["GBps_median"] = r["bytes_per_call"] / statistics.median(ts) / 1e9
    r["GBps_best"] = r["bytes_per_call"] / min(ts) / 1e9
    r["ceiling_share"] = r["GBps_median"] / ceil_GBps if ceil_GBps else None
    r["correct"] = r["ok_keys"] == r["expected_keys"] and r["bad_blocks"] == 0
    ph, calls = r["phases"], max(1, r["phases"]["calls"])
    r["per_call_ms"] = {p: ph[p] / calls * 1e3 for p in PHASES + ("copy_run",)}
    r["per_call_ms"]["client_and_gaps"] = (ph["call"] - sum(ph[p] for p in PHASES[1:])) / calls * 1e3
    r["per_call_ms"]["routing_in_transfer"] = (ph["transfer"] - ph["copy_run"]) / calls * 1e3
    if r.get("per_call_phases"):
        # The call of median time, whole: its phases (ms), and what the binding and Python added.
        i = sorted(range(len(ts)), key=lambda k: ts[k])[len(ts) // 2]
        m = {p: v * 1e3 for p, v in r["per_call_phases"][i].items()}
        m["seconds"] = ts[i] * 1e3
        m["binding"] = m["seconds"] - m["call"]
        r["median_call_ms"] = m
    if "lookup_seconds" in r:
        both = [g + l for g, l in zip(ts, r["lookup_seconds"])]
        r["lookup_ms_median"] = statistics.median(r["lookup_seconds"]) * 1e3
        r["GBps_with_lookup_median"] = r["bytes_per_call"] / statistics.median(both) / 1e9
        r["ceiling_share_with_lookup"] = r["GBps_with_lookup_median"] / ceil_GBps if ceil_GBps else None
    return r


def main(argv=None):
    a = parse_args(argv)
    if a.role:
        return worker_main(a)
    import gpulib

    os.makedirs(a.out, exist_ok=True)
    a.pythonpath = a.pythonpath or gpulib.default_pythonpath(a.egmstore)
    reps = 2 if a.quick else a.reps
    cluster = gpulib.Cluster(a, gpulib.parse_size(a.pool), gpulib.parse_size(a.chunk),
                             master_args=a.master_arg, master_http=True).start()
    a.master_addr = cluster.addr
    doc = {"tool": "bench/gpu/engine_workload.py", "argv": sys.argv[1:], "results": []}
    ceil = ceiling(a.device)
    ceil["host_memcpy_GBps"] = host_memcpy_ceiling()
    doc["ceiling"] = ceil
    print(f"ceiling: put {ceil['put_GBps']:.1f} GB/s, get {ceil['get_GBps']:.1f} GB/s, pinned "
          f"host memcpy {ceil['host_memcpy_GBps']:.1f} GB/s", flush=True)
    writer = Proc(a, "writer", a.device)
    reader = Proc(a, "reader", a.reader_device or a.device)
    cases = a.cases.split(",")
    try:
        for case in cases:
            if case == "first":
                wres, rres = writer.ask({"what": "first"}), reader.ask({"what": "first"})
                doc["first"] = {"writer": wres, "reader": rres}
                for side in (wres, rres):
                    for k in ("first_multi", "first_single", "warm_multi", "warm_single", "idle_single"):
                        if k in side:
                            summarize(side[k], None)
                continue
            if case == "lat-4k":
                wres, rres = writer.ask({"what": case}), reader.ask({"what": case})
                doc["results"] += [wres.get("put", wres), rres.get("hot", rres), rres.get("cold", rres),
                                   rres.get("cold_looked_up", rres)]
                continue
            sizes = {"vllm": [16, 64, 256], "kv-medium": [1024], "batch-64k": [8192],
                     "single-16m": [1], "host-64k": [256]}[case]
            for n in sizes:
                name = f"vllm-{n}" if case == "vllm" else case
                r = 10 if case == "single-16m" else reps
                what = "vllm" if case == "vllm" else case
                m0 = master_rpc(cluster)
                wres = writer.ask({"what": what, "keys": n, "reps": r})
                m1 = master_rpc(cluster)
                rres = reader.ask({"what": what, "keys": n, "reps": r})
                m2 = master_rpc(cluster)
                # Again on keys of their own, each get after the engines' lookup.
                wres2 = writer.ask({"what": what, "keys": n, "reps": r, "first_rep": r})
                m3 = master_rpc(cluster)
                lres = reader.ask({"what": what, "keys": n, "reps": r, "first_rep": r, "looked_up": True})
                m4 = master_rpc(cluster)
                for res, (b, e) in ((wres, (m0, m1)), (rres, (m1, m2)), (lres, (m3, m4))):
                    if "error" not in res:
                        res["master_rpc"] = master_rpc_delta(b, e, r)
                host = case == "host-64k"
                for res, ceil_key in ((wres, "put_GBps"), (rres, "get_GBps"), (lres, "get_GBps")):
                    res["name"] = name
                    summarize(res, ceil["host_memcpy_GBps"] if host else ceil[ceil_key])
                    doc["results"].append(res)
                if "error" in wres2:
                    doc["results"].append(dict(wres2, name=name))
    finally:
        writer.close()
        reader.close()
        # The master's own counters at the end (evictions, slabs, RPC times), for diagnosis.
        code, body = cluster.run.http(cluster.master_http_port, "/metrics")
        if code == 200:
            with open(os.path.join(a.out, "master-metrics.txt"), "w") as f:
                f.write(body)
        doc["daemons_exit"] = cluster.stop()
    with open(os.path.join(a.out, "engine_workload.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(render(doc))
    bad = [r for r in doc["results"] if r.get("correct") is False or r.get("bad") or "error" in r]
    return 1 if bad else 0


def render(doc):
    lines = ["| case | op | keys | GB/s (median) | share of ceiling | ok | per call ms: call / rpc / transfer / copy run / place / log / client+gaps |",
             "|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        if "error" in r:
            lines.append(f"| {r.get('name', '?')} | | | error: {r['error']} | | | |")
        elif "p50_us" in r:
            lines.append(f"| {r['case']} | get | 1 | p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us | | {'yes' if not r['bad'] else 'NO'} | |")
            if "lookup_and_get_p50_us" in r:
                lines.append(f"| {r['case']} | lookup+get | 1 | p50 {r['lookup_and_get_p50_us']:.1f} us, "
                             f"p99 {r['lookup_and_get_p99_us']:.1f} us | | | |")
        elif "GBps_median" in r:
            pc = r["per_call_ms"]
            share = f"{100 * r['ceiling_share']:.0f}%" if r.get("ceiling_share") else ""
            codes = "" if not r["codes"] else f" codes {r['codes']}"
            op = r["op"] + (", looked up" if "lookup_seconds" in r else "")
            lines.append(f"| {r.get('name', r['case'])} | {op} | {r['keys']} | {r['GBps_median']:.2f} | {share} | "
                         f"{'yes' if r['correct'] else 'NO'}{codes} | {pc['call']:.3f} / {pc['rpc']:.3f} / {pc['transfer']:.3f} / "
                         f"{pc['copy_run']:.3f} / {pc['place']:.3f} / {pc['log']:.3f} / {pc['client_and_gaps']:.3f} |")
            if r.get("median_call_ms"):
                m = r["median_call_ms"]
                lines.append(f"| {r.get('name', r['case'])} | {op}: median call | | | | | python {m['seconds']:.3f} = "
                             f"binding {m['binding']:.3f} + call {m['call']:.3f} (rpc {m['rpc']:.3f}, transfer "
                             f"{m['transfer']:.3f}, copy run {m['copy_run']:.3f}) |")
            if r.get("master_rpc"):
                parts = ", ".join(f"{t} {v['requests_per_call']:.2f} x, {v['ms_per_call']:.3f} ms"
                                  for t, v in sorted(r["master_rpc"].items()))
                lines.append(f"| {r.get('name', r['case'])} | {op}: master | | | | | per call: {parts} |")
            if "lookup_seconds" in r:
                share = f"{100 * r['ceiling_share_with_lookup']:.0f}%" if r.get("ceiling_share_with_lookup") else ""
                lines.append(f"| {r.get('name', r['case'])} | lookup+get | {r['keys']} | {r['GBps_with_lookup_median']:.2f} | "
                             f"{share} | | lookup {r['lookup_ms_median']:.3f} ms (median) |")
    first = doc.get("first")
    if first:
        for side, res in first.items():
            if "error" in res:
                lines.append(f"first calls, {side}: error {res['error']}")
                continue
            st = res["start"]
            fm, wm = res["first_multi"], res["warm_multi"]
            fs, ws = res["first_single"], res["warm_single"]
            lines.append(f"first calls, {side}: setup {st['setup_s'] * 1e3:.0f} ms, register {st['register_s'] * 1e3:.0f} ms; "
                         f"16 x 2 MiB multi-buffer first {fm['seconds'][0] * 1e3:.1f} ms vs warm {wm['seconds'][0] * 1e3:.1f} ms; "
                         f"single 2 MiB first {fs['seconds'][0] * 1e3:.2f} ms (max {max(fs['seconds']) * 1e3:.2f}) vs warm "
                         f"{statistics.median(ws['seconds']) * 1e3:.2f} ms; correct {fm['correct'] and fs['correct']}")
            idle = res.get("idle_single")
            if idle:
                lines.append(f"first calls, {side}: single 2 MiB rpc ms: first {fs['per_call_phases'][0]['rpc'] * 1e3:.3f}, "
                             f"warm {statistics.median(p['rpc'] for p in ws['per_call_phases']) * 1e3:.3f}; "
                             f"a warm call after 1 s idle {idle['seconds'][0] * 1e3:.2f} ms "
                             f"(rpc {idle['per_call_phases'][0]['rpc'] * 1e3:.3f}); correct {idle['correct']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
