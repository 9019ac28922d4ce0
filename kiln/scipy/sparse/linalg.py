"""``kiln.scipy.sparse.linalg`` (``jax.scipy.sparse.linalg``): Krylov solvers of ``A x = b``.

``cg`` (conjugate gradients, for Hermitian positive definite ``A``), ``bicgstab``
(stabilized bi-conjugate gradients) and ``gmres`` (restarted GMRES) follow JAX 0.10.2
step for step: the same iterations, SciPy's non-legacy stopping rule
(``|r| <= max(tol * |b|, atol)``), inner products at ``Precision.HIGHEST``.

``A`` and the preconditioner ``M`` are a square 2-D array, a function computing the
matrix-vector product, or an object supporting ``A @ x``. ``b`` (and ``x0``) may be any
pytree of arrays: the solution has the same structure. Every loop is a
``lax.while_loop``, so the solvers work under ``jit`` and ``vmap``. They are wrapped in
``lax.custom_linear_solve`` (the solver itself is the transpose solve), so derivatives come
from implicit differentiation, a second solve with the transposed operator, rather than
from differentiating the iterations; they are accurate when both solves converge.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.scipy.sparse._gmres import (  # noqa: F401  (``_kth_arnoldi_iteration``: JAX's tests)
    RESTARTS,
    _kth_arnoldi_iteration,
    gmres_solve,
)
from kiln.scipy.sparse._vectors import (
    add,
    as_matvec,
    identity,
    scale,
    select,
    sub,
    tree_inner,
    tree_norm,
    tree_real_inner,
)
from kiln.transfer import device_put
from kiln.tree_util import tree_leaves, tree_map, tree_structure

__all__ = ["bicgstab", "cg", "gmres"]

#: what ``A`` and ``M`` may be
LinearOperator = Any


def _squared_tolerance(b, tol, atol):
    """``max(tol^2 |b|^2, atol^2)``: the bound on ``|r|^2`` that ends the iteration."""
    return jnp.maximum(jnp.square(tol) * tree_real_inner(b, b), jnp.square(atol))


def _cg_iterations(A, b, x0=None, *, maxiter, tol=1e-5, atol=0.0, M=identity):
    """Preconditioned conjugate gradients from ``x0``."""
    bound = _squared_tolerance(b, tol, atol)
    r0 = sub(b, A(x0))
    z0 = M(r0)
    dtype = dtypes.result_type(*tree_leaves(z0))
    rho0 = tree_real_inner(r0, z0).astype(dtype)
    # without a preconditioner rho is |r|^2 already
    unpreconditioned = M is identity

    def unfinished(state):
        _, r, rho, _, k = state
        r2 = rho.real if unpreconditioned else tree_real_inner(r, r)
        return (r2 > bound) & (k < maxiter)

    def step(state):
        x, r, rho, p, k = state
        Ap = A(p)
        alpha = rho / tree_real_inner(p, Ap).astype(dtype)
        x = add(x, scale(alpha, p))
        r = sub(r, scale(alpha, Ap))
        z = M(r)
        rho_next = tree_real_inner(r, z).astype(dtype)
        p = add(z, scale(rho_next / rho, p))
        return x, r, rho_next, p, k + 1

    return lax.while_loop(unfinished, step, (x0, r0, rho0, z0, 0))[0]


def _bicgstab_iterations(A, b, x0=None, *, maxiter, tol=1e-5, atol=0.0, M=identity):
    """Preconditioned BiCGSTAB from ``x0``. The step counter turns negative to stop on a
    breakdown: -10 when ``rho`` vanishes, -11 when ``alpha`` or ``omega`` does."""
    bound = _squared_tolerance(b, tol, atol)
    r0 = sub(b, A(x0))
    one = lax._convert_element_type(1, *dtypes._lattice_result_type(*tree_leaves(b)))

    def unfinished(state):
        r, k = state[1], state[-1]
        return (tree_real_inner(r, r) > bound) & (k < maxiter) & (k >= 0)

    def step(state):
        x, r, r_shadow, alpha, omega, rho, p, q, k = state
        rho_next = tree_inner(r_shadow, r)
        beta = rho_next / rho * alpha / omega
        p = add(r, scale(beta, sub(p, scale(omega, q))))
        p_pre = M(p)
        q = A(p_pre)
        alpha = rho_next / tree_inner(r_shadow, q)
        s = sub(r, scale(alpha, q))
        # the half step already meets the tolerance: take it and skip the stabilization
        half_done = tree_real_inner(s, s) < bound
        s_pre = M(s)
        t = A(s_pre)
        omega = tree_inner(t, s) / tree_inner(t, t)
        x = select(half_done, add(x, scale(alpha, p_pre)),
                   add(x, add(scale(alpha, p_pre), scale(omega, s_pre))))
        r = select(half_done, s, sub(s, scale(omega, t)))
        k = jnp.where((omega == 0) | (alpha == 0), -11, k + 1)
        k = jnp.where(rho_next == 0, -10, k)
        return x, r, r_shadow, alpha, omega, rho_next, p, q, k

    init = (x0, r0, r0, one, one, one, r0, r0, 0)
    return lax.while_loop(unfinished, step, init)[0]


def _leaf_shapes(tree) -> list:
    return [np.shape(leaf) for leaf in tree_leaves(tree)]


def _check_x0(x0, b, shapes: bool = True) -> None:
    if tree_structure(x0) != tree_structure(b):
        raise ValueError("x0 and b must have matching tree structure: "
                         f"{tree_structure(x0)} vs {tree_structure(b)}")
    if shapes and _leaf_shapes(x0) != _leaf_shapes(b):
        raise ValueError("arrays in x0 and b must have matching shapes: "
                         f"{_leaf_shapes(x0)} vs {_leaf_shapes(b)}")


def _size(tree) -> int:
    return sum(int(np.size(leaf)) for leaf in tree_leaves(tree))


def _solve_with(iterations, A, b, x0, *, tol, atol, maxiter, M, hermitian: bool):
    """Shared driver of ``cg`` and ``bicgstab``: argument handling, then the iterations as
    the forward and transpose solve of ``lax.custom_linear_solve``."""
    if x0 is None:
        x0 = tree_map(jnp.zeros_like, b)
    b, x0 = device_put((b, x0))
    if maxiter is None:
        maxiter = 10 * _size(b)     # SciPy's default
    A = as_matvec(A)
    M = as_matvec(identity if M is None else M)
    _check_x0(x0, b)
    solve = functools.partial(iterations, x0=x0, tol=tol, atol=atol, maxiter=maxiter, M=M)
    # a Hermitian operator is symmetric when it acts on real vectors
    symmetric = hermitian and not any(jnp.iscomplexobj(leaf) for leaf in tree_leaves(b))
    x = lax.custom_linear_solve(A, b, solve=solve, transpose_solve=solve,
                                symmetric=symmetric)
    return x, None


def cg(A: LinearOperator, b: Any, x0: Any = None, *, tol: float = 1e-5, atol: float = 0.0,
       maxiter: int | None = None, M: LinearOperator = None) -> tuple[Any, None]:
    """Solves ``A x = b`` by conjugate gradients, as ``scipy.sparse.linalg.cg``.

    Args:
      A: the operator, Hermitian positive definite: a square 2-D array, a function
        ``x -> A x`` returning a pytree like its argument, or an object with ``A @ x``.
      b: the right-hand side, an array or pytree of arrays of any shapes.
      x0: the starting guess, like ``b`` (default zeros).
      tol, atol: stop once ``norm(b - A x) <= max(tol * norm(b), atol)`` (SciPy's
        non-legacy rule: pass ``atol`` to SciPy too when comparing).
      maxiter: the most iterations (default ``10 * size(b)``).
      M: a preconditioner approximating ``A``'s inverse, given as ``A`` is.

    Returns:
      ``(x, None)``: the solution, shaped as ``b``, and a placeholder for SciPy's
      convergence information.

    Gradients come from implicit differentiation (another ``cg`` solve through
    ``lax.custom_linear_solve``), accurate when both solves converge.
    """
    return _solve_with(_cg_iterations, A, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M,
                       hermitian=True)


def bicgstab(A: LinearOperator, b: Any, x0: Any = None, *, tol: float = 1e-5,
             atol: float = 0.0, maxiter: int | None = None,
             M: LinearOperator = None) -> tuple[Any, None]:
    """Solves ``A x = b`` by stabilized bi-conjugate gradients, as
    ``scipy.sparse.linalg.bicgstab``.

    Args:
      A: the operator, any nonsingular one: a square 2-D array, a function ``x -> A x``
        returning a pytree like its argument, or an object with ``A @ x``.
      b: the right-hand side, an array or pytree of arrays of any shapes.
      x0: the starting guess, like ``b`` (default zeros).
      tol, atol: stop once ``norm(b - A x) <= max(tol * norm(b), atol)``.
      maxiter: the most iterations (default ``10 * size(b)``); the iteration also stops
        on a breakdown (a vanishing ``rho``, ``alpha`` or ``omega``).
      M: a preconditioner approximating ``A``'s inverse, given as ``A`` is.

    Returns:
      ``(x, None)``: the solution, shaped as ``b``, and a placeholder for SciPy's
      convergence information.

    Gradients come from implicit differentiation (a ``bicgstab`` solve with the transposed
    operator through ``lax.custom_linear_solve``).
    """
    return _solve_with(_bicgstab_iterations, A, b, x0, tol=tol, atol=atol,
                       maxiter=maxiter, M=M, hermitian=False)


def gmres(A: LinearOperator, b: Any, x0: Any = None, *, tol: float = 1e-5,
          atol: float = 0.0, restart: int = 20, maxiter: int | None = None,
          M: LinearOperator = None, solve_method: str = "batched") -> tuple[Any, Any]:
    """Solves ``A x = b`` by restarted GMRES, as ``scipy.sparse.linalg.gmres``.

    Args:
      A: the operator, any nonsingular one: a square 2-D array, a function ``x -> A x``
        returning a pytree like its argument, or an object with ``A @ x``.
      b: the right-hand side, an array or pytree of arrays of any shapes.
      x0: the starting guess, with the structure of ``b`` (default zeros).
      tol, atol: stop once ``norm(b - A x) <= max(tol * norm(b), atol)`` (the norm of
        the preconditioned residual is the one compared).
      restart: the dimension of the Krylov space built before each restart (at most the
        size of ``b``; default 20). Larger spaces converge in fewer restarts at a higher
        cost per restart.
      maxiter: the most restarts (default ``10 * size(b)``).
      M: a preconditioner approximating ``A``'s inverse, given as ``A`` is.
      solve_method: ``'batched'`` (default) builds the whole Krylov space and solves the
        least squares problem once per restart; ``'incremental'`` keeps a QR
        factorization by Givens rotations as the space grows and can stop a restart
        early once the residual is small enough.

    Returns:
      ``(x, info)``: the solution, shaped as ``b``, and ``-1`` when it holds a NaN,
      else ``0``.

    Gradients come from implicit differentiation (a ``gmres`` solve with the transposed
    operator through ``lax.custom_linear_solve``).
    """
    restart_fn = RESTARTS.get(solve_method) if isinstance(solve_method, str) else None
    if restart_fn is None:
        raise ValueError(f"invalid solve_method {solve_method}, must be either "
                         "'incremental' or 'batched'")
    if x0 is None:
        x0 = tree_map(jnp.zeros_like, b)
    A = as_matvec(A)
    M = as_matvec(identity if M is None else M)
    b, x0 = device_put((b, x0))
    size = _size(b)
    if maxiter is None:
        maxiter = 10 * size
    restart = min(restart, size)
    _check_x0(x0, b, shapes=False)

    b_norm = tree_norm(b)
    atol = jnp.maximum(tol * b_norm, atol)
    # within a restart the preconditioned residual is watched, so the bound is rescaled
    ptol = tree_norm(M(b)) * jnp.minimum(1.0, atol / b_norm)

    def solve(matvec, rhs):
        return gmres_solve(matvec, rhs, x0, atol, ptol, restart, maxiter, M, restart_fn)

    x = lax.custom_linear_solve(A, b, solve=solve, transpose_solve=solve)
    info = jnp.where(jnp.isnan(tree_norm(x)), -1, 0)
    return x, info
