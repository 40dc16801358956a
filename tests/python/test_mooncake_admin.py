"""Differential test of the master's Mooncake admin endpoints: /query_key, /batch_query_keys
and /metrics/summary of a real mooncake_master (0.3.13.post1, as test_mooncake_diff.py) and of
egmstore's master, after the same objects were stored through each side's
MooncakeDistributedStore (run_mooncake_admin.py, one child process per side).

JSON answers must be equal once what names a place is set aside: a replica's
buffer_address_ (Mooncake: an address in the provider; egmstore: the offset in its segment)
and transport_endpoint_ (each side's own), whose types are compared instead; egmstore's extra
segment_name_ is checked to be there and dropped. /metrics/summary is compared by its
shape: the sections Mooncake has that egmstore keeps, in order, their number formats, the
key count and the capacity. Like test_mooncake_diff.py, it fails (never skips) when Mooncake
is missing. docs/master.md lists the differences named in ALLOWED_DIFFERENCES.
"""

import ast
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run_mooncake_sequence as runner  # noqa: E402

TIMEOUT_S = 120

# label -> why egmstore's answer differs from Mooncake's (docs/master.md says the same).
ALLOWED_DIFFERENCES = {
    "query_key.encoded":
        "egmstore percent-decodes /query_key's key as every query value (and as Mooncake's own "
        "/batch_query_keys does); Mooncake 0.3.13.post1 looks /query_key's key up as written, "
        "so adm%20c is not found there",
}

SUMMARY_PREFIX = "role=leader, state=serving, service_ready=true, master={"
SIZE = r"(\d+ B|\d+\.\d\d [KMGTPE]B)"
MEM = re.compile(r"^%s / %s( \(\d+\.\d%%\))?$" % (SIZE, SIZE))
RATE = re.compile(r"^(\w+)=(\d+\.\d\d)/(\d+\.\d\d)$")
# Mooncake's sections that egmstore writes too, in this order, first in the line.
SHARED_SECTIONS = ["Mem Storage", "NVMe-oF SSD", "SSD Storage", "Keys", "Clients",
                   "Requests (Success/Total per sec)"]
SHARED_REQUESTS = ["PutStart", "PutEnd", "PutRevoke", "Get", "Exist", "Del", "DelAll", "Ping"]


@pytest.fixture
def mooncake_admin(tmp_path):
    """A fresh mooncake_master whose admin HTTP port is known: (rpc address, http port)."""
    binary = runner.find_mooncake_master()
    if binary is None:
        pytest.fail("mooncake_master not found; %s" % runner.MOONCAKE_INSTALL, pytrace=False)
    http = runner.free_port()
    proc, addr = runner.start_mooncake_master(binary, str(tmp_path / "mooncake-master.log"),
                                              metrics_port=http)
    if not runner.wait_port(http, proc):
        runner.stop(proc)
        pytest.fail("mooncake_master's admin HTTP did not open port %d" % http, pytrace=False)
    yield addr, http
    runner.stop(proc)


def run_side(side, addr, http, tmp_path):
    out = tmp_path / (side + ".admin.results")
    cmd = [sys.executable, os.path.join(HERE, "run_mooncake_admin.py"), side, "--master", addr,
           "--http", str(http), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0 or not out.exists():
        pytest.fail("%s side exited with %d\n--- stderr (tail) ---\n%s"
                    % (side, proc.returncode, proc.stderr[-4000:]))
    return {label: (path, status, body) for label, path, status, body in ast.literal_eval(out.read_text())}


def normalize(value, side, problems, label):
    """The JSON with each replica's place replaced by its type (see the module's doc)."""
    if isinstance(value, dict):
        out = {k: normalize(v, side, problems, label) for k, v in value.items()}
        if "size_" in value:
            for field in ("buffer_address_", "transport_endpoint_"):
                out[field] = type(value.get(field)).__name__
            if side == "egmstore":
                if not isinstance(out.pop("segment_name_", None), str):
                    problems.append("%s: egmstore's replica has no segment_name_: %r" % (label, value))
        return out
    if isinstance(value, list):
        return [normalize(v, side, problems, label) for v in value]
    return value


def summary_parts(text):
    assert text.startswith(SUMMARY_PREFIX), text
    master = text[len(SUMMARY_PREFIX):].split("}", 1)[0]
    sections = []
    for part in master.split(" | "):
        title, _, value = part.partition(": ")
        sections.append((title, value))
    return sections


def check_summary(mc, egm):
    """Problems of egmstore's summary against Mooncake's shape; [] when none."""
    problems = []
    try:
        mc_sections, egm_sections = summary_parts(mc), summary_parts(egm.rstrip("\n"))
    except AssertionError as exc:
        return ["summary does not start with %r: %s" % (SUMMARY_PREFIX, exc)]
    mc_titles = [t for t, _ in mc_sections]
    egm_titles = [t for t, _ in egm_sections]
    if mc_titles[:len(SHARED_SECTIONS)] != SHARED_SECTIONS:
        problems.append("Mooncake's summary changed its sections: %r" % mc_titles)
    if egm_titles[:len(SHARED_SECTIONS)] != SHARED_SECTIONS:
        problems.append("egmstore's sections %r do not start with %r" % (egm_titles, SHARED_SECTIONS))
        return problems
    mc_map, egm_map = dict(mc_sections), dict(egm_sections)
    for side, m in (("mooncake", mc_map), ("egmstore", egm_map)):
        if not MEM.match(m["Mem Storage"]):
            problems.append("%s Mem Storage %r" % (side, m["Mem Storage"]))
    # same capacity (one 64 MiB segment each) and the same count of keys
    if mc_map["Mem Storage"].split(" / ")[1].split(" (")[0] != \
            egm_map["Mem Storage"].split(" / ")[1].split(" (")[0]:
        problems.append("capacity: %r vs %r" % (mc_map["Mem Storage"], egm_map["Mem Storage"]))
    for title in ("NVMe-oF SSD", "SSD Storage"):
        if egm_map[title] != mc_map[title]:
            problems.append("%s: %r vs %r" % (title, mc_map[title], egm_map[title]))
    if egm_map["Keys"] != mc_map["Keys"]:
        problems.append("Keys: %r vs %r" % (mc_map["Keys"], egm_map["Keys"]))
    rates = {}
    for side, m in (("mooncake", mc_map), ("egmstore", egm_map)):
        names = []
        for item in m["Requests (Success/Total per sec)"].split(", "):
            match = RATE.match(item)
            if not match:
                problems.append("%s request rate %r" % (side, item))
            else:
                names.append(match.group(1))
        rates[side] = names
    if rates["mooncake"][:len(SHARED_REQUESTS)] != SHARED_REQUESTS:
        problems.append("Mooncake's request names changed: %r" % rates["mooncake"])
    if rates["egmstore"][:len(SHARED_REQUESTS)] != SHARED_REQUESTS:
        problems.append("egmstore's request names %r" % rates["egmstore"])
    return problems


def test_admin_endpoints_match_mooncake(mooncake_admin, make_cluster, tmp_path):
    try:
        import egmstore.mooncake  # noqa: F401
    except Exception as exc:
        pytest.fail("egmstore Python package not importable: %s" % exc, pytrace=False)
    mc_addr, mc_http = mooncake_admin
    egm_http = runner.free_port()
    # No provider: the store's own 64 MiB segment is the capacity, as on Mooncake's side.
    cluster = make_cluster(providers=0, master_args=("--http-port", str(egm_http)))
    mc = run_side("mooncake", mc_addr, mc_http, tmp_path)
    egm = run_side("egmstore", cluster.master_addr, egm_http, tmp_path)

    problems = []
    rows = []
    for label in mc:
        path, mc_status, mc_body = mc[label]
        _, egm_status, egm_body = egm[label]
        if label == "summary":
            if mc_status != egm_status:
                problems.append("summary: status %d vs %d" % (mc_status, egm_status))
            problems += check_summary(mc_body, egm_body)
            continue
        try:
            a = (mc_status, normalize(json.loads(mc_body), "mooncake", problems, label))
            b = (egm_status, normalize(json.loads(egm_body), "egmstore", problems, label))
        except ValueError as exc:
            problems.append("%s: not JSON (%s): %r / %r" % (label, exc, mc_body, egm_body))
            continue
        if a == b and label in ALLOWED_DIFFERENCES:
            problems.append("%s: stale ALLOWED_DIFFERENCES entry: now matches" % label)
        elif a != b and label not in ALLOWED_DIFFERENCES:
            rows.append("%s %s\n  mooncake: %r\n  egmstore: %r" % (label, path, a, b))
    problems += rows
    assert not problems, "\n".join(problems)
