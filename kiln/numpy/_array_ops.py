"""Assorted array operations built from ``lax`` and the other ``kiln.numpy`` modules:
``choose``, ``compress``, ``view``, ``resize``, ``diff``, ``cross``, ``block``.
"""
from __future__ import annotations

import math

import numpy as np

from kiln import lax
from kiln.array import Array
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util
from kiln.numpy._shape import (
    _slice_axis,
    broadcast_arrays,
    concatenate,
    moveaxis,
    ravel,
    stack,
    tile,
)
from kiln.numpy._util import (
    as_operand,
    canonicalize_axis,
    check_arraylike,
    ensure_arraylike,
)

__all__ = ["choose", "compress", "view", "resize", "diff", "cross", "block"]


def _shape(x):
    return get_aval(x).shape


def choose(a, choices, out=None, mode="raise"):
    """``choices[a]`` elementwise (``mode`` 'clip' or 'wrap'; 'raise' needs concrete ``a``)."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.choose is not supported.")
    a = ensure_arraylike("choose", a)
    choices = [as_operand(c) for c in (choices if isinstance(choices, (list, tuple))
                                       else list(as_operand(choices)))]
    n = len(choices)
    if mode == "raise":
        if not isinstance(a, Tracer):
            v = np.asarray(a._value)
            if v.size and (v.min() < 0 or v.max() >= n):
                raise ValueError("invalid entry in choice array")
        else:
            raise ConcretizationTypeError(a, "jnp.choose with mode='raise' needs a concrete "
                                             "index; use mode='clip' or 'wrap'.")
    elif mode == "wrap":
        from kiln.numpy._ufuncs import remainder
        a = remainder(a, n)
    elif mode != "clip":
        raise ValueError(f"mode={mode!r} not understood. Must be 'raise', 'wrap', or 'clip'")
    from kiln import dtypes
    a = lax.convert_element_type(a, dtypes.default_int_dtype())
    ops = _util.promote_dtypes(*choices)
    ops = _util.broadcast_arrays(a, *ops)
    idx = lax.max(lax.min(ops[0], n - 1), 0)
    return lax.select_n(idx, *ops[1:])


def compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
    """The slices of ``a`` along ``axis`` where the (concrete) ``condition`` holds."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.compress is not supported.")
    check_arraylike("compress", condition, a)
    condition = _util.concretize(condition)
    if isinstance(condition, Tracer):
        raise ConcretizationTypeError(condition, "jnp.compress needs a concrete condition.")
    cond = np.asarray(condition._value if type(condition) is Array else condition).astype(bool)
    if cond.ndim != 1:
        raise ValueError("condition must be a 1D array")
    a = as_operand(a)
    if axis is None:
        a = ravel(a)
        axis = 0
    axis = canonicalize_axis(axis, get_aval(a).ndim)
    n = _shape(a)[axis]
    idx = np.nonzero(cond[:n])[0]
    from kiln.numpy._indexing import take
    out = take(a, idx, axis=axis, mode="clip")
    if size is not None:
        m = _shape(out)[axis]
        if m > size:
            out = _slice_axis(out, 0, size, axis)
        elif m < size:
            pad_shape = list(_shape(out))
            pad_shape[axis] = size - m
            fill = _util.full_const(tuple(pad_shape), fill_value, get_aval(out).dtype)
            out = lax.concatenate([out, fill], axis)
    return out


def view(a, dtype=None, type=None):  # noqa: A002
    """Reinterpret the bits as ``dtype``; the last axis scales by the itemsize ratio."""
    a = ensure_arraylike("view", a)
    if type is not None:
        raise NotImplementedError("`type` argument of array.view() is not supported.")
    if dtype is None:
        return a
    from kiln import dtypes
    dt = dtypes.check_and_canonicalize_user_dtype(dtype, "view")
    src = get_aval(a).dtype
    if dt == src:
        return a
    shape = _shape(a)
    nbits_in, nbits_out = dtypes.itemsize_bits(src), dtypes.itemsize_bits(dt)
    if src == np.bool_:
        a = lax.convert_element_type(a, np.uint8)
    out_dt = np.dtype(np.uint8) if dt == np.bool_ else dt
    if nbits_in == nbits_out:
        out = lax.bitcast_convert_type(a, out_dt)
    elif not shape or shape[-1] * nbits_in % nbits_out:
        raise ValueError("When changing to a larger dtype, its size must be a divisor of the "
                         "total size in bytes of the last axis of the array.")
    elif nbits_in > nbits_out:
        out = lax.bitcast_convert_type(a, out_dt)
        out = lax.reshape(out, shape[:-1] + (shape[-1] * nbits_in // nbits_out,))
    else:
        k = nbits_out // nbits_in
        a = lax.reshape(a, shape[:-1] + (shape[-1] // k, k))
        out = lax.bitcast_convert_type(a, out_dt)
    if dt == np.bool_:
        out = lax.convert_element_type(out, np.bool_)
    return out


def resize(a, new_shape):
    """Repeat or truncate the flattened array to fill ``new_shape``."""
    a = ensure_arraylike("resize", a)
    new_shape = _util.canonicalize_shape(new_shape)
    n = math.prod(new_shape)
    flat = ravel(a)
    size_ = get_aval(flat).shape[0]
    if size_ == 0 or n == 0:
        from kiln.numpy._creation import zeros
        return zeros(new_shape, get_aval(a).dtype)
    reps = -(-n // size_)
    flat = tile(flat, reps)
    return lax.reshape(_slice_axis(flat, 0, n, 0), new_shape)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th discrete difference along ``axis``."""
    a = ensure_arraylike("diff", a)
    n = _util.core_int(n, "The n argument of jnp.diff must be static.")
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    if n == 0:
        return a
    nd = get_aval(a).ndim
    if nd == 0:
        raise ValueError(f"diff requires input that is at least one dimensional; got {a}")
    axis = canonicalize_axis(axis, nd)
    if prepend is not None or append is not None:
        def _edge(extra):
            e = as_operand(extra)
            if get_aval(e).ndim == 0:
                shape = list(_shape(a))
                shape[axis] = 1
                e = _util.broadcast_to(e, tuple(shape))
            return e
        ops = ([_edge(prepend)] if prepend is not None else []) + [a] + (
            [_edge(append)] if append is not None else [])
        a = concatenate(ops, axis)
    from kiln.numpy._ufuncs import not_equal, subtract
    op = not_equal if get_aval(a).dtype == np.bool_ else subtract
    for _ in range(n):
        m = _shape(a)[axis]
        a = op(_slice_axis(a, 1, m, axis), _slice_axis(a, 0, max(m - 1, 0), axis))
    return a


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross product of 2- or 3-vectors along the given axes."""
    check_arraylike("cross", a, b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _util.promote_dtypes(a, b)
    a = moveaxis(a, axisa, -1)
    b = moveaxis(b, axisb, -1)
    na, nb = _shape(a)[-1], _shape(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("Dimension must be either 2 or 3 for cross product")
    from kiln.numpy._ufuncs import multiply, subtract

    def comp(x, i, n):
        if i >= n:
            return None
        return lax.reshape(_slice_axis(x, i, i + 1, get_aval(x).ndim - 1), _shape(x)[:-1])

    a0, a1, a2 = (comp(a, i, na) for i in range(3))
    b0, b1, b2 = (comp(b, i, nb) for i in range(3))
    if na == 2 and nb == 2:
        return subtract(multiply(a0, b1), multiply(a1, b0))
    zero = 0
    a2 = zero if a2 is None else a2
    b2 = zero if b2 is None else b2
    c0 = subtract(multiply(a1, b2), multiply(a2, b1))
    c1 = subtract(multiply(a2, b0), multiply(a0, b2))
    c2 = subtract(multiply(a0, b1), multiply(a1, b0))
    c = stack(broadcast_arrays(c0, c1, c2), -1)
    return moveaxis(c, -1, axisc)


def block(arrays):
    """Assemble an array from nested lists of blocks."""
    def depth(x):
        return 1 + depth(x[0]) if isinstance(x, list) and x else (1 if isinstance(x, list)
                                                                  else 0)

    def max_ndim(x):
        if isinstance(x, list):
            return max((max_ndim(y) for y in x), default=0)
        return get_aval(as_operand(x)).ndim

    if isinstance(arrays, tuple):
        raise TypeError("jax.numpy.block does not allow tuples, got {arrays}")
    d = depth(arrays)
    nd = max(max_ndim(arrays), d)

    def rec(x, level):
        if isinstance(x, list):
            if not x:
                raise ValueError("Lists cannot be empty")
            parts = [rec(y, level + 1) for y in x]
            return concatenate(parts, axis=-(d - level))
        x = as_operand(x)
        s = _shape(x)
        return lax.reshape(x, (1,) * (nd - len(s)) + s) if len(s) < nd else x

    return rec(arrays, 0)
