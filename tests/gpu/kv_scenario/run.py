#!/usr/bin/env python3
"""The KV-cache scenario end to end (issue 5): a master, a standalone provider whose pool is the
store's capacity, worker A storing a paged KV cache, worker B fetching it into its own cache and
decoding from it, then the provider's shutdown checked. See README.md.

  run.py --egmstore BUILD/bin/egmstore --out DIR [--device cuda --gpus 0,1 --pool egm|host]
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
    p.add_argument("--gpus", default="0,1", help="GPU of worker A, GPU of worker B (0,0: one GPU)")
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
    p.add_argument("--python", default=sys.executable, help="interpreter with torch for the workers")
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

    def say(self, text):
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

    def worker(self, role, extra):
        a = self.args
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
        ] + extra
        logpath = os.path.join(a.out, f"worker-{role}.log")
        self.say(f"$ {' '.join(argv)}")
        with open(logpath, "w") as log:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env
            )
            for line in proc.stdout:
                log.write(line)
                self.say("  " + line.rstrip())
            try:
                code = proc.wait(a.worker_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
        try:
            with open(os.path.join(a.out, f"{role}.json")) as f:
                out = json.load(f)
        except (OSError, ValueError):
            out = {"ok": False, "error": f"no {role}.json"}
        out["exit"] = code
        return out

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
                "--fake-gpu: CPU torch on the fake driver's device memory: --device cpu, "
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
    gpus = [int(x) for x in a.gpus.split(",")]
    if len(gpus) != 2:
        raise SystemExit("--gpus: two ids, A,B (e.g. 0,1; 0,0 with one GPU)")
    dev_a, dev_b = (f"cuda:{gpus[0]}", f"cuda:{gpus[1]}") if a.device == "cuda" else ("cpu", "cpu")
    layers, heads, hd, block, prompt = SIZES[a.size]
    elt = 2 if a.device == "cuda" else 4
    block_bytes = block * heads * hd * elt
    kv_bytes = layers * 2 * prompt * heads * hd * elt
    need = a.rounds * (kv_bytes + a.lat_iters * 2 * block_bytes)
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
        "same_gpu": a.device == "cuda" and gpus[0] == gpus[1],
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
    }
    r.say(
        f"== KV-cache scenario: device {a.device} {'GPUs A=%d B=%d' % tuple(gpus) if a.device == 'cuda' else ''}"
        f" pool {a.pool} ({pool / GiB:.2f} GiB, chunks of at most {max_mr} B) protocol {a.protocol} model {a.size}:"
        f" {layers} layers x {heads} heads x {hd}, page {block} tokens = {block_bytes} B per K or V,"
        f" {layers * prompt // block} keys x 2 pages = {kv_bytes / MiB:.1f} MiB per round, {a.rounds} rounds"
    )
    if res["config"]["same_gpu"]:
        r.say(
            "NOTE: workers A and B share one GPU (--gpus %d,%d): B fetches into another process's "
            "cache on the same device, not across GPUs" % tuple(gpus)
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
            pm.get("egmstore_pool_capacity_bytes", 0) > 0
            and pm.get("egmstore_pool_egm") == (1.0 if a.pool == "egm" else 0.0),
            f"capacity {int(pm.get('egmstore_pool_capacity_bytes', 0))} B in "
            f"{int(pm.get('egmstore_pool_chunks', 0))} chunks, egm {int(pm.get('egmstore_pool_egm', -1))}",
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
            wb = r.worker(
                "b",
                common
                + ["--device", dev_b]
                + fake(1)
                + (["--atol", str(a.atol)] if a.atol is not None else []),
            )
            res["worker_b"] = wb
            rows = wb.get("rounds", [])
            r.check(
                "worker B: exist, batch_get_into_multi_buffers, pages byte for byte",
                rows
                and all(
                    x["digest_mismatches"] == 0 and not x["bad_gets"] and x["exist"] == x["keys"]
                    for x in rows
                )
                and len(rows) == a.rounds,
                (
                    wb.get("error", "").strip().splitlines()[-1]
                    if wb.get("error")
                    else f"{sum(x['keys'] for x in rows)} keys fetched, {sum(x['digest_mismatches'] for x in rows)} "
                    f"digest mismatches, {sum(x['short_gets'] for x in rows)} short gets, "
                    f"{sum(x['keys'] - x['exist'] for x in rows)} missing; B's slots differ from A's for "
                    f"{wb.get('slots_differing_from_a')} of {res['config']['keys_per_round'] // layers} blocks"
                ),
            )
            r.check(
                "worker B: decode from the fetched cache == full recompute",
                rows and all(x["logits_allclose"] for x in rows),
                "max |logit diff| "
                + ", ".join(f"{x['logits_max_abs_diff']:.3g}" for x in rows)
                + f" (atol {wb.get('atol')})",
            )
            ctl = rows[0].get("control_wrong_layer_diff") if rows else None
            r.check(
                "control: a wrong page (layer 0 given layer 1's) is detected",
                rows and rows[0].get("control_detected"),
                f"max |logit diff| {ctl}",
            )
            for name, w in (("A", wa), ("B", wb)) if a.protocol != "tcp" else ():
                mr = w.get("mapping_reuse", {})
                r.check(
                    f"worker {name}: mappings reused (count constant after round 1)",
                    mr.get("ok"),
                    mr.get("detail", "")
                    + f"; before round 1: {w.get('mappings_at_start')}, pool segments {segments}",
                )
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


def render(res, checks):
    cfg = res["config"]
    out = []
    gp = (
        f"GPUs A={cfg['gpus'][0]} B={cfg['gpus'][1]}"
        + (" (the SAME GPU: one-GPU machine)" if cfg["same_gpu"] else "")
        if cfg["gpus"]
        else "CPU tensors" + (" in the fake CUDA driver's device memory" if cfg["fake_gpu"] else "")
    )
    out.append(
        f"KV-cache scenario: {gp}, pool {cfg['pool']} {cfg['pool_bytes'] / GiB:.2f} GiB, protocol "
        f"{cfg['protocol']}, model {cfg['size']}, {cfg['keys_per_round']} keys x 2 pages of "
        f"{cfg['block_bytes']} B = {cfg['kv_bytes_per_round'] / MiB:.1f} MiB per round"
    )
    c = res.get("ceiling", {})
    if c.get("gpu_names"):
        out.append(
            "GPUs: " + ", ".join(f"{d} {n}" for d, n in c["gpu_names"].items()) + f"; torch {c.get('torch')}"
        )
    if c.get("ok"):
        out.append(
            f"raw copy ceiling ({c['what']}): device->host {c['d2h_GBps']:.2f} GB/s, "
            f"host->device {c['h2d_GBps']:.2f} GB/s (best of 5)"
        )
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


if __name__ == "__main__":
    sys.exit(main())
