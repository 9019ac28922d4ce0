"""Indexing the key axes of raw key data (``keys[i]``, ``keys[1:3]``, ``keys[..., 0]``).

Key arrays index only their leading (key) axes; the trailing key-data axes stay
whole. Concrete data is indexed with NumPy; traced data with ``lax`` slicing
(static ints and slices, ``None``, ``...``, and scalar traced integers).
"""
from __future__ import annotations

import operator

import numpy as np

from kiln.array import Array, make_array
from kiln.core.trace import Tracer, get_aval


def _is_int(x) -> bool:
    if isinstance(x, (bool, np.bool_)):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return not isinstance(x, Tracer)


def _expand(idx, nlead: int) -> list:
    """Replace ``...`` by full slices so the index covers the ``nlead`` leading axes."""
    idx = list(idx)
    used = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > nlead:
        raise IndexError(f"Too many indices for key array: array is {nlead}-dimensional, but "
                         f"{used} were indexed")
    if Ellipsis in idx:
        pos = idx.index(Ellipsis)
        idx[pos:pos + 1] = [slice(None)] * (nlead - used)
    else:
        idx += [slice(None)] * (nlead - used)
    return idx


def index_leading(base, idx, nkey: int):
    """``base[idx]`` where ``idx`` addresses only the leading ``ndim - nkey`` axes."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    shape = get_aval(base).shape
    nlead = len(shape) - nkey
    if type(base) is Array and not any(isinstance(i, Tracer) for i in idx):
        full = tuple(_expand(idx, nlead)) + (slice(None),) * nkey
        np_idx = tuple(np.asarray(i._value) if type(i) is Array else i for i in full)
        return make_array(np.asarray(base._value[np_idx]))
    if all(i is None or i is Ellipsis or isinstance(i, slice) or _is_int(i) or
           (isinstance(i, (Tracer, Array)) and get_aval(i).ndim == 0) for i in idx):
        return _traced_basic(base, _expand(idx, nlead), shape)
    # Advanced (array) indices: defer to kiln.numpy indexing of the raw data.
    full = tuple(_expand(idx, nlead)) + (slice(None),) * nkey
    return base[full]


def _traced_basic(x, idx, shape):
    from kiln import lax
    axis = 0  # current axis of x
    for i in idx:
        if i is None:
            x = lax.expand_dims(x, (axis,))
            axis += 1
            continue
        n = get_aval(x).shape[axis]
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step < 0:
                x = lax.rev(x, (axis,))
                start, stop, step = n - 1 - start, n - 1 - stop, -step
            length = max(0, -(-(stop - start) // step))
            limit = start + (length - 1) * step + 1 if length else start
            nd = get_aval(x).ndim
            starts = [0] * nd
            limits = list(get_aval(x).shape)
            strides = [1] * nd
            starts[axis], limits[axis], strides[axis] = start, limit, step
            x = lax.slice(x, tuple(starts), tuple(limits), tuple(strides))
            axis += 1
        elif _is_int(i):
            k = operator.index(i)
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
            k %= n
            x = lax.index_in_dim(x, k, axis, keepdims=False)
        else:
            i = lax.convert_element_type(i, np.int32) if get_aval(i).dtype.kind != "i" else i
            x = lax.dynamic_index_in_dim(x, i, axis, keepdims=False)
    return x
