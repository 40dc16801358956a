#!/usr/bin/env python3
"""The pool at full scale (issue 9): topology, egm_numa_nodes=auto, page placement, N concurrent
GPU workers against the pool next to the raw copy ceiling of the same N, and the locality effect.
One command on whatever machine it lands on (eight GPUs over several NUMA nodes, or one GPU on
one node); what a machine cannot show is reported as SKIP with the reason, never as a pass.

  scale.py --egmstore BUILD/bin/egmstore --out DIR                  # one worker per GPU
  scale.py ... --gpus 0,0          # two workers sharing GPU 0 (a one-GPU machine)
  scale.py ... --workers 16        # 16 workers over the GPUs, round robin
  scale.py ... --fake-gpu          # no GPU: egmstore's fake CUDA driver; the flow only

Steps (docs/benchmarks.md, "Scale: eight GPUs (issue 9)"):
 1. topology: nvidia-smi topo -m, numactl -H, nvidia-smi nvlink -s, each GPU's PCI address and
    NUMA node (/sys/bus/pci/devices/ADDR/numa_node), the CUDA driver's HOST_NUMA_ID per GPU, every
    node's memory: OUT/topology.json and OUT/topology.txt.
 2. egm_numa_nodes=auto: the provider's --plan-only nodes against the nodes near a GPU (step 1);
    then a provider with that pool: each chunk's address range (its debug log line), and on which
    node the chunk's pages sit: /proc/PID/numa_maps over the range, move_pages(2) on sampled pages
    (read through /proc/PID/mem first, so that an unmapped page gets mapped; --no-touch skips),
    numastat -p PID, and each node's used memory (MemTotal - MemFree: a VM may add memory to a
    node meanwhile) against its planned share.
 3. N worker processes (one per GPU of --gpus), each: the raw copy ceiling (torch copy_ HBM <->
    pinned host, the pinned memory on the GPU's node when numactl is there), then Put and Get of
    64 KiB blocks (batches of --batch) and of 16 MiB objects (batches of --object-batch) through
    the egmstore package's Store over nvlink; every phase starts on a barrier for all N; every get
    pass is checked block by block against its pattern. Aggregate GB/s = all workers' bytes / the
    phase's wall time from the common start to the last worker's end (`gbps`, the figure compared
    with the ceiling), next to the share of the phase during which all N were busy and the sum of
    the workers' own rates (`gbps_sum`: bytes / time inside their calls, which overstates the
    aggregate when the workers' calls do not overlap). Then the same store phases with the pool
    on the first node only (egm_numa_nodes=FIRST): the locality effect; SKIP on one node.
 4. The KV-cache scenario with N workers: tests/gpu/kv_scenario/run.py --ring with the same GPUs
    (one worker per GPU; --gpus 0,0: two on GPU 0): worker i stores prompt i, worker i+1 mod N
    fetches and decodes it, every batch put and get of all N at once; its own master and
    provider, model --kv-size for --kv-rounds rounds; its checks (every pair: pages byte for
    byte, decode == recompute, the control, mapping reuse, exits; the provider's shutdown) are
    one check here, its aggregate GB/s a record; results in OUT/kv/. SKIP when --python has no
    torch (the fake run without torch) or with --no-kv.

Writes OUT/scale.json (schema 1, workload "scale"), OUT/summary.txt (the table and PASS / FAIL /
SKIP checks) and the logs; exits 1 when a check failed (a SKIP is not a failure). No speed is
asserted.
"""

import argparse
import copy
import ctypes
import errno
import json
import os
import platform
import queue
import re
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

KiB, MiB, GiB = gpulib.KiB, gpulib.MiB, gpulib.GiB
ATTR_PCI_BUS, ATTR_PCI_DEVICE, ATTR_PCI_DOMAIN, ATTR_HOST_NUMA_ID = 33, 34, 50, 134
CHUNK_LINE = re.compile(r"vmm pool: chunk (\d+): host NUMA node (\d+), base (0x[0-9a-f]+|\(nil\)), "
                        r"(\d+) bytes")
KV_RUN = os.path.join(gpulib.REPO, "tests", "gpu", "kv_scenario", "run.py")


# ---- arguments ---------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--egmstore", help="the egmstore binary (BUILD/bin/egmstore)")
    p.add_argument("--out", help="results folder")
    p.add_argument("--pythonpath", default=None,
                   help="folder holding the egmstore package (default BIN/../python)")
    p.add_argument("--fake-gpu", action="store_true",
                   help="no GPU: egmstore's fake libcuda.so.1 on LD_LIBRARY_PATH (BUILD/fake-cuda; "
                   "2 devices over 2 NUMA nodes unless EGM_FAKE_CUDA_* say otherwise), no torch, "
                   "small sizes: checks the flow and the records, never a speed")
    p.add_argument("--gpus", default=None,
                   help="GPU of each worker, e.g. 0,1,2,3 or 0,0 (default: every GPU once)")
    p.add_argument("--workers", type=int, default=None,
                   help="N workers over the GPUs round robin (default: one per GPU)")
    p.add_argument("--bytes-per-worker", default=None,
                   help="each worker's working set per workload (1GiB; fake 4MiB)")
    p.add_argument("--block", default=None, help="block size (64KiB; fake 16KiB)")
    p.add_argument("--batch", type=int, default=64, help="blocks per batch call")
    p.add_argument("--object", default=None, help="object size (16MiB; fake 256KiB)")
    p.add_argument("--object-batch", type=int, default=4, help="objects per batch call")
    p.add_argument("--workloads", default="blocks,objects", help="blocks, objects or both")
    p.add_argument("--seconds", type=float, default=None,
                   help="each timed phase (3; fake 0.3)")
    p.add_argument("--ceiling-bytes", default=None,
                   help="one ceiling copy (256MiB; fake 1MiB)")
    p.add_argument("--max-mr-size", default=None, help="pool chunk size (1GiB; fake 2MiB)")
    p.add_argument("--pool-size", default="auto",
                   help="pool capacity (auto: two rounds of every worker's working set at most "
                   "80%% full, whole chunks, at least one chunk per node)")
    p.add_argument("--no-locality", action="store_true",
                   help="skip the run with the pool on one node only")
    p.add_argument("--no-kv", action="store_true", help="skip the KV-cache scenario (step 4)")
    p.add_argument("--kv-size", default=None,
                   help="the KV scenario's model preset (medium: 64 MiB per worker and round; "
                   "fake tiny)")
    p.add_argument("--kv-rounds", type=int, default=3, help="the KV scenario's rounds")
    p.add_argument("--kv-timeout", type=float, default=150,
                   help="seconds the KV scenario may take in all")
    p.add_argument("--no-bind", action="store_true",
                   help="do not run workers under numactl on their GPU's node")
    p.add_argument("--no-touch", action="store_true",
                   help="placement: do not read sampled pages through /proc/PID/mem")
    p.add_argument("--samples-per-chunk", type=int, default=16,
                   help="pages per chunk asked of move_pages(2)")
    p.add_argument("--python", default=sys.executable, help="interpreter of the workers")
    p.add_argument("--worker-timeout", type=float, default=240,
                   help="seconds a worker may take for its setup or one phase")
    p.add_argument("--json", default=None, help="the JSON file (default OUT/scale.json)")
    p.add_argument("--role", default="main", help=argparse.SUPPRESS)
    p.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.role == "worker":
        return a
    if not a.egmstore or not a.out:
        p.error("--egmstore and --out are required")
    fake = a.fake_gpu
    a.bytes_per_worker = gpulib.parse_size(a.bytes_per_worker or ("4MiB" if fake else "1GiB"))
    a.block = gpulib.parse_size(a.block or ("16KiB" if fake else "64KiB"))
    a.object = gpulib.parse_size(a.object or ("256KiB" if fake else "16MiB"))
    a.seconds = a.seconds if a.seconds is not None else (0.3 if fake else 3.0)
    a.ceiling_bytes = gpulib.parse_size(a.ceiling_bytes or ("1MiB" if fake else "256MiB"))
    a.max_mr_size = gpulib.parse_size(a.max_mr_size or ("2MiB" if fake else "1GiB"))
    a.workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    for w in a.workloads:
        if w not in ("blocks", "objects"):
            p.error("--workloads: blocks, objects (got %r)" % w)
    for name, unit, batch in (("block", a.block, a.batch), ("object", a.object, a.object_batch)):
        if unit % 8 or unit < 8 or batch < 1:
            p.error("--%s must be a multiple of 8 bytes and its batch >= 1" % name)
        if a.bytes_per_worker < unit * batch:
            p.error("--bytes-per-worker must hold one batch of --%s" % name)
    if a.gpus is not None:
        try:
            a.gpus = [int(x) for x in a.gpus.split(",") if x.strip()]
        except ValueError:
            p.error("--gpus: comma-separated GPU ordinals, e.g. 0,1 or 0,0")
        if not a.gpus or min(a.gpus) < 0:
            p.error("--gpus: at least one ordinal >= 0")
    if a.workers is not None and a.workers < 1:
        p.error("--workers >= 1")
    a.kv_size = a.kv_size or ("tiny" if fake else "medium")
    a.json = a.json or os.path.join(a.out, "scale.json")
    a.pythonpath = a.pythonpath or gpulib.default_pythonpath(a.egmstore)
    return a


# ---- checks ------------------------------------------------------------------------------------


class Checks:
    """PASS / FAIL / SKIP: a SKIP says what this machine could not show and why."""

    def __init__(self, say):
        self.say, self.items = say, []

    def __call__(self, name, ok, detail=""):
        return self.add(name, "PASS" if ok else "FAIL", detail)

    def skip(self, name, why):
        return self.add(name, "SKIP", why)

    def add(self, name, status, detail):
        self.items.append({"name": name, "status": status, "ok": status != "FAIL",
                           "detail": detail})
        self.say("[%s] %s%s" % (status, name, ": " + detail if detail else ""))
        return status == "PASS"

    def ok(self):
        return any(c["status"] == "PASS" for c in self.items) and all(
            c["status"] != "FAIL" for c in self.items)


# ---- step 1: topology --------------------------------------------------------------------------


def run_cmd(argv, timeout=30):
    if shutil.which(argv[0]) is None:
        return {"cmd": " ".join(argv), "rc": None, "out": "%s: not installed" % argv[0]}
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return {"cmd": " ".join(argv), "rc": p.returncode, "out": (p.stdout + p.stderr).strip()}
    except (OSError, subprocess.SubprocessError) as e:
        return {"cmd": " ".join(argv), "rc": None, "out": "%s: %s" % (argv[0], e)}


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def parse_list(text):
    """'0-2,4' -> [0, 1, 2, 4]."""
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def node_meminfo(node):
    """{'MemTotal': bytes, 'MemFree': bytes} of one NUMA node, from sysfs."""
    vals = {}
    text = read("/sys/devices/system/node/node%d/meminfo" % node, "")
    for line in text.splitlines():
        m = re.match(r"Node \d+ (\w+):\s+(\d+)( kB)?", line)
        if m:
            vals[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return {k: vals.get(k) for k in ("MemTotal", "MemFree")}


def nodes_used():
    """Per node the memory in use, MemTotal - MemFree: a VM that hot-adds memory to a node
    raises MemFree with MemTotal, so a drop of MemFree alone would understate what was taken."""
    out = {}
    for n in parse_list(read("/sys/devices/system/node/online", "0")):
        mi = node_meminfo(n)
        if mi["MemTotal"] is not None and mi["MemFree"] is not None:
            out[n] = mi["MemTotal"] - mi["MemFree"]
    return out


def cuda_devices():
    """Per GPU the CUDA driver's PCI address and HOST_NUMA_ID (ctypes, no context made); []
    and the reason when the driver cannot be asked."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return [], "libcuda.so.1: %s" % e
    try:
        gpa = lib.cuGetProcAddress_v2
        gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                        ctypes.c_uint64, ctypes.c_void_p]

        def fn(name, *argtypes):
            ptr = ctypes.c_void_p()
            if gpa(name.encode(), ctypes.byref(ptr), 12000, 0, None) != 0 or not ptr.value:
                raise RuntimeError("no %s" % name)
            return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(ptr.value)

        if fn("cuInit", ctypes.c_uint)(0) != 0:
            return [], "cuInit failed"
        count = ctypes.c_int()
        fn("cuDeviceGetCount", ctypes.POINTER(ctypes.c_int))(ctypes.byref(count))
        get = fn("cuDeviceGet", ctypes.POINTER(ctypes.c_int), ctypes.c_int)
        attr = fn("cuDeviceGetAttribute", ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int)
        out = []
        for d in range(count.value):
            dev = ctypes.c_int()
            get(ctypes.byref(dev), d)
            vals = {}
            for name, a in (("bus", ATTR_PCI_BUS), ("device", ATTR_PCI_DEVICE),
                            ("domain", ATTR_PCI_DOMAIN), ("host_numa_id", ATTR_HOST_NUMA_ID)):
                v = ctypes.c_int(-1)
                rc = attr(ctypes.byref(v), a, dev.value)
                vals[name] = v.value if rc == 0 else None
            pci = None
            if vals["bus"] is not None and vals["domain"] is not None:
                pci = "%04x:%02x:%02x.0" % (vals["domain"], vals["bus"], vals["device"] or 0)
            out.append({"ordinal": d, "pci": pci, "host_numa_id": vals["host_numa_id"]})
        return out, None
    except (RuntimeError, OSError) as e:
        return [], "libcuda.so.1: %s" % e


def topology(a, say):
    """Step 1: what the machine is; the nodes near a GPU (expected of egm_numa_nodes=auto)."""
    t = {"commands": {}}
    for key, argv in (("nvidia_smi_topo", ["nvidia-smi", "topo", "-m"]),
                      ("numactl_H", ["numactl", "-H"]),
                      ("nvidia_smi_nvlink", ["nvidia-smi", "nvlink", "-s"]),
                      ("nvidia_smi_gpus", ["nvidia-smi", "--query-gpu=index,pci.bus_id,name",
                                           "--format=csv,noheader"])):
        t["commands"][key] = run_cmd(argv)
    online = parse_list(read("/sys/devices/system/node/online", "0"))
    t["nodes"] = []
    for n in online:
        mi = node_meminfo(n)
        t["nodes"].append({"node": n, "cpus": read("/sys/devices/system/node/node%d/cpulist" % n),
                           "mem_total": mi["MemTotal"], "mem_free": mi["MemFree"]})
    gpus = []
    q = t["commands"]["nvidia_smi_gpus"]
    if q["rc"] == 0:
        for line in q["out"].splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) >= 3 and parts[0].isdigit():
                bus = parts[1].lower()
                m = re.match(r"([0-9a-f]+):([0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])", bus)
                addr = "%04x:%s" % (int(m.group(1), 16), m.group(2)) if m else bus
                gpus.append({"index": int(parts[0]), "name": parts[2], "pci": addr})
    cdevs, cerr = cuda_devices()
    t["cuda_error"] = cerr
    if not gpus:  # no nvidia-smi (the fake driver): the CUDA driver's list
        gpus = [{"index": d["ordinal"], "name": "fake CUDA device" if a.fake_gpu else "?",
                 "pci": d["pci"]} for d in cdevs]
    for g in gpus:
        node = read("/sys/bus/pci/devices/%s/numa_node" % g["pci"]) if g["pci"] else None
        g["sysfs_numa_node"] = int(node) if node not in (None, "") else None
        g["local_cpus"] = read("/sys/bus/pci/devices/%s/local_cpulist" % g["pci"]) \
            if g["pci"] else None
        cd = next((d for d in cdevs if d["pci"] == g["pci"]), None)
        if cd is None and g["index"] < len(cdevs):
            cd = cdevs[g["index"]]
        g["cuda_host_numa_id"] = cd["host_numa_id"] if cd else None
        # The node near this GPU: sysfs on a real machine; sysfs says -1 when the firmware
        # gives none (one-node machines): then the only node, else the CUDA driver's answer.
        if a.fake_gpu:
            g["near_node"], g["near_from"] = g["cuda_host_numa_id"], "fake driver HOST_NUMA_ID"
        elif g["sysfs_numa_node"] is not None and g["sysfs_numa_node"] >= 0:
            g["near_node"], g["near_from"] = g["sysfs_numa_node"], "sysfs"
        elif len(online) == 1:
            g["near_node"], g["near_from"] = online[0], "sysfs -1, the only node online"
        else:
            g["near_node"] = g["cuda_host_numa_id"]
            g["near_from"] = "sysfs -1; CUDA HOST_NUMA_ID"
    t["gpus"] = gpus
    t["near_nodes"] = sorted({g["near_node"] for g in gpus
                              if g["near_node"] is not None and g["near_node"] >= 0})
    t["nvlink_present"] = (t["commands"]["nvidia_smi_nvlink"]["rc"] == 0 and
                           "Link" in t["commands"]["nvidia_smi_nvlink"]["out"])
    lines = ["# topology (%s)%s" % (platform.node(), " FAKE GPU: the fake driver's devices"
                                    if a.fake_gpu else ""),
             "NUMA nodes online: %s" % online]
    for n in t["nodes"]:
        lines.append("  node %d: cpus %s, MemTotal %s, MemFree %s" % (
            n["node"], n["cpus"], gpulib.fmt_size(n["mem_total"] or 0),
            gpulib.fmt_size(n["mem_free"] or 0)))
    lines.append("GPUs: %d" % len(gpus))
    for g in gpus:
        lines.append("  GPU %d %s pci %s: sysfs numa_node %s, CUDA HOST_NUMA_ID %s -> near node "
                     "%s (%s); local cpus %s" % (g["index"], g["name"], g["pci"],
                                                 g["sysfs_numa_node"], g["cuda_host_numa_id"],
                                                 g["near_node"], g["near_from"], g["local_cpus"]))
    lines.append("nodes near a GPU: %s" % t["near_nodes"])
    if cerr:
        lines.append("CUDA driver: %s" % cerr)
    for key, c in t["commands"].items():
        lines += ["", "$ %s  (rc %s)" % (c["cmd"], c["rc"]), c["out"]]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "topology.txt"), "w") as f:
        f.write(text)
    benchlib.write_json(os.path.join(a.out, "topology.json"), t)
    for line in lines[:3 + len(t["nodes"]) + len(gpus) + 2]:
        say(line)
    return t


# ---- step 2: the plan and the placement --------------------------------------------------------


def plan_only(a, pool, nodes):
    argv = [a.egmstore, "provider", "--plan-only", "--enable-egm-store-pool", "true",
            "--egm-numa-nodes", nodes, "--global-segment-size", str(pool),
            "--max-mr-size", str(a.max_mr_size), "--egm-handle-type", "posix_fd"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    plan = {"argv": " ".join(argv), "rc": p.returncode, "out": p.stdout.strip(),
            "err": p.stderr.strip()[-2000:], "nodes": {}}
    for line in p.stdout.splitlines():
        m = re.match(r"(\d+)\s+\S+ \S+\s+(\d+(?:\.\d+)? \w+)\s+(\d+)\s", line)
        if m:
            plan["nodes"][int(m.group(1))] = {"share": m.group(2), "chunks": int(m.group(3))}
    return plan


def provider_chunks(logpath):
    chunks = []
    for line in (read(logpath, "") or "").splitlines():
        m = CHUNK_LINE.search(line)
        if m:
            base = 0 if m.group(3) == "(nil)" else int(m.group(3), 16)
            chunks.append({"chunk": int(m.group(1)), "node": int(m.group(2)), "base": base,
                           "size": int(m.group(4))})
    return sorted(chunks, key=lambda c: c["chunk"])


def numa_maps(pid):
    """[(start, {node: bytes}, text)] of /proc/PID/numa_maps; ranges end at the next start or
    at /proc/PID/maps' end of that range."""
    ends = {}
    for line in (read("/proc/%d/maps" % pid, "") or "").splitlines():
        lo, _, hi = line.split()[0].partition("-")
        ends[int(lo, 16)] = int(hi, 16)
    out = []
    for line in (read("/proc/%d/numa_maps" % pid, "") or "").splitlines():
        parts = line.split()
        if not parts:
            continue
        start = int(parts[0], 16)
        kb = 4
        for p_ in parts:
            if p_.startswith("kernelpagesize_kB="):
                kb = int(p_.split("=")[1])
        nodes = {}
        for p_ in parts:
            m = re.match(r"N(\d+)=(\d+)$", p_)
            if m:
                nodes[int(m.group(1))] = int(m.group(2)) * kb * 1024
        out.append((start, ends.get(start, start), nodes, line))
    return out


_MOVE_PAGES = {"x86_64": 279, "aarch64": 239}


def move_pages(pid, addrs):
    """Node of each page (move_pages(2) with no target: a query), or -errno; None when the
    system call is not known here."""
    nr = _MOVE_PAGES.get(platform.machine())
    if nr is None or not addrs:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    n = len(addrs)
    pages = (ctypes.c_void_p * n)(*addrs)
    status = (ctypes.c_int * n)()
    rc = libc.syscall(ctypes.c_long(nr), ctypes.c_int(pid), ctypes.c_ulong(n), pages, None, status,
                      ctypes.c_int(0))
    if rc != 0:
        return [-ctypes.get_errno()] * n
    return list(status)


def touch(pid, addrs):
    """Read one byte of each page through /proc/PID/mem (maps it in the provider if it was not);
    per page True or the error."""
    out = []
    try:
        fd = os.open("/proc/%d/mem" % pid, os.O_RDONLY)
    except OSError as e:
        return [str(e)] * len(addrs)
    try:
        for ad in addrs:
            try:
                os.pread(fd, 1, ad)
                out.append(True)
            except OSError as e:
                out.append(errno.errorcode.get(e.errno, str(e.errno)))
    finally:
        os.close(fd)
    return out


def placement(a, pid, chunks, used_before, used_after, plan, say):
    """Per chunk: expected node, what numa_maps and move_pages say, the verdict; per node the
    rise of its memory in use (MemTotal - MemFree) against the planned share."""
    page = os.sysconf("SC_PAGESIZE")
    res = {"chunks": [], "nodes": {}, "numastat": None}
    sampled = {}
    for c in chunks:
        k = max(1, min(a.samples_per_chunk, c["size"] // page))
        step = c["size"] // k
        sampled[c["chunk"]] = [c["base"] + (i * step) // page * page for i in range(k)]
    all_addrs = [ad for c in chunks for ad in sampled[c["chunk"]]]
    before = move_pages(pid, all_addrs)
    touched = None
    if not a.no_touch and before is not None and any(s < 0 for s in before):
        touched = touch(pid, all_addrs)
    after = move_pages(pid, all_addrs) if touched is not None else before
    maps = numa_maps(pid)
    with open(os.path.join(a.cur_out, "numa_maps.txt"), "w") as f:
        f.write("\n".join(m[3] for m in maps) + "\n")
    ns = run_cmd(["numastat", "-p", str(pid)])
    res["numastat"] = ns
    i = 0
    for c in chunks:
        n = len(sampled[c["chunk"]])
        st = after[i:i + n] if after is not None else []
        st0 = before[i:i + n] if before is not None else []
        tt = touched[i:i + n] if touched is not None else None
        i += n
        lo, hi = c["base"], c["base"] + c["size"]
        pages_by_node = {}
        vmas = 0
        for start, end, nodes, _ in maps:
            if start < hi and end > lo:
                vmas += 1
                for nd, b in nodes.items():
                    pages_by_node[nd] = pages_by_node.get(nd, 0) + b
        on = [s for s in st if s >= 0]
        if not on:
            verdict = "unknown"
        elif all(s == c["node"] for s in on):
            verdict = "ok"
        else:
            verdict = "WRONG"
        errs = sorted({errno.errorcode.get(-s, str(s)) for s in st if s < 0})
        res["chunks"].append({
            "chunk": c["chunk"], "expected_node": c["node"], "base": hex(c["base"]),
            "size": c["size"], "vmas": vmas,
            "numa_maps_bytes_by_node": {str(k): v for k, v in sorted(pages_by_node.items())},
            "move_pages_before_touch": st0, "touched": tt, "move_pages": st,
            "sampled_pages": n, "sampled_on_expected": sum(1 for s in on if s == c["node"]),
            "sampled_elsewhere": sum(1 for s in on if s != c["node"]), "sample_errors": errs,
            "verdict": verdict})
    for nd in sorted(set(used_before) | set(used_after)):
        share = sum(c["size"] for c in chunks if c["node"] == nd)
        b, f = used_before.get(nd), used_after.get(nd)
        res["nodes"][str(nd)] = {"planned_bytes": share, "used_before": b, "used_ready": f,
                                 "used_rise": (f - b) if b is not None and f is not None
                                 else None}
    return res


# ---- step 3: the workers -----------------------------------------------------------------------


class Worker:
    """One worker process: protocol lines '@@ WORD JSON' on its stdout, 'go' on its stdin."""

    def __init__(self, a, w, gpu, node, spec, env):
        self.w, self.gpu = w, gpu
        argv = [a.python, "-W", "ignore", os.path.abspath(__file__), "--role", "worker",
                "--spec", json.dumps(spec)]
        self.bound = None
        if node is not None and not a.fake_gpu and not a.no_bind and shutil.which("numactl"):
            argv = ["numactl", "--cpunodebind=%d" % node, "--membind=%d" % node] + argv
            self.bound = node
        self.log = open(os.path.join(a.cur_out, "worker-%d.log" % w), "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            if line.startswith("@@ "):
                word, _, rest = line[3:].rstrip("\n").partition(" ")
                self.q.put((word, json.loads(rest) if rest else None))
        self.q.put(("eof", None))

    def expect(self, word, timeout):
        end = time.time() + timeout
        while True:
            try:
                got, data = self.q.get(timeout=max(0.01, end - time.time()))
            except queue.Empty:
                raise RuntimeError("worker %d: no %r in %.0f s (see worker-%d.log)" % (
                    self.w, word, timeout, self.w))
            if got == word:
                return data
            if got in ("eof", "error"):
                raise RuntimeError("worker %d: %s before %r: %s (see worker-%d.log)" % (
                    self.w, got, word, (data or {}).get("error", "exit %s" % self.proc.poll()),
                    self.w))

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self, timeout=60):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return self.proc.returncode


def all_busy(intervals_by_worker, t0, t1):
    """Share of [t0, t1] during which every worker was inside a timed interval."""
    n = len(intervals_by_worker)
    events = []
    for ivs in intervals_by_worker:
        for s, e in ivs:
            events += [(max(s, t0), 1), (min(e, t1), -1)]
    events.sort()
    busy, depth, last = 0.0, 0, t0
    for t, d in events:
        if depth == n:
            busy += t - last
        depth += d
        last = t
    return busy / (t1 - t0) if t1 > t0 else 0.0


def aggregate(phase, outs, meta):
    """One record for a phase of all N workers."""
    n = len(outs)
    rates = [o["bytes"] / o["busy_s"] / 1e9 if o["busy_s"] > 0 else 0.0 for o in outs]
    t0 = min(o["t_go"] for o in outs)
    t1 = max(o["t_end"] for o in outs)
    total = sum(o["bytes"] for o in outs)
    calls = [x for o in outs for x in o["call_ns"]]
    st = benchlib.latency_stats(calls)
    st.pop("samples_us", None)
    rec = benchlib.record(
        workload="scale", system="ceiling" if phase.startswith("ceiling") else "egmstore",
        api="python", transport="cuMemcpy" if phase.startswith("ceiling") else "nvlink",
        op=meta["op"], memory="gpu", bytes=meta["unit"], batch=meta["batch"], procs=n,
        clients=n, calls=len(calls), seconds=round(t1 - t0, 6),
        errors=sum(o["errors"] + o["mismatches"] for o in outs),
        gbps=round(total / (t1 - t0) / 1e9, 3) if t1 > t0 else 0.0, **st)
    rec.update(phase=phase, pool=meta.get("pool"), workload_kind=meta.get("kind"),
               gbps_sum=round(sum(rates), 3),
               all_busy_pct=round(100 * all_busy([o["intervals"] for o in outs], t0, t1), 1),
               per_worker_gbps=[round(r, 3) for r in rates], gpus=meta["gpus"],
               bytes_moved=total, passes=sum(len(o["intervals"]) for o in outs),
               verified_units=sum(o["verified"] for o in outs),
               mismatches=sum(o["mismatches"] for o in outs),
               failed_calls_or_keys=sum(o["errors"] for o in outs))
    return rec


def run_workers(a, cluster, gpus, nodes_of, phases, say, checks, label):
    """Starts N workers, runs `phases` on barriers, returns the records."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [a.pythonpath, HERE] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                else [])))
    workers, records = [], []
    try:
        for w, g in enumerate(gpus):
            spec = {"w": w, "gpu": g, "fake": a.fake_gpu, "master": cluster.addr,
                    "pythonpath": a.pythonpath, "bytes": a.bytes_per_worker,
                    "block": a.block, "batch": a.batch, "object": a.object,
                    "object_batch": a.object_batch, "seconds": a.seconds,
                    "ceiling_bytes": a.ceiling_bytes, "tag": label}
            workers.append(Worker(a, w, g, nodes_of.get(g), spec, env))
        for wk in workers:
            info = wk.expect("setup", a.worker_timeout)
            say("  worker %d on GPU %d%s: %s" % (wk.w, wk.gpu, " (numactl node %d)" % wk.bound
                                                  if wk.bound is not None else "", info["device"]))
        for phase, meta in phases:
            # untimed: the space of the keys the last get phase read and force-removed is held
            # until their lease ends; the pool is sized for the put phases' two rounds only
            cluster.wait_held()
            for wk in workers:
                wk.proc.stdin.write("phase %s\n" % phase)
                wk.proc.stdin.flush()
            for wk in workers:
                wk.expect("ready", a.worker_timeout)
            for wk in workers:  # the barrier: every worker is ready; all go now
                wk.go()
            outs = [wk.expect("done", a.worker_timeout + a.seconds * 4) for wk in workers]
            rec = aggregate(phase, outs, dict(meta, gpus=gpus, pool=label))
            records.append(rec)
            say("  %-16s %2d workers: %8.2f GB/s aggregate (bytes / phase wall), workers' own "
                "rates %s, all busy %5.1f%%, p50 %s us p99 %s us per call, %d errors" % (
                    phase, len(gpus), rec["gbps"], "+".join("%.1f" % x for x in
                                                           rec["per_worker_gbps"]),
                    rec["all_busy_pct"], rec["p50_us"], rec["p99_us"], rec["errors"]))
        for wk in workers:
            wk.proc.stdin.write("exit\n")
            wk.proc.stdin.flush()
        codes = [wk.close() for wk in workers]
        workers = []
        checks("%s: every worker exit 0" % label, all(c == 0 for c in codes), str(codes))
    finally:
        for wk in workers:
            if wk.proc.poll() is None:
                wk.proc.kill()
            wk.close(5)
    return records


# ---- the worker process ------------------------------------------------------------------------


def worker_main(spec):
    def send(word, data=None):
        sys.stdout.write("@@ %s %s\n" % (word, json.dumps(data) if data is not None else ""))
        sys.stdout.flush()

    try:
        _worker(spec, send)
    except Exception as e:
        traceback.print_exc()
        send("error", {"error": "%s: %s" % (type(e).__name__, e)})
        return 1
    return 0


def _sub(be, buf, off, n):
    """A view of buf[off:off+n] as a backends.Buf."""
    import backends

    obj = buf.obj[off // 8:(off + n) // 8] if buf.obj is not None else None
    return backends.Buf(buf.ptr + off, n, obj)


def _worker(spec, send):
    import backends

    w, fake = spec["w"], spec["fake"]
    be = backends.FakeBackend(spec["gpu"]) if fake else backends.TorchBackend(
        "cuda:%d" % spec["gpu"])
    egmstore = gpulib.import_egmstore(spec["pythonpath"])
    store = egmstore.Store({"master_server_addr": spec["master"], "protocol": "nvlink"})
    W = spec["bytes"]
    src, dst = be.alloc(W), be.alloc(W)
    store.register_buffer(src.ptr, src.nbytes)
    store.register_buffer(dst.ptr, dst.nbytes)
    kinds = {"blocks": (spec["block"], spec["batch"]),
             "objects": (spec["object"], spec["object_batch"])}
    current = {}  # kind -> keys of the round the get phase reads
    send("setup", {"device": be.name})

    def ids_of(kind, n):
        return [(w << 24) + (1 << 23 if kind == "objects" else 0) + j for j in range(n)]

    def keys_of(kind, rnd, n):
        return ["scale/%s/%s/w%d/r%d/%d" % (spec["tag"], kind, w, rnd, j) for j in range(n)]

    def fill(kind):
        unit, _ = kinds[kind]
        n = W // unit
        ids = ids_of(kind, n)
        step = max(1, (256 * MiB) // unit)
        for s in range(0, n, step):
            part = ids[s:s + step]
            be.fill(_sub(be, src, s * unit, len(part) * unit), unit, part)
        be.sync()

    def check(kind, n):
        unit, _ = kinds[kind]
        ids = ids_of(kind, n)
        bad = 0
        step = max(1, (256 * MiB) // unit)
        for s in range(0, n, step):
            part = ids[s:s + step]
            bad += be.mismatches(_sub(be, dst, s * unit, len(part) * unit), unit,
                                 list(range(len(part))), part)
        return bad

    def remove(keys, force):
        """force only for keys a get read (leased; the call waits up to location_cache_ms past
        the last read of any key force-removed so far); keys only put go plain, which never
        waits, and a key that answers HasLease then is a bug."""
        for s in range(0, len(keys), 1024):
            part = keys[s:s + 1024]
            for k, r in zip(part, store.batch_remove(part, force=force)):
                if r is not None and not isinstance(r, egmstore.NotFound):
                    raise RuntimeError("remove %s (force %s): %r" % (k, force, r))

    # An untimed warm-up: the pool's mappings imported before the first barrier.
    unit, batch = kinds["blocks"]
    wk = ["scale/%s/warm/w%d/%d" % (spec["tag"], w, j) for j in range(batch)]
    store.batch_put_from(wk, [src.ptr + j * unit for j in range(batch)], [unit] * batch)
    store.batch_get_into(wk, [dst.ptr + j * unit for j in range(batch)], [unit] * batch)
    remove(wk, True)  # read
    filled = None

    while True:
        cmd = sys.stdin.readline().split()
        if not cmd or cmd[0] == "exit":
            break
        phase = cmd[1]
        op, _, kind = phase.partition(":")
        out = {"phase": phase, "bytes": 0, "busy_s": 0.0, "call_ns": [], "intervals": [],
               "errors": 0, "mismatches": 0, "verified": 0}
        if op in ("put", "get") and filled != kind:
            fill(kind)
            filled = kind
        if op.startswith("ceiling"):  # the buffers before the barrier, not inside the phase
            cb = spec["ceiling_bytes"]
            if fake:
                a_, b_ = be.alloc(cb), be.alloc(cb)
            else:
                import torch

                host = torch.empty(cb, dtype=torch.uint8, pin_memory=True)
                dev = torch.empty(cb, dtype=torch.uint8, device=be.device)
                be.sync()
        send("ready")
        if sys.stdin.readline().strip() != "go":
            raise RuntimeError("no go")
        out["t_go"] = time.monotonic()
        end = out["t_go"] + spec["seconds"]
        if op.startswith("ceiling"):
            d2h = op == "ceiling-d2h"
            while time.monotonic() < end:
                t0 = time.monotonic()
                if fake:
                    ctypes.memmove(a_.ptr if d2h else b_.ptr, b_.ptr if d2h else a_.ptr, cb)
                else:
                    (host.copy_(dev, non_blocking=True) if d2h else
                     dev.copy_(host, non_blocking=True))
                    be.sync()
                t1 = time.monotonic()
                out["call_ns"].append(int((t1 - t0) * 1e9))
                out["intervals"].append((t0, t1))
                out["bytes"] += cb
                out["busy_s"] += t1 - t0
            if not fake:
                del host, dev
        elif op == "put":
            unit, batch = kinds[kind]
            n = W // unit
            rnd = 0
            prev = None
            while rnd == 0 or time.monotonic() < end:
                keys = keys_of(kind, rnd, n)
                p0 = time.monotonic()
                for s in range(0, n, batch):
                    m = min(batch, n - s)
                    t0 = time.perf_counter_ns()
                    res = store.batch_put_from(keys[s:s + m],
                                               [src.ptr + (s + j) * unit for j in range(m)],
                                               [unit] * m)
                    out["call_ns"].append(time.perf_counter_ns() - t0)
                    out["errors"] += sum(1 for r in res if r is not None)
                p1 = time.monotonic()
                out["intervals"].append((p0, p1))
                out["busy_s"] += p1 - p0
                out["bytes"] += n * unit
                if prev is not None:
                    remove(prev, False)  # untimed: only two rounds in the pool at once
                prev = keys
                rnd += 1
            current[kind] = prev
        elif op == "get":
            keys = current.get(kind)
            if keys is None:
                raise RuntimeError("get:%s before put:%s" % (kind, kind))
            unit, batch = kinds[kind]
            n = len(keys)
            while out["verified"] == 0 or time.monotonic() < end:
                be.zero(dst, unit, list(range(n))) if fake else dst.obj.zero_()
                be.sync()
                p0 = time.monotonic()
                for s in range(0, n, batch):
                    m = min(batch, n - s)
                    t0 = time.perf_counter_ns()
                    res = store.batch_get_into(keys[s:s + m],
                                               [dst.ptr + (s + j) * unit for j in range(m)],
                                               [unit] * m)
                    out["call_ns"].append(time.perf_counter_ns() - t0)
                    out["errors"] += sum(1 for r in res if r != unit)
                p1 = time.monotonic()
                out["intervals"].append((p0, p1))
                out["busy_s"] += p1 - p0
                out["bytes"] += n * unit
                out["mismatches"] += check(kind, n)  # untimed: every block of every pass
                out["verified"] += n
            out["t_end"] = time.monotonic()  # the removal (a force wait) is not the phase's
            remove(keys, True)
            del current[kind]
        else:
            raise RuntimeError("unknown phase %r" % phase)
        out.setdefault("t_end", time.monotonic())
        send("done", out)
    store.unregister_buffer(src.ptr)
    store.unregister_buffer(dst.ptr)
    store.close()


# ---- main --------------------------------------------------------------------------------------


def main(argv=None):
    a = parse_args(argv)
    if a.role == "worker":
        return worker_main(json.loads(a.spec))
    if a.fake_gpu:
        # Two devices over two nodes, so that the multi-node flow runs; the caller may say more.
        os.environ.setdefault("EGM_FAKE_CUDA_DEVICES", "2")
        os.environ.setdefault("EGM_FAKE_CUDA_NUMA_NODES", "2")
        os.environ.setdefault("EGM_FAKE_CUDA_FABRIC", "0")
        why = gpulib.check_fake_driver()
        if why:
            raise SystemExit("--fake-gpu: " + why)
    os.makedirs(a.out, exist_ok=True)
    started = int(time.time() * 1000)
    log = open(os.path.join(a.out, "scale.log"), "w")

    def say(text):
        print(text, flush=True)
        log.write(text + "\n")
        log.flush()

    checks = Checks(say)
    results, extra = [], {"notes": []}
    note = extra["notes"].append
    config = {"fake_gpu": a.fake_gpu, "bytes_per_worker": a.bytes_per_worker, "block": a.block,
              "batch": a.batch, "object": a.object, "object_batch": a.object_batch,
              "workloads": a.workloads, "seconds": a.seconds, "ceiling_bytes": a.ceiling_bytes,
              "max_mr_size": a.max_mr_size, "egmstore": a.egmstore, "pythonpath": a.pythonpath,
              "bind": not a.no_bind, "touch": not a.no_touch}
    say("== scale (issue 9)%s" % (": FAKE GPU (egmstore's fake CUDA driver): the flow, the checks "
                                  "and the records; no figure here is a GPU figure"
                                  if a.fake_gpu else ""))
    try:
        # 1. topology
        say("== 1. topology")
        topo = topology(a, say)
        extra["topology"] = {k: topo[k] for k in ("nodes", "gpus", "near_nodes",
                                                  "nvlink_present", "cuda_error")}
        ngpu = len(topo["gpus"])
        if ngpu == 0:
            raise RuntimeError("no GPU found (nvidia-smi and the CUDA driver list none)")
        gpus = a.gpus or list(range(ngpu))
        if a.workers:
            gpus = [gpus[i % len(gpus)] for i in range(a.workers)]
        if max(gpus) >= ngpu:
            raise RuntimeError("--gpus names GPU %d; the machine has %d" % (max(gpus), ngpu))
        nodes_of = {g["index"]: g["near_node"] for g in topo["gpus"]}
        config.update(gpus=gpus, workers=len(gpus), gpu_count=ngpu)
        near = topo["near_nodes"]
        if len(set(gpus)) < len(gpus):
            note("workers share GPUs (%s): the aggregate is of %d processes over %d GPU(s)" % (
                gpus, len(gpus), len(set(gpus))))
        if ngpu < 8:
            note("this machine has %d GPU(s), not 8: the eight-GPU figures of issue 9 are not "
                 "measured here" % ngpu)
        checks("topology recorded", bool(topo["gpus"]),
               "%d GPU(s), NUMA nodes %s, nodes near a GPU %s, NVLink %s" % (
                   ngpu, [n["node"] for n in topo["nodes"]], near,
                   "listed" if topo["nvlink_present"] else "not listed"))

        # pool size: two rounds of every worker's working set (per workload, removed between
        # workloads) at most POOL_FILL_MAX full, whole chunks, at least one chunk per node
        data = 2 * len(gpus) * a.bytes_per_worker + len(gpus) * a.batch * a.block
        pool = (gpulib.pool_bytes(data, a.max_mr_size, a.max_mr_size * max(1, len(near)))
                if a.pool_size == "auto" else gpulib.parse_size(a.pool_size))
        config["pool_bytes"] = pool

        # 2. egm_numa_nodes=auto
        say("== 2. egm_numa_nodes=auto: the plan, then each chunk's pages")
        plan = plan_only(a, pool, "auto")
        extra["plan_auto"] = plan
        say(plan["out"] or plan["err"])
        chosen = sorted(plan["nodes"])
        checks("egm_numa_nodes=auto chose every node near a GPU, and only those",
               plan["rc"] == 0 and chosen == near,
               "plan nodes %s, nodes near a GPU %s%s" % (
                   chosen, near, "" if plan["rc"] == 0 else "; --plan-only exit %s: %s" % (
                       plan["rc"], plan["err"][-300:])))

        configs = [("auto", "auto")]
        if a.no_locality:
            checks.skip("locality: the pool on one node only", "--no-locality")
        elif len(near) < 2:
            checks.skip("locality: the pool on one node only",
                        "not possible here: the GPUs are near %d NUMA node(s) %s; the "
                        "comparison needs GPUs near two or more nodes" % (len(near), near))
        else:
            configs.append(("node%d" % near[0], str(near[0])))

        phases_store = []
        for kind in a.workloads:
            unit, batch = (a.block, a.batch) if kind == "blocks" else (a.object, a.object_batch)
            for op in ("put", "get"):
                phases_store.append(("%s:%s" % (op, kind),
                                     {"op": op, "unit": unit, "batch": batch, "kind": kind}))
        phases_ceiling = [("ceiling-d2h", {"op": "put", "unit": a.ceiling_bytes, "batch": 1,
                                           "kind": "ceiling"}),
                          ("ceiling-h2d", {"op": "get", "unit": a.ceiling_bytes, "batch": 1,
                                           "kind": "ceiling"})]
        extra["placement"] = {}
        for label, nodes in configs:
            say("== 3. %d workers on GPUs %s, pool %s (%s, chunks of %s)" % (
                len(gpus), gpus, label, gpulib.fmt_size(pool), gpulib.fmt_size(a.max_mr_size)))
            sub = copy.copy(a)
            sub.out = a.cur_out = os.path.join(a.out, label)
            # the workers force-remove what they read: a short lease, and a wait for its held
            # space before each phase (run_workers)
            cluster = gpulib.Cluster(sub, pool, a.max_mr_size, provider_args=[
                "--egm-numa-nodes", nodes, "--log-level", "debug"], master_args=[
                "--default-kv-lease-ttl", str(benchlib.BENCH_LEASE_MS)], master_http=True)
            used0 = nodes_used()
            try:
                cluster.start()
                used1 = nodes_used()
                chunks = provider_chunks(os.path.join(sub.out, "provider.log"))
                pl = placement(a, cluster.provider.pid, chunks, used0, used1, plan, say)
                extra["placement"][label] = pl
                report_placement(a, label, nodes, near, chunks, pl, checks, say)
                phases = (phases_ceiling if label == "auto" else []) + phases_store
                recs = run_workers(a, cluster, gpus, nodes_of, phases, say, checks, label)
                results += recs
                bad = [r for r in recs if r["errors"]]
                checks("%s: every put and get answered, every fetched block holds its pattern"
                       % label, not bad and any(r["system"] == "egmstore" for r in recs),
                       "; ".join("%s: %d failed, %d wrong of %d verified" % (
                           r["phase"], r["failed_calls_or_keys"], r["mismatches"],
                           r["verified_units"]) for r in recs if r["system"] == "egmstore"))
                codes = cluster.stop()
                checks("%s: provider and master exit 0 on SIGTERM" % label,
                       all(v == 0 for v in codes.values()), str(codes))
            finally:
                cluster.kill()
        ceil = {r["phase"]: r["gbps"] for r in results if r["system"] == "ceiling"}
        for r in results:
            if r["system"] == "egmstore":
                c = ceil.get("ceiling-d2h" if r["op"] == "put" else "ceiling-h2d")
                r["ceiling_gbps"] = c
                r["pct_of_ceiling"] = round(100 * r["gbps"] / c, 1) if c else None
        loc = {}
        for r in results:
            if r["system"] == "egmstore":
                loc.setdefault(r["phase"], {})[r["pool"]] = r["gbps"]
        extra["locality"] = {ph: v for ph, v in loc.items() if len(v) > 1}
        # 4. the KV scenario
        say("== 4. the KV-cache scenario with %d workers on GPUs %s" % (len(gpus), gpus))
        kv = kv_scenario(a, gpus, say, checks)
        if kv:
            extra["kv_scenario"] = kv
            results += kv.pop("records")
    except SystemExit:
        raise
    except Exception as e:
        traceback.print_exc()
        checks("benchmark ran to the end", False, "%s: %s" % (type(e).__name__, e))
    doc = benchlib.document("scale.py", config, results, started, checks=checks.items,
                            ok=checks.ok(), **extra)
    gpulib.write_results(a, doc, render, say)
    return 0 if checks.ok() else 1


def kv_scenario(a, gpus, say, checks):
    """tests/gpu/kv_scenario/run.py --ring on the same GPUs; None when skipped."""
    name = "KV-cache scenario with %d workers (a ring: worker i stores, worker i+1 fetches)" % (
        len(gpus))
    if a.no_kv:
        checks.skip(name, "--no-kv")
        return None
    p = subprocess.run([a.python, "-c", "import torch"], capture_output=True, text=True)
    if p.returncode != 0:
        checks.skip(name, "%s cannot import torch (the workers' model and paged cache are torch): "
                    "%s" % (a.python, (p.stderr.strip().splitlines() or [""])[-1]))
        return None
    out = os.path.join(a.out, "kv")
    argv = [a.python, KV_RUN, "--egmstore", a.egmstore, "--pythonpath", a.pythonpath,
            "--out", out, "--gpus", ",".join(map(str, gpus)), "--ring", "--size", a.kv_size,
            "--rounds", str(a.kv_rounds), "--worker-timeout", str(int(a.kv_timeout))]
    if a.fake_gpu:
        argv += ["--device", "cpu", "--fake-gpu"]
    say("$ " + " ".join(argv))
    t0 = time.time()
    try:
        with open(os.path.join(a.out, "kv.log"), "w") as log:
            rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT,
                                timeout=a.kv_timeout + 60).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout after %d s" % (a.kv_timeout + 60)
    try:
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {}
    kc = res.get("checks", [])
    agg = res.get("aggregate", [])
    later = [x for x in agg if x["round"] > 1] or agg
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None
    put = med([x["put_GBps"] for x in later if x["put_GBps"]])
    get = med([x["get_GBps"] for x in later if x["get_GBps"]])
    failed = [c["name"] for c in kc if not c["ok"]]
    checks(name, rc == 0 and kc and not failed,
           "run.py exit %s, %d/%d checks passed%s; aggregate (all bytes / common wall window, median "
           "of rounds %s) put %s GB/s, get %s GB/s; %.0f s; OUT/kv/summary.txt" % (
               rc, len(kc) - len(failed), len(kc),
               " (failed: %s)" % "; ".join(failed[:4]) if failed else "",
               "2-%d" % agg[-1]["round"] if len(agg) > 1 else "1", "%.2f" % put if put else "-",
               "%.2f" % get if get else "-", time.time() - t0))
    records = []
    for op, v in (("put", put), ("get", get)):
        if v is not None:
            cfg = res.get("config", {})
            rec = benchlib.record(
                workload="scale", system="kv-scenario", api="python", op=op, memory="gpu",
                transport=cfg.get("protocol"), bytes=2 * cfg.get("block_bytes", 0),
                batch=cfg.get("keys_per_round"), procs=len(gpus), clients=len(gpus),
                calls=len(later) * len(gpus), seconds=round(sum(x["%s_window_s" % op]
                                                                for x in later), 6),
                errors=len(failed), gbps=round(v, 3))
            rec.update(phase="kv-%s" % op, pool="auto", gpus=gpus, kv_size=a.kv_size,
                       rounds=a.kv_rounds, gbps_sum=None,
                       all_busy_pct=med([x["%s_all_busy_pct" % op] for x in later]),
                       note="median over rounds of all workers' batch bytes / the common window")
            records.append(rec)
    return {"rc": rc if isinstance(rc, int) else None, "ok": rc == 0 and not failed,
            "checks": kc, "aggregate": agg, "config": res.get("config"), "records": records}


def report_placement(a, label, nodes, near, chunks, pl, checks, say):
    want = near if nodes == "auto" else [int(nodes)]
    got = sorted({c["node"] for c in chunks})
    checks("%s: the provider's chunks on nodes %s" % (label, want), got == want and chunks,
           "%d chunk(s) on nodes %s (provider.log's chunk lines)" % (len(chunks), got))
    for c in pl["chunks"]:
        say("  chunk %3d node %d %s %s: numa_maps %s; move_pages %d/%d sampled pages on node %d,"
            " %d elsewhere%s -> %s" % (
                c["chunk"], c["expected_node"], c["base"], gpulib.fmt_size(c["size"]),
                {k: gpulib.fmt_size(v) for k, v in c["numa_maps_bytes_by_node"].items()} or
                "no resident pages", c["sampled_on_expected"], c["sampled_pages"],
                c["expected_node"], c["sampled_elsewhere"],
                ", errors %s" % c["sample_errors"] if c["sample_errors"] else "", c["verdict"]))
    for nd, v in pl["nodes"].items():
        say("  node %s: planned %s, memory in use rose by %s" % (
            nd, gpulib.fmt_size(v["planned_bytes"]),
            gpulib.fmt_size(v["used_rise"]) if v["used_rise"] is not None and
            v["used_rise"] >= 0 else v["used_rise"]))
    verdicts = [c["verdict"] for c in pl["chunks"]]
    name = "%s: every chunk's sampled pages sit on its node (move_pages)" % label
    if a.fake_gpu:
        checks.skip(name, "fake driver: its chunks are memfd pages placed by the kernel's default "
                    "policy, not HOST_NUMA allocations; verdicts %s recorded, not checked" % (
                        {v: verdicts.count(v) for v in set(verdicts)}))
    elif not verdicts or all(v == "unknown" for v in verdicts):
        errs = sorted({e for c in pl["chunks"] for e in c["sample_errors"]})
        checks.skip(name, "no sampled page answered a node (errors %s): the driver's mapping is "
                    "not one the kernel walks; see the memory-in-use check" % errs)
    else:
        checks(name, "WRONG" not in verdicts,
               "%s" % {v: verdicts.count(v) for v in set(verdicts)})
    # Each node gave at least 3/4 of its share: its memory in use (MemTotal - MemFree) rose by
    # that much (other work on the machine moves it too: a rise is evidence, not an exact match).
    name = "%s: each node's memory in use rose by at least 3/4 of its planned share" % label
    if a.fake_gpu:
        checks.skip(name, "fake driver: its memory is not committed at creation")
    else:
        rows = [(nd, v) for nd, v in pl["nodes"].items() if v["planned_bytes"]]
        ok = rows and all(v["used_rise"] is not None and
                          v["used_rise"] >= v["planned_bytes"] * 3 // 4 for _, v in rows)
        checks(name, ok, "; ".join("node %s: %s of %s" % (
            nd, gpulib.fmt_size(max(0, v["used_rise"] or 0)),
            gpulib.fmt_size(v["planned_bytes"])) for nd, v in rows))


def render(doc):
    c = doc["config"]
    t = doc.get("topology", {})
    out = ["scale (issue 9): %s workers on GPUs %s of %s, %s per worker and workload, pool %s%s" % (
        c.get("workers"), c.get("gpus"), c.get("gpu_count"),
        gpulib.fmt_size(c["bytes_per_worker"]), gpulib.fmt_size(c.get("pool_bytes") or 0),
        "; FAKE GPU (flow only, not a measurement)" if c["fake_gpu"] else "")]
    if t:
        out.append("NUMA nodes %s; nodes near a GPU %s; GPUs: %s" % (
            [n["node"] for n in t.get("nodes", [])], t.get("near_nodes"),
            ", ".join("%d->%s" % (g["index"], g["near_node"]) for g in t.get("gpus", []))))
    out.append("%-6s %-16s %9s %9s %7s %10s %10s %7s %7s" % (
        "pool", "phase", "GB/s", "GB/s sum", "busy%", "p50 us", "p99 us", "%ceil",
        "errors"))
    for r in doc["results"]:
        out.append("%-6s %-16s %9.2f %9.2f %7.1f %10s %10s %7s %7d" % (
            r.get("pool") or "-", r["phase"], r["gbps"] or 0, r.get("gbps_sum") or 0,
            r.get("all_busy_pct") or 0, r["p50_us"], r["p99_us"],
            "%.1f%%" % r["pct_of_ceiling"] if r.get("pct_of_ceiling") else "-", r["errors"]))
    for ph, v in sorted(doc.get("locality", {}).items()):
        out.append("locality %s: %s" % (ph, ", ".join("%s %.2f GB/s" % kv for kv in
                                                      sorted(v.items()))))
    for n in doc.get("notes", []):
        out.append("NOTE: " + n)
    for ch in doc.get("checks", []):
        out.append("[%s] %s%s" % (ch["status"], ch["name"],
                                  ": " + ch["detail"] if ch["detail"] else ""))
    out.append("result: %s" % ("PASS" if doc.get("ok") else "FAIL"))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
