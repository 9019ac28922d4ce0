"""Elementwise BCOO arithmetic: the operators of ``BCOO`` and ``bcoo_multiply_dense``/
``bcoo_multiply_sparse``.

Only operations whose result keeps the sparsity pattern stay sparse, as in JAX's
``sparsify`` rules: sparse times scalar/dense and sparse divided by scalar/dense are
sparse (the dense operand is gathered at the stored coordinates), sparse plus sparse
concatenates the stored elements, sparse plus dense of the full shape is dense, sparse
minus dense and anything divided by a sparse array raise ``NotImplementedError``.
"""
from __future__ import annotations

import numpy as np

from kiln.experimental.sparse._bcoo_core import (
    BCOO,
    batch_grid,
    full_buffers,
    sparse_shape,
)
from kiln.numpy._util import is_arraylike, promote_dtypes, promote_dtypes_inexact

__all__ = ["add", "bcoo_multiply_dense", "bcoo_multiply_sparse", "multiply", "power",
           "subtract", "true_divide"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _nfold_vmap(fun, n: int):
    from kiln.transformations import vmap
    for _ in range(n):
        fun = vmap(fun)
    return fun


def bcoo_multiply_dense(sp_mat: BCOO, v):
    """The stored values of ``sp_mat * v`` for a dense ``v`` broadcasting to its shape.

    Args:
      sp_mat: a BCOO array.
      v: a dense array whose shape broadcasts to ``sp_mat.shape``.

    Returns:
      The new ``data`` buffer (the pattern is ``sp_mat``'s).
    """
    jnp = _jnp()
    v = jnp.asarray(v)
    shape = tuple(sp_mat.shape)
    if v.ndim == 0:
        return jnp.multiply(sp_mat.data, v)
    if np.broadcast_shapes(v.shape, shape) != shape:
        raise NotImplementedError(
            "multiplication between sparse and dense is only implemented for cases where "
            f"the output shape matches the sparse matrix shape. Got shape={shape}, "
            f"v.shape={v.shape}")
    v = jnp.reshape(v, (1,) * (len(shape) - v.ndim) + tuple(v.shape))
    nb, ns = sp_mat.n_batch, sp_mat.n_sparse
    data, indices = full_buffers(sp_mat)
    zero = np.zeros((1,) * (nb + 1), np.int32)
    grid = [g if v.shape[i] != 1 else zero for i, g in enumerate(batch_grid(shape[:nb]))]
    cols = [indices[..., j] if v.shape[nb + j] != 1 else zero for j in range(ns)]
    index = tuple(grid) + tuple(cols)
    picked = v.at[index].get(mode="fill", fill_value=0) if index else v[None]
    return jnp.multiply(data, picked)


def bcoo_multiply_sparse(lhs: BCOO, rhs: BCOO) -> BCOO:
    """Elementwise product of two BCOO arrays whose shapes broadcast (and whose numbers of
    dense dimensions agree).

    The operand with more batch dimensions first turns the extra ones into sparse ones.
    Then per batch every pair of stored elements whose coordinates agree (on the sparse
    dimensions that are not 1 in either operand) contributes their product; the result
    stores ``lhs.nse * rhs.nse`` elements per batch, the matching pairs first and padding
    after them (JAX's layout).
    """
    from kiln.experimental.sparse._bcoo_layout import bcoo_update_layout
    from kiln.experimental.sparse.util import nfold_vmap
    jnp = _jnp()
    if lhs.ndim != rhs.ndim:
        raise TypeError("bcoo_multiply_sparse: arrays must have same number of dimensions, "
                        f"got {lhs.shape}, {rhs.shape}")
    if lhs.n_dense != rhs.n_dense:
        raise NotImplementedError("bcoo_multiply_sparse: arrays with differing numbers of "
                                  f"dense dimensions: {lhs}, {rhs}")
    out_shape = tuple(np.broadcast_shapes(lhs.shape, rhs.shape))
    l_vals, r_vals = promote_dtypes(lhs.data, rhs.data)
    nb = min(lhs.n_batch, rhs.n_batch)
    lhs = bcoo_update_layout(lhs._with_data(l_vals), n_batch=nb)
    rhs = bcoo_update_layout(rhs._with_data(r_vals), n_batch=nb)
    idt = np.promote_types(lhs.indices.dtype, rhs.indices.dtype)
    compared = np.array([i for i, (a, b) in enumerate(zip(sparse_shape(lhs),
                                                         sparse_shape(rhs)))
                         if a != 1 and b != 1], dtype=np.int32)
    l_far = max(lhs.shape[nb:], default=0)
    r_far = max(rhs.shape[nb:], default=0)

    def pairwise(ld, li, rd, ri):
        n1, n2 = li.shape[0], ri.shape[0]
        match = jnp.all(li[:, None, compared] == ri[None, :, compared], axis=-1)
        # The matching pairs first (row-major), then padding pairs.
        i_l, i_r = jnp.nonzero(match, size=n1 * n2, fill_value=(n1, n2))
        vals = (ld.at[i_l].get(mode="fill", fill_value=0)
                * rd.at[i_r].get(mode="fill", fill_value=0))
        idx = jnp.maximum(li.at[i_l].get(mode="fill", fill_value=l_far).astype(idt),
                          ri.at[i_r].get(mode="fill", fill_value=r_far).astype(idt))
        return vals, idx
    data, indices = nfold_vmap(pairwise, nb)(lhs.data, lhs.indices, rhs.data, rhs.indices)
    return BCOO((data, indices), shape=out_shape)


def _dense_operand(x):
    if isinstance(x, BCOO):
        return x
    if not is_arraylike(x):
        return None
    return _jnp().asarray(x)


def multiply(a, b):
    """``a * b`` with at least one BCOO operand: a BCOO array with the sparse operand's
    pattern (both sparse: ``bcoo_multiply_sparse``)."""
    a, b = _dense_operand(a), _dense_operand(b)
    if a is None or b is None:
        return NotImplemented
    if isinstance(a, BCOO) and isinstance(b, BCOO):
        return bcoo_multiply_sparse(a, b)
    sp, v = (a, b) if isinstance(a, BCOO) else (b, a)
    data, v = promote_dtypes(sp.data, v)
    return sp._with_data(bcoo_multiply_dense(sp._with_data(data), v))


def true_divide(sp, other):
    """``sp / other`` for a BCOO ``sp`` and a scalar or dense ``other``."""
    other = _dense_operand(other)
    if other is None:
        return NotImplemented
    if isinstance(other, BCOO):
        raise NotImplementedError(
            "Division by a sparse array is not implemented because it would result in dense "
            "output. If this is your intent, use sparse.todense() to convert your arguments "
            "to a dense array.")
    data, other = promote_dtypes_inexact(sp.data, other)
    return sp._with_data(bcoo_multiply_dense(sp._with_data(data), 1 / other))


def add(a, b):
    """``a + b`` with at least one BCOO operand: sparse when both are sparse (the stored
    elements are concatenated), dense when one is a dense array of the result's shape."""
    jnp = _jnp()
    a, b = _dense_operand(a), _dense_operand(b)
    if a is None or b is None:
        return NotImplemented
    if isinstance(a, BCOO) and isinstance(b, BCOO):
        if a.shape != b.shape:
            raise NotImplementedError("Addition between sparse matrices of different shapes.")
        da, db = promote_dtypes(a.data, b.data)
        if a.n_batch != b.n_batch or a.n_dense != b.n_dense:
            raise NotImplementedError("Addition between sparse matrices with different "
                                      "batch/dense dimensions.")
        a_data, a_idx = full_buffers(a._with_data(da))
        b_data, b_idx = full_buffers(b._with_data(db))
        idx_dt = np.promote_types(a_idx.dtype, b_idx.dtype)
        nb = a.n_batch
        return BCOO((jnp.concatenate([a_data, b_data], axis=nb),
                     jnp.concatenate([a_idx.astype(idx_dt), b_idx.astype(idx_dt)], axis=nb)),
                    shape=a.shape)
    sp, v = (a, b) if isinstance(a, BCOO) else (b, a)
    if np.broadcast_shapes(sp.shape, v.shape) != tuple(v.shape):
        raise NotImplementedError(
            "Addition between a sparse array X and a dense array Y is not implemented when "
            "the output shape is larger than Y.shape. This is to prevent silent densification "
            "of a large sparse array. If this is your intent, you can explicitly cast the "
            "sparse array to a dense matrix.")
    data, v = promote_dtypes(sp.data, v)
    dense = sp._with_data(data).todense()
    return jnp.add(dense, v) if sp is a else jnp.add(v, dense)


def subtract(a, b):
    """``a - b``: only between two BCOO arrays (``a + (-b)``), as in JAX."""
    if isinstance(a, BCOO) and isinstance(b, BCOO):
        return add(a, -b)
    if _dense_operand(a) is None or _dense_operand(b) is None:
        return NotImplemented
    raise NotImplementedError("Subtraction between sparse and dense array.")


def power(sp: BCOO, exponent):
    """``sp ** exponent`` through ``sparsify``, as JAX's ``BCOO.__pow__``: a positive
    integer exponent keeps zeros zero (``integer_pow``: repeated coordinates are summed
    first); any other raises ``NotImplementedError`` (the result would be dense)."""
    from kiln.experimental.sparse.transform import sparsify
    return sparsify(lambda x: _jnp().power(x, exponent))(sp)
