"""``jax._src.earray``: ``EArray``, a concrete array of an extended dtype.

In kiln such an array is a ``kiln.Array`` whose storage is its physical data tagged with
the extended dtype (``kiln._extended.EValue``); ``EArray(aval, data)`` builds one, and
``isinstance(x, EArray)`` recognises them, as JAX's class does.
"""
from __future__ import annotations

import numpy as np

from kiln._extended import EValue, has_rules, physical_aval
from kiln.array import ArrayImpl, make_array

__all__ = ["EArray"]


class _EArrayMeta(type):
    def __instancecheck__(cls, x) -> bool:
        return type(x) is ArrayImpl and type(x._value) is EValue


class EArray(metaclass=_EArrayMeta):
    """An array of the extended dtype ``aval.dtype`` over ``data``, its physical value
    (an array of the dtype's representation dtype and of ``aval``'s shape)."""

    def __new__(cls, aval, data):
        if not has_rules(aval.dtype):
            raise TypeError(f"EArray needs an extended dtype with rules, got {aval.dtype}")
        phys = physical_aval(aval)
        v = getattr(data, "_value", data)
        if type(v) is EValue:
            v = v.data
        v = np.asarray(v)
        if v.shape != tuple(phys.shape) or v.dtype != phys.dtype:
            raise ValueError(f"EArray data of shape {v.shape} and dtype {v.dtype} does not "
                             f"match {phys.str_short()}, the storage of {aval.str_short()}")
        return make_array(EValue(v, aval.dtype), aval.weak_type)
