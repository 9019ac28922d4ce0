"""``lax.dtype``: the canonical dtype of a value or dtype-like, as ``jax.lax.dtype``.

Unlike ``jax.numpy.dtype`` (NumPy's ``np.dtype``), this canonicalizes: Python scalars and
their types give the default dtype of their kind, NumPy values and dtype-likes give their
dtype truncated to 32 bits unless x64 is on (explicitly requested 64-bit dtypes warn, as in
JAX); kiln arrays and tracers keep the dtype they have.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln import dtypes

__all__ = ["dtype"]


def _explicit(dt: np.dtype) -> np.dtype:
    """``dt`` as an explicitly requested dtype (``jax_explicit_x64_dtypes``)."""
    return dtypes.canonicalize_explicit_dtype(dt, "dtype", stacklevel=4)


def _check_valid(x: Any, dt: Any) -> None:
    if dt not in dtypes._valid_dtypes and not dtypes.issubdtype(dt, dtypes.extended):
        raise TypeError(f"Value '{x}' with dtype {dt} is not a valid JAX array type. "
                        "Only arrays of numeric types are supported by JAX.")


def dtype(x: Any) -> Any:
    """The dtype object of a value or type, canonicalized as JAX does.

    Args:
      x: a Python scalar or scalar type, a NumPy scalar type, dtype, string or array,
        a kiln array or tracer, or anything with a ``dtype`` attribute.

    Returns:
      A ``numpy.dtype`` (or an extended dtype). Python scalars, NumPy values and
      dtype-likes are canonicalized (64-bit types become 32-bit unless x64 is on);
      kiln arrays and tracers give their own dtype unchanged.

    Raises:
      ValueError: if ``x`` is ``None``.
      TypeError: if ``x`` has no dtype, or its dtype is not a JAX array type.
    """
    from kiln.array import Array
    from kiln.core.trace import Tracer
    if x is None:
        raise ValueError(f"Invalid argument to dtype: {x}.")
    if isinstance(x, type):
        if x in dtypes._py_scalar_canonical:
            return dtypes.canonicalize_dtype(x)
        if issubclass(x, np.generic):
            return _explicit(np.dtype(x))
    elif type(x) in dtypes._py_scalar_canonical:
        return dtypes.canonicalize_dtype(type(x))
    elif isinstance(x, (Array, Tracer)):
        return x.dtype
    if isinstance(x, (str, np.dtype)):
        dt = np.dtype(x)
        _check_valid(x, dt)
        return _explicit(dt)
    attr = getattr(x, "dtype", None)
    if isinstance(attr, (np.dtype, dtypes.ExtendedDType)):
        dt = attr
    else:
        try:
            dt = np.result_type(x)
        except TypeError as err:
            raise TypeError(f"Cannot determine dtype of {x}") from err
    _check_valid(x, dt)
    return dtypes.canonicalize_dtype(dt, allow_extended_dtype=True)
