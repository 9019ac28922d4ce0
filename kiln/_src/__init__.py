"""Stand-ins for the private ``jax._src`` modules that libraries built on JAX, and JAX's own
test helpers, import.

Under :mod:`kiln.as_jax`, ``jax._src.X`` resolves to ``kiln._src.X``, or to the kiln module
that plays its part (:data:`ALIASES`, e.g. ``jax._src.monitoring`` is
:mod:`kiln.monitoring`). Only small, stable pieces are provided: ``traceback_util``
(Flax), ``core`` and ``dtypes`` (Flax's fp8 ops), ``config``, ``util``, ``api``,
``deprecations``, ``lib`` (JAX's test helpers). Everything else under ``jax._src`` is JAX's
implementation and has no kiln counterpart.
"""
import importlib

from kiln._src import xla_bridge  # noqa: E402,F401  (read as ``jax._src.xla_bridge``)

#: ``jax._src.<name>`` -> the kiln module standing in for it (also read by kiln.as_jax).
ALIASES = {
    "monitoring": "kiln.monitoring",
    "dlpack": "kiln.dlpack",
    "tree_util": "kiln.tree_util",
    "typing": "kiln.typing",
    "api_util": "kiln.api_util",
    "flatten_util": "kiln.flatten_util",
    "linear_util": "kiln.extend.linear_util",
    "source_info_util": "kiln.extend.source_info_util",
    "custom_derivatives": "kiln.custom_derivatives",
    "ad_checkpoint": "kiln.ad_checkpoint",
    "stages": "kiln.stages",
    "sharding": "kiln.sharding",
    "errors": "kiln.errors",
    "ref": "kiln.ref",
    "state": "kiln.state",
    "interpreters.mlir": "kiln.interpreters.mlir",
    "interpreters.batching": "kiln.interpreters.batching",
    "interpreters.ad": "kiln.interpreters.ad",
    "interpreters.partial_eval": "kiln.interpreters.partial_eval",
    "lax.lax": "kiln._src.lax.lax",
    "lax.linalg": "kiln.lax.linalg",
    "lax.parallel": "kiln.lax.parallel",
    "lax.control_flow": "kiln.lax.control",
    "lax.windowed_reductions": "kiln.lax.window_rules",
    "scipy.special": "kiln.scipy.special",
    "scipy.cluster": "kiln.scipy.cluster",
    "scipy.sparse": "kiln.scipy.sparse",
    "numpy.util": "kiln.numpy._util",
    "numpy.fft": "kiln.numpy.fft",
    "random.prng": "kiln._src.random.prng",
    "random.random": "kiln.random._keys",
    "random.threefry2x32": "kiln.random.prng",
    "random.stateful_rng": "kiln.experimental.random",
    "shard_map": "kiln.parallel.shard_map",
    "indexing": "kiln.state.indexing",
    "named_sharding": "kiln.sharding",
    "layout": "kiln.experimental.layout",
    "error_check": "kiln._error_check",
    "numpy.error": "kiln.numpy._error",
}


def subpackage_getattr(package: str):
    """A module ``__getattr__`` for the stand-in package ``kiln._src.<package>``: its
    submodule ``name`` is the kiln module ``ALIASES[f"{package}.{name}"]``."""
    def __getattr__(name: str):
        target = ALIASES.get(f"{package}.{name}")
        if target is None:
            fallback = ALIASES.get(f"{package}.{package}")
            if fallback is not None:    # ``jax._src.lax.add``: the package's own names
                mod = importlib.import_module(fallback)
                if hasattr(mod, name):
                    return getattr(mod, name)
            raise AttributeError(f"module 'kiln._src.{package}' has no attribute {name!r}")
        return importlib.import_module(target)
    return __getattr__


def __getattr__(name: str):
    # ``from jax._src import monitoring`` looks the name up on this package first.
    target = ALIASES.get(name)
    if target is None:
        raise AttributeError(f"module 'kiln._src' has no attribute {name!r}")
    return importlib.import_module(target)
