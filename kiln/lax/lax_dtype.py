"""``jax.lax.dtype``: the dtype of a value or dtype-like, canonicalized as JAX does.

Not ``jax.numpy.dtype`` (an alias of ``numpy.dtype``): Python scalars and their types give
the default dtype of their kind, kiln arrays and tracers keep their dtype as is, other
values (NumPy arrays and scalars) are canonicalized, and an explicitly named dtype (a
string, ``numpy.dtype`` or NumPy scalar type) is canonicalized with JAX's warning when x64
is off and it is a 64-bit type.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kiln import dtypes
from kiln.array import Array
from kiln.config import config
from kiln.core.trace import Tracer

__all__ = ["dtype"]

_PY_SCALARS = (bool, int, float, complex)


def _explicit(dt: np.dtype, x: Any) -> Any:
    if dt not in dtypes._valid_dtypes and not isinstance(dt, dtypes.ExtendedDType):
        raise TypeError(f"Value '{x}' with dtype {dt} is not a valid JAX array type. Only "
                        "arrays of numeric types are supported by JAX.")
    out = dtypes.canonicalize_dtype(dt)
    if out != dt and not config.jax_enable_x64:
        warnings.warn(
            f"Explicitly requested dtype {dt} requested in dtype is not available, and will "
            f"be truncated to dtype {out}. To enable more dtypes, set the jax_enable_x64 "
            "configuration option or the JAX_ENABLE_X64 shell environment variable. See "
            "https://github.com/jax-ml/jax#current-gotchas for more.", stacklevel=3)
    return out


def dtype(x: Any) -> Any:
    """Return the dtype object for a value or type.

    Args:
      x: a value (array, tracer, Python or NumPy scalar, NumPy array) or a dtype-like
        (a Python or NumPy scalar type, a ``numpy.dtype``, a dtype name).

    Returns:
      The dtype: the default dtype of its kind for Python scalars and their types, the
      array's own dtype for kiln arrays and tracers, the canonical dtype otherwise.

    Raises:
      ValueError: ``x`` is None.
      TypeError: ``x`` has no dtype, or one that is not a JAX array type.
    """
    if x is None:
        raise ValueError(f"Invalid argument to dtype: {x}.")
    if isinstance(x, type):
        if x in _PY_SCALARS:
            return dtypes.dtype(x)
        if issubclass(x, np.generic):
            return _explicit(np.dtype(x), x)
    elif type(x) in _PY_SCALARS:
        return dtypes.dtype(x)
    elif isinstance(x, (Array, Tracer)):
        return x.dtype
    if isinstance(x, (str, np.dtype)):
        return _explicit(np.dtype(x), x)
    if isinstance(x, dtypes.ExtendedDType):
        return x
    dt = getattr(x, "dtype", None)
    if not isinstance(dt, (np.dtype, dtypes.ExtendedDType)):
        try:
            dt = np.result_type(x)
        except TypeError as err:
            raise TypeError(f"Cannot determine dtype of {x}") from err
    if dt not in dtypes._valid_dtypes and not isinstance(dt, dtypes.ExtendedDType):
        raise TypeError(f"Value '{x}' with dtype {dt} is not a valid JAX array type. Only "
                        "arrays of numeric types are supported by JAX.")
    return dtypes.canonicalize_dtype(dt, allow_extended_dtype=True)
