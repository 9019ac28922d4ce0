"""Eager fast paths for the commonest ``kiln.numpy`` calls.

When no transformation is active and every operand is already a ``kiln.Array`` of a
plain dtype, a few hot functions (``sum``, ``mean``, ``dot``, ``where``) call the same
NumPy kernels their primitives' impls use, skipping promotion/broadcast bookkeeping.
The results are identical to the general path (same kernels, same dtypes).
"""
from __future__ import annotations

import numpy as np

from kiln._array_methods import _FAST
from kiln.array import Array, make_array
from kiln.core import trace as core

# Dtypes whose promotion/accumulation rules are the identity for these functions.
_PLAIN = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                         np.complex128))


def eager() -> bool:
    return core._state.trace is core.eval_trace and _FAST[0]


def plain_values(*xs):
    """The NumPy values of ``xs`` if all are Arrays of one plain dtype, else None."""
    if not eager():
        return None
    vals = []
    dt = None
    for x in xs:
        if type(x) is not Array:
            return None
        v = x._value
        if dt is None:
            dt = v.dtype
            if dt not in _PLAIN:
                return None
        elif v.dtype != dt:
            return None
        vals.append(v)
    return vals


def axes_of(axis, ndim):
    """Normalized reduction axes (tuple) or None when ``axis`` is unusual."""
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int:
        if -ndim <= axis < ndim:
            return (axis % ndim,)
        return None
    if type(axis) is tuple and all(type(a) is int for a in axis):
        try:
            out = tuple(sorted(a % ndim for a in axis))
        except ZeroDivisionError:
            return None
        if len(set(out)) != len(out) or any(not -ndim <= a < ndim for a in axis):
            return None
        return out
    return None


def wrap(value, weak=False) -> Array:
    return make_array(value, weak)
