"""Slicing and padding primitives: rev, pad, concatenate, slice, dynamic_slice,
dynamic_update_slice and iota, each beside its jvp/transpose/batching rules, plus the
small constructors built on them (``full``, ``full_like``, ``collapse`` ...).

Dynamic start indices follow XLA: they are clamped so the window lies inside the
operand. The public wrappers also wrap negative indices (like ``jax.lax``).
"""
from __future__ import annotations

import builtins

import numpy as np

from kiln import _extended, dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax._factory import false_weak_type_rule, standard_primitive
from kiln.lax.arith import add, lt
from kiln.lax.reductions import reduce_sum
from kiln.lax.structural import (
    _convert_element_type,
    broadcast_in_dim,
    convert_element_type,
    reshape,
    select,
    squeeze,
)

# ``slice`` is shadowed below by ``lax.slice``.
_pyslice = builtins.slice


def eager_checked(*prims):
    """Kept for compatibility: eager calls of every primitive now run their abstract
    evaluation (memoized per signature) in ``EvalTrace`` itself."""


def _make(value, weak_type=False):
    from kiln.array import make_array
    return make_array(value, weak_type)


def _zero_scalar(dtype):
    return _make(np.zeros((), dtype))


def _check_shapelike(fun_name, arg_name, obj):
    if not isinstance(obj, (tuple, list, np.ndarray)):
        raise TypeError(f"{fun_name} {arg_name} must be of type tuple/list/ndarray, "
                        f"got {type(obj)}.")
    for d in obj:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise TypeError(f"{fun_name} {arg_name} must have every element be an integer "
                            f"type, got {tuple(type(o) for o in obj)}.")
    if not all(d >= 0 for d in obj):
        raise TypeError(f"{fun_name} {arg_name} must have every element be nonnegative, "
                        f"got {tuple(obj)}.")


def _ints(seq):
    return tuple(int(s) for s in seq)


def _scalar_operand(v, dtype):
    """A Python scalar operand takes ``dtype`` when its kind fits (as kiln.lax arithmetic
    does); everything else is left for the dtype check."""
    kind = np.dtype(dtype).kind
    t = type(v)
    if (t is bool and kind == "b") or (t is int and kind in "iufc") or \
            (t is float and kind in "fc") or (t is complex and kind == "c") or \
            (t is float and np.dtype(dtype) == dtypes.bfloat16):
        return _make(np.asarray(v, dtype), True)
    return v


# ----------------------------------------------------------------------------------------------
# rev


def _rev_abstract_eval(x, *, dimensions):
    _check_shapelike("rev", "dimensions", dimensions)
    if len(set(dimensions)) != len(dimensions):
        raise TypeError(f"rev dimensions must be unique, got {dimensions}.")
    if dimensions and max(dimensions) >= x.ndim:
        raise TypeError("rev dimensions must all be less than operand ndim, got dimensions "
                        f"{dimensions} for operand ndim {x.ndim}.")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _rev_impl(x, *, dimensions):
    return np.flip(x, dimensions) if dimensions else x


rev_p = standard_primitive("rev", _rev_abstract_eval, _rev_impl)


def _rev_batch(axis_data, vals, dims, *, dimensions):
    (x,), (d,) = vals, dims
    return rev_p.bind(x, dimensions=tuple(i + 1 if i >= d else i for i in dimensions)), d


ad.deflinear2(rev_p, lambda ct, x, *, dimensions: [
    Zero(x.aval) if type(ct) is Zero else rev(ct, dimensions)])
batching.batch_rules[rev_p] = _rev_batch


def rev(operand, dimensions):
    """Reverse ``operand`` along each axis in ``dimensions``."""
    return rev_p.bind(operand, dimensions=_ints(dimensions))


# ----------------------------------------------------------------------------------------------
# pad


def _dilated(n, interior):
    return 0 if n == 0 else n + (n - 1) * interior


def _pad_abstract_eval(x, pv, *, padding_config):
    if x.dtype != pv.dtype:
        raise TypeError("pad operand and padding_value must be same dtype: got "
                        f"{x.dtype.name} and {pv.dtype.name}.")
    if pv.ndim != 0:
        raise ValueError(f"padding_value must be a scalar; got np.shape(padding_value)={pv.shape}")
    if len(padding_config) != x.ndim:
        raise ValueError("length of padding_config must equal the number of axes of operand, "
                         f"got padding_config {padding_config} for operand shape {x.shape}")
    if not all(i >= 0 for _, _, i in padding_config):
        raise ValueError("interior padding in padding_config must be nonnegative, got "
                         f"padding_config {padding_config}")
    shape = tuple(lo + hi + _dilated(d, i) for (lo, hi, i), d in zip(padding_config, x.shape))
    if not all(d >= 0 for d in shape):
        raise ValueError(f"Dimension size after padding is not at least 0, got result shape "
                         f"{shape}, for padding_config {padding_config} and operand shape "
                         f"{x.shape}")
    return ShapedArray(shape, x.dtype, x.weak_type and pv.weak_type)


def _pad_impl(x, pv, *, padding_config):
    x = np.asarray(x)
    full_shape, place, crop = [], [], []
    for (lo, hi, interior), n in zip(padding_config, x.shape):
        plo, phi = max(lo, 0), max(hi, 0)
        size = plo + phi + _dilated(n, interior)
        full_shape.append(size)
        place.append(_pyslice(plo, plo + _dilated(n, interior), interior + 1))
        crop.append(_pyslice(max(-lo, 0), size - max(-hi, 0)))
    out = np.full(full_shape, pv, dtype=x.dtype)
    out[tuple(place)] = x
    return out[tuple(crop)]


pad_p = standard_primitive("pad", _pad_abstract_eval, _pad_impl)


def _pad_transpose(ct, x, pv, *, padding_config):
    lin_x, lin_pv = is_undefined_primal(x), is_undefined_primal(pv)
    if type(ct) is Zero:
        return [Zero(x.aval) if lin_x else None, Zero(pv.aval) if lin_pv else None]
    ct_aval = get_aval(ct)
    unpad = tuple((-lo, -hi, 0) for lo, hi, _ in padding_config)
    u = pad(ct, _zero_scalar(ct_aval.dtype), unpad)
    t_x = slice(u, (0,) * ct_aval.ndim, get_aval(u).shape,
                tuple(i + 1 for _, _, i in padding_config))
    t_pv = None
    if lin_pv:
        from kiln.lax.arith import sub
        axes = tuple(range(ct_aval.ndim))
        t_pv = sub(reduce_sum(ct, axes), reduce_sum(t_x, axes))
    return [t_x if lin_x else None, t_pv]


def _pad_batch(axis_data, vals, dims, *, padding_config):
    (x, pv), (xd, pd) = vals, dims
    if pd is None:
        cfg = list(padding_config)
        cfg.insert(xd, (0, 0, 0))
        return pad_p.bind(x, pv, padding_config=tuple(cfg)), xd
    size = axis_data.size
    x_aval = get_aval(x)
    inner_shape = x_aval.shape if xd is None else x_aval.shape[:xd] + x_aval.shape[xd + 1:]
    x = batching.bdim_at_front(x, xd, size)
    pv = batching.moveaxis(pv, pd, 0)
    cfg = ((0, 0, 0),) + tuple(padding_config)
    padded = pad_p.bind(x, _zero_scalar(x_aval.dtype), padding_config=cfg)
    out_shape = get_aval(padded).shape
    # Where the operand landed (a static mask), elsewhere the per-example padding value.
    mask = _pad_impl(np.ones(inner_shape, bool), np.bool_(False), padding_config=padding_config)
    mask = broadcast_in_dim(_make(mask), out_shape, tuple(range(1, len(out_shape))))
    return select(mask, padded, broadcast_in_dim(pv, out_shape, (0,))), 0


ad.deflinear2(pad_p, _pad_transpose)
batching.batch_rules[pad_p] = _pad_batch


def pad(operand, padding_value, padding_config):
    """Pad ``operand`` with ``padding_value``: ``padding_config`` holds one
    ``(low, high, interior)`` triple per axis; low/high may be negative (cropping)."""
    cfg = tuple((int(lo), int(hi), int(i)) for lo, hi, i in padding_config)
    padding_value = _scalar_operand(padding_value, get_aval(operand).dtype)
    return pad_p.bind(operand, padding_value, padding_config=cfg)


# ----------------------------------------------------------------------------------------------
# concatenate


def _concatenate_abstract_eval(*xs, dimension):
    if not xs:
        raise TypeError("concatenate expects at least one operand, got 0.")
    dts = [x.dtype for x in xs]
    if any(d != dts[0] for d in dts[1:]):
        raise TypeError("lax.concatenate requires arguments to have the same dtypes, got "
                        f"{', '.join(d.name for d in dts)}. (Tip: jnp.concatenate is a similar "
                        "function that does automatic type promotion on inputs).")
    shapes = ", ".join(str(x.shape) for x in xs)
    if len({x.ndim for x in xs}) != 1:
        raise TypeError("Cannot concatenate arrays with different numbers of dimensions: got "
                        f"{shapes}.")
    if not 0 <= dimension < xs[0].ndim:
        raise TypeError(f"concatenate dimension out of bounds: dimension {dimension} for "
                        f"shapes {shapes}.")
    others = [x.shape[:dimension] + x.shape[dimension + 1:] for x in xs]
    if any(o != others[0] for o in others[1:]):
        raise TypeError("Cannot concatenate arrays with shapes that differ in dimensions other "
                        f"than the one being concatenated: concatenating along dimension "
                        f"{dimension} for shapes {shapes}.")
    s = xs[0].shape
    shape = s[:dimension] + (sum(x.shape[dimension] for x in xs),) + s[dimension + 1:]
    return ShapedArray(shape, dts[0], all(x.weak_type for x in xs))


concatenate_p = standard_primitive(
    "concatenate", _concatenate_abstract_eval,
    lambda *xs, dimension: np.concatenate(xs, axis=dimension))


def _concatenate_transpose(ct, *xs, dimension):
    out = []
    start = 0
    for x in xs:
        n = (x.aval if is_undefined_primal(x) else get_aval(x)).shape[dimension]
        if not is_undefined_primal(x):
            out.append(None)
        elif type(ct) is Zero:
            out.append(Zero(x.aval))
        else:
            out.append(slice_in_dim(ct, start, start + n, axis=dimension))
        start += n
    return out


def _concatenate_batch(axis_data, vals, dims, *, dimension):
    xs = [batching.bdim_at_front(v, d, axis_data.size) for v, d in zip(vals, dims)]
    return concatenate_p.bind(*xs, dimension=dimension + 1), 0


ad.deflinear2(concatenate_p, _concatenate_transpose)
batching.batch_rules[concatenate_p] = _concatenate_batch


def concatenate(operands, dimension):
    """Concatenate ``operands`` (same dtype and rank) along axis ``dimension``."""
    operands = list(operands)
    if not operands:
        raise ValueError("concatenate requires a non-empty sequences of arrays")
    if len(operands) == 1:
        from kiln.array import Array
        op = operands[0]
        if isinstance(op, (Array, Tracer)):
            return op
    return concatenate_p.bind(*operands, dimension=int(dimension))


# ----------------------------------------------------------------------------------------------
# slice


def _slice_abstract_eval(x, *, start_indices, limit_indices, strides):
    _check_shapelike("slice", "start_indices", start_indices)
    _check_shapelike("slice", "limit_indices", limit_indices)
    if x.ndim != len(start_indices):
        raise TypeError("slice start_indices must have length equal to the number of "
                        f"dimensions of the operand, got indices {start_indices} for operand "
                        f"shape {x.shape}.")
    if len(start_indices) != len(limit_indices):
        raise TypeError("slice limit_indices must have the same length as start_indices, got "
                        f"start_indices {start_indices} and limit_indices {limit_indices}.")
    if not all(n >= lim for n, lim in zip(x.shape, limit_indices)):
        raise TypeError("slice limit_indices must be less than or equal to operand shape, got "
                        f"limit_indices {limit_indices} for operand shape {x.shape}.")
    if not all(lim >= s for s, lim in zip(start_indices, limit_indices)):
        raise TypeError("slice limit_indices must be greater than or equal to start_indices, "
                        f"got start_indices {start_indices} and limit_indices {limit_indices}.")
    diff = tuple(lim - s for s, lim in zip(start_indices, limit_indices))
    if strides is not None:
        _check_shapelike("slice", "strides", strides)
        if len(strides) != x.ndim:
            raise TypeError("slice strides must have length equal to the number of dimensions "
                            f"of the operand, got strides {strides} for operand shape "
                            f"{x.shape}.")
        if not all(s > 0 for s in strides):
            raise TypeError(f"slice strides must be positive, got {strides}")
        diff = tuple(0 if d == 0 else (d - 1) // s + 1 for d, s in zip(diff, strides))
    return ShapedArray(diff, x.dtype, x.weak_type)


def _slice_impl(x, *, start_indices, limit_indices, strides):
    st = strides or (1,) * len(start_indices)
    return np.asarray(x)[tuple(_pyslice(s, lim, k) for s, lim, k in
                               zip(start_indices, limit_indices, st))]


slice_p = standard_primitive("slice", _slice_abstract_eval, _slice_impl)


def _slice_transpose(ct, x, *, start_indices, limit_indices, strides):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    shape = x.aval.shape
    st = strides or (1,) * len(shape)
    cfg = []
    for s, k, o, n in zip(start_indices, st, get_aval(ct).shape, shape):
        real_limit = s + (o - 1) * k + 1 if o > 0 else s
        cfg.append((s, n - real_limit, k - 1))
    return [pad(ct, _zero_scalar(x.aval.dtype), cfg)]


def _slice_batch(axis_data, vals, dims, *, start_indices, limit_indices, strides):
    (x,), (d,) = vals, dims
    starts = start_indices[:d] + (0,) + start_indices[d:]
    limits = limit_indices[:d] + (axis_data.size,) + limit_indices[d:]
    st = None if strides is None else strides[:d] + (1,) + strides[d:]
    return slice_p.bind(x, start_indices=starts, limit_indices=limits, strides=st), d


ad.deflinear2(slice_p, _slice_transpose)
batching.batch_rules[slice_p] = _slice_batch


def slice(operand, start_indices, limit_indices, strides=None):  # noqa: A001
    """``operand[start:limit:stride]`` on every axis (static bounds)."""
    return slice_p.bind(operand, start_indices=_ints(start_indices),
                        limit_indices=_ints(limit_indices),
                        strides=None if strides is None else _ints(strides))


# ----------------------------------------------------------------------------------------------
# split: one primitive with several results, as JAX's (its transpose is one ``concatenate``,
# so a cotangent's -0.0 stays -0.0, where a sum of zero-padded slices would make it +0.0).


def _split_abstract_eval(x, *, sizes, axis):
    if not 0 <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {x.ndim}")
    if any(s < 0 for s in sizes):
        raise ValueError(f"Sizes passed to split must be nonnegative, got {list(sizes)}")
    if x.shape[axis] != np.sum(sizes):
        raise ValueError(f"Sum of sizes {np.sum(sizes)} must be equal to dimension {axis} "
                         f"of the operand shape {list(x.shape)}")
    return [ShapedArray(x.shape[:axis] + (int(s),) + x.shape[axis + 1:], x.dtype, x.weak_type)
            for s in sizes]


def _split_impl(x, *, sizes, axis):
    x = np.asarray(x)
    cuts = np.cumsum([0] + [int(s) for s in sizes])
    return [x[(_pyslice(None),) * axis + (_pyslice(int(a), int(b)),)]
            for a, b in zip(cuts[:-1], cuts[1:])]


split_p = standard_primitive("split", _split_abstract_eval, _split_impl,
                             weak_type_rule=lambda w, *, sizes, axis: [w] * len(sizes),
                             multiple_results=True)


def _split_transpose(cts, x, *, sizes, axis):
    if all(type(c) is Zero for c in cts):
        return [Zero(x.aval)]
    parts = [ad.instantiate_zeros(c) for c in cts]
    return [parts[0] if len(parts) == 1 else concatenate_p.bind(*parts, dimension=axis)]


def _split_batch(axis_data, vals, dims, *, sizes, axis):
    (x,), (d,) = vals, dims
    outs = split_p.bind(x, sizes=sizes, axis=axis + 1 if axis >= d else axis)
    return outs, [d] * len(outs)


ad.deflinear2(split_p, _split_transpose)
batching.batch_rules[split_p] = _split_batch



def _canonical_axis(axis, ndim):
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim if ndim else axis


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    """Slice ``operand[start_index:limit_index:stride]`` along ``axis`` only."""
    shape = get_aval(operand).shape
    axis = _canonical_axis(axis, len(shape))
    n = shape[axis]
    start = 0 if start_index is None else int(start_index)
    limit = n if limit_index is None else int(limit_index)
    if start < 0:
        start += n
    if limit < 0:
        limit += n
    starts = [0] * len(shape)
    limits = list(shape)
    strides = [1] * len(shape)
    starts[axis], limits[axis], strides[axis] = start, limit, int(stride)
    return slice(operand, starts, limits, strides)


def index_in_dim(operand, index, axis=0, keepdims=True):
    """``operand[..., index, ...]`` along ``axis`` (kept as size 1 when ``keepdims``)."""
    shape = get_aval(operand).shape
    axis = _canonical_axis(axis, len(shape))
    index = int(index)
    n = shape[axis]
    wrapped = index + n if index < 0 else index
    if not 0 <= wrapped < n:
        raise IndexError(f"index {index} is out of bounds for axis {axis} with size {n}")
    out = slice_in_dim(operand, wrapped, wrapped + 1, 1, axis)
    return out if keepdims else squeeze(out, (axis,))


# ----------------------------------------------------------------------------------------------
# dynamic_slice


def _check_indices(name, x, idx):
    if len(idx) != x.ndim:
        raise TypeError(f"{name} start_indices must have length equal to the rank of operand, "
                        f"got {len(idx)} indices for operand shape {x.shape}.")
    if any(i.ndim != 0 for i in idx):
        raise TypeError(f"start_indices arguments to {name} must be scalars, got indices "
                        f"{[i.str_short() for i in idx]}")
    if any(i.dtype != idx[0].dtype or i.dtype.kind not in "iu" for i in idx):
        raise TypeError(f"index arguments to {name} must be integers of the same type, got: "
                        f"{', '.join(i.dtype.name for i in idx)}")


def _dynamic_slice_abstract_eval(x, *idx, slice_sizes):
    if len(slice_sizes) != x.ndim:
        raise TypeError(f"dynamic_slice slice_sizes must have length equal to the rank of "
                        f"operand, got slice_sizes {slice_sizes} for operand shape {x.shape}.")
    if not all(n >= s for n, s in zip(x.shape, slice_sizes)):
        raise TypeError("slice slice_sizes must be less than or equal to operand shape, got "
                        f"slice_sizes {slice_sizes} for operand shape {x.shape}.")
    if not all(s >= 0 for s in slice_sizes):
        raise TypeError("slice slice_sizes must be greater than or equal to zero, got "
                        f"slice_sizes of {slice_sizes}.")
    _check_indices("dynamic_slice", x, idx)
    return ShapedArray(slice_sizes, x.dtype, x.weak_type)


def _clamped_starts(idx, shape, sizes):
    return [min(max(int(i), 0), n - s) for i, n, s in zip(idx, shape, sizes)]


def _dynamic_slice_impl(x, *idx, slice_sizes):
    x = np.asarray(x)
    starts = _clamped_starts(idx, x.shape, slice_sizes)
    return x[tuple(_pyslice(s, s + k) for s, k in zip(starts, slice_sizes))]


dynamic_slice_p = standard_primitive("dynamic_slice", _dynamic_slice_abstract_eval,
                                     _dynamic_slice_impl,
                                     weak_type_rule=lambda w, *ws, **_: w)


def _dynamic_slice_jvp(primals, tangents, *, slice_sizes):
    x, *idx = primals
    ans = dynamic_slice_p.bind(x, *idx, slice_sizes=slice_sizes)
    t = tangents[0]
    if type(t) is Zero:
        return ans, Zero.from_primal_value(ans)
    return ans, dynamic_slice_p.bind(t, *idx, slice_sizes=slice_sizes)


def _dynamic_slice_transpose(ct, x, *idx, slice_sizes):
    if any(is_undefined_primal(i) for i in idx):
        raise ValueError("dynamic_slice start indices cannot be linear")
    if type(ct) is Zero:
        return [Zero(x.aval)] + [None] * len(idx)
    zeros = full(x.aval.shape, 0, x.aval.dtype)
    return [dynamic_update_slice_p.bind(zeros, ct, *idx)] + [None] * len(idx)


def _dynamic_slice_batch(axis_data, vals, dims, *, slice_sizes):
    x, *idx = vals
    xd, *idd = dims
    size = axis_data.size
    idx_dtype = get_aval(idx[0]).dtype if idx else np.dtype(np.int32)
    zero = _zero_scalar(idx_dtype)
    if all(d is None for d in idd):
        new_idx = idx[:xd] + [zero] + idx[xd:]
        sizes = slice_sizes[:xd] + (size,) + slice_sizes[xd:]
        return dynamic_slice_p.bind(x, *new_idx, slice_sizes=sizes), xd
    # Batched start indices: as JAX, a gather (clamped windows, as the primitive clamps its
    # starts) vmapped over the batch, so each example reads only its window (not a
    # whole-operand select-and-sum per example).
    from kiln.lax.control.loops import installed_vmap
    from kiln.lax.gather_scatter import GatherDimensionNumbers, GatherScatterMode, gather
    x = batching.bdim_at_front(x, xd, size) if xd is not None else x
    nd = len(slice_sizes)
    dnums = GatherDimensionNumbers(offset_dims=tuple(range(nd)), collapsed_slice_dims=(),
                                   start_index_map=tuple(range(nd)))

    def one(x, *idx):
        index = concatenate([reshape(convert_element_type(i, idx_dtype), (1,)) for i in idx],
                            0)
        return gather(x, index, dnums, slice_sizes, indices_are_sorted=True,
                      unique_indices=True, mode=GatherScatterMode.CLIP)
    x_axis = 0 if xd is not None else None
    return installed_vmap()(one, in_axes=(x_axis, *idd), axis_size=size)(x, *idx), 0


ad.jvp_rules[dynamic_slice_p] = _dynamic_slice_jvp
ad.transpose_rules[dynamic_slice_p] = _dynamic_slice_transpose
batching.batch_rules[dynamic_slice_p] = _dynamic_slice_batch


def _dynamic_slice_indices(operand, start_indices, allow_negative_indices):
    shape = get_aval(operand).shape
    if not isinstance(start_indices, (list, tuple)):
        aval = get_aval(start_indices)
        if aval.ndim != 1:
            raise ValueError(f"Slice indices must be a 1D sequence, got {aval.shape}")
        if isinstance(start_indices, Tracer) or hasattr(start_indices, "_value"):
            start_indices = [reshape(slice(start_indices, (k,), (k + 1,)), ())
                             for k in range(aval.shape[0])]
        else:
            start_indices = list(np.asarray(start_indices))
    if len(start_indices) != len(shape):
        raise ValueError("Length of slice indices must match number of operand dimensions "
                         f"({len(start_indices)} vs {shape})")
    if isinstance(allow_negative_indices, (bool, np.bool_)):
        allow_negative_indices = [bool(allow_negative_indices)] * len(start_indices)
    out = []
    py_ints = []          # positions of Python ints: they take the other indices' dtype
    for i, n, allow in zip(start_indices, shape, allow_negative_indices):
        if isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)):
            dt = dtypes.canonicalize_dtype(i.dtype) if isinstance(i, np.integer) else None
            i = int(i)
            if i < 0:
                if not allow:
                    raise ValueError(f"Index {i} is out of bounds for dimension {n} if "
                                     "allow_negative_indices=False")
                i += n
            if dt is None:
                py_ints.append(len(out))
                out.append(i)
            else:
                out.append(_make(np.asarray(i, dt)))
            continue
        dt = dtypes.dtype(i)
        if dt.kind == "u" or not allow:
            out.append(i)
            continue
        if not isinstance(i, Tracer) and np.ndim(i) == 0 and dt.kind == "i":
            v = np.asarray(i)                  # concrete: wrap in NumPy, no eager ops
            out.append(_make(np.asarray(v + n if v < 0 else v, dtypes.canonicalize_dtype(dt))))
            continue
        if dtypes.is_weakly_typed(i):
            i = _convert_element_type(i, dt, False)
        out.append(select(lt(i, 0), add(i, n), i))
    if py_ints:
        others = {np.dtype(dtypes.dtype(o)) for k, o in enumerate(out) if k not in py_ints}
        dt = others.pop() if len(others) == 1 else dtypes.default_int_dtype()
        if dt.kind not in "iu":
            dt = dtypes.default_int_dtype()
        for k in py_ints:
            out[k] = _make(np.asarray(out[k], dt))
    return out


def dynamic_slice(operand, start_indices, slice_sizes, *, allow_negative_indices=True):
    """The window of size ``slice_sizes`` starting at the (traced) ``start_indices``;
    negative indices wrap, then starts are clamped so the window fits (XLA semantics)."""
    idx = _dynamic_slice_indices(operand, start_indices, allow_negative_indices)
    return dynamic_slice_p.bind(operand, *idx, slice_sizes=_ints(slice_sizes))


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0, *,
                         allow_negative_indices=True):
    """``dynamic_slice`` along one axis (the others are taken whole)."""
    shape = get_aval(operand).shape
    axis = _canonical_axis(axis, len(shape))
    starts = [0] * len(shape)
    sizes = list(shape)
    starts[axis] = start_index
    sizes[axis] = int(slice_size)
    allow = [True] * len(shape)
    allow[axis] = allow_negative_indices
    return dynamic_slice(operand, starts, sizes, allow_negative_indices=allow)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True, *,
                         allow_negative_indices=True):
    """``operand`` at the (traced) ``index`` along ``axis``."""
    shape = get_aval(operand).shape
    axis = _canonical_axis(axis, len(shape))
    out = dynamic_slice_in_dim(operand, index, 1, axis,
                               allow_negative_indices=allow_negative_indices)
    return out if keepdims else squeeze(out, (axis,))


# ----------------------------------------------------------------------------------------------
# dynamic_update_slice


def _dus_abstract_eval(x, u, *idx):
    if x.dtype != u.dtype:
        raise TypeError("lax.dynamic_update_slice requires arguments to have the same dtypes, "
                        f"got {x.dtype.name}, {u.dtype.name}. (Tip: jnp.dynamic_update_slice "
                        "is a similar function that does automatic type promotion on inputs).")
    if x.ndim != u.ndim:
        raise TypeError("dynamic_update_slice update must have the same rank as operand, got "
                        f"update shape {u.shape} for operand shape {x.shape}.")
    if not all(n >= m for n, m in zip(x.shape, u.shape)):
        raise TypeError("dynamic_update_slice update shape must be smaller than operand shape, "
                        f"got update shape {u.shape} for operand shape {x.shape}.")
    _check_indices("dynamic_update_slice", x, idx)
    return ShapedArray(x.shape, x.dtype, all(a.weak_type for a in (x, u) + idx))


def _dus_impl(x, u, *idx):
    out = np.array(x, copy=True)
    starts = _clamped_starts(idx, out.shape, np.shape(u))
    out[tuple(_pyslice(s, s + k) for s, k in zip(starts, np.shape(u)))] = u
    return out


dynamic_update_slice_p = standard_primitive("dynamic_update_slice", _dus_abstract_eval,
                                            _dus_impl)


def _dus_jvp(primals, tangents):
    x, u, *idx = primals
    tx, tu = tangents[:2]
    ans = dynamic_update_slice_p.bind(x, u, *idx)
    if type(tx) is Zero and type(tu) is Zero:
        return ans, Zero.from_primal_value(ans)
    tx, tu = ad.instantiate_zeros(tx), ad.instantiate_zeros(tu)
    return ans, dynamic_update_slice_p.bind(tx, tu, *idx)


def _dus_transpose(ct, x, u, *idx):
    if any(is_undefined_primal(i) for i in idx):
        raise ValueError("dynamic_update_slice start indices cannot be linear")
    lin_x, lin_u = is_undefined_primal(x), is_undefined_primal(u)
    u_aval = u.aval if lin_u else get_aval(u)
    if type(ct) is Zero:
        return [Zero(x.aval) if lin_x else None, Zero(u_aval) if lin_u else None] + \
            [None] * len(idx)
    ct_dtype = get_aval(ct).dtype
    t_x = t_u = None
    if lin_x:
        t_x = dynamic_update_slice_p.bind(ct, full(u_aval.shape, 0, ct_dtype), *idx)
    if lin_u:
        t_u = dynamic_slice_p.bind(ct, *idx, slice_sizes=u_aval.shape)
    return [t_x, t_u] + [None] * len(idx)


def _dus_batch(axis_data, vals, dims):
    x, u, *idx = vals
    xd, ud, *idd = dims
    size = axis_data.size
    x = batching.bdim_at_front(x, xd, size)
    u = batching.bdim_at_front(u, ud, size)
    idx_dtype = get_aval(idx[0]).dtype if idx else np.dtype(np.int32)
    if all(d is None for d in idd):
        return dynamic_update_slice_p.bind(x, u, _zero_scalar(idx_dtype), *idx), 0
    # Batched start indices: as JAX, a scatter (clamped windows, as the primitive clamps
    # its starts) vmapped over the batch, so each example updates only its window.
    from kiln.lax.control.loops import installed_vmap
    from kiln.lax.gather_scatter import GatherScatterMode, ScatterDimensionNumbers, scatter
    nd = get_aval(x).ndim - 1
    dnums = ScatterDimensionNumbers(update_window_dims=tuple(range(nd)),
                                    inserted_window_dims=(),
                                    scatter_dims_to_operand_dims=tuple(range(nd)))

    def one(x, u, *idx):
        index = concatenate([reshape(convert_element_type(i, idx_dtype), (1,)) for i in idx],
                            0)
        return scatter(x, index, u, dnums, indices_are_sorted=True, unique_indices=True,
                       mode=GatherScatterMode.CLIP)
    return installed_vmap()(one, in_axes=(0, 0, *idd), axis_size=size)(x, u, *idx), 0


ad.jvp_rules[dynamic_update_slice_p] = _dus_jvp
ad.transpose_rules[dynamic_update_slice_p] = _dus_transpose
batching.batch_rules[dynamic_update_slice_p] = _dus_batch


def dynamic_update_slice(operand, update, start_indices, *, allow_negative_indices=True):
    """``operand`` with the window at ``start_indices`` replaced by ``update`` (negative
    indices wrap; starts are clamped so the update fits)."""
    idx = _dynamic_slice_indices(operand, start_indices, allow_negative_indices)
    return dynamic_update_slice_p.bind(operand, update, *idx)


def dynamic_update_slice_in_dim(operand, update, start_index, axis, *,
                                allow_negative_indices=True):
    """``dynamic_update_slice`` at ``start_index`` along ``axis`` (0 on the others)."""
    shape = get_aval(operand).shape
    axis = _canonical_axis(axis, len(shape))
    starts = [0] * len(shape)
    starts[axis] = start_index
    allow = [True] * len(shape)
    allow[axis] = allow_negative_indices
    return dynamic_update_slice(operand, update, starts, allow_negative_indices=allow)


def dynamic_update_index_in_dim(operand, update, index, axis, *,
                                allow_negative_indices=True):
    """Replace ``operand[..., index, ...]`` along ``axis`` by ``update`` (which may lack
    that axis)."""
    shape = get_aval(operand).shape
    axis = _canonical_axis(axis, len(shape))
    u_aval = get_aval(update)
    if u_aval.ndim == len(shape) - 1:
        u_shape = u_aval.shape[:axis] + (1,) + u_aval.shape[axis:]
        update = broadcast_in_dim(update, u_shape,
                                  tuple(i for i in range(len(shape)) if i != axis))
    return dynamic_update_slice_in_dim(operand, update, index, axis,
                                       allow_negative_indices=allow_negative_indices)


# ----------------------------------------------------------------------------------------------
# iota and constructors


def _iota_abstract_eval(*, dtype, shape, dimension, sharding):
    _check_shapelike("iota", "shape", shape)
    if np.dtype(dtype).kind not in "iufc" and np.dtype(dtype) != dtypes.bfloat16:
        raise TypeError(f"iota does not accept dtype {np.dtype(dtype).name}. Accepted dtypes "
                        "are subtypes of integer, floating, complexfloating.")
    if not 0 <= dimension < len(shape):
        raise ValueError("iota dimension must be between 0 and len(shape), got "
                         f"dimension={dimension} for shape={shape}")
    return ShapedArray(shape, dtype, False)


def _iota_impl(*, dtype, shape, dimension, sharding):
    r = np.arange(shape[dimension]).astype(dtype)
    expanded = [1] * len(shape)
    expanded[dimension] = shape[dimension]
    return np.broadcast_to(r.reshape(expanded), shape)


iota_p = standard_primitive("iota", _iota_abstract_eval, _iota_impl,
                            weak_type_rule=false_weak_type_rule)
ad.defjvp_zero(iota_p)
# iota has no operands, so a BatchTrace never needs a rule; one is registered for coverage.
batching.batch_rules[iota_p] = lambda axis_data, vals, dims, **params: (
    iota_p.bind(**params), None)


def broadcasted_iota(dtype, shape, dimension, *, out_sharding=None):
    """An array of ``shape`` whose values count 0, 1, ... along ``dimension``."""
    dtype = dtypes.check_and_canonicalize_user_dtype(dtype, "broadcasted_iota")
    shape = _ints(shape)
    return iota_p.bind(dtype=dtype, shape=shape, dimension=int(dimension), sharding=None)


def iota(dtype, size):
    """``[0, 1, ..., size - 1]`` of ``dtype``."""
    return broadcasted_iota(dtype, (int(size),), 0)


def _full(shape, fill_value, dtype, weak_type, scalar_only=True):
    shape = _ints(shape)
    if scalar_only and np.shape(fill_value):
        raise TypeError("full must be called with scalar fill_value, got fill_value.shape "
                        f"{np.shape(fill_value)}.")
    if isinstance(dtype, dtypes.ExtendedDType):     # typed keys: the dtype's own rule
        return dtype._rules.full(shape, fill_value, dtype)
    fill = _convert_element_type(fill_value, dtype, weak_type)
    if isinstance(fill, (int, float, complex, bool, np.generic, np.ndarray)):
        fill = _make(np.asarray(fill, dtype), weak_type)
    return broadcast_in_dim(fill, shape, ())


def full(shape, fill_value, dtype=None, *, sharding=None):
    """An array of ``shape`` filled with the scalar ``fill_value`` (of ``dtype`` if given)."""
    if dtype is None:
        weak_type = dtypes.is_weakly_typed(fill_value)
        dtype = dtypes.dtype(fill_value, canonicalize=True)
    else:
        weak_type = False
        dtype = dtypes.check_and_canonicalize_user_dtype(dtype, "full")
    if isinstance(dtype, dtypes.ExtendedDType) and hasattr(dtype, "_rules"):
        return dtype._rules.full(_ints(shape), fill_value, dtype)   # as JAX
    return _full(shape, fill_value, dtype, weak_type)


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
    """An array like ``x`` (its shape and dtype unless given) filled with ``fill_value``."""
    fill_shape = np.shape(x) if shape is None else shape
    if dtype is None:
        # As JAX (which reads ``x.aval``), only arrays, tracers and Python scalars carry a
        # weak type: a ShapeDtypeStruct or other duck-typed prototype never does.
        from kiln.core import trace as _core
        weak_type = (isinstance(x, (Tracer, _core.Array)) or type(x) in (int, float, complex)) \
            and dtypes.is_weakly_typed(x)
        dtype = dtypes.dtype(x, canonicalize=True)
    else:
        weak_type = False
        dtype = dtypes.check_and_canonicalize_user_dtype(dtype, "full_like")
    if _extended.has_rules(dtype):
        return dtype._rules.full(_ints(fill_shape), fill_value, dtype)   # as JAX
    out = _full(fill_shape, fill_value, dtype, weak_type,
                scalar_only=not isinstance(dtype, dtypes.ExtendedDType))
    return _placed_like(out, x, sharding)


def _placed_like(out, x, sharding):
    """JAX's placement of ``full_like``'s result: on ``sharding`` when given, else, for a
    committed prototype that is not weakly typed and has the result's shape (or is fully
    replicated), on the prototype's sharding (eager arrays; a traced result is laid out
    by its program)."""
    from kiln.core import trace as _core
    if type(out) is not _core.Array:
        return out
    if sharding is not None:
        return out.to_device(sharding)
    if (type(x) is _core.Array and x._committed and not x.weak_type
            and (out.shape == x.shape or x.is_fully_replicated)):
        return out.to_device(x.sharding)
    return out


def zeros_like_array(x):
    """Zeros of ``x``'s shape and dtype."""
    return full_like(x, 0)


def collapse(operand, start_dimension, stop_dimension=None):
    """Merge axes ``start_dimension:stop_dimension`` of ``operand`` into one."""
    shape = get_aval(operand).shape
    lo, hi, _ = _pyslice(start_dimension, stop_dimension).indices(len(shape))
    if hi < lo:
        raise ValueError(f"Invalid dimension range passed to collapse: {shape}"
                         f"[{start_dimension}:{stop_dimension}]")
    size = int(np.prod(shape[lo:hi], dtype=np.int64))
    return reshape(operand, shape[:lo] + (size,) + shape[hi:])


def tie_in(x, y):
    """Deprecated no-op kept for compatibility: returns ``y``."""
    return y


eager_checked(rev_p, pad_p, concatenate_p, slice_p, dynamic_slice_p, dynamic_update_slice_p,
              iota_p)

__all__ = ["rev", "pad", "concatenate", "slice", "slice_in_dim", "index_in_dim",
           "dynamic_slice", "dynamic_slice_in_dim", "dynamic_index_in_dim",
           "dynamic_update_slice", "dynamic_update_slice_in_dim", "dynamic_update_index_in_dim",
           "iota", "broadcasted_iota", "full", "full_like", "zeros_like_array", "collapse",
           "tie_in", "rev_p", "pad_p", "concatenate_p", "slice_p", "dynamic_slice_p",
           "dynamic_update_slice_p", "iota_p", "split_p"]
