"""Structural BCOO operations: ``bcoo_transpose``, ``bcoo_reshape``, ``bcoo_reduce_sum``,
``bcoo_squeeze`` and the ``BCOO.reshape``/``BCOO.sum`` methods built on them.

Batch and dense dimensions live in the buffers' shapes, so transposing, reshaping or
summing them is the same ``kiln.numpy`` operation on ``data``/``indices``; sparse
dimensions live in the index columns, so permuting them reorders columns, reshaping them
re-linearizes coordinates and summing them drops columns (duplicates then add up). As in
JAX, batch, sparse and dense dimensions never mix.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from kiln.experimental.sparse._bcoo_core import BCOO, full_buffers, prod, sparse_shape
from kiln.numpy._util import canonicalize_axis

__all__ = ["bcoo_reduce_sum", "bcoo_reshape", "bcoo_squeeze", "bcoo_transpose"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _split_permutation(mat: BCOO, permutation):
    if not isinstance(permutation, (tuple, list, np.ndarray)):
        raise TypeError(f"transpose permutation must be a tuple/list/ndarray, got "
                        f"{type(permutation)}.")
    permutation = tuple(operator.index(p) for p in permutation)
    if tuple(sorted(permutation)) != tuple(range(mat.ndim)):
        raise TypeError("transpose permutation isn't a permutation of operand dimensions, "
                        f"got permutation {permutation} for shape {mat.shape}.")
    nb, ns, nd = mat.n_batch, mat.n_sparse, mat.n_dense
    batch_perm = permutation[:nb]
    sparse_perm = tuple(p - nb for p in permutation[nb:nb + ns])
    dense_perm = tuple(p - nb - ns for p in permutation[nb + ns:])
    if nb and tuple(sorted(batch_perm)) != tuple(range(nb)):
        raise NotImplementedError("transpose permutation cannot permute batch axes with "
                                  f"non-batch axes; got permutation {permutation}, with "
                                  f"n_batch={nb}.")
    if nd and tuple(sorted(dense_perm)) != tuple(range(nd)):
        raise NotImplementedError("transpose permutation cannot permute dense axes with "
                                  f"non-dense axes; got permutation {permutation}, with "
                                  f"n_dense={nd}.")
    return permutation, batch_perm, sparse_perm, dense_perm


def bcoo_transpose(mat: BCOO, *, permutation: Sequence[int]) -> BCOO:
    """Permute the axes of a BCOO array (``jax.experimental.sparse.bcoo_transpose``).

    Args:
      mat: a BCOO array.
      permutation: a permutation of ``range(mat.ndim)`` that keeps batch, sparse and
        dense axes among themselves.

    Returns:
      The transposed BCOO array (indices stay sorted only if the sparse axes keep
      their order).
    """
    jnp = _jnp()
    permutation, batch_perm, sparse_perm, dense_perm = _split_permutation(mat, permutation)
    nb = mat.n_batch
    data, indices = mat.data, mat.indices
    if sparse_perm != tuple(range(mat.n_sparse)):
        indices = indices[..., np.array(sparse_perm, dtype=np.int32)]
    if batch_perm != tuple(range(nb)):
        indices = jnp.transpose(indices, batch_perm + (nb, nb + 1))
    data_perm = batch_perm + (nb,) + tuple(nb + 1 + d for d in dense_perm)
    if data_perm != tuple(range(data.ndim)):
        data = jnp.transpose(data, data_perm)
    keeps_order = sparse_perm == tuple(range(mat.n_sparse))
    return BCOO((data, indices), shape=tuple(mat.shape[p] for p in permutation),
                indices_sorted=mat.indices_sorted and keeps_order,
                unique_indices=mat.unique_indices)


def bcoo_reshape(mat: BCOO, *, new_sizes: Sequence[int],
                 dimensions: Sequence[int] | None = None, sharding=None) -> BCOO:
    """Reshape a BCOO array (``jax.experimental.sparse.bcoo_reshape``).

    Args:
      mat: a BCOO array.
      new_sizes: the new shape; its leading block must multiply to the batch size, the
        next to the sparse size and the rest to the dense size.
      dimensions: an optional permutation applied first (see ``bcoo_transpose``).
      sharding: unused.

    Returns:
      The reshaped BCOO array.
    """
    jnp = _jnp()
    del sharding
    nb = mat.n_batch
    i_b, d_b = tuple(mat.indices.shape[:nb]), tuple(mat.data.shape[:nb])
    if i_b != d_b and d_b != tuple(mat.shape[:nb]):
        raise NotImplementedError("reshape of arrays with broadcasted batch dimensions.")
    if dimensions is not None:
        mat = bcoo_transpose(mat, permutation=tuple(dimensions))
    new_sizes = tuple(operator.index(s) for s in new_sizes)
    if prod(new_sizes) != prod(mat.shape):
        raise TypeError(f"reshape total size must be unchanged, got new_sizes {new_sizes} for "
                        f"shape {mat.shape}.")
    nb, ns = mat.n_batch, mat.n_sparse
    batch_size = prod(mat.shape[:nb])
    sp_shape = sparse_shape(mat)
    sparse_size = prod(sp_shape)
    cumulative = np.cumprod(new_sizes) if new_sizes else np.zeros(0, np.int64)
    if batch_size != 1 and batch_size not in cumulative:
        raise ValueError("bcoo_reshape: new shape cannot mix batch and sparse dimensions; "
                         f"got shape={mat.shape} new_shape={new_sizes} with n_batch={nb}")
    if sparse_size != 1 and batch_size * sparse_size not in cumulative:
        raise ValueError("bcoo_reshape: new shape cannot mix sparse and dense dimensions; "
                         f"got shape={mat.shape} new_shape={new_sizes} with "
                         f"n_dense={mat.n_dense}")
    i1 = int(np.searchsorted(cumulative, batch_size, side="right"))
    i2 = int(np.searchsorted(cumulative, batch_size * sparse_size, side="right"))
    new_batch, new_sparse, new_dense = new_sizes[:i1], new_sizes[i1:i2], new_sizes[i2:]
    data, indices = full_buffers(mat)
    nse = mat.nse
    data = jnp.reshape(data, new_batch + (nse,) + new_dense)
    indices = jnp.reshape(indices, new_batch + (nse, ns))
    if not new_sparse or ns == 0:
        indices = jnp.zeros(new_batch + (nse, len(new_sparse)), indices.dtype)
    elif tuple(new_sparse) != sp_shape:
        limit = np.array(sp_shape, dtype=np.int64)
        limit = limit.astype(indices.dtype).reshape((1,) * (indices.ndim - 1) + limit.shape)
        out_of_range = jnp.any(indices >= limit, axis=-1, keepdims=True)
        flat = jnp.ravel_multi_index(tuple(indices[..., i] for i in range(ns)), sp_shape,
                                     mode="clip")
        cols = jnp.unravel_index(flat, new_sparse)
        indices = jnp.stack(cols, axis=-1).astype(indices.dtype)
        fill = np.array(new_sparse, dtype=np.int64).astype(indices.dtype)
        indices = jnp.where(out_of_range, fill.reshape((1,) * (indices.ndim - 1) + fill.shape),
                            indices)
    return BCOO((data, indices), shape=new_sizes)


def reshape_method(mat: BCOO, *args, order: str = "C", **kwargs) -> BCOO:
    """``BCOO.reshape``: NumPy's calling conventions (``reshape(2, 3)``, ``reshape((2, 3))``,
    ``shape=``), one ``-1`` allowed, C order only."""
    if order != "C":
        raise NotImplementedError(f"BCOO.reshape with order={order!r}; only 'C' is supported.")
    if "shape" in kwargs:
        args = (kwargs.pop("shape"),)
    if kwargs:
        raise TypeError(f"BCOO.reshape got unexpected keyword arguments {sorted(kwargs)}")
    if len(args) == 1 and isinstance(args[0], (tuple, list, np.ndarray)):
        args = tuple(args[0])
    shape = [operator.index(s) for s in args]
    if shape.count(-1) > 1:
        raise ValueError("can only specify one unknown dimension")
    if -1 in shape:
        known = prod(s for s in shape if s != -1)
        if known == 0 or mat.size % known:
            raise TypeError(f"cannot reshape array of shape {mat.shape} (size {mat.size}) into "
                            f"shape {tuple(shape)}")
        shape[shape.index(-1)] = mat.size // known
    return bcoo_reshape(mat, new_sizes=tuple(shape))


def bcoo_reduce_sum(mat: BCOO, *, axes: Sequence[int]) -> BCOO:
    """Sum a BCOO array over ``axes`` (``jax.experimental.sparse.bcoo_reduce_sum``).

    Summed dense axes are summed in ``data``; summed sparse axes drop their index column
    (entries that now share coordinates add up when densified); summed batch axes are
    folded into the stored-element axis.

    Args:
      mat: a BCOO array.
      axes: the axes to sum over (non-negative ints).

    Returns:
      A BCOO array without those axes.
    """
    jnp = _jnp()
    nb, ns = mat.n_batch, mat.n_sparse
    axes = sorted({operator.index(a) for a in axes})
    if any(not 0 <= a < mat.ndim for a in axes):
        raise ValueError(f"bcoo_reduce_sum: axes {axes} out of range for shape {mat.shape}")
    data, indices = full_buffers(mat)
    dense_axes = tuple(a - ns + 1 for a in axes if a >= nb + ns)
    if dense_axes:
        data = jnp.sum(data, axis=dense_axes, dtype=data.dtype)
    if ns:
        # Padding entries would land inside the array once their column is dropped.
        limit = np.array(sparse_shape(mat), dtype=np.int64).astype(indices.dtype)
        valid = jnp.all(indices < limit.reshape((1,) * (indices.ndim - 1) + limit.shape),
                        axis=-1)
        valid = valid.reshape(valid.shape + (1,) * (data.ndim - valid.ndim))
        data = jnp.where(valid, data, jnp.zeros((), data.dtype))
    kept_sparse = [i for i in range(ns) if i + nb not in axes]
    if len(kept_sparse) != ns:
        indices = indices[..., np.array(kept_sparse, dtype=np.int32)]
    summed_batch = [a for a in axes if a < nb]
    if summed_batch:
        kept_batch = [i for i in range(nb) if i not in summed_batch]
        new_nse = mat.nse * prod(mat.shape[a] for a in summed_batch)
        order = kept_batch + summed_batch
        kb_shape = tuple(mat.shape[i] for i in kept_batch)
        data = jnp.transpose(data, order + list(range(nb, data.ndim)))
        data = jnp.reshape(data, kb_shape + (new_nse,) + tuple(data.shape[nb + 1:]))
        indices = jnp.transpose(indices, order + [nb, nb + 1])
        indices = jnp.reshape(indices, kb_shape + (new_nse, indices.shape[-1]))
    out_shape = tuple(s for i, s in enumerate(mat.shape) if i not in axes)
    return BCOO((data, indices), shape=out_shape)


def _sum_dtype(dtype, requested):
    """The dtype ``jnp.sum`` gives for values of ``dtype`` (and a ``dtype=`` request)."""
    jnp = _jnp()
    return jnp.sum(jnp.zeros((0,), dtype), dtype=requested).dtype


def sum_method(mat: BCOO, axis=None, dtype=None, out=None, keepdims: bool = False):
    """``BCOO.sum``: ``jnp.sum``'s arguments; a BCOO array, or a dense array when every
    axis is summed."""
    jnp = _jnp()
    if out is not None:
        raise NotImplementedError("The 'out' argument to BCOO.sum is not supported.")
    if axis is None:
        axes = tuple(range(mat.ndim))
    else:
        axes = tuple(canonicalize_axis(a, mat.ndim)
                     for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        if len(set(axes)) != len(axes):
            raise ValueError(f"duplicate value in 'axis': {axis}")
    target = _sum_dtype(mat.dtype, dtype)
    if target != mat.dtype:
        mat = mat.astype(target)
    res = bcoo_reduce_sum(mat, axes=axes)
    kept_shape = tuple(1 if i in axes else s for i, s in enumerate(mat.shape))
    if res.shape == ():
        total = jnp.sum(res.data, dtype=res.dtype)
        return jnp.reshape(total, kept_shape) if keepdims else total
    if keepdims:
        return bcoo_reshape(res, new_sizes=kept_shape)
    return res


def bcoo_squeeze(arr: BCOO, *, dimensions: Sequence[int]) -> BCOO:
    """Remove size-1 ``dimensions`` (``jax.experimental.sparse.bcoo_squeeze``)."""
    jnp = _jnp()
    dims = tuple(canonicalize_axis(d, arr.ndim) for d in dimensions)
    if any(arr.shape[d] != 1 for d in dims):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to "
                         f"one, got shape={arr.shape} and dimensions={dims}")
    nb, ns = arr.n_batch, arr.n_sparse
    batch_dims = tuple(d for d in dims if d < nb)
    kept_sparse = [i for i in range(ns) if i + nb not in dims]
    dense_dims = tuple(d - ns + 1 for d in dims if d >= nb + ns)
    data = jnp.squeeze(arr.data, batch_dims + dense_dims) if batch_dims + dense_dims \
        else arr.data
    indices = arr.indices
    if len(kept_sparse) != ns:
        indices = indices[..., np.array(kept_sparse, dtype=np.int32)]
    if batch_dims:
        indices = jnp.squeeze(indices, batch_dims)
    shape = tuple(s for i, s in enumerate(arr.shape) if i not in dims)
    return BCOO((data, indices), shape=shape, indices_sorted=arr.indices_sorted,
                unique_indices=arr.unique_indices)
