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


def _const(x, value):
    """A NumPy constant of ``x``'s dtype (not weak), like JAX's ``_lax_const``."""
    return np.array(value, dtype=dtypes.dtype(x, canonicalize=True))
