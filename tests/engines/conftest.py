"""Fixtures for the engines' test (`make test-engines`, docs/testing.md): the engines' own
Mooncake store code (vLLM, SGLang, LMCache, pinned in requirements-engines.txt) run
unmodified against a real egmstore master and provider, reached through the
`mooncake.store` stand-in (EGMSTORE_AS_MOONCAKE=1 and the egmstore_mooncake.pth in the
venv's site-packages, as an engine's process would have them).

The master and provider come from tests/python/conftest.py's Cluster (binary
${EGM_BUILD}/bin/egmstore). Nothing here mocks egmstore: what is replaced is only what
needs a GPU, a model or a distributed group (see each test)."""

import gc
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _load_python_conftest():
    spec = importlib.util.spec_from_file_location(
        "egm_python_conftest", os.path.join(ROOT, "tests", "python", "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pyconf = _load_python_conftest()
pattern = pyconf.pattern


def pytest_configure(config):
    # The stand-in must be the one the .pth installed at interpreter start, as in an engine's
    # process; a missing switch or .pth is an error, never a skip.
    if os.environ.get("EGMSTORE_AS_MOONCAKE", "") in ("", "0"):
        pytest.exit("EGMSTORE_AS_MOONCAKE is not set: run through `make test-engines` "
                    "(docs/testing.md)", 2)
    import egmstore.mooncake
    import mooncake.store
    if mooncake.store.MooncakeDistributedStore is not egmstore.mooncake.MooncakeDistributedStore:
        pytest.exit("mooncake.store is not egmstore's stand-in (is egmstore_mooncake.pth in "
                    f"{sys.prefix}'s site-packages?)", 2)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """One egmstore master and one provider (512 MiB) for the session; each engine's store
    contributes its own segment besides, as it does on Mooncake."""
    c = pyconf.Cluster(str(tmp_path_factory.mktemp("cluster")), segment="512MiB")
    yield c
    # Stores the engines leave open (SGLang's close() is a no-op, leaving the client to its
    # destructor) are closed while the master is up, not at exit after it.
    import egmstore.mooncake
    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, egmstore.mooncake.MooncakeDistributedStore):
            obj.close()
    c.stop()


def pytest_terminal_summary(terminalreporter):
    pyconf.pytest_terminal_summary(terminalreporter)
