"""The Mooncake facade against HA masters (docs/ha.md): a real etcd, two
`egmstore master --enable-ha` processes and a provider that follows the leader;
MooncakeDistributedStore.setup(..., master_server_addr="etcd://...") as
Mooncake's own HA form. Puts and gets work through the leader; after the
leader's SIGKILL the same store, without a new setup, stores and reads again
once the standby has taken over (bounded wait), and reads back what it stored
before (the state handover). etcd missing is an error: the
install script installs etcd-server."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import Daemon, egm_binary
from run_mooncake_sequence import free_port  # one port never handed out twice
from egmstore.mooncake import MooncakeDistributedStore

ETCD = os.environ.get("EGM_TEST_ETCD", "/usr/bin/etcd")
WAIT_S = 30.0


@pytest.fixture
def etcd(tmp_path):
    if not os.access(ETCD, os.X_OK):
        pytest.fail(f"{ETCD} is missing: scripts/install-deps.sh installs Debian's etcd-server")
    client, peer = free_port(), free_port()
    data = tempfile.mkdtemp(prefix="egm-etcd-")
    log = open(tmp_path / "etcd.log", "wb")
    proc = subprocess.Popen(
        [ETCD, "--name", "t", "--data-dir", data,
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"t=http://127.0.0.1:{peer}", "--log-level", "error"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=1) as r:
                if b"true" in r.read():
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"etcd did not become healthy; log {tmp_path / 'etcd.log'}")
        time.sleep(0.05)
    yield f"127.0.0.1:{client}"
    proc.kill()
    proc.wait()
    log.close()
    shutil.rmtree(data, ignore_errors=True)


def role(http_port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=2) as r:
            body = r.read().decode()
    except OSError:
        return ""
    return "leader" if '"role":"leader"' in body else "standby" if '"role":"standby"' in body else ""


def health_number(http_port, field):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=2) as r:
            body = json.loads(r.read().decode())
    except (OSError, ValueError):
        return -1
    return body.get(field, -1)


def wait_role(http_port, want):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if role(http_port) == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"master on http port {http_port} is not {want} after {WAIT_S} s")


def test_mooncake_store_follows_the_leader(etcd, tmp_path):
    binary = egm_binary()
    masters = []
    try:
        for i in range(2):
            http = free_port()
            masters.append((Daemon(
                [binary, "master", "--port", "0", "--listen-address", "127.0.0.1",
                 "--http-port", str(http), "--enable-ha", "true", "--etcd-endpoints", etcd,
                 "--ha-lease-ttl", "2"],
                "egmstore master listening on ", str(tmp_path / f"master{i}.log")), http))
            if i == 0:
                wait_role(http, "leader")
        wait_role(masters[1][1], "standby")
        # The standby holds the leader's state (docs/ha.md "State handover").
        deadline = time.monotonic() + WAIT_S
        while health_number(masters[0][1], "standbys_in_sync") != 1:
            assert time.monotonic() < deadline, f"no standby in sync after {WAIT_S} s"
            time.sleep(0.05)
        provider = Daemon([binary, "provider", "--master", f"etcd://{etcd}",
                           "--global-segment-size", "64MiB", "--local-hostname", "127.0.0.1"],
                          "egmstore provider ready", str(tmp_path / "provider.log"))
        masters.append((provider, None))

        store = MooncakeDistributedStore()
        # Mooncake's positional setup, its HA address form and its default protocol.
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "rdma", "",
                           f"etcd://{etcd}") == 0
        assert store.put("before", b"x" * 4096) == 0
        assert store.get("before") == b"x" * 4096

        masters[0][0].proc.kill()
        masters[0][0].proc.wait()
        killed = time.monotonic()
        rc = -1
        while rc != 0 and time.monotonic() - killed < WAIT_S:
            rc = store.put("after", b"y" * 4096)
            if rc != 0:
                time.sleep(0.05)
        assert rc == 0, f"no put succeeded within {WAIT_S} s of the leader's death (last {rc})"
        assert store.get("after") == b"y" * 4096
        assert role(masters[1][1]) == "leader"
        # Carried over to the new leader with the rest of the state.
        assert store.get("before") == b"x" * 4096
        store.close()
    finally:
        for d, _ in reversed(masters):
            d.stop()
