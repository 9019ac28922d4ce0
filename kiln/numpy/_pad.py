"""``jnp.pad``: constant, edge, wrap, reflect, symmetric, maximum, minimum, mean and empty
modes, built from ``lax.pad``, slices, flips, broadcasts and concatenation (pad widths
must be static; the array and a constant value may be traced)."""
from __future__ import annotations

import numpy as np

from kiln import lax
from kiln.array import Array, make_array
from kiln.core.trace import Tracer
from kiln.numpy import _util

__all__ = ["pad"]


def _pad_widths(pad_width, nd):
    if isinstance(pad_width, Tracer):
        raise TypeError("jnp.pad: pad_width must be static")
    pw = np.asarray(pad_width._value if type(pad_width) is Array else pad_width)
    if pw.dtype.kind not in "iu":
        raise TypeError(f"`pad_width` must be of integral type, got {pw.dtype}")
    pw = np.broadcast_to(pw, (nd, 2)) if pw.ndim < 2 or pw.shape[0] == 1 else pw
    if pw.shape != (nd, 2):
        raise ValueError(f"jnp.pad: pad_width with nd={nd} has unsupported shape "
                         f"{np.shape(pad_width)}. Valid shapes are ({nd}, 2), (1, 2), (2,), (1,), "
                         "or ().")
    if (pw < 0).any():
        raise ValueError("index can't contain negative values")
    return [(int(a), int(b)) for a, b in pw.tolist()]


def _slice_axis(x, start, stop, axis):
    shape = x.shape
    starts = [0] * len(shape)
    limits = list(shape)
    starts[axis], limits[axis] = start, stop
    return lax.slice(x, tuple(starts), tuple(limits))


def _with_width(part, width, axis):
    shape = list(part.shape)
    shape[axis] = width
    return _util.broadcast_to(part, tuple(shape))


def _cat(parts, axis):
    parts = [p for p in parts if p.shape[axis] > 0]
    return parts[0] if len(parts) == 1 else lax.concatenate(parts, axis)


def _values_per_axis(values, nd, dtype):
    """Per-axis (before, after) scalar operands of ``dtype`` from constant_values-like input."""
    if isinstance(values, (Tracer, Array)) and values.ndim == 0:
        v = lax.convert_element_type(values, dtype)
        return [(v, v)] * nd
    if isinstance(values, (Tracer,)):
        raise NotImplementedError("jnp.pad: traced non-scalar constant_values")
    arr = np.asarray(values._value if type(values) is Array else values)
    arr = np.broadcast_to(arr, (nd, 2)) if arr.ndim < 2 or arr.shape[0] == 1 else arr
    return [(make_array(np.asarray(a, dtype)), make_array(np.asarray(b, dtype)))
            for a, b in arr.tolist()]


def _reflect_axis(x, before, after, axis, mode, reflect_type):
    n0 = x.shape[axis]
    offset = 1 if (mode == "reflect" and n0 > 1) else 0
    from kiln.numpy._ufuncs import multiply, subtract
    for side, padding in (("before", before), ("after", after)):
        while padding > 0:
            n = x.shape[axis]
            curr = min(padding, n0 - offset)
            padding -= curr
            if side == "before":
                chunk = lax.rev(_slice_axis(x, offset, offset + curr, axis), (axis,))
                edge = _slice_axis(x, 0, 1, axis)
            else:
                chunk = lax.rev(_slice_axis(x, n - curr - offset, n - offset, axis), (axis,))
                edge = _slice_axis(x, n - 1, n, axis)
            if reflect_type == "odd":
                chunk = subtract(multiply(_with_width(edge, curr, axis), 2), chunk)
            x = _cat([chunk, x] if side == "before" else [x, chunk], axis)
    return x


def pad(array, pad_width, mode="constant", **kwargs):
    """Pad ``array`` by ``pad_width`` ((before, after) per axis) as NumPy's ``pad``."""
    _util.check_arraylike("pad", array)
    x = _util.as_operand(array)
    nd = x.ndim
    widths = _pad_widths(pad_width, nd)
    if callable(mode):
        raise NotImplementedError("jnp.pad with a callable mode is not implemented yet")
    dt = x.dtype
    if mode == "constant" or mode == "empty":
        values = kwargs.get("constant_values", 0) if mode == "constant" else 0
        per_axis = _values_per_axis(_util.as_operand(values) if isinstance(
            values, (int, float, complex, bool, np.generic)) else values, nd, dt)
        if all(a is per_axis[0][0] and b is per_axis[0][0] for a, b in per_axis):
            return lax.pad(x, per_axis[0][0], [(b, a, 0) for b, a in widths])
        for axis, ((b, a), (vb, va)) in enumerate(zip(widths, per_axis)):
            if b or a:
                parts = (_const_block(x, vb, b, axis), x, _const_block(x, va, a, axis))
                x = _cat([p for p in parts if p is not None], axis)
        return x
    for axis, (b, a) in enumerate(widths):
        if not (b or a):
            continue
        n = x.shape[axis]
        if n == 0:
            raise ValueError(f"Cannot apply '{mode}' padding to empty axis")
        if mode == "edge":
            x = _cat([_with_width(_slice_axis(x, 0, 1, axis), b, axis), x,
                      _with_width(_slice_axis(x, n - 1, n, axis), a, axis)], axis)
        elif mode == "wrap":
            reps = 1 + -(-b // n) + -(-a // n)
            shape = x.shape
            tiled = lax.broadcast_in_dim(x, shape[:axis] + (reps,) + shape[axis:],
                                         tuple(i for i in range(nd + 1) if i != axis))
            tiled = lax.reshape(tiled, shape[:axis] + (reps * n,) + shape[axis + 1:])
            start = (-(-b // n)) * n - b
            x = _slice_axis(tiled, start, start + b + n + a, axis)
        elif mode in ("reflect", "symmetric"):
            reflect_type = kwargs.get("reflect_type", "even")
            if reflect_type not in ("even", "odd"):
                raise ValueError(f"unsupported reflect_type: {reflect_type}")
            x = _reflect_axis(x, b, a, axis, mode, reflect_type)
        elif mode in ("maximum", "minimum", "mean"):
            if kwargs.get("stat_length") is not None:
                raise NotImplementedError("jnp.pad: stat_length is not implemented yet")
            from kiln.numpy import _reductions
            fn = {"maximum": _reductions.max, "minimum": _reductions.min,
                  "mean": _reductions.mean}[mode]
            stat = fn(x, axis=axis, keepdims=True)
            if mode == "mean" and stat.dtype != dt:
                from kiln.numpy._ufuncs import round as _round
                stat = lax.convert_element_type(_round(stat), dt)
            x = _cat([_with_width(stat, b, axis), x, _with_width(stat, a, axis)], axis)
        else:
            raise NotImplementedError(f"jnp.pad mode {mode!r} is not implemented yet")
    return x


def _const_block(x, value, width, axis):
    if not width:
        return None
    shape = list(x.shape)
    shape[axis] = width
    return lax.broadcast_in_dim(value, tuple(shape), ())

