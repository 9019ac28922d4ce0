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


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _pivot_size(x):
    jnp = _jnp()
    if dtypes.issubdtype(x.dtype, np.complexfloating):
        return jnp.abs(jnp.real(x)) + jnp.abs(jnp.imag(x))
    return jnp.abs(x)


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
    lax, jnp = _lax(), _jnp()
    if perturb_singular:
        raise NotImplementedError(
            "tridiagonal_solve(perturb_singular=True): kiln does not implement the "
            "perturbed-pivot solve; use perturb_singular=False")
    dl, d, du, b = (jnp.asarray(v) for v in (dl, d, du, b))
    if dl.shape != d.shape or dl.shape != du.shape:
        raise TypeError("tridiagonal_solve requires that all diagonal arguments have the "
                        "same shape.")
    if b.ndim < 1 or dl.shape != b.shape[:-1]:
        raise TypeError("tridiagonal_solve requires that the leading ndim-1 dimensions of b "
                        "equal the dimensions of the diagonal arguments.")
    dt = b.dtype
    if not all(v.dtype == dt for v in (dl, d, du)) or not dtypes.issubdtype(dt, np.inexact):
        raise TypeError("tridiagonal_solve requires dl, d, du and b to have the same "
                        "floating-point or complex dtype, got "
                        f"{[v.dtype.name for v in (dl, d, du, b)]}")
    m = d.shape[-1]
    if m == 0:
        return b
    if m == 1:
        x = b / d[..., :, None]
        return jnp.where((d != 0)[..., :, None], x, jnp.full_like(x, np.nan))
    # Rows first: (m, ...) for the diagonals, (m, ..., k) for b.
    dl, d, du = (jnp.moveaxis(v, -1, 0) for v in (dl, d, du))
    b = jnp.moveaxis(b, -2, 0)
    zero = jnp.zeros((), dt)
    one = jnp.ones((), dt)
    ok = jnp.ones(d.shape[1:], bool)
    dl2 = jnp.zeros_like(d)

    def eliminate(i, state):
        d, du, dl2, b, ok = state
        di, dn = d[i], d[i + 1]
        li = dl[i + 1]
        ui, un = du[i], du[i + 1]
        bi, bn = b[i], b[i + 1]
        keep = _pivot_size(di) >= _pivot_size(li)
        not_last = i < m - 2
        # Safe denominators: each branch divides only where it is taken.
        f_keep = li / jnp.where(keep, di, one)
        f_swap = di / jnp.where(keep, one, li)
        d_i = jnp.where(keep, di, li)
        d_n = jnp.where(keep, dn - f_keep * ui, ui - f_swap * dn)
        u_i = jnp.where(keep, ui, dn)
        u_n = jnp.where(keep | ~not_last, un, -f_swap * un)
        l2_i = jnp.where(keep | ~not_last, zero, un)
        kb = keep[..., None]
        b_i = jnp.where(kb, bi, bn)
        b_n = jnp.where(kb, bn - f_keep[..., None] * bi, bi - f_swap[..., None] * bn)
        ok = ok & (~keep | (di != 0))
        d = d.at[i].set(d_i).at[i + 1].set(d_n)
        du = du.at[i].set(u_i).at[i + 1].set(u_n)
        dl2 = dl2.at[i].set(l2_i)
        b = b.at[i].set(b_i).at[i + 1].set(b_n)
        return d, du, dl2, b, ok

    d, du, dl2, b, ok = lax.fori_loop(0, m - 1, eliminate, (d, du, dl2, b, ok))
    ok = ok & (d[m - 1] != 0)
    du = du.at[m - 1].set(zero)
    x = jnp.zeros((m + 2,) + b.shape[1:], dt)

    def substitute(j, x):
        i = m - 1 - j
        xi = (b[i] - du[i][..., None] * x[i + 1] - dl2[i][..., None] * x[i + 2]) \
            / d[i][..., None]
        return x.at[i].set(xi)

    x = lax.fori_loop(0, m, substitute, x)[:m]
    x = jnp.where(ok[None, ..., None], x, jnp.full_like(x, np.nan))
    return jnp.moveaxis(x, 0, -2)
