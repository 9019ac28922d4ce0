"""``lax.linalg.tridiagonal_solve``: solve ``A X = B`` for a tridiagonal ``A``.

The algorithm is LAPACK's ``gtsv`` (what JAX calls on CPU): Gaussian elimination with
partial pivoting between each row and the next (a swap creates one extra super-diagonal,
``dl2``), then back substitution. It is written with ``lax`` operations (a ``fori_loop``
over the rows, batch dimensions carried along), so it runs eagerly and under ``jit``,
``vmap`` and ``grad`` (the derivative goes through the elimination; JAX's own rules give
the same derivative: the solve is linear in ``b``). When a pivot is exactly zero (a
singular matrix) the whole solution of that system is NaN, as JAX's CPU lowering makes it
(LAPACK's ``info > 0``). Complex operands pivot on ``|re| + |im|``, as ``zgtsv``.

``perturb_singular=True`` (JAX's perturbed-pivot variant) is not implemented.
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
      perturb_singular: JAX's option to perturb tiny pivots of singular systems; only
        False is supported by kiln.

    Returns:
      ``X``, of ``b``'s shape and dtype (NaN for a singular system).

    Raises:
      TypeError: if the diagonals' shapes differ, ``b``'s leading dimensions are not
        theirs, or the dtypes are not one floating or complex dtype.
      NotImplementedError: for ``perturb_singular=True``.
    """
    lax = _lax()
    if perturb_singular:
        raise NotImplementedError(
            "tridiagonal_solve(perturb_singular=True): kiln does not implement the "
            "perturbed-pivot solve; use perturb_singular=False")
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
