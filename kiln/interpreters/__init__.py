"""Transformations as interpreters over primitives: staging (jit, partial eval),
ad (jvp, linearize, transpose), batching (vmap, named axes); ``mlir`` and ``xla`` hold
JAX's registries for primitives and array-like types defined by libraries."""

_SUBMODULES = frozenset({"ad", "batching", "calls", "mlir", "partial_eval", "pjit", "staging",
                         "xla"})


def __getattr__(name):
    # ``jax.interpreters.xla`` is readable after ``import jax`` alone, as in JAX.
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"kiln.interpreters.{name}")
    raise AttributeError(f"module 'kiln.interpreters' has no attribute {name!r}")
