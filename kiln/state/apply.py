"""Reading and writing the part of a value that an indexer selects.

``read(x, indexer)``, ``write(x, indexer, v)`` and ``accumulate(x, indexer, v)`` give the
indexed part of ``x``, ``x`` with that part replaced, and ``x`` with ``v`` added to it.
They are the one definition of what ``get``, ``swap`` and ``addupdate`` do: the eager
implementations apply them to a reference's current value, and state discharge (the
compiled path) traces them. The semantics are JAX's:

* all-static slices: ``lax.slice`` / an update of that slice;
* slices of stride 1 and scalar integers (static or traced): ``lax.dynamic_slice`` /
  ``lax.dynamic_update_slice`` (negative indices count from the end; out-of-range starts
  are clamped so the window fits);
* anything else (integer arrays, strides with traced indices): a gather / scatter over
  index arrays built with NumPy's placement rule (negative indices count from the end;
  writes to out-of-range positions are dropped, duplicate positions accumulate in
  ``accumulate``).
"""
from __future__ import annotations

import numpy as np

from kiln.core.trace import get_aval
from kiln.state.indexing import NDIndexer, Slice


def _lax():
    from kiln import lax
    return lax


def _static_slices(ix: NDIndexer):
    if all(type(i) is Slice and not i.is_dynamic_start for i in ix.indices):
        starts = tuple(i.start for i in ix.indices)
        limits = tuple(i.start + (i.size - 1) * i.stride + 1 if i.size else i.start
                       for i in ix.indices)
        strides = tuple(i.stride for i in ix.indices)
        return starts, limits, strides
    return None


def _dynamic_window(ix: NDIndexer):
    """``(starts, sizes, squeezed dims)`` when every index is a stride-1 slice or a scalar."""
    for i in ix.indices:
        if type(i) is Slice:
            if i.stride != 1:
                return None
        elif not isinstance(i, (int, np.integer)) and get_aval(i).shape != ():
            return None
    lax = _lax()
    starts, sizes, squeeze = [], [], []
    for k, i in enumerate(ix.indices):
        if type(i) is Slice:
            starts.append(_i32(i.start))
            sizes.append(i.size)
        else:
            starts.append(_i32(i))
            sizes.append(1)
            squeeze.append(k)
    del lax
    return starts, sizes, tuple(squeeze)


def _i32(x):
    if isinstance(x, (int, np.integer)):
        return np.int32(x)
    return _lax().convert_element_type(x, np.int32)


def _gather_arrays(ix: NDIndexer):
    """One integer index array per dimension, all broadcasting to the result shape, so that
    ``x[arrays]`` is the indexed part (NumPy's placement of the integer dimensions)."""
    import kiln.numpy as jnp
    lax = _lax()
    out_shape = ix.get_indexer_shape()
    nd = len(out_shape)
    flags = ix.is_int_indexing()
    p = ix.int_block_position()
    n_int = len(ix.int_indexer_shape)
    arrays = []
    slice_pos = 0
    for i, dim, is_int in zip(ix.indices, ix.shape, flags):
        if is_int:
            a = jnp.asarray(i)
            a = jnp.broadcast_to(a, ix.int_indexer_shape)
            a = a.reshape((1,) * p + ix.int_indexer_shape + (1,) * (nd - p - n_int))
            arrays.append(a)
            continue
        q = slice_pos if slice_pos < p or not any(flags) else slice_pos + n_int
        slice_pos += 1
        start = i.start
        if i.is_dynamic_start:      # a dynamic window is clamped to fit, as dynamic_slice
            hi = max(dim - ((i.size - 1) * i.stride + 1), 0)
            start = jnp.clip(lax.convert_element_type(start, np.int32), 0, hi)
        a = lax.iota(np.int32, i.size) * np.int32(i.stride) + start
        shape = [1] * nd
        shape[q] = i.size
        arrays.append(a.reshape(tuple(shape)))
    return tuple(arrays)


def read(x, ix: NDIndexer):
    """The part of ``x`` that ``ix`` selects."""
    if ix.is_trivial():
        return x
    lax = _lax()
    s = _static_slices(ix)
    if s is not None:
        return lax.slice(x, *s)
    w = _dynamic_window(ix)
    if w is not None:
        starts, sizes, squeeze = w
        y = lax.dynamic_slice(x, starts, sizes)
        return lax.squeeze(y, squeeze) if squeeze else y
    return x[_gather_arrays(ix)]


def write(x, ix: NDIndexer, v):
    """``x`` with the part ``ix`` selects replaced by ``v`` (of the part's shape)."""
    if ix.is_trivial():
        return v
    lax = _lax()
    w = _dynamic_window(ix)
    if w is not None:
        starts, _, squeeze = w
        upd = lax.expand_dims(v, squeeze) if squeeze else v
        return lax.dynamic_update_slice(x, upd, starts)
    return x.at[_gather_arrays(ix)].set(v)


def accumulate(x, ix: NDIndexer, v):
    """``x`` with ``v`` added to the part ``ix`` selects (duplicate positions add up)."""
    if ix.is_trivial():
        return _lax().add(x, v)
    w = _dynamic_window(ix)
    if w is not None:
        return write(x, ix, _lax().add(read(x, ix), v))
    return x.at[_gather_arrays(ix)].add(v)


def read_transformed(x, transforms):
    """Apply a chain of indexers (``ref.at[i].at[j]``) to ``x``."""
    for t in transforms:
        x = read(x, t)
    return x


def write_transformed(x, transforms, v):
    """``(old, new_x)``: the part of ``x`` a chain of indexers selects, and ``x`` with that
    part replaced by ``v``."""
    inter = [x]
    for t in transforms:
        inter.append(read(inter[-1], t))
    old = inter[-1]
    new = v
    for base, t in zip(reversed(inter[:-1]), reversed(transforms)):
        new = write(base, t, new)
    return old, new


def accumulate_transformed(x, transforms, v):
    """``x`` with ``v`` added to the part a chain of indexers selects."""
    if len(transforms) <= 1:
        return accumulate(x, transforms[0], v) if transforms else _lax().add(x, v)
    inner = read_transformed(x, transforms[:-1])
    return write_transformed(x, transforms[:-1], accumulate(inner, transforms[-1], v))[1]
