"""Indexing key arrays (``keys[i]``, ``keys[1:3]``, ``keys[idx_array]``, ``keys[mask]``).

Key arrays index only their leading (key) axes; the trailing key-data axes stay whole.
Concrete data indexed with static ints, slices, ``None`` and ``...`` goes straight to
NumPy (whose answer is JAX's: out-of-bound ints raise ``IndexError``); everything else
(traced or array indices, boolean masks, ``mode=``) is ``kiln.numpy``'s indexing, whose
``lax`` operations (slices, gathers, reshapes) act on keys through their key rules.
"""
from __future__ import annotations

import operator

import numpy as np

from kiln.array import Array, make_array


def _is_static_int(x) -> bool:
    if isinstance(x, (bool, np.bool_)):
        return False
    if type(x) is int or isinstance(x, np.integer):
        return True
    return False


def _basic(idx) -> bool:
    return all(i is None or i is Ellipsis or _is_static_int(i) or
               (isinstance(i, slice) and all(v is None or _is_static_int(v)
                                             for v in (i.start, i.stop, i.step)))
               for i in idx)


def _expand(idx, nlead: int) -> list:
    """``idx`` with ``...`` replaced by full slices, covering the ``nlead`` leading axes."""
    idx = list(idx)
    used = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > nlead:
        raise IndexError(f"Too many indices: {nlead}-dimensional array indexed with {used} "
                         "regular indices.")
    if Ellipsis in idx:
        pos = idx.index(Ellipsis)
        idx[pos:pos + 1] = [slice(None)] * (nlead - used)
    else:
        idx += [slice(None)] * (nlead - used)
    return idx


def index_keys(keys, idx):
    """``keys[idx]`` for a typed key array."""
    base = keys._base_array
    tup = idx if isinstance(idx, tuple) else (idx,)
    if type(base) is Array and _basic(tup) and _in_bounds(tup, keys.shape):
        full = _expand(tup, keys.ndim)
        data = base._value[tuple(full) + (slice(None),) * len(keys._impl.key_shape)]
        return keys._rewrap(make_array(np.asarray(data)))
    from kiln.numpy._indexing import _rewriting_take
    return _rewriting_take(keys, idx)


def _in_bounds(idx, shape) -> bool:
    """Whether every static int of ``idx`` is in range (JAX clamps the others, NumPy would
    raise) and there are not too many indices (NumPy's error is not JAX's)."""
    if sum(1 for i in idx if i is not None and i is not Ellipsis) > len(shape) or \
            sum(1 for i in idx if i is Ellipsis) > 1:
        return False
    axis = 0
    for i in idx:
        if i is None:
            continue
        if i is Ellipsis:
            axis = len(shape) - sum(1 for j in idx[idx.index(i) + 1:]
                                    if j is not None)
            continue
        if _is_static_int(i) and not -shape[axis] <= operator.index(i) < shape[axis]:
            return False
        axis += 1
    return True
