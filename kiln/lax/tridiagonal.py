"""``lax.linalg.tridiagonal_solve``: solve ``A X = B`` for a tridiagonal ``A``.

The algorithm is LAPACK's ``gtsv`` (what JAX calls on CPU): Gaussian elimination with
partial pivoting between each row and the next (a swap creates one extra super-diagonal,
``dl2``), then back substitution. It is written with ``lax`` operations (a ``fori_loop``
over the rows, batch dimensions carried along), so it runs eagerly and under ``jit``,
``vmap`` and ``grad`` (the derivative goes through the elimination; JAX's own rules give
the same derivative: the solve is linear in ``b``). When a pivot is exactly zero (a
singular matrix) the whole solution of that system is NaN, as JAX's CPU lowering makes it
(LAPACK's ``info > 0``). Complex operands pivot on ``|re| + |im|``, as ``zgtsv``.

``perturb_singular=True`` is JAX's CPU/GPU perturbed-pivot variant (after LAPACK's
``xLAGTF``/``xLAGTS``): rows are pivoted on their scaled size, and in the back substitution
a pivot below 1 that would make the row overflow is nudged away from zero by
``eps * max|U|`` (doubled until the row is representable; at least the smallest normal),
so a (numerically) singular system gives a large finite solution instead of NaN.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes

__all__ = ["tridiagonal_solve"]


def _lax():
    import kiln.lax as lax
    return lax


def _pivot_size(x):
    lax = _lax()
    if dtypes.issubdtype(x.dtype, np.complexfloating):
        return lax.add(lax.abs(lax.real(x)), lax.abs(lax.imag(x)))
    return lax.abs(x)


def _sel(pred, a, b):
    """``select`` with ``pred`` broadcast (leading-aligned) to the operands' shape."""
    lax = _lax()
    if pred.shape != a.shape:
        pred = lax.broadcast_in_dim(pred, a.shape, tuple(range(pred.ndim)))
    return lax.select(pred, a, b)


def _row(x, i):
    return _lax().dynamic_index_in_dim(x, i, 0, keepdims=False)


def _set_row(x, v, i):
    return _lax().dynamic_update_index_in_dim(x, v, i, 0)


def _rows_first(x, axis):
    perm = (axis,) + tuple(a for a in range(x.ndim) if a != axis)
    return _lax().transpose(x, perm)


def _rows_back(x, axis):
    perm = list(range(1, x.ndim))
    perm.insert(axis, 0)
    return _lax().transpose(x, tuple(perm))


def _to_array(x):
    from kiln.array import Array
    from kiln.core.trace import Tracer
    if isinstance(x, (Array, Tracer)):
        return x
    return np.asarray(x)


def tridiagonal_solve(dl, d, du, b, *, perturb_singular: bool = False):
    """Solve the tridiagonal system ``A X = B``.

    Args:
      dl: the lower diagonal, shape ``[..., m]``: ``dl[i] = A[i, i-1]`` (``dl[0]`` is
        ignored).
      d: the diagonal, shape ``[..., m]``: ``d[i] = A[i, i]``.
      du: the upper diagonal, shape ``[..., m]``: ``du[i] = A[i, i+1]`` (``du[m-1]`` is
        ignored).
      b: the right-hand sides, shape ``[..., m, k]``.
      perturb_singular: perturb tiny pivots of (numerically) singular systems so the
        solution is finite (large) instead of NaN, as JAX's CPU and GPU lowerings.

    Returns:
      ``X``, of ``b``'s shape and dtype (NaN for a singular system).

    Raises:
      TypeError: if the diagonals' shapes differ, ``b``'s leading dimensions are not
        theirs, or the dtypes are not one floating or complex dtype.
    """
    lax = _lax()
    dl, d, du, b = (_to_array(v) for v in (dl, d, du, b))
    if dl.shape != d.shape or dl.shape != du.shape:
        raise TypeError("tridiagonal_solve requires that all diagonal arguments have the "
                        "same shape.")
    if b.ndim < 1 or tuple(dl.shape) != tuple(b.shape[:-1]):
        raise TypeError("tridiagonal_solve requires that the leading ndim-1 dimensions of b "
                        "equal the dimensions of the diagonal arguments.")
    dt = dtypes.canonicalize_dtype(b.dtype)
    if not all(dtypes.canonicalize_dtype(v.dtype) == dt for v in (dl, d, du)) or \
            not dtypes.issubdtype(dt, np.inexact):
        raise TypeError("tridiagonal_solve requires dl, d, du and b to have the same "
                        "floating-point or complex dtype, got "
                        f"{[np.dtype(v.dtype).name for v in (dl, d, du, b)]}")
    dl, d, du, b = (lax.convert_element_type(v, dt) for v in (dl, d, du, b))
    m = d.shape[-1]
    if m == 0:
        return b
    nb = d.ndim - 1
    if perturb_singular:
        return _rows_back(_solve_perturbed(*(_rows_first(v, nb) for v in (dl, d, du, b))),
                          nb)
    # Rows first: (m, ...) for the diagonals, (m, ..., k) for b.
    dl, d, du = (_rows_first(v, nb) for v in (dl, d, du))
    b = _rows_first(b, nb)
    zero = lax.full((), 0, dt)
    one = lax.full((), 1, dt)
    ok = lax.full(d.shape[1:], True, np.bool_)
    dl2 = lax.full_like(d, 0)

    def eliminate(i, state):
        d, du, dl2, b, ok = state
        di, dn = _row(d, i), _row(d, i + 1)
        li = _row(dl, i + 1)
        ui, un = _row(du, i), _row(du, i + 1)
        bi, bn = _row(b, i), _row(b, i + 1)
        keep = lax.ge(_pivot_size(di), _pivot_size(li))
        last = lax.ge(i, m - 2)
        keep_or_last = lax.bitwise_or(keep, lax.broadcast(last, keep.shape))
        # Safe denominators: each branch divides only where it is taken.
        f_keep = lax.div(li, _sel(keep, di, lax.full_like(di, one)))
        f_swap = lax.div(di, _sel(keep, lax.full_like(li, one), li))
        d_i = _sel(keep, di, li)
        d_n = _sel(keep, lax.sub(dn, lax.mul(f_keep, ui)), lax.sub(ui, lax.mul(f_swap, dn)))
        u_i = _sel(keep, ui, dn)
        u_n = _sel(keep_or_last, un, lax.neg(lax.mul(f_swap, un)))
        l2_i = _sel(keep_or_last, lax.full_like(un, zero), un)
        fk = lax.expand_dims(f_keep, (f_keep.ndim,))
        fs = lax.expand_dims(f_swap, (f_swap.ndim,))
        b_i = _sel(keep, bi, bn)
        b_n = _sel(keep, lax.sub(bn, lax.mul(fk, bi)), lax.sub(bi, lax.mul(fs, bn)))
        ok = lax.bitwise_and(ok, lax.bitwise_or(lax.bitwise_not(keep), lax.ne(di, zero)))
        d = _set_row(_set_row(d, d_i, i), d_n, i + 1)
        du = _set_row(_set_row(du, u_i, i), u_n, i + 1)
        dl2 = _set_row(dl2, l2_i, i)
        b = _set_row(_set_row(b, b_i, i), b_n, i + 1)
        return d, du, dl2, b, ok

    if m > 1:
        d, du, dl2, b, ok = lax.fori_loop(0, m - 1, eliminate, (d, du, dl2, b, ok))
    ok = lax.bitwise_and(ok, lax.ne(_row(d, m - 1), zero))
    du = _set_row(du, lax.full(du.shape[1:], 0, dt), m - 1)
    x = lax.full((m + 2,) + tuple(b.shape[1:]), 0, dt)

    def substitute(j, x):
        i = m - 1 - j
        col = lambda v: lax.expand_dims(_row(v, i), (v.ndim - 1,))  # noqa: E731
        r = lax.sub(lax.sub(_row(b, i), lax.mul(col(du), _row(x, i + 1))),
                    lax.mul(col(dl2), _row(x, i + 2)))
        return _set_row(x, lax.div(r, col(d)), i)

    x = lax.fori_loop(0, m, substitute, x)
    x = lax.slice_in_dim(x, 0, m, axis=0)
    okb = lax.broadcast_in_dim(ok, x.shape, tuple(range(1, ok.ndim + 1)))
    x = lax.select(okb, x, lax.full_like(x, np.nan))
    return _rows_back(x, nb)


def _col(v):
    """A row of a diagonal (batch shape) against a row of ``b`` (batch shape + ``(k,)``)."""
    return _lax().expand_dims(v, (v.ndim,))


def _safe(pred, den):
    """``den`` where it is used as a denominator (``pred``), 1 elsewhere."""
    return _sel(pred, den, _lax().full_like(den, 1))


def _perturb_pivot(p, r, perturb, consts):
    """The pivot ``p`` (and right-hand row ``r``) after LAPACK ``xLAGTS``'s safeguard:
    while ``|p| < 1`` and ``r / p`` would overflow, add ``perturb`` (same sign as
    ``re(p)``, at least ``safemin``, doubled each time) to ``p``; a tiny nonzero pivot that
    only underflows scales ``p`` and ``r`` by ``1 / safemin`` instead.

    The search runs on values with their gradients stopped; the result is differentiated
    as ``c * (p + delta)`` with the found shift ``delta`` and scale ``c`` held constant (for
    a regular system ``delta = 0, c = 1``: the exact derivative of the solve)."""
    lax = _lax()
    safemin, bignum = consts
    p0 = p
    p, r_sg = lax.stop_gradient(p), lax.stop_gradient(r)
    rdt = perturb.dtype
    re = lax.real(p) if dtypes.issubdtype(p.dtype, np.complexfloating) else p
    perturb = lax.max(lax.abs(lax.stop_gradient(perturb)), lax.full_like(perturb, safemin))
    perturb = _sel(lax.lt(re, lax.full_like(re, 0)), lax.neg(perturb), perturb)
    mf = lax.reduce_max(lax.abs(r_sg), (r_sg.ndim - 1,))
    active = lax.lt(lax.abs(p), lax.full_like(mf, 1))
    smin, big = lax.full((), safemin, rdt), lax.full((), bignum, rdt)
    one = lax.full_like(mf, 1)

    def cond(state):
        return lax.reduce_or(state[3], tuple(range(state[3].ndim)))

    def body(state):
        p, c, pert, active = state
        ap = lax.abs(p)
        tiny = lax.lt(ap, smin)
        grow_tiny = lax.bitwise_or(lax.eq(ap, lax.full_like(ap, 0)),
                                   lax.gt(lax.mul(mf, smin), ap))
        add = lax.bitwise_and(active, lax.select(
            tiny, grow_tiny, lax.gt(mf, lax.mul(ap, big))))
        scale = lax.bitwise_and(active, lax.bitwise_and(tiny, lax.bitwise_not(grow_tiny)))
        p_add = lax.add(p, lax.convert_element_type(pert, p.dtype))
        p_scale = lax.mul(p, lax.convert_element_type(big, p.dtype))
        p = _sel(add, p_add, _sel(scale, p_scale, p))
        c = _sel(scale, lax.full_like(c, bignum), c)
        pert = _sel(add, lax.mul(pert, lax.full_like(pert, 2)), pert)
        active = lax.bitwise_and(add, lax.lt(lax.abs(p), one))
        return p, c, pert, active

    p, c, _, _ = lax.while_loop(cond, body, (p, one, perturb, active))
    cc = lax.convert_element_type(c, p.dtype)
    p = lax.add(p, lax.mul(cc, lax.sub(p0, lax.stop_gradient(p0))))
    r = _sel(lax.ne(c, one), lax.mul(r, _col(cc)), r)
    return p, r


def _solve_perturbed(dl, d, du, b):
    """``tridiagonal_solve(perturb_singular=True)`` on rows-first operands: ``dl, d, du``
    of shape ``(m, *batch)``, ``b`` of ``(m, *batch, k)``."""
    lax = _lax()
    dt = d.dtype
    rdt = np.dtype(np.finfo(dt).dtype)
    fi = np.finfo(rdt)
    small = rdt.type(1) / fi.max
    safemin = float(fi.tiny if small < fi.tiny else small * (1 + fi.eps))
    consts = (safemin, 1.0 / safemin)
    eps = lax.full((), fi.eps, rdt)
    m = d.shape[0]
    absf = lax.abs
    if m == 1:
        p = _row(d, 0)
        p, r = _perturb_pivot(p, _row(b, 0), lax.mul(eps, absf(p)), consts)
        return lax.expand_dims(lax.div(r, _col(p)), (0,))
    zero_row = lax.full(d.shape[1:], 0, dt)
    # the last row's super-diagonal is not part of the matrix
    du = _set_row(du, zero_row, m - 1)
    u0, u1, u2, x = d, du, lax.full_like(d, 0), b
    d0, s0 = _row(d, 0), _row(du, 0)
    max_u = lax.max(absf(d0), absf(s0))
    scale1 = lax.add(absf(d0), absf(s0))

    def eliminate(k, state):
        u0, u1, u2, x, scale1, max_u = state
        a, c = _row(u0, k), _row(u1, k)
        sub, dn, sup = _row(dl, k + 1), _row(d, k + 1), _row(du, k + 1)
        xk, rn = _row(x, k), _row(b, k + 1)
        rzero = lax.full_like(scale1, 0)
        scale2 = lax.add(lax.add(absf(sub), absf(dn)), absf(sup))
        no_sub = lax.eq(sub, zero_row)
        a_zero = lax.eq(a, zero_row)
        piv1 = _sel(a_zero, rzero, lax.div(absf(a), _safe(lax.bitwise_not(a_zero), scale1)))
        piv2 = lax.div(absf(sub), _safe(lax.bitwise_not(no_sub), scale2))
        keep = lax.bitwise_or(no_sub, lax.le(piv2, piv1))
        swap = lax.bitwise_not(keep)
        # keep: eliminate row k+1 with row k (factor 0 when the sub-diagonal is zero)
        f_keep = _sel(no_sub, zero_row, lax.div(sub, _safe(keep, a)))
        # swap: row k+1 becomes the pivot row
        f_swap = lax.div(a, _safe(swap, sub))
        un_keep = lax.sub(dn, lax.mul(f_keep, c))
        un_swap = lax.sub(c, lax.mul(f_swap, dn))
        new_a = _sel(keep, a, sub)
        new_c = _sel(keep, c, dn)
        new_e = _sel(keep, zero_row, sup)
        new_dn = _sel(keep, un_keep, un_swap)
        new_cn = _sel(keep, sup, lax.neg(lax.mul(f_swap, sup)))
        xn = _sel(keep, lax.sub(rn, lax.mul(_col(f_keep), xk)),
                  lax.sub(xk, lax.mul(_col(f_swap), rn)))
        new_xk = _sel(keep, xk, rn)
        scale1 = _sel(keep, scale2, lax.add(absf(new_dn), absf(new_cn)))
        interior = lax.lt(k, m - 2)
        row_max = lax.max(lax.max(absf(new_a), absf(new_c)), absf(new_e))
        max_u = lax.select(interior, lax.max(max_u, row_max), max_u)
        u0 = _set_row(_set_row(u0, new_a, k), new_dn, k + 1)
        u1 = _set_row(_set_row(u1, new_c, k), new_cn, k + 1)
        u2 = _set_row(u2, new_e, k)
        x = _set_row(_set_row(x, new_xk, k), xn, k + 1)
        return u0, u1, u2, x, scale1, max_u

    u0, u1, u2, x, _, max_u = lax.fori_loop(
        0, m - 1, eliminate, (u0, u1, u2, x, scale1, max_u))
    max_u = lax.max(max_u, absf(_row(u0, m - 1)))
    perturb = lax.mul(eps, max_u)
    x = lax.concatenate([x, lax.full((2,) + tuple(x.shape[1:]), 0, dt)], 0)

    def substitute(j, x):
        k = m - 1 - j
        r = lax.sub(lax.sub(_row(x, k), lax.mul(_col(_row(u1, k)), _row(x, k + 1))),
                    lax.mul(_col(_row(u2, k)), _row(x, k + 2)))
        p, r = _perturb_pivot(_row(u0, k), r, perturb, consts)
        return _set_row(x, lax.mul(r, _col(lax.div(lax.full_like(p, 1), p))), k)

    x = lax.fori_loop(0, m, substitute, x)
    return lax.slice_in_dim(x, 0, m, axis=0)
