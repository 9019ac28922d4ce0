"""``jax.ds`` / ``kiln.ds`` slices (``Slice(start, size, stride)``, ``start`` possibly
traced) inside ``x[...]`` and ``x.at[...]``, with JAX's semantics.

Each such entry is applied first, along its own dimension, and replaced by ``:``; the rest
of the index then goes through the ordinary paths (so it places its dimension like a
slice, never like an advanced index). What JAX does, per case:

* reading, stride 1: a negative start counts from the end, then the window is moved to fit
  (``lax.dynamic_slice``: ``ds(8, 5)`` of 10 elements reads 5..9); with ``mode='fill'``
  the start is not wrapped and a window that does not fit reads ``fill_value`` throughout;
* reading, stride > 1: each index ``start + k * stride`` on its own, not wrapped, clamped
  into the axis (``mode='fill'``: ``fill_value`` where out of range, negative too);
* updating, stride 1: the start is not wrapped; a window that does not fit is dropped
  whole (``mode='clip'``/``'promise_in_bounds'``: moved to fit);
* updating, stride > 1: each index on its own, out-of-range ones (negative ones too)
  dropped, or clamped with ``mode='clip'``.
"""
from __future__ import annotations

import numpy as np

from kiln import lax
from kiln.core.trace import Tracer, get_aval
from kiln.state.indexing import Slice


def has_slice_objects(idx) -> bool:
    entries = idx if isinstance(idx, tuple) else (idx,)
    return any(type(e) is Slice for e in entries)


def _is_bool_array(e) -> bool:
    if isinstance(e, (bool, np.bool_)) or e is None or e is Ellipsis or isinstance(e, slice):
        return False
    if isinstance(e, (np.ndarray, Tracer)) or hasattr(e, "aval") or hasattr(e, "dtype"):
        try:
            return np.dtype(get_aval(e).dtype) == np.bool_
        except Exception:
            return False
    return False


def _entry_dims(ndim: int, entries: tuple) -> list:
    """For each index entry, the first operand dimension it consumes (None: none)."""
    def width(e):
        if e is None or e is Ellipsis:
            return 0
        if isinstance(e, (bool, np.bool_)):
            return 0
        if _is_bool_array(e):
            return len(get_aval(e).shape)
        return 1
    used = sum(width(e) for e in entries)
    dims, d = [], 0
    for e in entries:
        if e is Ellipsis:
            dims.append(None)
            d += max(ndim - used, 0)
            continue
        w = width(e)
        dims.append(d if w else None)
        d += w
    return dims


def _start(s):
    return lax.convert_element_type(s, np.int32) if isinstance(s, Tracer) or hasattr(s, "aval") \
        else np.int32(s)


def _strided_indices(sl: Slice):
    return _start(sl.start) + np.arange(sl.size, dtype=np.int32) * np.int32(sl.stride)


def _fill_default(dtype):
    from kiln.lax import gather_scatter
    return gather_scatter._default_fill_value(dtype)


def take_slices(x, idx, mode, fill_value):
    """``x`` with the index's ``Slice`` entries applied (reading), and the index with them
    replaced by ``:``."""
    from kiln.lax.gather_scatter import GatherScatterMode
    from kiln.numpy import _util
    from kiln.numpy._indexing import _gather_mode
    x = _util.as_operand(x)
    entries = idx if isinstance(idx, tuple) else (idx,)
    dims = _entry_dims(len(get_aval(x).shape), entries)
    fill = mode is not None and _gather_mode(mode) == GatherScatterMode.FILL_OR_DROP
    out = list(entries)
    for k, (e, d) in enumerate(zip(entries, dims)):
        if type(e) is not Slice:
            continue
        shape = get_aval(x).shape
        n = shape[d]
        dtype = get_aval(x).dtype
        fv = (_fill_default(dtype) if fill_value is None else fill_value) if fill else None
        if e.stride == 1 and e.size > n:
            raise TypeError("slice slice_sizes must be less than or equal to operand shape, "
                            f"got slice_sizes ({e.size},) for operand shape ({n},).")
        if e.stride == 1:
            s = _start(e.start)
            if n and not fill:      # mode='fill' does not wrap a negative start
                s = lax.select(s < 0, s + np.int32(n), s)
            win = lax.dynamic_slice_in_dim(x, s, e.size, axis=d)
            if fill:
                ok = (s >= 0) & (s + np.int32(e.size) <= np.int32(n))
                win = lax.select(lax.broadcast_in_dim(ok, get_aval(win).shape, ()), win,
                                 lax.full(get_aval(win).shape, fv, dtype))
            x = win
        else:
            ix = _strided_indices(e)
            if fill:                # out of range, negative ones too: fill_value
                ix = lax.select(ix < 0, lax.full(ix.shape, n, np.int32), ix)
                x = _take_axis(x, ix, d, "fill", fv)
            else:
                x = _take_axis(x, lax.clamp(np.int32(0), ix, np.int32(max(n - 1, 0))), d,
                               "clip", None)
        out[k] = slice(None)
    return x, tuple(out) if isinstance(idx, tuple) else out[0]


def _take_axis(x, ix, d, mode, fill_value):
    from kiln.numpy._indexing import take
    return take(x, ix, axis=d, mode=mode, fill_value=fill_value)


def update_slices(x, idx, mode, apply):
    """``x.at[idx].<op>(...)`` for an index with ``Slice`` entries: ``apply(y, rest)`` does
    the update of ``y`` at the index ``rest`` (no ``Slice`` left in it)."""
    from kiln.lax.gather_scatter import GatherScatterMode
    from kiln.numpy import _util
    from kiln.numpy._indexing import _gather_mode
    x = _util.as_operand(x)
    entries = idx if isinstance(idx, tuple) else (idx,)
    dims = _entry_dims(len(get_aval(x).shape), entries)
    k = next(i for i, e in enumerate(entries) if type(e) is Slice)
    sl, d = entries[k], dims[k]
    n = get_aval(x).shape[d]
    clip = mode is not None and _gather_mode(mode) != GatherScatterMode.FILL_OR_DROP
    rest = entries[:k] + (slice(None),) + entries[k + 1:]
    if sl.stride == 1:
        if sl.size > n:                             # JAX's scatter error
            raise TypeError("Bounds of the window dimensions of updates must not exceed the "
                            f"bounds of the corresponding dimensions of operand: a jax.ds "
                            f"window of {sl.size} on an axis of size {n}.")
        s = _start(sl.start)
        lo = lax.clamp(np.int32(0), s, np.int32(n - sl.size))
        win = lax.dynamic_slice_in_dim(x, lo, sl.size, axis=d)
        new = lax.dynamic_update_slice_in_dim(x, _recurse(win, rest, mode, apply), lo, axis=d)
        if clip:
            return new
        ok = (s >= 0) & (s + np.int32(sl.size) <= np.int32(n))
        return lax.select(lax.broadcast_in_dim(ok, get_aval(x).shape, ()), new, x)
    # Stride > 1: each index on its own, as a 1-D array index in the slice's place (the
    # only advanced index, so it keeps that place).
    if any(_is_advanced(e) for i, e in enumerate(entries) if i != k):
        return _update_strided_block(x, sl, d, n, rest, mode, apply, clip)
    ix = _strided_indices(sl)
    ix = (lax.clamp(np.int32(0), ix, np.int32(max(n - 1, 0))) if clip else
          lax.select((ix < 0) | (ix >= n), lax.full(ix.shape, n, np.int32), ix))
    return _recurse(x, entries[:k] + (ix,) + entries[k + 1:], mode, apply)


def _update_strided_block(x, sl, d, n, rest, mode, apply, clip):
    """A strided ``jax.ds`` beside array indices: it stays a slice (its dimension is not
    broadcast with the array indices), so its rows are taken out as a block, updated with
    the rest of the index, and written back; rows out of range are dropped, as JAX drops
    them. ``mode='clip'`` can send several out-of-range rows to the same edge row, where
    JAX applies each update in turn (``add`` twice): a block write-back cannot, so it is
    refused."""
    if clip:
        raise NotImplementedError(
            "x.at[...] with a strided jax.ds slice, array indices and mode='clip' is not "
            "supported by kiln (clamped rows may repeat); use the default mode (rows out of "
            "range dropped) or index the strided rows with an index array")
    ix = _strided_indices(sl)
    ix = lax.select((ix < 0) | (ix >= n), lax.full(ix.shape, n, np.int32), ix)
    block = _take_axis(x, lax.clamp(np.int32(0), ix, np.int32(max(n - 1, 0))), d, "clip",
                       None)
    block = _recurse(block, rest, mode, apply)
    where = (slice(None),) * d + (ix,)
    return x.at[where].set(block, mode="drop")


def _recurse(x, entries, mode, apply):
    idx = tuple(entries)
    if has_slice_objects(idx):
        return update_slices(x, idx, mode, apply)
    return apply(x, idx)


def _is_advanced(e) -> bool:
    if e is None or e is Ellipsis or isinstance(e, (slice, Slice, int, np.integer, bool)):
        return False
    shape = np.shape(e) if not (isinstance(e, Tracer) or hasattr(e, "aval")) else \
        get_aval(e).shape
    return len(shape) > 0
