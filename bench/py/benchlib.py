"""Helpers shared by bench/py/store_bench.py, bench/py/redis_bench.py, bench/suite.py and
bench/report.py: sizes, latency statistics, machine and commit description, the schema-1
JSON document (docs/benchmarks.md), free ports and bounded process handling.
Standard library only."""

import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

SCHEMA = 1
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB,
          "g": GiB, "gb": GiB, "gib": GiB}


def parse_size(text):
    """'4KiB', '64k', '1MiB', '4096' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError("size %r: expected a number with an optional unit B, KiB, MiB, GiB" % text)
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_sizes(text):
    return [parse_size(t) for t in str(text).split(",") if t.strip()]


def parse_ints(text):
    out = []
    for t in str(text).split(","):
        if t.strip():
            v = int(t)
            if v < 1:
                raise ValueError("%r: must be >= 1" % t)
            out.append(v)
    return out


def fmt_size(n):
    """4096 -> '4KiB', 1048576 -> '1MiB', 1000 -> '1000B'."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale and n % scale == 0:
            return "%d%s" % (n // scale, unit)
    return "%dB" % n


def latency_stats(samples_ns, keep=101):
    """p50/p99/mean/max in microseconds (nearest rank) and `keep` evenly spaced quantiles
    (0..100 %) as samples_us, for a CDF; None for no samples."""
    if not samples_ns:
        return {"p50_us": None, "p99_us": None, "mean_us": None, "max_us": None, "samples_us": []}
    s = sorted(samples_ns)
    n = len(s)

    def q(p):
        return s[min(n - 1, max(0, math.ceil(p * n) - 1))] / 1e3

    quantiles = [round(s[min(n - 1, int(i * (n - 1) / (keep - 1)))] / 1e3, 3) for i in range(keep)]
    return {"p50_us": round(q(0.50), 3), "p99_us": round(q(0.99), 3),
            "mean_us": round(sum(s) / n / 1e3, 3), "max_us": round(s[-1] / 1e3, 3),
            "samples_us": quantiles}


def record(**fields):
    """A result record with every schema-1 field present (None where not given)."""
    r = {"workload": None, "system": None, "api": None, "transport": None, "op": None,
         "memory": "host", "bytes": None, "batch": 1, "clients": 1, "procs": 1, "dist": None,
         "read_ratio": None, "calls": 0, "seconds": 0.0, "p50_us": None, "p99_us": None,
         "mean_us": None, "max_us": None, "gbps": None, "ops_s": None, "keys_s": None,
         "errors": 0}
    r.update(fields)
    secs = r["seconds"] or 0.0
    if secs > 0 and r["calls"]:
        if r["ops_s"] is None:
            r["ops_s"] = round(r["calls"] / secs, 3)
        if r["keys_s"] is None:
            r["keys_s"] = round(r["calls"] * (r["batch"] or 1) / secs, 3)
        if r["gbps"] is None and r["bytes"] and r["op"] not in ("exist", "meta"):
            r["gbps"] = round(r["calls"] * (r["batch"] or 1) * r["bytes"] / secs / 1e9, 6)
    # one call's bytes / its p50: steadier than the mean on a machine shared with other work
    if "gbps_p50" not in r and r["bytes"] and r["p50_us"] and r["gbps"] is not None:
        r["gbps_p50"] = round((r["batch"] or 1) * r["bytes"] / r["p50_us"] / 1e3, 6)
    return r


def _first_line(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def machine_info():
    """The schema's machine object: host, cpu, cores, kernel, memory_bytes, gpus."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    gpus = []
    if shutil.which("nvidia-smi"):
        cuda = ""
        header = _first_line(["nvidia-smi"])
        m = re.search(r"CUDA Version:\s*([\d.]+)", header)
        if m:
            cuda = m.group(1)
        listing = _first_line(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
        for line in listing.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2:
                gpus.append({"name": parts[0], "driver": parts[1], "cuda": cuda})
    return {"host": socket.gethostname(), "cpu": cpu, "cores": os.cpu_count(),
            "kernel": "%s %s" % (platform.system(), platform.release()), "memory_bytes": mem,
            "gpus": gpus, "python": platform.python_version()}


def machine_name(info):
    """Short name for result files: 'h200x2' for two H200s, 'cpu2' for two CPU cores."""
    if info.get("gpus"):
        name = info["gpus"][0]["name"]
        m = re.search(r"([A-Z]\d{2,4})", name)
        short = (m.group(1) if m else name.split()[-1]).lower()
        return "%sx%d" % (short, len(info["gpus"]))
    return "cpu%d" % (info.get("cores") or 0)


def git_commit(path=REPO):
    """(short commit, dirty) of the checkout at path; ('unknown', False) without git."""
    commit = _first_line(["git", "-C", path, "rev-parse", "--short=7", "HEAD"]) or "unknown"
    dirty = bool(_first_line(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"]))
    return commit, dirty


def document(tool, config, results, started_ms=None, **extra):
    commit, dirty = git_commit()
    doc = {"schema": SCHEMA, "tool": tool, "machine": machine_info(), "commit": commit,
           "dirty": dirty, "started_unix_ms": started_ms or int(time.time() * 1000),
           "config": config, "results": results}
    doc.update(extra)
    return doc


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# The read lease (ms) of an egmstore master a benchmark starts. The benchmarks force-remove what
# their gets read between phases; the space of an object force-removed under a read lease stays
# held until the lease ends (egm_master_held_bytes, docs/master.md), and the next phase waits for
# it (wait_master_held), so a short lease keeps that wait short. It is no shorter than the longest
# location_cache_ms (2 s): gets are served from cached locations exactly as under the default
# lease (10 s), and a call has 2 s before its lease runs out (LEASE_EXPIRED). Smoke runs, whose
# calls take milliseconds, use 1 s (the default location_cache_ms, so no cached get changes
# either): their waits are about 1 s shorter a phase.
BENCH_LEASE_MS = 2000
BENCH_SMOKE_LEASE_MS = 1000


def master_held_bytes(port):
    """egm_master_held_bytes from the master's admin HTTP /metrics on 127.0.0.1:port (0 when the
    master does not report it)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            body = r.read().decode()
    except (OSError, urllib.error.URLError) as exc:
        raise RuntimeError("the master's /metrics on port %d: %s" % (port, exc))
    for line in body.splitlines():
        if line.startswith("egm_master_held_bytes "):
            return float(line.split()[1])
    return 0.0


def wait_master_held(port, lease_ms=BENCH_LEASE_MS):
    """Untimed, between phases: waits until the master holds no space of force-removed objects
    (their read leases ended; its tick frees them once a second), so that the next phase's puts
    find the whole pool. Returns the seconds waited; raises RuntimeError after the master's
    lease (lease_ms) plus 5 s."""
    timeout = lease_ms / 1000 + 5
    t0 = time.monotonic()
    while True:
        held = master_held_bytes(port)
        if held == 0:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(
                "the master still holds %d bytes of force-removed objects after %.1f s: their "
                "read leases (default_kv_lease_ttl) should have ended" % (held, time.monotonic() - t0))
        time.sleep(0.05)


def wait_port(port, proc, timeout=30.0):
    """Bounded wait until 127.0.0.1:port accepts; False if proc exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def wait_line(path, prefix, proc, timeout=30.0):
    """Bounded wait until the file at path has a line starting with prefix; the line or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, "r", errors="replace") as f:
                for line in f:
                    if line.startswith(prefix):
                        return line.strip()
        except OSError:
            pass
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def stop(proc, timeout=10):
    """SIGTERM, then SIGKILL after timeout seconds; the process is waited for."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def die_with_parent():
    """preexec_fn for the daemons a benchmark starts: the kernel sends them SIGTERM when the
    benchmark process dies, however it dies (a crash in a client library included), so that
    none is left behind. Linux prctl(PR_SET_PDEATHSIG); a no-op elsewhere."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def progress_enabled(flag=None):
    """Progress lines go to a terminal only, unless forced on (--progress) or off."""
    if flag is not None:
        return flag
    return sys.stdout.isatty()
