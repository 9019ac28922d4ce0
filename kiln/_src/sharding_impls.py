"""``jax._src.sharding_impls``: kiln's sharding classes and mesh helpers under JAX's
private module name (every name is read from :mod:`kiln.sharding`)."""
from __future__ import annotations


def __getattr__(name: str):
    import kiln.sharding as _sharding
    if hasattr(_sharding, name):
        return getattr(_sharding, name)
    raise AttributeError(f"module 'jax._src.sharding_impls' (kiln) has no attribute {name!r}")
