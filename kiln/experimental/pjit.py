"""``jax.experimental.pjit``: ``pjit``, deprecated in JAX in favour of ``jax.jit`` (which
took its ``in_shardings``/``out_shardings``); kiln's is ``kiln.jit``, with JAX's warning."""
from __future__ import annotations

import warnings


def __getattr__(name: str):
    if name == "pjit":
        warnings.warn("jax.experimental.pjit.pjit has been deprecated. Please use `jax.jit` "
                      "instead.", DeprecationWarning, stacklevel=2)
        from kiln import jit
        return jit
    raise AttributeError(f"module 'kiln.experimental.pjit' has no attribute {name!r}")
