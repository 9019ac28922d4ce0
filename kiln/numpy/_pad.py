"""``jnp.pad``: every mode of NumPy's ``pad`` (constant, empty, edge, wrap, reflect,
symmetric, linear_ramp, maximum, minimum, mean, median and a callable), built from
``lax.pad``, slices, flips, broadcasts, concatenation and ``kiln.numpy`` reductions.

Pad widths and ``stat_length`` must be static; the array, ``constant_values`` and
``end_values`` may be traced.
"""
from __future__ import annotations

import operator

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import Tracer, get_aval
from kiln.numpy import _util

__all__ = ["pad"]

# keyword arguments each mode accepts (as jax.numpy.pad)
_MODE_KWARGS = {
    "empty": (), "edge": (), "wrap": (),
    "constant": ("constant_values",),
    "linear_ramp": ("end_values",),
    "maximum": ("stat_length",),
    "mean": ("stat_length",),
    "median": ("stat_length",),
    "minimum": ("stat_length",),
    "reflect": ("reflect_type",),
    "symmetric": ("reflect_type",),
}


# ----------------------------------------------------------------------------------------------
# argument normalization


def _static_tree(values, name):
    """``values`` (nested sequences of array-likes) as a NumPy array; traced leaves raise
    ConcretizationTypeError."""
    def conc(v):
        if isinstance(v, (list, tuple)):
            return [conc(e) for e in v]
        if isinstance(v, Tracer) or hasattr(v, "_value"):
            return _util.concrete_value(v, f"{name} argument of jnp.pad")
        return v

    try:
        return np.asarray(conc(values))
    except ValueError as e:
        if "inhomogeneous" in str(e):
            raise TypeError(f"`{name}` entries must be the same shape: {values}") from e
        raise


def _pairs_shape_error(name, nd, shape):
    return ValueError(f"jnp.pad: {name} with nd={nd} has unsupported shape {shape}. "
                      f"Valid shapes are ({nd}, 2), (1, 2), (2,), (1,), or ().")


def _to_pairs(arr, nd, name, index):
    """``nd`` (before, after) pairs from an array of shape (nd, 2), (1, 2), (2,), (1,) or ();
    ``index(arr, i, j)`` reads one entry."""
    shape = tuple(np.shape(arr))
    if shape == (nd, 2):
        return [(index(arr, (i, 0)), index(arr, (i, 1))) for i in range(nd)]
    if shape == (1, 2):
        pair = (index(arr, (0, 0)), index(arr, (0, 1)))
    elif shape == (2,):
        pair = (index(arr, (0,)), index(arr, (1,)))
    elif shape == (1,):
        pair = (index(arr, (0,)),) * 2
    elif shape == ():
        pair = (index(arr, ()),) * 2
    else:
        raise _pairs_shape_error(name, nd, shape)
    return [pair] * nd


def _static_pairs(values, nd, name):
    """Per-axis (before, after) NumPy scalars of a static pad_width-like argument."""
    arr = _static_tree(values, name)
    if arr.dtype == object and any(np.ndim(v) for v in arr.flat):
        raise TypeError(f"`{name}` entries must be the same shape: {values}")
    return _to_pairs(arr, nd, name, lambda a, idx: a[idx])


def _operand_entry(arr, idx):
    """The 0-d entry ``arr[idx]`` of an operand, with ``lax`` slicing (works when traced)."""
    if not idx:
        return arr
    starts = tuple(idx)
    limits = tuple(i + 1 for i in idx)
    return lax.reshape(lax.slice(arr, starts, limits), ())


def _value_pairs(values, nd, name):
    """Per-axis (before, after) 0-d operands of an array-like (possibly traced) argument."""
    if isinstance(values, (list, tuple)) and not _has_tracer(values):
        arr = _static_tree(values, name)
        if arr.dtype == object:
            raise TypeError(f"`{name}` entries must be the same shape: {values}")
        values = arr
    import kiln.numpy as jnp
    arr = jnp.asarray(values)
    return _to_pairs(arr, nd, name, _operand_entry)


def _has_tracer(tree):
    if isinstance(tree, (list, tuple)):
        return any(_has_tracer(t) for t in tree)
    return isinstance(tree, Tracer)


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


# ----------------------------------------------------------------------------------------------
# helpers


def _slice_axis(x, start, stop, axis):
    shape = get_aval(x).shape
    starts = [0] * len(shape)
    limits = list(shape)
    starts[axis], limits[axis] = start, stop
    return lax.slice(x, tuple(starts), tuple(limits))


def _with_width(part, width, axis):
    shape = list(get_aval(part).shape)
    shape[axis] = width
    return _util.broadcast_to(part, tuple(shape))


def _cat(parts, axis):
    parts = [p for p in parts if get_aval(p).shape[axis] > 0] or parts[:1]
    return parts[0] if len(parts) == 1 else lax.concatenate(parts, axis)


def _cast(x, dtype, weak_type):
    return lax._convert_element_type(x, dtype, weak_type)


def _check_no_padding(widths, mode):
    if widths[0] > 0 or widths[1] > 0:
        raise ValueError(f"Cannot apply '{mode}' padding to empty axis")


# ----------------------------------------------------------------------------------------------
# modes


def _pad_constant(x, widths, constant_values):
    aval = get_aval(x)
    nd = aval.ndim
    cv = _util.as_operand(constant_values)
    cv = _cast(cv, aval.dtype, aval.weak_type)
    cv_shape = get_aval(cv).shape
    if len(cv_shape) == 1 and cv_shape[0] == 1:
        cv = lax.reshape(cv, ())
        cv_shape = ()
    if not cv_shape:
        return lax.pad(x, cv, [(b, a, 0) for b, a in widths])
    if len(cv_shape) == 1 and cv_shape[0] != 2:
        raise ValueError(f"jnp.pad: constant_values has unsupported shape {cv_shape}. If the "
                         "shape is 1D or 2D, the last dimension must be of size 1 or 2.")
    cv = _util.broadcast_to(cv, (nd, 2))
    for i, (b, a) in enumerate(widths):
        for j, w in ((0, b), (1, a)):
            if w:
                cfg = [(0, 0, 0)] * nd
                cfg[i] = (w, 0, 0) if j == 0 else (0, w, 0)
                x = lax.pad(x, _operand_entry(cv, (i, j)), cfg)
    return x


def _pad_empty(x, widths):
    # as in JAX, "empty" padding is zeros
    aval = get_aval(x)
    return lax.pad(x, _cast(_util.as_operand(0), aval.dtype, aval.weak_type),
                   [(b, a, 0) for b, a in widths])


def _pad_edge(x, widths):
    for axis, (b, a) in enumerate(widths):
        n = get_aval(x).shape[axis]
        if n == 0:
            _check_no_padding((b, a), "edge")
            continue
        if b or a:
            x = _cat([_with_width(_slice_axis(x, 0, 1, axis), b, axis), x,
                      _with_width(_slice_axis(x, n - 1, n, axis), a, axis)], axis)
    return x


def _pad_wrap(x, widths):
    nd = get_aval(x).ndim
    for axis, (b, a) in enumerate(widths):
        shape = get_aval(x).shape
        n = shape[axis]
        if n == 0:
            _check_no_padding((b, a), "wrap")
            continue
        if not (b or a):
            continue
        reps = 1 + -(-b // n) + -(-a // n)
        tiled = lax.broadcast_in_dim(x, shape[:axis] + (reps,) + shape[axis:],
                                     tuple(i for i in range(nd + 1) if i != axis))
        tiled = lax.reshape(tiled, shape[:axis] + (reps * n,) + shape[axis + 1:])
        start = (-(-b // n)) * n - b
        x = _slice_axis(tiled, start, start + b + n + a, axis)
    return x


def _pad_reflect(x, widths, mode, reflect_type):
    from kiln.numpy._ufuncs import multiply, subtract
    for axis, (before, after) in enumerate(widths):
        n0 = get_aval(x).shape[axis]
        if n0 == 0:
            _check_no_padding((before, after), mode)
            continue
        offset = 1 if (mode == "reflect" and n0 > 1) else 0
        for side, padding in (("before", before), ("after", after)):
            while padding > 0:
                n = get_aval(x).shape[axis]
                curr = min(padding, n0 - offset)
                padding -= curr
                if side == "before":
                    chunk = lax.rev(_slice_axis(x, offset, offset + curr, axis), (axis,))
                    edge = _slice_axis(x, 0, 1, axis)
                else:
                    chunk = lax.rev(_slice_axis(x, n - curr - offset, n - offset, axis),
                                    (axis,))
                    edge = _slice_axis(x, n - 1, n, axis)
                if reflect_type == "odd":
                    chunk = subtract(multiply(_with_width(edge, curr, axis), 2), chunk)
                x = lax.concatenate([chunk, x] if side == "before" else [x, chunk], axis)
    return x


def _pad_linear_ramp(x, widths, end_values):
    from kiln.numpy._creation import linspace
    aval = get_aval(x)
    ends = _value_pairs(end_values, aval.ndim, "end_values")
    for axis, ((b, a), (eb, ea)) in enumerate(zip(widths, ends)):
        n = get_aval(x).shape[axis]
        first = _slice_axis(x, 0, 1, axis)
        last = _slice_axis(x, n - 1, n, axis)
        squeeze = tuple(d for i, d in enumerate(get_aval(first).shape) if i != axis)
        ramp_b = linspace(eb, lax.reshape(first, squeeze), b, endpoint=False,
                          dtype=aval.dtype, axis=axis)
        ramp_a = linspace(ea, lax.reshape(last, squeeze), a, endpoint=False,
                          dtype=aval.dtype, axis=axis)
        ramp_b = _cast(ramp_b, aval.dtype, aval.weak_type)
        ramp_a = _cast(lax.rev(ramp_a, (axis,)), aval.dtype, aval.weak_type)
        x = _cat([ramp_b, x, ramp_a], axis)
    return x


def _stat_func(mode):
    from kiln.numpy import _reductions, _statistics
    return {"maximum": _reductions.max, "minimum": _reductions.min,
            "mean": _reductions.mean, "median": _statistics.median}[mode]


def _pad_stats(x, widths, stat_length, mode):
    aval = get_aval(x)
    nd = aval.ndim
    fn = _stat_func(mode)
    lengths = None if stat_length is None else _static_pairs(stat_length, nd, "stat_length")
    for axis, (b, a) in enumerate(widths):
        n = get_aval(x).shape[axis]
        if lengths is not None:
            lb, la = lengths[axis]
            if lb == 0 or la == 0:
                raise ValueError("stat_length of 0 yields no value for padding")
        if not (b or a) and n:
            continue  # nothing to add (JAX computes, then discards, the statistic)
        if n == 0 and mode == "median":
            raise TypeError("Cannot apply 'median' padding to empty axis")
        if lengths is None:
            stat_b = stat_a = fn(x, axis=axis, keepdims=True)
        else:
            lb, la = operator.index(min(lb, n)), operator.index(min(la, n))
            # negative lengths slice as Python's x[:lb] and x[-la:] (as JAX)
            stat_b = fn(_slice_axis(x, 0, lb if lb >= 0 else lb + n, axis), axis=axis,
                        keepdims=True)
            stat_a = fn(_slice_axis(x, n - la if la > 0 else -la, n, axis), axis=axis,
                        keepdims=True)
        stats = []
        for s in (stat_b, stat_a):
            if dtypes.issubdtype(aval.dtype, np.integer) and not dtypes.issubdtype(
                    get_aval(s).dtype, np.integer):
                from kiln.numpy._ufuncs import round as _round
                s = _round(s)
            stats.append(_cast(s, aval.dtype, aval.weak_type))
        x = _cat([_with_width(stats[0], b, axis), x, _with_width(stats[1], a, axis)], axis)
    return x


def _pad_func(x, widths, func, kwargs):
    from kiln.numpy._functional import apply_along_axis
    nd = get_aval(x).ndim
    if nd == 0:
        # as JAX (which re-normalizes the already normalized, empty, pad widths)
        raise _pairs_shape_error("pad_width", 0, (0,))
    aval = get_aval(x)
    # no check for negative widths: as in JAX they crop
    padded = lax.pad(x, _cast(_util.as_operand(0), aval.dtype, aval.weak_type),
                     [(int(b), int(a), 0) for b, a in widths])
    for axis in range(nd):
        padded = apply_along_axis(func, axis, padded, tuple(widths[axis]), axis, kwargs)
    return padded


# ----------------------------------------------------------------------------------------------
# pad


def pad(array, pad_width, mode="constant", **kwargs):
    """Add padding to an array.

    JAX-compatible implementation of :func:`numpy.pad`.

    Args:
      array: array to pad.
      pad_width: the number of values to add before and after each axis: an ``int`` or
        ``(int,)`` (the same on both sides of every axis), ``(before, after)`` (the same
        for every axis), or ``((before_1, after_1), ..., (before_N, after_N))``. Must be
        static, non-negative integers.
      mode: a string or a callable. The string modes are:

        - ``'constant'`` (default): pad with ``constant_values`` (default zero).
        - ``'empty'``: pad with unspecified values (zeros, as in JAX).
        - ``'edge'``: pad with the edge values of the array.
        - ``'wrap'``: pad with the array wrapped around the other end.
        - ``'linear_ramp'``: pad with a linear ramp from ``end_values`` to the edge value.
        - ``'maximum'``, ``'minimum'``, ``'mean'``, ``'median'``: pad with that statistic
          of (the first/last ``stat_length`` values along) each axis.
        - ``'reflect'``: pad with the reflection of the array, without the edge value.
        - ``'symmetric'``: pad with the reflection of the array, with the edge value.
        - a callable: see Notes.

      constant_values: for ``mode='constant'``: a scalar, or an array broadcastable to
        ``(ndim, 2)`` of (before, after) values per axis. May be traced.
      stat_length: for the statistic modes: the number of edge values the statistic is
        computed from, in the ``pad_width`` forms (default: the whole axis). Static.
      end_values: for ``mode='linear_ramp'``: the values the ramps end at, in the
        ``pad_width`` forms (default 0).
      reflect_type: for ``'reflect'``/``'symmetric'``: ``'even'`` (default) or ``'odd'``
        (the reflection is subtracted from twice the edge value).

    Returns:
      The padded array, of the dtype of ``array``. For integer arrays the ``mean``,
      ``median`` and ``linear_ramp`` values are rounded (half to even for the
      statistics, down for the ramp) before the cast.

    Notes:
      A callable ``mode`` is called as ``mode(row, pad_width, iaxis, kwargs)`` on each 1-D
      slice ``row`` of the zero-padded array along axis ``iaxis`` (mapped with ``vmap``),
      where ``pad_width`` is that axis' ``(before, after)`` and ``kwargs`` holds the extra
      keyword arguments of ``pad``. Unlike NumPy, where the function fills ``row`` in
      place, it must return the whole padded row.

    Examples:
      >>> x = jnp.array([10, 20, 30, 40])
      >>> jnp.pad(x, 2)
      Array([ 0,  0, 10, 20, 30, 40,  0,  0], dtype=int32)
      >>> jnp.pad(x, (1, 2), constant_values=99)
      Array([99, 10, 20, 30, 40, 99, 99], dtype=int32)
      >>> jnp.pad(x, 2, mode='mean')
      Array([25, 25, 10, 20, 30, 40, 25, 25], dtype=int32)
      >>> jnp.pad(x, 2, mode='reflect')
      Array([30, 20, 10, 20, 30, 40, 30, 20], dtype=int32)
      >>> jnp.pad(x, 2, mode='linear_ramp', end_values=0)
      Array([ 0,  5, 10, 20, 30, 40, 20,  0], dtype=int32)
      >>> def custom(row, pad_width, iaxis, kwargs):
      ...   before, after = pad_width
      ...   row = row.at[:before].set(kwargs.get('lo', 0))
      ...   return row.at[len(row) - after:].set(kwargs.get('hi', 0))
      >>> jnp.pad(jnp.array([2, 3, 4]), 2, custom, lo=-10, hi=10)
      Array([-10, -10,   2,   3,   4,  10,  10], dtype=int32)
    """
    _util.check_arraylike("pad", array)
    x = _util.as_operand(array)
    nd = get_aval(x).ndim
    widths = _static_pairs(pad_width, nd, "pad_width")
    if not all(_is_int(b) and _is_int(a) for b, a in widths):
        raise TypeError("`pad_width` must be of integral type.")

    if callable(mode):
        return _pad_func(x, widths, mode, kwargs)

    try:
        allowed = _MODE_KWARGS[mode]
    except KeyError:
        raise NotImplementedError(f"Unimplemented padding mode '{mode}' for np.pad.") from None
    unsupported = set(kwargs) - set(allowed)
    if unsupported:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unsupported}")
    if nd == 0:
        return x
    widths = [(int(b), int(a)) for b, a in widths]
    if any(b < 0 or a < 0 for b, a in widths):
        raise ValueError("index can't contain negative values")

    if mode == "constant":
        return _pad_constant(x, widths, kwargs.get("constant_values", 0))
    if mode == "empty":
        return _pad_empty(x, widths)
    if mode == "edge":
        return _pad_edge(x, widths)
    if mode == "wrap":
        return _pad_wrap(x, widths)
    if mode in ("reflect", "symmetric"):
        reflect_type = kwargs.get("reflect_type", "even")
        if reflect_type not in ("even", "odd"):
            raise ValueError(f"unsupported reflect_type: {reflect_type!r}; expected 'even' "
                             "or 'odd'")
        return _pad_reflect(x, widths, mode, reflect_type)
    if mode == "linear_ramp":
        return _pad_linear_ramp(x, widths, kwargs.get("end_values", 0))
    return _pad_stats(x, widths, kwargs.get("stat_length"), mode)
