"""Run pytest with ``import jax`` resolving to kiln and JAX's test helpers loaded from a
JAX source checkout (``python boot_kiln.py CHECKOUT PYTEST_ARGS...``).

The helpers are JAX's own files, imported from the checkout under their JAX names
(``jax._src.test_util``, ``jax._src.test_loader``, ``jax._src.test_warning_util``,
``jax._src.lax_reference``, ``jax._src.internal_test_util.*``), so they run against kiln:
kiln provides the ``jax._src`` surface they import. Nothing is copied into kiln.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import types

HELPERS = ("jax._src.test_util", "jax._src.test_loader", "jax._src.test_warning_util",
           "jax._src.lax_reference", "jax._src.internal_test_util",
           "jax.experimental.sparse.test_util")


class HelperFinder(importlib.abc.MetaPathFinder):
    """Finds JAX's test-helper modules in the checkout (ahead of kiln's ``jax`` alias)."""

    def __init__(self, checkout: str):
        self.checkout = checkout

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("kiln."):
            # ``from jax._src import test_util`` looks the submodule up under the parent's
            # real name (kiln._src): hand out the module loaded under its JAX name.
            jax_name = "jax" + fullname[4:]
            if not any(jax_name == h or jax_name.startswith(h + ".") for h in HELPERS):
                return None

            from kiln.as_jax import _AliasLoader
            module = importlib.import_module(jax_name)
            return importlib.util.spec_from_loader(
                fullname, _AliasLoader(module), is_package=hasattr(module, "__path__"))
        if not any(fullname == h or fullname.startswith(h + ".") for h in HELPERS):
            return None
        base = os.path.join(self.checkout, *fullname.split("."))
        if os.path.isdir(base):
            return importlib.util.spec_from_file_location(
                fullname, os.path.join(base, "__init__.py"),
                submodule_search_locations=[base])
        if os.path.exists(base + ".py"):
            return importlib.util.spec_from_file_location(fullname, base + ".py")
        return None


#: JAX-internal modules with no kiln counterpart (XLA/MLIR bindings) that JAX's helpers or
#: tests import at module level. They load as empty placeholder modules so that the test
#: module can be collected; any attribute read raises AttributeError naming the module,
#: so a test that really uses one fails (nothing is faked into passing).
XLA_ONLY = ("jax._src.lib.mlir", "jax._src.lib.xla_client", "jax._src.lib._jax",
            "jax._src.cudnn", "jax._src.lib.triton", "jax._src.lib.mosaic_gpu",
            "jax._src.lib.gpu_solver", "jax._src.op_shardings")


class _XlaOnlyModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        # A placeholder object, so that ``from M import name`` at module level works and
        # only a test that uses it fails.
        return Placeholder(f"{self.__name__}.{name}")


class _XlaOnlyLoader(importlib.abc.Loader):
    def create_module(self, spec):
        mod = _XlaOnlyModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


class XlaOnlyFinder(importlib.abc.MetaPathFinder):
    """Loads the :data:`XLA_ONLY` modules as placeholders."""

    def find_spec(self, fullname, path=None, target=None):
        for prefix in XLA_ONLY + NOT_IN_KILN:
            for p in (prefix, "kiln" + prefix[3:]):
                if p.startswith("kiln.") and not p.startswith("kiln._src"):
                    continue
                if fullname == p or fullname.startswith(p + "."):
                    return importlib.util.spec_from_loader(fullname, _XlaOnlyLoader(),
                                                           is_package=True)
        return None


#: Modules that JAX's tests import at module level and kiln does not provide (JAX-private,
#: or public API kiln lacks). They load as placeholders (as :data:`XLA_ONLY`) so that the
#: rest of the module's tests run; a test that uses one fails naming it.
NOT_IN_KILN = ("jax.export", "jax._src.literals",
               "jax._src.lax.utils", "jax._src.pmap",
               "jax._src.export", "jax._src.cudnn", "jax.experimental.custom_partitioning",
               "jax.experimental.serialize_executable",
               "jax._src.compute_on", "jax._src.xla_metadata")

#: Attributes of kiln modules that JAX's tests read at module level (decorators, imports)
#: and kiln lacks: (module, name). Each is set to a :class:`Placeholder` that raises when
#: used, so only the tests that use it fail.
MISSING_ATTRS = (
    ("kiln.lax.linalg", "_lu_python"),
    ("kiln.tree_util", "default_registry"),
    ("kiln.tree_util", "dispatch_registry"),
    ("kiln._src.mesh", "empty_concrete_mesh"),
    ("kiln.ad_checkpoint", "custom_remat"),
    ("kiln._src.pjit", "_pjit_lower"),           # JAX's lowering cache (cache_info)
    ("kiln._src.pjit", "make_jit_cpp_cache"),    # JAX's C++ dispatch cache
    ("kiln._src.sharding_impls", "parse_flatten_op_sharding"),  # an HLO OpSharding
    ("kiln._src.sharding_impls", "GSPMDSharding"),   # a sharding given as an HLO OpSharding
)


class Placeholder:
    """Stands for a JAX name kiln does not have; any use raises NotImplementedError."""

    def __init__(self, qualname: str):
        object.__setattr__(self, "_qualname", qualname)
        object.__setattr__(self, "__name__", qualname.rpartition(".")[2])
        object.__setattr__(self, "__qualname__", qualname.rpartition(".")[2])

    def _fail(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._qualname}: not provided by kiln (placeholder of the JAX-suite harness)")

    __call__ = _fail

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self._fail()

    def __repr__(self):
        return f"<missing {self._qualname}>"


#: JAX-internal caches that JAX's tests clear in ``setUp`` (``obj.cache_clear()``); kiln
#: has no such cache, so clearing is a no-op (the check the test makes is unaffected).
CACHES_TO_CLEAR = (
    ("kiln.lax.control.common", "_dedup_consts"),
    ("kiln.lax.control.common", "_pad_constvars"),
)


class _NoCache:
    def __init__(self, qualname):
        self.qualname = qualname

    def cache_clear(self):
        return None

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self.qualname}: JAX-internal cache, not in kiln "
                                  "(placeholder of the JAX-suite harness)")


def _install_missing_attrs() -> None:
    for modname, attr in CACHES_TO_CLEAR:
        mod = importlib.import_module(modname)
        if not hasattr(mod, attr):
            setattr(mod, attr, _NoCache(f"{modname}.{attr}"))
    for modname, attr in MISSING_ATTRS:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        if not hasattr(mod, attr):
            setattr(mod, attr, Placeholder(f"{modname}.{attr}"))


def main() -> None:
    checkout = os.path.abspath(sys.argv[1])
    import kiln.as_jax  # noqa: F401  (installs ``import jax`` -> kiln)
    sys.meta_path.insert(0, HelperFinder(checkout))
    sys.meta_path.insert(0, XlaOnlyFinder())
    os.environ["JAX_SUITE_SIDE"] = "kiln"
    _install_missing_attrs()
    import pytest
    raise SystemExit(pytest.main(sys.argv[2:]))


if __name__ == "__main__":
    main()
