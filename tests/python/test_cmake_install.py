"""`cmake --install` (CMakeLists.txt, docs/install.md): the build installed into a fresh prefix
(not the one configured), then a C program and a C++ one (tests/python/cmake_install/) built
outside the project from that prefix alone, through `pkg-config --cflags --libs egmstore`, run
against a real master and provider (the installed `egmstore`): a put, then a get of the same
bytes, over tcp and shm. ctest
integration/cmake_install runs this file (python/pytest leaves it out)."""

import glob
import os
import re
import shutil
import subprocess

import pytest
from conftest import Cluster

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cmake_install")
TIMEOUT_S = 120


def run(argv, **kwargs):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, **kwargs)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"^project\(egmstore VERSION ([0-9.]+)", f.read(), re.M).group(1)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """The build installed into a new folder; returns (prefix, the environment that finds its
    egmstore.pc: PKG_CONFIG_PATH, nothing else)."""
    build = os.path.abspath(os.environ.get("EGM_BUILD", "build"))
    root = str(tmp_path_factory.mktemp("install") / "prefix")
    run(["cmake", "--install", build, "--prefix", root])
    pcs = glob.glob(os.path.join(root, "**", "pkgconfig", "egmstore.pc"), recursive=True)
    assert len(pcs) == 1, f"egmstore.pc under {root}: {pcs}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "CPATH", "LIBRARY_PATH")}
    env["PKG_CONFIG_PATH"] = os.path.dirname(pcs[0])
    return root, env


@pytest.fixture(scope="module")
def installed_cluster(prefix, tmp_path_factory):
    """A master and a provider started by the installed `egmstore`."""
    root, env = prefix
    c = Cluster(str(tmp_path_factory.mktemp("install-cluster")),
                binary=os.path.join(root, "bin", "egmstore"), env=env)
    yield c
    c.stop()


def pkg_config(env, *args):
    return run(["pkg-config", *args, "egmstore"], env=env).stdout.split()


def test_install_holds_headers_library_command_and_pc(prefix):
    root, env = prefix
    for header in ("egmstore.h", "client.h", "config.h", "status.h"):
        assert os.path.isfile(os.path.join(root, "include", "egmstore", header)), header
    assert [f"-I{os.path.join(root, 'include')}"] == \
        [f"-I{os.path.realpath(f[2:])}" for f in pkg_config(env, "--cflags")]
    libdir = os.path.realpath(pkg_config(env, "--variable=libdir")[0])
    assert pkg_config(env, "--libs") == [f"-L{pkg_config(env, '--variable=libdir')[0]}",
                                         "-legmstore"]
    # -legmstore resolves to the versioned library through the .so link; programs record .so.0.
    version = project_version()
    assert os.path.realpath(os.path.join(libdir, "libegmstore.so")) == \
        os.path.join(libdir, f"libegmstore.so.{version}")
    assert os.readlink(os.path.join(libdir, "libegmstore.so.0")) == f"libegmstore.so.{version}"
    assert pkg_config(env, "--modversion") == [version]
    out = run([os.path.join(root, "bin", "egmstore"), "--version"], env=env).stdout
    assert out.strip() == f"egmstore {version}"
    assert os.access(os.path.join(root, "bin", "egm-bench"), os.X_OK)


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_program_built_with_pkg_config_puts_and_gets(prefix, lang, installed_cluster, tmp_path):
    root, env = prefix
    compiler = {"c": "cc", "c++": "c++"}[lang]
    assert shutil.which(compiler), f"no {compiler}: scripts/install-deps.sh installs " \
        "build-essential (gcc and g++)"
    source = os.path.join(SOURCES, "put_get.c" if lang == "c" else "put_get.cpp")
    std = "-std=c11" if lang == "c" else "-std=c++17"
    exe = str(tmp_path / "put_get")
    run([compiler, std, "-Wall", "-Wextra", "-Werror", "-o", exe, source,
         *pkg_config(env, "--cflags", "--libs")], env=env, cwd=str(tmp_path))
    # Runs against the installed library (found through LD_LIBRARY_PATH=libdir alone).
    libdir = os.path.realpath(pkg_config(env, "--variable=libdir")[0])
    run_env = dict(env, LD_LIBRARY_PATH=libdir)
    ldd = run(["ldd", exe], env=run_env).stdout
    assert re.search(rf"libegmstore\.so\.0 => {re.escape(libdir)}/libegmstore\.so\.0", ldd), ldd
    for protocol in ("tcp", "shm"):
        out = run([exe, installed_cluster.master_addr, f"cmake-install/{lang}/{protocol}", protocol],
                  env=run_env).stdout
        assert re.fullmatch(r"ok [0-9]+\n", out), out
