"""``kiln.scipy.optimize``: ``minimize`` with BFGS, as ``jax.scipy.optimize``.

The whole optimization is one ``lax.while_loop`` (with the line search and its zoom phase as
nested while loops), so ``minimize`` works under ``jit`` and ``vmap``. The algorithm follows
JAX (and SciPy): BFGS with the inverse-Hessian update, and the strong-Wolfe line search of
Nocedal & Wright (Algorithms 3.5 and 3.6), interpolating with a cubic, else a quadratic, else
bisecting. As in JAX, ``tol`` is accepted and ignored (use ``options={'gtol': ...}``).

Not provided: JAX's experimental ``'l-bfgs-experimental-do-not-rely-on-this'`` method.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.numpy._util import promote_dtypes_inexact
from kiln.transformations import value_and_grad

__all__ = ["OptimizeResults", "minimize"]


class OptimizeResults(NamedTuple):
    """The result of ``minimize``.

    x: the solution; success: whether it converged without a line-search failure;
    status: 0 converged, 1 max iterations, 2 + line-search status when the line search
    failed, -1 otherwise; fun/jac/hess_inv: the objective, gradient and inverse-Hessian
    estimate at ``x``; nfev/njev: evaluations of the objective and of its gradient;
    nit: iterations.
    """
    x: Any
    success: Any
    status: Any
    fun: Any
    jac: Any
    hess_inv: Any
    nfev: Any
    njev: Any
    nit: Any


def minimize(fun: Callable, x0, args: tuple = (), *, method: str = "BFGS",
             tol: float | None = None, options: Mapping[str, Any] | None = None
             ) -> OptimizeResults:
    """Minimize ``fun(x, *args)`` over a 1-D ``x`` from ``x0``.

    ``options`` (for BFGS): ``maxiter`` (default ``200 * x0.size``), ``norm`` (the order of
    the gradient norm tested against ``gtol``, default ``inf``), ``gtol`` (default
    ``1e-5``), ``line_search_maxiter`` (default 10).
    """
    if options is None:
        options = {}
    if not isinstance(args, tuple):
        raise TypeError("args argument to jax.scipy.optimize.minimize must be a tuple, got "
                        f"{args}")

    def fun_with_args(x):
        return fun(x, *args)

    if method.lower() == "bfgs":
        r = _minimize_bfgs(fun_with_args, x0, **options)
        success = r.converged & jnp.logical_not(r.failed)
        return OptimizeResults(x=r.x_k, success=success, status=r.status, fun=r.f_k,
                               jac=r.g_k, hess_inv=r.H_k, nfev=r.nfev, njev=r.ngev, nit=r.k)
    raise ValueError(f"Method {method} not recognized")


# ----------------------------------------------------------------------------------------------
# helpers

def _vector_norm(x, ord=None):
    """``jnp.linalg.norm`` of a vector."""
    a = jnp.abs(x)
    if ord is None or ord == 2:
        return jnp.sqrt(jnp.sum(jnp.real(x * jnp.conj(x))))
    if ord == np.inf:
        return jnp.max(a)
    if ord == -np.inf:
        return jnp.min(a)
    if ord == 0:
        return jnp.sum(a != 0).astype(a.dtype)
    if ord == 1:
        return jnp.sum(a)
    return jnp.sum(a ** ord) ** (1.0 / ord)


def _where_fields(cond, old: dict, new: dict, keys=None) -> dict:
    """The fields of ``new`` (or ``keys`` of it) where ``cond``, else those of ``old``."""
    keys = new.keys() if keys is None else keys
    return {k: jnp.where(cond, new[k], old[k]) for k in keys}


# ----------------------------------------------------------------------------------------------
# line search

def _cubicmin(a, fa, fpa, b, fb, c, fc):
    """The minimizer of the cubic through (a, fa) with slope fpa, (b, fb) and (c, fc)."""
    dtype = dtypes.result_type(a, fa, fpa, b, fb, c, fc)
    C = fpa
    db = b - a
    dc = c - a
    denom = (db * dc) ** 2 * (db - dc)
    d1 = jnp.array([[dc ** 2, -db ** 2], [-dc ** 3, db ** 3]], dtype=dtype)
    d2 = jnp.array([fb - fa - C * db, fc - fa - C * dc], dtype=dtype)
    A, B = jnp.dot(d1, d2) / denom
    radical = B * B - 3. * A * C
    return a + (-B + jnp.sqrt(radical)) / (3. * A)


def _quadmin(a, fa, fpa, b, fb):
    """The minimizer of the quadratic through (a, fa) with slope fpa and (b, fb)."""
    D = fa
    C = fpa
    db = b - a
    B = (fb - D - C * db) / (db ** 2)
    return a - C / (2. * B)


class _ZoomState(NamedTuple):
    done: Any
    failed: Any
    j: Any
    a_lo: Any
    phi_lo: Any
    dphi_lo: Any
    a_hi: Any
    phi_hi: Any
    dphi_hi: Any
    a_rec: Any
    phi_rec: Any
    a_star: Any
    phi_star: Any
    dphi_star: Any
    g_star: Any
    nfev: Any
    ngev: Any


def _zoom(func_and_grad, wolfe_one, wolfe_two, a_lo, phi_lo, dphi_lo, a_hi, phi_hi, dphi_hi,
          g_0, pass_through):
    """Shrink the bracket [a_lo, a_hi] until a step satisfies the strong Wolfe conditions."""
    state = _ZoomState(
        done=False, failed=False, j=0,
        a_lo=a_lo, phi_lo=phi_lo, dphi_lo=dphi_lo,
        a_hi=a_hi, phi_hi=phi_hi, dphi_hi=dphi_hi,
        a_rec=(a_lo + a_hi) / 2., phi_rec=(phi_lo + phi_hi) / 2.,
        a_star=1., phi_star=phi_lo, dphi_star=dphi_lo, g_star=g_0,
        nfev=0, ngev=0)
    delta1 = 0.2
    delta2 = 0.1

    def body(state):
        dalpha = state.a_hi - state.a_lo
        a = jnp.minimum(state.a_hi, state.a_lo)
        b = jnp.maximum(state.a_hi, state.a_lo)
        cchk = delta1 * dalpha
        qchk = delta2 * dalpha
        # A collapsed bracket means the function is too noisy to make progress.
        threshold = jnp.where(dtypes.finfo(dalpha.dtype).bits < 64, 1e-5, 1e-10)
        state = state._replace(failed=state.failed | (dalpha <= threshold))

        a_j_cubic = _cubicmin(state.a_lo, state.phi_lo, state.dphi_lo, state.a_hi,
                              state.phi_hi, state.a_rec, state.phi_rec)
        use_cubic = (state.j > 0) & (a_j_cubic > a + cchk) & (a_j_cubic < b - cchk)
        a_j_quad = _quadmin(state.a_lo, state.phi_lo, state.dphi_lo, state.a_hi, state.phi_hi)
        use_quad = (~use_cubic) & (a_j_quad > a + qchk) & (a_j_quad < b - qchk)
        a_j_bisection = (state.a_lo + state.a_hi) / 2.
        use_bisection = (~use_cubic) & (~use_quad)

        a_j = jnp.where(use_cubic, a_j_cubic, state.a_rec)
        a_j = jnp.where(use_quad, a_j_quad, a_j)
        a_j = jnp.where(use_bisection, a_j_bisection, a_j)

        phi_j, dphi_j, g_j = func_and_grad(a_j)
        phi_j = phi_j.astype(state.phi_lo.dtype)
        dphi_j = dphi_j.astype(state.dphi_lo.dtype)
        g_j = g_j.astype(state.g_star.dtype)
        state = state._replace(nfev=state.nfev + 1, ngev=state.ngev + 1)

        hi_to_j = wolfe_one(a_j, phi_j) | (phi_j >= state.phi_lo)
        star_to_j = wolfe_two(dphi_j) & (~hi_to_j)
        hi_to_lo = (dphi_j * (state.a_hi - state.a_lo) >= 0.) & (~hi_to_j) & (~star_to_j)
        lo_to_j = (~hi_to_j) & (~star_to_j)

        state = state._replace(**_where_fields(hi_to_j, state._asdict(), dict(
            a_hi=a_j, phi_hi=phi_j, dphi_hi=dphi_j, a_rec=state.a_hi, phi_rec=state.phi_hi)))
        state = state._replace(done=star_to_j | state.done, **_where_fields(
            star_to_j, state._asdict(),
            dict(a_star=a_j, phi_star=phi_j, dphi_star=dphi_j, g_star=g_j)))
        state = state._replace(**_where_fields(hi_to_lo, state._asdict(), dict(
            a_hi=state.a_lo, phi_hi=state.phi_lo, dphi_hi=state.dphi_lo,
            a_rec=state.a_hi, phi_rec=state.phi_hi)))
        state = state._replace(**_where_fields(lo_to_j & ~hi_to_lo, state._asdict(), dict(
            a_rec=state.a_lo, phi_rec=state.phi_lo)))
        state = state._replace(**_where_fields(lo_to_j, state._asdict(), dict(
            a_lo=a_j, phi_lo=phi_j, dphi_lo=dphi_j)))
        state = state._replace(j=state.j + 1)
        # Give up after 30 zoom iterations (SciPy uses 10; JAX 30).
        return state._replace(failed=state.failed | (state.j >= 30))

    return lax.while_loop(lambda s: (~s.done) & (~pass_through) & (~s.failed), body, state)


class _LineSearchState(NamedTuple):
    done: Any
    failed: Any
    i: Any
    a_i1: Any
    phi_i1: Any
    dphi_i1: Any
    nfev: Any
    ngev: Any
    a_star: Any
    phi_star: Any
    dphi_star: Any
    g_star: Any


class _LineSearchResults(NamedTuple):
    failed: Any
    nit: Any
    nfev: Any
    ngev: Any
    k: Any
    a_k: Any
    f_k: Any
    g_k: Any
    status: Any


def _line_search(f, xk, pk, old_fval=None, old_old_fval=None, gfk=None, c1=1e-4, c2=0.9,
                 maxiter=20):
    """A step ``a_k`` along ``pk`` from ``xk`` satisfying the strong Wolfe conditions."""
    xk, pk = promote_dtypes_inexact(xk, pk)

    def func_and_grad(t):
        t = jnp.array(t, dtype=pk.dtype)
        phi, g = value_and_grad(f)(xk + t * pk)
        dphi = jnp.real(jnp.dot(g, pk))
        return phi, dphi, g

    if old_fval is None or gfk is None:
        phi_0, dphi_0, gfk = func_and_grad(0)
    else:
        phi_0 = old_fval
        dphi_0 = jnp.real(jnp.dot(gfk, pk))
    if old_old_fval is not None:
        candidate_start_value = 1.01 * 2 * (phi_0 - old_old_fval) / dphi_0
        start_value = jnp.where(candidate_start_value > 1, 1.0, candidate_start_value)
    else:
        start_value = 1

    def wolfe_one(a_i, phi_i):
        # Sufficient decrease (Armijo).
        return phi_i > phi_0 + c1 * a_i * dphi_0

    def wolfe_two(dphi_i):
        # Strong curvature condition.
        return jnp.abs(dphi_i) <= -c2 * dphi_0

    evaluated = 1 if (old_fval is None or gfk is None) else 0
    state = _LineSearchState(
        done=jnp.array(False), failed=jnp.array(False), i=1,
        a_i1=0., phi_i1=phi_0, dphi_i1=dphi_0, nfev=evaluated, ngev=evaluated,
        a_star=0., phi_star=phi_0, dphi_star=dphi_0, g_star=gfk)

    def body(state):
        a_i = jnp.where(state.i == 1, start_value, state.a_i1 * 2.)
        phi_i, dphi_i, g_i = func_and_grad(a_i)
        state = state._replace(nfev=state.nfev + 1, ngev=state.ngev + 1)

        star_to_zoom1 = wolfe_one(a_i, phi_i) | ((phi_i >= state.phi_i1) & (state.i > 1))
        star_to_i = wolfe_two(dphi_i) & (~star_to_zoom1)
        star_to_zoom2 = (dphi_i >= 0.) & (~star_to_zoom1) & (~star_to_i)

        zoom1 = _zoom(func_and_grad, wolfe_one, wolfe_two, state.a_i1, state.phi_i1,
                      state.dphi_i1, a_i, phi_i, dphi_i, gfk, ~star_to_zoom1)
        state = state._replace(nfev=state.nfev + zoom1.nfev, ngev=state.ngev + zoom1.ngev)
        zoom2 = _zoom(func_and_grad, wolfe_one, wolfe_two, a_i, phi_i, dphi_i, state.a_i1,
                      state.phi_i1, state.dphi_i1, gfk, ~star_to_zoom2)
        state = state._replace(nfev=state.nfev + zoom2.nfev, ngev=state.ngev + zoom2.ngev)

        keys = ["a_star", "phi_star", "dphi_star", "g_star"]
        state = state._replace(
            done=star_to_zoom1 | state.done,
            failed=(star_to_zoom1 & zoom1.failed) | state.failed,
            **_where_fields(star_to_zoom1, state._asdict(), zoom1._asdict(), keys))
        state = state._replace(done=star_to_i | state.done, **_where_fields(
            star_to_i, state._asdict(),
            dict(a_star=a_i, phi_star=phi_i, dphi_star=dphi_i, g_star=g_i)))
        state = state._replace(
            done=star_to_zoom2 | state.done,
            failed=(star_to_zoom2 & zoom2.failed) | state.failed,
            **_where_fields(star_to_zoom2, state._asdict(), zoom2._asdict(), keys))
        return state._replace(i=state.i + 1, a_i1=a_i, phi_i1=phi_i, dphi_i1=dphi_i)

    state = lax.while_loop(lambda s: (~s.done) & (s.i <= maxiter) & (~s.failed), body, state)

    status = jnp.where(state.failed, jnp.array(1),
                       jnp.where(state.i > maxiter, jnp.array(3), jnp.array(0)))
    alpha_k = jnp.asarray(state.a_star)
    # Tiny steps stall float32 progress: keep at least 1e-8 (as JAX).
    alpha_k = jnp.where((dtypes.finfo(alpha_k.dtype).bits != 64) & (jnp.abs(alpha_k) < 1e-8),
                        jnp.sign(alpha_k) * 1e-8, alpha_k)
    return _LineSearchResults(failed=state.failed | (~state.done), nit=state.i - 1,
                              nfev=state.nfev, ngev=state.ngev, k=state.i, a_k=alpha_k,
                              f_k=state.phi_star, g_k=state.g_star, status=status)


# ----------------------------------------------------------------------------------------------
# BFGS

class _BFGSResults(NamedTuple):
    converged: Any
    failed: Any
    k: Any
    nfev: Any
    ngev: Any
    nhev: Any
    x_k: Any
    f_k: Any
    g_k: Any
    H_k: Any
    old_old_fval: Any
    status: Any
    line_search_status: Any


def _minimize_bfgs(fun, x0, maxiter: int | None = None, norm=np.inf, gtol: float = 1e-5,
                   line_search_maxiter: int = 10) -> _BFGSResults:
    x0 = jnp.asarray(x0)
    if maxiter is None:
        maxiter = np.size(x0) * 200
    d = x0.shape[0]
    initial_H = jnp.eye(d, dtype=x0.dtype)
    f_0, g_0 = value_and_grad(fun)(x0)
    state = _BFGSResults(
        converged=_vector_norm(g_0, ord=norm) < gtol, failed=False, k=0, nfev=1, ngev=1,
        nhev=0, x_k=x0, f_k=f_0, g_k=g_0, H_k=initial_H,
        old_old_fval=f_0 + _vector_norm(g_0) / 2, status=0, line_search_status=0)

    def cond_fun(state):
        return (jnp.logical_not(state.converged) & jnp.logical_not(state.failed)
                & (state.k < maxiter))

    def body_fun(state):
        p_k = -jnp.dot(state.H_k, state.g_k)
        ls = _line_search(fun, state.x_k, p_k, old_fval=state.f_k,
                          old_old_fval=state.old_old_fval, gfk=state.g_k,
                          maxiter=line_search_maxiter)
        state = state._replace(nfev=state.nfev + ls.nfev, ngev=state.ngev + ls.ngev,
                               failed=ls.failed, line_search_status=ls.status)
        s_k = ls.a_k * p_k
        x_kp1 = state.x_k + s_k
        f_kp1 = ls.f_k
        g_kp1 = ls.g_k
        y_k = g_kp1 - state.g_k
        rho_k = jnp.reciprocal(jnp.dot(y_k, s_k))
        sy_k = s_k[:, None] * y_k[None, :]
        w = jnp.eye(d, dtype=rho_k.dtype) - rho_k * sy_k
        H_kp1 = (jnp.einsum("ij,jk,lk", w, state.H_k, w)
                 + rho_k * s_k[:, None] * s_k[None, :])
        # Skip the update when the curvature y.s vanishes.
        H_kp1 = jnp.where(jnp.isfinite(rho_k), H_kp1, state.H_k)
        converged = _vector_norm(g_kp1, ord=norm) < gtol
        return state._replace(converged=converged, k=state.k + 1, x_k=x_kp1, f_k=f_kp1,
                              g_k=g_kp1, H_k=H_kp1, old_old_fval=state.f_k)

    state = lax.while_loop(cond_fun, body_fun, state)
    status = jnp.where(state.converged, 0,
                       jnp.where(state.k == maxiter, 1,
                                 jnp.where(state.failed, 2 + state.line_search_status, -1)))
    return state._replace(status=status)
