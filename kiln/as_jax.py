"""Run unmodified JAX code and libraries on kiln: ``import jax`` becomes kiln.

Importing this module installs an import hook for the rest of the process: ``import jax``
and every ``import jax.X`` (``jax.numpy``, ``jax.lax``, ``jax.tree_util``, ``jax.extend``,
...) resolve to kiln's modules, so libraries built on JAX (Optax, Chex, Flax) run on kiln
without edits::

    import kiln.as_jax          # before anything imports jax
    import optax, flax.linen    # their ``import jax`` is kiln

or from the command line, for a script, a module or a test run::

    python -m kiln.as_jax train.py --steps 200
    python -m kiln.as_jax -m pytest --pyargs optax
    python -m kiln.as_jax -c "import jax; print(jax.numpy.ones(3))"

Versions: kiln follows JAX 0.10.2, so the alias reports it (``jax.__version__ == "0.10.2"``,
``jax.__version_info__ == (0, 10, 2)``, ``jax.version``, ``jaxlib.__version__``) and libraries
take their JAX-0.10.2 code paths. ``kiln.__version__`` itself is unchanged.

``sys.modules["jax"]`` is a thin module that forwards every attribute to :mod:`kiln` and only
adds the version attributes; ``jax.X`` *is* the module ``kiln.X`` (same object, so patching
``jax.lax.psum`` patches ``kiln.lax.psum``). Binding a submodule on its parent never hides
a kiln attribute of the same name: after ``import jax.config``, ``jax.config`` is still the
flags object and ``jax.devices`` still the function.

kiln's log records (``jax.log_compiles``, ``jax.explain_cache_misses``) go to the ``jax``
logger, where code written for JAX listens for them.

If the real ``jax`` is already imported this module raises ``ImportError``: arrays and
tracers of the two systems cannot be mixed in one process.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import threading
import types

__all__ = ["JAX_VERSION", "JAX_VERSION_INFO", "install", "installed", "main"]

#: The JAX version the alias reports (kiln follows this version's API and semantics).
JAX_VERSION = "0.10.2"
JAX_VERSION_INFO = (0, 10, 2)

# ``jax.X`` modules that live under another name in kiln.
_RENAMES = {
    "jax._src.interpreters.partial_eval": "kiln.interpreters.partial_eval",
    "jax._src.api_util": "kiln.api_util",
    "jax._src.flatten_util": "kiln.flatten_util",
    "jax._src.typing": "kiln.typing",
    "jax._src.tree_util": "kiln.tree_util",
    "jax._src.linear_util": "kiln.extend.linear_util",
    "jax._src.source_info_util": "kiln.extend.source_info_util",
    "jax._src.state": "kiln.state",
    "jax._src.state.types": "kiln.state.types",
    "jax._src.state.primitives": "kiln.state.primitives",
    "jax._src.state.indexing": "kiln.state.indexing",
    "jax._src.state.discharge": "kiln.state.discharge",
    "jax._src.indexing": "kiln.state.indexing",
    "jax._src.ref": "kiln.ref",
    "jax._src.hijax": "kiln.experimental.hijax",
}

_lock = threading.RLock()


def _kiln_name(fullname: str) -> str:
    renamed = _RENAMES.get(fullname)
    if renamed is not None:
        return renamed
    if fullname.startswith("jax._src."):
        from kiln._src import ALIASES
        parts = fullname[len("jax._src."):].split(".")
        for n in range(len(parts), 0, -1):
            target = ALIASES.get(".".join(parts[:n]))
            if target is not None:
                return ".".join([target, *parts[n:]])
    return "kiln" + fullname[3:]


class _GuardedModule(types.ModuleType):
    """A module whose attributes are never overwritten by the import system binding a
    submodule of the same name (``import jax.config`` must leave ``jax.config``, the flags
    object, in place)."""

    def __setattr__(self, name, value):
        if (isinstance(value, types.ModuleType)
                and getattr(value, "__name__", None) == f"{self.__name__}.{name}"):
            current = self.__dict__.get(name, value)
            if current is not value and not isinstance(current, types.ModuleType):
                return
        super().__setattr__(name, value)


class _JaxModule(types.ModuleType):
    """``sys.modules["jax"]``: forwards attribute reads to :mod:`kiln`; holds only the
    version attributes (and what the import system binds) itself."""

    def __getattr__(self, name):
        kiln = sys.modules["kiln"]
        if name == "_src":     # JAX imports jax._src eagerly; libraries read it as attribute
            return importlib.import_module("kiln._src")
        try:
            return getattr(kiln, name)
        except AttributeError as e:
            if getattr(e, "jax_message", False):    # JAX's own text (a removed name)
                raise
            raise AttributeError(
                f"module 'jax' has no attribute {name!r}: kiln (standing in for jax through "
                f"kiln.as_jax) does not provide jax.{name}; docs/ecosystem.md lists what it "
                "provides") from None

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and not name.startswith("__"):
            kiln = sys.modules["kiln"]
            current = kiln.__dict__.get(name)
            if current is not None and current is not value:
                # A submodule bound by ``import jax.X``: kiln's attribute wins.
                if not isinstance(current, types.ModuleType):
                    return
        super().__setattr__(name, value)

    def __dir__(self):
        kiln = sys.modules["kiln"]
        return sorted(set(dir(kiln)) | set(self.__dict__))


def _make_version_module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name, f"The JAX version kiln's alias reports ({JAX_VERSION}).")
    mod.__version__ = JAX_VERSION
    mod.__version_info__ = JAX_VERSION_INFO
    mod._version = JAX_VERSION
    mod._minimum_jaxlib_version = JAX_VERSION
    mod._minimum_jaxlib_version_info = JAX_VERSION_INFO
    return mod


def _make_jax_module() -> types.ModuleType:
    import kiln
    mod = _JaxModule("jax", kiln.__doc__)
    version = _make_version_module("jax.version")
    object.__setattr__(mod, "__version__", JAX_VERSION)
    object.__setattr__(mod, "__version_info__", JAX_VERSION_INFO)
    object.__setattr__(mod, "version", version)
    object.__setattr__(mod, "lib", _make_lib_module())
    object.__setattr__(mod, "__path__", [])
    return mod


def _make_lib_module() -> types.ModuleType:
    """``jax.lib``: in JAX 0.10 it only reports the jaxlib version."""
    mod = types.ModuleType("jax.lib", "The jaxlib version kiln's alias reports "
                           f"({JAX_VERSION}); kiln runs no XLA.")
    mod.__version__ = JAX_VERSION
    mod.__path__ = []
    return mod


def _make_jaxlib_module() -> types.ModuleType:
    mod = types.ModuleType("jaxlib", "kiln's stand-in for jaxlib: version information only "
                           "(kiln runs no XLA).")
    mod.__version__ = JAX_VERSION
    mod.__path__ = []
    mod.version = _make_version_module("jaxlib.version")
    return mod


class _AliasLoader(importlib.abc.Loader):
    """Hands out an existing module under a second name, leaving its ``__spec__`` alone."""

    def __init__(self, module: types.ModuleType):
        self._module = module
        self._spec = getattr(module, "__spec__", None)

    def create_module(self, spec):
        return self._module

    def exec_module(self, module):
        # ``module_from_spec`` stored the alias spec on the module: put the real one back.
        if self._spec is not None:
            try:
                module.__spec__ = self._spec
            except AttributeError:
                pass


class _JaxFinder(importlib.abc.MetaPathFinder):
    """Resolves ``jax``, ``jax.*``, ``jaxlib`` and ``jaxlib.version`` to kiln."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "jax" or fullname.startswith("jax."):
            module = self._load_jax(fullname)
        elif fullname == "jaxlib" or fullname.startswith("jaxlib."):
            module = self._load_jaxlib(fullname)
        else:
            return None
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(module), is_package=hasattr(module, "__path__"))

    def _load_jax(self, fullname):
        with _lock:
            if fullname == "jax":
                module = _make_jax_module()
                _alias_loaded_modules()
                return module
            if fullname == "jax.version":
                return sys.modules["jax"].version
            if fullname == "jax.lib":
                return sys.modules["jax"].lib
            kname = _kiln_name(fullname)
            try:
                module = importlib.import_module(kname)
            except ModuleNotFoundError as e:
                if e.name is not None and (e.name == kname or kname.startswith(e.name + ".")):
                    raise ModuleNotFoundError(
                        f"No module named {fullname!r} (kiln has no {kname!r}; see "
                        "docs/ecosystem.md for the JAX modules kiln provides)",
                        name=fullname) from None
                raise
            parent = fullname.rpartition(".")[0]
            _guard_parent(sys.modules.get(parent), fullname.rpartition(".")[2], module)
            # Not ``fullname`` itself: the import system finds a module already in
            # sys.modules while it imports it, and would re-create it from its own spec.
            _alias_loaded_modules(skip=fullname)
            return module

    def _load_jaxlib(self, fullname):
        if fullname == "jaxlib":
            return _make_jaxlib_module()
        if fullname == "jaxlib.version":
            return sys.modules["jaxlib"].version
        raise ModuleNotFoundError(
            f"No module named {fullname!r}: under kiln.as_jax, jaxlib only provides version "
            "information (kiln does not run XLA)", name=fullname)


def _guard_parent(parent, child: str, module) -> None:
    """Keep ``parent.child`` (a kiln function or object) from being replaced by ``module``
    when the import system binds the submodule on its parent."""
    if parent is None or isinstance(parent, _JaxModule):
        return
    current = parent.__dict__.get(child)
    if current is None or current is module or isinstance(current, types.ModuleType):
        return
    if type(parent) is types.ModuleType:
        parent.__class__ = _GuardedModule


def _alias_loaded_modules(skip: str | None = None) -> None:
    """Register every kiln module already imported under its ``jax.`` name, so that
    ``import jax.X`` of those never goes through the import system's submodule binding."""
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name.startswith("kiln.") or name == "kiln"):
            continue
        if name == "kiln" or name.startswith("kiln.as_jax"):
            continue
        alias = "jax" + name[4:]
        if alias != skip and alias not in sys.modules and _kiln_name(alias) == name:
            sys.modules[alias] = mod


_finder = _JaxFinder()


class _ToJaxLogger(logging.Handler):
    """Hands kiln's log records (compile logs, cache-miss explanations) to the ``jax``
    logger, where code written for JAX listens for them."""

    def emit(self, record):
        logging.getLogger("jax").handle(record)


def _forward_logs() -> None:
    kiln_logger = logging.getLogger("kiln")
    if not any(isinstance(h, _ToJaxLogger) for h in kiln_logger.handlers):
        kiln_logger.addHandler(_ToJaxLogger())
        # The records reach the root logger through ``jax`` (once).
        kiln_logger.propagate = False


def installed() -> bool:
    """Whether the ``jax`` → kiln import hook is active in this process."""
    return _finder in sys.meta_path


def install() -> None:
    """Install the import hook (idempotent): from now on ``import jax`` is kiln.

    Raises:
      ImportError: if the real ``jax`` (or ``jaxlib``) is already imported.
    """
    with _lock:
        if installed():
            return
        real = sys.modules.get("jax")
        if real is not None and not isinstance(real, _JaxModule):
            raise ImportError(
                "kiln.as_jax: the real `jax` is already imported in this process "
                f"({getattr(real, '__file__', real)}); kiln cannot stand in for it now, and "
                "the two cannot be mixed. Import kiln.as_jax (or run `python -m kiln.as_jax "
                "...`) before anything imports jax.")
        lib = sys.modules.get("jaxlib")
        if lib is not None and getattr(lib, "__file__", None) is not None:
            raise ImportError(
                "kiln.as_jax: the real `jaxlib` is already imported in this process; import "
                "kiln.as_jax before anything imports jax or jaxlib.")
        sys.meta_path.insert(0, _finder)
        _forward_logs()


_USAGE = """usage: python -m kiln.as_jax script.py [args ...]
       python -m kiln.as_jax -m module [args ...]
       python -m kiln.as_jax -c command [args ...]

Runs a Python program with `import jax` resolving to kiln."""


def main(argv: list[str] | None = None) -> None:
    """The command line: run a script, a module (``-m``) or a command (``-c``) with the
    alias installed, as ``python`` itself would."""
    import os
    import runpy
    argv = list(sys.argv[1:] if argv is None else argv)
    install()
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE)
        raise SystemExit(0 if argv else 2)
    if argv[0] == "-m":
        if len(argv) < 2:
            raise SystemExit("python -m kiln.as_jax: -m needs a module name\n" + _USAGE)
        sys.argv = [argv[1], *argv[2:]]
        if sys.path and sys.path[0] != os.getcwd():
            sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        if len(argv) < 2:
            raise SystemExit("python -m kiln.as_jax: -c needs a command\n" + _USAGE)
        sys.argv = ["-c", *argv[2:]]
        code = compile(argv[1], "<string>", "exec")
        globs = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(code, globs)
    else:
        script = argv[0]
        sys.argv = list(argv)
        # As ``python script.py``: the script's folder comes first on the path (in place of
        # the working directory that ``python -m`` put there).
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


if __name__ != "__main__":
    install()
else:
    # Run through the canonical module so that a later ``import kiln.as_jax`` sees the same
    # hook (this file is also executed as ``__main__``, a second module object).
    from kiln import as_jax as _canonical
    _canonical.main()
