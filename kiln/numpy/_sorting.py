"""Sorting and searching, as in ``jax.numpy``: ``sort``, ``argsort``, ``lexsort``,
``partition``, ``argpartition``, ``sort_complex``, ``searchsorted``, ``digitize``.

Every ordering goes through ``lax.sort`` / ``lax.top_k`` (JAX's order: -0.0 == 0.0, NaN
last, complex by (real, imag)). ``searchsorted`` is a binary search built from ``lax``
comparisons and gathers (so it traces, batches and differentiates to zero); concrete
inputs take NumPy's ``searchsorted``, whose order is the same.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array, make_array
from kiln.core.trace import Tracer, get_aval
from kiln.lax.gather_scatter import GatherDimensionNumbers, ScatterDimensionNumbers
from kiln.numpy import _util


def _canon_axis(axis, ndim):
    return _util.canonicalize_axis(axis, ndim)


def _index_dtype_for(n):
    """JAX's index dtype for an axis of size ``n``: int32 (the default int when that is
    32-bit), int64 beyond."""
    if n < 2 ** 31:
        return dtypes.default_int_dtype()
    return np.dtype(np.int64)


def _check_kind_order(name, kind, order):
    if kind is not None:
        raise TypeError(f"'kind' argument to {name} is not supported. Use stable=True or "
                        "stable=False to specify sort stability.")
    if order is not None:
        raise TypeError(f"'order' argument to {name} is not supported.")


def _static_bool(x, what):
    from kiln.core.trace import concretize
    x = concretize(x)
    if isinstance(x, Tracer):
        from kiln.errors import ConcretizationTypeError
        raise ConcretizationTypeError(x, f"{what} must be static.")
    return bool(x)


def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """A sorted copy of ``a`` along ``axis`` (flattened when None); NaNs last, -0.0 == 0.0.
    ``descending`` reverses the result."""
    arr = _util.ensure_arraylike("sort", a)
    _check_kind_order("sort", kind, order)
    if axis is None:
        arr = lax.reshape(arr, (get_aval(arr).size,))
        axis = 0
    dim = _canon_axis(axis, get_aval(arr).ndim)
    out = lax.sort(arr, dimension=dim, is_stable=_static_bool(stable, "stable"))
    return lax.rev(out, (dim,)) if _static_bool(descending, "descending") else out


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False, dtype=None):
    """Indices that sort ``a`` along ``axis`` (flattened when None). With ``descending`` and
    ``stable``, equal elements keep their original order."""
    arr = _util.ensure_arraylike("argsort", a)
    _check_kind_order("argsort", kind, order)
    if axis is None:
        arr = lax.reshape(arr, (get_aval(arr).size,))
        axis = 0
    shape = get_aval(arr).shape
    dim = _canon_axis(axis, len(shape))
    if dtype is not None:
        idx_dt = dtypes.check_and_canonicalize_user_dtype(dtype, "argsort")
    else:
        idx_dt = _index_dtype_for(shape[dim])
    stable = _static_bool(stable, "stable")
    descending = _static_bool(descending, "descending")
    iota = lax.broadcasted_iota(idx_dt, shape, dim)
    if descending and stable:
        arr = lax.rev(arr, (dim,))
        iota = lax.rev(iota, (dim,))
    _, idx = lax.sort_key_val(arr, iota, dimension=dim, is_stable=stable)
    return lax.rev(idx, (dim,)) if descending else idx


def lexsort(keys, axis=-1):
    """Indices sorting by several keys; the last key is the primary one."""
    if isinstance(keys, (Array, Tracer, np.ndarray)):
        keys = [keys[i] for i in range(get_aval(keys).shape[0])] if not isinstance(
            keys, np.ndarray) else list(keys)
    keys = tuple(keys)
    _util.check_arraylike("lexsort", *keys)
    if len(keys) == 0:
        raise TypeError("need sequence of keys with len > 0 in lexsort")
    keys = tuple(_util.as_operand(k) for k in keys)
    if len({get_aval(k).shape for k in keys}) > 1:
        raise ValueError("all keys need to be the same shape")
    shape = get_aval(keys[0]).shape
    if len(shape) == 0:
        return _util.scalar_const(0, dtypes.default_int_dtype())
    dim = _canon_axis(axis, len(shape))
    iota = lax.broadcasted_iota(_index_dtype_for(shape[dim]), shape, dim)
    return lax.sort((*keys[::-1], iota), dimension=dim, num_keys=len(keys))[-1]


def sort_complex(a):
    """``a`` sorted along its last axis (real part first), as a complex array."""
    a = _util.ensure_arraylike("sort_complex", a)
    out = lax.sort(a, dimension=get_aval(a).ndim - 1) if get_aval(a).ndim else a
    return lax.convert_element_type(out, dtypes.to_complex_dtype(get_aval(out).dtype))


def _neg(x):
    return lax.neg(x)


def _kth(kth, n):
    kth = operator.index(kth)
    if not -n <= kth < n:
        raise ValueError(f"kth {kth} is out of bounds for axis of size {n}")
    return kth % n


def partition(a, kth, axis=-1):
    """A copy of ``a`` with the ``kth`` element in its sorted place, smaller ones before and
    larger ones after it (in no particular order); built from two ``lax.top_k``."""
    arr = _util.ensure_arraylike("partition", a)
    dt = get_aval(arr).dtype
    if dtypes.issubdtype(dt, np.complexfloating):
        raise NotImplementedError("jnp.partition for complex dtype is not implemented.")
    nd = get_aval(arr).ndim
    axis = _canon_axis(axis, nd)
    kth = _kth(kth, get_aval(arr).shape[axis])
    arr = _swap_last(arr, axis)
    n = get_aval(arr).shape[-1]
    if dtypes.issubdtype(dt, np.unsignedinteger):
        one = _util.scalar_const(1, dt)
        shifted = lax.add(arr, lax.broadcast_in_dim(one, get_aval(arr).shape, ()))
        bottom = lax.sub(_neg(lax.top_k(_neg(shifted), kth + 1)[0]),
                         lax.broadcast_in_dim(one, get_aval(arr).shape[:-1] + (kth + 1,), ()))
    else:
        bottom = _neg(lax.top_k(_neg(arr), kth + 1)[0])
    top = lax.top_k(arr, n - kth - 1)[0]
    out = lax.concatenate([bottom, top], get_aval(arr).ndim - 1)
    return _swap_last(out, axis)


def argpartition(a, kth, axis=-1):
    """Indices that partition ``a`` at ``kth`` (see ``partition``)."""
    arr = _util.ensure_arraylike("partition", a)
    dt = get_aval(arr).dtype
    if dtypes.issubdtype(dt, np.complexfloating):
        raise NotImplementedError("jnp.argpartition for complex dtype is not implemented.")
    nd = get_aval(arr).ndim
    axis = _canon_axis(axis, nd)
    kth = _kth(kth, get_aval(arr).shape[axis])
    arr = _swap_last(arr, axis)
    shape = get_aval(arr).shape
    if dtypes.issubdtype(dt, np.unsignedinteger):
        one = lax.broadcast_in_dim(_util.scalar_const(1, dt), shape, ())
        bottom_ind = lax.top_k(_neg(lax.add(arr, one)), kth + 1)[1]
    else:
        bottom_ind = lax.top_k(_neg(arr), kth + 1)[1]
    # The top indices come from a proxy that is 0 where the bottom ones are (duplicates in
    # the values cannot make an index appear twice).
    batch = tuple(range(len(shape) - 1))
    dn = ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(len(shape) - 1,),
                                 scatter_dims_to_operand_dims=(len(shape) - 1,),
                                 operand_batching_dims=batch,
                                 scatter_indices_batching_dims=batch)
    ones = _util.full_const(shape, 1.0, np.float32)
    idx = lax.reshape(bottom_ind, get_aval(bottom_ind).shape + (1,))
    proxy = lax.scatter(ones, idx, _util.full_const(get_aval(bottom_ind).shape, 0.0,
                                                    np.float32), dn)
    top_ind = lax.top_k(proxy, shape[-1] - kth - 1)[1]
    out = lax.concatenate([bottom_ind, top_ind], len(shape) - 1)
    return _swap_last(out, axis)


def _swap_last(x, axis):
    nd = get_aval(x).ndim
    if axis == nd - 1:
        return x
    perm = list(range(nd))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return lax.transpose(x, tuple(perm))


# ----------------------------------------------------------------------------------------------
# searchsorted


_METHODS = ("compare_all", "scan", "scan_unrolled", "sort")


def _canonical_key(x):
    """Float keys with -0.0 folded into 0.0 (NaNs stay NaN): JAX's sort canonicalization."""
    zero = lax.broadcast_in_dim(_util.scalar_const(0, get_aval(x).dtype), get_aval(x).shape, ())
    return lax.select(lax.eq(x, zero), zero, x)


def _parts(x):
    dt = get_aval(x).dtype
    if dtypes.issubdtype(dt, np.complexfloating):
        return [_canonical_key(lax.real(x)), _canonical_key(lax.imag(x))]
    if dtypes.issubdtype(dt, np.floating):
        return [_canonical_key(x)]
    return [x]


def _isnan(x):
    return lax.ne(x, x)


def _lt_eq_part(x, y):
    """(x < y, x == y) in the total order with NaN last (for one real key part)."""
    if dtypes.issubdtype(get_aval(x).dtype, np.floating):
        nx, ny = _isnan(x), _isnan(y)
        lt = lax.bitwise_or(lax.lt(x, y), lax.bitwise_and(ny, lax.bitwise_not(nx)))
        eq = lax.bitwise_or(lax.eq(x, y), lax.bitwise_and(nx, ny))
        return lt, eq
    if get_aval(x).dtype == np.bool_:
        return lax.bitwise_and(lax.bitwise_not(x), y), lax.eq(x, y)
    return lax.lt(x, y), lax.eq(x, y)


def _compare(x, y, strict):
    """Lexicographic ``x < y`` (``strict``) or ``x <= y`` in JAX's sort order."""
    out = None
    for px, py in reversed(list(zip(_parts(x), _parts(y)))):
        lt, eq = _lt_eq_part(px, py)
        if out is None:
            out = lt if strict else lax.bitwise_or(lt, eq)
        else:
            out = lax.bitwise_or(lt, lax.bitwise_and(eq, out))
    return out


def _bsearch(a, v, side, out_dt):
    """Binary search of every element of ``v`` in sorted 1-D ``a`` (lax ops only)."""
    n = get_aval(a).shape[0]
    vshape = get_aval(v).shape
    idt = np.dtype(np.int32) if n < 2 ** 31 - 1 else np.dtype(np.int64)
    low = _util.full_const(vshape, 0, idt)
    high = _util.full_const(vshape, n, idt)
    two = _util.full_const(vshape, 2, idt)
    dn = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    for _ in range(int(math.ceil(math.log2(n + 1)))):
        mid = lax.add(low, lax.div(lax.sub(high, low), two))
        a_mid = lax.gather(a, lax.reshape(mid, vshape + (1,)), dn, (1,))
        # left: v <= a[mid] ⇒ the answer is at most mid; right: v < a[mid].
        go_left = _compare(v, a_mid, strict=(side == "right"))
        low = lax.select(go_left, low, mid)
        high = lax.select(go_left, mid, high)
    return lax.convert_element_type(high, out_dt)


def _count_below(a, v, side, out_dt):
    n = get_aval(a).shape[0]
    vshape = get_aval(v).shape
    full = vshape + (n,)
    ab = lax.broadcast_in_dim(a, full, (len(vshape),))
    vb = lax.broadcast_in_dim(v, full, tuple(range(len(vshape))))
    # left: count a < v; right: count a <= v.
    hit = _compare(ab, vb, strict=(side == "left"))
    cnt = lax.reduce_sum(lax.convert_element_type(hit, out_dt), (len(vshape),))
    return cnt


def searchsorted(a, v, side="left", sorter=None, *, method="scan"):
    """Insertion indices of ``v`` into the sorted 1-D ``a`` (``a[sorter]`` when given) that
    keep it sorted; ``side`` picks the left or right end of runs of equal values.

    ``method`` ('scan', 'scan_unrolled', 'sort', 'compare_all') only changes the algorithm;
    the results are int32 (int64 for axes of 2**31 or more) and identical."""
    if sorter is None:
        a, v = _util.ensure_arraylike("searchsorted", a, v)
    else:
        a, v, sorter = _util.ensure_arraylike("searchsorted", a, v, sorter)
    if get_aval(a).ndim != 1:
        raise ValueError("a should be 1-dimensional")
    if side not in ("left", "right"):
        raise ValueError(f"invalid argument side={side!r}, expected 'left' or 'right'")
    if method not in _METHODS:
        raise ValueError(f"invalid argument method={method!r}, expected one of "
                         f"{list(_METHODS)}")
    a, v = _util.promote_dtypes(a, v)
    if sorter is not None:
        from kiln.numpy._indexing import _rewriting_take
        a = _rewriting_take(a, sorter)
    n = get_aval(a).shape[0]
    out_dt = np.dtype(np.int32) if n < 2 ** 31 else np.dtype(np.int64)
    # int64 with x64 off is an explicit 64-bit request (warned and truncated by default):
    # then the indices up to n do not fit, as in JAX (NumPy's OverflowError)
    out_dt = dtypes.canonicalize_explicit_dtype(out_dt, "searchsorted", stacklevel=3)
    if n > np.iinfo(out_dt).max:
        raise OverflowError(f"Python integer {n} out of bounds for {out_dt}")
    vshape = get_aval(v).shape
    if n == 0:
        return _util.full_const(vshape, 0, out_dt)
    if type(a) is Array and type(v) is Array:
        av, vv = np.asarray(a._value), np.asarray(v._value)
        if av.dtype == dtypes.bfloat16:
            av, vv = av.astype(np.float32), vv.astype(np.float32)
        return make_array(np.asarray(np.searchsorted(av, vv, side=side), out_dt))
    if method == "compare_all":
        return _count_below(a, v, side, out_dt)
    return _bsearch(a, v, side, out_dt)


def digitize(x, bins, right=False, *, method=None):
    """The index of the bin of every element of ``x`` (``bins`` increasing or decreasing);
    ``right`` makes intervals closed on the right."""
    x, bins = _util.ensure_arraylike("digitize", x, bins)
    right = _static_bool(right, "right argument of jnp.digitize()")
    if get_aval(bins).ndim != 1:
        raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
    nb = get_aval(bins).shape[0]
    if nb == 0:
        return _util.full_const(get_aval(x).shape, 0, np.int32)
    side = "right" if not right else "left"
    kw = {} if method is None else {"method": method}
    up = searchsorted(bins, x, side=side, **kw)
    down = lax.sub(_util.full_const(get_aval(up).shape, nb, get_aval(up).dtype),
                   searchsorted(lax.rev(bins, (0,)), x, side=side, **kw))
    first = lax.reshape(lax.slice(bins, (0,), (1,)), ())
    last = lax.reshape(lax.slice(bins, (nb - 1,), (nb,)), ())
    increasing = lax.ge(last, first)
    return lax.select(lax.broadcast_in_dim(increasing, get_aval(up).shape, ()), up, down)


__all__ = ["sort", "argsort", "lexsort", "partition", "argpartition", "sort_complex",
           "searchsorted", "digitize"]
