"""Differential test: egmstore.mooncake.MooncakeDistributedStore against the real Mooncake.

One fixed sequence of calls (mooncake_sequence.py) runs against a real mooncake_master
with Mooncake's own MooncakeDistributedStore, and against an egmstore master + provider
with egmstore's facade; the results are compared call by call. A difference fails the
test unless ALLOWED_DIFFERENCES names the call with the reason (docs/mooncake-compat.md
lists the same ones). Each side runs in a child process (run_mooncake_sequence.py) so a
crash in either implementation is reported with the call it happened in.

Mooncake is a dependency of the suite (python/requirements-mooncake.txt, installed into .venv
by scripts/install-deps.sh): the test FAILS, saying what to install, when the `mooncake` module
is not importable or its mooncake_master cannot be found or started, and when the egmstore
Python package or CLI is missing. It never skips: a skip would read as a pass in `make test`.
"""

import ast
import inspect
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mooncake_sequence  # noqa: E402
import mooncake_surface_sequence  # noqa: E402
import run_mooncake_sequence as runner  # noqa: E402

MOONCAKE_PACKAGE = runner.MOONCAKE_PACKAGE
COMPARED_VERSION = "0.3.13.post1"
SEQUENCE_TIMEOUT_S = 300

# label -> why egmstore's answer legitimately differs from Mooncake's. Keep in step with
# docs/mooncake-compat.md. An entry whose call now matches fails the test (stale entry).
ALLOWED_DIFFERENCES = {
    "batch_get_into_multi_buffers.mixed":
        "a 2-byte object read into two 4-byte buffers: egmstore fills the parts in order and answers "
        "2 (as get_into does with a larger buffer); Mooncake answers -800 (TRANSFER_FAIL) unless "
        "the buffers add up to exactly the object's size",
    "batch_get_into_multi_buffers.mixed.matches":
        "follows from batch_get_into_multi_buffers.mixed: Mooncake leaves the buffers untouched",
    "put_from.zero_size":
        "egmstore refuses an empty object with -600 (INVALID_PARAMS) from every put form, as "
        "Mooncake's put(key, b'') does; Mooncake's put_from of 0 bytes answers 0 and stores nothing",
    "put_parts.no_parts":
        "as put_from.zero_size: egmstore -600; Mooncake 0 and stores nothing",
    "put_from.unregistered":
        "egmstore's zero-copy calls need registered memory (-600, INVALID_PARAMS, naming the "
        "buffer); Mooncake's tcp transport copies from unregistered memory too",
    "remove.unregistered":
        "follows from put_from.unregistered: egmstore stored nothing (-704)",
    "get_into.unregistered":
        "as put_from.unregistered: egmstore -600; Mooncake over tcp copies into unregistered memory",
    "get_into.unregistered.matches":
        "follows from get_into.unregistered",
    "invalid_key.long.put":
        "a key over 4096 bytes: egmstore's keys have 1..4096 bytes (EGM_KEY_MAX, carried in its "
        "RPC frames), so the put answers -600 (INVALID_PARAMS) as for an empty key; Mooncake "
        "0.3.13.post1 stores it",
    "invalid_key.long.is_exist":
        "follows from invalid_key.long.put: a key egmstore cannot store is never found (0)",
    "invalid_key.long.remove.force":
        "follows from invalid_key.long.put: nothing to remove on egmstore (-704)",
    "put.replica_num_17":
        "egmstore's master places at most 16 replicas (1..16, as its replica_num key), so 17 "
        "answers -600 (INVALID_PARAMS, as both answer replica_num 0) with an error log; "
        "Mooncake 0.3.13.post1 accepts it",
    "batch_put_from.replica_num_17":
        "as put.replica_num_17: -600 for every key",
    "batch_is_exist.replica_num_17":
        "follows from put.replica_num_17: egmstore stored neither key",
    "batch_remove.replica_num_17":
        "follows from put.replica_num_17: nothing to remove on egmstore (-704)",
    "put_from.after_close":
        "egmstore answers -1010 (UNAVAILABLE_IN_CURRENT_STATUS) to every call after close(); "
        "Mooncake answers -600 here because close() dropped the buffer's registration "
        "(and crashes on most other calls after close)",
}

# The same for mooncake_surface_sequence.py (test_surface_matches_mooncake).
ALLOWED_SURFACE_DIFFERENCES = {
    "rc.ctor.kwargs":
        "egmstore's ReplicateConfig() also takes its fields as keyword arguments; Mooncake's "
        "constructor takes none (TypeError)",
    "get_batch.empty":
        "get_batch([]): egmstore answers [] (one entry per key); Mooncake 0.3.13.post1 answers [b'']",
    "put_from_with_metadata.no_data.is_exist":
        "put_from_with_metadata with 0 bytes of data and 28 of metadata: both answer 0, but "
        "Mooncake stores nothing and egmstore stores the metadata (the concatenation)",
    "put_from_with_metadata.empty_key":
        "the empty key: egmstore -600 (INVALID_PARAMS), as every put; Mooncake 0.3.13.post1 "
        "answers +600 here (the code's sign lost)",
    "put_from_with_metadata.replica_num_0":
        "replica_num 0: egmstore -600, as every put; Mooncake 0.3.13.post1 answers +600 here",
    "put_from_with_metadata.unregistered":
        "metadata in unregistered memory: egmstore's zero-copy calls need registered memory "
        "(-600); Mooncake's tcp transport copies from any address",
    "put_from_with_metadata.unregistered.is_exist":
        "follows from put_from_with_metadata.unregistered",
    "batch_get_replica_desc.endpoint":
        "egmstore's replica descriptors carry the object's size but no transport endpoint or "
        "buffer address: the client does not see where the master placed the object",
}

# Mooncake crashes on these calls after close() (see mooncake_sequence.AFTER_CLOSE_CALLS),
# so there is nothing to compare; egmstore must answer an error instead.
AFTER_CLOSE_LABELS = [label for label, _, _ in mooncake_sequence.AFTER_CLOSE_CALLS]


def mooncake_version():
    try:
        from importlib.metadata import version

        return version(MOONCAKE_PACKAGE)
    except Exception:
        return "unknown"


@pytest.fixture
def mooncake_master(tmp_path):
    """A fresh mooncake_master per test (the sequence's counts assume an empty store)."""
    why = None
    try:
        import mooncake.store  # noqa: F401
    except Exception as exc:  # ImportError, or a missing system library (libibverbs)
        why = "%s: %s" % (type(exc).__name__, exc)
    if why is not None:
        pytest.fail("Mooncake not importable by %s (module 'mooncake.store'): %s; %s"
                    % (sys.executable, why, runner.MOONCAKE_INSTALL), pytrace=False)
    binary = runner.find_mooncake_master()
    if binary is None:
        pytest.fail("mooncake_master not found next to %s, on PATH or in the mooncake package; %s"
                    % (sys.executable, runner.MOONCAKE_INSTALL), pytrace=False)
    log = str(tmp_path / "mooncake-master.log")
    try:
        proc, addr = runner.start_mooncake_master(binary, log)
    except RuntimeError as exc:
        pytest.fail("Mooncake master could not start: %s" % exc, pytrace=False)
    yield addr
    runner.stop(proc)


@pytest.fixture
def egmstore_cluster(make_cluster):
    """An egmstore master (same read lease as the Mooncake master) and one provider, from
    conftest.py's Cluster (the binary is ${EGM_BUILD:-build}/bin/egmstore)."""
    why = None
    try:
        import egmstore.mooncake  # noqa: F401
    except Exception as exc:
        why = "%s: %s" % (type(exc).__name__, exc)
    if why is not None:
        pytest.fail("egmstore Python package not importable (module 'egmstore.mooncake'; build it and "
                    "put <build>/python on PYTHONPATH): %s" % why, pytrace=False)
    binary = os.path.join(os.environ.get("EGM_BUILD", "build"), "bin", "egmstore")
    if not os.access(binary, os.X_OK):
        pytest.fail("no egmstore binary at %s (set EGM_BUILD to the build folder)" % binary, pytrace=False)
    cluster = make_cluster(lease_ttl_ms=runner.LEASE_TTL_MS)
    return cluster.master_addr


def run_side(side, addr, tmp_path, sequence="base"):
    out = tmp_path / (side + "." + sequence + ".results")
    trace = tmp_path / (side + "." + sequence + ".trace")
    cmd = [sys.executable, os.path.join(HERE, "run_mooncake_sequence.py"), side,
           "--master", addr, "--out", str(out), "--trace", str(trace), "--log-dir", str(tmp_path),
           "--sequence", sequence]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SEQUENCE_TIMEOUT_S)
    if proc.returncode != 0 or not out.exists():
        done = trace.read_text() if trace.exists() else ""
        last = done.rstrip("\n").splitlines()[-1:] or ["(no call made)"]
        pytest.fail("%s side exited with %d during call %r\n--- trace ---\n%s\n--- stderr (tail) ---\n%s"
                    % (side, proc.returncode, last[0], done[-4000:], proc.stderr[-4000:]))
    return ast.literal_eval(out.read_text())


def fmt(value, width=46):
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def table(rows, header=("call", "mooncake", "egmstore", "note")):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def after_close_ok(value):
    """egmstore's answer to a call after close: an error code (or list of them), not a crash."""
    if isinstance(value, int):
        return value < 0
    if isinstance(value, list):
        return all(isinstance(v, int) and v < 0 for v in value)
    return isinstance(value, tuple) and value[0] == "str"  # get_hostname: any string


def compare(mc, egm, allowed=None, egmstore_only=()):
    """Rows of (label, mooncake, egmstore, problem) for every call that is not as expected.
    egmstore_only: labels made on the egmstore side only (checked by the caller)."""
    allowed = ALLOWED_DIFFERENCES if allowed is None else allowed
    mc_map, egm_map = dict(mc), dict(egm)
    rows = []
    for label in list(dict.fromkeys([l for l, _ in mc] + [l for l, _ in egm])):
        if label in egmstore_only:
            continue
        if label not in mc_map or label not in egm_map:
            rows.append((label, fmt(mc_map.get(label, "(not called)")), fmt(egm_map.get(label, "(not called)")),
                         "sequence stopped early on one side"))
            continue
        a, b = mc_map[label], egm_map[label]
        if label in AFTER_CLOSE_LABELS:
            if not after_close_ok(b):
                rows.append((label, "(crashes)", fmt(b), "egmstore must answer an error after close"))
            continue
        if a == b and label in allowed:
            rows.append((label, fmt(a), fmt(b), "stale ALLOWED_DIFFERENCES entry: now matches; remove it "
                         "(and from docs/mooncake-compat.md)"))
        elif a != b and label not in allowed:
            rows.append((label, fmt(a), fmt(b), "MISMATCH"))
    return rows


def test_sequence_matches_mooncake(mooncake_master, egmstore_cluster, tmp_path):
    mc = run_side("mooncake", mooncake_master, tmp_path)
    egm = run_side("egmstore", egmstore_cluster, tmp_path)
    rows = compare(mc, egm)
    allowed = [(l, fmt(dict(mc).get(l)), fmt(dict(egm).get(l)), why)
               for l, why in ALLOWED_DIFFERENCES.items() if dict(mc).get(l) != dict(egm).get(l)]
    report = "compared %d calls against %s %s" % (len(mc), MOONCAKE_PACKAGE, mooncake_version())
    if allowed:
        report += "\nallowed differences:\n" + table(allowed)
    print(report)
    assert not rows, ("%d call(s) differ from Mooncake without an ALLOWED_DIFFERENCES entry "
                      "(%d allowed differences not shown; see the captured stdout):\n%s"
                      % (len(rows), len(allowed), table(rows)))


def surface_after_close_ok(value):
    """egmstore's answer to a surface call after close: an error code, lists of them, None
    (no buffer), b"" (get_batch) or [] (no replica descriptors)."""
    if value is None or value == [] or value == ("bytes", b""):
        return True
    if isinstance(value, list):
        return all(surface_after_close_ok(v) for v in value)
    return isinstance(value, int) and value < 0


def test_surface_matches_mooncake(mooncake_master, egmstore_cluster, tmp_path):
    """mooncake_surface_sequence.py: the calls beyond issue 5's (buffers, batches of bytes,
    ranged reads, get/put sessions, upserts, replica descriptors, ReplicateConfig's 0.3.13
    fields and enums, setup's dict aliases, bind_to_numa_node) against both."""
    mc = run_side("mooncake", mooncake_master, tmp_path, "surface")
    egm = run_side("egmstore", egmstore_cluster, tmp_path, "surface")
    after_close = [label for label, _, _ in mooncake_surface_sequence.AFTER_CLOSE_CALLS]
    rows = compare(mc, egm, ALLOWED_SURFACE_DIFFERENCES, egmstore_only=after_close)
    egm_map = dict(egm)
    for label in after_close:
        if not surface_after_close_ok(egm_map.get(label, "(not called)")):
            rows.append((label, "(not called)", fmt(egm_map.get(label, "(not called)")),
                         "egmstore must answer an error after close"))
    allowed = [(l, fmt(dict(mc).get(l)), fmt(dict(egm).get(l)), why)
               for l, why in ALLOWED_SURFACE_DIFFERENCES.items() if dict(mc).get(l) != dict(egm).get(l)]
    report = "compared %d calls against %s %s" % (len(mc), MOONCAKE_PACKAGE, mooncake_version())
    if allowed:
        report += "\nallowed differences:\n" + table(allowed)
    print(report)
    assert len(mc) > 150, "the surface sequence stopped early on Mooncake's side"
    assert not rows, ("%d call(s) differ from Mooncake without an ALLOWED_SURFACE_DIFFERENCES "
                      "entry:\n%s" % (len(rows), table(rows)))


# Mooncake 0.3.13.post1's MooncakeDistributedStore methods the facade does not offer, and why
# (docs/mooncake-compat.md). A method Mooncake gains, or one the facade gains, fails
# test_signatures_match_mooncake until it is listed here or offered with the same signature.
NOT_OFFERED = {
    **{name: "tensor calls (PyTorch objects): no engine's store path uses them" for name in (
        "batch_get_tensor", "batch_get_tensor_into", "batch_get_tensor_into_cuda",
        "batch_get_tensor_with_parallelism", "batch_get_tensor_with_parallelism_into",
        "batch_get_tensor_with_tp", "batch_get_tensor_with_tp_into", "batch_pub_tensor",
        "batch_pub_tensor_with_tp", "batch_put_tensor", "batch_put_tensor_from",
        "batch_put_tensor_with_parallelism", "batch_put_tensor_with_parallelism_from",
        "batch_put_tensor_with_tp", "batch_put_tensor_with_tp_from", "batch_upsert_pub_tensor",
        "batch_upsert_tensor", "batch_upsert_tensor_from", "batch_upsert_tensor_with_parallelism",
        "batch_upsert_tensor_with_parallelism_from", "get_tensor", "get_tensor_into",
        "get_tensor_into_cuda", "get_tensor_with_parallelism", "get_tensor_with_parallelism_into",
        "get_tensor_with_tp", "get_tensor_with_tp_into", "load_tensor_from_safetensor",
        "pub_tensor", "pub_tensor_with_tp", "put_tensor", "put_tensor_from",
        "put_tensor_with_parallelism", "put_tensor_with_parallelism_from", "put_tensor_with_tp",
        "put_tensor_with_tp_from", "save_tensor_to_safetensor", "upsert_pub_tensor",
        "upsert_tensor", "upsert_tensor_from", "upsert_tensor_with_parallelism",
        "upsert_tensor_with_parallelism_from")},
    **{name: "segment management: egmstore's capacity is global_segment_size and providers"
       for name in ("allocate_and_mount_segment", "mount_segment", "unmount_segment",
                    "unmount_and_free_segment", "alloc_from_mem_pool", "setup_dummy",
                    "init_all")},
    **{name: "replica copy/move tasks and clearing: the master places replicas"
       for name in ("create_copy_task", "create_move_task", "query_task", "batch_replica_clear")},
    "remove_by_regex": "egmstore's client cannot list keys",
}


def _split_top(text):
    """Split at commas outside brackets and angle brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def mooncake_params(doc_line):
    """[(name, or None for pybind11's unnamed argN; has a default; kind)] from a pybind11
    signature line; kind is "arg", "*args" or "kwonly" (after *args)."""
    inner = doc_line[doc_line.index("(") + 1:doc_line.rindex(") ->")]
    out, kind = [], "arg"
    for part in _split_top(inner)[1:]:  # without self
        name = part.split(":", 1)[0].strip()
        if name.startswith("*"):
            out.append((None, False, "*args"))
            kind = "kwonly"
        else:
            out.append((None if re.fullmatch(r"arg\d+", name) else name, "=" in part, kind))
    return out


def facade_params(fn):
    kinds = {inspect.Parameter.VAR_POSITIONAL: "*args", inspect.Parameter.KEYWORD_ONLY: "kwonly"}
    return [(p.name, p.default is not p.empty, kinds.get(p.kind, "arg"))
            for p in list(inspect.signature(fn).parameters.values())[1:]]  # without self


def test_signatures_match_mooncake(tmp_path):
    """Every MooncakeDistributedStore method of Mooncake 0.3.13.post1 is offered with the same
    parameters (names, order, which have defaults) or listed in NOT_OFFERED with the reason."""
    script = ("import json, mooncake.store as s\n"
              "M = s.MooncakeDistributedStore\n"
              "print(json.dumps({n: (getattr(M, n).__doc__ or '').splitlines()[0] "
              "for n in dir(M) if not n.startswith('_')}))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        pytest.fail("Mooncake not importable by %s: %s; %s"
                    % (sys.executable, proc.stderr[-2000:], runner.MOONCAKE_INSTALL), pytrace=False)
    docs = json.loads(proc.stdout.strip().splitlines()[-1])
    from egmstore.mooncake import MooncakeDistributedStore as Facade

    problems = []
    for name, doc in sorted(docs.items()):
        if name in NOT_OFFERED:
            if hasattr(Facade, name):
                problems.append("%s: offered now; remove it from NOT_OFFERED" % name)
            continue
        if not hasattr(Facade, name):
            problems.append("%s: missing (offer it, or list it in NOT_OFFERED)" % name)
            continue
        if name == "setup":  # two overloads; test_facade.py checks both forms
            continue
        want, got = mooncake_params(doc), facade_params(getattr(Facade, name))
        same = len(want) == len(got) and all(
            (w[0] is None or w[0] == g[0]) and w[1:] == g[1:] for w, g in zip(want, got))
        if not same:
            problems.append("%s: Mooncake %s, egmstore %s" % (name, want, got))
    for name in NOT_OFFERED:
        if name not in docs:
            problems.append("%s: in NOT_OFFERED but not a Mooncake method" % name)
    assert not problems, "\n".join(problems)


def test_mooncake_sequence_runs_on_mooncake(mooncake_master, tmp_path):
    """The sequence itself against Mooncake alone: guards the expectations the facade is held to."""
    mc = dict(run_side("mooncake", mooncake_master, tmp_path))
    # A few anchors from Mooncake's documented conventions, so a change of Mooncake version
    # that moves them shows up here rather than as a confusing egmstore mismatch.
    assert mc["setup"] == 0
    assert mc["get.missing"] == ("bytes", b"")
    assert mc["get_size.missing"] == -704
    assert mc["remove.after_get"] == -706
    assert mc["remove.after_get.force"] == 0
    assert mc["remove.unread"] == 0
    assert mc["health_check.after_close"] == 1
    for name, size in mooncake_sequence.SIZES:
        assert mc["get." + name + ".matches"] == 1
        assert mc["get_into.exact." + name] == size
