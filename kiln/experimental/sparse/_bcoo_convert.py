"""Conversions between BCOO and dense arrays: ``bcoo_todense``, ``bcoo_fromdense``,
``bcoo_extract``, and the ``empty``/``eye`` constructors.

Each is a composition of ``kiln.numpy`` indexing: ``todense`` is a scatter-add of the
stored values at their coordinates (out-of-range coordinates dropped, duplicates summed),
``extract`` a gather with zero fill, ``fromdense`` a fixed-size ``nonzero`` per batch
followed by ``extract``. Their derivatives, transposes and batching rules are therefore
those of gather/scatter: linear in the values, no derivative for the integer indices.
"""
from __future__ import annotations

import operator

import numpy as np

from kiln.experimental.sparse._bcoo_core import (
    BCOO,
    batch_grid,
    full_buffers,
)
from kiln.numpy._util import canonicalize_shape, core_int

__all__ = ["bcoo_extract", "bcoo_fromdense", "bcoo_todense", "empty_bcoo", "eye_bcoo"]

_TRACED_NSE = ("The nse argument of bcoo_fromdense must be concrete: to use BCOO.fromdense() "
               "under jit or another transformation, pass nse=<number of stored elements>.")


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _nfold_vmap(fun, n: int):
    from kiln.transformations import vmap
    for _ in range(n):
        fun = vmap(fun)
    return fun


def bcoo_todense(mat: BCOO):
    """The dense array a BCOO array stands for (``jax.experimental.sparse.bcoo_todense``).

    Args:
      mat: a BCOO array.

    Returns:
      An array of ``mat.shape`` and ``mat.dtype``.
    """
    jnp = _jnp()
    data, indices = full_buffers(mat)
    nb, ns = mat.n_batch, mat.n_sparse
    if ns == 0:
        return jnp.sum(data, axis=nb, dtype=data.dtype)
    index = tuple(batch_grid(mat.shape[:nb])) + tuple(indices[..., i] for i in range(ns))
    return jnp.zeros(mat.shape, data.dtype).at[index].add(data, mode="drop")


def _duplicate_mask(indices):
    """True for each stored element whose coordinates appeared earlier in its batch."""
    jnp = _jnp()
    nse = indices.shape[-2]
    same = jnp.all(indices[..., :, None, :] == indices[..., None, :, :], axis=-1)
    earlier = np.tril(np.ones((nse, nse), bool), k=-1)
    earlier = earlier.reshape((1,) * (same.ndim - 2) + earlier.shape)
    return jnp.any(same & earlier, axis=-1)


def extract_data(indices, arr, *, assume_unique: bool = True):
    """The values of the dense ``arr`` at BCOO ``indices`` (zero where out of range; with
    ``assume_unique=False`` a repeated coordinate gets its value only at its first
    occurrence)."""
    jnp = _jnp()
    arr = jnp.asarray(arr)
    nb = indices.ndim - 2
    nse, ns = indices.shape[-2:]
    batch = tuple(arr.shape[:nb])
    if tuple(indices.shape[:nb]) != batch:
        indices = jnp.broadcast_to(indices, batch + (nse, ns))
    grid = batch_grid(batch)
    dense = tuple(arr.shape[nb + ns:])
    if ns == 0:
        picked = arr[tuple(grid)] if nb else arr[None]
        out = jnp.broadcast_to(picked, batch + (nse,) + dense)
    else:
        index = tuple(grid) + tuple(indices[..., i] for i in range(ns))
        out = arr.at[index].get(mode="fill", fill_value=0)
    if not assume_unique:
        dup = _duplicate_mask(indices).reshape(batch + (nse,) + (1,) * len(dense))
        out = jnp.where(dup, jnp.zeros((), out.dtype), out)
    return out


def bcoo_extract(sparr: BCOO, arr, *, assume_unique: bool | None = None) -> BCOO:
    """A BCOO array with ``sparr``'s indices holding the values of the dense ``arr``.

    Args:
      sparr: the BCOO array whose sparsity pattern is used.
      arr: a dense array of ``sparr.shape``.
      assume_unique: whether ``sparr``'s indices are unique (default:
        ``sparr.unique_indices``); if not, repeated coordinates get the value once.

    Returns:
      A BCOO array.
    """
    jnp = _jnp()
    if not isinstance(sparr, BCOO):
        raise TypeError(f"First argument to bcoo_extract should be a BCOO array. Got "
                        f"type(sparr)={type(sparr)}")
    a = jnp.asarray(arr)
    if tuple(a.shape) != tuple(sparr.shape):
        raise ValueError(f"shape mismatch: sparr.shape={sparr.shape} a.shape={a.shape}")
    if assume_unique is None:
        assume_unique = sparr.unique_indices
    data = extract_data(sparr.indices, a, assume_unique=assume_unique)
    return BCOO((data, sparr.indices), shape=sparr.shape, indices_sorted=sparr.indices_sorted,
                unique_indices=sparr.unique_indices)


def _stored_count(mask, n_batch: int) -> int:
    jnp = _jnp()
    counts = jnp.sum(mask, axis=tuple(range(n_batch, mask.ndim)))
    return core_int(jnp.max(counts, initial=0), _TRACED_NSE)


def bcoo_fromdense(mat, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0,
                   index_dtype=np.int32) -> BCOO:
    """A BCOO array holding the nonzero entries of a dense array.

    Args:
      mat: the dense array, of ``n_batch + n_sparse + n_dense`` dimensions.
      nse: the number of stored elements per batch (default: the largest count of
        nonzero entries, which needs a concrete ``mat``).
      n_batch: the number of leading batch dimensions.
      n_dense: the number of trailing dense dimensions.
      index_dtype: the integer dtype of the indices.

    Returns:
      A BCOO array with sorted, unique indices.
    """
    jnp = _jnp()
    mat = jnp.asarray(mat)
    n_batch, n_dense = operator.index(n_batch), operator.index(n_dense)
    if n_batch < 0 or n_dense < 0 or n_batch + n_dense > mat.ndim:
        raise ValueError(f"Invalid n_batch={n_batch}, n_dense={n_dense} for an array of shape "
                         f"{mat.shape}.")
    n_sparse = mat.ndim - n_batch - n_dense
    mask = mat != 0
    if n_dense:
        mask = jnp.any(mask, axis=tuple(range(mat.ndim - n_dense, mat.ndim)))
    nse = _stored_count(mask, n_batch) if nse is None else core_int(nse, _TRACED_NSE)
    batch = tuple(mat.shape[:n_batch])
    if n_sparse == 0:
        indices = jnp.zeros(batch + (nse, 0), index_dtype)
    else:
        fill = tuple(mat.shape[n_batch:n_batch + n_sparse])

        def nonzero(m):
            return jnp.stack(jnp.nonzero(m, size=nse, fill_value=fill), axis=-1)
        indices = _nfold_vmap(nonzero, n_batch)(mask).astype(index_dtype)
    data = extract_data(indices, mat)
    # Padding slots hold zeros (for n_sparse == 0 the gather above broadcasts every value).
    count = jnp.sum(mask, axis=tuple(range(n_batch, mask.ndim)))
    keep = np.arange(nse).reshape((1,) * n_batch + (nse,)) < count[..., None]
    keep = keep.reshape(keep.shape + (1,) * n_dense)
    data = jnp.where(keep, data, jnp.zeros((), data.dtype))
    return BCOO((data, indices), shape=mat.shape, indices_sorted=True, unique_indices=True)


def empty_bcoo(shape, *, dtype=None, index_dtype="int32", n_dense: int = 0, n_batch: int = 0,
               nse: int = 0) -> BCOO:
    """An all-zero BCOO array storing ``nse`` padding elements per batch."""
    jnp = _jnp()
    shape = canonicalize_shape(shape)
    n_sparse = len(shape) - n_dense - n_batch
    if n_sparse < 0 or n_dense < 0 or n_batch < 0 or nse < 0:
        raise ValueError(f"Invalid inputs: shape={shape}, n_dense={n_dense}, n_batch={n_batch}, "
                         f"nse={nse}")
    batch, sparse, dense = (shape[:n_batch], shape[n_batch:n_batch + n_sparse],
                            shape[n_batch + n_sparse:])
    data = jnp.zeros(batch + (nse,) + dense, dtype)
    indices = jnp.broadcast_to(jnp.asarray(np.array(sparse, dtype=np.int64), index_dtype),
                               batch + (nse, n_sparse))
    return BCOO((data, jnp.array(indices)), shape=shape, indices_sorted=True,
                unique_indices=True)


def eye_bcoo(N: int, M: int, k: int, *, dtype=None, index_dtype="int32", n_batch: int = 0,
             n_dense: int = 0) -> BCOO:
    """A sparse ``N x M`` array with ones on the ``k``-th diagonal."""
    jnp = _jnp()
    n_sparse = 2 - n_batch - n_dense
    if n_sparse < 0 or n_dense < 0 or n_batch < 0:
        raise ValueError(f"Invalid inputs: shape={(N, M)}, n_dense={n_dense}, "
                         f"n_batch={n_batch}")
    diag = min(N, M - k) if k > 0 else min(N + k, M)
    if diag <= 0:
        return empty_bcoo((N, M), dtype=dtype, index_dtype=index_dtype, n_batch=n_batch,
                          n_dense=n_dense)
    if n_dense > 0 or n_batch > 1:
        return bcoo_fromdense(jnp.eye(N, M, k, dtype=dtype), n_batch=n_batch,
                              n_dense=n_dense, index_dtype=index_dtype)
    if n_batch == 0:
        start = np.arange(diag)
        rows, cols = start + max(-k, 0), start + max(k, 0)
        indices = jnp.asarray(np.stack([rows, cols], axis=1), index_dtype)
        return BCOO((jnp.ones(diag, dtype), indices), shape=(N, M), indices_sorted=True,
                    unique_indices=True)
    # One stored element per row: the column i + k, or padding where it falls outside.
    cols = np.arange(N) + k
    valid = (cols >= 0) & (cols < M)
    data = jnp.asarray(valid.astype(np.float64)[:, None], dtype if dtype is not None else
                       jnp.zeros(()).dtype)
    indices = jnp.asarray(np.where(valid, cols, M)[:, None, None], index_dtype)
    return BCOO((data, indices), shape=(N, M), indices_sorted=True, unique_indices=True)

