"""The few array operations the samplers need beyond elementwise ``lax``.

Each public helper here uses ``kiln.lax`` when it provides the operation and
otherwise a private primitive defined in this file (NumPy impl, abstract eval,
batching rule): ``sort_key_val``, ``top_k``, ``take`` (a gather along one axis),
``searchsorted``, and the factorizations ``cholesky``, ``eigh``, ``svd``, ``qr``.

The factorizations call SciPy's LAPACK (``potrf``, ``syevd``, ``gesdd``,
``geqrf``/``orgqr``): the library and drivers JAX's CPU backend calls, so the
factors (and the signs of eigenvectors and singular vectors) agree with JAX's;
none of them is differentiable here.

What this module must not hold: anything random.
"""
from __future__ import annotations

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax._factory import standard_primitive


def _lax():
    from kiln import lax
    return lax


def _front(x, d, size):
    return batching.bdim_at_front(x, d, size)


# ----------------------------------------------------------------------------------------------
# sort_key_val (stable, one key)

def _skv_abstract_eval(keys, values, *, dimension):
    if keys.shape != values.shape:
        raise TypeError(f"sort_key_val operands must have equal shapes, got {keys.shape} and "
                        f"{values.shape}")
    return [ShapedArray(keys.shape, keys.dtype), ShapedArray(values.shape, values.dtype,
                                                             values.weak_type)]


def _skv_impl(keys, values, *, dimension):
    idx = np.argsort(keys, axis=dimension, kind="stable")
    return [np.take_along_axis(keys, idx, dimension), np.take_along_axis(values, idx, dimension)]


sort_key_val_p = standard_primitive("random_sort_key_val", _skv_abstract_eval, _skv_impl,
                                    weak_type_rule=lambda wk, wv, **_: [False, wv],
                                    multiple_results=True)


def _skv_batch(axis_data, vals, dims, *, dimension):
    size = axis_data.size
    k, v = (_front(x, d, size) for x, d in zip(vals, dims))
    return sort_key_val_p.bind(k, v, dimension=dimension + 1), [0, 0]


batching.batch_rules[sort_key_val_p] = _skv_batch


def _skv_jvp(primals, tangents, *, dimension):
    (keys, values), (_, tv) = primals, tangents
    sk, sv = sort_key_val_p.bind(keys, values, dimension=dimension)
    if type(tv) is Zero:
        return [sk, sv], [Zero.from_primal_value(sk), Zero.from_primal_value(sv)]
    # A stable sort by the same keys applies the same permutation to the tangent.
    _, st = sort_key_val_p.bind(keys, tv, dimension=dimension)
    return [sk, sv], [Zero.from_primal_value(sk), st]


ad.jvp_rules[sort_key_val_p] = _skv_jvp


def sort_key_val(keys, values, dimension=-1):
    """Sort ``values`` along ``dimension`` by ``keys`` (stably); returns (keys, values)."""
    lax = _lax()
    nd = get_aval(keys).ndim
    dimension = dimension % nd if nd else 0
    if hasattr(lax, "sort_key_val"):
        return lax.sort_key_val(keys, values, dimension, is_stable=True)
    return sort_key_val_p.bind(keys, values, dimension=dimension)


# ----------------------------------------------------------------------------------------------
# top_k (last axis; ties keep the lower index first)

def _topk_abstract_eval(x, *, k):
    if not x.shape or x.shape[-1] < k:
        raise ValueError(f"top_k: k={k} is larger than the last axis of shape {x.shape}")
    shape = x.shape[:-1] + (k,)
    return [ShapedArray(shape, x.dtype, x.weak_type), ShapedArray(shape, np.int32)]


def _topk_impl(x, *, k):
    floating = x.dtype.kind not in "iub"
    key = -x.astype(np.float64) if floating or x.dtype.itemsize < 8 else -x
    if floating:
        # NaNs sort first (as the largest), like XLA's total order.
        key = np.where(np.isnan(x), -np.inf, key)
    idx = np.argsort(key, axis=-1, kind="stable")[..., :k]
    return [np.take_along_axis(x, idx, -1), idx.astype(np.int32)]


top_k_p = standard_primitive("random_top_k", _topk_abstract_eval, _topk_impl,
                             weak_type_rule=lambda w, **_: [w, False], multiple_results=True)


def _topk_batch(axis_data, vals, dims, *, k):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    return top_k_p.bind(x, k=k), [0, 0]


batching.batch_rules[top_k_p] = _topk_batch


def _topk_jvp(primals, tangents, *, k):
    (x,), (tx,) = primals, tangents
    vals, idx = top_k_p.bind(x, k=k)
    if type(tx) is Zero:
        return [vals, idx], [Zero.from_primal_value(vals), Zero.from_primal_value(idx)]
    nd = get_aval(x).ndim
    tv = take_p.bind(tx, idx, axis=nd - 1, batch=nd - 1)
    return [vals, idx], [tv, Zero.from_primal_value(idx)]


ad.jvp_rules[top_k_p] = _topk_jvp


def top_k(x, k):
    lax = _lax()
    if hasattr(lax, "top_k"):
        return lax.top_k(x, k)
    return top_k_p.bind(x, k=int(k))


# ----------------------------------------------------------------------------------------------
# take: x[..., idx, ...] along ``axis``; ``batch`` leading axes shared by x and idx.

def _take_abstract_eval(x, idx, *, axis, batch):
    if idx.dtype.kind not in "iu":
        raise TypeError(f"take indices must be integers, got {idx.dtype}")
    shape = x.shape[:axis] + idx.shape[batch:] + x.shape[axis + 1:]
    return ShapedArray(shape, x.dtype, x.weak_type)


def _take_impl(x, idx, *, axis, batch):
    n = x.shape[axis]
    idx = np.where(idx < 0, idx + n, idx)
    if batch == 0:
        return np.take(x, idx, axis=axis)
    bshape = x.shape[:batch]
    b = int(np.prod(bshape))
    xb = x.reshape((b,) + x.shape[batch:])
    ib = idx.reshape((b,) + idx.shape[batch:])
    ax = axis - batch + 1
    xm = np.moveaxis(xb, ax, 1)
    bi = np.arange(b).reshape((b,) + (1,) * (ib.ndim - 1))
    g = xm[bi, ib]  # (b, *ib.shape[1:], *rest)
    k = ib.ndim - 1
    # Move the index axes to where the gathered axis was.
    perm = [0] + list(range(1 + k, 1 + k + ax - 1)) + list(range(1, 1 + k)) + \
        list(range(1 + k + ax - 1, g.ndim))
    g = np.transpose(g, perm)
    return g.reshape(bshape + g.shape[1:])


take_p = standard_primitive("random_take", _take_abstract_eval, _take_impl,
                            weak_type_rule=lambda wx, wi, **_: wx)


def _take_batch(axis_data, vals, dims, *, axis, batch):
    (x, idx), (dx, di) = vals, dims
    size = axis_data.size
    if di is None:
        x = batching.moveaxis(x, dx, 0)
        if batch == 0:
            return take_p.bind(x, idx, axis=axis + 1, batch=0), 0
        # Shared batch axes of x and idx: broadcast idx along the new axis.
        idx = _front(idx, None, size)
    else:
        x = _front(x, dx, size)
        idx = batching.moveaxis(idx, di, 0)
    return take_p.bind(x, idx, axis=axis + 1, batch=batch + 1), 0


batching.batch_rules[take_p] = _take_batch


def _take_jvp(primals, tangents, *, axis, batch):
    (x, idx), (tx, _) = primals, tangents
    ans = take_p.bind(x, idx, axis=axis, batch=batch)
    if type(tx) is Zero:
        return ans, Zero.from_primal_value(ans)
    return ans, take_p.bind(tx, idx, axis=axis, batch=batch)


ad.jvp_rules[take_p] = _take_jvp


def _take_transpose_impl(ct, idx, *, axis, batch, n):
    shape = list(ct.shape[:axis]) + [n] + list(ct.shape[axis + idx.ndim - batch:])
    out = np.zeros(shape, ct.dtype)
    idx = np.where(idx < 0, idx + n, idx)
    if batch == 0:
        moved = np.moveaxis(out, axis, 0)
        src = np.moveaxis(ct.reshape(ct.shape[:axis] + (-1,) + ct.shape[axis + idx.ndim:]),
                          axis, 0)
        np.add.at(moved, idx.reshape(-1), src)
        return out
    b = int(np.prod(ct.shape[:batch]))
    ob = out.reshape((b,) + out.shape[batch:])
    cb = ct.reshape((b,) + ct.shape[batch:])
    ib = idx.reshape((b,) + idx.shape[batch:])
    for i in range(b):
        ob[i] = _take_transpose_impl(cb[i], ib[i], axis=axis - batch, batch=0, n=n)
    return out


def _take_transpose_abstract_eval(ct, idx, *, axis, batch, n):
    k = idx.ndim - batch
    shape = ct.shape[:axis] + (n,) + ct.shape[axis + k:]
    return ShapedArray(shape, ct.dtype, ct.weak_type)


take_transpose_p = standard_primitive("random_take_transpose", _take_transpose_abstract_eval,
                                      _take_transpose_impl,
                                      weak_type_rule=lambda wc, wi, **_: wc)


def _take_transpose_rule(ct, x, idx, *, axis, batch):
    if type(ct) is Zero:
        return [Zero(x.aval), None]
    n = x.aval.shape[axis]
    return [take_transpose_p.bind(ct, idx, axis=axis, batch=batch, n=n), None]


ad.transpose_rules[take_p] = _take_transpose_rule


def _take_transpose_batch(axis_data, vals, dims, *, axis, batch, n):
    (ct, idx), (dc, di) = vals, dims
    size = axis_data.size
    ct = _front(ct, dc, size)
    idx = _front(idx, di, size)
    return take_transpose_p.bind(ct, idx, axis=axis + 1, batch=batch + 1, n=n), 0


batching.batch_rules[take_transpose_p] = _take_transpose_batch


def take(x, idx, axis=0):
    nd = get_aval(x).ndim
    return take_p.bind(x, idx, axis=axis % nd, batch=0)


# ----------------------------------------------------------------------------------------------
# searchsorted (left side) of queries into a sorted 1-D array

def _ss_abstract_eval(a, v, *, batch):
    return ShapedArray(v.shape, np.int32)


def _ss_impl(a, v, *, batch):
    if batch == 0:
        return np.searchsorted(a, v, side="left").astype(np.int32)
    return np.stack([np.searchsorted(a[i], v[i], side="left")
                     for i in range(a.shape[0])]).astype(np.int32)


searchsorted_p = standard_primitive("random_searchsorted", _ss_abstract_eval, _ss_impl,
                                    weak_type_rule=lambda *a, **k: False)
ad.defjvp_zero(searchsorted_p)


def _ss_batch(axis_data, vals, dims, *, batch):
    (a, v), (da, dv) = vals, dims
    size = axis_data.size
    if da is None:
        return searchsorted_p.bind(a, batching.moveaxis(v, dv, 0), batch=0), 0
    a = batching.moveaxis(a, da, 0)
    v = _front(v, dv, size)
    vshape = get_aval(v).shape
    v2 = _lax().reshape(v, (size, int(np.prod(vshape[1:], dtype=np.int64))))
    out = searchsorted_p.bind(a, v2, batch=1)
    return _lax().reshape(out, get_aval(v).shape), 0


batching.batch_rules[searchsorted_p] = _ss_batch


def searchsorted(a, v):
    return searchsorted_p.bind(a, v, batch=0)


# ----------------------------------------------------------------------------------------------
# Factorizations (batched over leading axes).

def _linalg_prim(name, impl, out_avals):
    prim = standard_primitive(name, out_avals, impl,
                              weak_type_rule=lambda *a, **k: [False] * 3,
                              multiple_results=True)

    def batch(axis_data, vals, dims):
        (x,), (d,) = vals, dims
        return prim.bind(batching.moveaxis(x, d, 0)), [0] * len(out_avals(get_aval(vals[0])))
    batching.batch_rules[prim] = batch
    return prim


def _batched(fn, x, nout):
    """Apply the single-matrix ``fn`` over the leading axes of ``x``."""
    # The batch size spelled out: -1 is ambiguous when a matrix dimension is 0.
    flat = x.reshape((int(np.prod(x.shape[:-2], dtype=np.int64)),) + x.shape[-2:])
    res = [fn(m) for m in flat]
    outs = []
    for i in range(nout):
        parts = [r[i] for r in res]
        proto = parts[0] if parts else None
        arr = np.stack(parts) if parts else np.zeros((0,), x.dtype)
        outs.append(arr.reshape(x.shape[:-2] + (proto.shape if proto is not None else ())))
    return outs


def _lapack(name, dtype):
    from scipy.linalg import lapack
    return lapack.get_lapack_funcs((name,), dtype=np.dtype(dtype))[0]


def _chol1(m):
    potrf = _lapack("potrf", m.dtype)
    c, info = potrf(m, lower=1, clean=1)
    if info != 0:
        # JAX returns NaNs for matrices that are not positive definite.
        c = np.full(m.shape, np.nan, m.dtype)
    return (np.tril(c).astype(m.dtype),)


def _cholesky_impl(x):
    return _batched(_chol1, np.asarray(x), 1)


def _sq_avals(x):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"expected a stack of square matrices, got shape {x.shape}")
    return [ShapedArray(x.shape, x.dtype)]


cholesky_p = _linalg_prim("random_cholesky", _cholesky_impl, _sq_avals)


def _eigh1(m):
    syevd = _lapack("heevd" if np.iscomplexobj(m) else "syevd", m.dtype)
    w, v, info = syevd(m, compute_v=1, lower=1)
    return w.real.astype(m.real.dtype), v.astype(m.dtype)


def _eigh_impl(x):
    return _batched(_eigh1, np.asarray(x), 2)


def _eigh_avals(x):
    _sq_avals(x)
    return [ShapedArray(x.shape[:-1], x.dtype), ShapedArray(x.shape, x.dtype)]


eigh_p = _linalg_prim("random_eigh", _eigh_impl, _eigh_avals)


def _svd1(m):
    gesdd = _lapack("gesdd", m.dtype)
    u, s, vh, info = gesdd(m, compute_uv=1, full_matrices=0)
    return u.astype(m.dtype), s.real.astype(m.real.dtype), vh.astype(m.dtype)


def _svd_impl(x):
    return _batched(_svd1, np.asarray(x), 3)


def _svd_avals(x):
    m, n = x.shape[-2:]
    k = min(m, n)
    b = x.shape[:-2]
    return [ShapedArray(b + (m, k), x.dtype), ShapedArray(b + (k,), x.dtype),
            ShapedArray(b + (k, n), x.dtype)]


svd_p = _linalg_prim("random_svd", _svd_impl, _svd_avals)


def _qr1(m):
    import scipy.linalg
    q, r = scipy.linalg.qr(m, mode="economic")
    return q.astype(m.dtype), r.astype(m.dtype)


def _qr_impl(x):
    x = np.asarray(x)
    if 0 in x.shape[-2:]:       # an empty factorization: Q (m, 0) / R (0, n), or R (k, 0)
        return [np.zeros(a.shape, a.dtype) for a in _qr_avals(get_aval(x))]
    return _batched(_qr1, x, 2)


def _qr_avals(x):
    m, n = x.shape[-2:]
    k = min(m, n)
    b = x.shape[:-2]
    return [ShapedArray(b + (m, k), x.dtype), ShapedArray(b + (k, n), x.dtype)]


qr_p = _linalg_prim("random_qr", _qr_impl, _qr_avals)


def cholesky(x):
    return cholesky_p.bind(x)[0]


def eigh(x):
    return tuple(eigh_p.bind(x))


def svd(x):
    return tuple(svd_p.bind(x))


def qr(x):
    return tuple(qr_p.bind(x))
