"""Index helpers: ``ravel_multi_index``, ``unravel_index``, ``indices``, the
``diag/tril/triu_indices`` families, ``ix_``, ``s_`` and ``index_exp``.

Shapes and counts are static; index values may be traced where noted.
"""
from __future__ import annotations

import math

import numpy as np

from kiln import lax
from kiln.array import make_array
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util
from kiln.numpy._util import (
    as_operand,
    check_arraylike,
    ensure_arraylike,
)

__all__ = ["ravel_multi_index", "unravel_index", "indices", "diag_indices", "tril_indices",
           "triu_indices", "diag_indices_from", "tril_indices_from", "triu_indices_from",
           "ix_", "s_", "index_exp"]


def _shape(x):
    return get_aval(x).shape


def ravel_multi_index(multi_index, dims, mode="raise", order="C", *, dtype=None):
    """Flat indices of coordinate arrays (``jnp.ravel_multi_index``).

    Args:
      multi_index: a sequence of integer index arrays, one per dimension.
      dims: the static sizes of the dimensions.
      mode: ``'raise'`` (concrete indices only: ValueError when one is out of bounds),
        ``'clip'``, ``'wrap'`` or ``'ignore'`` (no check; out-of-bounds results are
        unspecified).
      order: ``'C'`` (row-major) or ``'F'`` (column-major).
      dtype: the integer dtype of the result; by default the promoted dtype of the
        indices with a Python int (so int8 indices give int8, as in JAX). ValueError
        when ``prod(dims) - 1`` does not fit in it.

    Returns:
      The flat indices, broadcast over the index arrays.
    """
    check_arraylike("ravel_multi_index", *multi_index)
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    dims = tuple(_util.core_int(d, "dims must be static") for d in dims)
    from kiln import dtypes
    from kiln.numpy._ufuncs import add, clip, multiply, remainder
    idx = [as_operand(i) for i in multi_index]
    if dtype is None:
        dtype = dtypes.canonicalize_dtype(dtypes.result_type(int, *idx))
    else:
        dtype = dtypes.canonicalize_dtype(_util.user_dtype(dtype, "ravel_multi_index"))
    if not dtypes.issubdtype(dtype, np.integer):
        raise ValueError(f"dtype={np.dtype(dtype)!r} is not an integer type.")
    if int(np.prod(dims, dtype=object)) - 1 > dtypes.iinfo(dtype).max:
        raise ValueError(
            f"jnp.ravel_multi_index: dtype={np.dtype(dtype)!r} not large enough to hold the "
            f"flattened index for dims={dims}. Pass a larger integer dtype with the dtype "
            "argument (e.g. dtype=np.min_scalar_type(prod(dims))).")
    for i in idx:
        if not dtypes.issubdtype(get_aval(i).dtype, np.integer):
            raise TypeError("only int indices permitted")
    if mode == "raise":
        for i, d in zip(idx, dims):
            if isinstance(i, Tracer):
                raise ConcretizationTypeError(i, "ravel_multi_index with mode='raise' needs "
                                                 "concrete indices; use mode='clip' or 'wrap'")
            v = np.asarray(i._value)
            if v.size and (v.min() < 0 or v.max() >= d):
                raise ValueError("invalid entry in coordinates array")
    elif mode == "clip":
        idx = [clip(i, 0, d - 1) for i, d in zip(idx, dims)]
    elif mode == "wrap":
        idx = [remainder(i, d) for i, d in zip(idx, dims)]
    elif mode != "ignore":
        raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', 'clip', or "
                         "'ignore'.")
    if order not in ("C", "F"):
        raise ValueError(f"invalid order={order!r}. Expected 'C' or 'F'")
    order_dims = range(len(dims)) if order == "C" else range(len(dims) - 1, -1, -1)
    out = make_array(np.zeros((), dtype))
    stride = 1
    for k in reversed(list(order_dims)):
        out = add(out, multiply(lax.convert_element_type(idx[k], dtype),
                                make_array(np.asarray(stride, dtype))))
        stride *= dims[k]
    return as_operand(out)


def unravel_index(indices, shape):
    """Coordinate arrays of flat ``indices`` into an array of ``shape``."""
    indices = ensure_arraylike("unravel_index", indices)
    shape = _util.canonicalize_shape(shape)
    from kiln.numpy._ufuncs import clip, floor_divide, remainder
    total = math.prod(shape)
    from kiln.numpy._ufuncs import where
    idx = where(lax.lt(indices, _util.zeros_like_op(indices)),
                lax.add(indices, _util.broadcast_to(
                    _util.scalar_const(total, get_aval(indices).dtype), _shape(indices))),
                indices)
    idx = clip(idx, 0, max(total - 1, 0))
    out = []
    for d in reversed(shape):
        out.append(remainder(idx, d))
        idx = floor_divide(idx, d)
    return tuple(reversed(out))


def indices(dimensions, dtype=None, sparse=False):
    """Grids of indices for an array of shape ``dimensions``."""
    from kiln import dtypes
    dimensions = _util.canonicalize_shape(dimensions)
    dt = _util.user_dtype(dtype, "indices") or dtypes.default_int_dtype()
    nd = len(dimensions)
    out = []
    for i, d in enumerate(dimensions):
        io = lax.iota(dt, d)
        if sparse:
            s = [1] * nd
            s[i] = d
            out.append(lax.reshape(io, tuple(s)))
        else:
            out.append(lax.broadcast_in_dim(io, dimensions, (i,)))
    if sparse:
        return tuple(out)
    if not out:
        return _util.full_const((0,), 0, dt)
    from kiln.numpy._shape import stack
    return stack(out, 0)


def diag_indices(n, ndim=2):
    """Indices of the main diagonal of an ``ndim``-dimensional ``n``-cube."""
    from kiln import dtypes
    n = _util.core_int(n, "n must be static")
    idx = make_array(np.arange(n, dtype=dtypes.default_int_dtype()))
    return (idx,) * ndim


def tril_indices(n, k=0, m=None):
    """Indices of the lower triangle of an (n, m) array."""
    from kiln import dtypes
    r, c = np.tril_indices(n, k, m)
    dt = dtypes.default_int_dtype()
    return make_array(r.astype(dt)), make_array(c.astype(dt))


def triu_indices(n, k=0, m=None):
    """Indices of the upper triangle of an (n, m) array."""
    from kiln import dtypes
    r, c = np.triu_indices(n, k, m)
    dt = dtypes.default_int_dtype()
    return make_array(r.astype(dt)), make_array(c.astype(dt))


def diag_indices_from(arr):
    """``diag_indices`` for a square array."""
    arr = ensure_arraylike("diag_indices_from", arr)
    s = _shape(arr)
    if len(s) < 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(s)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return diag_indices(s[0], len(s))


def tril_indices_from(arr, k=0):
    """``tril_indices`` for the shape of a 2-D array."""
    arr = ensure_arraylike("tril_indices_from", arr)
    s = _shape(arr)
    if len(s) != 2:
        raise ValueError("input array must be 2-d")
    return tril_indices(s[0], k=k, m=s[1])


def triu_indices_from(arr, k=0):
    """``triu_indices`` for the shape of a 2-D array."""
    arr = ensure_arraylike("triu_indices_from", arr)
    s = _shape(arr)
    if len(s) != 2:
        raise ValueError("input array must be 2-d")
    return triu_indices(s[0], k=k, m=s[1])


def ix_(*args):
    """Open meshes of 1-D index arrays, for ``x[ix_(rows, cols)]``."""
    check_arraylike("ix_", *args)
    n = len(args)
    out = []
    for i, a in enumerate(args):
        a = as_operand(a)
        if get_aval(a).ndim != 1:
            raise ValueError(f"Arguments to jax.numpy.ix_ must be 1-dimensional, got shape "
                             f"{_shape(a)}")
        if get_aval(a).dtype == np.bool_:
            raise NotImplementedError("Boolean arguments to jax.numpy.ix_ are not implemented")
        shape = [1] * n
        shape[i] = _shape(a)[0]
        out.append(lax.reshape(a, tuple(shape)))
    return tuple(out)


class _IndexExpression:
    """``s_[...]`` / ``index_exp[...]``: build index tuples with slice syntax."""

    def __init__(self, maketuple):
        self.maketuple = maketuple

    def __getitem__(self, item):
        if self.maketuple and not isinstance(item, tuple):
            return (item,)
        return item


s_ = _IndexExpression(False)
index_exp = _IndexExpression(True)
