"""Extended dtypes with rules (``dtypes.ExtendedDType`` subclasses carrying ``_rules``,
such as Flax's fp8 "meta" dtype): their physical storage.

An array of such a dtype is stored as an array of its *representation* dtype
(``dtype._rules.physical_element_aval(dtype)``, of element shape ``()``): the abstract
value (and so the jaxpr type) has the extended dtype; every primitive's NumPy impl, the
reference backend and compiled programs see the physical data. Eagerly, a concrete
array's storage is an :class:`EValue` (the physical data and the extended dtype), which
``EvalTrace`` unwraps before an impl runs and wraps again around outputs whose abstract
dtype is extended. ``kiln.core.physical`` rewrites a jaxpr to its physical form for
``EvalTrace``, the backends and the compiler (it needs the jaxpr IR, above this module).

PRNG key dtypes are not of this kind: key arrays cross transformations as their uint32
data (``kiln.random._keys``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.dtypes import ExtendedDType


def has_rules(dtype: Any) -> bool:
    """Whether ``dtype`` is an extended dtype with rules stored physically here. Typed PRNG
    key dtypes have rules too but are kiln's own kind (``kiln.random._key_rules``: their
    arrays reach primitives as their ``uint32`` data), so they are not."""
    return (isinstance(dtype, ExtendedDType) and getattr(dtype, "_rules", None) is not None
            and not _is_key_dtype(dtype))


def _is_key_dtype(dtype) -> bool:
    from kiln.dtypes import prng_key
    t = getattr(dtype, "type", None)
    return isinstance(t, type) and issubclass(t, prng_key)


def rep_dtype(dtype: Any) -> np.dtype:
    """The representation (physical element) dtype of an extended dtype with rules."""
    elem = dtype._rules.physical_element_aval(dtype)
    if tuple(elem.shape) != ():
        raise NotImplementedError(
            f"extended dtype {dtype}: kiln stores extended dtypes whose physical element "
            f"shape is () only; its physical element is {elem.shape}")
    return np.dtype(elem.dtype)


def physical_aval(aval: ShapedArray) -> ShapedArray:
    """``aval`` with an extended dtype replaced by its representation dtype."""
    if has_rules(aval.dtype):
        return ShapedArray(aval.shape, rep_dtype(aval.dtype), aval.weak_type)
    return aval


class EValue:
    """The storage of a concrete array of an extended dtype: its physical NumPy ``data``
    (of the representation dtype, the same shape) and the extended ``dtype``."""

    __slots__ = ("data", "dtype")

    def __init__(self, data: np.ndarray, dtype: Any):
        self.data = data
        self.dtype = dtype

    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            f"an array of the extended dtype {self.dtype} has no NumPy value; convert it to "
            f"its representation dtype first (lax.convert_element_type(x, "
            f"{self.data.dtype.name}))")

    def __repr__(self) -> str:
        return f"EValue({self.data!r}, dtype={self.dtype})"


def physical(v: Any) -> Any:
    """The physical NumPy value of an eager value (``EValue``s unwrapped)."""
    return v.data if type(v) is EValue else v


def wrap(value: Any, aval: ShapedArray) -> Any:
    """``value`` (physical) as the storage of an array of ``aval``."""
    if has_rules(getattr(aval, "dtype", None)) and type(value) is not EValue:
        return EValue(np.asarray(value), aval.dtype)
    return value


def involves_extended(vals, out_avals) -> bool:
    """Whether an eager primitive application has an extended input or output."""
    return any(type(v) is EValue for v in vals) or \
        any(has_rules(getattr(a, "dtype", None)) for a in out_avals)
