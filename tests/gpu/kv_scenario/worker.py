"""Workers of the KV-cache scenario; run.py starts them as separate processes.

  --role a        prefill a prompt per round into a paged KV cache, store every (layer, block)
                  page straight from it with batch_put_from_multi_buffers (K page + V page = the
                  two buffers of one key), write manifest.json (tokens, keys, page digests)
  --role b        fetch each round's pages with batch_get_into_multi_buffers into its own cache
                  at other slots, check them byte for byte (digests), decode further tokens from
                  them and compare the logits with a full recompute
  --role ring     worker i of N (run.py with N >= 3 workers, or --ring): per round stores prompt
                  i like a (WORK/manifest-<i>.json) and fetches prompt i-1 mod N like b, every
                  batch put and every batch get of all N started on a barrier (WORK/barrier/)
  --role ceiling  raw copy rate of the same bytes (device -> pinned host -> device)

Each writes WORK/<role>.json (ring: WORK/ring<i>.json) and exits 0 only when every check passed.
The tensor work is torch's or numpy's (--tensors; tensors.py).
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
import traceback

import tensors
from model import PRESETS, Model, PagedKVCache

GiB = 1 << 30


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--role", choices=["a", "b", "ring", "ceiling"], required=True)
    p.add_argument("--master", default="127.0.0.1:50051")
    p.add_argument("--protocol", default="auto")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N")
    p.add_argument("--device-b", default=None, help="ceiling: the device of the pinned->device copy")
    p.add_argument("--size", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--decode-tokens", type=int, default=8)
    p.add_argument("--lat-iters", type=int, default=20)
    p.add_argument("--expect-segments", type=int, default=0, help="segments the pool has (0: unknown)")
    p.add_argument("--atol", type=float, default=None)
    p.add_argument("--bytes", type=int, default=0, help="ceiling: bytes to copy")
    p.add_argument(
        "--fake-gpu",
        type=int,
        default=None,
        help="testing without a GPU: cache in the fake driver's device N memory (fakegpu.py)",
    )
    p.add_argument("--work", required=True)
    p.add_argument("--manifest", default=None, help="a: written, b: read (default WORK/manifest.json)")
    p.add_argument("--pair", type=int, default=0, help="a: whose prompts (0: the two-worker run's)")
    p.add_argument("--index", type=int, default=0, help="ring: this worker's place i (stores pair i)")
    p.add_argument("--nworkers", type=int, default=2, help="ring: N workers on the ring")
    p.add_argument("--barrier-timeout", type=float, default=300, help="ring: seconds one barrier may take")
    p.add_argument("--tensors", choices=["torch", "numpy"], default="torch", help="tensor library")
    a = p.parse_args()
    a.manifest = a.manifest or os.path.join(a.work, "manifest.json")
    if a.role == "ring":
        a.pair = a.index
    return a


# The tensor library (tensors.Torch or tensors.Numpy), set by main() from --tensors.
T = None


def page_digests(cache, table, nblocks):
    """sha256 of K page + V page of every (layer, logical block), in key order."""
    out = []
    for layer in range(cache.cfg.layers):
        idx = T.index(table[:nblocks], cache.device(layer))
        k = T.host(cache.k[layer][idx])
        v = T.host(cache.v[layer][idx])
        for b in range(nblocks):
            h = hashlib.sha256(T.host_bytes(k[b]))
            h.update(T.host_bytes(v[b]))
            out.append(h.hexdigest())
    return out


def metrics(store):
    """The client's Prometheus metrics as {name: value} (None when the facade has no such call)."""
    for obj in [store] + list(getattr(store, "__dict__", {}).values()):
        fn = getattr(obj, "metrics", None) or getattr(obj, "get_metrics", None)
        if callable(fn):
            text = fn()
            if isinstance(text, bytes):
                text = text.decode()
            vals = {}
            for line in text.splitlines():
                if line and not line.startswith("#"):
                    name, _, value = line.rpartition(" ")
                    try:
                        vals[name.split("{")[0]] = float(value)
                    except ValueError:
                        pass
            return vals
    return None


class Mappings:
    """Tracks the counter that shows mapping reuse: VMM imports (nvlink) or live shm mappings."""

    def __init__(self, store, protocol):
        self.store = store
        self.name = (
            "egm_client_te_nvlink_imports_total"
            if protocol in ("nvlink", "auto")
            else "egm_client_te_mappings" if protocol == "shm" else None
        )
        self.history = []

    def read(self):
        m = metrics(self.store)
        if m is None or self.name is None:
            return None
        if self.name == "egm_client_te_nvlink_imports_total" and m.get(self.name, 0) == 0:
            # auto that ended up on shm (a host pool): no imports, the shm mappings show reuse
            if m.get("egm_client_te_mappings", 0) > 0:
                self.name = "egm_client_te_mappings"
        v = m.get(self.name)
        return int(v) if v is not None else None

    def settle(self, expect, timeout=10.0):
        """Prewarm threads import segments in the background: wait until they have (or the
        count stops moving) so that a later rise means a mapping was not reused."""
        last, since, end = None, time.time(), time.time() + timeout
        while time.time() < end:
            v = self.read()
            if v is None or (expect and self.name.startswith("egm_client_te_nvlink") and v >= expect):
                return v
            if v != last:
                last, since = v, time.time()
            elif time.time() - since > 1.0:
                return v
            time.sleep(0.05)
        return last

    def after_round(self):
        v = self.read()
        self.history.append(v)
        return v

    def check(self):
        """(ok, text): the count after every round equals the count after round 1."""
        if self.name is None:
            return True, "not checked (tcp maps nothing)"
        if not self.history or self.history[0] is None:
            return False, "metrics unavailable from the store object (need its Prometheus text)"
        ok = all(v == self.history[0] for v in self.history)
        return ok, f"{self.name} per round {self.history}" + ("" if ok else " (rose after round 1)")


def open_store(args):
    from egmstore.mooncake import MooncakeDistributedStore

    import egmstore

    print(f"egmstore {egmstore.__version__} from {os.path.dirname(egmstore.__file__)}", flush=True)
    store = MooncakeDistributedStore()
    # Workers contribute nothing (global_segment_size 0): the provider holds the pool.
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, args.protocol, "", args.master)
    if rc != 0:
        raise RuntimeError(f"setup returned {rc}")
    return store


def layout(cfg, extra_blocks, seed):
    """Block slots of one sequence: a seeded permutation of a cache twice as large as needed."""
    nblocks = cfg.prompt_tokens // cfg.block_size + extra_blocks
    num_slots = 2 * nblocks
    table = T.randperm(num_slots, seed)
    return num_slots, table[:nblocks]


def p50_us(samples):
    return round(statistics.median(samples) * 1e6, 1)


def round_tokens(cfg, r, pair=0):
    """Round r's prompt of pair `pair` (pair 0: the two-worker run's prompts, as before)."""
    return T.randint(cfg.vocab, cfg.prompt_tokens, cfg.seed * 1000 + r + 100_000 * pair)


def prompt_keys(cfg, tokens):
    """Keys as engines form them: model / prompt-prefix hash / layer / block."""
    phash = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16]
    nb = cfg.prompt_tokens // cfg.block_size
    return phash, [f"{cfg.name}/{phash}/L{l}/B{b}" for l in range(cfg.layers) for b in range(nb)]


def buffers(cache, table, nb):
    ptrs, sizes = [], []
    for layer in range(cache.cfg.layers):
        for b in range(nb):
            ptrs.append(list(cache.block_ptrs(layer, table[b])))
            sizes.append([cache.block_bytes, cache.block_bytes])
    return ptrs, sizes


def make_cache(args, cfg, num_slots):
    alloc = None
    if args.fake_gpu is not None:
        import fakegpu

        fakegpu.use_device(args.fake_gpu)
        alloc = lambda shape, dtype: fakegpu.zeros(T, shape, dtype)  # noqa: E731
    return PagedKVCache(T, cfg, num_slots, args.device, T.float_dtype(args.device), alloc)


def register(store, cache):
    for t in cache.tensors():
        rc = store.register_buffer(T.data_ptr(t), T.nbytes(t))
        if rc != 0:
            raise RuntimeError(f"register_buffer returned {rc}")


def no_gate(tag):
    pass


def put_round(args, cfg, model, cache, table, store, maps, r, gate=no_gate, label="A"):
    """Prefill round r's prompt (of pair --pair) into the cache and store every page with one
    batch_put_from_multi_buffers. gate(tag) is the ring's barrier: before the batch (all workers
    start it together) and after it (the one-page puts do not overlap another worker's batch).
    Returns (row, manifest entry, ok)."""
    dev, nb = args.device, cfg.prompt_tokens // cfg.block_size
    tokens = round_tokens(cfg, r, args.pair)
    logits = model.prefill(tokens, cache, table)
    T.sync(dev)
    phash, keys = prompt_keys(cfg, tokens)
    ptrs, sizes = buffers(cache, table, nb)
    existed = sum(store.batch_is_exist(keys))
    gate("put")
    m0 = time.monotonic()
    t0 = time.perf_counter()
    rcs = store.batch_put_from_multi_buffers(keys, ptrs, sizes)
    dt = time.perf_counter() - t0
    m1 = time.monotonic()
    gate("put-done")
    failed = [(k, c) for k, c in zip(keys, rcs) if c != 0]
    # one-page puts for latency (their own keys, the K/V page of layer 0 block 0)
    lat = []
    for i in range(args.lat_iters):
        t1 = time.perf_counter()
        c = store.batch_put_from_multi_buffers([f"{cfg.name}/{phash}/lat{i}"], ptrs[:1], sizes[:1])
        lat.append(time.perf_counter() - t1)
        if c[0] != 0:
            failed.append((f"lat{i}", c[0]))
    nbytes = len(keys) * 2 * cache.block_bytes
    row = {
        "round": r + 1,
        "keys": len(keys),
        "bytes": nbytes,
        "put_s": dt,
        "put_GBps": nbytes / dt / 1e9,
        "put_1page_p50_us": p50_us(lat),
        "existed_before": existed,
        "failed": failed[:5],
        "mappings": maps.after_round(),
        "t_start": m0,  # CLOCK_MONOTONIC: one clock for every process of the machine
        "t_end": m1,
    }
    print(
        f"{label} round {r + 1}: put {len(keys)} keys {nbytes / 2**20:.1f} MiB in {dt * 1e3:.2f} ms "
        f"({row['put_GBps']:.2f} GB/s), 1-page put p50 {row['put_1page_p50_us']} us, "
        f"failed {len(failed)}, mappings {row['mappings']}",
        flush=True,
    )
    ent = {
        "tokens": tokens,
        "next_token": int(logits[-1].argmax()),
        "keys": keys,
        "digests": page_digests(cache, table, nb),
    }
    return row, ent, not failed and existed == 0


def get_round(args, cfg, model, cache, table, store, maps, r, ent, atol, gate=no_gate, label="B"):
    """Fetch one stored prompt (manifest entry ent) into the cache at this worker's slots with
    one batch_get_into_multi_buffers, check every page against the storer's digests, decode
    further tokens from the cache and compare with a full recompute; in round 1 also the
    control (a wrong page must be seen). Returns (row, ok)."""
    dev, nb = args.device, cfg.prompt_tokens // cfg.block_size
    keys, tokens, P = ent["keys"], ent["tokens"], cfg.prompt_tokens
    for t in cache.tensors():
        T.zero_(t)
    T.sync(dev)
    present = store.batch_is_exist(keys)
    ptrs, sizes = buffers(cache, table, nb)
    gate("get")
    m0 = time.monotonic()
    t0 = time.perf_counter()
    got = store.batch_get_into_multi_buffers(keys, ptrs, sizes)
    dt = time.perf_counter() - t0
    m1 = time.monotonic()
    gate("get-done")
    want = 2 * cache.block_bytes
    bad_gets = [(k, g) for k, g in zip(keys, got) if g != want]
    mism = [k for k, d, e in zip(keys, page_digests(cache, table, nb), ent["digests"]) if d != e]
    lat = []
    for _ in range(args.lat_iters):
        t1 = time.perf_counter()
        store.batch_get_into_multi_buffers(keys[:1], ptrs[:1], sizes[:1])
        lat.append(time.perf_counter() - t1)
    control = None
    if r == 0:
        # The comparison must see a wrong page: layer 0 given layer 1's pages.
        k0, v0 = T.clone(cache.k[0]), T.clone(cache.v[0])
        T.copy_(cache.k[0], cache.k[1])
        T.copy_(cache.v[0], cache.v[1])
        bad = model.decode_step(ent["next_token"], P, cache, table)
        T.copy_(cache.k[0], k0)
        T.copy_(cache.v[0], v0)
        ref0 = model.forward_full(tokens + [ent["next_token"]])[P]
        control = float(abs(bad - ref0).max())
    seq, nxt, outs = list(tokens), ent["next_token"], []
    for _ in range(args.decode_tokens):
        logits = model.decode_step(nxt, len(seq), cache, table)
        outs.append(logits)
        seq.append(nxt)
        nxt = int(logits.argmax())
    ref = model.forward_full(seq)[P:]
    diff = float(abs(T.stack(outs) - ref).max())
    close = T.allclose(T.stack(outs), ref, atol)
    nbytes = len(keys) * want
    row = {
        "round": r + 1,
        "keys": len(keys),
        "bytes": nbytes,
        "get_s": dt,
        "get_GBps": nbytes / dt / 1e9,
        "get_1page_p50_us": p50_us(lat),
        "exist": sum(present),
        "bad_gets": bad_gets[:5],
        "short_gets": len(bad_gets),
        "digest_mismatches": len(mism),
        "decode_tokens": args.decode_tokens,
        "logits_max_abs_diff": diff,
        "logits_allclose": close,
        "mappings": maps.after_round(),
        "t_start": m0,
        "t_end": m1,
    }
    ok = True
    if control is not None:
        row["control_wrong_layer_diff"] = control
        row["control_detected"] = control > atol
        ok &= control > atol
    ok &= not bad_gets and not mism and close and sum(present) == len(keys)
    print(
        f"{label} round {r + 1}: get {len(keys)} keys {nbytes / 2**20:.1f} MiB in {dt * 1e3:.2f} ms "
        f"({row['get_GBps']:.2f} GB/s), 1-page get p50 {row['get_1page_p50_us']} us, "
        f"exist {sum(present)}/{len(keys)}, bad gets {len(bad_gets)}, digest mismatches "
        f"{len(mism)}, decode {args.decode_tokens} tokens max|dlogit| {diff:.3g} "
        f"(atol {atol}) {'ok' if close else 'MISMATCH'}, mappings {row['mappings']}"
        + (f", control {control:.3g}" if control is not None else ""),
        flush=True,
    )
    return row, ok


def default_atol(args):
    return args.atol if args.atol is not None else (1e-4 if args.device == "cpu" else 2e-2)


def write_json(path, doc):
    """Whole or not at all: a reader in another process never sees half a file."""
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def worker_a(args, res):
    cfg, dev = PRESETS[args.size], args.device
    model = Model(T, cfg, dev, T.float_dtype(dev))
    extra = (args.decode_tokens + cfg.block_size - 1) // cfg.block_size
    num_slots, table = layout(cfg, extra, seed=11)
    cache = make_cache(args, cfg, num_slots)
    store = open_store(args)
    register(store, cache)
    maps = Mappings(store, args.protocol)
    res["mappings_at_start"] = maps.settle(args.expect_segments)
    manifest = {"size": args.size, "device": dev, "dtype": str(T.float_dtype(dev)), "rounds": []}
    ok = True
    for r in range(args.rounds):
        row, ent, rok = put_round(args, cfg, model, cache, table, store, maps, r)
        res["rounds"].append(row)
        ok &= rok
        manifest["rounds"].append(ent)
    write_json(args.manifest, manifest)
    mok, mtext = maps.check()
    res["mapping_reuse"] = {"ok": mok, "detail": mtext}
    res["metrics_end"] = metrics(store)
    store.close()
    return ok and mok


def worker_b(args, res):
    cfg, dev = PRESETS[args.size], args.device
    with open(args.manifest) as f:
        manifest = json.load(f)
    model = Model(T, cfg, dev, T.float_dtype(dev))
    atol = default_atol(args)
    extra = (args.decode_tokens + cfg.block_size - 1) // cfg.block_size
    num_slots, table = layout(cfg, extra, seed=22)  # other slots than A's
    _, table_a = layout(cfg, extra, seed=11)
    nb = cfg.prompt_tokens // cfg.block_size
    res["slots_differing_from_a"] = sum(a != b for a, b in zip(table_a[:nb], table[:nb]))
    cache = make_cache(args, cfg, num_slots)
    store = open_store(args)
    register(store, cache)
    maps = Mappings(store, args.protocol)
    res["mappings_at_start"] = maps.settle(args.expect_segments)
    res["atol"] = atol
    ok = True
    for r, ent in enumerate(manifest["rounds"]):
        row, rok = get_round(args, cfg, model, cache, table, store, maps, r, ent, atol)
        res["rounds"].append(row)
        ok &= rok
    mok, mtext = maps.check()
    res["mapping_reuse"] = {"ok": mok, "detail": mtext}
    res["metrics_end"] = metrics(store)
    store.close()
    return ok and mok


class Barrier:
    """The ring's workers meet here: each drops a file WORK/barrier/<tag>.<index> and waits until
    all N are there. A worker that failed drops WORK/barrier/abort, which ends every wait."""

    def __init__(self, work, index, n, timeout):
        self.dir = os.path.join(work, "barrier")
        os.makedirs(self.dir, exist_ok=True)
        self.index, self.n, self.timeout = index, n, timeout

    def __call__(self, tag):
        open(os.path.join(self.dir, f"{tag}.{self.index}"), "w").close()
        waiting = set(range(self.n))
        end = time.monotonic() + self.timeout
        while waiting:
            waiting = {j for j in waiting if not os.path.exists(os.path.join(self.dir, f"{tag}.{j}"))}
            if not waiting:
                return
            if os.path.exists(os.path.join(self.dir, "abort")):
                raise RuntimeError(f"barrier {tag}: another worker failed")
            if time.monotonic() > end:
                raise TimeoutError(f"barrier {tag}: workers {sorted(waiting)} missing after {self.timeout} s")
            time.sleep(0.0002)

    def abort(self):
        open(os.path.join(self.dir, "abort"), "w").close()


def manifest_path(work, index):
    return os.path.join(work, f"manifest-{index}.json")


def worker_ring(args, res):
    """Worker i of N on a ring: per round it stores prompt (i, round) from its cache (pair i's
    storer) and fetches prompt (i-1 mod N, round) into a second cache (pair i-1's fetcher). All N
    start every batch put, and then every batch get, on a barrier."""
    cfg, dev, i, n = PRESETS[args.size], args.device, args.index, args.nworkers
    src = (i - 1) % n
    gate = Barrier(args.work, i, n, args.barrier_timeout)
    res.update(index=i, nworkers=n, stores_pair=i, fetches_pair=src, put_rounds=[], get_rounds=[])
    model = Model(T, cfg, dev, T.float_dtype(dev))
    atol = res["atol"] = default_atol(args)
    extra = (args.decode_tokens + cfg.block_size - 1) // cfg.block_size
    num_a, table_a = layout(cfg, extra, seed=11)
    num_b, table_b = layout(cfg, extra, seed=22)  # the fetcher's slots differ from the storer's
    nb = cfg.prompt_tokens // cfg.block_size
    res["slots_differing_from_a"] = sum(a != b for a, b in zip(table_a[:nb], table_b[:nb]))
    cache_a = make_cache(args, cfg, num_a)
    cache_b = make_cache(args, cfg, num_b)
    store = open_store(args)
    register(store, cache_a)
    register(store, cache_b)
    maps = Mappings(store, args.protocol)
    res["mappings_at_start"] = maps.settle(args.expect_segments)
    manifest = {"size": args.size, "device": dev, "dtype": str(T.float_dtype(dev)), "pair": i, "rounds": []}
    ok_put = ok_get = True
    for r in range(args.rounds):
        tag = lambda what, r=r: gate(f"r{r + 1}-{what}")
        row, ent, rok = put_round(args, cfg, model, cache_a, table_a, store, maps, r, tag, f"W{i} put pair {i}")
        res["put_rounds"].append(row)
        ok_put &= rok
        manifest["rounds"].append(ent)
        write_json(manifest_path(args.work, i), manifest)
        tag("stored")  # every pair's round r is stored and in its manifest
        with open(manifest_path(args.work, src)) as f:
            ent = json.load(f)["rounds"][r]
        row, rok = get_round(
            args, cfg, model, cache_b, table_b, store, maps, r, ent, atol, tag, f"W{i} get pair {src}"
        )
        res["get_rounds"].append(row)
        ok_get &= rok
    mok, mtext = maps.check()
    res["mapping_reuse"] = {"ok": mok, "detail": mtext}
    res["put_ok"], res["get_ok"] = bool(ok_put), bool(ok_get)
    res["metrics_end"] = metrics(store)
    store.close()
    return ok_put and ok_get and mok


def ceiling(args, res):
    """Best of 5 copies of the same bytes: device -> pinned host (put's direction) and pinned host
    -> device (get's); on the CPU, memcpy between two tensors."""
    n, dev = args.bytes, args.device
    dev_b = args.device_b or dev
    res["tensors"] = f"{T.name} {T.version}"
    if dev != "cpu":
        torch = T.torch  # CUDA devices: torch only (tensors.Numpy refuses them)
        res["gpu_count"] = torch.cuda.device_count()
        for d in {dev, dev_b}:
            if torch.device(d).index >= torch.cuda.device_count():
                raise RuntimeError(f"{d}: only {torch.cuda.device_count()} GPU(s) visible (use --gpus 0,0)")
        res["gpu_names"] = {d: torch.cuda.get_device_name(d) for d in (dev, dev_b)}

    def best(fn, d):
        fn()
        times = []
        for _ in range(5):
            T.sync(d)
            t0 = time.perf_counter()
            fn()
            T.sync(d)
            times.append(time.perf_counter() - t0)
        return n / min(times) / 1e9, n / statistics.median(times) / 1e9

    if dev == "cpu":
        a, b = T.host_buffer(n, 1), T.host_buffer(n, 0)
        res["d2h_GBps"], res["d2h_median_GBps"] = best(lambda: T.copy_(b, a), dev)
        res["h2d_GBps"], res["h2d_median_GBps"] = best(lambda: T.copy_(a, b), dev)
        res["what"] = f"memcpy between two CPU arrays ({T.name})"
    else:
        src = torch.ones(n, dtype=torch.uint8, device=dev)
        dst = torch.empty(n, dtype=torch.uint8, device=dev_b)
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        res["d2h_GBps"], res["d2h_median_GBps"] = best(lambda: host.copy_(src, non_blocking=True), dev)
        res["h2d_GBps"], res["h2d_median_GBps"] = best(lambda: dst.copy_(host, non_blocking=True), dev_b)
        res["what"] = f"torch copy {dev} -> pinned host, pinned host -> {dev_b}, one contiguous tensor"
    res["bytes"] = n
    print(
        f"ceiling: {n / 2**20:.1f} MiB, device->host {res['d2h_GBps']:.2f} GB/s, "
        f"host->device {res['h2d_GBps']:.2f} GB/s ({res['what']})",
        flush=True,
    )
    return True


def main():
    global T
    args = parse_args()
    T = tensors.load(args.tensors)
    if T.name == "torch":
        torch = T.torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        if args.device != "cpu":
            torch.cuda.set_device(args.device)
    name = f"ring{args.index}" if args.role == "ring" else args.role
    res = {
        "role": args.role,
        "device": args.device,
        "size": args.size,
        "protocol": args.protocol,
        "rounds": [],
    }
    try:
        ok = {"a": worker_a, "b": worker_b, "ring": worker_ring, "ceiling": ceiling}[args.role](args, res)
    except Exception:
        traceback.print_exc()
        if args.role == "ring":  # the others stop waiting for this worker
            Barrier(args.work, args.index, args.nworkers, 0).abort()
        res["error"] = traceback.format_exc(limit=3)
        ok = False
    res["ok"] = bool(ok)
    with open(os.path.join(args.work, f"{name}.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
