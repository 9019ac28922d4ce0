"""Eager fast paths for the commonest ``kiln.numpy`` calls.

When no transformation is active and every operand is already a ``kiln.Array`` of a
plain dtype, a few hot functions (``sum``, ``mean``, ``dot``, ``where``) call the same
NumPy kernels their primitives' impls use, skipping promotion/broadcast bookkeeping.
The results are identical to the general path (same kernels, same dtypes), and NumPy's
floating-point warnings stay inside kiln (:func:`filtered`, ``kiln/_fp_warnings.py``).
"""
from __future__ import annotations

import warnings

import numpy as np

from kiln._fp_warnings import FILTER, NO_FILTER, call_quietly  # noqa: F401  (used by callers)
from kiln._fp_warnings import IGNORE as FP_IGNORE  # noqa: F401
from kiln._fp_warnings import enter as fp_enter  # noqa: F401
from kiln._fp_warnings import leave as fp_leave  # noqa: F401
from kiln.array import Array, make_array
from kiln.core import trace as core
from kiln.numpy._array_methods import _FAST, _scalar_ok

# Dtypes whose promotion/accumulation rules are the identity for these functions.
PLAIN = _PLAIN = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                         np.complex128))


def eager() -> bool:
    return core._state.trace is core.eval_trace and _FAST[0]


def filtered() -> bool:
    """True while kiln's floating-point warnings filter is first in ``warnings.filters``:
    a NumPy call made directly from a kiln frame then needs no error state (see
    kiln/_fp_warnings.py); else callers use ``call_quietly``."""
    return (warnings.filters or NO_FILTER)[0] is FILTER


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


def as_ndarray(r):
    """``r`` as an ndarray: NumPy reductions return scalars for 0-d results."""
    return r if type(r) is np.ndarray else r.__array__()


def wrap(value, weak=False) -> Array:
    return make_array(value, weak)


def where3(condition, x, y):
    """``where(condition, x, y)`` by ``np.where`` when ``condition`` is a boolean Array and
    ``x``/``y`` are Arrays of one dtype (or one of them a Python scalar that keeps the other's
    dtype), with no transformation active; else None. Selection needs no promotion, so
    any dtype qualifies; the result is weak only when both operands are."""
    if not eager():
        return None
    c = condition._value
    if c.dtype != np.bool_:
        return None
    if type(x) is Array:
        xv = x._value
        dt = xv.dtype
        if type(y) is Array:
            yv = y._value
            if yv.dtype != dt:
                return None
            weak = x.weak_type and y.weak_type
        elif _scalar_ok(dt, y):
            yv, weak = dt.type(y), x.weak_type
        else:
            return None
    elif type(y) is Array and _scalar_ok(y._value.dtype, x):
        yv = y._value
        dt = yv.dtype
        xv, weak = dt.type(x), y.weak_type
    else:
        return None
    try:
        return make_array(np.where(c, xv, yv), weak)
    except ValueError:  # shapes don't broadcast: the general path raises JAX's error
        return None
