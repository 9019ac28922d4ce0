"""Contractions with BCOO arrays: ``bcoo_dot_general``, ``bcoo_dot_general_sampled`` and
the ``@`` operator.

Sparse times dense (the core): the BCOO batch dimensions are grouped into those shared
with the dense operand (dot batch dimensions), kept ones and contracted ones; each stored
element picks the dense operand's slice at its contracted sparse coordinates (a gather,
zero for padding), multiplies it by its value, and the products are scatter-added at the
element's kept sparse coordinates (or summed when none are kept). Dense times sparse is
the same contraction with the operands swapped and the result transposed. Sparse times
sparse pairs every two stored elements whose contracted coordinates agree and sums the
products that share output coordinates, giving a BCOO result of JAX's size (the product
of the two ``nse``, capped at the number of output coordinates).

All of it is gather/scatter/multiply from ``kiln.numpy``, so ``jit``, ``grad`` (with
respect to the values and the dense operand) and ``vmap`` follow from their rules.
"""
from __future__ import annotations

import operator
from functools import partial

import numpy as np

from kiln.experimental.sparse._bcoo_core import BCOO, full_buffers, prod, sparse_shape
from kiln.numpy._util import check_arraylike, promote_dtypes

__all__ = ["bcoo_dot_general", "bcoo_dot_general_sampled", "sparse_matmul"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _dims(dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers

    def tup(x):
        return tuple(operator.index(i) for i in (x if isinstance(x, (tuple, list)) else (x,)))
    return (tup(lc), tup(rc)), (tup(lb), tup(rb))


def _dense_result_aval(lhs_shape, lhs_dtype, rhs_shape, rhs_dtype, dims, preferred):
    """The shape/dtype ``lax.dot_general`` gives (and its errors for bad arguments)."""
    from kiln import lax
    from kiln.shape_eval import ShapeDtypeStruct, eval_shape
    f = partial(lax.dot_general, dimension_numbers=dims, preferred_element_type=preferred)
    return eval_shape(f, ShapeDtypeStruct(tuple(lhs_shape), lhs_dtype),
                      ShapeDtypeStruct(tuple(rhs_shape), rhs_dtype))


def _sparse_dense(lhs: BCOO, rhs, dims, preferred):
    jnp = _jnp()
    (lc, rc), (lb, rb) = dims
    aval = _dense_result_aval(lhs.shape, lhs.dtype, rhs.shape, rhs.dtype, dims, preferred)
    nb, ns = lhs.n_batch, lhs.n_sparse
    if lb and max(lb) >= nb:
        raise NotImplementedError(
            "bcoo_dot_general batch dimensions must be among the batch dimensions in the "
            f"sparse representation.\ngot lhs_batch={lb}, n_batch={nb}")
    if any(d >= nb + ns for d in lc):
        raise NotImplementedError("bcoo_dot_general: contracting over dense dimensions.")
    dt = aval.dtype
    shp = lhs.shape
    pairs_b = [(l, r) for l, r in zip(lc, rc) if l < nb]
    pairs_s = [(l - nb, r) for l, r in zip(lc, rc) if l >= nb]
    B, Cb = list(lb), [l for l, _ in pairs_b]
    Kb = [i for i in range(nb) if i not in lb and i not in Cb]
    Ks = [i for i in range(ns) if i + nb not in lc]
    rK = [i for i in range(rhs.ndim) if i not in rb and i not in rc]
    sB = tuple(shp[i] for i in B)
    sKb = tuple(shp[i] for i in Kb)
    sCb = tuple(shp[i] for i in Cb)
    sKs = tuple(shp[nb + i] for i in Ks)
    sD = tuple(shp[nb + ns:])
    sCs = tuple(rhs.shape[r] for _, r in pairs_s)
    sK = tuple(rhs.shape[i] for i in rK)
    nB, nKb, nCb, nse = prod(sB), prod(sKb), prod(sCb), lhs.nse

    data, indices = full_buffers(lhs)
    order = B + Kb + Cb
    data = jnp.reshape(jnp.transpose(data.astype(dt), order + list(range(nb, data.ndim))),
                       (nB, nKb, nCb, nse) + sD)
    indices = jnp.reshape(jnp.transpose(indices, order + [nb, nb + 1]), (nB, nKb, nCb, nse, ns))
    r_order = list(rb) + [r for _, r in pairs_b] + [r for _, r in pairs_s] + rK
    dense = jnp.reshape(jnp.transpose(jnp.asarray(rhs).astype(dt), r_order),
                        (nB, nCb) + sCs + sK)

    gb = np.arange(nB, dtype=np.int32).reshape(nB, 1, 1, 1)
    gk = np.arange(nKb, dtype=np.int32).reshape(1, nKb, 1, 1)
    gc = np.arange(nCb, dtype=np.int32).reshape(1, 1, nCb, 1)
    cols = tuple(indices[..., j] for j, _ in pairs_s)
    rows = dense.at[(gb, gc) + cols].get(mode="fill", fill_value=0)
    lhs_e = jnp.reshape(data, data.shape + (1,) * len(sK))
    rows_e = jnp.reshape(rows, rows.shape[:4] + (1,) * len(sD) + sK)
    products = lhs_e * rows_e                      # (nB, nKb, nCb, nse, *sD, *sK)
    if Ks:
        keys = tuple(indices[..., j] for j in Ks)
        out = jnp.zeros((nB, nKb) + sKs + sD + sK, dt)
        out = out.at[(gb, gk) + keys].add(products, mode="drop")
    else:
        out = jnp.sum(products, axis=(2, 3), dtype=dt)
    return jnp.reshape(out, sB + sKb + sKs + sD + sK)


def _dense_sparse(lhs, rhs: BCOO, dims, preferred):
    jnp = _jnp()
    (lc, rc), (lb, rb) = dims
    out = _sparse_dense(rhs, lhs, ((rc, lc), (rb, lb)), preferred)
    n_batch = len(lb)
    n_rhs_free = rhs.ndim - len(rc) - len(rb)
    perm = (list(range(n_batch)) + list(range(n_batch + n_rhs_free, out.ndim))
            + list(range(n_batch, n_batch + n_rhs_free)))
    return jnp.transpose(out, perm)


def _sparse_sparse(lhs: BCOO, rhs: BCOO, dims, preferred):
    jnp = _jnp()
    (lc, rc), (lb, rb) = dims
    aval = _dense_result_aval(lhs.shape, lhs.dtype, rhs.shape, rhs.dtype, dims, preferred)
    k = len(lb)
    if (lhs.n_dense or rhs.n_dense or lhs.n_batch != k or rhs.n_batch != k
            or tuple(lb) != tuple(range(k)) or tuple(rb) != tuple(range(k))):
        # Bring both to the layout computed below: the dot batch dimensions first, as
        # batch dimensions, everything else sparse.
        lhs, lc = _canonical_operand(lhs, lb, lc)
        rhs, rc = _canonical_operand(rhs, rb, rc)
        lb = rb = tuple(range(k))
    l_con = [d - k for d in lc]
    r_con = [d - k for d in rc]
    l_keep = [i for i in range(lhs.n_sparse) if i not in l_con]
    r_keep = [i for i in range(rhs.n_sparse) if i not in r_con]
    l_lim = np.array(sparse_shape(lhs), dtype=np.int64)
    r_lim = np.array(sparse_shape(rhs), dtype=np.int64)
    dt = aval.dtype

    def pair(ld, li, rd, ri):
        n1, n2 = li.shape[0], ri.shape[0]
        ok_l = jnp.all(li < l_lim.astype(li.dtype)[None], axis=-1)
        ok_r = jnp.all(ri < r_lim.astype(ri.dtype)[None], axis=-1)
        match = ok_l[:, None] & ok_r[None, :]
        if l_con:
            match = match & jnp.all(li[:, None, np.array(l_con)] == ri[None, :, np.array(r_con)],
                                    axis=-1)
        vals = jnp.where(match, ld.astype(dt)[:, None] * rd.astype(dt)[None, :],
                         jnp.zeros((), dt))
        idt = np.promote_types(li.dtype, ri.dtype)
        parts = [jnp.broadcast_to(li[:, None, np.array(l_keep, dtype=np.int32)],
                                  (n1, n2, len(l_keep))).astype(idt),
                 jnp.broadcast_to(ri[None, :, np.array(r_keep, dtype=np.int32)],
                                  (n1, n2, len(r_keep))).astype(idt)]
        # Non-matching pairs keep their coordinates with a zero value (an explicit zero,
        # as JAX stores them); padding rows carry out-of-range coordinates already.
        idx = jnp.concatenate(parts, axis=-1)
        return vals.reshape(n1 * n2), idx.reshape(n1 * n2, len(l_keep) + len(r_keep))
    fn = pair
    from kiln.transformations import vmap
    for _ in range(k):
        fn = vmap(fn)
    l_data, l_idx = full_buffers(lhs)
    r_data, r_idx = full_buffers(rhs)
    data, indices = fn(l_data, l_idx, r_data, r_idx)
    # JAX's size: one slot per pair of elements (a factor 1 for an operand whose sparse
    # dimensions are all contracted), at most one per output coordinate.
    nse = ((lhs.nse if l_keep else 1) * (rhs.nse if r_keep else 1))
    nse = min(nse, prod(aval.shape[k:]))
    from kiln.experimental.sparse._bcoo_dedupe import bcoo_sum_duplicates
    return bcoo_sum_duplicates(BCOO((data, indices), shape=aval.shape), nse=nse)


def _canonical_operand(mat: BCOO, batch, contract):
    """``mat`` with the dimensions ``batch`` moved to the front as its batch dimensions and
    every other dimension sparse (their order kept), and ``contract`` renumbered."""
    from kiln.experimental.sparse._bcoo_layout import bcoo_update_layout
    from kiln.experimental.sparse._bcoo_struct import bcoo_transpose
    rest = [d for d in range(mat.ndim) if d not in batch]
    perm = tuple(batch) + tuple(rest)
    mat = bcoo_update_layout(mat, n_batch=0, n_dense=0)
    if perm != tuple(range(mat.ndim)):
        mat = bcoo_transpose(mat, permutation=perm)
    mat = bcoo_update_layout(mat, n_batch=len(batch), on_inefficient=None)
    return mat, tuple(perm.index(c) for c in contract)


def bcoo_dot_general(lhs, rhs, *, dimension_numbers, precision=None,
                     preferred_element_type=None, out_sharding=None):
    """General contraction where either operand may be a BCOO array
    (``jax.experimental.sparse.bcoo_dot_general``).

    Args:
      lhs, rhs: BCOO arrays or dense arrays.
      dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``
        as in :func:`kiln.lax.dot_general`; a BCOO operand's batch dimensions in the
        product must be among its own batch dimensions, and its dense dimensions cannot be
        contracted.
      precision: unused.
      preferred_element_type: the result dtype, as in ``lax.dot_general``.
      out_sharding: unused.

    Returns:
      A dense array when one operand is dense, a BCOO array when both are sparse.
    """
    del precision, out_sharding
    dims = _dims(dimension_numbers)
    l_sp, r_sp = isinstance(lhs, BCOO), isinstance(rhs, BCOO)
    if l_sp and r_sp:
        return _sparse_sparse(lhs, rhs, dims, preferred_element_type)
    if l_sp:
        return _sparse_dense(lhs, _jnp().asarray(rhs), dims, preferred_element_type)
    if r_sp:
        return _dense_sparse(_jnp().asarray(lhs), rhs, dims, preferred_element_type)
    from kiln import lax
    return lax.dot_general(lhs, rhs, dimension_numbers=dims,
                           preferred_element_type=preferred_element_type)


def bcoo_dot_general_sampled(A, B, indices, *, dimension_numbers):
    """The values of ``lax.dot_general(A, B)`` at the BCOO ``indices`` only (the data of a
    BCOO array with that pattern; zero for padding)."""
    from kiln import lax
    from kiln.experimental.sparse._bcoo_convert import extract_data
    dense = lax.dot_general(A, B, dimension_numbers=_dims(dimension_numbers))
    return extract_data(_jnp().asarray(indices), dense)


def _matrix_batch(shape) -> tuple:
    return tuple(shape[:-2]) if len(shape) > 2 else ()


def sparse_matmul(a, b):
    """``a @ b`` where ``a`` or ``b`` is a BCOO array, with ``jnp.matmul``'s rules (1-D
    operands, dtype promotion, leading batch dimensions; a sparse operand's batch
    dimensions must already have the broadcast batch shape)."""
    jnp = _jnp()
    operands = []
    for x in (a, b):
        if not isinstance(x, BCOO):
            check_arraylike("matmul", x)
            x = jnp.asarray(x)
        operands.append(x)
    a, b = operands
    da, db = promote_dtypes(a.data if isinstance(a, BCOO) else a,
                            b.data if isinstance(b, BCOO) else b)
    a = a._with_data(da) if isinstance(a, BCOO) else da
    b = b._with_data(db) if isinstance(b, BCOO) else db
    a_nd, b_nd = len(a.shape), len(b.shape)
    if a_nd == 0 or b_nd == 0:
        raise ValueError("matmul: operands must have at least one dimension, got shapes "
                         f"{a.shape} and {b.shape}")
    a_con, b_con = a_nd - 1, (0 if b_nd == 1 else b_nd - 2)
    ab, bb = _matrix_batch(a.shape), _matrix_batch(b.shape)
    if not ab or not bb:
        out = bcoo_dot_general(a, b, dimension_numbers=(((a_con,), (b_con,)), ((), ())))
        if bb and a_nd == 2:            # (n, *bb, k) -> (*bb, n, k)
            out = jnp.moveaxis(out, 0, len(bb))
        return out
    full = tuple(np.broadcast_shapes(ab, bb))
    k = len(full)
    fixed = []
    for x, xb in ((a, ab), (b, bb)):
        if isinstance(x, BCOO):
            if xb != full or x.n_batch < k:
                raise NotImplementedError(
                    "matmul of a BCOO array needs its leading dimensions to be batch "
                    f"dimensions of the full broadcast batch shape {full}; got {x}.")
        elif xb != full:
            x = jnp.broadcast_to(x, full + tuple(x.shape[-2:]))
        fixed.append(x)
    a, b = fixed
    batch = tuple(range(k))
    return bcoo_dot_general(a, b, dimension_numbers=(((a_con,), (b_con,)), (batch, batch)))
