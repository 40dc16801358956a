#!/usr/bin/env python3
"""bench/suite.py: the whole benchmark suite in one command (issue 7, docs/benchmarks.md).

  bench/suite.py                      # --cpu: the CPU suite, JSON + report under bench/results/
  bench/suite.py --gpu                # the CPU suite plus the GPU workloads
  bench/suite.py --smoke --check      # seconds-long, into a temp folder; checks what it wrote

Steps (each a child process; a missing tool or package is SKIPPED with the reason):
  data            `egmstore bench data` (C client library: shm, tcp; with --gpu nvlink and
                  tcp from GPU memory), memcpy / cuMemcpy ceiling in the same run
  meta            `egmstore bench meta` (the master's metadata round trips)
  store-egmstore  bench/py/store_bench.py --system egmstore (the Mooncake-API facade, shm and tcp)
  store-mooncake  bench/py/store_bench.py --system mooncake (Mooncake Store over tcp)
  redis           bench/py/redis_bench.py (redis-server + redis-benchmark)
  gpu-scripts     --gpu only: every bench/gpu/*.py program (sparse offload, interference, ...)

Writes <out-dir>/<machine>-suite-<yyyymmdd>.json (machine, commit, each step's status and
config, every record) and runs bench/report.py on it (markdown + PNG plots beside it).
"""

import argparse
import datetime
import glob
import json
import os
import re
import selectors
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "py"))
import benchlib as bl  # noqa: E402

EXIT_SKIP = 77
CPU_STEPS = ["data", "meta", "store-egmstore", "store-mooncake", "redis"]
GPU_STEPS = ["data-gpu", "gpu-scripts"]


class Suite:
    def __init__(self, a):
        self.a = a
        self.show = bl.progress_enabled(a.progress)
        self.steps = []  # {"step", "status", "seconds", "message", "json"}
        self.docs = {}
        self.t0 = time.monotonic()
        self.load_start = loadavg()

    def say(self, text, always=False):
        if always or self.show:
            print(text, flush=True)

    # ---- running a child ---------------------------------------------------------------
    def run(self, step, cmd, out_json, timeout, env=None):
        """Runs cmd, its output into <work>/<step>.log (and onto the terminal when progress
        is shown); returns (status, message)."""
        log_path = os.path.join(self.a.work_dir, step + ".log")
        self.say("[suite %5.0fs] %s: %s" % (time.monotonic() - self.t0, step, " ".join(shlex.quote(c) for c in cmd)))
        t = time.monotonic()
        last = []
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, cwd=bl.REPO)
            except OSError as exc:
                return "failed", "cannot run %s: %s" % (cmd[0], exc)
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            buf = b""
            deadline = time.monotonic() + timeout
            timed_out = False
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if not sel.select(timeout=min(left, 1.0)):
                    if proc.poll() is not None:
                        break
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                log.write(chunk)
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    text = line.decode(errors="replace")
                    last = (last + [text])[-20:]
                    if self.show:
                        print("    " + text, flush=True)
            sel.close()
            if timed_out:
                bl.stop(proc)
                return "failed", "timed out after %d s (log %s)" % (timeout, log_path)
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                bl.stop(proc)
                rc = -9
            proc.stdout.close()
        secs = time.monotonic() - t
        tail = [l for l in last if l.strip()]
        if rc == EXIT_SKIP:
            msg = next((l for l in tail if "SKIPPED" in l), tail[-1] if tail else "skipped")
            return "skipped", msg.strip()
        if rc != 0:
            return "failed", "exit %d after %.1f s; last lines: %s (log %s)" % (rc, secs, " | ".join(tail[-3:]), log_path)
        if out_json and not os.path.exists(out_json):
            return "failed", "exit 0 but no %s (log %s)" % (out_json, log_path)
        return "ok", "%.1f s" % secs

    def record_step(self, step, status, message, out_json=None, convert=None):
        entry = {"step": step, "status": status, "message": message, "json": None, "records": 0}
        # a failed step's JSON, when it wrote one, is kept too: its records say what failed
        if status in ("ok", "failed") and out_json and (status == "ok" or os.path.exists(out_json)):
            try:
                with open(out_json) as f:
                    doc = json.load(f)
                if convert:
                    doc = convert(doc)
                self.docs[step] = doc
                entry["json"] = os.path.basename(out_json)
                entry["records"] = len(doc.get("results", []))
            except (OSError, ValueError) as exc:
                entry["status"] = "failed"
                entry["message"] += "; %s: not JSON: %s" % (out_json, exc) if status == "failed" else \
                    "%s: not JSON: %s" % (out_json, exc)
        self.steps.append(entry)
        if entry["status"] == "skipped":  # make test lists it (scripts/test-skips.py)
            print("EGM-SKIP: bench suite step %s: %s" % (entry["step"], entry["message"]), flush=True)
        word = {"ok": "done", "skipped": "SKIPPED", "failed": "FAILED"}[entry["status"]]
        self.say("[suite %5.0fs] %s %s: %s%s" % (time.monotonic() - self.t0, entry["step"], word, entry["message"],
                                                 (", %d records" % entry["records"]) if entry["records"] else ""),
                 always=True)

    # ---- steps -------------------------------------------------------------------------
    def egm_bin(self):
        return os.path.join(self.a.egm_build, "bin", "egmstore")

    def step_data(self, gpu=False):
        step = "data-gpu" if gpu else "data"
        binary = self.egm_bin()
        if not os.access(binary, os.X_OK):
            return self.record_step(step, "skipped", "no egmstore CLI at %s (--egm-build)" % binary)
        helptext = subprocess.run([binary, "bench", "data", "--help"], capture_output=True, text=True, timeout=30)
        if helptext.returncode != 0:
            first = (helptext.stderr or helptext.stdout).strip().splitlines()[:1]
            return self.record_step(step, "skipped", "`egmstore bench data` is not in this build (%s): "
                                    "its records are missing from this run" % (first[0] if first else "no help"))
        if gpu and not self.has_gpu():
            return self.record_step(step, "skipped", "no GPU (nvidia-smi lists none)")
        flags = set(re.findall(r"(--[a-z][a-z0-9-]*)", helptext.stdout))
        out = os.path.join(self.a.work_dir, step + ".json")
        a = self.a
        want = [("--smoke", None) if a.smoke else None,
                ("--protocols", "nvlink,tcp" if gpu else "shm,tcp"),
                ("--gpu", None) if gpu else None,
                ("--sizes", a.sizes) if a.sizes else None,
                # batch throughput against the block size (bench/report.py's batch plot)
                ("--batch-blocks", "4KiB,64KiB,1MiB") if not a.smoke else None,
                ("--clients", a.clients) if a.clients else None,
                # the C tool's phases default to 2 s; 1 s keeps the CPU suite to a few minutes
                ("--seconds", str(a.seconds or 1.0)) if not a.smoke else None,
                ("--ceiling", None) if "--ceiling" in flags and "--no-ceiling" in flags else None]
        cmd = [binary, "bench", "data"]
        for w in want:
            if w and w[0] in flags:
                cmd += [w[0]] + ([w[1]] if w[1] is not None else [])
        cmd += shlex.split(a.data_args or "") + ["--out", out]
        status, msg = self.run(step, cmd, out, a.step_timeout)
        self.record_step(step, status, msg, out)

    def step_meta(self):
        binary = self.egm_bin()
        if not os.access(binary, os.X_OK):
            return self.record_step("meta", "skipped", "no egmstore CLI at %s (--egm-build)" % binary)
        out = os.path.join(self.a.work_dir, "meta.json")
        if self.a.smoke:
            opts = ["--clients", "1,2", "--ops", "300", "--keys", "1000", "--segments", "2",
                    "--segment-size", "64MiB"]
        else:
            opts = ["--clients", self.a.clients or "1,8", "--seconds", str(self.a.seconds or 1),
                    "--keys", "100000"]
        status, msg = self.run("meta", [binary, "bench", "meta", *opts, "--out", out], out, self.a.step_timeout)
        self.record_step("meta", status, msg, out, convert=convert_meta)

    def step_store(self, system):
        step = "store-" + system
        out = os.path.join(self.a.work_dir, step + ".json")
        cmd = [sys.executable, os.path.join(HERE, "py", "store_bench.py"), "--system", system,
               "--egm-build", self.a.egm_build, "--out", out,
               "--log-dir", os.path.join(self.a.work_dir, step + "-logs")]
        if system == "egmstore":
            cmd.append("--ceiling")  # memcpy in the same run, for CPU ratios without the C tool
        if self.a.smoke:
            cmd.append("--smoke")
        for opt, val in (("--sizes", self.a.sizes), ("--clients", self.a.clients),
                         ("--seconds", self.a.seconds)):
            if val:
                cmd += [opt, str(val)]
        if self.show:
            cmd.append("--progress")
        cmd += shlex.split(self.a.store_args or "")
        status, msg = self.run(step, cmd, out, self.a.step_timeout)
        self.record_step(step, status, msg, out)

    def step_redis(self):
        out = os.path.join(self.a.work_dir, "redis.json")
        cmd = [sys.executable, os.path.join(HERE, "py", "redis_bench.py"), "--out", out]
        if self.a.smoke:
            cmd.append("--smoke")
        if self.a.clients:
            cmd += ["--clients", self.a.clients]
        if self.a.seconds:
            cmd += ["--seconds", str(self.a.seconds)]
        if self.show:
            cmd.append("--progress")
        cmd += shlex.split(self.a.redis_args or "")
        status, msg = self.run("redis", cmd, out, self.a.step_timeout)
        self.record_step("redis", status, msg, out)

    def has_gpu(self):
        return bool(bl.machine_info().get("gpus"))

    def step_gpu_scripts(self):
        """Every bench/gpu/*.py that is a program (has a __main__ block; the others are its
        helper modules), with the options its --help lists: --egmstore BIN, --pythonpath DIR,
        --out DIR (its results folder), --json FILE, and --smoke in smoke runs."""
        scripts = []
        for path in sorted(glob.glob(os.path.join(HERE, "gpu", "*.py"))):
            try:
                with open(path) as f:
                    text = f.read()
            except OSError:
                continue
            if not os.path.basename(path).startswith("_") and re.search(r"__name__\s*==\s*['\"]__main__", text):
                scripts.append(path)
        if not scripts:
            return self.record_step("gpu-scripts", "skipped", "no bench/gpu/*.py programs in this checkout")
        if not self.has_gpu():
            return self.record_step("gpu-scripts", "skipped", "no GPU (nvidia-smi lists none): %s not run"
                                    % ", ".join(os.path.basename(p) for p in scripts))
        env = dict(os.environ)
        pypath = os.path.join(self.a.egm_build, "python")
        env["PYTHONPATH"] = os.pathsep.join(p for p in [pypath, env.get("PYTHONPATH", "")] if p)
        env["EGM_BUILD"] = self.a.egm_build
        for script in scripts:
            name = "gpu-" + os.path.splitext(os.path.basename(script))[0]
            out_dir = os.path.join(self.a.work_dir, name)
            out = os.path.join(self.a.work_dir, name + ".json")
            os.makedirs(out_dir, exist_ok=True)
            helptext = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                                      timeout=120, env=env)
            flags = set(re.findall(r"(--[a-z][a-z0-9-]*)", helptext.stdout))
            cmd = [sys.executable, script]
            for flag, value in (("--egmstore", self.egm_bin()), ("--pythonpath", pypath),
                                ("--out", out_dir if "--json" in flags else out), ("--json", out)):
                if flag in flags:
                    cmd += [flag, value]
            if self.a.smoke and "--smoke" in flags:
                cmd.append("--smoke")
            cmd += shlex.split(self.a.gpu_script_args or "")
            status, msg = self.run(name, cmd, out, self.a.step_timeout, env=env)
            self.record_step(name, status, msg, out)

    # ---- the combined document ----------------------------------------------------------
    def combined(self, started_ms):
        results = []
        documents = {}
        for step, doc in self.docs.items():
            for r in doc.get("results", []):
                r = dict(r)
                r.setdefault("tool", doc.get("tool", step))
                r["step"] = step
                results.append(r)
            documents[step] = {k: v for k, v in doc.items() if k != "results"}
        config = dict(vars(self.a))
        return bl.document("suite", config, results, started_ms=started_ms, steps=self.steps,
                           documents=documents, seconds=round(time.monotonic() - self.t0, 1),
                           loadavg={"start": self.load_start, "end": loadavg()})


def loadavg():
    """The 1, 5 and 15 minute load averages (other work on the machine during the run)."""
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


def convert_meta(doc):
    """`egmstore bench meta`'s own JSON -> schema-1 records (workload "meta")."""
    if doc.get("schema") == bl.SCHEMA:
        return doc
    cfg = doc.get("config", {})
    transport = {"unix": "unix", "tcp": "tcp"}.get(cfg.get("transport"), cfg.get("transport"))
    results = []
    for r in doc.get("results", []):
        results.append(bl.record(
            workload="meta", system="egmstore", api="c", transport=transport, op=r.get("op"),
            memory=None, bytes=None, batch=r.get("batch", 1), clients=r.get("clients", 1), procs=1,
            calls=r.get("calls", 0), seconds=r.get("seconds", 0.0), p50_us=r.get("p50_us"),
            p99_us=r.get("p99_us"), mean_us=r.get("mean_us"), max_us=r.get("max_us"), gbps=None,
            ops_s=r.get("calls_per_s"), keys_s=r.get("keys_per_s"), errors=r.get("errors", 0),
            rpc=r.get("rpc"), round_trips_per_call=r.get("round_trips_per_call")))
    return {"schema": bl.SCHEMA, "tool": "egmstore bench meta", "machine": doc.get("machine"),
            "commit": doc.get("commit"), "dirty": doc.get("commit_dirty"), "config": cfg,
            "results": results}


def check(path, md_path, steps):
    """--check: the JSON parses, every record has errors 0, no step failed, the markdown exists."""
    problems = []
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        return ["%s does not parse: %s" % (path, exc)]
    if doc.get("schema") != bl.SCHEMA:
        problems.append("schema is %r, not %d" % (doc.get("schema"), bl.SCHEMA))
    for s in steps:
        if s["status"] == "failed":
            problems.append("step %s failed: %s" % (s["step"], s["message"]))
    bad = [r for r in doc.get("results", []) if r.get("errors") != 0]
    for r in bad[:20]:
        problems.append("errors %s in step %s: %s %s %s %s, %s bytes x%s, %s clients%s" % (
            r.get("errors"), r.get("step"), r.get("system"), r.get("workload"), r.get("transport"),
            r.get("op"), r.get("bytes"), r.get("batch"), r.get("clients"),
            (": " + r["message"]) if r.get("message") else ""))
    if not doc.get("results"):
        problems.append("no records at all")
    if not (os.path.exists(md_path) and os.path.getsize(md_path) > 0):
        problems.append("no markdown report at %s" % md_path)
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--cpu", action="store_true", help="the CPU suite (default)")
    g.add_argument("--gpu", action="store_true", help="the CPU suite plus the GPU workloads")
    ap.add_argument("--smoke", action="store_true", help="seconds-long, tiny sizes (CI)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless the JSON parses, every record has errors 0, no step failed "
                         "and the markdown was written")
    ap.add_argument("--egm-build", default=os.path.join(bl.REPO, "build"),
                    help="build folder with bin/egmstore and python/ (default build)")
    ap.add_argument("--out-dir", help="where the JSON and report go (default bench/results; "
                                      "--smoke: a temp folder, removed after a passing --check)")
    ap.add_argument("--parts-dir", help="where each step's JSON and log go (default a temp folder)")
    ap.add_argument("--machine", help="machine name in the file name (default from the hardware, e.g. cpu2, h200x2)")
    ap.add_argument("--only", help="comma list of steps to run (%s)" % ", ".join(CPU_STEPS + GPU_STEPS))
    ap.add_argument("--skip", default="", help="comma list of steps not to run")
    ap.add_argument("--sizes", help="object sizes for every step that takes them (e.g. 4KiB,1MiB)")
    ap.add_argument("--clients", help="client counts (e.g. 1,8)")
    ap.add_argument("--seconds", type=float, help="timed seconds per measurement")
    ap.add_argument("--data-args", help="more options for `egmstore bench data` (one string)")
    ap.add_argument("--store-args", help="more options for store_bench.py (both systems)")
    ap.add_argument("--redis-args", help="more options for redis_bench.py")
    ap.add_argument("--gpu-script-args", help="more options for every bench/gpu/*.py program")
    ap.add_argument("--step-timeout", type=int, default=None, help="seconds per step (default 1800; smoke 300)")
    ap.add_argument("--no-report", action="store_true", help="do not run bench/report.py")
    ap.add_argument("--keep", action="store_true", help="keep the smoke run's temp folder")
    ap.add_argument("--progress", action="store_true", default=None,
                    help="show the steps' own lines even when not on a terminal")
    a = ap.parse_args(argv)
    a.egm_build = os.path.abspath(a.egm_build)
    if a.step_timeout is None:
        a.step_timeout = 300 if a.smoke else 1800
    steps = CPU_STEPS + (GPU_STEPS if a.gpu else [])
    if a.only:
        wanted = [s for s in a.only.split(",") if s]
        for s in wanted:
            if s not in CPU_STEPS + GPU_STEPS:
                ap.error("--only: %r is not one of %s" % (s, ", ".join(CPU_STEPS + GPU_STEPS)))
        steps = [s for s in steps if s in wanted]
    steps = [s for s in steps if s not in a.skip.split(",")]

    temp_out = a.out_dir is None and a.smoke
    out_dir = a.out_dir or (tempfile.mkdtemp(prefix="egm-suite-smoke-") if a.smoke
                            else os.path.join(HERE, "results"))
    os.makedirs(out_dir, exist_ok=True)
    info = bl.machine_info()
    machine = a.machine or bl.machine_name(info)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
    stem = "%s-suite-%s%s" % (machine, "smoke-" if a.smoke else "", date)
    path = os.path.join(out_dir, stem + ".json")
    for i in range(2, 100):
        if not os.path.exists(path):
            break
        path = os.path.join(out_dir, "%s-%d.json" % (stem, i))
    stem = os.path.splitext(os.path.basename(path))[0]
    # Each step's own JSON and log: inside the smoke run's temp folder, else a temp folder of
    # their own (kept, its path printed) so that bench/results/ gets only the combined files.
    if a.parts_dir:
        a.work_dir = a.parts_dir
    elif temp_out:
        a.work_dir = os.path.join(out_dir, "parts")
    else:
        a.work_dir = tempfile.mkdtemp(prefix="egm-suite-parts-")
    os.makedirs(a.work_dir, exist_ok=True)

    suite = Suite(a)
    started = int(time.time() * 1000)
    suite.say("[suite] %s (%s, %d cores), %s, steps: %s; parts and logs in %s"
              % ("smoke" if a.smoke else ("gpu" if a.gpu else "cpu"), info["cpu"], info["cores"] or 0,
                 "egmstore build " + a.egm_build, ", ".join(steps), a.work_dir), always=True)
    for s in steps:
        if s == "data":
            suite.step_data()
        elif s == "data-gpu":
            suite.step_data(gpu=True)
        elif s == "meta":
            suite.step_meta()
        elif s == "store-egmstore":
            suite.step_store("egmstore")
        elif s == "store-mooncake":
            suite.step_store("mooncake")
        elif s == "redis":
            suite.step_redis()
        elif s == "gpu-scripts":
            suite.step_gpu_scripts()
    doc = suite.combined(started)
    bl.write_json(path, doc)
    suite.say("[suite] wrote %s (%d records)" % (path, len(doc["results"])), always=True)

    md_path = os.path.splitext(path)[0] + ".md"
    if not a.no_report:
        cmd = [sys.executable, os.path.join(HERE, "report.py"), path, "--md", md_path]
        rep = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        for line in (rep.stdout + rep.stderr).strip().splitlines():
            suite.say("[report] " + line, always=True)
        if rep.returncode != 0:
            suite.steps.append({"step": "report", "status": "failed", "message": "report.py exit %d" % rep.returncode,
                                "json": None, "records": 0})

    rc = 0
    if a.check:
        problems = check(path, md_path, suite.steps)
        if problems:
            print("[suite] CHECK FAILED:\n  " + "\n  ".join(problems), flush=True)
            rc = 1
        else:
            skipped = [s["step"] for s in suite.steps if s["status"] == "skipped"]
            print("[suite] check passed: %d records, all with errors 0%s; report %s"
                  % (len(doc["results"]), ("; skipped: " + ", ".join(skipped)) if skipped else "", md_path),
                  flush=True)
    if not temp_out:
        print("[suite] each step's JSON and log: %s" % a.work_dir, flush=True)
    if temp_out and rc == 0 and not a.keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    elif temp_out:
        print("[suite] kept %s" % out_dir, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
