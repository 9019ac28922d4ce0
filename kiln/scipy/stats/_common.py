"""Shared imports and helpers of the ``kiln.scipy.stats`` distribution modules."""
from __future__ import annotations

import numpy as np

import kiln.numpy as jnp  # noqa: F401
from kiln import dtypes, lax  # noqa: F401
from kiln.numpy._util import (  # noqa: F401
    promote_args_inexact,
    promote_args_numeric,
    promote_dtypes_inexact,
)

_SCALAR_TYPES = {"b": bool, "i": int, "u": int, "f": float, "c": complex}


def _const(x, value):
    """A constant of ``x``'s dtype, as JAX's ``lax._const``: when ``x`` is a weakly typed
    scalar (a Python scalar or a weak 0-d array) a Python scalar (weak, so ``norm.logpdf(1.0)``
    stays weak as in JAX) if that is ``x``'s dtype, else a strong NumPy constant."""
    dt = dtypes.dtype(x, canonicalize=True)
    if type(x) in (bool, int, float, complex) or (
            getattr(x, "weak_type", False) and np.ndim(x) == 0):
        kind = _SCALAR_TYPES.get(np.dtype(dt).kind)
        if kind is not None:
            v = kind(value)
            if dtypes.dtype(v) == dt:
                return v
            return np.array(v, dt)
    return np.array(value, dtype=dt)
