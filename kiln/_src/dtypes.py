"""``jax._src.dtypes``: kiln's dtype helpers under JAX's private module name."""
from __future__ import annotations

import numpy as np

from kiln.dtypes import *  # noqa: F401,F403
from kiln.dtypes import (  # noqa: F401
    ExtendedDType,
    canonicalize_dtype,
    canonicalize_explicit_dtype,
    extended,
    finfo,
    iinfo,
    issubdtype,
    prng_key,
    result_type,
    supports_inf,
)
from kiln.dtypes import python_scalar_dtypes as python_scalar_types_to_dtypes  # noqa: E402,F401
from kiln.lax.dtype_of import dtype  # noqa: E402,F401  (JAX's canonicalizing dtypes.dtype)


def lattice_result_type(*args):
    """``(dtype, weak_type)`` of the join of ``args`` on JAX's promotion lattice (before a
    weak result takes its kind's default dtype)."""
    import kiln.dtypes as _kd
    return _kd._lattice_result_type(*args)


def _maybe_canonicalize_explicit_dtype(dt, fun_name: str):
    """JAX's name for :func:`kiln.dtypes.canonicalize_explicit_dtype`."""
    return canonicalize_explicit_dtype(np.dtype(dt), fun_name, stacklevel=4)


#: NumPy's dtype class (annotations in libraries use ``dtypes.DType``).
DType = np.dtype


#: The Python scalar types that make weakly typed values.
_weak_types: list = [int, float, complex]


def _jax_types_list() -> list:
    import kiln.dtypes as _kd
    names = ["bool_", "uint1", "uint2", "uint4", "uint8", "uint16", "uint32", "uint64",
             "int1", "int2", "int4", "int8", "int16", "int32", "int64", "float4_e2m1fn",
             "float6_e2m3fn", "float6_e3m2fn", "float8_e3m4", "float8_e4m3",
             "float8_e8m0fnu", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
             "float8_e5m2", "float8_e5m2fnuz", "bfloat16", "float16", "float32", "float64",
             "complex64", "complex128"]
    out = []
    for n in names:
        t = getattr(_kd, n, None) or getattr(np, n, None)
        if t is not None:
            out.append(np.dtype(t))
    return out


#: Every dtype kiln's arrays can have (JAX's ``_jax_types``, in JAX's order).
_jax_types: list = _jax_types_list()


def _dtype_and_weaktype(value):
    """``(dtype(value), whether value is weakly typed)``."""
    from kiln.dtypes import is_weakly_typed
    return dtype(value), any(value is t for t in _weak_types) or is_weakly_typed(value)


def _jax_type(dt, weak_type: bool):
    """The JAX type of a (dtype, weak_type) pair: the Python scalar type for a weakly typed
    value (bool stays a dtype), else the dtype."""
    dt = np.dtype(dt)
    if weak_type:
        if dt == np.dtype(bool):
            return dt
        return type(dt.type(0).item())
    return dt


def register_canonicalize_value_handler(type_, handler) -> None:
    """Register how values of ``type_`` are canonicalized into arrays (``handler(x)``; None:
    the value as it is), in kiln's ``dtypes.canonicalize_value_handlers`` table."""
    from kiln.dtypes import canonicalize_value_handlers
    canonicalize_value_handlers[type_] = (lambda x: x) if handler is None else handler


def __getattr__(name: str):
    # JAX's tests also read dtypes' private tables (``_float8_dtypes``, ``_weak_types``).
    import kiln.dtypes as _kd
    try:
        return getattr(_kd, name)
    except AttributeError:
        raise AttributeError(f"module 'jax._src.dtypes' (kiln) has no attribute {name!r}") \
            from None
