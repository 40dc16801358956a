#!/usr/bin/env python3
"""Interference between the store's GPU traffic and collective traffic (issue 7): a collective
loop runs while KV Put/Get traffic flows through egmstore (nvlink, EGM pool), for each setting
of the store's pressure keys (unbounded; bounded in-flight bytes; chunks; low-priority stream).
Reported per setting: the collective's latency p50/p99 alone and with KV traffic, and the KV
throughput alone and with the collective.

  interference.py --egmstore BUILD/bin/egmstore --out DIR            # auto: nccl on 2+ GPUs
  interference.py ... --mode nccl --gpus 0,1      # torch.distributed, 2 processes, NCCL all-reduce
  interference.py ... --mode d2d-proxy --gpus 0   # one GPU: NOT NCCL (see below)
  interference.py ... --fake-gpu                  # no GPU: flow only (cpu-proxy)

Collectives:
  nccl       an NCCL all-reduce of --collective-bytes across two GPUs (one process each,
             torch.distributed), NCCL_NVLS_ENABLE=0, on a high-priority NCCL stream unless
             --collective-priority default.
  d2d-proxy  ONE GPU: NCCL cannot run two ranks on one device, and a world-size-1 process group
             moves nothing. Stands in: a device-to-device copy of --collective-bytes on a separate
             stream of the greatest priority. It is NOT an all-reduce and NOT NCCL: no NVLink, no
             reduction kernel; it shows only how the store's copies slow another stream's work on
             the same GPU.
  cpu-proxy  --fake-gpu: a memmove between two fake-driver buffers; checks the flow, the records
             and the pressure keys' effect on the copier, never a speed.

Each KV worker (a thread in each collective process, sharing its CUDA context, as an inference
engine's would) loops: one batch get of --kv-batch random blocks of --kv-block from its working
set into an HBM buffer, one batch put of that buffer to fresh keys, one batch remove of them.
Collective latency is event-timed per operation on its stream, enqueued in bursts behind a spin
kernel so that the CPU's launch time is not counted.

Writes DIR/interference.json (schema 1, workload "interference", docs/benchmarks.md) and
DIR/summary.txt; exits 1 when a check failed.
"""

import argparse
import ctypes
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpulib  # noqa: E402
from gpulib import benchlib  # noqa: E402

# Chunks cut only copies longer than the chunk: they matter for large objects (--kv-block
# 16MiB --kv-batch 4 --settings "...;chunk-1MiB:nvlink_chunk_size=1MiB"), not for 64 KiB blocks.
GPU_SETTINGS = ("unbounded;inflight-8MiB:nvlink_max_inflight_bytes=8MiB;"
                "inflight-1MiB:nvlink_max_inflight_bytes=1MiB;"
                "low-priority:nvlink_low_priority_stream=true")
FAKE_SETTINGS = ("unbounded;inflight-256KiB:nvlink_max_inflight_bytes=256KiB;"
                 "chunk-8KiB:nvlink_max_inflight_bytes=256KiB,nvlink_chunk_size=8KiB;"
                 "low-priority:nvlink_low_priority_stream=true")

NOT_NCCL = ("THE COLLECTIVE IS A PROXY, NOT NCCL: a device-to-device copy of the all-reduce's "
            "bytes on a high-priority stream of one GPU (NCCL cannot run two ranks on one GPU)")


def parse_settings(text):
    """'name[:key=value[,key=value]];...' -> [(name, {key: value})]."""
    out = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        name, _, rest = part.partition(":")
        keys = {}
        for kv in rest.split(",") if rest else []:
            k, sep, v = kv.partition("=")
            if not sep:
                raise SystemExit("--settings %r: %r is not key=value" % (part, kv))
            keys[k.strip()] = v.strip()
        out.append((name.strip(), keys))
    if not out:
        raise SystemExit("--settings: no setting")
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--egmstore", required=True, help="the egmstore binary (BUILD/bin/egmstore)")
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument("--pythonpath", default=None, help="folder holding the egmstore package")
    p.add_argument("--mode", choices=["auto", "nccl", "d2d-proxy"], default="auto",
                   help="auto: nccl with 2 or more GPUs, else d2d-proxy")
    p.add_argument("--gpus", default=None, help="GPU ids (nccl: 0,1; d2d-proxy: 0)")
    p.add_argument("--fake-gpu", action="store_true",
                   help="no GPU: egmstore's fake libcuda.so.1 (BUILD/fake-cuda) on LD_LIBRARY_PATH, "
                   "a cpu-proxy collective, no torch; flow only")
    p.add_argument("--settings", default=None,
                   help="pressure settings, 'name[:key=value,...];...' (default: unbounded, "
                   "in-flight bounds of 8MiB and 1MiB, low-priority stream; fake: with chunks)")
    p.add_argument("--collective-bytes", default="1MiB")
    p.add_argument("--collective-iters", type=int, default=None,
                   help="collective operations per phase (20000; fake 200)")
    p.add_argument("--collective-priority", choices=["high", "default"], default="high",
                   help="the collective's stream priority (NCCL: is_high_priority_stream)")
    p.add_argument("--burst", type=int, default=64, help="collective operations per burst")
    p.add_argument("--kv-block", default=None, help="KV block size (64KiB; fake 16KiB)")
    p.add_argument("--kv-batch", type=int, default=None, help="blocks per KV call (1024; fake 64)")
    p.add_argument("--kv-keys", type=int, default=None,
                   help="blocks of each worker's working set (8192; fake 512)")
    p.add_argument("--kv-op", choices=["get", "put", "both"], default="both")
    p.add_argument("--kv-seconds", type=float, default=None,
                   help="length of the KV-alone phase (2; fake 0.3)")
    p.add_argument("--max-mr-size", default=None, help="pool chunk size (1GiB; fake 16MiB)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--timeout", type=int, default=900, help="seconds the workers may take")
    p.add_argument("--json", default=None, help="the JSON file (default OUT/interference.json)")
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long: 2000 collective operations, KV 256 x 64KiB for 0.5 s, "
                   "settings unbounded and a 1MiB bound (fake: its defaults)")
    p.add_argument("--role", default="main", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    fake = a.fake_gpu
    if a.smoke and not fake:
        a.settings = a.settings or "unbounded;inflight-1MiB:nvlink_max_inflight_bytes=1MiB"
        a.collective_iters = a.collective_iters or 2000
        a.kv_batch, a.kv_keys = a.kv_batch or 256, a.kv_keys or 2048
        a.kv_seconds = a.kv_seconds if a.kv_seconds is not None else 0.5
    a.settings = parse_settings(a.settings or (FAKE_SETTINGS if fake else GPU_SETTINGS))
    a.collective_bytes = gpulib.parse_size(a.collective_bytes)
    a.collective_iters = a.collective_iters or (200 if fake else 20000)
    a.kv_block = gpulib.parse_size(a.kv_block or ("16KiB" if fake else "64KiB"))
    a.kv_batch = a.kv_batch or (64 if fake else 1024)
    a.kv_keys = a.kv_keys or (512 if fake else 8192)
    a.kv_seconds = a.kv_seconds if a.kv_seconds is not None else (0.3 if fake else 2.0)
    a.max_mr_size = gpulib.parse_size(a.max_mr_size or ("16MiB" if fake else "1GiB"))
    if a.kv_block % 8:
        p.error("--kv-block must be a multiple of 8 bytes")
    if a.kv_batch > a.kv_keys:
        p.error("--kv-batch must not exceed --kv-keys")
    if a.collective_bytes % 4 or a.collective_bytes <= 0:
        p.error("--collective-bytes must be a positive multiple of 4")
    a.json = a.json or os.path.join(a.out, "interference.json")
    return a


def gpu_count():
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.SubprocessError):
            pass
    return 0


# ---- worker side --------------------------------------------------------------------------------


class Barrier:
    def __init__(self, dist=None):
        self.dist = dist

    def __call__(self):
        if self.dist is not None:
            self.dist.barrier()


class CpuProxy:
    """--fake-gpu: memmove between two fake-driver buffers, each timed by the CPU clock."""

    name, transport, op, is_nccl = "cpu-proxy", "memcpy", "copy", False

    def __init__(self, be, nbytes):
        self.src, self.dst, self.n = be.alloc(nbytes), be.alloc(nbytes), nbytes
        self.info = {"collective": self.name, "what": "memmove of %s between two fake-driver "
                     "buffers (flow test; not a GPU figure)" % gpulib.fmt_size(nbytes)}

    def run(self, iters):
        samples = []
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            s = time.perf_counter_ns()
            ctypes.memmove(self.dst.ptr, self.src.ptr, self.n)
            samples.append(time.perf_counter_ns() - s)
        wall = (time.perf_counter_ns() - t0) / 1e9
        return samples, wall, {"starved_bursts": 0, "bursts": 0}


class TorchCollective:
    """An NCCL all-reduce (mode nccl) or a device-to-device copy on a stream of the greatest
    priority (mode d2d-proxy), event-timed per operation. Operations are enqueued in bursts behind
    torch.cuda._sleep, long enough to cover the CPU's enqueueing of the burst, so that each
    sample is the operation's GPU time, not the launch overhead."""

    def __init__(self, be, mode, nbytes, burst, priority, rank, world, port):
        torch = self.torch = be.torch
        self.be, self.mode, self.burst = be, mode, burst
        self.info = {"collective": "nccl-allreduce" if mode == "nccl" else "d2d-proxy",
                     "collective_priority": priority}
        self.is_nccl = mode == "nccl"
        least, greatest = torch.cuda.Stream.priority_range()
        if mode == "nccl":
            import torch.distributed as dist

            self.dist = dist
            opts = None
            if priority == "high":
                try:
                    opts = dist.ProcessGroupNCCL.Options()
                    opts.is_high_priority_stream = True
                except Exception as e:  # an API that moved: run on the default priority, say so
                    self.info["priority_note"] = "ProcessGroupNCCL.Options: %s" % e
                    opts = None
            kw = dict(backend="nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                      world_size=world)
            try:
                if opts is not None:
                    dist.init_process_group(pg_options=opts, **kw)
                else:
                    dist.init_process_group(**kw)
                self.info["nccl_high_priority_stream"] = opts is not None
            except TypeError as e:
                self.info["priority_note"] = "init_process_group(pg_options=...): %s" % e
                dist.init_process_group(**kw)
                self.info["nccl_high_priority_stream"] = False
            # zeros: a sum of ones would double each time and reach inf after ~128 rounds
            self.x = torch.zeros(nbytes // 4, dtype=torch.float32, device=be.device)
            self.stream = torch.cuda.current_stream(be.device)
            self.op_fn = lambda: dist.all_reduce(self.x)
            self.skip = 1  # the first of a burst also waits for the other rank's spin
            self.name, self.transport, self.op = "nccl-allreduce", "nccl", "allreduce"
            try:
                self.info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
            except Exception:
                pass
            self.info["what"] = ("NCCL all-reduce (sum, float32) of %s across %d GPUs" % (
                gpulib.fmt_size(nbytes), world))
        else:
            self.dist = None
            prio = greatest if priority == "high" else 0
            self.stream = torch.cuda.Stream(device=be.device, priority=prio)
            self.src = torch.ones(nbytes, dtype=torch.uint8, device=be.device)
            self.dst = torch.empty(nbytes, dtype=torch.uint8, device=be.device)
            self.op_fn = lambda: self.dst.copy_(self.src, non_blocking=True)
            self.skip = 0
            self.name, self.transport, self.op = "d2d-proxy", "d2d-copy", "copy"
            self.info["what"] = ("NOT NCCL: device-to-device copy of %s on a stream of priority "
                                 "%d on %s" % (gpulib.fmt_size(nbytes), prio, be.device))
        self.info["stream_priority_range"] = {"least": least, "greatest": greatest}
        self.events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(burst)]
        self.sleep = getattr(torch.cuda, "_sleep", None)
        self.spin_cycles = 0
        self._calibrate()

    def _burst(self, n, spin_cycles):
        """Enqueues n timed operations (behind a spin of spin_cycles when > 0), waits for them;
        (samples in ns, the CPU's enqueue time in ns)."""
        torch = self.torch
        with torch.cuda.stream(self.stream):
            if spin_cycles:
                self.sleep(spin_cycles)
            e0 = time.perf_counter_ns()
            for i in range(n):
                a, b = self.events[i]
                a.record()
                self.op_fn()
                b.record()
            enqueue = time.perf_counter_ns() - e0
        self.events[n - 1][1].synchronize()
        samples = [int(a.elapsed_time(b) * 1e6)
                   for a, b in self.events[min(self.skip, n - 1):n]]
        return samples, enqueue

    def _calibrate(self):
        """The spin covers what the CPU needs to enqueue a burst beyond what the GPU has to do
        meanwhile (an NCCL all-reduce of 1 MiB takes longer than its launch: little spin; a 1 MiB
        device copy takes ~2 us: the spin covers nearly the whole enqueue)."""
        torch = self.torch
        self.op_ns, self.spin_ns = 0, 0
        if self.sleep is None:
            self.info["spin"] = "torch.cuda._sleep missing: samples may include launch gaps"
            return
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            self.sleep(1000)
            s.record()
            self.sleep(1_000_000)
            e.record()
        e.synchronize()
        cycles_per_ns = 1_000_000 / max(1.0, s.elapsed_time(e) * 1e6)
        worst = max(self._burst(self.burst, 0)[1] for _ in range(2))
        generous = int((2 * worst + 50_000) * cycles_per_ns)
        samples, _ = self._burst(self.burst, generous)
        self.op_ns = sorted(samples)[len(samples) // 2]
        self.enqueue_ns = worst
        self.spin_ns = max(50_000, 2 * worst - self.burst * self.op_ns)
        self.spin_cycles = int(self.spin_ns * cycles_per_ns)
        self.info["spin"] = {"cycles_per_ns": round(cycles_per_ns, 3),
                             "burst": self.burst, "burst_enqueue_us": round(worst / 1e3, 1),
                             "op_us_calibration": round(self.op_ns / 1e3, 2),
                             "spin_us": round(self.spin_ns / 1e3, 1)}

    def run(self, iters):
        samples, starved, bursts = [], 0, 0
        t0 = time.perf_counter_ns()
        done = 0
        while done < iters:
            n = min(self.burst, iters - done)
            got, enqueue = self._burst(n, self.spin_cycles)
            samples += got
            # the GPU ran out of work inside this burst when the CPU took longer than the spin
            # and the operations already queued: a sample there may include a launch gap
            if self.spin_cycles and enqueue > self.spin_ns + (n - 1) * self.op_ns:
                starved += 1
            done += n
            bursts += 1
        wall = (time.perf_counter_ns() - t0) / 1e9
        return samples, wall, {"starved_bursts": starved, "bursts": bursts}


class KvTraffic(threading.Thread):
    """Batch gets of random blocks of the working set into the HBM buffer, batch puts of the
    buffer to fresh keys and their removal, until stopped. Key lists are made up front so that
    the loop holds the GIL as little as possible."""

    def __init__(self, store, p, rank, tag, buf, names, seed):
        super().__init__(daemon=True)
        self.store, self.p = store, p
        B, K = p["kv_block"], p["kv_batch"]
        self.ptrs = [buf.ptr + j * B for j in range(K)]
        self.sizes = [B] * K
        rng = random.Random(seed)
        self.selections = [[names[i] for i in rng.sample(range(p["kv_keys"]), K)]
                           for _ in range(16)]
        self.put_keys = ["ikvput/r%d/%s/%d" % (rank, tag, j) for j in range(K)]
        self.stop_flag = threading.Event()
        self.started_flag = threading.Event()
        self.log = []  # (end_ns, duration_ns, op, ok_keys, failed_keys)
        self.error = None

    def run(self):
        st, op = self.store, self.p["kv_op"]
        B, K = self.p["kv_block"], self.p["kv_batch"]
        n = 0
        try:
            while not self.stop_flag.is_set():
                if op in ("get", "both"):
                    keys = self.selections[n % len(self.selections)]
                    t0 = time.perf_counter_ns()
                    res = st.batch_get_into(keys, self.ptrs, self.sizes)
                    t1 = time.perf_counter_ns()
                    bad = sum(1 for r in res if r != B)
                    self.log.append((t1, t1 - t0, "get", K - bad, bad))
                if op in ("put", "both"):
                    t0 = time.perf_counter_ns()
                    res = st.batch_put_from(self.put_keys, self.ptrs, self.sizes)
                    t1 = time.perf_counter_ns()
                    bad = sum(1 for r in res if r is not None)
                    self.log.append((t1, t1 - t0, "put", K - bad, bad))
                    st.batch_remove(self.put_keys, force=True)
                n += 1
                self.started_flag.set()
        except Exception as e:
            self.error = "%s: %s" % (type(e).__name__, e)
            self.started_flag.set()

    def window(self, t0, t1):
        return [x for x in self.log if t0 <= x[0] <= t1]


def kv_records(p, rank, world, setting, knobs, phase, entries, t0, t1, groups_per_call):
    B, K = p["kv_block"], p["kv_batch"]
    secs = (t1 - t0) / 1e9
    recs = []
    total_keys, errors = 0, 0
    for op in ("get", "put"):
        xs = [x for x in entries if x[2] == op]
        if not xs:
            continue
        st = benchlib.latency_stats([x[1] for x in xs])
        st.pop("samples_us", None)
        ok = sum(x[3] for x in xs)
        bad = sum(x[4] for x in xs)
        total_keys += ok
        errors += bad
        recs.append(benchlib.record(
            workload="interference", system="egmstore", api="python", transport="nvlink", op=op,
            memory="gpu", bytes=B, batch=K, clients=1, procs=world, calls=len(xs),
            seconds=round(secs, 6), gbps=round(ok * B / secs / 1e9, 6) if secs > 0 else None,
            errors=bad, phase=phase, setting=setting, knobs=knobs, rank=rank, side="kv",
            copy_groups_per_call=groups_per_call, **st))
    recs.append(benchlib.record(
        workload="interference", system="egmstore", api="python", transport="nvlink", op="mixed",
        memory="gpu", bytes=B, batch=K, clients=1, procs=world,
        calls=sum(1 for x in entries), seconds=round(secs, 6),
        gbps=round(total_keys * B / secs / 1e9, 6) if secs > 0 else None, errors=errors,
        phase=phase, setting=setting, knobs=knobs, rank=rank, side="kv",
        copy_groups_per_call=groups_per_call))
    return recs


def coll_record(coll, p, rank, world, setting, knobs, phase, samples, wall, extra):
    st = benchlib.latency_stats(samples)
    st.pop("samples_us", None)
    busy = sum(samples) / 1e9 / wall if wall > 0 else None
    return benchlib.record(
        workload="interference", system=coll.name, api="python", transport=coll.transport,
        op=coll.op, memory="gpu", bytes=p["collective_bytes"], batch=1, clients=1, procs=world,
        calls=len(samples), seconds=round(sum(samples) / 1e9, 6), phase=phase, setting=setting,
        knobs=knobs, rank=rank, side="collective", collective=coll.name,
        collective_is_nccl=coll.is_nccl, wall_s=round(wall, 6),
        busy_share=round(busy, 4) if busy is not None else None, **extra, **st)


def worker(p, rank):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    out = {"rank": rank, "records": [], "checks": [], "settings": []}
    say = lambda text: print("[rank %d] %s" % (rank, text), flush=True)  # noqa: E731

    def check(name, ok, detail=""):
        out["checks"].append({"name": "rank %d: %s" % (rank, name), "ok": bool(ok),
                              "detail": detail})
        say("[%s] %s%s" % ("PASS" if ok else "FAIL", name, ": " + detail if detail else ""))

    import backends

    world, mode = p["world"], p["mode"]
    if mode == "cpu-proxy":
        be = backends.FakeBackend(0)
        coll = CpuProxy(be, p["collective_bytes"])
        barrier = Barrier()
    else:
        be = backends.TorchBackend("cuda:%d" % p["gpus"][rank])
        coll = TorchCollective(be, mode, p["collective_bytes"], p["burst"],
                               p["collective_priority"], rank, world, p["dist_port"])
        barrier = Barrier(coll.dist)
    out["device"] = be.info
    out["collective"] = coll.info
    say("device %s; collective: %s" % (be.name, coll.info["what"]))
    if not coll.is_nccl:
        say(NOT_NCCL if mode == "d2d-proxy" else "the collective is a cpu-proxy (fake GPU): flow only")

    egmstore = gpulib.import_egmstore(p["pythonpath"])
    B, K = p["kv_block"], p["kv_batch"]
    names = ["ikv/r%d/B%06d" % (rank, i) for i in range(p["kv_keys"])]
    ids = [rank * p["kv_keys"] + i for i in range(p["kv_keys"])]  # pattern ids differ per rank
    buf = be.alloc(K * B)

    # The working set, put once (objects outlive the client that put them).
    store = egmstore.Store({"master_server_addr": p["master"], "protocol": "nvlink"})
    store.register_buffer(buf.ptr, buf.nbytes)
    failed = 0
    for s in range(0, p["kv_keys"], K):
        chunk = list(range(s, min(s + K, p["kv_keys"])))
        be.fill(buf, B, [ids[i] for i in chunk])
        res = store.batch_put_from([names[i] for i in chunk],
                                   [buf.ptr + j * B for j in range(len(chunk))], [B] * len(chunk))
        failed += sum(1 for r in res if r is not None)
    store.close()
    check("working set put", failed == 0, "%d blocks of %s, %d failed" % (
        p["kv_keys"], gpulib.fmt_size(B), failed))

    rng = random.Random(p["seed"] + rank)
    for si, (setting, knobs) in enumerate(p["settings"]):
        cfg = {"master_server_addr": p["master"], "protocol": "nvlink"}
        cfg.update(knobs)
        store = egmstore.Store(cfg)
        store.register_buffer(buf.ptr, buf.nbytes)
        tag = "s%d" % si
        # warm: mappings imported, the copier made, the collective's caches warm
        warm = KvTraffic(store, p, rank, tag, buf, names, rng.random())
        warm.start()
        warm.started_flag.wait(60)
        time.sleep(min(0.25, p["kv_seconds"] / 4))
        warm.stop_flag.set()
        warm.join()
        coll.run(min(p["burst"] * 2, p["collective_iters"]))
        barrier()

        # 1. the collective alone
        samples, wall, extra = coll.run(p["collective_iters"])
        out["records"].append(coll_record(coll, p, rank, world, setting, knobs, "alone",
                                          samples, wall, extra))
        barrier()

        # 2. KV traffic alone (the copier's groups counted over exactly its calls)
        c0 = gpulib.copy_counters(store)
        kv = KvTraffic(store, p, rank, tag, buf, names, rng.random())
        kv.start()
        kv.started_flag.wait(60)
        t0 = time.perf_counter_ns()
        time.sleep(p["kv_seconds"])
        t1 = time.perf_counter_ns()
        kv.stop_flag.set()
        kv.join()
        c1 = gpulib.copy_counters(store)
        copying_calls = sum(1 for x in kv.log if x[2] in ("get", "put"))
        groups = c1["copy_groups_total"] - c0["copy_groups_total"]
        gpc = round(groups / copying_calls, 3) if copying_calls else None
        out["records"] += kv_records(p, rank, world, setting, knobs, "alone",
                                     kv.window(t0, t1), t0, t1, gpc)
        want = gpulib.expected_groups(B, K, gpulib.parse_size(knobs.get(
            "nvlink_max_inflight_bytes", "0")), gpulib.parse_size(knobs.get("nvlink_chunk_size", "0")))
        check("%s: copier groups per KV call as the keys give" % setting,
              kv.error is None and copying_calls > 0 and groups == want * copying_calls,
              "%d groups over %d calls, %d per call expected%s" % (
                  groups, copying_calls, want, "; " + kv.error if kv.error else ""))
        barrier()

        # 3. both at once
        kv = KvTraffic(store, p, rank, tag, buf, names, rng.random())
        kv.start()
        kv.started_flag.wait(60)
        t0 = time.perf_counter_ns()
        samples, wall, extra = coll.run(p["collective_iters"])
        t1 = time.perf_counter_ns()
        kv.stop_flag.set()
        kv.join()
        out["records"].append(coll_record(coll, p, rank, world, setting, knobs, "with-kv",
                                          samples, wall, extra))
        out["records"] += kv_records(p, rank, world, setting, knobs, "with-collective",
                                     kv.window(t0, t1), t0, t1, None)
        errs = sum(x[4] for x in kv.log)
        check("%s: KV calls answered every key" % setting, errs == 0 and kv.error is None,
              "%d failed keys%s" % (errs, "; " + kv.error if kv.error else ""))

        # 4. the bytes: a get checked against the pattern, a put read back
        sel = rng.sample(range(p["kv_keys"]), K)
        res = store.batch_get_into([names[i] for i in sel], [buf.ptr + j * B for j in range(K)],
                                   [B] * K)
        pos = sorted(rng.sample(range(K), min(K, 32)))
        bad_get = be.mismatches(buf, B, pos, [ids[sel[j]] for j in pos])
        vkeys = ["ikvcheck/r%d/%s/%d" % (rank, tag, j) for j in range(K)]
        store.batch_put_from(vkeys, [buf.ptr + j * B for j in range(K)], [B] * K)
        be.zero(buf, B, pos)
        res2 = store.batch_get_into(vkeys, [buf.ptr + j * B for j in range(K)], [B] * K)
        bad_put = be.mismatches(buf, B, pos, [ids[sel[j]] for j in pos])
        store.batch_remove(vkeys, force=True)
        ok = (all(r == B for r in res) and all(r == B for r in res2) and bad_get == 0
              and bad_put == 0)
        check("%s: blocks got and put back hold their pattern" % setting, ok,
              "%d of %d got blocks wrong, %d put-and-read-back wrong" % (bad_get, len(pos),
                                                                          bad_put))
        store.close()
        barrier()
        out["settings"].append(setting)
        say("setting %s done" % setting)
    if getattr(coll, "dist", None) is not None:
        coll.dist.destroy_process_group()
    return out


def worker_main(a):
    with open(os.path.join(a.out, "params.json")) as f:
        p = json.load(f)
    try:
        out = worker(p, a.rank)
        out["ok"] = all(c["ok"] for c in out["checks"])
    except Exception:
        traceback.print_exc()
        out = {"rank": a.rank, "ok": False, "error": traceback.format_exc(limit=4), "records": [],
               "checks": []}
    with open(os.path.join(a.out, "rank%d.json" % a.rank), "w") as f:
        json.dump(out, f, indent=1)
    return 0 if out["ok"] else 1


# ---- orchestrator -------------------------------------------------------------------------------


def main(argv=None):
    a = parse_args(argv)
    if a.role == "rank":
        return worker_main(a)
    os.makedirs(a.out, exist_ok=True)
    started = int(time.time() * 1000)
    if a.fake_gpu:
        mode, gpus = "cpu-proxy", [0]
    else:
        ngpu = gpu_count()
        mode = a.mode if a.mode != "auto" else ("nccl" if ngpu >= 2 else "d2d-proxy")
        gpus = [int(x) for x in (a.gpus or ("0,1" if mode == "nccl" else "0")).split(",")]
        if mode == "nccl" and (len(gpus) != 2 or gpus[0] == gpus[1]):
            raise SystemExit("--mode nccl: two different GPUs (--gpus 0,1); NCCL cannot run two "
                             "ranks on one GPU (use --mode d2d-proxy)")
        if mode == "d2d-proxy":
            gpus = gpus[:1]
    world = len(gpus) if mode == "nccl" else 1
    a.pythonpath = a.pythonpath or gpulib.default_pythonpath(a.egmstore)
    data = world * (a.kv_keys + 2 * a.kv_batch) * a.kv_block
    pool = gpulib.pool_bytes(data, a.max_mr_size, a.max_mr_size)
    cluster = gpulib.Cluster(a, pool, a.max_mr_size)
    say = cluster.say
    checks, records, ranks = [], [], []
    config = {"mode": mode, "gpus": gpus, "world": world, "fake_gpu": a.fake_gpu,
              "collective_bytes": a.collective_bytes, "collective_iters": a.collective_iters,
              "collective_priority": a.collective_priority, "burst": a.burst,
              "kv_block": a.kv_block, "kv_batch": a.kv_batch, "kv_keys": a.kv_keys,
              "kv_op": a.kv_op, "kv_seconds": a.kv_seconds, "pool_bytes": pool,
              "max_mr_size": a.max_mr_size, "settings": [{"name": n, "keys": k}
                                                         for n, k in a.settings],
              "seed": a.seed, "egmstore": a.egmstore, "pythonpath": a.pythonpath,
              "NCCL_NVLS_ENABLE": "0"}
    say("== interference: collective %s (%s) on GPU(s) %s; KV traffic %s x %s per call (%s), "
        "%s; settings: %s" % (
            {"nccl": "NCCL all-reduce", "d2d-proxy": "d2d-proxy (NOT NCCL)",
             "cpu-proxy": "cpu-proxy (fake GPU)"}[mode], gpulib.fmt_size(a.collective_bytes),
            ",".join(map(str, gpus)), a.kv_batch, gpulib.fmt_size(a.kv_block),
            gpulib.fmt_size(a.kv_batch * a.kv_block), a.kv_op,
            ", ".join(n for n, _ in a.settings)))
    if mode == "d2d-proxy":
        say("NOTE: " + NOT_NCCL + "; for NCCL run on two GPUs (--mode nccl)")
    if mode == "cpu-proxy":
        say("NOTE: --fake-gpu: the fake CUDA driver's memory is host memory; this checks the flow, "
            "the records and the copier's groups, not any speed")
    try:
        cluster.start()
        params = {k: getattr(a, k) for k in ("collective_bytes", "collective_iters", "burst",
                                              "collective_priority", "kv_block", "kv_batch",
                                              "kv_keys", "kv_op", "kv_seconds", "seed",
                                              "pythonpath")}
        params.update(mode=mode, gpus=gpus, world=world, master=cluster.addr,
                      settings=a.settings, dist_port=benchlib.free_port())
        with open(os.path.join(a.out, "params.json"), "w") as f:
            json.dump(params, f, indent=1)
        env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONDONTWRITEBYTECODE="1")
        procs = []
        for r in range(world):
            argv = [sys.executable, "-u", os.path.abspath(__file__), "--egmstore", a.egmstore,
                    "--out", a.out, "--role", "rank", "--rank", str(r)]
            if a.fake_gpu:
                argv.append("--fake-gpu")
            log = open(os.path.join(a.out, "rank%d.log" % r), "w")
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env)
            procs.append((proc, log))

        def relay(proc, log):
            for line in proc.stdout:
                log.write(line)
                log.flush()
                say("  " + line.rstrip())

        threads = [threading.Thread(target=relay, args=pl, daemon=True) for pl in procs]
        for t in threads:
            t.start()
        deadline = time.time() + a.timeout
        codes = []
        for proc, log in procs:
            try:
                codes.append(proc.wait(max(1, deadline - time.time())))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        for t in threads:
            t.join(10)
        for r in range(world):
            try:
                with open(os.path.join(a.out, "rank%d.json" % r)) as f:
                    ranks.append(json.load(f))
            except (OSError, ValueError):
                ranks.append({"rank": r, "ok": False, "error": "no rank%d.json" % r,
                              "records": [], "checks": []})
        for r, doc in enumerate(ranks):
            records += doc.get("records", [])
            checks += doc.get("checks", [])
            checks.append({"name": "rank %d exit 0" % r, "ok": codes[r] == 0 and doc.get("ok"),
                           "detail": "exit %s%s" % (codes[r], "; " + doc["error"].strip()
                                                    .splitlines()[-1] if doc.get("error") else "")})
        stop = cluster.stop()
        checks.append({"name": "provider and master exit 0 on SIGTERM",
                       "ok": all(v == 0 for v in stop.values()), "detail": str(stop)})
    except Exception as e:
        traceback.print_exc()
        checks.append({"name": "benchmark ran to the end", "ok": False,
                       "detail": "%s: %s" % (type(e).__name__, e)})
    finally:
        cluster.kill()
    ok = bool(checks) and all(c["ok"] for c in checks)
    coll = ranks[0].get("collective", {}) if ranks else {}
    doc = benchlib.document("interference.py", config, records, started, checks=checks, ok=ok,
                            collective=coll, gpu=ranks[0].get("device") if ranks else None,
                            not_nccl_note=NOT_NCCL if mode == "d2d-proxy" else None)
    gpulib.write_results(a, doc, render, say)
    return 0 if ok else 1


def render(doc):
    c = doc["config"]
    coll = doc.get("collective") or {}
    out = []
    if c["mode"] == "d2d-proxy":
        out.append("*** " + NOT_NCCL + " ***")
    if c["mode"] == "cpu-proxy":
        out.append("*** FAKE GPU: cpu-proxy collective, flow only; no figure here is a GPU "
                   "figure ***")
    out.append("collective: %s" % coll.get("what", c["mode"]))
    out.append("KV traffic per worker: %s x %s per call (%s), op %s; %d worker(s)" % (
        c["kv_batch"], gpulib.fmt_size(c["kv_block"]), gpulib.fmt_size(c["kv_batch"] *
                                                                         c["kv_block"]),
        c["kv_op"], c["world"]))
    hdr = "%-14s %10s %10s %10s %10s %9s %9s %8s %6s" % (
        "setting", "coll p50", "coll p99", "p50 +KV", "p99 +KV", "KV GB/s", "KV+coll", "grp/call",
        "errors")
    out.append("(collective latency in us, rank 0; KV GB/s summed over workers, get+put)")
    out.append(hdr)
    recs = doc["results"]
    for s in c["settings"]:
        name = s["name"]

        def one(side, phase, op=None, rank=0):
            for r in recs:
                if (r.get("setting") == name and r.get("side") == side and r.get("phase") == phase
                        and (op is None or r["op"] == op) and (rank is None or r["rank"] == rank)):
                    return r
            return None

        a0, w0 = one("collective", "alone"), one("collective", "with-kv")
        kv_alone = [r for r in recs if r.get("setting") == name and r.get("side") == "kv"
                    and r.get("phase") == "alone" and r["op"] == "mixed"]
        kv_with = [r for r in recs if r.get("setting") == name and r.get("side") == "kv"
                   and r.get("phase") == "with-collective" and r["op"] == "mixed"]
        gpc = [r.get("copy_groups_per_call") for r in kv_alone]
        errs = sum(r["errors"] for r in recs if r.get("setting") == name)
        f = lambda r, k: "%.1f" % r[k] if r and r.get(k) is not None else "-"  # noqa: E731
        out.append("%-14s %10s %10s %10s %10s %9s %9s %8s %6d" % (
            name, f(a0, "p50_us"), f(a0, "p99_us"), f(w0, "p50_us"), f(w0, "p99_us"),
            "%.2f" % sum(r["gbps"] or 0 for r in kv_alone) if kv_alone else "-",
            "%.2f" % sum(r["gbps"] or 0 for r in kv_with) if kv_with else "-",
            gpc[0] if gpc else "-", errs))
    for ch in doc.get("checks", []):
        out.append("[%s] %s%s" % ("PASS" if ch["ok"] else "FAIL", ch["name"],
                                  ": " + ch["detail"] if ch["detail"] else ""))
    out.append("result: %s" % ("PASS" if doc.get("ok") else "FAIL"))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
