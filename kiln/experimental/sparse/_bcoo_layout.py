"""Layout and shape operations on BCOO arrays: ``bcoo_update_layout``,
``bcoo_broadcast_in_dim``, ``bcoo_concatenate``, ``bcoo_slice``, ``bcoo_dynamic_slice``,
``bcoo_rev``, ``bcoo_gather`` and ``bcoo_conv_general_dilated``.

Each follows the ``lax`` operation of the same name on the dense array: arguments are
checked by the dense operation's shape rule (so bad ones raise its errors), batch and
dense dimensions are handled on the buffers directly, sparse dimensions through the
coordinates (elements that leave the array become padding: value zero at an out-of-range
coordinate). Moving dimensions between the batch, sparse and dense groups
(``bcoo_update_layout``) re-indexes the stored elements; growing the batch or dense group
over dimensions longer than 1 stores explicit zeros, which raises
``SparseEfficiencyError`` (or warns) unless ``on_inefficient=None``.
"""
from __future__ import annotations

import functools
import math
import operator
import warnings
from collections.abc import Sequence

import numpy as np

from kiln.experimental.sparse._bcoo_core import BCOO, full_buffers, sparse_shape
from kiln.experimental.sparse.util import SparseEfficiencyError, SparseEfficiencyWarning

__all__ = ["bcoo_broadcast_in_dim", "bcoo_concatenate", "bcoo_conv_general_dilated",
           "bcoo_dynamic_slice", "bcoo_gather", "bcoo_rev", "bcoo_set_nse", "bcoo_slice",
           "bcoo_update_layout"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _lax():
    from kiln import lax
    return lax


def _eval_shape(fun, *args, **kwargs):
    from kiln.shape_eval import eval_shape
    return eval_shape(functools.partial(fun, **kwargs), *args)


def _struct(x):
    from kiln.shape_eval import ShapeDtypeStruct
    return ShapeDtypeStruct(tuple(x.shape), x.dtype)


# -- nse and layout --------------------------------------------------------------------------

def bcoo_set_nse(mat: BCOO, nse: int) -> BCOO:
    """``mat`` with ``nse`` stored elements: truncated (dropping the last ones) or padded
    with zeros at out-of-range coordinates."""
    jnp = _jnp()
    nse = operator.index(nse)
    if nse < 0:
        raise ValueError(f"nse must be non-negative, got {nse}")
    if nse == mat.nse:
        return mat
    nb = mat.n_batch
    if nse < mat.nse:
        data = mat.data[(slice(None),) * nb + (slice(None, nse),)]
        indices = mat.indices[..., :nse, :]
    else:
        extra = nse - mat.nse
        pad_d = jnp.zeros(mat.data.shape[:nb] + (extra,) + mat.data.shape[nb + 1:],
                          mat.dtype)
        limit = np.array(sparse_shape(mat), dtype=np.int64).astype(mat.indices.dtype)
        pad_i = jnp.broadcast_to(limit, mat.indices.shape[:nb] + (extra, mat.n_sparse))
        data = jnp.concatenate([mat.data, pad_d], axis=nb)
        indices = jnp.concatenate([mat.indices, pad_i], axis=nb)
    return BCOO((data, indices), shape=mat.shape, indices_sorted=mat.indices_sorted,
                unique_indices=mat.unique_indices)


def _inefficient(on_inefficient, msg):
    if on_inefficient == "error":
        raise SparseEfficiencyError(msg + " To disable this error, set the on_inefficient "
                                    "argument of bcoo_update_layout to 'warn' or None.")
    if on_inefficient == "warn":
        warnings.warn(msg + " To disable this warning, set the on_inefficient argument of "
                      "bcoo_update_layout to None.", SparseEfficiencyWarning, stacklevel=3)


def _mesh(sizes, dtype):
    """Row-major coordinates of a grid: shape ``(prod(sizes), len(sizes))``."""
    grid = np.indices(tuple(sizes)).reshape(len(sizes), -1).T
    return grid.astype(dtype)


def bcoo_update_layout(mat: BCOO, *, n_batch: int | None = None, n_dense: int | None = None,
                       on_inefficient: str | None = "error") -> BCOO:
    """The same array with ``n_batch`` batch and ``n_dense`` dense dimensions
    (``jax.experimental.sparse.bcoo_update_layout``).

    Args:
      mat: a BCOO array.
      n_batch, n_dense: the new layout (default: unchanged).
      on_inefficient: ``"error"`` (raise ``SparseEfficiencyError``), ``"warn"`` or None,
        for a change that stores explicit zeros (more batch or dense dimensions of size
        above 1).

    Returns:
      A BCOO array equal to ``mat`` when densified.
    """
    jnp = _jnp()
    n_batch = mat.n_batch if n_batch is None else operator.index(n_batch)
    n_dense = mat.n_dense if n_dense is None else operator.index(n_dense)
    if (n_batch, n_dense) == (mat.n_batch, mat.n_dense):
        return mat
    if on_inefficient not in ("error", "warn", None):
        raise ValueError(f"on_inefficent={on_inefficient!r}; expected one of "
                         "['error', 'warn', None].")
    if n_batch < 0:
        raise ValueError(f"n_batch must be non-negative; got {n_batch}")
    if n_dense < 0:
        raise ValueError(f"n_dense must be non-negative; got {n_dense}")
    if n_batch + n_dense > mat.ndim:
        raise ValueError(f"sum of n_batch={n_batch} and n_dense={n_dense} cannot be larger "
                         f"than mat.ndim={mat.ndim}.")
    shape = tuple(mat.shape)
    if n_dense > mat.n_dense and any(d > 1 for d in shape[mat.ndim - n_dense:
                                                          mat.ndim - mat.n_dense]):
        _inefficient(on_inefficient, f"For matrix of shape {shape}, increasing n_dense from "
                     f"{mat.n_dense} to {n_dense} results in inefficient storage.")
    if n_batch > mat.n_batch and any(d > 1 for d in shape[mat.n_batch:n_batch]):
        _inefficient(on_inefficient, f"For matrix of shape {shape}, increasing n_batch from "
                     f"{mat.n_batch} to {n_batch} results in inefficient storage.")
    data, indices = full_buffers(mat)
    idt = indices.dtype
    nb, nd = mat.n_batch, mat.n_dense
    # 1. Leading dense dimensions become sparse: each element splits into its dense block.
    if n_dense < nd:
        k = nd - n_dense
        block = shape[mat.ndim - nd:mat.ndim - n_dense]
        nse, ns, p = indices.shape[-2], indices.shape[-1], math.prod(block)
        batch = indices.shape[:nb]
        data = data.reshape(batch + (nse * p,) + tuple(data.shape[nb + 1 + k:]))
        old = jnp.broadcast_to(indices[..., :, None, :], batch + (nse, p, ns))
        new = jnp.broadcast_to(_mesh(block, idt), batch + (nse, p, k))
        indices = jnp.concatenate([old, new], axis=-1).reshape(batch + (nse * p, ns + k))
        nd = n_dense
    # 2. Trailing batch dimensions become sparse: their coordinates join the indices.
    if n_batch < nb:
        k = nb - n_batch
        inner = tuple(indices.shape[n_batch:nb])
        nse, ns = indices.shape[-2], indices.shape[-1]
        outer = tuple(indices.shape[:n_batch])
        coords = _mesh(inner + (nse,), idt)[:, :k]
        data = data.reshape(outer + (math.prod(inner) * nse,) + tuple(data.shape[nb + 1:]))
        indices = indices.reshape(outer + (math.prod(inner) * nse, ns))
        indices = jnp.concatenate(
            [jnp.broadcast_to(coords, outer + coords.shape), indices], axis=-1)
        nb = n_batch
    # 3. Trailing sparse dimensions become dense: each element fills its slot of a block.
    if n_dense > nd:
        k = n_dense - nd
        dense_shape = shape[mat.ndim - n_dense:]
        lead = tuple(data.shape[:nb + 1])
        out = jnp.zeros(lead + dense_shape, data.dtype)
        grid = tuple(np.arange(s, dtype=np.int32).reshape(
            (1,) * i + (s,) + (1,) * (nb - i)) for i, s in enumerate(lead))
        cols = tuple(indices[..., j] for j in range(indices.shape[-1] - k,
                                                     indices.shape[-1]))
        data = out.at[grid + cols].set(data, mode="drop")
        indices = indices[..., :indices.shape[-1] - k]
        nd = n_dense
    # 4. Leading sparse dimensions become batch: each element moves to its batch slot.
    if n_batch > nb:
        k = n_batch - nb
        new_batch = shape[nb:n_batch]
        outer = tuple(indices.shape[:nb])
        nse, ns = indices.shape[-2], indices.shape[-1]
        dense_shape = tuple(data.shape[nb + 1:])
        out = jnp.zeros(outer + new_batch + (nse,) + dense_shape, data.dtype)
        n_lead = nb + 1
        grid = [np.arange(s, dtype=np.int32).reshape((1,) * i + (s,) + (1,) * (n_lead - 1 - i))
                for i, s in enumerate(outer)]
        slot = np.arange(nse, dtype=np.int32).reshape((1,) * nb + (nse,))
        cols = [indices[..., j] for j in range(k)]
        data = out.at[tuple(grid + cols + [slot])].set(data, mode="drop")
        indices = jnp.broadcast_to(indices[..., k:].reshape(outer + (1,) * k + (nse, ns - k)),
                                   outer + new_batch + (nse, ns - k))
        nb = n_batch
    return BCOO((data, indices), shape=shape)


# -- broadcast_in_dim, concatenate -----------------------------------------------------------

def bcoo_broadcast_in_dim(mat: BCOO, *, shape, broadcast_dimensions, sharding=None) -> BCOO:
    """``lax.broadcast_in_dim`` of a BCOO array: new dimensions before the sparse ones are
    batch dimensions, after them dense ones; sparse dimensions cannot grow (except new ones
    of size 1)."""
    jnp = _jnp()
    lax = _lax()
    del sharding
    shape = tuple(operator.index(s) for s in shape)
    bdims = tuple(operator.index(d) for d in broadcast_dimensions)
    if len(mat.shape) != len(bdims):
        raise ValueError(f"spinfo.shape={mat.shape} and broadcast_dimensions={bdims} must "
                         "have the same length")
    _eval_shape(lax.broadcast_in_dim, _struct(mat), shape=shape, broadcast_dimensions=bdims)
    nb, ns, nd = mat.n_batch, mat.n_sparse, mat.n_dense
    batch_dims, sparse_dims, dense_dims = bdims[:nb], bdims[nb:nb + ns], bdims[nb + ns:]
    if max(batch_dims, default=0) > min(sparse_dims, default=len(shape)):
        raise ValueError("Cannot mix batch and sparse dimensions during broadcast_in_dim")
    if max(sparse_dims, default=0) > min(dense_dims, default=len(shape)):
        raise ValueError("Cannot mix sparse and dense dimensions during broadcast_in_dim")
    new_nb = min(bdims[nb:], default=len(shape))
    new_nd = nd and len(shape) - min(bdims[len(bdims) - nd:])
    new_ns = len(shape) - new_nb - new_nd
    if math.prod(sparse_shape(mat)) != math.prod(shape[new_nb:new_nb + new_ns]):
        raise NotImplementedError("Adding sparse dimensions with lengths != 1")
    data, indices = mat.data, mat.indices
    nse = mat.nse
    if (new_nb, new_nd) != (nb, nd):
        data = lax.broadcast_in_dim(
            data, shape=shape[:new_nb] + (nse,) + shape[new_nb + new_ns:],
            broadcast_dimensions=batch_dims + (new_nb,) + tuple(d + 1 - new_ns
                                                                for d in dense_dims))
        indices = lax.broadcast_in_dim(
            indices, shape=shape[:new_nb] + (nse, ns),
            broadcast_dimensions=batch_dims + (new_nb, new_nb + 1))
    if new_ns != ns:
        cols = np.array([d - new_nb for d in sparse_dims], dtype=np.int32)
        out = jnp.zeros(indices.shape[:-1] + (new_ns,), indices.dtype)
        indices = out.at[..., cols].set(indices)
    return BCOO((data, indices), shape=shape)


def bcoo_concatenate(operands: Sequence[BCOO], *, dimension: int) -> BCOO:
    """``lax.concatenate`` of BCOO arrays along a batch or sparse ``dimension`` (the
    operands need the same layout; along a sparse dimension the stored elements are
    joined)."""
    jnp = _jnp()
    lax = _lax()
    dimension = operator.index(dimension)
    operands = list(operands)
    if not all(isinstance(op, BCOO) for op in operands):
        raise ValueError("bcoo_concatenate: expected operands to be a sequence of BCOO "
                         f"arrays. Got {operands}")
    out = _eval_shape(lambda *xs: lax.concatenate(xs, dimension),
                      *[_struct(op) for op in operands])
    if len({op.n_dense for op in operands}) > 1:
        raise ValueError("bcoo_concatenate requires inputs to have matching nse dimensions.")
    n_batches = {op.n_batch for op in operands}
    if len(n_batches) != 1 and max(n_batches) == 1:
        # The common case of x[None] next to arrays with one batch dimension.
        if all(op.shape[0] == 1 for op in operands if op.n_batch == 0):
            operands = [bcoo_update_layout(op, n_batch=1) if op.n_batch == 0 else op
                        for op in operands]
        elif all(op.shape[0] == 1 for op in operands if op.n_batch == 1):
            operands = [bcoo_update_layout(op, n_batch=0) if op.n_batch == 1 else op
                        for op in operands]
        n_batches = {op.n_batch for op in operands}
    if len(n_batches) != 1:
        raise ValueError("bcoo_concatenate requires inputs to have matching batch "
                         "dimensions.")
    nb, ns = operands[0].n_batch, operands[0].n_sparse
    i_batches = [tuple(op.indices.shape[:nb]) for op in operands]
    d_batches = [tuple(op.data.shape[:nb]) for op in operands]
    if dimension < nb:
        i_batches = [s[:dimension] + s[dimension + 1:] for s in i_batches]
        d_batches = [s[:dimension] + s[dimension + 1:] for s in d_batches]
    if not len(set(i_batches)) == len(set(d_batches)) == 1:
        raise NotImplementedError("concatenation of arrays with broadcasted batch indices")
    if dimension < nb:
        nse = max(op.nse for op in operands)
        operands = [bcoo_set_nse(op, nse) for op in operands]
        indices = jnp.concatenate([op.indices for op in operands], axis=dimension)
        data = jnp.concatenate([op.data for op in operands], axis=dimension)
    elif dimension < nb + ns:
        idt = operands[0].indices.dtype
        offsets = np.cumsum([0] + [op.shape[dimension] for op in operands[:-1]])
        col = dimension - nb
        shifted = []
        for op, off in zip(operands, offsets):
            limit = op.shape[dimension]
            c = op.indices[..., col]
            # Padding stays out of range of the joined dimension.
            c = jnp.where(c >= limit, out.shape[dimension], c + off)
            shifted.append(op.indices.at[..., col].set(c.astype(idt)))
        data = jnp.concatenate([op.data for op in operands], axis=nb)
        indices = jnp.concatenate([i.astype(idt) for i in shifted], axis=nb)
    else:
        raise NotImplementedError("Concatenation along dense dimensions.")
    return BCOO((data, indices), shape=tuple(out.shape))


# -- slices and rev --------------------------------------------------------------------------

def _restrict(mat: BCOO, data, indices, starts, sizes, strides, new_shape):
    """Keep the elements whose sparse coordinates fall in the slice (shifted and scaled
    into it); the others become padding. ``starts`` may be traced."""
    jnp = _jnp()
    nb, nd = mat.n_batch, mat.n_dense
    if not mat.n_sparse:
        return data, indices
    idt = indices.dtype
    lead = (1,) * (indices.ndim - 1)
    starts = jnp.reshape(jnp.asarray(starts).astype(idt), lead + (-1,))
    sizes_a = np.asarray(sizes, dtype=np.int64).astype(idt).reshape(lead + (-1,))
    strides_a = np.asarray(strides, dtype=np.int64).astype(idt).reshape(lead + (-1,))
    rel = indices - starts
    keep = jnp.all((rel >= 0) & (rel < sizes_a * strides_a) & (rel % strides_a == 0),
                   axis=-1, keepdims=True)
    new_sizes = np.array(new_shape[nb:nb + mat.n_sparse], dtype=np.int64).astype(idt)
    new_sizes = new_sizes.reshape(lead + (-1,))
    indices = jnp.where(keep, rel // strides_a, new_sizes)
    mask = keep[..., 0].reshape(keep.shape[:-1] + (1,) * nd)
    data = jnp.where(mask, data, jnp.zeros((), data.dtype))
    return data, indices


def _cap_nse(mat: BCOO) -> BCOO:
    cap = math.prod(sparse_shape(mat))
    if mat.n_sparse and mat.nse > cap:
        from kiln.experimental.sparse._bcoo_dedupe import bcoo_sum_duplicates
        return bcoo_sum_duplicates(mat, nse=cap)
    return mat


def bcoo_slice(mat: BCOO, *, start_indices: Sequence[int], limit_indices: Sequence[int],
               strides: Sequence[int] | None = None) -> BCOO:
    """``lax.slice`` of a BCOO array (static bounds, positive strides)."""
    if not isinstance(mat, BCOO):
        raise TypeError(f"bcoo_slice: input should be BCOO array, got type(mat)={type(mat)}")
    starts = [operator.index(i) for i in start_indices]
    limits = [operator.index(i) for i in limit_indices]
    strides = [1] * mat.ndim if strides is None else [operator.index(i) for i in strides]
    if not len(starts) == len(limits) == mat.ndim:
        raise ValueError(f"bcoo_slice: indices must have size mat.ndim={mat.ndim}")
    if len(strides) != mat.ndim:
        raise ValueError(f"len(strides) = {len(strides)}; expected {mat.ndim}")
    if any(s <= 0 for s in strides):
        raise ValueError(f"strides must be a sequence of positive integers; got {strides}")
    if not all(0 <= a <= b <= n for a, b, n in zip(starts, limits, mat.shape)):
        raise ValueError(f"bcoo_slice: invalid indices. Got start_indices={starts}, "
                         f"limit_indices={limits} and shape={mat.shape}")
    nb, ns = mat.n_batch, mat.n_sparse
    new_shape = tuple((b - a + s - 1) // s for a, b, s in zip(starts, limits, strides))
    d_index, i_index = [], []
    for i in range(nb):
        sl = slice(starts[i], limits[i], strides[i])
        d_index.append(slice(None) if mat.data.shape[i] != mat.shape[i] else sl)
        i_index.append(slice(None) if mat.indices.shape[i] != mat.shape[i] else sl)
    d_index.append(slice(None))
    d_index += [slice(a, b, s) for a, b, s in zip(starts[nb + ns:], limits[nb + ns:],
                                                   strides[nb + ns:])]
    data = mat.data[tuple(d_index)]
    indices = mat.indices[tuple(i_index)]
    data, indices = _restrict(mat, data, indices, np.array(starts[nb:nb + ns], np.int64),
                              new_shape[nb:nb + ns], strides[nb:nb + ns], new_shape)
    return _cap_nse(BCOO((data, indices), shape=new_shape))


def bcoo_dynamic_slice(mat: BCOO, start_indices: Sequence, slice_sizes: Sequence[int]) -> BCOO:
    """``lax.dynamic_slice`` of a BCOO array: ``start_indices`` may be traced (clamped
    into range as by ``lax.dynamic_slice``), ``slice_sizes`` are static."""
    jnp = _jnp()
    lax = _lax()
    slice_sizes = tuple(operator.index(i) for i in slice_sizes)
    from kiln.shape_eval import ShapeDtypeStruct
    _eval_shape(lambda x, *s: lax.dynamic_slice(x, s, slice_sizes), _struct(mat),
                *[ShapeDtypeStruct(np.shape(i), jnp.asarray(i).dtype) for i in start_indices])
    if not isinstance(mat, BCOO):
        raise TypeError(f"bcoo_slice: input should be BCOO array, got type(mat)={type(mat)}")
    starts = [jnp.asarray(i) for i in start_indices]
    nb, ns = mat.n_batch, mat.n_sparse
    zero = jnp.zeros((), starts[0].dtype if starts else np.int32)
    d_start, d_sizes, i_start, i_sizes = [], [], [], []
    for i in range(nb):
        d_bc = mat.data.shape[i] != mat.shape[i]
        i_bc = mat.indices.shape[i] != mat.shape[i]
        d_start.append(zero if d_bc else starts[i])
        d_sizes.append(1 if d_bc else slice_sizes[i])
        i_start.append(zero if i_bc else starts[i])
        i_sizes.append(1 if i_bc else slice_sizes[i])
    d_start.append(zero)
    d_sizes.append(mat.nse)
    i_start += [zero, zero]
    i_sizes += [mat.nse, ns]
    d_start += starts[nb + ns:]
    d_sizes += slice_sizes[nb + ns:]
    data = lax.dynamic_slice(mat.data, d_start, d_sizes)
    indices = lax.dynamic_slice(mat.indices, i_start, i_sizes)
    if ns:
        idt = indices.dtype
        sp = np.array(sparse_shape(mat), dtype=np.int64)
        size_sp = np.array(slice_sizes[nb:nb + ns], dtype=np.int64)
        st = jnp.stack([s.astype(idt) for s in starts[nb:nb + ns]])
        st = jnp.where(st < 0, st + sp.astype(idt), st)
        st = jnp.clip(st, 0, (sp - size_sp).astype(idt))
        data, indices = _restrict(mat, data, indices, st, slice_sizes[nb:nb + ns], [1] * ns,
                                  slice_sizes)
    return _cap_nse(BCOO((data, indices), shape=slice_sizes))


def bcoo_rev(operand: BCOO, dimensions: Sequence[int]) -> BCOO:
    """``lax.rev`` of a BCOO array."""
    jnp = _jnp()
    lax = _lax()
    dimensions = tuple(operator.index(d) for d in dimensions)
    _eval_shape(lax.rev, _struct(operand), dimensions=dimensions)
    nb, ns = operand.n_batch, operand.n_sparse
    batch = [d for d in dimensions if d < nb]
    sparse_dims = [d - nb for d in dimensions if nb <= d < nb + ns]
    dense = [d + 1 - ns for d in dimensions if d >= nb + ns]
    data, indices = full_buffers(operand) if batch else (operand.data, operand.indices)
    if batch:
        indices = lax.rev(indices, batch)
    if batch or dense:
        data = lax.rev(data, batch + dense)
    if sparse_dims:
        sp = np.array(sparse_shape(operand), dtype=np.int64)
        flip = np.zeros(ns, bool)
        flip[sparse_dims] = True
        idt = indices.dtype
        lead = (1,) * (indices.ndim - 1)
        sp = sp.astype(idt).reshape(lead + (-1,))
        flipped = (sp - 1) - indices
        new = jnp.where(flip.reshape(lead + (-1,)), flipped, indices)
        indices = jnp.where(new < 0, sp, new)
    return BCOO((data, indices), shape=operand.shape)


# -- gather ----------------------------------------------------------------------------------

def bcoo_gather(operand: BCOO, start_indices, dimension_numbers, slice_sizes, *,
                unique_indices: bool = False, indices_are_sorted: bool = False,
                mode=None, fill_value=None) -> BCOO:
    """``lax.gather`` of a BCOO array (mode ``promise_in_bounds`` only, as JAX): one
    ``bcoo_dynamic_slice`` per start index, mapped with ``vmap``."""
    jnp = _jnp()
    lax = _lax()
    from kiln.experimental.sparse._bcoo_struct import bcoo_reshape, bcoo_squeeze, bcoo_transpose
    from kiln.transformations import vmap
    if mode is None:
        mode = lax.GatherScatterMode.PROMISE_IN_BOUNDS
    if lax.GatherScatterMode.from_any(mode) != lax.GatherScatterMode.PROMISE_IN_BOUNDS:
        raise NotImplementedError(f"bcoo_gather: mode={mode} not yet supported.")
    start_indices = jnp.asarray(start_indices)
    kw = dict(dimension_numbers=dimension_numbers, slice_sizes=tuple(slice_sizes),
              unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
              mode=mode, fill_value=fill_value)
    out = _eval_shape(lax.gather, _struct(operand), _struct(start_indices), **kw)
    offset_dims = tuple(dimension_numbers.offset_dims)
    collapsed = tuple(dimension_numbers.collapsed_slice_dims)
    full_starts = [jnp.zeros((), start_indices.dtype)] * operand.ndim
    in_axes = [None] * operand.ndim
    full_sizes = list(operand.shape)
    for i, j in enumerate(dimension_numbers.start_index_map):
        full_starts[j] = start_indices[..., i].ravel()
        full_sizes[j] = slice_sizes[j]
        in_axes[j] = 0

    def one(starts):
        piece = bcoo_dynamic_slice(operand, starts, slice_sizes=full_sizes)
        return bcoo_squeeze(piece, dimensions=collapsed)
    result = vmap(one, in_axes=(in_axes,))(full_starts)
    result = bcoo_reshape(result, new_sizes=tuple(start_indices.shape[:-1]) +
                          tuple(result.shape[1:]))
    if result.shape:
        batch_dims = tuple(d for d in range(len(out.shape)) if d not in offset_dims)
        perm = np.zeros(result.ndim, dtype=int)
        perm[np.array(batch_dims + offset_dims, dtype=int)] = np.arange(result.ndim)
        if set(perm[:len(batch_dims)]) != set(range(len(batch_dims))):
            result = bcoo_update_layout(result, n_batch=0)
        result = bcoo_transpose(result, permutation=tuple(int(p) for p in perm))
    result = bcoo_reshape(result, new_sizes=tuple(out.shape))
    return result.astype(out.dtype)


# -- convolution -----------------------------------------------------------------------------

def bcoo_conv_general_dilated(lhs, rhs, *, window_strides, padding, lhs_dilation=None,
                              rhs_dilation=None, dimension_numbers=None,
                              feature_group_count=1, batch_group_count=1, precision=None,
                              preferred_element_type=None, out_sharding=None) -> BCOO:
    """``lax.conv_general_dilated`` where either operand may be BCOO: one spatial
    dimension, leading (batch, feature) sizes ``(1, 1)``, unit strides and dilations and
    no grouping (as JAX). The result is a BCOO array of shape ``(1, 1, n)``."""
    lax = _lax()
    from kiln.jitting import make_jaxpr
    from kiln.shape_eval import ShapeDtypeStruct
    fn = functools.partial(
        lax.conv_general_dilated, window_strides=window_strides, padding=padding,
        lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count, precision=precision,
        preferred_element_type=preferred_element_type)
    jaxpr = make_jaxpr(fn)(ShapeDtypeStruct(tuple(lhs.shape), lhs.dtype),
                           ShapeDtypeStruct(tuple(rhs.shape), rhs.dtype))
    eqns = [e for e in jaxpr.eqns if e.primitive.name == "conv_general_dilated"]
    params = eqns[0].params
    nsp = len(lhs.shape) - 2
    if tuple(params["lhs_dilation"]) != (1,) * nsp:
        raise NotImplementedError("bcoo convolution with lhs_dilation.")
    if tuple(params["rhs_dilation"]) != (1,) * nsp:
        raise NotImplementedError("bcoo convolution with lhs_dilation.")
    if tuple(params["window_strides"]) != (1,) * nsp:
        raise NotImplementedError("bcoo convolution with non-unit window_strides.")
    if params["batch_group_count"] != 1 or params["feature_group_count"] != 1:
        raise NotImplementedError("bcoo convolution with non-unit group counts.")
    if tuple(lhs.shape[:2]) != (1, 1) or tuple(rhs.shape[:2]) != (1, 1):
        raise NotImplementedError("bcoo convolution with leading dimensions other than (1, 1)")
    if nsp != 1:
        raise NotImplementedError("bcoo convolution with more than one spatial dimension.")
    idt = (lhs.indices.dtype if isinstance(lhs, BCOO) else
           rhs.indices.dtype if isinstance(rhs, BCOO) else np.int32)
    pad = tuple(int(p) for p in params["padding"][0])
    return _conv_1d(_as_1d(lhs, idt), _as_1d(rhs, idt), pad)


def _as_1d(mat, idt):
    jnp = _jnp()
    if isinstance(mat, BCOO):
        mat = bcoo_update_layout(mat, n_batch=2, n_dense=0)
        data = mat.data.reshape(mat.data.shape[2:])
        indices = mat.indices.reshape(mat.indices.shape[2:])
        data = jnp.where(indices[:, 0] < mat.shape[-1], data, jnp.zeros((), data.dtype))
        return BCOO((data, indices), shape=mat.shape[2:])
    data = jnp.asarray(mat).reshape(mat.shape[2:])
    indices = jnp.arange(data.shape[0], dtype=idt)[:, None]
    return BCOO((data, indices), shape=tuple(data.shape))


def _conv_1d(lhs: BCOO, rhs: BCOO, padding) -> BCOO:
    jnp = _jnp()
    data = (lhs.data[:, None] * rhs.data[None, :]).ravel()
    offset = padding[0] - rhs.indices.astype(lhs.indices.dtype)
    indices = (lhs.indices[:, None] + offset[None, :]).ravel()
    neg = indices < 0
    indices = jnp.where(neg, 0, indices)
    data = jnp.where(neg, jnp.zeros((), data.dtype), data)
    size = max(0, lhs.shape[0] + padding[0] + padding[1] - rhs.shape[0] + 1)
    return BCOO((data.reshape(1, 1, -1), indices.reshape(1, 1, -1, 1)), shape=(1, 1, size))
