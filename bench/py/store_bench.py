#!/usr/bin/env python3
"""store_bench.py: the data workloads through Mooncake Store's Python API, against Mooncake
or egmstore's facade (egmstore.mooncake), with the same script and the same Python overhead.

  store_bench.py --system egmstore --egm-build build --out egm.json       # shm and tcp
  store_bench.py --system mooncake --out mooncake.json                     # Mooncake over tcp
  store_bench.py --system egmstore --smoke                                 # seconds-long
  store_bench.py --system egmstore --memory gpu --out egm-gpu.json         # GPU buffers, nvlink
  store_bench.py --system mooncake --memory gpu --out mooncake-gpu.json    # GPU buffers, tcp

It starts its own cluster: for egmstore `egmstore master` + `egmstore provider` (the
<build>/bin/egmstore CLI, package from <build>/python); for Mooncake its `mooncake_master`
(PyPI mooncake-transfer-engine-non-cuda) and a holder process whose store contributes the
global segment, with MC_TCP_ENABLE_CONNECTION_POOL=1. In both cases the benchmark clients
contribute no memory, so every byte crosses a process boundary (egmstore: shm or tcp; Mooncake:
its tcp transport). Workloads (docs/benchmarks.md):

  single   put_from/get_into with registered buffers, and put/get of bytes, by object size;
           1 client, and N clients (threads sharing one store, or processes) at some sizes
  batch    batch_put_from/batch_get_into of N x block
  mixed    gets (by uniform or zipf key choice over preloaded keys) and puts of new keys
  ceiling  memcpy of the same sizes in this process (--ceiling)

--memory gpu (with --device N): the client's buffers are CUDA tensors of PyTorch (imported only
then), registered with register_buffer; only the zero-copy API is measured (put_from, get_into,
batch_put_from, batch_get_into), single objects (4 KiB..64 MiB) and batches (N x 64 KiB), one
client. egmstore: a provider with an EGM pool (HOST_NUMA memory, nvlink), the facade over
nvlink; Mooncake: its CUDA 13 build (bench/py/stage-mooncake-gpu.sh, unpack-mooncake-gpu.sh)
over tcp, its segment in host memory as above, so its transport stages the GPU data itself.
Records say memory "gpu" and the transport used. --fake-gpu: the same flow on egmstore's fake
CUDA driver (host memory, no torch): a test, not a measurement.

Every get is verified byte for byte (untimed; GPU buffers on the GPU, zeroed before each round
of gets): each object is a random pattern with its key's id stamped at both ends. Clients work in rounds between barriers: timed calls, then untimed
preparation and checks, so GB/s and ops/s count only the calls. Output: JSON schema 1
(docs/benchmarks.md), api "python". Exit 0 when it ran (errors are counted in the records),
77 when the system under test is not available (skipped), 2 on a usage or setup error.
"""

import argparse
import bisect
import ctypes
import ctypes.util
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib as bl  # noqa: E402

EXIT_SKIP = 77
LARGE_BATCH = 2048  # keys per call; larger batches run after everything else
# the pip package (for its version); unpack-mooncake-gpu.sh's env.sh names the CUDA 13 one
MOONCAKE_PACKAGE = os.environ.get("MOONCAKE_PACKAGE", "mooncake-transfer-engine-non-cuda")
BARRIER_TIMEOUT_S = 600
SETUP_TIMEOUT_S = 60

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.memcmp.restype = ctypes.c_int
_libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


# ---- memory and content ----------------------------------------------------------------

class Mem:
    """Zeroed (so already touched) host memory at a page-aligned address."""

    def __init__(self, size, align=4096):
        self._raw = (ctypes.c_char * (size + align))()
        self.ptr = (ctypes.addressof(self._raw) + align - 1) // align * align
        self.size = size


_patterns = {}
_patterns_lock = threading.Lock()


def pattern(size):
    """Random bytes of `size` (a 16 MiB + 4099 B random block repeated beyond that, so that
    a misplaced page never matches), the same in every process. Made once per size under a
    lock (client threads ask at the same time); only the latest size is kept, since the
    clients of a phase all use one size and phases are separated by barriers. Callers hold
    the returned object while they use its memory."""
    with _patterns_lock:
        m = _patterns.get(size)
        if m is None:
            period = size if size <= 16 * bl.MiB else 16 * bl.MiB + 4099
            block = random.Random(size).randbytes(period)
            m = Mem(size)
            for off in range(0, size, period):
                ctypes.memmove(m.ptr + off, block, min(period, size - off))
            _patterns.clear()  # large patterns are large
            _patterns[size] = m
        return m


def fill(addr, size, oid):
    """Object `oid` of `size` bytes at addr: the size's pattern with oid at both ends."""
    p = pattern(size)
    ctypes.memmove(addr, p.ptr, size)
    ctypes.c_uint64.from_address(addr).value = oid
    ctypes.c_uint64.from_address(addr + size - 8).value = oid


def check(addr, size, oid):
    """1 if the object at addr is not object oid of size bytes, else 0."""
    if ctypes.c_uint64.from_address(addr).value != oid:
        return 1
    if ctypes.c_uint64.from_address(addr + size - 8).value != oid:
        return 1
    p = pattern(size)
    return 1 if _libc.memcmp(addr + 8, p.ptr + 8, size - 16) != 0 else 0


def bytes_addr(b):
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value


def bytearray_addr(ba):
    return ctypes.addressof((ctypes.c_char * len(ba)).from_buffer(ba))


class HostMemory:
    """Where the benchmark's buffers live (--memory host): Mem, filled and checked with the
    functions above. Every backend fills and checks runs of objects of one size laid out one
    after the other from an address."""

    kind = "host"
    info = {}

    def alloc(self, size):
        return Mem(size)

    def free(self, mem):
        pass

    def fill_run(self, addr, size, oids):
        for j, oid in enumerate(oids):
            fill(addr + j * size, size, oid)

    def check_run(self, addr, size, oids):
        """How many of the objects at addr are not objects oids of size bytes."""
        return sum(check(addr + j * size, size, oid) for j, oid in enumerate(oids))

    def zero(self, addr, nbytes):
        pass  # host gets overwrite ids that differ from round to round; left as it was

    def thread_init(self):
        pass


class FakeGpuMemory(HostMemory):
    """--memory gpu --fake-gpu: device memory of egmstore's fake CUDA driver (libcuda.so.1 of
    BUILD/fake-cuda on LD_LIBRARY_PATH), which is host memory: the stores take it for GPU
    memory, the pattern is written and checked as on the host. Tests the flow, not a speed."""

    kind = "fake-gpu"

    def __init__(self, device):
        sys.path.insert(0, os.path.join(bl.REPO, "bench", "gpu"))
        import gpulib

        why = gpulib.check_fake_driver()
        if why:
            raise SystemExit("store_bench: --fake-gpu: " + why)
        self.dev = gpulib.FakeDevice(device)
        self.ctx = ctypes.c_void_p()
        self.dev._fn("cuCtxGetCurrent", ctypes.POINTER(ctypes.c_void_p))(ctypes.byref(self.ctx))
        self.info = {"device": self.dev.name, "fake_gpu": True}

    def thread_init(self):
        self.dev._fn("cuCtxSetCurrent", ctypes.c_void_p)(self.ctx)

    def alloc(self, size):
        m = Mem.__new__(Mem)
        m.ptr, m.size, m._raw = self.dev.alloc(size), size, None
        return m

    def zero(self, addr, nbytes):
        _libc.memset(addr, 0, nbytes)


class TorchGpuMemory:
    """--memory gpu: buffers are CUDA tensors of PyTorch on one GPU. The pattern of a size is
    random bytes made on the GPU (seeded by the size); an object is the pattern with its id in
    its first and last 8 bytes. Fills, zeroing and checks run on the GPU, then synchronize."""

    kind = "gpu"

    def __init__(self, device):
        try:
            import torch
        except ImportError as exc:
            raise SystemExit("store_bench: --memory gpu needs PyTorch with CUDA (import torch "
                             "failed: %s); without a GPU, --fake-gpu runs the flow on egmstore's "
                             "fake CUDA driver" % exc)
        if not torch.cuda.is_available() or device >= torch.cuda.device_count():
            raise SystemExit("store_bench: --memory gpu: no CUDA device %d visible to torch "
                             "(%d devices)" % (device, torch.cuda.device_count()))
        self.torch = torch
        self.device = torch.device("cuda", device)
        torch.cuda.set_device(self.device)
        self.bufs = {}  # address -> int64 tensor
        self.patterns = {}
        self.info = {"device": str(self.device), "name": torch.cuda.get_device_name(self.device),
                     "torch": torch.__version__, "cuda": torch.version.cuda, "fake_gpu": False}

    def thread_init(self):
        self.torch.cuda.set_device(self.device)

    def alloc(self, size):
        t = self.torch.zeros((size + 7) // 8, dtype=self.torch.int64, device=self.device)
        self.torch.cuda.synchronize(self.device)
        m = Mem.__new__(Mem)
        m.ptr, m.size, m._raw = t.data_ptr(), size, t
        self.bufs[m.ptr] = t
        return m

    def free(self, mem):
        self.bufs.pop(mem.ptr, None)
        mem._raw = None

    def _rows(self, addr, size, n):
        """The n objects of size bytes at addr, as an n x size/8 int64 view."""
        for base, t in self.bufs.items():
            if base <= addr and addr + n * size <= base + t.numel() * 8:
                off = (addr - base) // 8
                return t[off:off + n * size // 8].view(n, size // 8)
        raise ValueError("no GPU buffer holds %d x %d bytes at 0x%x" % (n, size, addr))

    def _pattern(self, size):
        p = self.patterns.get(size)
        if p is None:
            torch = self.torch
            g = torch.Generator(device=self.device)
            g.manual_seed(size)
            p = torch.randint(0, 256, (size,), dtype=torch.uint8, device=self.device,
                              generator=g).view(torch.int64)
            self.patterns.clear()  # large patterns are large; one size at a time
            self.patterns[size] = p
        return p

    def fill_run(self, addr, size, oids):
        if not oids:
            return
        rows = self._rows(addr, size, len(oids))
        ids = self.torch.tensor(oids, dtype=self.torch.int64, device=self.device)
        rows.copy_(self._pattern(size).expand_as(rows))
        rows[:, 0] = ids
        rows[:, -1] = ids
        self.torch.cuda.synchronize(self.device)

    def check_run(self, addr, size, oids):
        if not oids:
            return 0
        rows = self._rows(addr, size, len(oids))
        ids = self.torch.tensor(oids, dtype=self.torch.int64, device=self.device)
        bad = (rows[:, 1:-1] != self._pattern(size)[1:-1]).any(dim=1)
        bad |= (rows[:, 0] != ids) | (rows[:, -1] != ids)
        return int(bad.sum().item())

    def zero(self, addr, nbytes):
        self._rows(addr, nbytes, 1).zero_()
        self.torch.cuda.synchronize(self.device)


MEM = HostMemory()  # --memory gpu replaces it (one client thread then; no client processes)


# ---- stores -----------------------------------------------------------------------------

def store_class(system):
    if system == "mooncake":
        from mooncake.store import MooncakeDistributedStore
    else:
        from egmstore.mooncake import MooncakeDistributedStore
    return MooncakeDistributedStore


def open_store(system, protocol, master, local_buffer):
    """A client store that contributes no memory (global_segment_size 0)."""
    s = store_class(system)()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, local_buffer, protocol, "", master)
    if rc != 0:
        raise RuntimeError("%s setup(protocol=%s, master=%s) answered %d" % (system, protocol, master, rc))
    return s


class Registered:
    """Memory of MEM (host, or GPU with --memory gpu) registered with a store for its lifetime
    (unregistered and released by close)."""

    def __init__(self, store, size):
        self.mem = MEM.alloc(size)
        self.ptr = self.mem.ptr
        self.store = store
        rc = store.register_buffer(self.ptr, size)
        if rc != 0:
            MEM.free(self.mem)
            raise RuntimeError("register_buffer(%d bytes, %s memory) answered %d" % (size, MEM.kind, rc))

    def close(self):
        self.store.unregister_buffer(self.ptr)
        MEM.free(self.mem)


# ---- rounds -----------------------------------------------------------------------------

class Flag:
    def __init__(self):
        self.value = 0


class Ctx:
    """What one client needs: its index, the client count, the barrier and the stop flag."""

    def __init__(self, index, clients, barrier, flag):
        self.index, self.clients, self.barrier, self.flag = index, clients, barrier, flag
        self.reset()

    def wait(self):
        self.barrier.wait(BARRIER_TIMEOUT_S)

    def reset(self):
        self.stats = {"verify_errors": 0, "answers": {}}

    def bad(self, answer):
        """Counts a failed call by its answer (a Mooncake ErrorCode, or a wrong size); 1."""
        key = str(answer)
        self.stats["answers"][key] = self.stats["answers"].get(key, 0) + 1
        return 1


def run_rounds(ctx, n, slots, budget_s, prepare, call, verify):
    """Items 0..n-1 (the same n on every client) in rounds of `slots`: prepare(i, k) untimed,
    barrier, k timed calls call(i + j, j) -> error count, barrier, verify(i, k) -> error count.
    Stops when every item is done or client 0 has spent budget_s in timed sections (at least
    one round). Returns (latencies ns, calls, errors, timed seconds, error detail)."""
    lat, errors, timed, i = [], 0, 0.0, 0
    ctx.reset()
    clock = time.perf_counter_ns
    while True:
        k = min(slots, n - i)
        prepare(i, k)
        ctx.wait()
        t0 = clock()
        for j in range(k):
            t = clock()
            e = call(i + j, j)
            lat.append(clock() - t)
            errors += e
        ctx.wait()
        timed += (clock() - t0) / 1e9
        bad = verify(i, k)
        errors += bad
        ctx.stats["verify_errors"] += bad
        i += k
        if ctx.index == 0:
            ctx.flag.value = 1 if (i >= n or timed >= budget_s) else 0
        ctx.wait()
        if ctx.flag.value:
            return lat, i, errors, timed, ctx.stats


def step(lat, calls, errors, timed, stats, **extra):
    d = {"lat": lat, "calls": calls, "errors": errors, "seconds": timed, "stats": stats}
    d.update(extra)
    return d


def cleanup(ctx, store):
    """Everything the phase stored is removed (client 0, forced) before the next phase."""
    ctx.wait()
    if ctx.index == 0:
        store.remove_all(True)
    ctx.wait()


def phase_single(store, spec, ctx):
    size, api, slots = spec["size"], spec["api"], spec["slots"]
    base = spec["id_base"] + ctx.index * spec["n_put"]
    key = lambda oid: "%s/%d" % (spec["tag"], oid)  # noqa: E731
    put_ids = [base + j for j in range(spec["n_put"])]
    out = {}
    if api == "zero-copy":
        src, dst = Registered(store, slots * size), Registered(store, slots * size)
        try:
            def prep_put(i, k):
                MEM.fill_run(src.ptr, size, put_ids[i:i + k])

            def do_put(i, j):
                rc = store.put_from(key(put_ids[i]), src.ptr + j * size, size)
                return 0 if rc == 0 else ctx.bad(rc)

            r = run_rounds(ctx, len(put_ids), slots, spec["budget"], prep_put, do_put, lambda i, k: 0)
            out["put"] = step(*r, call="put_from")
            stored = put_ids[:r[1]]
            get_ids = [stored[j % len(stored)] for j in range(spec["n_get"])]

            def do_get(i, j):
                rc = store.get_into(key(get_ids[i]), dst.ptr + j * size, size)
                return 0 if rc == size else ctx.bad(rc)

            def ver_get(i, k):
                return MEM.check_run(dst.ptr, size, get_ids[i:i + k])

            # GPU memory is zeroed before each round, so that a get that moved nothing shows
            r = run_rounds(ctx, len(get_ids), slots, spec["budget"], lambda i, k: MEM.zero(dst.ptr, k * size),
                           do_get, ver_get)
            out["get"] = step(*r, call="get_into")
        finally:
            src.close()
            dst.close()
    else:  # bytes: put(key, bytes-like) and get(key) -> bytes
        values = [bytearray(size) for _ in range(slots)]
        addrs = [bytearray_addr(v) for v in values]
        got = [None] * slots

        def prep_put(i, k):
            for j in range(k):
                fill(addrs[j], size, put_ids[i + j])

        def do_put(i, j):
            rc = store.put(key(put_ids[i]), values[j])
            return 0 if rc == 0 else ctx.bad(rc)

        r = run_rounds(ctx, len(put_ids), slots, spec["budget"], prep_put, do_put, lambda i, k: 0)
        out["put"] = step(*r, call="put")
        stored = put_ids[:r[1]]
        get_ids = [stored[j % len(stored)] for j in range(spec["n_get"])]

        def do_get(i, j):
            got[j] = store.get(key(get_ids[i]))
            return 0 if len(got[j]) == size else ctx.bad("len %d" % len(got[j]))

        def ver_get(i, k):
            bad = 0
            for j in range(k):
                b = got[j]
                bad += 1 if len(b) != size else check(bytes_addr(b), size, get_ids[i + j])
                got[j] = None
            return bad

        r = run_rounds(ctx, len(get_ids), slots, spec["budget"], lambda i, k: None, do_get, ver_get)
        out["get"] = step(*r, call="get")
    cleanup(ctx, store)
    return out


def phase_batch(store, spec, ctx):
    block, nkeys = spec["size"], spec["batch"]
    calls = spec["n_put"]
    base = spec["id_base"] + ctx.index * calls * nkeys
    src, dst = Registered(store, nkeys * block), Registered(store, nkeys * block)
    ptrs_src = [src.ptr + j * block for j in range(nkeys)]
    ptrs_dst = [dst.ptr + j * block for j in range(nkeys)]
    sizes = [block] * nkeys
    ids = lambda c: range(base + c * nkeys, base + (c + 1) * nkeys)  # noqa: E731
    keys = lambda c: ["%s/%d" % (spec["tag"], oid) for oid in ids(c)]  # noqa: E731
    cur = {}
    out = {}
    try:
        def prep_put(i, k):
            if k:
                MEM.fill_run(src.ptr, block, list(ids(i)))
                cur["keys"] = keys(i)

        def do_put(i, j):
            rcs = store.batch_put_from(cur["keys"], ptrs_src, sizes)
            return sum(ctx.bad(rc) for rc in rcs if rc != 0)

        r = run_rounds(ctx, calls, 1, spec["budget"], prep_put, do_put, lambda i, k: 0)
        out["put"] = step(*r, call="batch_put_from")
        stored = r[1]
        order = [j % stored for j in range(spec["n_get"])]

        def prep_get(i, k):
            if k:
                MEM.zero(dst.ptr, nkeys * block)
                cur["keys"] = keys(order[i])

        def do_get(i, j):
            rcs = store.batch_get_into(cur["keys"], ptrs_dst, sizes)
            return sum(ctx.bad(rc) for rc in rcs if rc != block)

        def ver_get(i, k):
            if not k:
                return 0
            return MEM.check_run(dst.ptr, block, list(ids(order[i])))

        r = run_rounds(ctx, len(order), 1, spec["budget"], prep_get, do_get, ver_get)
        out["get"] = step(*r, call="batch_get_into")
    finally:
        src.close()
        dst.close()
    cleanup(ctx, store)
    return out


class KeyChooser:
    """Key ranks drawn uniformly or from a zipf distribution (s = theta) over n keys, mapped
    through a fixed permutation so that the hot keys are spread over the preloading clients."""

    def __init__(self, dist, n, seed):
        self.rng = random.Random(seed)
        self.n = n
        perm = list(range(n))
        random.Random(12345).shuffle(perm)
        self.perm = perm
        self.cum = None
        if dist.startswith("zipf"):
            theta = float(dist.split("-", 1)[1]) if "-" in dist else 0.99
            acc, cum = 0.0, []
            for r in range(1, n + 1):
                acc += 1.0 / r ** theta
                cum.append(acc)
            self.cum = cum

    def __call__(self):
        if self.cum is None:
            return self.perm[self.rng.randrange(self.n)]
        rank = bisect.bisect_left(self.cum, self.rng.random() * self.cum[-1])
        return self.perm[min(rank, self.n - 1)]


def phase_mixed(store, spec, ctx):
    size, slots, nkeys = spec["size"], spec["slots"], spec["keys"]
    key = lambda oid: "%s/%d" % (spec["tag"], oid)  # noqa: E731
    src, dst = Registered(store, slots * size), Registered(store, slots * size)
    out = {}
    try:
        # preload (untimed): client c stores keys c, c + clients, ...
        mine = list(range(ctx.index, nkeys, ctx.clients))
        bad = 0
        for oid in mine:
            fill(src.ptr, size, oid)
            bad += 0 if store.put_from(key(oid), src.ptr, size) == 0 else 1
        ctx.wait()
        choose = KeyChooser(spec["dist"], nkeys, seed=1000 + ctx.index)
        rng = random.Random(2000 + ctx.index)
        new_base = spec["id_base"] + ctx.index * spec["n_ops"]
        ops = []  # (is_read, oid)
        for j in range(spec["n_ops"]):
            if rng.random() < spec["read_ratio"]:
                ops.append((True, choose()))
            else:
                ops.append((False, new_base + j))
        lat_r, lat_w = [], []
        clock = time.perf_counter_ns

        def prep(i, k):
            for j in range(k):
                is_read, oid = ops[i + j]
                if not is_read:
                    fill(src.ptr + j * size, size, oid)

        def do(i, j):
            is_read, oid = ops[i]
            t = clock()
            if is_read:
                rc = store.get_into(key(oid), dst.ptr + j * size, size)
                lat_r.append(clock() - t)
                return 0 if rc == size else ctx.bad(rc)
            rc = store.put_from(key(oid), src.ptr + j * size, size)
            lat_w.append(clock() - t)
            return 0 if rc == 0 else ctx.bad(rc)

        def ver(i, k):
            return sum(check(dst.ptr + j * size, size, ops[i + j][1])
                       for j in range(k) if ops[i + j][0])

        r = run_rounds(ctx, len(ops), slots, spec["budget"], prep, do, ver)
        out["mixed"] = step(r[0], r[1], r[2] + bad, r[3], r[4], call="get_into+put_from",
                            lat_read=lat_r, lat_write=lat_w)
    finally:
        src.close()
        dst.close()
    cleanup(ctx, store)
    return out


PHASES = {"single": phase_single, "batch": phase_batch, "mixed": phase_mixed}


def run_phase(store, spec, ctx):
    try:
        return PHASES[spec["workload"]](store, spec, ctx)
    except threading.BrokenBarrierError:
        raise
    except Exception:
        try:
            ctx.barrier.abort()  # the other clients stop waiting for this one
        except Exception:
            pass
        raise


# ---- clients: threads sharing a store, or processes --------------------------------------

class ThreadClients:
    def __init__(self, store, n):
        self.store, self.n = store, n

    def run(self, spec):
        barrier, flag = threading.Barrier(self.n), Flag()
        results, errors = [None] * self.n, []

        def body(i):
            try:
                MEM.thread_init()
                results[i] = run_phase(self.store, spec, Ctx(i, self.n, barrier, flag))
            except Exception as exc:
                errors.append("client %d: %s" % (i, "".join(traceback.format_exception_only(type(exc), exc)).strip()))
                try:
                    barrier.abort()
                except Exception:
                    pass

        threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError("; ".join(errors))
        return results

    def close(self):
        pass


def warm_store(store, pool_size, share, prefix):
    """Untimed: writes `share` of the pool once through this store with 4 MiB objects, then
    removes them, so that no timed put pays a first touch: the pool's pages are mapped lazily
    (both systems), and over shm each client process maps the pool itself, whose pages fault
    on a process's first write to them. Returns (objects, size, failed, removed)."""
    size = min(4 * bl.MiB, pool_size)
    n = int(pool_size * share // size)
    buf = Registered(store, size)
    bad = 0
    try:
        MEM.fill_run(buf.ptr, size, [1])
        for i in range(n):
            bad += 0 if store.put_from("%s/%d" % (prefix, i), buf.ptr, size) == 0 else 1
    finally:
        buf.close()
    return n, size, bad, store.remove_all(True)


def _proc_worker(index, clients, conn, barrier, flag, system, protocol, master, local_buffer, paths):
    """A benchmark client process: one store, then phases until told to stop."""
    sys.path[:0] = paths
    try:
        store = open_store(system, protocol, master, local_buffer)
    except Exception as exc:
        conn.send(("error", "setup: %s" % exc))
        os._exit(1)
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            break
        try:
            if msg.get("workload") == "warm":
                conn.send(("ok", warm_store(store, msg["pool_size"], msg["fill"], msg["tag"])))
                continue
            conn.send(("ok", run_phase(store, msg, Ctx(index, clients, barrier, flag))))
        except Exception as exc:
            conn.send(("error", "".join(traceback.format_exception_only(type(exc), exc)).strip()))
    store.close()
    os._exit(0)  # Mooncake's client threads may hang interpreter exit


class ProcessClients:
    def __init__(self, n, system, protocol, master, local_buffer):
        ctx = multiprocessing.get_context("spawn")
        self.n = n
        self.barrier, self.flag = ctx.Barrier(n), ctx.Value("i", 0)
        self.conns, self.procs = [], []
        paths = [p for p in sys.path if p]
        for i in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_proc_worker, daemon=True,
                            args=(i, n, child, self.barrier, self.flag, system, protocol, master,
                                  local_buffer, paths))
            p.start()
            self.conns.append(parent)
            self.procs.append(p)
        for i, c in enumerate(self.conns):
            kind, detail = self._recv(c, SETUP_TIMEOUT_S, i)
            if kind != "ready":
                self.close()
                raise RuntimeError("client process %d: %s" % (i, detail))

    def _recv(self, conn, timeout, i):
        if not conn.poll(timeout):
            raise RuntimeError("client process %d did not answer within %d s" % (i, timeout))
        return conn.recv()

    def run(self, spec):
        for c in self.conns:
            c.send(spec)
        results, errors = [], []
        for i, c in enumerate(self.conns):
            try:
                kind, value = self._recv(c, BARRIER_TIMEOUT_S + 60, i)
            except (RuntimeError, EOFError) as exc:
                kind, value = "error", str(exc)
            if kind == "ok":
                results.append(value)
            else:
                errors.append("client process %d: %s" % (i, value))
                try:
                    self.barrier.abort()
                except Exception:
                    pass
        if errors:
            self.barrier.reset()
            raise RuntimeError("; ".join(errors))
        return results

    def warm(self, pool_size, fill_share, tag):
        """warm_store in each client process, one process at a time (each fills the pool's
        share, and the pool holds one share at a time). Returns the failed puts."""
        bad = 0
        for i, c in enumerate(self.conns):
            c.send({"workload": "warm", "pool_size": pool_size, "fill": fill_share,
                    "tag": "%s/warm-p%d" % (tag, i)})
            kind, value = self._recv(c, BARRIER_TIMEOUT_S, i)
            if kind != "ok":
                raise RuntimeError("client process %d: warm-up: %s" % (i, value))
            bad += value[2]
        return bad

    def close(self):
        for c in self.conns:
            try:
                c.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 20
        for p in self.procs:
            p.join(max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5)


# ---- clusters -----------------------------------------------------------------------------

class Cluster:
    def __init__(self):
        self.procs, self.master = [], None
        self.http_port = None  # the egmstore master's admin HTTP

    def stop(self):
        for p in reversed(self.procs):
            bl.stop(p)
        self.procs = []


def start_egmstore(binary, log_dir, pool, egm=False, lease_ms=bl.BENCH_LEASE_MS):
    """egm: the provider contributes an EGM pool (HOST_NUMA VMM memory, posix_fd handles,
    served over nvlink), as bench/gpu/gpulib.py's Cluster starts it for the GPU workloads."""
    c = Cluster()
    mlog = os.path.join(log_dir, "egm-master.log")
    with open(mlog, "wb") as log:
        c.procs.append(subprocess.Popen(
            # a short read lease: see bl.BENCH_LEASE_MS and Bench.wait_held
            [binary, "master", "--port", "0", "--listen-address", "127.0.0.1", "--http-port", "0",
             "--default-kv-lease-ttl", str(lease_ms)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=bl.die_with_parent))
    line = bl.wait_line(mlog, "egmstore master listening on ", c.procs[0])
    if line is None:
        c.stop()
        raise RuntimeError("egmstore master did not start; log: " + mlog)
    c.master = line.rsplit(" ", 1)[1]
    line = bl.wait_line(mlog, "egmstore master admin http on ", c.procs[0])
    if line is None:
        c.stop()
        raise RuntimeError("egmstore master has no admin http; log: " + mlog)
    c.http_port = int(line.rsplit(":", 1)[1])
    plog = os.path.join(log_dir, "egm-provider.log")
    with open(plog, "wb") as log:
        c.procs.append(subprocess.Popen(
            [binary, "provider", "--master", c.master, "--global-segment-size", str(pool),
             "--local-hostname", "127.0.0.1"] + (egm_provider_args(pool) if egm else []),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=bl.die_with_parent))
    if bl.wait_line(plog, "egmstore provider ready", c.procs[1], timeout=600 if egm else 30) is None:
        c.stop()
        raise RuntimeError("egmstore provider did not become ready; log: " + plog)
    return c


def egm_provider_args(pool):
    chunk = bl.GiB if pool % bl.GiB == 0 else 16 * bl.MiB
    return ["--enable-egm-store-pool", "true", "--egm-handle-type", "posix_fd", "--protocol", "nvlink",
            "--max-mr-size", str(chunk)]


def find_mooncake_master():
    if os.environ.get("MOONCAKE_MASTER"):  # bench/py/unpack-mooncake-gpu.sh's env.sh sets it
        return os.environ["MOONCAKE_MASTER"] if os.access(os.environ["MOONCAKE_MASTER"], os.X_OK) else None
    for cand in (os.path.join(os.path.dirname(sys.executable), "mooncake_master"),):
        if os.access(cand, os.X_OK):
            return cand
    import shutil

    found = shutil.which("mooncake_master")
    if found:
        return found
    try:
        import mooncake

        cand = os.path.join(os.path.dirname(mooncake.__file__), "mooncake_master")
        if os.access(cand, os.X_OK):
            return cand
    except ImportError:
        pass
    return None


def start_mooncake(log_dir, pool):
    """mooncake_master on free ports and a holder process whose store mounts `pool` bytes."""
    binary = find_mooncake_master()
    if binary is None:
        raise FileNotFoundError("mooncake_master (pip package %s) not found next to %s, on PATH "
                                "or in the mooncake package" % (MOONCAKE_PACKAGE, sys.executable))
    c = Cluster()
    port = bl.free_port()
    mlog = os.path.join(log_dir, "mooncake-master.log")
    with open(mlog, "wb") as log:
        c.procs.append(subprocess.Popen(
            [binary, "--rpc_port", str(port), "--port", str(port), "--metrics_port", str(bl.free_port()),
             "--http_metadata_server_port", str(bl.free_port()), "--default_kv_lease_ttl", "5000"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=bl.die_with_parent))
    if not bl.wait_port(port, c.procs[0]):
        c.stop()
        raise RuntimeError("mooncake_master did not start; log: " + mlog)
    c.master = "127.0.0.1:%d" % port
    hlog = os.path.join(log_dir, "mooncake-holder.log")
    with open(hlog, "wb") as log:
        holder = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--mooncake-holder",
                                   "--master", c.master, "--pool-size", str(pool)],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE,
                                  preexec_fn=bl.die_with_parent)
    c.procs.append(holder)
    if bl.wait_line(hlog, "mooncake holder ready", holder, timeout=SETUP_TIMEOUT_S) is None:
        c.stop()
        raise RuntimeError("Mooncake holder store did not mount its segment; log: " + hlog)
    return c


INTERRUPTED = []


def _interrupt(signum, frame):
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt()


def mooncake_holder(args):
    s = store_class("mooncake")()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", args.pool_size, 16 * bl.MiB, "tcp", "", args.master)
    if rc != 0:
        print("mooncake holder setup answered %d" % rc, flush=True)
        os._exit(1)
    print("mooncake holder ready (%d bytes)" % args.pool_size, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    sys.stdin.read()  # until the parent closes the pipe or terminates us
    os._exit(0)


# ---- plan, aggregation, records ----------------------------------------------------------

def aggregate(per_client, name):
    """Steps of every client -> one dict: latencies merged, calls/errors summed, seconds max."""
    lat, calls, errors, secs, extra = [], 0, 0, 0.0, {}
    verify_errors, answers = 0, {}
    for res in per_client:
        s = res[name]
        lat += s["lat"]
        calls += s["calls"]
        errors += s["errors"]
        secs = max(secs, s["seconds"])
        verify_errors += s["stats"]["verify_errors"]
        for k, v in s["stats"]["answers"].items():
            answers[k] = answers.get(k, 0) + v
        for k in ("lat_read", "lat_write"):
            if k in s:
                extra.setdefault(k, []).extend(s[k])
    if errors:
        extra["error_detail"] = {"wrong_bytes": verify_errors, "failed_calls_by_answer": answers}
    return lat, calls, errors, secs, per_client[0][name]["call"], extra


def memory_name():
    return "host" if MEM.kind == "host" else "gpu"


class Bench:
    def __init__(self, args, system):
        self.args, self.system = args, system
        self.records = []
        self.tag = uuid.uuid4().hex[:8]
        self.next_id = 1
        self.phase_no = 0
        self.show = bl.progress_enabled(args.progress)
        self.warmed = False
        self.master_http = None  # the egmstore master's admin HTTP port, when this run started it
        self.lease_ms = bl.BENCH_SMOKE_LEASE_MS if args.smoke else bl.BENCH_LEASE_MS

    def wait_held(self):
        """Untimed, before a phase: each phase ends with remove_all(True) of what it stored, and
        the space of what its gets read stays held until their read leases end
        (bl.wait_master_held). Mooncake frees at once; an external master is not watched."""
        if self.master_http is not None:
            bl.wait_master_held(self.master_http, self.lease_ms)

    def say(self, text):
        if self.show:
            print(text, flush=True)

    def spec(self, workload, **kw):
        self.phase_no += 1
        s = {"workload": workload, "tag": "%s/p%d" % (self.tag, self.phase_no),
             "id_base": self.next_id, "budget": self.args.seconds}
        s.update(kw)
        self.next_id += 1 << 32
        return s

    def per_client_cap(self, obj_bytes, clients):
        """Objects one client may store in a phase: the pool's --fill share over the clients."""
        return int(self.args.pool_size * self.args.fill // (obj_bytes * clients))

    def emit(self, per_client, name, op, transport, spec, clients, procs, **fields):
        """clients: all of them; the record counts them per process (clients x procs in all),
        as `egmstore bench data` does."""
        lat, calls, errors, secs, call, extra = aggregate(per_client, name)
        st = bl.latency_stats(lat)
        r = bl.record(workload=spec["workload"], system=self.system, api="python",
                      transport=transport, op=op, memory=memory_name(), bytes=spec["size"],
                      batch=spec.get("batch", 1), clients=clients // procs, procs=procs, calls=calls,
                      seconds=round(secs, 6), errors=errors, call=call,
                      mode="processes" if procs > 1 else "threads",
                      verified=(op != "put" and name != "put"), **fields, **st)
        if MEM.kind == "fake-gpu":
            r["fake_gpu"] = True
        if "error_detail" in extra:
            r["error_detail"] = extra.pop("error_detail")
        for k, v in extra.items():
            s2 = bl.latency_stats(v, keep=2)
            r[k.replace("lat_", "") + "_p50_us"] = s2["p50_us"]
            r[k.replace("lat_", "") + "_p99_us"] = s2["p99_us"]
        self.records.append(r)
        gb = "%.3f GB/s" % r["gbps"] if r["gbps"] is not None else "-"
        self.say("  %-8s %-6s %-15s %8s x%-5d c=%d%s: %10.0f ops/s %s p50 %s us p99 %s us errors %d"
                 % (spec["workload"], transport, call, bl.fmt_size(spec["size"]), r["batch"], clients,
                    " procs" if procs > 1 else "", r["ops_s"] or 0, gb, r["p50_us"], r["p99_us"], errors))
        return r

    def run_on(self, runner, spec, transport, clients, procs, names):
        try:
            self.wait_held()
            per_client = runner.run(spec)
        except Exception as exc:
            self.say("  %s %s failed: %s" % (spec["workload"], transport, exc))
            self.records.append(bl.record(
                workload=spec["workload"], system=self.system, api="python", transport=transport,
                op="failed", memory=memory_name(), bytes=spec["size"], batch=spec.get("batch", 1), clients=clients // procs,
                procs=procs, errors=1, message=str(exc)[:500]))
            return
        for name, op, fields in names:
            self.emit(per_client, name, op, transport, spec, clients, procs, **fields)

    def plan_single(self, runner, transport, sizes, api, clients, procs):
        a = self.args
        for size in sizes:
            cap = self.per_client_cap(size, clients)
            if cap < 1:
                self.say("  single %s %s x%d clients: skipped, the pool (%s at %.0f%%) is too small"
                         % (api, bl.fmt_size(size), clients, bl.fmt_size(a.pool_size), a.fill * 100))
                continue
            n_put = max(1, min(a.max_ops, cap, a.bytes_per_phase // size or 1))
            n_get = max(1, min(a.max_ops, a.bytes_per_phase // size or 1))
            slots = max(1, min(a.ring_bytes // size, n_put, 256))
            spec = self.spec("single", api=api, size=size, n_put=n_put, n_get=n_get, slots=slots)
            self.run_on(runner, spec, transport, clients, procs,
                        [("put", "put", {}), ("get", "get", {})])

    def plan_batch(self, runner, transport, batches, clients, procs):
        a = self.args
        for nkeys, block in batches:
            cap = self.per_client_cap(nkeys * block, clients)
            if cap < 1:
                self.say("  batch %dx%s: skipped, the pool is too small" % (nkeys, bl.fmt_size(block)))
                continue
            n_calls = max(1, min(a.max_ops, cap, a.bytes_per_phase // (nkeys * block) or 1))
            spec = self.spec("batch", size=block, batch=nkeys, n_put=n_calls, n_get=n_calls)
            self.run_on(runner, spec, transport, clients, procs,
                        [("put", "put", {}), ("get", "get", {})])

    def plan_mixed(self, runner, transport, clients, procs):
        a = self.args
        size = a.mixed_size
        keys = max(clients, min(a.mixed_keys, int(a.pool_size * a.fill / 2 // size)))
        n_ops = max(1, min(a.max_ops, a.bytes_per_phase // size or 1))
        # new keys written: (1 - read_ratio) of the ops, kept within the other half of the fill share
        if (1 - a.read_ratio) * n_ops * clients * size > a.pool_size * a.fill / 2:
            n_ops = max(1, int(a.pool_size * a.fill / 2 / size / clients / max(1e-9, 1 - a.read_ratio)))
        slots = max(1, min(a.ring_bytes // size, n_ops, 256))
        for dist in a.dists:
            spec = self.spec("mixed", size=size, keys=keys, dist=dist, read_ratio=a.read_ratio,
                             n_ops=n_ops, slots=slots)
            self.run_on(runner, spec, transport, clients, procs,
                        [("mixed", "mixed", {"dist": dist, "read_ratio": a.read_ratio, "keys": keys})])

    def run_protocol(self, protocol, master):
        a = self.args
        # The client's local buffer holds what the bytes API returns and, in
        # Mooncake, the temporary host copy of a get into GPU memory (its tcp
        # transport stages GPU data there): it must hold the largest object.
        staged = [s for s in a.sizes if "bytes" in a.apis or a.memory == "gpu"]
        local_buffer = max(16 * bl.MiB, (max(staged) if staged else 0) + 16 * bl.MiB)
        store = open_store(self.system, protocol, master, local_buffer)
        try:
            self.say("%s over %s (master %s)" % (self.system, protocol, master))
            if a.warmup and not self.warmed:
                self.warm(store)
            one = ThreadClients(store, 1)
            if "single" in a.workloads:
                for api in a.apis:
                    self.plan_single(one, protocol, a.sizes, api, 1, 1)
            # batches of more than LARGE_BATCH keys run last: Mooncake over tcp fails them and
            # its store is not usable afterwards (its transfers time out), which must not spoil
            # the other figures
            small = [(n, b) for n, b in a.batches if n <= LARGE_BATCH]
            large = [(n, b) for n, b in a.batches if n > LARGE_BATCH]
            if "batch" in a.workloads:
                self.plan_batch(one, protocol, small, 1, 1)
            if "mixed" in a.workloads:
                self.plan_mixed(one, protocol, 1, 1)
            for n in [c for c in a.clients if c > 1]:
                if "threads" in a.modes:
                    many = ThreadClients(store, n)
                    if "single" in a.workloads:
                        self.plan_single(many, protocol, a.concurrency_sizes, "zero-copy", n, 1)
                    if "mixed" in a.workloads:
                        self.plan_mixed(many, protocol, n, 1)
                if "processes" in a.modes:
                    try:
                        pool = ProcessClients(n, self.system, protocol, master, 64 * bl.MiB)
                    except Exception as exc:
                        self.say("  %d client processes could not start: %s" % (n, exc))
                        self.records.append(bl.record(
                            workload="single", system=self.system, api="python", transport=protocol,
                            op="failed", clients=1, procs=n, errors=1, message=str(exc)[:500]))
                        continue
                    try:
                        if a.warmup and protocol == "shm":
                            self.wait_held()
                            t = time.monotonic()
                            bad = pool.warm(a.pool_size, a.fill, self.tag)
                            self.say("  warm-up of %d client processes (each maps the shm pool): "
                                     "%.1f s, %d failed puts" % (n, time.monotonic() - t, bad))
                        if "single" in a.workloads:
                            self.plan_single(pool, protocol, a.concurrency_sizes, "zero-copy", n, n)
                        if "mixed" in a.workloads:
                            self.plan_mixed(pool, protocol, n, n)
                    finally:
                        pool.close()
            if "batch" in a.workloads and large:
                self.plan_batch(one, protocol, large, 1, 1)
        except KeyboardInterrupt:
            INTERRUPTED.append("interrupt")
            raise
        finally:
            if not INTERRUPTED:  # client threads may still be in calls: leave it to the exit
                store.close()

    def warm(self, store):
        n, size, bad, removed = warm_store(store, self.args.pool_size, self.args.fill, self.tag + "/warm")
        self.warmed = True
        self.say("  warm-up: %d x %s written and removed (%d failed, remove_all %d)"
                 % (n, bl.fmt_size(size), bad, removed))

    def ceiling(self):
        """memcpy of each size between two buffers of this process, timed per call."""
        a = self.args
        for size in a.sizes:
            src, dst = Mem(size), Mem(size)
            ctypes.memmove(src.ptr, pattern(size).ptr, size)
            n = max(3, min(a.max_ops, a.bytes_per_phase // size or 1))
            lat, t_end = [], time.perf_counter() + a.seconds
            clock = time.perf_counter_ns
            for _ in range(n):
                t = clock()
                ctypes.memmove(dst.ptr, src.ptr, size)
                lat.append(clock() - t)
                if time.perf_counter() > t_end and len(lat) >= 3:
                    break
            errors = 1 if _libc.memcmp(dst.ptr, src.ptr, size) != 0 else 0
            r = bl.record(workload="ceiling", system="ceiling", api="python", transport="memcpy",
                          op="copy", bytes=size, calls=len(lat), seconds=round(sum(lat) / 1e9, 6),
                          errors=errors, call="ctypes.memmove", **bl.latency_stats(lat))
            self.records.append(r)
            self.say("  ceiling memcpy %8s: %.3f GB/s p50 %s us" % (bl.fmt_size(size), r["gbps"], r["p50_us"]))
            del src, dst


# ---- main ---------------------------------------------------------------------------------

def parse_batches(text):
    out = []
    for t in text.split(","):
        if t.strip():
            n, _, size = t.strip().lower().partition("x")
            out.append((int(n), bl.parse_size(size)))
    return out


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("--system", choices=["egmstore", "mooncake"])
    ap.add_argument("--protocol", default=None,
                    help="comma list; egmstore: shm,tcp (default both); mooncake: tcp")
    ap.add_argument("--egm-build", default=os.path.join(bl.REPO, "build"),
                    help="egmstore build folder: <dir>/bin/egmstore and <dir>/python (default build)")
    ap.add_argument("--egmstore-bin", help="egmstore CLI (default <egm-build>/bin/egmstore)")
    ap.add_argument("--master", help="use this running master (host:port); nothing is started")
    ap.add_argument("--pool-size", type=bl.parse_size, default=None,
                    help="capacity the provider (egmstore) or holder (Mooncake) contributes (default 2GiB; smoke 256MiB)")
    ap.add_argument("--fill", type=float, default=0.6, help="share of the pool one phase may fill (default 0.6)")
    ap.add_argument("--sizes", type=bl.parse_sizes, default=None,
                    help="single-object sizes (default 4KiB,64KiB,1MiB,16MiB,256MiB)")
    ap.add_argument("--memory", choices=["host", "gpu"], default="host",
                    help="where the client's buffers are: host (default) or gpu (CUDA tensors of "
                    "PyTorch on --device; zero-copy API only, single and batch, one client; "
                    "egmstore over nvlink from an EGM pool, Mooncake over tcp)")
    ap.add_argument("--device", type=int, default=0, help="--memory gpu: the GPU ordinal (default 0)")
    ap.add_argument("--fake-gpu", action="store_true",
                    help="--memory gpu without a GPU: buffers of egmstore's fake CUDA driver "
                    "(BUILD/fake-cuda on LD_LIBRARY_PATH; host memory), no torch: tests the flow")
    ap.add_argument("--apis", default=None,
                    help="zero-copy (put_from/get_into, registered buffers) and/or bytes (put/get); "
                    "default both (gpu: zero-copy)")
    ap.add_argument("--clients", type=bl.parse_ints, default=None, help="client counts (default 1,8)")
    ap.add_argument("--modes", default="threads,processes", help="how clients > 1 run: threads,processes")
    ap.add_argument("--concurrency-sizes", type=bl.parse_sizes, default=None,
                    help="sizes run with clients > 1 (default 4KiB,64KiB,1MiB,16MiB)")
    ap.add_argument("--batches", type=parse_batches, default=None,
                    help="NxSIZE list (default 1024x4KiB,1024x64KiB,8192x64KiB,64x1MiB)")
    ap.add_argument("--dists", default="uniform,zipf-0.99", help="mixed: key distributions")
    ap.add_argument("--read-ratio", type=float, default=0.9, help="mixed: share of gets (default 0.9)")
    ap.add_argument("--mixed-size", type=bl.parse_size, default=64 * bl.KiB, help="mixed: object size (64KiB)")
    ap.add_argument("--mixed-keys", type=int, default=None, help="mixed: preloaded keys (default 2048)")
    ap.add_argument("--workloads", default=None, help="single,batch,mixed (default all; gpu: single,batch)")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="skip the untimed first write of the pool's pages")
    ap.add_argument("--ceiling", action="store_true", help="also measure memcpy of every single size")
    ap.add_argument("--seconds", type=float, default=None,
                    help="timed budget per put/get step (default 1.0; smoke 0.1), at least one round")
    ap.add_argument("--max-ops", type=int, default=None, help="calls per client per step at most (default 20000)")
    ap.add_argument("--bytes-per-phase", type=bl.parse_size, default=None,
                    help="bytes one client moves per step at most (default 4GiB; smoke 64MiB)")
    ap.add_argument("--ring-bytes", type=bl.parse_size, default=None,
                    help="buffer per client per round (default 64MiB; smoke 8MiB)")
    ap.add_argument("--smoke", action="store_true", help="seconds-long: tiny sizes and budgets")
    ap.add_argument("--out", help="write the JSON document here")
    ap.add_argument("--log-dir", help="daemon logs (default a temp folder)")
    ap.add_argument("--progress", action="store_true", default=None, help="print a line per step even when not on a terminal")
    ap.add_argument("--mooncake-holder", action="store_true", help=argparse.SUPPRESS)
    return ap


def apply_defaults(a):
    smoke = a.smoke
    gpu = a.memory == "gpu"
    if a.fake_gpu and not gpu:
        raise SystemExit("store_bench: --fake-gpu goes with --memory gpu")
    if gpu:
        sizes = [4 * bl.KiB, 64 * bl.KiB, 1 * bl.MiB, 16 * bl.MiB, 64 * bl.MiB]
        batches = [(1024, 64 * bl.KiB), (8192, 64 * bl.KiB)]
    else:
        sizes = [4 * bl.KiB, 64 * bl.KiB, 1 * bl.MiB, 16 * bl.MiB, 256 * bl.MiB]
        batches = [(1024, 4 * bl.KiB), (1024, 64 * bl.KiB), (8192, 64 * bl.KiB), (64, 1 * bl.MiB)]
    d = {
        "pool_size": 256 * bl.MiB if smoke else (4 if gpu else 2) * bl.GiB,
        "sizes": [4 * bl.KiB, 1 * bl.MiB] if smoke else sizes,
        "clients": [1] if gpu else [1, 2] if smoke else [1, 8],
        "concurrency_sizes": [4 * bl.KiB] if smoke else [4 * bl.KiB, 64 * bl.KiB, 1 * bl.MiB, 16 * bl.MiB],
        "batches": [(16, 64 * bl.KiB)] if smoke else batches,
        "apis": "zero-copy" if gpu else "zero-copy,bytes",
        "workloads": "single,batch" if gpu else "single,batch,mixed",
        "mixed_keys": 64 if smoke else 2048,
        "seconds": 0.1 if smoke else 1.0,
        "max_ops": 200 if smoke else 20000,
        "bytes_per_phase": 64 * bl.MiB if smoke else 4 * bl.GiB,
        "ring_bytes": 8 * bl.MiB if smoke else 64 * bl.MiB,
    }
    for k, v in d.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.apis = [x for x in a.apis.split(",") if x]
    a.modes = [x for x in a.modes.split(",") if x]
    a.dists = [x for x in a.dists.split(",") if x]
    a.workloads = [x for x in a.workloads.split(",") if x]
    for api in a.apis:
        if api not in ("zero-copy", "bytes"):
            raise SystemExit("store_bench: --apis: %r is not one of zero-copy, bytes" % api)
    for m in a.modes:
        if m not in ("threads", "processes"):
            raise SystemExit("store_bench: --modes: %r is not one of threads, processes" % m)
    for w in a.workloads:
        if w not in PHASES:
            raise SystemExit("store_bench: --workloads: %r is not one of %s" % (w, ", ".join(PHASES)))
    if min(a.sizes + a.concurrency_sizes + [b for _, b in a.batches] + [a.mixed_size]) < 16:
        raise SystemExit("store_bench: objects must be at least 16 bytes (the id is stamped at both ends)")
    if a.protocol is None:
        a.protocol = ("nvlink" if gpu else "shm,tcp") if a.system == "egmstore" else "tcp"
    a.protocols = [p for p in a.protocol.split(",") if p]
    if a.system == "mooncake" and a.protocols != ["tcp"]:
        raise SystemExit("store_bench: Mooncake is measured over tcp only (--protocol tcp)")
    if gpu:
        # GPU buffers: the zero-copy API into registered device memory, one client thread
        if a.apis != ["zero-copy"]:
            raise SystemExit("store_bench: --memory gpu measures the zero-copy API only (--apis zero-copy)")
        if "mixed" in a.workloads:
            raise SystemExit("store_bench: --memory gpu runs the single and batch workloads")
        if a.clients != [1]:
            raise SystemExit("store_bench: --memory gpu runs one client (--clients 1)")
        if a.ceiling:
            raise SystemExit("store_bench: --ceiling is a host memcpy; GPU ceilings: egmstore bench data --memory gpu")
        if a.system == "egmstore" and a.protocols != ["nvlink"]:
            raise SystemExit("store_bench: --memory gpu measures egmstore over nvlink (--protocol nvlink)")
        if any(x % 8 for x in a.sizes + [b for _, b in a.batches]):
            raise SystemExit("store_bench: --memory gpu: sizes must be multiples of 8 bytes")
        if a.system == "egmstore" and a.pool_size % (16 * bl.MiB):
            raise SystemExit("store_bench: --memory gpu: the EGM pool (--pool-size) is whole 16 MiB chunks")


def system_version(system):
    try:
        if system == "mooncake":
            from importlib.metadata import version

            return version(MOONCAKE_PACKAGE)
        import egmstore

        return getattr(egmstore, "__version__", "unknown")
    except Exception:
        return "unknown"


def main(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.mooncake_holder:
        os.environ.setdefault("MC_TCP_ENABLE_CONNECTION_POOL", "1")
        return mooncake_holder(a)
    if not a.system:
        ap.error("--system is required")
    apply_defaults(a)
    started = int(time.time() * 1000)
    if a.memory == "gpu":
        global MEM
        try:
            MEM = FakeGpuMemory(a.device) if a.fake_gpu else TorchGpuMemory(a.device)
        except SystemExit as exc:
            print(exc, file=sys.stderr, flush=True)
            return 2
    log_dir = a.log_dir or os.path.join("/tmp", "store-bench-%d" % os.getpid())
    os.makedirs(log_dir, exist_ok=True)
    if a.system == "mooncake":
        os.environ["MC_TCP_ENABLE_CONNECTION_POOL"] = "1"
        # Mooncake's client logs (glog, INFO and up) go to a file, not the terminal; this
        # script's own messages keep the original stderr. Client processes inherit the file.
        fd = os.open(os.path.join(log_dir, "mooncake-client.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        saved = os.dup(2)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stderr = os.fdopen(saved, "w", buffering=1)
        try:
            import mooncake.store  # noqa: F401
        except Exception as exc:
            print("store_bench: SKIPPED mooncake: not importable (pip package %s, module "
                  "'mooncake.store'): %s: %s" % (MOONCAKE_PACKAGE, type(exc).__name__, exc), flush=True)
            return EXIT_SKIP
    else:
        sys.path.insert(0, os.path.join(os.path.abspath(a.egm_build), "python"))
        try:
            import egmstore.mooncake  # noqa: F401
        except Exception as exc:
            print("store_bench: SKIPPED egmstore: package not importable from %s/python: %s: %s"
                  % (a.egm_build, type(exc).__name__, exc), flush=True)
            return EXIT_SKIP
    bench = Bench(a, a.system)
    cluster = None
    # SIGTERM (the suite's step timeout) unwinds like ^C, so that the daemons this run started
    # are stopped rather than left behind
    signal.signal(signal.SIGTERM, _interrupt)
    rc = 0
    try:
        if a.master:
            master = a.master
        elif a.system == "egmstore":
            binary = a.egmstore_bin or os.path.join(a.egm_build, "bin", "egmstore")
            if not os.access(binary, os.X_OK):
                print("store_bench: SKIPPED egmstore: no CLI at %s" % binary, flush=True)
                return EXIT_SKIP
            cluster = start_egmstore(binary, log_dir, a.pool_size, egm=a.memory == "gpu",
                                     lease_ms=bench.lease_ms)
            master = cluster.master
            bench.master_http = cluster.http_port
        else:
            try:
                cluster = start_mooncake(log_dir, a.pool_size)
            except FileNotFoundError as exc:
                print("store_bench: SKIPPED mooncake: %s" % exc, flush=True)
                return EXIT_SKIP
            master = cluster.master
        if a.ceiling:
            bench.ceiling()
        for protocol in a.protocols:
            bench.run_protocol(protocol, master)
    except KeyboardInterrupt:
        print("store_bench: stopped by a signal; the daemons are stopped and the records so far "
              "written", file=sys.stderr, flush=True)
        rc = 130
    except Exception as exc:
        print("store_bench: error: %s" % exc, file=sys.stderr, flush=True)
        traceback.print_exc()
        rc = 2
    config = {k: v for k, v in vars(a).items() if k not in ("mooncake_holder",)}
    config["batches"] = ["%dx%s" % (n, bl.fmt_size(b)) for n, b in a.batches]
    config["system_version"] = system_version(a.system)
    config["log_dir"] = log_dir
    if a.memory == "gpu":
        config["gpu"] = MEM.info
    if a.system == "mooncake":
        config["env"] = {"MC_TCP_ENABLE_CONNECTION_POOL": os.environ.get("MC_TCP_ENABLE_CONNECTION_POOL")}
    doc = bl.document("store_bench.py", config, bench.records, started_ms=started)
    if a.out:
        bl.write_json(a.out, doc)
    if cluster is not None:
        cluster.stop()
    errors = sum(r["errors"] for r in bench.records)
    print("store_bench %s: %d records, %d errors%s" % (a.system, len(bench.records), errors,
                                                       (", " + a.out) if a.out else ""), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # Mooncake's client threads may hang interpreter exit after close()


if __name__ == "__main__":
    sys.exit(main())
