"""Restarted GMRES for :func:`kiln.scipy.sparse.linalg.gmres`, as JAX computes it.

Each restart builds an Arnoldi basis of the preconditioned Krylov space ``K(M A, r)`` (one
column per step, orthogonalized by classical Gram-Schmidt), then takes the correction that
minimizes the preconditioned residual in that space. Two ways to get that correction:

- ``incremental``: the Hessenberg matrix is reduced to triangular form by Givens rotations
  while it grows, which also gives the residual norm after every step, so a restart stops
  as soon as it is below ``ptol``; the correction is one triangular solve.
- ``batched``: the whole basis is built (stopping only on breakdown) and the small least
  squares problem is solved once at the end through its normal equations.

Vectors are pytrees (see ``_vectors``); the basis keeps, for every leaf, the Krylov vectors
along a new trailing axis of length ``restart + 1``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.scipy import linalg as sp_linalg
from kiln.scipy.sparse._vectors import add, safe_normalize, sub
from kiln.tree_util import tree_leaves, tree_map

_HIGHEST = lax.Precision.HIGHEST


def _dot(a, b):
    return jnp.dot(a, b, precision=_HIGHEST)


def _overlaps(Q, v) -> Any:
    """``Q^H v``: the inner product of ``v`` with every column of the basis ``Q`` (summed
    over the leaves; each leaf of ``Q`` is its leaf of ``v`` with a trailing column axis)."""
    per_leaf = tree_map(
        lambda X, y: jnp.tensordot(y, jnp.conj(X), axes=jnp.ndim(y), precision=_HIGHEST),
        Q, v)
    out = None
    for part in tree_leaves(per_leaf):
        out = part if out is None else out + part
    return out


def _combine(Q, coeffs) -> Any:
    """``Q @ coeffs``: the combination of the basis columns with the given coefficients."""
    return tree_map(lambda X: _dot(X, coeffs), Q)


def _gram_schmidt(Q, x, x_norm, max_iterations: int = 2) -> tuple[Any, Any]:
    """Classical Gram-Schmidt of ``x`` against the orthonormal columns of ``Q``.

    Returns ``(q, r)``: ``q`` is ``x`` with its components along ``Q`` removed and ``r`` the
    removed coefficients. The sweep is repeated while fewer than ``max_iterations - 1``
    sweeps ran and ``|r|`` is below ``|q| / sqrt(2)`` (``|q|`` as it was before the last
    sweep, and ``|x| / sqrt(2)`` at the start), JAX's criterion; with the default of two
    this is a single sweep.
    """
    last = max_iterations - 1
    columns = tree_leaves(Q)[0].shape[-1]
    root2 = jnp.sqrt(2.0)

    def sweep(state):
        k, q, r, ref = state
        h = _overlaps(Q, q)
        q = sub(q, _combine(Q, h))
        r = r + h
        # the reference norm follows q on every sweep but the last one allowed
        ref = jnp.where(k < last, safe_normalize(q)[1] / root2, ref)
        return k + 1, q, r, ref

    def again(state):
        k, _, r, ref = state
        return jnp.logical_and(k < last, safe_normalize(r)[1] < ref)

    r0 = jnp.zeros(columns, dtype=tree_leaves(Q)[0].dtype)
    state = sweep((0, x, r0, x_norm / root2))
    if last > 1:    # otherwise ``again`` is false after the first sweep whatever the data
        state = lax.while_loop(again, sweep, state)
    _, q, r, _ = state
    return q, r


def _kth_arnoldi_iteration(k, A, M, V, H) -> tuple[Any, Any, Any]:
    """Step ``k`` of the Arnoldi process on ``M A``.

    Appends the orthonormalized ``M(A(V[..., k]))`` as column ``k + 1`` of the basis ``V``
    and its coefficients as row ``k`` of ``H`` (the transposed Hessenberg matrix, shape
    ``(restart, restart + 1)``). A remainder whose norm is at most ``eps`` times the norm
    before orthogonalization is an invariant subspace: the new column is zero and the
    returned ``breakdown`` flag is true.
    """
    dtype = dtypes._lattice_result_type(*tree_leaves(V))[0]
    eps = dtypes.finfo(dtype).eps
    w = M(A(tree_map(lambda X: X[..., k], V)))
    _, w_norm = safe_normalize(w)
    w, h = _gram_schmidt(V, w, w_norm, max_iterations=2)
    unit, rest_norm = safe_normalize(w, thresh=w_norm * eps)
    V = tree_map(lambda X, u: X.at[..., k + 1].set(u), V, unit)
    h = h.at[k + 1].set(rest_norm.astype(dtype))
    return V, H.at[k, :].set(h), rest_norm == 0.0


# ------------------------------------------------------------------------------------------
# Givens rotations

def _rotate(vec, i, c, s):
    """Applies the rotation ``(c, s)`` to entries ``i`` and ``i + 1`` of ``vec``."""
    top, bottom = vec[i], vec[i + 1]
    vec = vec.at[i].set(jnp.conj(c) * top - jnp.conj(s) * bottom)
    return vec.at[i + 1].set(s * top + c * bottom)


def _givens(a, b) -> tuple[Any, Any]:
    """The rotation ``(c, s)`` that zeroes ``b`` in ``(a, b)``, computed from the ratio of
    the smaller entry to the larger (no overflow)."""
    swap = jnp.abs(a) < jnp.abs(b)
    ratio = -jnp.where(swap, a, b) / jnp.where(swap, b, a)
    scale = lax.rsqrt(1 + jnp.abs(ratio) ** 2).astype(ratio.dtype)
    b_zero = jnp.abs(b) == 0
    c = jnp.where(b_zero, 1, jnp.where(swap, scale * ratio, scale))
    s = jnp.where(b_zero, 0, jnp.where(swap, scale, scale * ratio))
    return c, s


def _triangularize_row(row, rotations, k) -> tuple[Any, Any]:
    """Applies the first ``k`` stored rotations to ``row`` (row ``k`` of the transposed
    Hessenberg matrix), then makes, stores and applies the rotation that zeroes its entry
    ``k + 1``."""
    row = lax.fori_loop(0, k, lambda i, v: _rotate(v, i, rotations[i, 0], rotations[i, 1]),
                        row)
    c, s = _givens(row[k], row[k + 1])
    rotations = rotations.at[k, :].set(jnp.stack([c, s]).astype(rotations.dtype))
    return _rotate(row, k, c, s), rotations


# ------------------------------------------------------------------------------------------
# one restart

def _basis(unit_residual, restart: int) -> Any:
    """The Krylov basis with the unit residual as its first column, the others zero."""
    return tree_map(
        lambda u: jnp.pad(u[..., None], [(0, 0)] * jnp.ndim(u) + [(0, restart)]),
        unit_residual)


def _finish(A, M, b, x0, V, coeffs) -> tuple[Any, Any, Any]:
    """``x = x0 + V[..., :-1] @ coeffs`` with its unit preconditioned residual and norm."""
    x = add(x0, tree_map(lambda X: _dot(X[..., :-1], coeffs), V))
    unit, norm = safe_normalize(M(sub(b, A(x))))
    return x, unit, norm


def restart_incremental(A, b, x0, unit_residual, residual_norm, ptol, restart, M):
    """One GMRES restart, QR-factoring the Hessenberg matrix by Givens rotations as it
    grows; stops early once the residual estimate is at most ``ptol``."""
    dtype = dtypes.result_type(*tree_leaves(b))
    V = _basis(unit_residual, restart)
    # rows not reached (an early stop) stay those of the identity: R remains invertible
    R = jnp.eye(restart, restart + 1, dtype=dtype)
    rotations = jnp.zeros((restart, 2), dtype=dtype)
    g = jnp.zeros(restart + 1, dtype=dtype).at[0].set(residual_norm.astype(dtype))

    def unfinished(state):
        k, estimate = state[0], state[1]
        return jnp.logical_and(k < restart, estimate > ptol)

    def step(state):
        k, _, V, R, g, rotations = state
        V, H, _ = _kth_arnoldi_iteration(k, A, M, V, R)
        row, rotations = _triangularize_row(H[k, :], rotations, k)
        R = R.at[k, :].set(row)
        g = _rotate(g, k, rotations[k, 0], rotations[k, 1])
        return k + 1, jnp.abs(g[k + 1]), V, R, g, rotations

    _, _, V, R, g, _ = lax.while_loop(unfinished, step,
                                      (0, residual_norm, V, R, g, rotations))
    coeffs = sp_linalg.solve_triangular(R[:, :-1].T, g[:-1])
    return _finish(A, M, b, x0, V, coeffs)


def restart_batched(A, b, x0, unit_residual, residual_norm, ptol, restart, M):
    """One GMRES restart: the full Arnoldi basis (short only on breakdown), then the
    least squares problem through its normal equations. ``ptol`` is not used."""
    del ptol
    dtype, weak = dtypes._lattice_result_type(*tree_leaves(b))
    V = _basis(unit_residual, restart)
    H = lax._convert_element_type(jnp.eye(restart, restart + 1, dtype=dtype), dtype, weak)

    def unfinished(state):
        _, _, broke, k = state
        return jnp.logical_and(k < restart, jnp.logical_not(broke))

    def step(state):
        V, H, _, k = state
        V, H, broke = _kth_arnoldi_iteration(k, A, M, V, H)
        return V, H, broke, k + 1

    V, H, _, _ = lax.while_loop(unfinished, step, (V, H, False, 0))
    rhs = jnp.zeros_like(H, shape=(restart + 1,)).at[0].set(residual_norm.astype(dtype))
    # min |H^T y - rhs| via (H^T)^H H^T y = (H^T)^H rhs (a small positive definite system)
    Ht = H.T
    Ht_adj = jnp.conj(Ht.T)
    coeffs = sp_linalg.solve(_dot(Ht_adj, Ht), _dot(Ht_adj, rhs), assume_a="pos")
    return _finish(A, M, b, x0, V, coeffs)


RESTARTS: dict[str, Callable] = {"incremental": restart_incremental,
                                 "batched": restart_batched}


def gmres_solve(A, b, x0, atol, ptol, restart: int, maxiter: int, M, restart_fn) -> Any:
    """Restarts ``restart_fn`` from ``x0`` until the preconditioned residual's norm is at
    most ``atol`` or ``maxiter`` restarts ran; returns the last iterate."""
    unit, norm = safe_normalize(M(sub(b, A(x0))))

    def unfinished(state):
        _, k, _, norm = state
        return jnp.logical_and(k < maxiter, norm > atol)

    def one_restart(state):
        x, k, unit, norm = state
        x, unit, norm = restart_fn(A, b, x, unit, norm, ptol, restart, M)
        return x, k + 1, unit, norm

    return lax.while_loop(unfinished, one_restart, (x0, 0, unit, norm))[0]
