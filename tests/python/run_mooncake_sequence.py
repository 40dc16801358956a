"""Run the Mooncake facade sequence (mooncake_sequence.py) on one side and print the results.

  python tests/python/run_mooncake_sequence.py mooncake            # starts its own mooncake_master
  PYTHONPATH=build/python python tests/python/run_mooncake_sequence.py egmstore   # build/bin/egmstore
  python tests/python/run_mooncake_sequence.py mooncake --master 127.0.0.1:50051   # existing master
  ... --out FILE   writes the results as Python literals (read back with ast.literal_eval)

The differential test (test_mooncake_diff.py) runs this file in a child process per side,
so that a crash in either implementation is reported instead of killing pytest, and
so that Mooncake's process-wide state never meets egmstore's. The master helpers below
are shared with the test.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mooncake_sequence  # noqa: E402
import mooncake_surface_sequence  # noqa: E402

# Read lease used on both masters: far longer than the sequence takes, so "remove right
# after a read" is always refused and nothing depends on timing.
LEASE_TTL_MS = 600000
START_TIMEOUT_S = 30.0

MOONCAKE_PACKAGE = "mooncake-transfer-engine-non-cuda"
MOONCAKE_INSTALL = ("install Mooncake's wheel (pip package %s, pinned in python/requirements-mooncake.txt; "
                    "it needs the Debian package libibverbs1): run scripts/install-deps.sh, which puts it "
                    "into .venv, or pip install -r python/requirements-mooncake.txt" % MOONCAKE_PACKAGE)


_given_ports = set()


def free_port():
    """A port free now and not handed out before by this process (the kernel may give a port
    bound and closed again to the next bind(0): two servers would then get one port)."""
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port not in _given_ports:
            _given_ports.add(port)
            return port


def wait_port(port, proc, timeout=START_TIMEOUT_S):
    """Bounded wait until 127.0.0.1:port accepts; False if proc exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def stop(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def find_mooncake_master():
    """mooncake_master next to this python (venv bin), on PATH, or in the mooncake package."""
    cand = os.path.join(os.path.dirname(sys.executable), "mooncake_master")
    if os.access(cand, os.X_OK):
        return cand
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


def start_mooncake_master(binary, log_path, lease_ttl_ms=LEASE_TTL_MS, metrics_port=None):
    """Start mooncake_master on free ports (its admin HTTP on metrics_port when given);
    return (proc, "127.0.0.1:port") or raise RuntimeError."""
    port = free_port()
    args = [
        binary,
        "--rpc_port", str(port),
        "--port", str(port),
        "--metrics_port", str(metrics_port or free_port()),
        "--http_metadata_server_port", str(free_port()),
        "--default_kv_lease_ttl", str(lease_ttl_ms),
    ]
    log = open(log_path, "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    if not wait_port(port, proc):
        stop(proc)
        raise RuntimeError("mooncake_master did not start (%s); log: %s" % (" ".join(args), log_path))
    return proc, "127.0.0.1:%d" % port


def wait_line(path, prefix, proc, timeout=START_TIMEOUT_S):
    """Bounded wait until the file at path has a line starting with prefix; that line, or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, "r", errors="replace") as f:
            for line in f:
                if line.startswith(prefix):
                    return line.strip()
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def start_egmstore(binary, log_dir, lease_ttl_ms=LEASE_TTL_MS, capacity="256MiB"):
    """Start an egmstore master (on a port it picks) and one provider; return ([procs], "host:port")."""
    mlog_path = os.path.join(log_dir, "egm-master.log")
    with open(mlog_path, "wb") as log:
        master = subprocess.Popen(
            [binary, "master", "--port", "0", "--listen-address", "127.0.0.1",
             "--default-kv-lease-ttl", str(lease_ttl_ms)],
            stdout=log, stderr=subprocess.STDOUT)
    line = wait_line(mlog_path, "egmstore master listening on ", master)
    if line is None:
        stop(master)
        raise RuntimeError("egmstore master did not start; log: " + mlog_path)
    addr = line.rsplit(" ", 1)[1]
    plog_path = os.path.join(log_dir, "egm-provider.log")
    with open(plog_path, "wb") as log:
        provider = subprocess.Popen(
            [binary, "provider", "--master", addr, "--global-segment-size", capacity,
             "--local-hostname", "127.0.0.1"],
            stdout=log, stderr=subprocess.STDOUT)
    if wait_line(plog_path, "egmstore provider ready", provider) is None:
        stop(provider)
        stop(master)
        raise RuntimeError("egmstore provider did not become ready; log: " + plog_path)
    return [provider, master], addr


def find_egmstore_bin():
    """$EGMSTORE_BIN, the CLI of the build the egmstore package was imported from, or PATH."""
    env = os.environ.get("EGMSTORE_BIN")
    if env:
        return env
    try:
        import egmstore

        # <build>/python/egmstore/__init__.py -> <build>/bin/egmstore
        build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(egmstore.__file__))))
        cand = os.path.join(build, "bin", "egmstore")
        if os.access(cand, os.X_OK):
            return cand
    except ImportError:
        pass
    return shutil.which("egmstore")


def store_module(side):
    if side == "mooncake":
        import mooncake.store as module
    else:
        import egmstore.mooncake as module
    return module


def store_classes(side):
    if side == "mooncake":
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    else:
        from egmstore.mooncake import MooncakeDistributedStore, ReplicateConfig
    return MooncakeDistributedStore, ReplicateConfig


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("side", choices=["mooncake", "egmstore"])
    ap.add_argument("--master", help="use this running master (host:port) instead of starting one")
    ap.add_argument("--egmstore-bin", help="egmstore CLI (to start master + provider)")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--out", help="write the results here as Python literals")
    ap.add_argument("--trace", help="append each call and its result here as it happens")
    ap.add_argument("--sequence", choices=["base", "surface"], default="base",
                    help="base: mooncake_sequence.py (issue 5's calls); surface: "
                         "mooncake_surface_sequence.py (the rest of the engines' calls)")
    args = ap.parse_args()

    log_dir = args.log_dir or os.path.join("/tmp", "mooncake-seq-%d" % os.getpid())
    os.makedirs(log_dir, exist_ok=True)
    procs = []
    try:
        addr = args.master
        if addr is None and args.side == "mooncake":
            binary = find_mooncake_master()
            if binary is None:
                sys.exit("mooncake_master not found: " + MOONCAKE_INSTALL)
            proc, addr = start_mooncake_master(binary, os.path.join(log_dir, "mooncake-master.log"))
            procs.append(proc)
        elif addr is None:
            binary = args.egmstore_bin or find_egmstore_bin()
            if not binary:
                sys.exit("egmstore CLI not found: pass --egmstore-bin or set EGMSTORE_BIN")
            procs, addr = start_egmstore(binary, log_dir)
        store_cls, config_cls = store_classes(args.side)
        trace = open(args.trace, "a") if args.trace else None
        skip = mooncake_sequence.MOONCAKE_CRASHES_AFTER_CLOSE if args.side == "mooncake" else None
        if args.sequence == "surface":
            results = mooncake_surface_sequence.run_surface_sequence(
                store_cls(), store_module(args.side), addr, trace=trace, new_store=store_cls,
                after_close=args.side == "egmstore")
        else:
            results = mooncake_sequence.run_sequence(store_cls(), mooncake_sequence.ctypes_alloc,
                                                     addr, config_cls, trace=trace, skip=skip,
                                                     new_store=store_cls)
        # flush our own writes before Mooncake's glog output interleaves
        text = "[\n" + "".join("    %r,\n" % (item,) for item in results) + "]\n"
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        else:
            width = max(len(label) for label, _ in results)
            for label, value in results:
                print("%-*s  %r" % (width, label, value))
        sys.stdout.flush()
    finally:
        for p in procs:
            stop(p)
    # Mooncake's client threads may hang at interpreter exit after close(); the results are out.
    os._exit(0)


if __name__ == "__main__":
    main()
