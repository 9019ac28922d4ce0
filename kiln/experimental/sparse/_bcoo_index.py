"""``BCOO.__getitem__``: static basic indices (integers, slices with positive steps,
``Ellipsis``) directly; every other index through ``sparsify`` of ``jnp`` indexing.

A batch or dense dimension is indexed in the buffers directly. A sparse dimension is
indexed through the coordinates: elements outside the selection become padding (value
zero, out-of-range coordinates), the kept coordinates are shifted and scaled into the new
range, and an integer index drops the column. As in JAX, ``nse`` is kept unless the selected
sparse block has fewer coordinates, in which case duplicates are summed into that many
slots.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from kiln.experimental.sparse._bcoo_core import BCOO, full_buffers
from kiln.numpy._util import concrete_or_none

__all__ = ["bcoo_getitem"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _normalize(mat: BCOO, idx) -> list:
    """Per dimension: ``("int", i)``, ``("slice", start, stop, step)`` or None (all)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in idx:
        pos = idx.index(Ellipsis)
        fill = mat.ndim - (len(idx) - 1)
        idx = idx[:pos] + (slice(None),) * fill + idx[pos + 1:]
    if len(idx) > mat.ndim:
        raise IndexError(f"Too many indices for array: {len(idx)} non-None/Ellipsis indices "
                         f"for dim {mat.ndim}.")
    idx = idx + (slice(None),) * (mat.ndim - len(idx))
    out = []
    for d, (i, size) in enumerate(zip(idx, mat.shape)):
        if isinstance(i, slice):
            start, stop, step = i.indices(size)
            if step <= 0:
                raise NotImplementedError("BCOO indexing with a negative slice step.")
            out.append(None if (start, stop, step) == (0, size, 1) else
                       ("slice", start, stop, step))
            continue
        value = concrete_or_none(i) if not isinstance(i, (int, np.integer)) else i
        if value is None or np.ndim(value) != 0 or isinstance(i, bool) or \
                not np.issubdtype(np.asarray(value).dtype, np.integer):
            raise NotImplementedError(
                "BCOO indexing supports static integers, slices and Ellipsis only; got "
                f"{i!r} for dimension {d}.")
        value = operator.index(value)
        if not -size <= value < size:
            raise IndexError(f"index {value} is out of bounds for axis {d} with size {size}")
        out.append(("int", value % size))
    return out


def _slice_len(start, stop, step) -> int:
    return max(0, (stop - start + step - 1) // step)


def _is_basic(idx) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    for i in items:
        if i is Ellipsis:
            continue
        if isinstance(i, slice):
            if i.step is not None and (not isinstance(i.step, (int, np.integer))
                                       or i.step <= 0):
                return False
            continue
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            return False
    return True


def bcoo_getitem(mat: BCOO, idx) -> BCOO:
    """``mat[idx]``: static basic indices directly (see the module docstring); any other
    index (``None``, integer or boolean arrays, traced integers) as ``jnp`` indexing of the
    dense array, through ``sparsify`` (gathers and dynamic slices of BCOO arrays)."""
    jnp = _jnp()
    if not _is_basic(idx):
        from kiln.experimental.sparse.transform import sparsify
        return sparsify(lambda x: x[idx])(mat)
    spec = _normalize(mat, idx)
    nb, ns = mat.n_batch, mat.n_sparse
    data, indices = full_buffers(mat)
    # Batch dimensions: plain indexing of both buffers.
    b_index = tuple(slice(None) if s is None else
                    (s[1] if s[0] == "int" else slice(s[1], s[2], s[3])) for s in spec[:nb])
    if any(s is not None for s in spec[:nb]):
        data, indices = data[b_index], indices[b_index]
    new_nb = sum(1 for s in spec[:nb] if s is None or s[0] == "slice")
    # Dense dimensions: index the trailing dimensions of data.
    d_spec = spec[nb + ns:]
    if any(s is not None for s in d_spec):
        d_index = (slice(None),) * (new_nb + 1) + tuple(
            slice(None) if s is None else (s[1] if s[0] == "int" else slice(s[1], s[2], s[3]))
            for s in d_spec)
        data = data[d_index]
    # Sparse dimensions: through the coordinates.
    s_spec = spec[nb:nb + ns]
    if any(s is not None for s in s_spec):
        keep = None
        new_cols = []
        new_limits = []
        for j, s in enumerate(s_spec):
            col = indices[..., j]
            size = mat.shape[nb + j]
            if s is None:
                new_cols.append(col)
                new_limits.append(size)
                continue
            if s[0] == "int":
                ok = col == s[1]
            else:
                _, start, stop, step = s
                ok = (col >= start) & (col < stop) & ((col - start) % step == 0)
                new_cols.append((col - start) // step)
                new_limits.append(_slice_len(start, stop, step))
            keep = ok if keep is None else keep & ok
        limits = np.array(new_limits, dtype=np.int64).astype(indices.dtype)
        if new_cols:
            indices = jnp.stack(new_cols, axis=-1)
            indices = jnp.where(keep[..., None], indices,
                                limits.reshape((1,) * (indices.ndim - 1) + limits.shape))
        else:
            indices = jnp.zeros(indices.shape[:-1] + (0,), indices.dtype)
        mask = keep.reshape(keep.shape + (1,) * (data.ndim - keep.ndim))
        data = jnp.where(mask, data, jnp.zeros((), data.dtype))
    shape = []
    for s, size in zip(spec, mat.shape):
        if s is None:
            shape.append(size)
        elif s[0] == "slice":
            shape.append(_slice_len(*s[1:]))
    out = BCOO((data, indices), shape=tuple(shape))
    cap = math.prod(out.shape[out.n_batch:out.n_batch + out.n_sparse])
    if any(s is not None for s in s_spec) and out.nse > cap:
        # As JAX's sparse slices: no more slots than coordinates in the selection.
        from kiln.experimental.sparse._bcoo_dedupe import bcoo_sum_duplicates
        out = bcoo_sum_duplicates(out, nse=cap)
    return out
