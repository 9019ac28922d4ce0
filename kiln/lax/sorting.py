"""Sorting primitives: ``sort`` (multi-operand, lexicographic on the first ``num_keys``
operands) and ``top_k``, each beside its jvp and batching rules, with the public wrappers
``sort``, ``sort_key_val`` and ``top_k``.

Orders follow JAX:

* ``sort``: -0.0 and 0.0 compare equal, every NaN (either sign) sorts after +inf, complex
  numbers sort by (real, imag) with the same rule on each part; the sort is stable (also
  when ``is_stable=False``, which only allows instability).
* ``top_k``: the total order of the float bit patterns (-NaN < -inf < ... < -0.0 < 0.0 < ...
  < inf < NaN), largest first, the lower index first among equal values.

Derivatives move tangents with the sorting permutation (a gather with batching dims).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax._factory import standard_primitive
from kiln.lax.gather_scatter import GatherDimensionNumbers, GatherScatterMode, gather
from kiln.lax.slicing import broadcasted_iota
from kiln.lax.structural import broadcast_in_dim, reshape

# ----------------------------------------------------------------------------------------------
# NumPy ordering helpers


def _key_parts(x):
    """Arrays whose lexicographic order (each ascending, NaN last) is JAX's order of ``x``."""
    if x.dtype.kind == "c":
        return [np.real(x), np.imag(x)]
    if x.dtype == dtypes.bfloat16 or (x.dtype.kind == "f" and x.dtype.itemsize < 2):
        return [x.astype(np.float32)]
    if x.dtype.kind == "V" or (x.dtype.kind not in "biuf"):
        return [x.astype(np.float32)]
    return [x]


def _sort_order(keys):
    """Stable lexicographic argsort along the last axis (first key primary)."""
    parts = [p for k in keys for p in _key_parts(k)]
    order = None
    for p in reversed(parts):
        if order is None:
            order = np.argsort(p, axis=-1, kind="stable")
        else:
            o = np.argsort(np.take_along_axis(p, order, -1), axis=-1, kind="stable")
            order = np.take_along_axis(order, o, -1)
    return order


def _sort_impl(*operands, dimension, is_stable, num_keys):
    if len(operands) == 1:
        x = np.asarray(operands[0])
        if x.dtype.kind in "biu" or (x.dtype.kind == "f" and x.dtype != dtypes.bfloat16
                                     and x.dtype.itemsize >= 2):
            # NumPy's order is JAX's here (NaN last, -0.0 == 0.0 kept in place)
            return [np.sort(x, axis=dimension, kind="stable")]
    ops = [np.moveaxis(np.asarray(o), dimension, -1) for o in operands]
    order = _sort_order(ops[:num_keys])
    return [np.moveaxis(np.take_along_axis(o, order, -1), -1, dimension) for o in ops]


def _sort_abstract_eval(*avals, dimension, is_stable, num_keys):
    if not avals:
        raise TypeError("Sort requires at least one operand")
    if any(a.shape != avals[0].shape for a in avals[1:]):
        shapes = " ".join(str(a.shape) for a in avals)
        raise TypeError(f"Arguments to sort must have equal shapes, got: {shapes}")
    if not 0 <= dimension < avals[0].ndim:
        raise ValueError(f"sort dimension {dimension} is out of bounds for operands of rank "
                         f"{avals[0].ndim}")
    if not 1 <= num_keys <= len(avals):
        raise ValueError(f"num_keys={num_keys} must be between 1 and len(operand)={len(avals)}")
    return [ShapedArray(a.shape, a.dtype, a.weak_type) for a in avals]


sort_p = standard_primitive("sort", _sort_abstract_eval, _sort_impl,
                            weak_type_rule=lambda *ws, **_: list(ws), multiple_results=True)


def _permute_tangent(t, perm, dimension):
    """``t`` reordered along ``dimension`` by ``perm`` (same shape), as a gather."""
    shape = get_aval(t).shape
    rank = len(shape)
    others = tuple(i for i in range(rank) if i != dimension)
    dn = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(dimension,),
                                start_index_map=(dimension,), operand_batching_dims=others,
                                start_indices_batching_dims=others)
    idx = reshape(perm, shape + (1,))
    return gather(t, idx, dn, (1,) * rank, mode=GatherScatterMode.PROMISE_IN_BOUNDS)


def _index_dtype(n):
    return np.dtype(np.int32) if n < 2 ** 31 else np.dtype(np.int64)


def _sort_jvp(primals, tangents, *, dimension, is_stable, num_keys):
    shape = get_aval(primals[0]).shape
    iota = broadcasted_iota(_index_dtype(shape[dimension] if shape else 1), shape, dimension)
    outs = sort_p.bind(*primals, iota, dimension=dimension, is_stable=is_stable,
                       num_keys=num_keys)
    perm = outs[-1]
    t_out = [Zero.from_primal_value(o) if type(t) is Zero else _permute_tangent(t, perm,
                                                                               dimension)
             for o, t in zip(outs[:-1], tangents)]
    return list(outs[:-1]), t_out


def _sort_batch(axis_data, vals, dims, *, dimension, is_stable, num_keys):
    ref, bd = next((v, d) for v, d in zip(vals, dims) if d is not None)
    shape = get_aval(ref).shape
    args = []
    for v, d in zip(vals, dims):
        if d is None:
            keep = tuple(i for i in range(len(shape)) if i != bd)
            args.append(broadcast_in_dim(v, shape, keep))
        else:
            args.append(batching.moveaxis(v, d, bd))
    new_dim = dimension + (1 if bd <= dimension else 0)
    outs = sort_p.bind(*args, dimension=new_dim, is_stable=is_stable, num_keys=num_keys)
    return outs, [bd] * len(outs)


ad.jvp_rules[sort_p] = _sort_jvp
batching.batch_rules[sort_p] = _sort_batch


def _canonical_dim(dimension, ndim):
    d = int(dimension)
    if not -ndim <= d < ndim:
        raise ValueError(f"axis {d} is out of bounds for array of dimension {ndim}")
    return d % ndim


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """Sort ``operand`` (an array, or a sequence of equally shaped arrays sorted together,
    lexicographically by the first ``num_keys``) along ``dimension``.

    -0.0 equals 0.0 and NaNs sort to the end; complex values sort by real then imaginary
    part. Returns an array for an array operand, a tuple for a sequence.
    """
    if isinstance(operand, Sequence) and not isinstance(operand, str):
        if len(operand) == 0:
            raise TypeError("Sort requires at least one operand")
        if not 1 <= num_keys <= len(operand):
            raise ValueError(f"num_keys={num_keys} must be between 1 and "
                             f"len(operand)={len(operand)}")
        dim = _canonical_dim(dimension, get_aval(operand[0]).ndim)
        return tuple(sort_p.bind(*operand, dimension=dim, is_stable=bool(is_stable),
                                 num_keys=int(num_keys)))
    if num_keys != 1:
        raise ValueError(f"num_keys={num_keys} must equal 1 for a single operand.")
    dim = _canonical_dim(dimension, get_aval(operand).ndim)
    return sort_p.bind(operand, dimension=dim, is_stable=bool(is_stable), num_keys=1)[0]


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    """Sort ``keys`` along ``dimension`` and apply the same permutation to ``values``."""
    dim = _canonical_dim(dimension, get_aval(keys).ndim)
    k, v = sort_p.bind(keys, values, dimension=dim, is_stable=bool(is_stable), num_keys=1)
    return k, v


# ----------------------------------------------------------------------------------------------
# top_k


_BITS_INT = {2: np.int16, 4: np.int32, 8: np.int64}


def _total_order_key(x):
    """Integers ordered like JAX's top_k order of ``x`` (the float bit-pattern total order)."""
    if x.dtype == np.bool_:
        return x.astype(np.int8)
    if x.dtype.kind in "iu":
        return x
    it = _BITS_INT[x.dtype.itemsize]
    bits = np.ascontiguousarray(x).view(it)
    return np.where(bits < 0, bits ^ it(np.iinfo(it).max), bits)


def _top_k_impl(operand, *, k, axis):
    x = np.moveaxis(np.asarray(operand), axis, -1)
    key = _total_order_key(x)
    order = np.argsort(~key, axis=-1, kind="stable")[..., :k]
    vals = np.take_along_axis(x, order, -1)
    return [np.moveaxis(vals, -1, axis), np.moveaxis(order.astype(np.int32), -1, axis)]


def _top_k_abstract_eval(operand, *, k, axis):
    if dtypes.issubdtype(operand.dtype, np.complexfloating):
        raise ValueError("top_k is not compatible with complex inputs.")
    if k < 0:
        raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
    if operand.ndim == 0:
        raise TypeError(f"top_k operand must have >= 1 dimension, got {operand.shape}")
    if not 0 <= axis < operand.ndim:
        raise ValueError(f"axis argument out of range: axis={axis} for "
                         f"operand.shape={operand.shape}")
    shape = list(operand.shape)
    if shape[axis] < k:
        raise ValueError("k argument to top_k must be no larger than size along axis; got "
                         f"k={k} with shape={tuple(shape)} and axis={axis}")
    shape[axis] = k
    return [ShapedArray(tuple(shape), operand.dtype, operand.weak_type),
            ShapedArray(tuple(shape), np.dtype(np.int32), False)]


top_k_p = standard_primitive("top_k", _top_k_abstract_eval, _top_k_impl,
                             weak_type_rule=lambda w, **_: [w, False], multiple_results=True)


def _top_k_jvp(primals, tangents, *, k, axis):
    (x,), (t,) = primals, tangents
    vals, idx = top_k_p.bind(x, k=k, axis=axis)
    if type(t) is Zero:
        return [vals, idx], [Zero.from_primal_value(vals), Zero.from_primal_value(idx)]
    shape = get_aval(idx).shape
    rank = len(shape)
    others = tuple(i for i in range(rank) if i != axis)
    dn = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(axis,),
                                start_index_map=(axis,), operand_batching_dims=others,
                                start_indices_batching_dims=others)
    t_vals = gather(t, reshape(idx, shape + (1,)), dn, (1,) * rank)
    return [vals, idx], [t_vals, Zero.from_primal_value(idx)]


def _top_k_batch(axis_data, vals, dims, *, k, axis):
    (x,), (d,) = vals, dims
    new_axis = axis + (1 if d <= axis else 0)
    return top_k_p.bind(x, k=k, axis=new_axis), [d, d]


ad.jvp_rules[top_k_p] = _top_k_jvp
batching.batch_rules[top_k_p] = _top_k_batch


def top_k(operand, k, *, axis=-1):
    """The ``k`` largest entries along ``axis`` and their int32 indices (largest first;
    among equal values the lower index first; NaN counts as the largest value)."""
    if isinstance(k, Tracer):
        from kiln.errors import ConcretizationTypeError
        raise ConcretizationTypeError(k, "The k argument of lax.top_k must be static.")
    k = int(k)
    if k < 0:
        raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
    ndim = get_aval(operand).ndim
    if ndim == 0:
        raise TypeError(f"top_k operand must have >= 1 dimension, got {()}")
    axis = _canonical_dim(axis, ndim)
    shape = get_aval(operand).shape
    int32_max = np.iinfo(np.int32).max
    if shape[axis] > int32_max + 1:
        raise ValueError("top_k returns int32 indices, which will overflow for array "
                         f"dimensions larger than the maximum int32 ({int32_max}). Got "
                         f"operand.shape={tuple(shape)}")
    return top_k_p.bind(operand, k=k, axis=axis)


__all__ = ["sort", "sort_key_val", "top_k", "sort_p", "top_k_p"]
