"""``kiln.numpy`` scalar types: ``jnp.float32``, ``jnp.int8``, ``jnp.bfloat16``, ...

As in JAX these are not NumPy scalar types but constructors of zero-dimensional
arrays: ``jnp.float32(1.5)`` is a kiln Array of shape () and dtype float32 (the
canonical dtype: ``jnp.float64(1)`` is float32 unless x64 is on). They still
stand for their NumPy type wherever a dtype is expected:

* ``np.dtype(jnp.float32) == np.float32`` (through ``.dtype`` and
  ``__numpy_dtype__``), and every ``kiln.dtypes`` function accepts them;
* ``jnp.float32 == np.float32`` and both hash alike, so they are interchangeable
  as dict keys;
* ``isinstance(np.float32(1), jnp.float32)`` is True (a check on the NumPy type;
  a kiln Array is not an instance, as in JAX).

This module must not import ``kiln.numpy`` at import time (it is imported by
``kiln.numpy``'s ``__init__``); ``asarray`` is looked up when a type is called.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import dtypes as _dtypes

_PUBLIC_MODULE_NAME = "kiln.numpy"


class _ScalarMeta(type):
    """Metaclass of the scalar types; each instance is one (class-like) scalar type."""

    dtype: np.dtype

    @property
    def __numpy_dtype__(cls) -> np.dtype:  # NumPy >= 2.4 protocol
        return cls.dtype

    def __hash__(cls) -> int:
        return hash(cls.dtype.type)

    def __eq__(cls, other: Any) -> bool:
        return cls is other or cls.dtype.type == other

    def __ne__(cls, other: Any) -> bool:
        return not (cls == other)

    def __call__(cls, x: Any) -> Any:
        from kiln.numpy import asarray  # lazily: kiln.numpy imports this module

        return asarray(x, dtype=cls.dtype)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls.dtype.type)



def _make_scalar_type(np_type: type) -> _ScalarMeta:
    name = np_type.__name__
    cls = _ScalarMeta(name, (object,), {"dtype": np.dtype(np_type)})
    cls.__module__ = _PUBLIC_MODULE_NAME
    cls.__doc__ = (
        f"A kiln scalar constructor of type {name}.\n\n"
        "While NumPy defines scalar types for each data type, kiln (like JAX) "
        "represents scalars as zero-dimensional arrays."
    )
    return cls


bool_ = _make_scalar_type(np.bool_)
uint8 = _make_scalar_type(np.uint8)
uint16 = _make_scalar_type(np.uint16)
uint32 = _make_scalar_type(np.uint32)
uint64 = _make_scalar_type(np.uint64)
int8 = _make_scalar_type(np.int8)
int16 = _make_scalar_type(np.int16)
int32 = _make_scalar_type(np.int32)
int64 = _make_scalar_type(np.int64)
float16 = _make_scalar_type(np.float16)
float32 = _make_scalar_type(np.float32)
float64 = _make_scalar_type(np.float64)
complex64 = _make_scalar_type(np.complex64)
complex128 = _make_scalar_type(np.complex128)
bfloat16 = _make_scalar_type(_dtypes.bfloat16)
int4 = _make_scalar_type(_dtypes.int4)
uint4 = _make_scalar_type(_dtypes.uint4)
float8_e4m3fn = _make_scalar_type(_dtypes.float8_e4m3fn)
float8_e5m2 = _make_scalar_type(_dtypes.float8_e5m2)
float8_e4m3b11fnuz = _make_scalar_type(_dtypes.float8_e4m3b11fnuz)
float8_e4m3fnuz = _make_scalar_type(_dtypes.float8_e4m3fnuz)
float8_e5m2fnuz = _make_scalar_type(_dtypes.float8_e5m2fnuz)

__all__ = [
    "bfloat16", "bool_", "cdouble", "complex128", "complex64", "complex_", "csingle",
    "double", "float16", "float32", "float64", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float_", "half", "int16",
    "int32", "int4", "int64", "int8", "int_", "single", "uint", "uint16", "uint32",
    "uint4", "uint64", "uint8",
]

# Types that only newer ml_dtypes releases provide (JAX exposes each that exists).
for _name in (
    "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn",
    "float4_e2m1fn", "int2", "uint2",
):
    _t = getattr(_dtypes, _name, None)
    if _t is not None:
        globals()[_name] = _make_scalar_type(_t)
        __all__.append(_name)
del _name, _t

# Aliases, as in jax.numpy (`half` is NumPy's name; jax.numpy lacks it).
single = float32
double = float64
half = float16
csingle = complex64
cdouble = complex128
int_ = int64
uint = uint64
float_ = float64
complex_ = complex128

#: All scalar types by name, for kiln.numpy's __init__ and for tests.
scalar_types: dict[str, _ScalarMeta] = {n: globals()[n] for n in __all__}
