#!/usr/bin/env python3
"""The Python side's own time per batch call: what the Mooncake facade and the binding add to the
C client's call (converting keys, addresses and sizes, building the result lists, the facade's
checks), measured as the call's wall time minus the client's `egm_client_{put,get}_call_seconds`
for that call. Host memory over shm with small pieces (256 bytes), so that the copies are short
and the shapes are the engines' (vLLM's 64 pieces a key, kv_scenario's 2):

    python3 bench/py/binding_overhead.py --egm-build build [--shapes 1024x2,64x64,4x2] [--reps 30]

Prints the median per shape: the facade's put and get, and the raw binding's get
(`_c.batch_get_into_parts`, no facade). Every call's codes are checked.
"""

import argparse
import ctypes
import mmap
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def call_seconds(store, op):
    for line in store._c.metrics().splitlines():
        if line.startswith(f"egm_client_{op}_call_seconds_total "):
            return float(line.split()[1])
    raise RuntimeError(f"egm_client_{op}_call_seconds_total missing from the client's metrics")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--egm-build", required=True, help="a build folder (bin/egmstore, python/)")
    p.add_argument("--shapes", default="1024x2,64x64,4x2", help="KEYSxPARTS, comma separated")
    p.add_argument("--piece", type=int, default=256, help="bytes per part (default 256)")
    p.add_argument("--reps", type=int, default=30, help="calls per shape and op (default 30)")
    a = p.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.abspath(a.egm_build), "python"))
    import store_bench as sb
    from egmstore.mooncake import MooncakeDistributedStore

    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",") if s]
    log_dir = tempfile.mkdtemp(prefix="binding-overhead-")
    cluster = sb.start_egmstore(os.path.join(a.egm_build, "bin", "egmstore"), log_dir, 1 << 30)
    try:
        s = MooncakeDistributedStore()
        rc = s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                      "global_segment_size": "0", "local_buffer_size": "0", "protocol": "shm",
                      "master_server_addr": cluster.master})
        if rc != 0:
            raise RuntimeError(f"setup returned {rc}")
        for nkeys, parts in shapes:
            nbytes = nkeys * parts * a.piece
            buf = mmap.mmap(-1, nbytes)
            base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            if s.register_buffer(base, nbytes) != 0:
                raise RuntimeError("register_buffer failed")
            ptrs = [[base + (k * parts + j) * a.piece for j in range(parts)] for k in range(nkeys)]
            sizes = [[a.piece] * parts for _ in range(nkeys)]
            put, get, raw = [], [], []
            for r in range(a.reps):
                keys = [f"binding-{nkeys}x{parts}-{r}-{k}" for k in range(nkeys)]
                c0, t0 = call_seconds(s, "put"), time.perf_counter()
                codes = s.batch_put_from_multi_buffers(keys, ptrs, sizes)
                put.append(time.perf_counter() - t0 - (call_seconds(s, "put") - c0))
                if codes != [0] * nkeys:
                    raise RuntimeError(f"put codes {sorted(set(codes))}")
                c0, t0 = call_seconds(s, "get"), time.perf_counter()
                codes = s.batch_get_into_multi_buffers(keys, ptrs, sizes)
                get.append(time.perf_counter() - t0 - (call_seconds(s, "get") - c0))
                if codes != [parts * a.piece] * nkeys:
                    raise RuntimeError(f"get codes {sorted(set(codes))}")
                c0, t0 = call_seconds(s, "get"), time.perf_counter()
                status, results, _ = s._c.batch_get_into_parts(keys, ptrs, sizes)
                raw.append(time.perf_counter() - t0 - (call_seconds(s, "get") - c0))
                if status != 0 or any(results):
                    raise RuntimeError(f"raw get status {status}")
                s.batch_remove(keys, True)
            print(f"{nkeys}x{parts}: facade put {statistics.median(put) * 1e6:.0f} us, "
                  f"get {statistics.median(get) * 1e6:.0f} us; binding get "
                  f"{statistics.median(raw) * 1e6:.0f} us (medians of {a.reps})", flush=True)
            s.unregister_buffer(base)
        s.close()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
