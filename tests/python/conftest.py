"""pytest fixtures: real `egmstore master` and `egmstore provider` processes on
loopback ports chosen by the kernel (`--port 0`, the master prints the port it
got), as tests/integration do. The binaries come from ${EGM_BUILD}/bin/egmstore
(ctest sets EGM_BUILD and PYTHONPATH=${EGM_BUILD}/python). Every wait is bounded."""

import ctypes
import itertools
import mmap
import os
import selectors
import signal
import subprocess
import threading
import time

import pytest

START_TIMEOUT_S = 30.0
# Read lease of every test master (ms): far longer than any test runs, so a
# "remove right after a read" is refused (HAS_LEASE) however slow the machine;
# the default (10 s) would make those results depend on timing.
LEASE_TTL_MS = 600000


def egm_binary():
    build = os.environ.get("EGM_BUILD", "build")
    path = os.path.join(build, "bin", "egmstore")
    if not os.access(path, os.X_OK):
        pytest.exit(f"no egmstore binary at {path} (set EGM_BUILD to the build folder)", 2)
    return path


class Daemon:
    """A child process whose stdout is read until its ready line, then drained
    into its log (so a full pipe never blocks it)."""

    def __init__(self, argv, ready, log_path, env=None):
        self.argv = argv
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log,
                                     stdin=subprocess.DEVNULL, env=env)
        self.ready_line = self._wait_line(ready)
        self._drain = threading.Thread(target=self._drain_stdout, daemon=True)
        self._drain.start()

    def _wait_line(self, prefix):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT_S
        buf = b""
        try:
            while time.monotonic() < deadline:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                for line in buf.split(b"\n")[:-1]:
                    text = line.decode(errors="replace")
                    if text.startswith(prefix):
                        return text
        finally:
            sel.close()
        self.stop()
        raise RuntimeError(f"{self.argv} did not print {prefix!r} within {START_TIMEOUT_S} s; "
                           f"stdout {buf[-2000:]!r}; log {self.log_path}")

    def _drain_stdout(self):
        try:
            for line in self.proc.stdout:
                self.log.write(line)
        except (ValueError, OSError):
            pass

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


def stop_process(pid, timeout_s=10.0):
    """SIGSTOP pid and wait until every one of its threads is stopped: kill()
    returns before a busy thread has noticed the signal, and a request it then
    handled would be answered. Bounded in time; resume with SIGCONT."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass  # a thread that just exited
        if states and all(state in "Tt" for state in states):
            return
        time.sleep(0.005)
    raise RuntimeError(f"process {pid} did not stop within {timeout_s} s")


class Cluster:
    """A master (read lease `lease_ttl_ms`) and `providers` providers of `segment`
    bytes each, started by `binary` (default: the build's egmstore) in `env` (default:
    this process's environment)."""

    def __init__(self, log_dir, providers=1, segment="256MiB", master_args=(),
                 lease_ttl_ms=LEASE_TTL_MS, binary=None, env=None):
        binary = binary or egm_binary()
        self.daemons = []
        self.master = Daemon([binary, "master", "--port", "0", "--listen-address", "127.0.0.1",
                              "--default-kv-lease-ttl", str(lease_ttl_ms), *master_args],
                             "egmstore master listening on ", os.path.join(log_dir, "master.log"),
                             env)
        self.daemons.append(self.master)
        self.port = int(self.master.ready_line.rsplit(":", 1)[1])
        self.master_addr = f"127.0.0.1:{self.port}"
        try:
            for i in range(providers):
                self.daemons.append(Daemon(
                    [binary, "provider", "--master", self.master_addr, "--global-segment-size",
                     segment, "--local-hostname", "127.0.0.1"],
                    "egmstore provider ready", os.path.join(log_dir, f"provider{i}.log"), env))
        except Exception:
            self.stop()
            raise

    def stop(self):
        for d in reversed(self.daemons):
            d.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """One master and one provider (256 MiB) shared by the session's tests;
    each test uses keys of its own (fixture `key`)."""
    c = Cluster(str(tmp_path_factory.mktemp("cluster")))
    yield c
    c.stop()


@pytest.fixture
def make_cluster(tmp_path):
    """Factory for a dedicated cluster (stopped at the end of the test)."""
    made = []

    def make(**kwargs):
        log_dir = tmp_path / f"cluster{len(made)}"
        log_dir.mkdir()
        c = Cluster(str(log_dir), **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


_counter = itertools.count()


@pytest.fixture
def key(request):
    """key("a") -> a key unique to this test (the session cluster is shared)."""
    prefix = f"{request.node.name}-{next(_counter)}"
    return lambda name="k": f"{prefix}/{name}"


class Buffer:
    """Host memory at a stable address (a ctypes array) for the zero-copy calls."""

    def __init__(self, size):
        self.size = size
        self.mem = (ctypes.c_char * max(size, 1))()
        self.ptr = ctypes.addressof(self.mem)

    def write(self, offset, data):
        ctypes.memmove(self.ptr + offset, data, len(data))

    def read(self, offset, size):
        return ctypes.string_at(self.ptr + offset, size)


@pytest.fixture
def buffer():
    """buffer(size) -> a Buffer; kept alive until the end of the test."""
    keep = []

    def make(size):
        b = Buffer(size)
        keep.append(b)
        return b

    yield make


def unmapped_address():
    """The address of a page this process mapped and unmapped again: nothing
    is there (a zero-copy call into it would kill the process)."""
    m = mmap.mmap(-1, mmap.PAGESIZE)
    view = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(view)
    del view
    m.close()
    return addr


class ReadOnlyPage:
    """A page of `data` (then zeros) this process may read but not write
    (mprotect PROT_READ): a zero-copy get into it would kill the process."""

    def __init__(self, data):
        self._map = mmap.mmap(-1, mmap.PAGESIZE)
        self._map.write(data)
        view = ctypes.c_char.from_buffer(self._map)
        self.addr = ctypes.addressof(view)
        del view
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if libc.mprotect(self.addr, mmap.PAGESIZE, mmap.PROT_READ) != 0:
            raise OSError(ctypes.get_errno(), "mprotect")
        self.size = mmap.PAGESIZE

    def close(self):
        self._map.close()


def pattern(size, seed=0):
    """Deterministic non-repeating-looking bytes of `size`."""
    block = bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(min(size, 65536)))
    reps, rest = divmod(size, len(block)) if block else (0, 0)
    return block * reps + block[:rest]


def pytest_terminal_summary(terminalreporter):
    """One line "EGM-SKIP: <test>: <reason>" per skipped test: a skip leaves pytest's exit status
    0, so scripts/test-skips.py lists these at the end of `make test` instead."""
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        if reason.startswith("Skipped: "):
            reason = reason[len("Skipped: "):]
        terminalreporter.write_line(f"EGM-SKIP: {rep.nodeid}: {reason}")
