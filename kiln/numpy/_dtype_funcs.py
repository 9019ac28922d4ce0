"""Dtype queries and conversion: ``astype``, ``result_type``, ``promote_types``,
``can_cast``, ``finfo``, ``iinfo``, ``issubdtype``, ``isdtype``, ``iscomplexobj``,
``isrealobj``, ``isscalar``, ``dtype``.

These wrap ``kiln.dtypes`` (the promotion lattice lives there, not here).
"""
from __future__ import annotations

import warnings

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array
from kiln.core.trace import Tracer, get_aval
from kiln.numpy import _util

dtype = np.dtype

__all__ = ["astype", "result_type", "promote_types", "can_cast", "finfo", "iinfo",
           "issubdtype", "isdtype", "iscomplexobj", "isrealobj", "isscalar", "dtype",
           "iterable"]


def astype(x, dtype, /, *, copy=False, device=None):  # noqa: A002
    """Convert ``x`` to ``dtype`` (complex → real keeps the real part)."""
    from kiln.random import _keys
    if isinstance(x, _keys.PRNGKeyArray):     # keys convert only to their own dtype
        if dtype is not None and dtype == x.dtype:
            return x
        target = "float32" if dtype is None else dtype
        raise ValueError(f"Cannot convert_element_type from {x.dtype} to "
                         f"{getattr(target, 'name', None) or np.dtype(target).name}")
    x = _util.ensure_arraylike("astype", x)
    dt = dtypes.default_float_dtype() if dtype is None else _util.user_dtype(dtype, "astype")
    if dtypes.issubdtype(x.dtype, np.complexfloating) and dtypes.isdtype(
            dt, ("integral", "real floating")):
        warnings.warn("Casting from complex to real dtypes will soon raise a ValueError. Please "
                      "first use jnp.real or jnp.imag to take the real/imaginary component of "
                      "your input.", DeprecationWarning, stacklevel=2)
        x = lax.real(x)
    return lax.convert_element_type(x, dt)


def result_type(*args):
    """The dtype JAX's promotion gives an operation on ``args`` (canonical)."""
    return dtypes.canonicalize_dtype(dtypes.result_type(*args), allow_extended_dtype=True)


def promote_types(a, b):
    """The promoted dtype of two dtypes on JAX's lattice."""
    return dtypes.promote_types(a, b)


def can_cast(from_, to, casting="safe"):
    """NumPy's ``can_cast`` on dtypes (arrays give their dtype)."""
    if isinstance(from_, (Array, Tracer)):
        from_ = get_aval(from_).dtype
    return dtypes.can_cast(from_, to, casting)


def finfo(dtype):  # noqa: A002
    """Machine limits of a floating type."""
    return dtypes.finfo(dtype)


def iinfo(int_type):
    """Machine limits of an integer type."""
    return dtypes.iinfo(int_type)


def issubdtype(arg1, arg2):
    """``np.issubdtype`` aware of bfloat16/float8/int4."""
    return dtypes.issubdtype(arg1, arg2)


def isdtype(dtype, kind):  # noqa: A002
    """Array-API ``isdtype``."""
    return dtypes.isdtype(dtype, kind)


def iscomplexobj(x):
    """True when ``x`` has a complex dtype."""
    if x is None:
        return False
    try:
        dt = dtypes.dtype(x)
    except TypeError:
        dt = np.asarray(x).dtype
    return dtypes.issubdtype(dt, np.complexfloating)


def isrealobj(x):
    """True when ``x`` does not have a complex dtype."""
    return not iscomplexobj(x)


def isscalar(element):
    """True for Python/NumPy scalars and zero-dimensional arrays (JAX's rule)."""
    m = getattr(element, "__jax_array__", None)
    if m is not None:
        element = m()
    if isinstance(element, (Array, Tracer, np.ndarray)):
        return get_aval(element).ndim == 0 if not isinstance(element, np.ndarray) \
            else element.ndim == 0
    return bool(np.isscalar(element))


def iterable(y):
    """True when ``iter(y)`` works."""
    try:
        iter(y)
    except TypeError:
        return False
    return True
