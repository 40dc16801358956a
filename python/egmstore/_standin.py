"""egmstore standing in for Mooncake's Python package, so that an engine's own
``from mooncake.store import MooncakeDistributedStore`` (and ``import
mooncake.allocator``) loads egmstore's modules with no change to the engine.

Two ways to turn it on, one rule (docs/mooncake-compat.md, "Standing in for
mooncake.store"):
- the environment switch EGMSTORE_AS_MOONCAKE, read at interpreter start by
  the one-line ``egmstore_mooncake.pth`` installed beside the package (it
  imports this module only when the switch is set);
- ``egmstore.mooncake.install(force=False)``, for code that prefers a call.

Either puts a finder first on ``sys.meta_path``; it answers only for
``mooncake`` and its submodules:
- ``mooncake.store`` -> a module forwarding to ``egmstore.mooncake``,
  ``mooncake.allocator`` -> one forwarding to ``egmstore.mooncake_allocator``
  (the same objects: ``mooncake.store.MooncakeDistributedStore is
  egmstore.mooncake.MooncakeDistributedStore``);
- ``mooncake`` itself -> an empty stand-in package when the real one is not
  installed; any other ``mooncake.*`` is then not found (``find_spec`` answers
  None, an import raises ModuleNotFoundError).

Ambiguous, and refused with an ImportError (switch) or a RuntimeError
(install()) naming both packages and the switch: turned on with the plain
value (EGMSTORE_AS_MOONCAKE=1, or install()) while the real Mooncake is also
importable, that is when a ``mooncake`` module other than the stand-in is in
``sys.modules`` or a regular ``mooncake`` package or module (one with a file:
an ``__init__.py``, a ``mooncake.py``, an extension) is on ``sys.path`` at the
moment something imports ``mooncake``. A bare ``mooncake/`` folder without an
``__init__.py`` (a namespace package, such as a checkout's folder in the
current directory) is not the real Mooncake. The explicit EGMSTORE_AS_MOONCAKE=force
(or install(force=True)) settles it: ``mooncake.store`` and
``mooncake.allocator`` are egmstore's, every other module of the real package
stays the real one (its transfer engine, say).

The .pth imports this module (so the egmstore package and its extension) only
when the switch is set to something; egmstore.mooncake itself is loaded when a
mooncake module is first imported.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

SWITCH = "EGMSTORE_AS_MOONCAKE"
# Accepted values of the switch (the words egmstore's bool config keys take).
_OFF = ("", "0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")
_FORCE = ("force",)

# Mooncake module -> the egmstore module standing in for it.
STANDS_IN = {
    "mooncake.store": "egmstore.mooncake",
    "mooncake.allocator": "egmstore.mooncake_allocator",
}


def _mode(value):
    """The switch's value -> None (off), "on" or "force"; ValueError otherwise."""
    word = value.strip().lower()
    if word in _OFF:
        return None
    if word in _ON:
        return "on"
    if word in _FORCE:
        return "force"
    raise ValueError(f"{SWITCH}={value!r} is not one of: {', '.join(_ON)} (stand in for "
                     f"mooncake.store unless the real Mooncake is installed too), "
                     f"{', '.join(_FORCE)} (stand in even then), "
                     f"{', '.join(repr(w) for w in _OFF)} (off)")


def _is_standin(module):
    return getattr(module, "__egmstore_standin__", None) is not None


def real_mooncake():
    """Where the real Mooncake is (a path or a module's repr), or None when no
    `mooncake` other than the stand-in is imported or importable."""
    module = sys.modules.get("mooncake")
    if module is not None:
        if _is_standin(module):
            return None
        return getattr(module, "__file__", None) or repr(module)
    spec = importlib.machinery.PathFinder.find_spec("mooncake")
    if spec is None or not spec.has_location:
        return None  # not found, or only a namespace folder
    return spec.origin


def _ambiguous(where, how, settle):
    return (f"{how} asks egmstore (egmstore.mooncake) to stand in for Mooncake's mooncake.store, "
            f"but the real Mooncake package is importable too ({where}): which of the two "
            f"`import mooncake.store` should load is ambiguous. {settle}, or use the real "
            f"Mooncake by unsetting {SWITCH} (or setting it to 0) and not calling "
            f"egmstore.mooncake.install().")


class _ForwardLoader(importlib.abc.Loader):
    """Loads `mooncake.X` as a module whose attributes are those of egmstore's
    module: looked up on each access, so both always agree."""

    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module):
        target = importlib.import_module(self.target)

        def forward(name):
            try:
                return getattr(target, name)
            except AttributeError:
                raise AttributeError(f"module {module.__name__!r} (egmstore's {self.target}, "
                                     f"standing in for Mooncake's) has no attribute {name!r}"
                                     ) from None

        module.__getattr__ = forward
        module.__dir__ = lambda: sorted(set(dir(target)) | set(module.__dict__))
        module.__doc__ = target.__doc__
        if hasattr(target, "__all__"):
            module.__all__ = list(target.__all__)
        module.__egmstore_standin__ = self.target


class _PackageLoader(importlib.abc.Loader):
    """The `mooncake` package when the real one is not installed: empty, its
    submodules are those the finder stands in for."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__doc__ = ("egmstore standing in for Mooncake's package (mooncake.store, "
                          "mooncake.allocator); docs/mooncake-compat.md")
        module.__egmstore_standin__ = "egmstore"


class StandInFinder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path; answers for `mooncake` and its submodules only."""

    def __init__(self, mode, how, refusal=None):
        self.mode = mode  # "on" or "force"
        self.how = how  # what turned it on, for messages
        self.refusal = refusal  # a message every mooncake import fails with

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "mooncake" and not fullname.startswith("mooncake."):
            return None
        if self.refusal is not None:
            raise ImportError(self.refusal, name=fullname)
        where = real_mooncake()
        if where is not None and self.mode != "force":
            raise ImportError(_ambiguous(where, self.how, f"Set {SWITCH}=force to take "
                                         "egmstore's anyway"), name=fullname)
        if fullname in STANDS_IN:
            return importlib.util.spec_from_loader(fullname, _ForwardLoader(STANDS_IN[fullname]))
        if where is not None:
            return None  # force: the real package and its other modules
        if fullname == "mooncake":
            return importlib.util.spec_from_loader(fullname, _PackageLoader(), is_package=True)
        # Not found, as a finder says it (None): `importlib.util.find_spec("mooncake.x")` is
        # how code probes for an optional module (Mooncake's own tests' conftest.py does), and
        # raising here would break the probe. The import then fails with ModuleNotFoundError.
        return None


def _put_first(finder):
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, StandInFinder)]
    sys.meta_path.insert(0, finder)


def install_from_env(environ=None):
    """The .pth file's call at interpreter start: never raises (site would only
    print it); a bad value or an ambiguity fails the first mooncake import."""
    value = (os.environ if environ is None else environ).get(SWITCH, "")
    how = f"{SWITCH}={value}"
    try:
        mode = _mode(value)
    except ValueError as e:
        _put_first(StandInFinder(None, how, refusal=str(e)))
        return
    if mode is not None:
        _put_first(StandInFinder(mode, how))


def install(force=False):
    """egmstore.mooncake.install(): stands in from now on. RuntimeError, and
    nothing changed, when the real Mooncake is importable and force is False,
    or when a mooncake module it stands in for is already imported (from the
    real package: stand in before anything imports it)."""
    how = "egmstore.mooncake.install(force=True)" if force else "egmstore.mooncake.install()"
    where = real_mooncake()
    if where is not None and not force:
        raise RuntimeError(_ambiguous(where, how, "Call egmstore.mooncake.install(force=True) "
                                      f"(or set {SWITCH}=force) to take egmstore's anyway"))
    for name in STANDS_IN:
        module = sys.modules.get(name)
        if module is not None and not _is_standin(module):
            raise RuntimeError(f"{how}: {name} is already imported from the real Mooncake "
                               f"({getattr(module, '__file__', module)!r}); egmstore can stand "
                               f"in for it only before anything imports it (set {SWITCH}=force "
                               "in the environment)")
    _put_first(StandInFinder("force" if force else "on", how))


def uninstall():
    """Removes the finder; modules already imported stay in sys.modules."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, StandInFinder)]


__all__ = ["SWITCH", "STANDS_IN", "StandInFinder", "install", "install_from_env", "uninstall",
           "real_mooncake"]
