#!/usr/bin/env python3
"""The KV-cache scenario end to end (issue 5): a master, a standalone provider whose pool is the
store's capacity, worker A storing a paged KV cache, worker B fetching it into its own cache and
decoding from it, then the provider's shutdown checked. With N >= 3 GPUs in --gpus (or --ring),
N workers at once on a ring (issue 9): worker i stores prompt i, worker i+1 mod N fetches and
decodes it, every batch put and every batch get of all N started together. See README.md.

  run.py --egmstore BUILD/bin/egmstore --out DIR [--device cuda --gpus 0,1 --pool egm|host]
  run.py --egmstore BUILD/bin/egmstore --out DIR --gpus 0,1,2,3,4,5,6,7      # 8 workers, a ring
  run.py --egmstore BUILD/bin/egmstore --out DIR --device cpu [--protocol shm|tcp]

Writes DIR/results.json and DIR/summary.txt; exits nonzero when any check failed.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
GiB, MiB = 1 << 30, 1 << 20

# Mirrors model.PRESETS (run.py itself needs no torch): layers, heads, head_dim, block, prompt.
SIZES = {
    "tiny": (2, 2, 16, 16, 64),
    "small": (4, 4, 64, 16, 256),
    "medium": (8, 8, 128, 16, 2048),
    "large": (16, 8, 128, 32, 8192),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--egmstore", required=True, help="the egmstore binary (BUILD/bin/egmstore)")
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument(
        "--gpus",
        default="0,1",
        help="GPU of each worker: A,B (0,0: one GPU), or N >= 3 for a ring of N (repeats allowed, "
        "e.g. 0,0,0,0); with --fake-gpu the fake driver's device ordinals",
    )
    p.add_argument(
        "--ring",
        action="store_true",
        help="two workers as a ring too (both store and fetch at once); N >= 3 always is one",
    )
    p.add_argument(
        "--tensors",
        choices=["auto", "torch", "numpy"],
        default="auto",
        help="the workers' tensor library (tensors.py); auto: torch where --python has it, else "
        "numpy (CPU only: --device cpu)",
    )
    p.add_argument("--pool", choices=["egm", "host"], default=None, help="default: egm (cuda), host (cpu)")
    p.add_argument("--protocol", default=None, help="workers' protocol; default nvlink (egm), shm (host)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--size", choices=sorted(SIZES), default=None, help="model preset; default medium (cuda), small (cpu)"
    )
    p.add_argument("--decode-tokens", type=int, default=8)
    p.add_argument("--lat-iters", type=int, default=20)
    p.add_argument(
        "--atol",
        type=float,
        default=None,
        help="logits tolerance; default 1e-4 (fp32, cpu), 2e-2 (fp16, cuda)",
    )
    p.add_argument(
        "--pool-size", default="auto", help="provider capacity, e.g. 8GiB (auto: from the KV bytes)"
    )
    p.add_argument(
        "--max-mr-size", default=None, help="chunk size; default 1GiB (egm), the whole pool (host)"
    )
    p.add_argument(
        "--python", default=sys.executable, help="interpreter of the workers (with torch, or numpy for the CPU)"
    )
    p.add_argument(
        "--pythonpath", default=None, help="folder holding the egmstore package (default BIN/../python)"
    )
    p.add_argument("--worker-timeout", type=int, default=600)
    p.add_argument(
        "--fake-gpu",
        action="store_true",
        help="testing without a GPU: with egmstore's fake libcuda.so.1 on LD_LIBRARY_PATH, "
        "CPU workers whose caches are fake device memory (EGM pool, nvlink)",
    )
    return p.parse_args()


def meminfo():
    vals = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            vals[k] = int(v.split()[0]) * 1024
    return {"MemFree": vals["MemFree"], "MemAvailable": vals.get("MemAvailable", 0)}


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", text, re.I)
    if not m:
        raise SystemExit(f"--pool-size: {text!r} is not a size (e.g. 8GiB)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2).upper()]


class Run:
    def __init__(self, args):
        self.args = args
        self.procs = []
        self.checks = []  # (name, ok, detail)
        self.res = {"checks": []}
        os.makedirs(args.out, exist_ok=True)
        self.log = open(os.path.join(args.out, "run.log"), "w")
        self.lock = threading.Lock()

    def say(self, text):
        with self.lock:  # the ring's workers print from one thread each
            print(text, flush=True)
            self.log.write(text + "\n")
            self.log.flush()

    def check(self, name, ok, detail=""):
        self.checks.append((name, bool(ok), detail))
        self.res["checks"].append({"name": name, "ok": bool(ok), "detail": detail})
        self.say(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))
        return ok

    def daemon(self, name, argv, ready, timeout):
        """Start an egmstore daemon; wait for the line matching `ready` on its stdout."""
        logpath = os.path.join(self.args.out, f"{name}.log")
        log = open(logpath, "w")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        self.procs.append(proc)
        end = time.time() + timeout
        while time.time() < end:
            line = proc.stdout.readline()
            if not line:
                break
            log.write(line)
            log.flush()
            m = re.search(ready, line)
            if m:  # keep draining stdout so that a chatty daemon never blocks on the pipe
                threading.Thread(
                    target=lambda: [log.write(x) or log.flush() for x in proc.stdout], daemon=True
                ).start()
                return proc, m, line.strip()
        proc.poll()
        raise RuntimeError(f"{name} not ready (exit {proc.returncode}); see {logpath}")

    def stop(self, proc, timeout=120):
        proc.send_signal(signal.SIGTERM)
        t0 = time.time()
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        return code, time.time() - t0

    def start_worker(self, role, extra, name=None, prefix=""):
        """Start a worker; a thread copies its output to OUT/worker-<name>.log and the terminal."""
        a, name = self.args, name or role
        argv = [
            a.python,
            "-W",
            "ignore",
            os.path.join(HERE, "worker.py"),
            "--role",
            role,
            "--work",
            a.out,
            "--size",
            a.size,
            "--tensors",
            a.tensors,
        ] + extra
        log = open(os.path.join(a.out, f"worker-{name}.log"), "w")
        self.say(f"$ {' '.join(argv)}")
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env
        )

        def pump():
            for line in proc.stdout:
                log.write(line)
                self.say("  " + prefix + line.rstrip())
            log.close()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        return name, proc, t

    def finish_worker(self, w, deadline):
        name, proc, t = w
        try:
            code = proc.wait(max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        t.join(30)
        try:
            with open(os.path.join(self.args.out, f"{name}.json")) as f:
                out = json.load(f)
        except (OSError, ValueError):
            out = {"ok": False, "error": f"no {name}.json"}
        out["exit"] = code
        return out

    def worker(self, role, extra):
        return self.finish_worker(self.start_worker(role, extra), time.time() + self.args.worker_timeout)

    def ls(self):
        p = subprocess.run(
            [self.args.egmstore, "ls", "--master", self.master_addr],
            capture_output=True,
            text=True,
            timeout=60,
        )
        total = (p.stdout.strip().splitlines() or [""])[-1]
        m = re.match(r"(\d+) segments", total)
        return (int(m.group(1)) if m else None), total, p.returncode

    def http(self, port, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return None, str(e)


def prom(text):
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            try:
                vals[name] = float(v)
            except ValueError:
                pass
    return vals


def main():
    a = parse_args()
    if a.fake_gpu:
        if a.device != "cpu" or a.pool == "host" or a.protocol not in (None, "nvlink"):
            raise SystemExit(
                "--fake-gpu: CPU tensors on the fake driver's device memory: --device cpu, "
                "pool egm, protocol nvlink"
            )
        a.pool, a.protocol = "egm", "nvlink"
    a.pool = a.pool or ("egm" if a.device == "cuda" else "host")
    a.size = a.size or ("medium" if a.device == "cuda" else "small")
    a.protocol = a.protocol or ("nvlink" if a.pool == "egm" else "shm")
    if (
        a.device == "cpu"
        and not a.fake_gpu
        and (a.protocol == "nvlink" or (a.pool == "egm" and a.protocol != "tcp"))
    ):
        # CPU tensors reach a CUDA VMM pool only over tcp (a fake libcuda.so.1 makes that testable)
        raise SystemExit(
            "--device cpu: nvlink needs GPU buffers; use --pool host --protocol shm|tcp "
            "(or --pool egm --protocol tcp)"
        )
    if a.pool == "host" and a.protocol == "nvlink":
        raise SystemExit("--pool host serves shm and tcp, not nvlink")
    try:
        gpus = [int(x) for x in a.gpus.split(",")]
    except ValueError:
        gpus = []
    if len(gpus) < 2 or min(gpus) < 0:
        raise SystemExit("--gpus: two or more ids: A,B (e.g. 0,1; 0,0 with one GPU) or a ring 0,1,2,...")
    a.tensors = pick_tensors(a)
    ring = len(gpus) > 2 or a.ring
    nw = len(gpus)
    devs = [f"cuda:{g}" if a.device == "cuda" else "cpu" for g in gpus]
    dev_a, dev_b = devs[0], devs[1]
    layers, heads, hd, block, prompt = SIZES[a.size]
    elt = 2 if a.device == "cuda" else 4
    block_bytes = block * heads * hd * elt
    kv_bytes = layers * 2 * prompt * heads * hd * elt
    need = a.rounds * (kv_bytes + a.lat_iters * 2 * block_bytes) * (nw if ring else 1)
    if a.pool_size == "auto":
        floor, unit = (4 * GiB, GiB) if a.pool == "egm" else (256 * MiB, 64 * MiB)
        pool = max(floor, -(-need * 3 // 2 // unit) * unit)
    else:
        pool = parse_size(a.pool_size)
    if pool < need:
        raise SystemExit(f"--pool-size {pool} B is below the {need} B the rounds store")
    max_mr = a.max_mr_size or str(GiB if a.pool == "egm" else pool)
    pypath = a.pythonpath or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(a.egmstore))), "python"
    )

    r = Run(a)
    r.env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [pypath, HERE] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        ),
    )
    res = r.res
    res["config"] = {
        "device": a.device,
        "fake_gpu": a.fake_gpu,
        "gpus": gpus if a.device == "cuda" else None,
        "fake_gpus": gpus if a.fake_gpu else None,
        "workers": nw,
        "ring": ring,
        "same_gpu": a.device == "cuda" and not ring and gpus[0] == gpus[1],
        "shared_gpus": a.device == "cuda" and ring and len(set(gpus)) < nw,
        "pool": a.pool,
        "protocol": a.protocol,
        "size": a.size,
        "rounds": a.rounds,
        "decode_tokens": a.decode_tokens,
        "pool_bytes": pool,
        "max_mr_size": max_mr,
        "kv_bytes_per_round": kv_bytes,
        "block_bytes": block_bytes,
        "keys_per_round": layers * prompt // block,
        "egmstore": a.egmstore,
        "pythonpath": pypath,
        "python": a.python,
        "tensors": a.tensors,
    }
    if ring:
        where = f"{nw} workers on a ring, GPUs {','.join(map(str, gpus))}" if a.device == "cuda" else f"{nw} workers on a ring"
    else:
        where = "GPUs A=%d B=%d" % tuple(gpus) if a.device == "cuda" else ""
    r.say(
        f"== KV-cache scenario: device {a.device} {where}"
        f" pool {a.pool} ({pool / GiB:.2f} GiB, chunks of at most {max_mr} B) protocol {a.protocol} model {a.size}:"
        f" {layers} layers x {heads} heads x {hd}, page {block} tokens = {block_bytes} B per K or V,"
        f" {layers * prompt // block} keys x 2 pages = {kv_bytes / MiB:.1f} MiB per round, {a.rounds} rounds,"
        f" tensors {a.tensors}"
    )
    if res["config"]["same_gpu"]:
        r.say(
            "NOTE: workers A and B share one GPU (--gpus %d,%d): B fetches into another process's "
            "cache on the same device, not across GPUs" % tuple(gpus)
        )
    if res["config"]["shared_gpus"]:
        r.say(
            f"NOTE: {nw} workers on {len(set(gpus))} GPU(s) ({a.gpus}): workers that share a GPU "
            "share its copy engines; the aggregate is of the processes, not of distinct GPUs"
        )
    ok = False
    try:
        # The ceiling first: it also loads torch and the CUDA libraries into the page cache, so the
        # MemFree baseline below is not moved by the workers' library loads.
        c = r.worker("ceiling", ["--device", dev_a, "--device-b", dev_b, "--bytes", str(kv_bytes)])
        res["ceiling"] = c
        r.check("raw copy ceiling measured", c.get("ok"), c.get("error", ""))

        r.master, m, line = r.daemon(
            "master",
            [a.egmstore, "master", "--port", "0", "--listen-address", "127.0.0.1", "--log-level", "warn"],
            r"listening on (\S+):(\d+)",
            30,
        )
        r.master_addr = f"127.0.0.1:{m.group(2)}"
        r.say(line)
        mem0 = meminfo()
        pargs = [
            a.egmstore,
            "provider",
            "--master",
            r.master_addr,
            "--global-segment-size",
            str(pool),
            "--max-mr-size",
            max_mr,
            "--local-hostname",
            "127.0.0.1",
            "--provider-http-port",
            "0",
            "--log-level",
            "warn",
        ]
        if a.pool == "egm":
            pargs += [
                "--enable-egm-store-pool",
                "true",
                "--egm-handle-type",
                "posix_fd",
                "--protocol",
                "nvlink" if a.protocol == "nvlink" else "auto",
            ]
        else:
            pargs += ["--enable-egm-store-pool", "false", "--pool-memory", "host"]
        t0 = time.time()
        provider, m, line = r.daemon("provider", pargs, r"provider ready: (\d+) segments.* http (\d+)", 300)
        res["provider_setup_s"] = time.time() - t0
        segments, http_port = int(m.group(1)), int(m.group(2))
        mem1 = meminfo()
        r.say(f"{line} (setup {res['provider_setup_s']:.1f} s)")
        code, body = r.http(http_port, "/health")
        r.check("provider /health", code == 200 and '"healthy"' in body, f"HTTP {code} {body.strip()}")
        code, body = r.http(http_port, "/metrics")
        pm = prom(body) if code == 200 else {}
        res["provider_metrics_ready"] = pm
        r.check(
            "provider pool published",
            pm.get("egm_client_pool_capacity_bytes", 0) > 0
            and pm.get("egm_client_pool_egm") == (1.0 if a.pool == "egm" else 0.0),
            f"capacity {int(pm.get('egm_client_pool_capacity_bytes', 0))} B in "
            f"{int(pm.get('egm_client_pool_chunks', 0))} chunks, egm {int(pm.get('egm_client_pool_egm', -1))}",
        )
        nseg, total, _ = r.ls()
        r.check("master lists the pool", nseg == segments, total)

        common = [
            "--master",
            r.master_addr,
            "--protocol",
            a.protocol,
            "--rounds",
            str(a.rounds),
            "--decode-tokens",
            str(a.decode_tokens),
            "--lat-iters",
            str(a.lat_iters),
            "--expect-segments",
            str(segments),
        ]
        fake = (lambda i: ["--fake-gpu", str(gpus[i])]) if a.fake_gpu else (lambda i: [])
        atol_arg = ["--atol", str(a.atol)] if a.atol is not None else []
        if ring:
            run_ring(r, a, common, gpus, devs, fake, atol_arg, segments, layers)
        else:
            wa = r.worker("a", common + ["--device", dev_a] + fake(0))
            res["worker_a"] = wa
            r.check(
                "worker A: prefill, register, batch_put_from_multi_buffers",
                wa.get("ok") and wa["exit"] == 0,
                (
                    wa.get("error", "").strip().splitlines()[-1]
                    if wa.get("error")
                    else f"{len(wa.get('rounds', []))} rounds"
                ),
            )
            if wa.get("ok"):
                wb = r.worker("b", common + ["--device", dev_b] + fake(1) + atol_arg)
                res["worker_b"] = wb
                fetch_checks(r, "worker B: ", "", wb, wb.get("rounds", []), "A", layers)
                for name, w in (("A", wa), ("B", wb)) if a.protocol != "tcp" else ():
                    mapping_check(r, f"worker {name}", w, segments)
                r.check("worker B exit 0", wb["exit"] == 0 and wb.get("ok"), f"exit {wb['exit']}")

        nseg, total, _ = r.ls()
        res["ls_before_shutdown"] = total
        r.say(f"egmstore ls before shutdown: {total}")
        code, body = r.http(http_port, "/metrics")
        res["provider_metrics_end"] = prom(body) if code == 200 else {}
        code, dt = r.stop(provider)
        res["provider_teardown_s"] = dt
        r.check("provider SIGTERM: exit 0", code == 0, f"exit {code}, teardown {dt:.1f} s")
        nseg, total, lsrc = r.ls()
        r.check("no published capacity after shutdown", nseg == 0, f"egmstore ls: {total}")
        tol = max(pool // 4, GiB)
        for _ in range(60):  # the kernel gives pinned memory back shortly after the exit
            mem2 = meminfo()
            if mem2["MemFree"] + tol >= mem0["MemFree"]:
                break
            time.sleep(0.25)
        res["meminfo"] = {"before": mem0, "ready": mem1, "after": mem2, "tolerance": tol}
        g = lambda x: f"{x['MemFree'] / GiB:.2f}"
        r.check(
            "host MemFree back after shutdown",
            mem2["MemFree"] + tol >= mem0["MemFree"],
            f"MemFree GiB before/ready/after {g(mem0)} / {g(mem1)} / {g(mem2)} (tolerance {tol / GiB:.2f} GiB; "
            f"MemAvailable {mem0['MemAvailable'] / GiB:.2f} / {mem1['MemAvailable'] / GiB:.2f} / "
            f"{mem2['MemAvailable'] / GiB:.2f})",
        )
        if a.pool == "egm" and a.device == "cuda":  # (a fake driver's memory is not committed)
            r.check(
                "EGM pool held host memory while up",
                mem0["MemFree"] - mem1["MemFree"] >= pool * 3 // 4,
                f"{(mem0['MemFree'] - mem1['MemFree']) / GiB:.2f} GiB taken for a {pool / GiB:.2f} GiB pool",
            )
        code, _ = r.stop(r.master, 30)
        r.check("master SIGTERM: exit 0", code == 0, f"exit {code}")
    except Exception as e:  # a daemon that never became ready, a timeout: a failed run
        r.check("scenario ran to the end", False, f"{type(e).__name__}: {e}")
    finally:
        for p in r.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    ok = bool(r.checks) and all(c[1] for c in r.checks)
    res["ok"] = ok
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    summary = render(res, r.checks)
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write(summary)
    r.say("\n" + summary)
    return 0 if ok else 1


def pick_tensors(a):
    """The workers' tensor library: --tensors, or torch where --python imports it, else numpy
    (the CPU only). Neither: an error that says what to install."""

    def importable(mod):
        p = subprocess.run([a.python, "-c", f"import {mod}"], capture_output=True, text=True)
        return p.returncode == 0, (p.stderr.strip().splitlines() or [""])[-1]

    want = ["torch", "numpy"] if a.tensors == "auto" else [a.tensors]
    if a.device == "cuda":
        want = [w for w in want if w == "torch"]
        if not want:
            raise SystemExit("--device cuda: CUDA tensors need torch (--tensors torch or auto)")
    why = []
    for mod in want:
        ok, err = importable(mod)
        if ok:
            return mod
        why.append(f"{mod}: {err}")
    hint = (
        "install torch into it"
        if want == ["torch"]
        else "install numpy (python/requirements-test.txt; scripts/install-deps.sh puts it into .venv)"
    )
    raise SystemExit(f"error: the workers' interpreter {a.python} cannot import {' or '.join(want)} "
                     f"({'; '.join(why)}): {hint}")


def last_error(w):
    return w.get("error", "").strip().splitlines()[-1] if w.get("error") else ""


def fetch_checks(r, prefix, control_prefix, wb, rows, storer, layers):
    """The fetcher's checks of one pair: every page byte for byte, the decode against a full
    recompute, the control; rows are its get rounds."""
    a = r.args
    r.check(
        f"{prefix}exist, batch_get_into_multi_buffers, pages byte for byte",
        rows
        and all(x["digest_mismatches"] == 0 and not x["bad_gets"] and x["exist"] == x["keys"] for x in rows)
        and len(rows) == a.rounds,
        last_error(wb)
        or f"{sum(x['keys'] for x in rows)} keys fetched, {sum(x['digest_mismatches'] for x in rows)} "
        f"digest mismatches, {sum(x['short_gets'] for x in rows)} short gets, "
        f"{sum(x['keys'] - x['exist'] for x in rows)} missing; {'B' if storer == 'A' else 'the fetcher'}'s "
        f"slots differ from {storer}'s for {wb.get('slots_differing_from_a')} of "
        f"{r.res['config']['keys_per_round'] // layers} blocks",
    )
    r.check(
        f"{prefix}decode from the fetched cache == full recompute",
        rows and all(x["logits_allclose"] for x in rows),
        "max |logit diff| "
        + ", ".join(f"{x['logits_max_abs_diff']:.3g}" for x in rows)
        + f" (atol {wb.get('atol')})",
    )
    ctl = rows[0].get("control_wrong_layer_diff") if rows else None
    r.check(
        f"{control_prefix}control: a wrong page (layer 0 given layer 1's) is detected",
        rows and rows[0].get("control_detected"),
        f"max |logit diff| {ctl}",
    )


def mapping_check(r, name, w, segments):
    mr = w.get("mapping_reuse", {})
    r.check(
        f"{name}: mappings reused (count constant after round 1)",
        mr.get("ok"),
        mr.get("detail", "") + f"; before round 1: {w.get('mappings_at_start')}, pool segments {segments}",
    )


def aggregate(rows_per_worker, op):
    """One round's batch of every worker: all bytes over the common wall window, from the first
    start to the last end (CLOCK_MONOTONIC, one clock for the machine), and the share of that
    window in which all N were inside their call. Not a sum of the workers' own rates."""
    t0 = min(x["t_start"] for x in rows_per_worker)
    t1 = max(x["t_end"] for x in rows_per_worker)
    busy = max(0.0, min(x["t_end"] for x in rows_per_worker) - max(x["t_start"] for x in rows_per_worker))
    nbytes = sum(x["bytes"] for x in rows_per_worker)
    return {
        f"{op}_bytes": nbytes,
        f"{op}_window_s": t1 - t0,
        f"{op}_GBps": nbytes / (t1 - t0) / 1e9 if t1 > t0 else None,
        f"{op}_all_busy_pct": round(100 * busy / (t1 - t0), 1) if t1 > t0 else None,
    }


def run_ring(r, a, common, gpus, devs, fake, atol_arg, segments, layers):
    """N workers at once; pair i = worker i stores prompt i, worker i+1 mod N fetches it."""
    res, n = r.res, len(gpus)
    for stale in [f"ring{i}.json" for i in range(n)] + [f"manifest-{i}.json" for i in range(n)]:
        if os.path.exists(os.path.join(a.out, stale)):
            os.remove(os.path.join(a.out, stale))
    bdir = os.path.join(a.out, "barrier")
    if os.path.isdir(bdir):
        for f in os.listdir(bdir):
            os.remove(os.path.join(bdir, f))
    ring_args = ["--nworkers", str(n), "--barrier-timeout", str(a.worker_timeout)]
    started = [
        r.start_worker(
            "ring",
            common + ["--device", devs[i], "--index", str(i)] + ring_args + fake(i) + atol_arg,
            name=f"ring{i}",
            prefix=f"[W{i}] ",
        )
        for i in range(n)
    ]
    deadline = time.time() + a.worker_timeout
    ws = [r.finish_worker(w, deadline) for w in started]
    res["workers"] = ws
    gpu = (lambda i: f"GPU {gpus[i]}") if a.device == "cuda" or a.fake_gpu else (lambda i: "cpu")
    for i in range(n):
        j = (i + 1) % n
        wa, wb = ws[i], ws[j]
        puts, gets = wa.get("put_rounds", []), wb.get("get_rounds", [])
        pre = f"pair {i} (W{i} {gpu(i)} -> W{j} {gpu(j)}): "
        r.check(
            f"{pre}stored: prefill, register, batch_put_from_multi_buffers",
            len(puts) == a.rounds and all(not x["failed"] and x["existed_before"] == 0 for x in puts),
            last_error(wa)
            or f"{len(puts)} rounds, {sum(x['keys'] for x in puts)} keys, "
            f"{sum(len(x['failed']) for x in puts)} failed, {sum(x['existed_before'] for x in puts)} existed before",
        )
        fetch_checks(r, f"{pre}fetched: ", pre, wb, gets, f"W{i}", layers)
    for i, w in enumerate(ws):
        if a.protocol != "tcp":
            mapping_check(r, f"worker W{i}", w, segments)
        r.check(f"worker W{i} exit 0", w["exit"] == 0 and w.get("ok"), f"exit {w['exit']}")
    agg = []
    for k in range(a.rounds):
        puts = [w["put_rounds"][k] for w in ws if len(w.get("put_rounds", [])) > k]
        gets = [w["get_rounds"][k] for w in ws if len(w.get("get_rounds", [])) > k]
        if len(puts) == n and len(gets) == n:
            agg.append({"round": k + 1, **aggregate(puts, "put"), **aggregate(gets, "get")})
    res["aggregate"] = agg


def render(res, checks):
    cfg = res["config"]
    out = []
    gp = (
        f"GPUs A={cfg['gpus'][0]} B={cfg['gpus'][1]}"
        + (" (the SAME GPU: one-GPU machine)" if cfg["same_gpu"] else "")
        if cfg["gpus"]
        else "CPU tensors" + (" in the fake CUDA driver's device memory" if cfg["fake_gpu"] else "")
    )
    if cfg.get("ring"):
        devs = cfg["gpus"] or cfg["fake_gpus"]
        gp = (
            f"{cfg['workers']} workers on a ring (worker i stores prompt i, worker i+1 mod "
            f"{cfg['workers']} fetches it), "
            + (f"GPUs {','.join(map(str, devs))}" if cfg["gpus"] else gp)
            + (f" (fake devices {','.join(map(str, devs))})" if cfg["fake_gpu"] else "")
            + (f" ({len(set(devs))} distinct GPU(s))" if cfg.get("shared_gpus") else "")
        )
    out.append(
        f"KV-cache scenario: {gp}, pool {cfg['pool']} {cfg['pool_bytes'] / GiB:.2f} GiB, protocol "
        f"{cfg['protocol']}, model {cfg['size']}, {cfg['keys_per_round']} keys x 2 pages of "
        f"{cfg['block_bytes']} B = {cfg['kv_bytes_per_round'] / MiB:.1f} MiB per round"
    )
    c = res.get("ceiling", {})
    if c.get("gpu_names"):
        out.append(
            "GPUs: " + ", ".join(f"{d} {n}" for d, n in c["gpu_names"].items()) + f"; {c.get('tensors')}"
        )
    if c.get("ok"):
        out.append(
            f"raw copy ceiling ({c['what']}): device->host {c['d2h_GBps']:.2f} GB/s, "
            f"host->device {c['h2d_GBps']:.2f} GB/s (best of 5)"
        )
    if cfg.get("ring"):
        render_ring(res, c, out)
    ra = {x["round"]: x for x in res.get("worker_a", {}).get("rounds", [])}
    rb = {x["round"]: x for x in res.get("worker_b", {}).get("rounds", [])}
    if ra:
        out.append("")
        out.append(
            f"{'round':>5} {'put GB/s':>9} {'put ms':>8} {'%ceil':>6} {'1pg put us':>10} "
            f"{'get GB/s':>9} {'get ms':>8} {'%ceil':>6} {'1pg get us':>10} {'pages ok':>9} "
            f"{'max|dlogit|':>11} {'maps A/B':>9}"
        )
        for n in sorted(ra):
            x, y = ra[n], rb.get(n)
            pc = lambda v, k: f"{100 * v / c[k]:.0f}%" if c.get("ok") else "-"
            line = (
                f"{n:>5} {x['put_GBps']:>9.2f} {x['put_s'] * 1e3:>8.2f} {pc(x['put_GBps'], 'd2h_GBps'):>6} "
                f"{x['put_1page_p50_us']:>10}"
            )
            if y:
                line += (
                    f" {y['get_GBps']:>9.2f} {y['get_s'] * 1e3:>8.2f} {pc(y['get_GBps'], 'h2d_GBps'):>6} "
                    f"{y['get_1page_p50_us']:>10} {y['keys'] - y['digest_mismatches']:>4}/{y['keys']:<4} "
                    f"{y['logits_max_abs_diff']:>11.3g} {str(x['mappings']) + '/' + str(y['mappings']):>9}"
                )
            out.append(line)
        later = [n for n in sorted(ra) if n > 1 and n in rb]
        if later:
            med = lambda xs: sorted(xs)[len(xs) // 2]
            pg, gg = med([ra[n]["put_GBps"] for n in later]), med([rb[n]["get_GBps"] for n in later])
            out.append(
                f"rounds 2-{later[-1]} median: put {pg:.2f} GB/s, get {gg:.2f} GB/s"
                + (
                    f" ({100 * pg / c['d2h_GBps']:.0f}% / {100 * gg / c['h2d_GBps']:.0f}% of the ceiling)"
                    if c.get("ok")
                    else ""
                )
            )
    if cfg["protocol"] == "tcp":
        out.append("mapping reuse not checked: tcp maps no segment")
    out.append("")
    for name, ok, detail in checks:
        out.append(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))
    out.append(
        f"\nresult: {'PASS' if res['ok'] else 'FAIL'} "
        f"({sum(c[1] for c in checks)}/{len(checks)} checks passed)"
    )
    return "\n".join(out) + "\n"


def render_ring(res, c, out):
    """The ring's table: per round the aggregate of all N workers' batches, then per worker."""
    agg, ws = res.get("aggregate", []), res.get("workers", [])
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None
    f = lambda v, fmt: format(v, fmt) if v is not None else "-"
    if agg:
        out.append("")
        out.append(
            f"aggregate of all {len(ws)} workers per round: bytes over the common wall window (first start "
            "to last end of the batch calls); busy% = share of the window with all N inside their call"
        )
        out.append(
            f"{'round':>5} {'put GB/s':>9} {'put ms':>8} {'busy%':>6} {'get GB/s':>9} {'get ms':>8} "
            f"{'busy%':>6} {'pages ok':>11} {'max|dlogit|':>11}"
        )
        for x in agg:
            k = x["round"] - 1
            gets = [w["get_rounds"][k] for w in ws]
            keys = sum(g["keys"] for g in gets)
            ok = keys - sum(g["digest_mismatches"] for g in gets)
            out.append(
                f"{x['round']:>5} {f(x['put_GBps'], '.2f'):>9} {x['put_window_s'] * 1e3:>8.2f} "
                f"{f(x['put_all_busy_pct'], '.0f'):>6} {f(x['get_GBps'], '.2f'):>9} "
                f"{x['get_window_s'] * 1e3:>8.2f} {f(x['get_all_busy_pct'], '.0f'):>6} "
                f"{str(ok) + '/' + str(keys):>11} {max(g['logits_max_abs_diff'] for g in gets):>11.3g}"
            )
        later = [x for x in agg if x["round"] > 1 and x["put_GBps"] and x["get_GBps"]]
        if later:
            out.append(
                f"rounds 2-{later[-1]['round']} median aggregate: put {med([x['put_GBps'] for x in later]):.2f} "
                f"GB/s, get {med([x['get_GBps'] for x in later]):.2f} GB/s"
            )
    if ws:
        out.append("")
        out.append(
            "per worker, rounds 2-N median of its own batch (its put: its pair; its get: the pair before)"
            + (": the ceiling above is one GPU's, measured alone" if c.get("ok") else "")
        )
        for i, w in enumerate(ws):
            pr = [x["put_GBps"] for x in w.get("put_rounds", [])[1:]]
            gr = [x["get_GBps"] for x in w.get("get_rounds", [])[1:]]
            maps = sorted({x["mappings"] for x in w.get("put_rounds", []) + w.get("get_rounds", [])}, key=str)
            out.append(
                f"  W{i} {w.get('device', '?')}: put {f(med(pr), '.2f')} GB/s, get {f(med(gr), '.2f')} GB/s, "
                f"1-page put/get p50 {f(med([x['put_1page_p50_us'] for x in w.get('put_rounds', [])]), '')}/"
                f"{f(med([x['get_1page_p50_us'] for x in w.get('get_rounds', [])]), '')} us, mappings {maps}"
            )


if __name__ == "__main__":
    sys.exit(main())
