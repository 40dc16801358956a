"""Helpers of the GPU workload benchmarks (bench/gpu/sparse_offload.py, bench/gpu/interference.py):
the cluster (a master and an EGM-pool provider, started the way tests/gpu/kv_scenario/run.py
starts them, with its Run helpers), GPU buffers on a real GPU (torch) or on egmstore's fake CUDA
driver (ctypes, no torch: CI machines), block patterns that a get is checked against, and the
client's metrics. Records and the schema-1 document come from bench/py/benchlib.py.
"""

import array
import ctypes
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "py"))
sys.path.insert(0, os.path.join(REPO, "tests", "gpu", "kv_scenario"))

import benchlib  # noqa: E402  (bench/py: records, latency statistics, machine, JSON)
from run import Run, prom  # noqa: E402  (the kv scenario's daemon helpers; no torch needed)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# The master evicts above 90% use (eviction_high_watermark_ratio): pools are sized so that the
# benchmark's objects stay below this share.
POOL_FILL_MAX = 0.80


def parse_size(text):
    return benchlib.parse_size(text)


def fmt_size(n):
    return benchlib.fmt_size(n)


def pool_bytes(data_bytes, chunk, floor):
    """Capacity that holds data_bytes below POOL_FILL_MAX, in whole chunks, at least floor."""
    need = int(data_bytes / POOL_FILL_MAX) + 1
    return max(floor, -(-need // chunk) * chunk)


def import_egmstore(pythonpath):
    """The egmstore package from `pythonpath` (BUILD/python, or a staged copy of it)."""
    if pythonpath and pythonpath not in sys.path:
        sys.path.insert(0, pythonpath)
    import egmstore

    return egmstore


def default_pythonpath(egmstore_bin):
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(egmstore_bin))), "python")


class Cluster:
    """`egmstore master` and one `egmstore provider` with an EGM pool (HOST_NUMA VMM, posix_fd,
    nvlink) of `pool` bytes in chunks of `chunk`, on free loopback ports; logs in args.out.
    master_http: the master's admin HTTP on a free port (wait_held)."""

    def __init__(self, args, pool, chunk, provider_args=(), master_args=(), master_http=False):
        self.run = Run(args)  # makes args.out, run.log; daemon() / stop() / http()
        self.args = args
        self.pool, self.chunk = pool, chunk
        self.provider_args = list(provider_args)  # appended: a later flag overrides
        self.master_args = list(master_args)  # appended too
        self.master_http_port = benchlib.free_port() if master_http else None
        self.master = self.provider = None

    def say(self, text):
        self.run.say(text)

    def start(self):
        bin_ = self.args.egmstore
        self.master, m, line = self.run.daemon(
            "master",
            [bin_, "master", "--port", "0", "--listen-address", "127.0.0.1", "--http-port",
             str(self.master_http_port or -1), "--log-level", "warn"] + self.master_args,
            r"listening on (\S+):(\d+)",
            30,
        )
        self.addr = "127.0.0.1:%s" % m.group(2)
        self.say(line)
        argv = [bin_, "provider", "--master", self.addr, "--global-segment-size", str(self.pool),
                "--max-mr-size", str(self.chunk), "--local-hostname", "127.0.0.1",
                "--provider-http-port", "0", "--enable-egm-store-pool", "true",
                "--egm-handle-type", "posix_fd", "--protocol", "nvlink", "--log-level", "warn"]
        argv += self.provider_args
        self.provider, m, line = self.run.daemon(
            "provider", argv, r"provider ready: (\d+) segments.* http (\d+)", 600)
        self.segments, self.http_port = int(m.group(1)), int(m.group(2))
        self.say(line)
        return self

    def provider_metrics(self):
        code, body = self.run.http(self.http_port, "/metrics")
        return prom(body) if code == 200 else {}

    def wait_held(self):
        """benchlib.wait_master_held on this master (needs master_http)."""
        return benchlib.wait_master_held(self.master_http_port)

    def stop(self):
        """SIGTERM to the provider, then the master; their exit codes."""
        codes = {}
        for name, proc in (("provider", self.provider), ("master", self.master)):
            if proc is not None and proc.poll() is None:
                codes[name] = self.run.stop(proc, 120)[0]
            elif proc is not None:
                codes[name] = proc.returncode
        return codes

    def kill(self):
        for p in self.run.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def client_metrics(store):
    """The client's Prometheus metrics as {name: value}."""
    return prom(store.metrics())


COPY_METRICS = ("egm_client_te_copy_groups_total", "egm_client_te_copy_chunks_total",
                "egm_client_te_copy_kernel_launches_total", "egm_client_te_copy_engine_copies_total",
                "egm_client_te_copy_batch_calls_total")


def copy_counters(store):
    m = client_metrics(store)
    out = {k[len("egm_client_te_"):]: int(m.get(k, 0)) for k in COPY_METRICS}
    out["copy_group_bytes_max"] = int(m.get("egm_client_te_copy_group_max_bytes", 0))
    return out


def counters_delta(after, before):
    return {k: after[k] - before.get(k, 0) for k in after if k.endswith("_total")}


# The client's chunk pipeline (src/client/pipeline.h) for batches of one buffer a key (a key then
# weighs one part): a batch of at least PIPELINE_MIN_KEYS (EGM_PIPELINE_MIN_PARTS) keys is cut into
# chunks of PIPELINE_FIRST_CHUNK_KEYS keys doubling up to PIPELINE_CHUNK_KEYS
# (128, 256, 512, 1024, 1024, ...), each copied by its own copier run.
PIPELINE_MIN_KEYS = 2048
PIPELINE_FIRST_CHUNK_KEYS = 128
PIPELINE_CHUNK_KEYS = 1024


def pipeline_chunks(nblocks):
    """Keys per copier run of one batch call, as the client's pipeline cuts it."""
    if nblocks < PIPELINE_MIN_KEYS:
        return [nblocks]
    sizes, left, cap = [], nblocks, PIPELINE_FIRST_CHUNK_KEYS
    while left > 0:
        sizes.append(min(left, cap))
        left -= sizes[-1]
        cap = min(2 * cap, PIPELINE_CHUNK_KEYS)
    return sizes


def expected_groups(block, nblocks, bound, chunk):
    """Groups the copier issues for one batch call of nblocks blocks of `block` bytes: the
    client's pipeline chunks (pipeline_chunks), each a copier run under the bounds."""
    return sum(run_groups(block, n, bound, chunk) for n in pipeline_chunks(nblocks))


def run_groups(block, nblocks, bound, chunk):
    """Groups the copier issues for one run of nblocks blocks of `block` bytes under the
    bounds (src/cuda/copier.c run_bounded, simulated): pieces of at most cut bytes, a group closed
    before a piece that would overflow the bound. 1 when unbounded."""
    cut = chunk
    if bound and (not cut or cut > bound):
        cut = bound
    if not cut or (block <= cut and (not bound or block * nblocks <= bound)):
        return 1
    groups, inflight = 0, 0
    for _ in range(nblocks):
        left = block
        while left > 0:
            piece = min(left, cut)
            if bound and inflight + piece > bound:
                groups += 1
                inflight = 0
            inflight += piece
            left -= piece
    return groups + (1 if inflight else 0)


# ---- block patterns ---------------------------------------------------------------------------
# Block b is 64-bit words w = (b << 32) + i, i = 0.. (little endian): every block and every
# offset inside one differ, so a get of the wrong block, a shifted copy or a stale buffer shows.


def pattern_bytes(block_id, block_bytes):
    words = block_bytes // 8
    base = block_id << 32
    return array.array("Q", range(base, base + words)).tobytes()


# ---- fake CUDA driver (no torch) --------------------------------------------------------------


class FakeDevice:
    """Device memory of egmstore's fake driver (libcuda.so.1 from BUILD/fake-cuda on
    LD_LIBRARY_PATH): host memory the store sees as GPU memory, so its nvlink path runs."""

    def __init__(self, ordinal=0):
        self.lib = ctypes.CDLL("libcuda.so.1")
        gpa = self.lib.cuGetProcAddress_v2
        gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                        ctypes.c_uint64, ctypes.c_void_p]
        self._gpa = gpa
        self._fns = {}
        self._check(self._fn("cuInit", ctypes.c_uint)(0), "cuInit")
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        self._check(self._fn("cuDeviceGet", ctypes.POINTER(ctypes.c_int), ctypes.c_int)(
            ctypes.byref(dev), ordinal), "cuDeviceGet")
        self._check(self._fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(ctypes.c_void_p),
                             ctypes.c_int)(ctypes.byref(ctx), dev.value),
                    "cuDevicePrimaryCtxRetain")
        self._check(self._fn("cuCtxSetCurrent", ctypes.c_void_p)(ctx), "cuCtxSetCurrent")
        self.name = "fake CUDA device %d (egmstore's fake libcuda.so.1: host memory)" % ordinal

    def _fn(self, name, *argtypes):
        if name not in self._fns:
            ptr = ctypes.c_void_p()
            if self._gpa(name.encode(), ctypes.byref(ptr), 12000, 0, None) != 0 or not ptr.value:
                raise RuntimeError("libcuda.so.1 has no %s: is the fake driver on "
                                   "LD_LIBRARY_PATH (BUILD/fake-cuda)?" % name)
            self._fns[name] = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(ptr.value)
        return self._fns[name]

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError("%s: CUresult %d" % (what, rc))

    def alloc(self, nbytes):
        ptr = ctypes.c_uint64()
        self._check(self._fn("cuMemAlloc", ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)(
            ctypes.byref(ptr), nbytes), "cuMemAlloc")
        ctypes.memset(ptr.value, 0, nbytes)
        return ptr.value


def check_fake_driver():
    """None when libcuda.so.1 is egmstore's fake, else why not (a real driver must not be used
    in fake mode: its memory is not host memory)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return "libcuda.so.1 not found (%s): put BUILD/fake-cuda on LD_LIBRARY_PATH" % e
    path = ""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libcuda.so" in line:
                    path = line.split()[-1]
                    break
    except OSError:
        pass
    del lib
    if "fake" not in path:
        return "libcuda.so.1 is %s, not egmstore's fake driver (BUILD/fake-cuda)" % (path or "?")
    return None


def sanitize(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


def write_results(a, doc, render, say):
    """The end of a bench/gpu script: the JSON document to a.json, its rendering to
    a.out/summary.txt and to the terminal."""
    benchlib.write_json(a.json, doc)
    summary = render(doc)
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write(summary)
    say("\n" + summary)
    say("wrote %s" % a.json)
