#!/usr/bin/env python3
"""redis_bench.py: the Redis baseline. Starts Debian's redis-server on a free loopback port (no
persistence, proto-max-bulk-len 1gb, its own temp folder, killed at exit) and measures SET and
GET of one value per size with redis-benchmark (a C client, --csv), as the storage analogue of
egmstore's single put/get; -P PIPELINE is the analogue of a batch.

  redis_bench.py --out redis.json                 # 4KiB .. 512MiB, 1 and 8 connections
  redis_bench.py --smoke --out redis.json         # seconds-long

Records (JSON schema 1, docs/benchmarks.md): system "redis", api "c", transport "tcp",
op "put" (SET) / "get" (GET), clients = connections (-c), batch = pipeline depth (-P).
redis-benchmark does not check replies: after each size the value Redis holds is checked
(its length, STRLEN); a wrong value or a failed run counts as an error.
Exit 0 when it ran, 77 when redis-server or redis-benchmark is missing (skipped).
"""

import argparse
import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib as bl  # noqa: E402

EXIT_SKIP = 77
KEY = "key:__rand_int__"  # redis-benchmark's key without -r: one key per size
RUN_TIMEOUT_S = 600


class Redis:
    """redis-server on a loopback port from bind(0) (retried if the port was taken meanwhile)."""

    def __init__(self, tmp):
        self.tmp, self.proc, self.port = tmp, None, None
        for _ in range(5):
            port = bl.free_port()
            log = os.path.join(tmp, "redis.log")
            self.proc = subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                 "--appendonly", "no", "--dir", tmp, "--logfile", log, "--daemonize", "no",
                 "--proto-max-bulk-len", "1gb", "--client-query-buffer-limit", "1gb",
                 "--protected-mode", "yes"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                preexec_fn=bl.die_with_parent)
            self.port = port
            if bl.wait_port(port, self.proc, timeout=10) and self.cli("PING") == "PONG":
                return
            bl.stop(self.proc)
            self.port = None
        raise RuntimeError("redis-server did not start; log: %s" % os.path.join(tmp, "redis.log"))

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port or 0), *args],
                             capture_output=True, text=True, timeout=120)
        return out.stdout.strip()

    def stop(self):
        bl.stop(self.proc)


def parse_csv(text):
    """redis-benchmark --csv -> {"SET": {...}, "GET": {...}} with float fields."""
    rows = {}
    lines = [l for l in text.splitlines() if l.startswith('"')]
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        rows[row["test"]] = {k: float(v) for k, v in row.items() if k != "test"}
    return rows


def run_benchmark(port, test, size, n, clients, pipeline):
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", test, "-d", str(size),
           "-n", str(n), "-c", str(clients), "-P", str(pipeline), "--csv"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.perf_counter() - t0
    rows = parse_csv(out.stdout)
    row = rows.get(test.upper())
    if out.returncode != 0 or row is None:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), out.returncode,
                                                (out.stderr or out.stdout)[-500:]))
    return row, wall, " ".join(cmd)


def requests_for(a, size, clients, pipeline, port, test):
    """-n: about --seconds worth, from a short probe for small values; from --bytes for large
    ones (a probe of a 256 MiB SET is itself seconds long). A multiple of clients x pipeline."""
    unit = clients * pipeline
    if size >= 4 * bl.MiB:
        n = max(a.min_requests, min(a.max_requests, a.bytes // size))
    else:
        probe = max(unit, min(2000, a.probe_bytes // size) // unit * unit)
        row, _, _ = run_benchmark(port, test, size, probe, clients, pipeline)
        n = max(a.min_requests, min(a.max_requests, int(row["rps"] * a.seconds)))
    return max(unit, (n + unit - 1) // unit * unit)


def value_ok(r, size):
    """The value redis-benchmark stored has `size` bytes (its content is redis-benchmark's own
    filler, which this script does not know)."""
    return r.cli("STRLEN", KEY) == str(size)


def to_record(workload, test, size, clients, pipeline, n, row, wall, cmd, errors):
    rps = row["rps"]
    # --csv prints rps with two decimals: for values of many MiB (rps < 100) the mean latency
    # (three decimals of ms, per request, one connection busy at a time) is more precise.
    if rps < 100 and row["avg_latency_ms"] > 0 and pipeline == 1:
        rps = clients * 1000.0 / row["avg_latency_ms"]
    calls = n // pipeline
    seconds = n / rps if rps > 0 else 0.0
    return bl.record(workload=workload, system="redis", api="c", transport="tcp",
                     op="put" if test == "set" else "get", memory="host", bytes=size, batch=pipeline,
                     clients=clients, procs=1, calls=calls, seconds=round(seconds, 6),
                     p50_us=round(row["p50_latency_ms"] * 1e3, 3), p99_us=round(row["p99_latency_ms"] * 1e3, 3),
                     mean_us=round(row["avg_latency_ms"] * 1e3, 3), max_us=round(row["max_latency_ms"] * 1e3, 3),
                     ops_s=round(rps / pipeline, 3), keys_s=round(rps, 3), gbps=round(rps * size / 1e9, 6),
                     errors=errors, call="redis-benchmark -t %s" % test, command=cmd,
                     wall_seconds=round(wall, 3), latency_note="per request; with -P, from the "
                     "pipeline's write to that reply" if pipeline > 1 else None)


def _interrupt(signum, frame):
    raise KeyboardInterrupt()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("--sizes", type=bl.parse_sizes, default=None,
                    help="value sizes (default 4KiB,64KiB,1MiB,16MiB,256MiB,512MiB)")
    ap.add_argument("--clients", type=bl.parse_ints, default=None, help="connections (default 1,8)")
    ap.add_argument("--concurrency-max", type=bl.parse_size, default=16 * bl.MiB,
                    help="largest value measured with more than one connection (default 16MiB)")
    ap.add_argument("--pipeline", type=int, default=None, help="-P for the batch analogue (default 128)")
    ap.add_argument("--batch-sizes", type=bl.parse_sizes, default=None,
                    help="value sizes of the pipelined runs (default 4KiB,64KiB,1MiB)")
    ap.add_argument("--seconds", type=float, default=None, help="about this long per measurement (default 1)")
    ap.add_argument("--bytes", type=bl.parse_size, default=None,
                    help="bytes per measurement of values >= 4MiB (default 1GiB)")
    ap.add_argument("--min-requests", type=int, default=2)
    ap.add_argument("--max-requests", type=int, default=None, help="default 100000")
    ap.add_argument("--probe-bytes", type=bl.parse_size, default=64 * bl.MiB)
    ap.add_argument("--smoke", action="store_true", help="seconds-long: tiny sizes and counts")
    ap.add_argument("--out", help="write the JSON document here")
    ap.add_argument("--keep-tmp", action="store_true", help="keep redis-server's folder (its log)")
    ap.add_argument("--progress", action="store_true", default=None)
    a = ap.parse_args(argv)
    d = {"sizes": [4 * bl.KiB, 1 * bl.MiB] if a.smoke else
         [4 * bl.KiB, 64 * bl.KiB, 1 * bl.MiB, 16 * bl.MiB, 256 * bl.MiB, 512 * bl.MiB],
         "clients": [1, 2] if a.smoke else [1, 8], "pipeline": 16 if a.smoke else 128,
         "batch_sizes": [64 * bl.KiB] if a.smoke else [4 * bl.KiB, 64 * bl.KiB, 1 * bl.MiB],
         "seconds": 0.1 if a.smoke else 1.0, "bytes": 16 * bl.MiB if a.smoke else 1 * bl.GiB,
         "max_requests": 2000 if a.smoke else 100000}
    for k, v in d.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    show = bl.progress_enabled(a.progress)
    for tool in ("redis-server", "redis-benchmark", "redis-cli"):
        if shutil.which(tool) is None:
            print("redis_bench: SKIPPED: %s not found (scripts/install-deps.sh installs Debian's "
                  "redis-server and redis-tools)" % tool, flush=True)
            return EXIT_SKIP
    started = int(time.time() * 1000)
    tmp = tempfile.mkdtemp(prefix="egm-redis-bench-")
    records, r = [], None
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
    plan = []
    for size in a.sizes:
        for c in a.clients:
            if c == 1 or size <= a.concurrency_max:
                plan.append(("single", size, c, 1))
    for size in a.batch_sizes:
        plan.append(("batch", size, 1, a.pipeline))
    rc = 0
    # SIGTERM (the suite's step timeout) unwinds like ^C: redis-server is stopped, not left behind
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        r = Redis(tmp)
        if show:
            print("redis-server on 127.0.0.1:%d (%s)" % (r.port, version), flush=True)
        for workload, size, c, p in plan:
            r.cli("FLUSHALL")
            for test in ("set", "get"):
                try:
                    n = requests_for(a, size, c, p, r.port, test)
                    row, wall, cmd = run_benchmark(r.port, test, size, n, c, p)
                    errors = 0 if value_ok(r, size) else 1
                    rec = to_record(workload, test, size, c, p, n, row, wall, cmd, errors)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    rec = bl.record(workload=workload, system="redis", api="c", transport="tcp",
                                    op="put" if test == "set" else "get", bytes=size, batch=p,
                                    clients=c, errors=1, message=str(exc)[:500])
                records.append(rec)
                if show:
                    print("  redis %-6s %-3s %8s -c %d -P %-3d: %10.0f req/s %8.3f GB/s p50 %s us p99 %s us errors %d"
                          % (workload, test, bl.fmt_size(size), c, p, rec["keys_s"] or 0, rec["gbps"] or 0,
                             rec["p50_us"], rec["p99_us"], rec["errors"]), flush=True)
    except RuntimeError as exc:
        print("redis_bench: error: %s" % exc, file=sys.stderr, flush=True)
        rc = 2
    except KeyboardInterrupt:
        print("redis_bench: stopped by a signal", file=sys.stderr, flush=True)
        rc = 130
    finally:
        if r is not None:
            r.stop()
        if a.keep_tmp:
            print("redis_bench: redis-server's folder kept: %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    config = {k: v for k, v in vars(a).items()}
    config["redis_version"] = version
    config["server_options"] = "--save '' --appendonly no --proto-max-bulk-len 1gb --client-query-buffer-limit 1gb"
    doc = bl.document("redis-benchmark", config, records, started_ms=started)
    if a.out:
        bl.write_json(a.out, doc)
    print("redis_bench: %d records, %d errors%s" % (len(records), sum(x["errors"] for x in records),
                                                   (", " + a.out) if a.out else ""), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
