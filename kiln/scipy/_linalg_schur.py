"""``jax.scipy.linalg`` functions built on the Schur and QR factorizations: ``rsf2csf``
(real to complex Schur form by Givens rotations), ``funm`` (a matrix function by Parlett's
recurrence on the complex Schur form, Golub & Van Loan, Matrix Computations, 11.1.1) and
``qr_multiply`` (``Q @ c`` or ``c @ Q`` of a QR factorization). All are written with
``kiln.lax``/``kiln.numpy`` operations, so they run eagerly and under ``jit``/``vmap``.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes, lax
from kiln.lax import linalg as lax_linalg
from kiln.numpy._util import check_arraylike, promote_dtypes_complex, promote_dtypes_inexact


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _givens_step(m, T, Z):
    """Rotate rows/columns ``m-1, m`` of ``T`` (and columns of ``Z``) so that the 2x2 block
    at ``(m-1, m-1)`` becomes upper triangular."""
    jnp = _jnp()
    n = T.shape[0]
    block = lax.dynamic_slice(T, (m - 1, m - 1), (2, 2))
    t_mm = T[m, m]
    sub = T[m, m - 1]
    mu = jnp.linalg.eigvals(block)[0] - t_mm
    r = jnp.sqrt(jnp.abs(mu) ** 2 + jnp.abs(sub) ** 2).astype(T.dtype)
    c, s = mu / r, sub / r
    g = jnp.stack([jnp.stack([jnp.conj(c), s]), jnp.stack([-s, c])])
    gh = jnp.conj(g.T)
    idx = jnp.arange(n)
    rows = lax.dynamic_slice_in_dim(T, m - 1, 2, axis=0)
    right = (idx >= m - 1)[None, :]            # columns m-1.. of rows m-1, m
    rows = jnp.where(right, jnp.matmul(g, jnp.where(right, rows, 0),
                                       precision=lax.Precision.HIGHEST), rows)
    T = lax.dynamic_update_slice_in_dim(T, rows, m - 1, axis=0)
    cols = lax.dynamic_slice_in_dim(T, m - 1, 2, axis=1)
    upper = (idx < m + 1)[:, None]              # rows ..m of columns m-1, m
    cols = jnp.where(upper, jnp.matmul(jnp.where(upper, cols, 0), gh,
                                       precision=lax.Precision.HIGHEST), cols)
    T = lax.dynamic_update_slice_in_dim(T, cols, m - 1, axis=1)
    zc = lax.dynamic_slice_in_dim(Z, m - 1, 2, axis=1)
    Z = lax.dynamic_update_slice_in_dim(
        Z, jnp.matmul(zc, gh, precision=lax.Precision.HIGHEST), m - 1, axis=1)
    return T, Z


def _rsf2csf_2d(T, Z):
    jnp = _jnp()
    n = T.shape[0]
    if n == 1:
        return T, Z
    eps = dtypes.finfo(T.dtype).eps

    def step(i, TZ):
        T, Z = TZ
        m = n - i
        big = jnp.abs(T[m, m - 1]) > eps * (jnp.abs(T[m - 1, m - 1]) + jnp.abs(T[m, m]))
        T, Z = lax.cond(big, _givens_step, lambda m, T, Z: (T, Z), m, T, Z)
        return T.at[m, m - 1].set(0), Z

    return lax.fori_loop(1, n, step, (T, Z))


def rsf2csf(T, Z, check_finite: bool = True):
    """Convert a real Schur form ``(T, Z)`` to the complex Schur form (``scipy.linalg.rsf2csf``).

    ``T`` and ``Z`` are ``(..., N, N)`` (batch dimensions broadcast); the result is the
    complex upper-triangular ``T`` and unitary ``Z`` with ``Z T Z^H`` unchanged.
    ``check_finite`` is unused, as in JAX."""
    del check_finite
    jnp = _jnp()
    check_arraylike("rsf2csf", T, Z)
    T, Z = jnp.asarray(T), jnp.asarray(Z)
    if T.ndim < 2 or T.shape[-1] != T.shape[-2]:
        raise ValueError("Input 'T' must be square.")
    if Z.ndim < 2 or Z.shape[-1] != Z.shape[-2]:
        raise ValueError("Input 'Z' must be square.")
    if T.shape[-1] != Z.shape[-1]:
        raise ValueError(f"Input array shapes must match: Z: {Z.shape} vs. T: {T.shape}")
    T, Z = promote_dtypes_complex(T, Z)
    batch = np.broadcast_shapes(T.shape[:-2], Z.shape[:-2])
    T = jnp.broadcast_to(T, batch + T.shape[-2:])
    Z = jnp.broadcast_to(Z, batch + Z.shape[-2:])
    f = _rsf2csf_2d
    for _ in batch:
        from kiln.transformations import vmap
        f = vmap(f)
    return f(T, Z)


def _parlett(F, T):
    """Fill the strict upper triangle of ``F`` (diagonal: ``f(diag(T))``) by Parlett's
    recurrence along the superdiagonals; also the smallest ``|T_jj - T_ii|`` met."""
    jnp = _jnp()
    n = T.shape[0]
    idx = jnp.arange(n)

    def entry(i, state):
        p, F, minden = state
        j = i + p                                    # 1-based row i, column j
        s = T[i - 1, j - 1] * (F[j - 1, j - 1] - F[i - 1, i - 1])
        between = (idx >= i) & (idx < j - 1)         # 0-based k = i .. j-2
        s = s + (jnp.where(between, T[i - 1], 0) @ jnp.where(between, F[:, j - 1], 0)
                 - jnp.where(between, F[i - 1], 0) @ jnp.where(between, T[:, j - 1], 0))
        den = T[j - 1, j - 1] - T[i - 1, i - 1]
        s = jnp.where(den != 0, s / jnp.where(den != 0, den, 1), s)
        return p, F.at[i - 1, j - 1].set(s), jnp.minimum(minden, jnp.abs(den))

    def diagonal(p, state):
        F, minden = state
        _, F, minden = lax.fori_loop(1, n - p + 1, entry, (p, F, minden))
        return F, minden

    return lax.fori_loop(1, n, diagonal, (F, jnp.abs(T[0, 0])))


def funm(A, func, disp: bool = True):
    """Evaluate the matrix function ``func`` at the square matrix ``A``
    (``scipy.linalg.funm``): ``func`` is applied to the eigenvalues on the diagonal of the
    complex Schur form and extended to the triangle by Parlett's recurrence.

    Returns the (complex) matrix; with ``disp=False``, ``(F, err)`` where ``err`` estimates
    the relative error (``inf`` if ``F`` has an infinite entry)."""
    jnp = _jnp()
    check_arraylike("funm", A)
    A = jnp.asarray(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("expected square array_like input")
    from kiln.scipy.linalg import schur
    T, Z = rsf2csf(*schur(A))
    F = jnp.diag(func(jnp.diag(T))).astype(T.dtype)
    F, minden = _parlett(F, T)
    F = jnp.matmul(jnp.matmul(Z, F, precision=lax.Precision.HIGHEST), jnp.conj(Z.T),
                   precision=lax.Precision.HIGHEST)
    if disp:
        return F
    tol = dtypes.finfo(np.float32 if F.dtype.char.lower() == "f" else np.float64).eps
    minden = jnp.where(minden == 0, tol, minden)
    err = jnp.where(jnp.any(jnp.isinf(F)), np.inf, jnp.minimum(1, jnp.maximum(
        tol, (tol / minden) * jnp.linalg.norm(jnp.triu(T, 1), 1))))
    return F, err


def qr_multiply(a, c, mode: str = "right", pivoting: bool = False, conjugate: bool = False,
                overwrite_a: bool = False, overwrite_c: bool = False):
    """``Q @ c`` (``mode='left'``) or ``c @ Q`` (``'right'``) with ``Q`` (``M x K``,
    ``K = min(M, N)``) of the QR factorization of ``a`` (``scipy.linalg.qr_multiply``).

    ``c`` is ``(..., K, P)`` for ``'left'`` and ``(..., P, M)`` for ``'right'`` (a 1-D ``c``
    is a column, resp. row, and the result is raveled); batch dimensions broadcast.
    ``conjugate`` uses ``conj(Q)``. Returns ``(result, R)`` (``R``: ``(..., K, N)``), and the
    column permutation as a third element with ``pivoting``. ``overwrite_*`` are unused."""
    del overwrite_a, overwrite_c
    jnp = _jnp()
    check_arraylike("qr_multiply", a, c)
    a, c = promote_dtypes_inexact(jnp.asarray(a), jnp.asarray(c))
    if mode not in ("right", "left"):
        raise ValueError(f"mode must be 'right' or 'left', got {mode!r}")
    onedim = c.ndim == 1
    if onedim:
        c = c[:, None] if mode == "left" else c[None, :]
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "left" and c.shape[-2] != k:
        raise ValueError(
            f"Array shapes are not compatible for Q @ c operation: a has shape "
            f"{tuple(a.shape)} so Q has {k} columns, but c has {c.shape[-2]} rows "
            f"(expected {k}).")
    if mode == "right" and c.shape[-1] != m:
        raise ValueError(
            f"Array shapes are not compatible for c @ Q operation: a has shape "
            f"{tuple(a.shape)} so Q has {m} rows, but c has {c.shape[-1]} columns "
            f"(expected {m}).")
    batch = np.broadcast_shapes(a.shape[:-2], c.shape[:-2])
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    c = jnp.broadcast_to(c, batch + c.shape[-2:])
    q, r, *p = lax_linalg.qr(a, pivoting=pivoting, full_matrices=False)
    if conjugate:
        q = jnp.conj(q)
    hi = lax.Precision.HIGHEST
    out = jnp.matmul(q, c, precision=hi) if mode == "left" else \
        jnp.matmul(c, q, precision=hi)
    if onedim:
        out = out.ravel()
    r = jnp.triu(r[..., :k, :])
    return (out, r, p[0]) if pivoting else (out, r)


__all__ = ["funm", "qr_multiply", "rsf2csf"]
