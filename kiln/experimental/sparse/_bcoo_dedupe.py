"""Index canonicalization for BCOO arrays: ``bcoo_sort_indices``, ``bcoo_sum_duplicates``
and ``bcoo_eliminate_zeros``.

Per batch, the stored elements are ordered lexicographically by coordinates (padding,
i.e. any out-of-range coordinate, sorts last), runs of equal coordinates are numbered,
and the values of each run are scatter-added into one slot. The new ``nse`` is static:
by default the largest number of distinct in-range coordinates over the batches, which
needs concrete indices (pass ``nse=`` under ``jit``), as in JAX.
"""
from __future__ import annotations

import numpy as np

from kiln.experimental.sparse._bcoo_core import BCOO, full_buffers, sparse_shape
from kiln.numpy._util import core_int

__all__ = ["bcoo_eliminate_zeros", "bcoo_sort_indices", "bcoo_sum_duplicates"]

_TRACED_NSE = ("bcoo_sum_duplicates: the number of distinct indices is not known under "
               "jit or vmap; pass nse=<number of stored elements> explicitly.")


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _nfold_vmap(fun, n: int):
    from kiln.transformations import vmap
    for _ in range(n):
        fun = vmap(fun)
    return fun


def _canonical_padding(indices, limit):
    """Indices with every out-of-range row replaced by ``limit`` (so all padding is equal)."""
    jnp = _jnp()
    limit = limit.reshape((1,) * (indices.ndim - 1) + limit.shape)
    bad = jnp.any((indices >= limit) | (indices < 0), axis=-1, keepdims=True)
    return jnp.where(bad, limit, indices), bad[..., 0]


def _lex_order(indices):
    """The permutation sorting rows of ``indices`` (``(nse, n_sparse)``) lexicographically."""
    jnp = _jnp()
    ns = indices.shape[-1]
    if ns == 0:
        return jnp.arange(indices.shape[0])
    return jnp.lexsort(tuple(indices[:, j] for j in reversed(range(ns))))


def bcoo_sort_indices(mat: BCOO) -> BCOO:
    """The same array with indices sorted lexicographically in each batch."""
    if mat.n_sparse == 0:
        return BCOO((mat.data, mat.indices), shape=mat.shape, indices_sorted=True,
                    unique_indices=mat.unique_indices)
    from kiln.experimental.sparse.util import nfold_vmap

    def sort(i):
        perm = _lex_order(i)
        return i[perm], perm
    # As JAX: the indices keep their (possibly broadcast) batch shape.
    indices, perm = nfold_vmap(sort, mat.n_batch, broadcasted=False)(mat.indices)
    data = nfold_vmap(lambda d, p: d[p], mat.n_batch)(mat.data, perm)
    return BCOO((data, indices), shape=mat.shape, indices_sorted=True,
                unique_indices=mat.unique_indices)


def _distinct_count(indices, limit) -> int:
    """The largest number of distinct in-range coordinates over the batches (concrete)."""
    from kiln.numpy._util import concrete_value
    idx = np.asarray(concrete_value(indices, _TRACED_NSE))
    ns = idx.shape[-1]
    rows = idx.reshape(-1, idx.shape[-2], ns)
    best = 0
    for r in rows:
        ok = np.all((r < np.asarray(limit)) & (r >= 0), axis=-1)
        best = max(best, len({tuple(x) for x in r[ok]}))
    return best


def bcoo_sum_duplicates(mat: BCOO, nse: int | None = None) -> BCOO:
    """Sum the values of repeated coordinates (``jax.experimental.sparse.bcoo_sum_duplicates``).

    Args:
      mat: a BCOO array.
      nse: the number of stored elements of the result; extra slots are padding and
        distinct coordinates beyond it are dropped. Default: the number needed.

    Returns:
      A BCOO array with sorted, unique indices.
    """
    jnp = _jnp()
    limit = np.array(sparse_shape(mat), dtype=np.int64)
    data, indices = full_buffers(mat)
    lim = limit.astype(indices.dtype)
    if nse is None:
        nse = _distinct_count(indices, limit) if mat.n_sparse else min(mat.nse, 1)
    else:
        nse = core_int(nse, _TRACED_NSE)
    dense = tuple(data.shape[mat.n_batch + 1:])

    def dedupe(d, i):
        i, bad = _canonical_padding(i, lim)
        perm = _lex_order(i)
        d, i, bad = d[perm], i[perm], bad[perm]
        if i.shape[0] == 0:
            starts = jnp.zeros((0,), bool)
        else:
            changed = jnp.any(i[1:] != i[:-1], axis=-1)
            starts = jnp.concatenate([jnp.ones((1,), bool), changed])
        slot = jnp.cumsum(starts.astype(np.int32)) - 1
        slot = jnp.where(bad, nse, slot)
        out_d = jnp.zeros((nse,) + dense, d.dtype).at[slot].add(d, mode="drop")
        out_i = jnp.broadcast_to(lim, (nse, i.shape[-1])).at[slot].set(i, mode="drop")
        return out_d, out_i
    data, indices = _nfold_vmap(dedupe, mat.n_batch)(data, indices)
    return BCOO((data, indices), shape=mat.shape, indices_sorted=True, unique_indices=True)


def bcoo_eliminate_zeros(mat: BCOO, nse: int | None = None) -> BCOO:
    """Drop stored elements whose values are all zero, then ``bcoo_sum_duplicates``."""
    jnp = _jnp()
    data, indices = full_buffers(mat)
    nb = mat.n_batch
    zero = jnp.all(data == 0, axis=tuple(range(nb + 1, data.ndim)))
    lim = np.array(sparse_shape(mat), dtype=np.int64).astype(indices.dtype)
    indices = jnp.where(zero[..., None], lim.reshape((1,) * (indices.ndim - 1) + lim.shape),
                        indices)
    return bcoo_sum_duplicates(BCOO((data, indices), shape=mat.shape), nse=nse)
