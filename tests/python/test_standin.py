"""egmstore standing in for Mooncake's `mooncake.store` (egmstore/_standin.py,
docs/mooncake-compat.md): each case runs a child interpreter of a fresh venv
(no Mooncake installed) whose site-packages holds the build's
egmstore_mooncake.pth, as an installed egmstore would, with the package on
PYTHONPATH; the switch is read when that interpreter starts."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

CHILD_TIMEOUT_S = 60
SWITCH = "EGMSTORE_AS_MOONCAKE"


def build_python_dir():
    return os.path.abspath(os.path.join(os.environ.get("EGM_BUILD", "build"), "python"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv without pip and without Mooncake; the .pth in its site-packages."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   timeout=CHILD_TIMEOUT_S)
    python = os.path.join(root, "bin", "python")
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], check=True, capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S).stdout.strip()
    pth = os.path.join(build_python_dir(), "egmstore_mooncake.pth")
    assert os.path.isfile(pth), f"the build has no {pth}"
    shutil.copy(pth, site_dir)
    return python


def run_child(python, code, switch=None, extra_path=(), cwd=None):
    """Runs code in a child (with `attempt`, below); its last stdout line is
    JSON. Returns (rc, result, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in (SWITCH, "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([build_python_dir(), *extra_path])
    if switch is not None:
        env[SWITCH] = switch
    proc = subprocess.run([python, "-c", ATTEMPT + textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else None
    return proc.returncode, result, proc.stderr


# attempt(statements) in a child: None, or [exception type, message].
ATTEMPT = """
import json, sys
def attempt(stmt):
    try:
        exec(stmt, {})
        return None
    except Exception as e:
        return [type(e).__name__, str(e)]
"""


def fake_mooncake(tmp_path, with_init=True):
    """A folder holding a `mooncake` package that plays the real one."""
    root = tmp_path / "fake"
    pkg = root / "mooncake"
    pkg.mkdir(parents=True)
    if with_init:
        (pkg / "__init__.py").write_text("WHO = 'real'\n")
    (pkg / "store.py").write_text("WHO = 'real store'\n")
    (pkg / "engine.py").write_text("WHO = 'real engine'\n")
    return str(root)


def test_switch_puts_and_gets_through_mooncake_store(venv, cluster):
    """The engine's own import, unchanged, gets egmstore's class and works
    against a real master and provider, with Mooncake's default protocol."""
    code = f"""
        import json, sys
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
        import mooncake, mooncake.store, egmstore.mooncake
        s = MooncakeDistributedStore()
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "rdma", "",
                     {cluster.master_addr!r})
        cfg = ReplicateConfig()
        cfg.replica_num = 1
        put = s.put("standin-key", b"from mooncake.store", cfg)
        got = s.get("standin-key").decode()
        # LMCache's default mode and vLLM's embedding cache's names, through the stand-in.
        from mooncake.store import ObjectDataType, SoftPinAction, bind_to_numa_node
        cfg.data_type = ObjectDataType.KVCACHE
        cfg.soft_pin_action = SoftPinAction.DISABLE
        parts = s.put_parts("standin-parts", b"m" * 28, b"data", config=cfg)
        bufs = s.batch_get_buffer(["standin-parts", "standin-none"])
        lm = [None if b is None else memoryview(b)[28:].tobytes().decode() for b in bufs]
        s.remove("standin-parts", True)
        print(json.dumps({{
            "same": MooncakeDistributedStore is egmstore.mooncake.MooncakeDistributedStore,
            "config_same": ReplicateConfig is egmstore.mooncake.ReplicateConfig,
            "module": MooncakeDistributedStore.__module__,
            "standin": getattr(mooncake, "__egmstore_standin__", None),
            "setup": rc, "put": put, "get": got, "exist": s.is_exist("standin-key"),
            "parts": parts, "lmcache": lm, "numa": callable(bind_to_numa_node),
            "transport": s.transport, "close": s.close()}}))
    """
    rc, result, err = run_child(venv, code, switch="1")
    assert rc == 0, err
    assert result == {"same": True, "config_same": True, "module": "egmstore.mooncake",
                      "standin": "egmstore", "setup": 0, "put": 0,
                      "get": "from mooncake.store", "exist": 1,
                      "parts": 0, "lmcache": ["data", None], "numa": True,
                      "transport": result["transport"], "close": 0}
    assert result["transport"] in ("nvlink", "shm")
    # Said once, at setup: Mooncake's protocol, the transport taken.
    lines = [line for line in err.splitlines() if "protocol 'rdma' is Mooncake's" in line]
    assert len(lines) == 1 and f"best {result['transport']}" in lines[0], err


@pytest.mark.parametrize("switch", [None, "", "0", "off"])
def test_without_the_switch_nothing_stands_in(venv, switch):
    """The control: the same venv without the switch has no mooncake, and the
    .pth does not load egmstore (for "off" it loads it and installs nothing)."""
    rc, result, err = run_child(venv, """
        r = attempt("import mooncake.store")
        print(json.dumps({"error": r, "loaded": "egmstore" in sys.modules}))
    """, switch=switch)
    assert rc == 0, err
    assert result["error"][0] == "ModuleNotFoundError"
    assert "mooncake" in result["error"][1] and "egmstore" not in result["error"][1]
    assert result["loaded"] == (switch == "off")


def test_switch_stands_in_for_allocator_and_names_itself_elsewhere(venv):
    rc, result, err = run_child(venv, """
        from mooncake.allocator import NVLinkAllocator, BarexAllocator, MemoryBackend
        import egmstore.mooncake_allocator as ours
        print(json.dumps({
            "same": NVLinkAllocator is ours.NVLinkAllocator,
            "backend": int(NVLinkAllocator.detect_mem_backend()),
            "unsupported": int(MemoryBackend.UNSUPPORTED),
            "get_allocator": attempt("from mooncake.allocator import BarexAllocator as B\\n"
                                     "B.get_allocator('cuda:0')"),
            "engine": attempt("import mooncake.engine"),
            # a probe for an optional module answers None, as for any missing module
            # (Mooncake's own tests' conftest.py probes so), and raises nothing
            "probe": attempt("import importlib.util\\n"
                             "assert importlib.util.find_spec('mooncake.engine') is None")}))
    """, switch="1")
    assert rc == 0, err
    assert result["same"] is True
    assert result["backend"] == result["unsupported"] == -2
    # Engines take an ImportError here as "no such allocator" and use their default pool.
    kind, text = result["get_allocator"]
    assert kind == "ImportError" and "BarexAllocator" in text and "egmstore" in text
    kind, text = result["engine"]
    assert kind == "ModuleNotFoundError" and "mooncake.engine" in text
    assert result["probe"] is None


def test_switch_refuses_when_the_real_mooncake_is_importable(venv, tmp_path):
    fake = fake_mooncake(tmp_path)
    rc, result, err = run_child(venv, """
        print(json.dumps({"store": attempt("import mooncake.store"),
                          "package": attempt("import mooncake"),
                          "loaded": [m for m in sys.modules if m.startswith("mooncake")]}))
    """, switch="1", extra_path=[fake])
    assert rc == 0, err
    for kind, text in (result["store"], result["package"]):
        assert kind == "ImportError"
        for needle in ("EGMSTORE_AS_MOONCAKE=1", "egmstore", "real Mooncake",
                       os.path.join(fake, "mooncake", "__init__.py"), "ambiguous",
                       "EGMSTORE_AS_MOONCAKE=force"):
            assert needle in text, (needle, text)
    assert result["loaded"] == []  # neither package was half-imported


def test_install_refuses_when_the_real_mooncake_is_importable(venv, tmp_path):
    fake = fake_mooncake(tmp_path)
    rc, result, err = run_child(venv, """
        import egmstore.mooncake
        refused = attempt("import egmstore.mooncake\\negmstore.mooncake.install()")
        import mooncake.store
        print(json.dumps({"refused": refused, "store": mooncake.store.WHO}))
    """, extra_path=[fake])
    assert rc == 0, err
    kind, text = result["refused"]
    assert kind == "RuntimeError"
    for needle in ("egmstore.mooncake.install()", "real Mooncake", "EGMSTORE_AS_MOONCAKE",
                   "install(force=True)"):
        assert needle in text, (needle, text)
    assert result["store"] == "real store"  # nothing changed


def test_install_stands_in_without_the_switch(venv):
    rc, result, err = run_child(venv, """
        import json
        import egmstore.mooncake
        egmstore.mooncake.install()
        egmstore.mooncake.install()  # twice: one finder
        import sys
        from mooncake.store import MooncakeDistributedStore
        from egmstore._standin import StandInFinder
        print(json.dumps({
            "same": MooncakeDistributedStore is egmstore.mooncake.MooncakeDistributedStore,
            "finders": sum(isinstance(f, StandInFinder) for f in sys.meta_path)}))
    """)
    assert rc == 0, err
    assert result == {"same": True, "finders": 1}


def test_force_shadows_only_the_modules_it_stands_in_for(venv, tmp_path):
    fake = fake_mooncake(tmp_path)
    rc, result, err = run_child(venv, """
        import json
        import mooncake, mooncake.store, mooncake.engine, egmstore.mooncake
        print(json.dumps({
            "package": mooncake.WHO, "engine": mooncake.engine.WHO,
            "same": mooncake.store.MooncakeDistributedStore
                    is egmstore.mooncake.MooncakeDistributedStore}))
    """, switch="force", extra_path=[fake])
    assert rc == 0, err
    assert result == {"package": "real", "engine": "real engine", "same": True}


def test_a_namespace_folder_is_not_the_real_mooncake(venv, tmp_path):
    """A `mooncake/` folder without __init__.py (a checkout's, in the current
    directory) is no installed Mooncake: no ambiguity."""
    fake = fake_mooncake(tmp_path, with_init=False)
    rc, result, err = run_child(venv, """
        import json
        import mooncake.store
        print(json.dumps({"standin": getattr(mooncake.store, "__egmstore_standin__", None)}))
    """, switch="1", cwd=fake)
    assert rc == 0, err
    assert result == {"standin": "egmstore.mooncake"}


def test_bad_switch_value_fails_the_import_naming_the_values(venv):
    rc, result, err = run_child(venv, """
        print(json.dumps({"error": attempt("import mooncake.store")}))
    """, switch="maybe")
    assert rc == 0, err
    kind, text = result["error"]
    assert kind == "ImportError"
    assert "EGMSTORE_AS_MOONCAKE='maybe'" in text and "force" in text and "1" in text
