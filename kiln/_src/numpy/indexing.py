"""``jax._src.numpy.indexing``: ``rewriting_take`` (``arr[idx]`` with JAX's internal
options) and ``IndexingStrategy``, which JAX's ``lax_numpy_indexing_test`` imports.

kiln has one indexing path (:mod:`kiln.numpy._indexing`): every strategy gives the same
values. ``STATIC_SLICE`` checks what JAX's static-slice strategy accepts (static integers,
slices, ``...`` and ``None``; integers within the axis) and raises JAX's errors otherwise;
``normalize_indices=False`` leaves negative indices unwrapped (they clamp to 0, or fill).
"""
from __future__ import annotations

import enum

import numpy as np

from kiln.core.trace import Tracer
from kiln.numpy import _indexing
from kiln.state.indexing import Slice


class IndexingStrategy(enum.Enum):
    AUTO = "auto"
    GATHER = "gather"
    SCATTER = "scatter"
    STATIC_SLICE = "static_slice"
    DYNAMIC_SLICE = "dynamic_slice"


def _check_static(arr, idx) -> None:
    entries = idx if isinstance(idx, tuple) else (idx,)
    shape = np.shape(arr) if not hasattr(arr, "aval") else arr.aval.shape
    dims = [e for e in entries if e is not None and e is not Ellipsis]
    if len(dims) > len(shape):
        raise IndexError(f"Too many indices: array is {len(shape)}-dimensional, but "
                         f"{len(dims)} were indexed")
    d = 0
    for e in entries:
        if e is None:
            continue
        if e is Ellipsis:
            d += len(shape) - len(dims)
            continue
        if isinstance(e, slice):
            if any(isinstance(p, Tracer) for p in (e.start, e.stop, e.step)):
                raise TypeError("static_slice: indices must be static scalars or slices.")
        elif type(e) is Slice:
            if e.is_dynamic_start:
                raise TypeError("static_slice: indices must be static scalars or slices.")
        elif isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_)):
            n = shape[d]
            if not -n <= int(e) < n:
                raise IndexError(f"index {int(e)} out of bounds for axis {d} with size {n}")
        else:
            raise TypeError("static_slice: indices must be static scalars or slices.")
        d += 1


def rewriting_take(arr, idx, *, indices_are_sorted=False, unique_indices=False, mode=None,
                   fill_value=None, normalize_indices=True, out_sharding=None,
                   strategy=IndexingStrategy.AUTO):
    """``arr[idx]`` with JAX's internal indexing options (see the module docstring)."""
    if not isinstance(strategy, IndexingStrategy):
        raise TypeError(f"Expected strategy to be IndexingStrategy; got {strategy}")
    if strategy is IndexingStrategy.STATIC_SLICE:
        _check_static(arr, idx)
    return _indexing._rewriting_take(arr, idx, indices_are_sorted=indices_are_sorted,
                                     unique_indices=unique_indices, mode=mode,
                                     fill_value=fill_value, out_sharding=out_sharding,
                                     wrap_negative_indices=normalize_indices)


__all__ = ["IndexingStrategy", "rewriting_take"]
