"""``jax.ops``: segment reductions (``segment_sum``, ``segment_prod``, ``segment_max``,
``segment_min``), as in JAX 0.10.2.

``segment_<op>(data, segment_ids, num_segments)`` reduces the rows of ``data`` (its leading
axis) into ``num_segments`` output rows, row ``i`` going to segment ``segment_ids[i]``:

* The result has shape ``(num_segments,) + data.shape[1:]`` and ``data``'s dtype. A segment
  no id points to holds the reduction's identity: 0 (sum), 1 (prod), ``-inf`` / the dtype's
  minimum / False (max), ``+inf`` / the dtype's maximum / True (min).
* ``num_segments=None`` means ``max(segment_ids) + 1``; it sets the output shape, so it must
  be concrete (``ConcretizationTypeError`` under ``jit`` with traced ids), and a negative
  value raises ``ValueError``.
* ``mode`` (a ``lax.GatherScatterMode`` or its name) handles ids outside
  ``[0, num_segments)``: the default ``FILL_OR_DROP`` drops them (negative ids do not wrap),
  ``'clip'`` clamps them into range.
* ``bucket_size=k`` reduces each run of ``k`` consecutive rows into its own partial result
  and then reduces the partials (for sums and products of many terms this is more accurate).
* ``indices_are_sorted`` / ``unique_indices`` are promises passed on to the scatter.

Each is one ``lax.scatter_add/mul/max/min`` into an identity-filled array (through
``x.at[...]`` with negative indices left unwrapped), so ``jit``, ``vmap`` and gradients
follow the scatters' rules, as in JAX.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes, lax
from kiln import numpy as jnp
from kiln.numpy import _util
from kiln.numpy._indexing_at import scatter as _scatter

__all__ = ["segment_max", "segment_min", "segment_prod", "segment_sum"]


def _identity(op, dtype):
    """The value an empty segment holds for the reduction ``op`` in ``dtype``."""
    if op == "add":
        return 0
    if op == "mul":
        return 1
    is_bool = np.dtype(dtype) == np.bool_
    is_int = dtypes.issubdtype(dtype, np.integer)
    if op == "min":
        if is_bool:
            return True
        return dtypes.iinfo(dtype).max if is_int else float("inf")
    if is_bool:
        return False
    return dtypes.iinfo(dtype).min if is_int else -float("inf")


_REDUCERS = {"add": jnp.sum, "mul": jnp.prod, "max": jnp.max, "min": jnp.min}


def _segment_reduce(name, op, data, segment_ids, num_segments, indices_are_sorted,
                    unique_indices, bucket_size, mode, out_sharding):
    _util.check_arraylike(name, data, segment_ids)
    mode = lax.GatherScatterMode.FILL_OR_DROP if mode is None else mode
    data = jnp.asarray(data)
    segment_ids = jnp.asarray(segment_ids)
    dtype = data.dtype
    context = f"{name}() `num_segments` argument."
    if num_segments is None:
        num_segments = jnp.max(segment_ids) + 1
    num_segments = _util.core_int(num_segments, context)
    if num_segments < 0:
        raise ValueError("num_segments must be non-negative.")
    fill = _identity(op, dtype)
    kw = dict(indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
              wrap_negative_indices=False)
    if bucket_size is None:
        out = jnp.full((num_segments,) + data.shape[1:], fill, dtype=dtype)
        out = _scatter(out, segment_ids, data, op, mode, **kw)
        return _util.laid_out(out, out_sharding)
    if out_sharding is not None:
        # JAX refuses this combination too (the same class)
        raise NotImplementedError(f"{name}: out_sharding together with bucket_size is not "
                                  "supported; drop one of them")
    n = segment_ids.shape[0]
    num_buckets = -(-segment_ids.size // bucket_size)
    out = jnp.full((num_buckets, num_segments) + data.shape[1:], fill, dtype=dtype)
    bucket_of_row = jnp.arange(n) // bucket_size
    out = _scatter(out, (bucket_of_row, segment_ids[None, :]), data, op, mode, **kw)
    return _REDUCERS[op](out, axis=0).astype(dtype)


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """The sum of the rows of ``data`` in each segment (``segment_ids[i]`` is row ``i``'s
    segment); shape ``(num_segments,) + data.shape[1:]``, empty segments 0, ids outside
    ``[0, num_segments)`` dropped unless ``mode`` says otherwise. ``num_segments`` defaults
    to ``max(segment_ids) + 1`` (concrete ids only); ``bucket_size`` sums buckets of that
    many rows separately first."""
    return _segment_reduce("segment_sum", "add", data, segment_ids, num_segments,
                           indices_are_sorted, unique_indices, bucket_size, mode,
                           out_sharding)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted=False,
                 unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """The product of the rows of ``data`` in each segment (empty segments 1); arguments as
    in :func:`segment_sum`."""
    return _segment_reduce("segment_prod", "mul", data, segment_ids, num_segments,
                           indices_are_sorted, unique_indices, bucket_size, mode,
                           out_sharding)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """The maximum of the rows of ``data`` in each segment (empty segments ``-inf``, the
    integer dtype's minimum, or False); arguments as in :func:`segment_sum`."""
    return _segment_reduce("segment_max", "max", data, segment_ids, num_segments,
                           indices_are_sorted, unique_indices, bucket_size, mode,
                           out_sharding)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """The minimum of the rows of ``data`` in each segment (empty segments ``+inf``, the
    integer dtype's maximum, or True); arguments as in :func:`segment_sum`."""
    return _segment_reduce("segment_min", "min", data, segment_ids, num_segments,
                           indices_are_sorted, unique_indices, bucket_size, mode,
                           out_sharding)
