"""``jax._src.api``: kiln's public transformations (``jit``, ``grad``, ``vmap``, ...)
under JAX's private module name; every name is read from :mod:`kiln`."""
from __future__ import annotations

import kiln as _kiln


def __getattr__(name: str):
    try:
        return getattr(_kiln, name)
    except AttributeError:
        raise AttributeError(f"module 'jax._src.api' (kiln) has no attribute {name!r}") from None
