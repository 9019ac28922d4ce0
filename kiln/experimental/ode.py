"""``kiln.experimental.ode`` (``jax.experimental.ode``): adaptive Dormand-Prince integration.

``odeint(func, y0, t, *args)`` integrates ``dy/dt = func(y, t, *args)`` with the
Dormand-Prince 5(4) embedded Runge-Kutta pair and an adaptive step size, reporting the
solution at the requested times by the method's 4th-order dense-output polynomial. It is
the same algorithm, step for step, as JAX's ``odeint`` (initial step by Hairer, Norsett and
Wanner, Sec. II.4; the step controller and the interpolation fit of the reference
implementation), so the two agree to rounding.

Reverse-mode derivatives use the adjoint method (Chen et al. 2018, "Neural Ordinary
Differential Equations", Appendix C): a ``custom_vjp`` whose backward rule integrates the
augmented system backwards in time between consecutive output times. Gradients flow to
``y0``, ``t``, the extra ``*args`` and to floating-point values that ``func`` closes over
(they are hoisted to explicit arguments first, like ``jax.closure_convert``). Forward-mode
differentiation is not available, as in JAX.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from kiln import dtypes, lax
from kiln import numpy as jnp
from kiln._physical_tree import tree_flatten, tree_leaves, tree_map, tree_unflatten
from kiln.core.trace import Tracer, get_aval
from kiln.custom_derivatives import _closure_convert, custom_vjp
from kiln.jitting import jit
from kiln.transformations import vjp, vmap

__all__ = ["odeint"]


# ----------------------------------------------------------------------------------------------
# Helpers: flattening a pytree state to one vector, and hoisting closed-over values.

def _ravel(tree):
    """One 1-D vector of every leaf of ``tree`` (common dtype) and the function undoing it."""
    leaves, treedef = tree_flatten(tree)
    if not leaves:
        return jnp.zeros((0,), np.float32), lambda flat: tree_unflatten(treedef, [])
    avals = [get_aval(x) for x in leaves]
    target = dtypes.result_type(*[a.dtype for a in avals])
    flat = jnp.concatenate([jnp.ravel(jnp.asarray(x)).astype(target) for x in leaves])
    sizes = [int(np.prod(a.shape, dtype=np.int64)) for a in avals]
    offsets = np.cumsum([0] + sizes)

    def unravel(vec):
        parts = []
        for a, lo, hi in zip(avals, offsets[:-1], offsets[1:]):
            chunk = lax.slice(vec, (int(lo),), (int(hi),)).reshape(a.shape)
            if get_aval(chunk).dtype != a.dtype:
                if (jnp.issubdtype(get_aval(chunk).dtype, jnp.complexfloating)
                        and not jnp.issubdtype(a.dtype, jnp.complexfloating)):
                    chunk = jnp.real(chunk)
                chunk = lax.convert_element_type(chunk, a.dtype)
            parts.append(chunk)
        return tree_unflatten(treedef, parts)

    return flat, unravel


def _ravel_first_arg(func, unravel):
    """``func(y_tree, *rest)`` as a function of the flat state vector, returning a vector."""
    def flat_func(y_flat, *rest):
        return _ravel(func(unravel(y_flat), *rest))[0]
    return flat_func


def _maybe_perturbed(x) -> bool:
    """Whether ``x`` may carry a nonzero tangent (a tracer of an inexact dtype)."""
    if not isinstance(x, Tracer):
        return False
    return bool(jnp.issubdtype(get_aval(x).dtype, jnp.inexact))


# ----------------------------------------------------------------------------------------------
# The Dormand-Prince method.

# Nodes, Runge-Kutta matrix and weights of the Dormand-Prince 5(4) pair.
_DOPRI_C = [1 / 5, 3 / 10, 4 / 5, 8 / 9, 1., 1., 0.]
_DOPRI_A = [
    [1 / 5, 0, 0, 0, 0, 0, 0],
    [3 / 40, 9 / 40, 0, 0, 0, 0, 0],
    [44 / 45, -56 / 15, 32 / 9, 0, 0, 0, 0],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729, 0, 0, 0],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656, 0, 0],
    [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0],
]
_DOPRI_B5 = [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0]
# Weights of the midpoint value used to fit the dense-output polynomial (Shampine 1986).
_DOPRI_MID = [6025192743 / 30085553152 / 2, 0, 51252292925 / 65400821598 / 2,
              -2691868925 / 45128329728 / 2, 187940372067 / 1594534317056 / 2,
              -1776094331 / 19743644256 / 2, 11237099 / 235043384 / 2]
# 5th-order minus embedded 4th-order weights: the local error estimate.
_DOPRI_ERR = [35 / 384 - 1951 / 21600, 0, 500 / 1113 - 22642 / 50085,
              125 / 192 - 451 / 720, -2187 / 6784 - -12231 / 42400, 11 / 84 - 649 / 6300,
              -1. / 60.]


def _dense_output_coeffs(y0, y1, k, dt):
    """Coefficients (highest power first) of the quartic through the step's end points, its
    midpoint and the end-point slopes, in the step's relative time ``s`` in ``[0, 1]``."""
    mid_w = jnp.array(_DOPRI_MID, dtype=get_aval(y0).dtype)
    h = dt.astype(get_aval(y0).dtype)
    y_mid = y0 + h * jnp.dot(mid_w, k)
    dy0, dy1 = k[0], k[-1]
    a = -2. * h * dy0 + 2. * h * dy1 - 8. * y0 - 8. * y1 + 16. * y_mid
    b = 5. * h * dy0 - 3. * h * dy1 + 18. * y0 + 14. * y1 - 32. * y_mid
    c = -4. * h * dy0 + h * dy1 - 11. * y0 - 5. * y1 + 16. * y_mid
    d = h * dy0
    e = y0
    return jnp.asarray((a, b, c, d, e))


def _initial_step_size(fun, t0, y0, order, rtol, atol, f0):
    """Starting step size (Hairer, Norsett & Wanner, Solving ODEs I, Sec. II.4)."""
    y0, f0 = jnp.asarray(y0), jnp.asarray(f0)
    dt_y = dtypes.result_type(get_aval(y0).dtype, get_aval(f0).dtype)
    if not jnp.issubdtype(dt_y, jnp.inexact):
        dt_y = dtypes.result_type(dt_y, float)
    y0, f0 = y0.astype(dt_y), f0.astype(dt_y)
    scale = atol + jnp.abs(y0) * rtol
    d0 = jnp.linalg.norm(y0 / scale.astype(dt_y))
    d1 = jnp.linalg.norm(f0 / scale.astype(dt_y))
    h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
    y1 = y0 + h0.astype(dt_y) * f0
    f1 = fun(y1, t0 + h0)
    d2 = jnp.linalg.norm((f1 - f0) / scale.astype(dt_y)) / h0
    h1 = jnp.where((d1 <= 1e-15) & (d2 <= 1e-15),
                   jnp.maximum(1e-6, h0 * 1e-3),
                   (0.01 / jnp.maximum(d1, d2)) ** (1. / (order + 1.)))
    return jnp.minimum(100. * h0, h1)


def _rk_step(func, y0, f0, t0, dt):
    """One Dormand-Prince step: ``(y1, f1, error_estimate, stages)``."""
    fdt = get_aval(f0).dtype
    nodes = jnp.array(_DOPRI_C, dtype=get_aval(dt).dtype)
    matrix = jnp.array(_DOPRI_A, dtype=fdt)
    b5 = jnp.array(_DOPRI_B5, dtype=fdt)
    b_err = jnp.array(_DOPRI_ERR, dtype=fdt)
    h = dt.astype(fdt)

    def stage(i, k):
        ti = t0 + dt * nodes[i - 1]
        yi = y0 + h * jnp.dot(matrix[i - 1, :], k)
        return k.at[i, :].set(func(yi, ti))

    k = jnp.zeros((7, get_aval(f0).shape[0]), fdt).at[0, :].set(f0)
    k = lax.fori_loop(1, 7, stage, k)
    y1 = h * jnp.dot(b5, k) + y0
    err = h * jnp.dot(b_err, k)
    return y1, k[-1], err, k


def _abs2(x):
    if jnp.iscomplexobj(x):
        return x.real ** 2 + x.imag ** 2
    return x ** 2


def _error_ratio(err, rtol, atol, y0, y1):
    tol = atol + rtol * jnp.maximum(jnp.abs(y0), jnp.abs(y1))
    ratio = err / tol.astype(get_aval(err).dtype)
    return jnp.sqrt(jnp.mean(_abs2(ratio)))


def _next_step_size(last_step, ratio, safety=0.9, ifactor=10.0, dfactor=0.2, order=5.0):
    """Step size proposed after a step of size ``last_step`` with RMS error ratio ``ratio``
    (the step may not shrink when it was accepted)."""
    dfactor = jnp.where(ratio < 1, 1.0, dfactor)
    factor = jnp.minimum(ifactor, jnp.maximum(ratio ** (-1.0 / order) * safety, dfactor))
    return jnp.where(ratio == 0, last_step * ifactor, last_step * factor)


# ----------------------------------------------------------------------------------------------
# odeint

def odeint(func: Callable, y0: Any, t: Any, *args: Any, rtol: float = 1.4e-8,
           atol: float = 1.4e-8, mxstep: float = jnp.inf, hmax: float = jnp.inf) -> Any:
    """Integrate an ODE system with the adaptive Dormand-Prince Runge-Kutta method.

    Solves ``dy/dt = func(y, t, *args)`` from ``y(t[0]) = y0`` and reports ``y`` at every
    time in ``t``. Works under ``jit`` and ``vmap``; reverse-mode derivatives (``grad``,
    ``vjp``) with respect to ``y0``, ``t``, ``args`` and floating-point values closed over by
    ``func`` are computed with the adjoint method.

    Args:
      func: the time derivative, called as ``func(y, t, *args)``; it must return a value
        with the same pytree structure, shapes and dtypes as ``y``.
      y0: the initial state: an array or a pytree of arrays.
      t: 1-D array of floating-point times at which to report the solution; strictly
        increasing, starting at the initial time.
      *args: extra arguments passed to ``func``: arrays, scalars or pytrees of them.
      rtol: relative local error tolerance of the solver.
      atol: absolute local error tolerance of the solver.
      mxstep: the maximum number of steps taken between consecutive output times.
      hmax: the largest step size allowed.

    Returns:
      The solution at each time in ``t``: the structure of ``y0`` with every leaf given a
      new leading axis of length ``len(t)``.
    """
    for arg in tree_leaves(args):
        try:
            dtypes.check_valid_dtype(get_aval(arg).dtype)
        except TypeError:
            raise TypeError("The contents of odeint *args must be arrays or scalars, but got "
                            f"{arg}.") from None
    if not jnp.issubdtype(t.dtype, jnp.floating):
        raise TypeError(f"t must be an array of floats, but got {t}.")
    converted, consts = _closure_convert(func, (y0, t[0], *args), _maybe_perturbed)
    return _odeint_wrapper(converted, rtol, atol, mxstep, hmax, y0, t, *args, *consts)


@partial(jit, static_argnums=(0, 1, 2, 3, 4))
def _odeint_wrapper(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    y0, unravel = _ravel(y0)
    flat_func = _ravel_first_arg(func, unravel)
    out = _odeint(flat_func, rtol, atol, mxstep, hmax, y0, ts, *args)
    return vmap(unravel)(out)


@partial(custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4))
def _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    def f(y, t):
        return func(y, t, *args)

    def advance(carry, target_t):
        def keep_going(state):
            i, _, _, t, dt, _, _ = state
            return (t < target_t) & (i < mxstep) & (dt > 0)

        def attempt(state):
            i, y, fy, t, dt, last_t, coeffs = state
            y_new, f_new, err, k = _rk_step(f, y, fy, t, dt)
            t_new = t + dt
            ratio = _error_ratio(err, rtol, atol, y, y_new)
            coeffs_new = _dense_output_coeffs(y, y_new, k, dt)
            dt = jnp.clip(_next_step_size(dt, ratio), min=0., max=hmax)
            accepted = [i + 1, y_new, f_new, t_new, dt, t, coeffs_new]
            rejected = [i + 1, y, fy, t, dt, last_t, coeffs]
            ok = ratio <= 1.
            return [jnp.where(ok, a, r) for a, r in zip(accepted, rejected)]

        _, *carry = lax.while_loop(keep_going, attempt, [0] + carry)
        _, _, t, _, last_t, coeffs = carry
        s = (target_t - last_t) / (t - last_t)
        y_target = jnp.polyval(coeffs, s.astype(get_aval(coeffs).dtype))
        return carry, y_target

    f0 = f(y0, ts[0])
    dt = jnp.clip(_initial_step_size(f, ts[0], y0, 4, rtol, atol, f0), min=0., max=hmax)
    coeffs = jnp.array([y0] * 5)
    init = [y0, f0, ts[0], dt, ts[0], coeffs]
    _, ys = lax.scan(advance, init, ts[1:])
    return jnp.concatenate((y0[None], ys))


def _odeint_fwd(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    ys = _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args)
    return ys, (ys, ts, args)


def _augmented_dynamics(func):
    """The adjoint system of ``func`` in reversed time ``s = -t``: state ``(y, y_bar,
    t_bar, args_bar)``. One function object per ``func`` (kept on it), so that repeated
    backward passes reuse the traced and compiled adjoint integration."""
    aug = getattr(func, "_kiln_adjoint", None)
    if aug is None:
        def aug(state, minus_t, *args):
            y, y_bar, *_ = state
            y_dot, pullback = vjp(func, y, -minus_t, *args)
            return (-y_dot, *pullback(y_bar))
        func._kiln_adjoint = aug
    return aug


def _odeint_bwd(func, rtol, atol, mxstep, hmax, res, g):
    ys, ts, args = res
    augmented = _augmented_dynamics(func)

    def back_one_interval(carry, i):
        y_bar, t0_bar, args_bar = carry
        # Moving the output time ts[i] changes ys[i] by func(ys[i], ts[i]) per unit time.
        t_bar = jnp.dot(func(ys[i], ts[i], *args), g[i]).real
        t0_bar = t0_bar - t_bar
        _, y_bar, t0_bar, args_bar = odeint(
            augmented, (ys[i], y_bar, t0_bar, args_bar), jnp.array([-ts[i], -ts[i - 1]]),
            *args, rtol=rtol, atol=atol, mxstep=mxstep, hmax=hmax)
        y_bar, t0_bar, args_bar = tree_map(operator.itemgetter(1), (y_bar, t0_bar, args_bar))
        y_bar = y_bar + g[i - 1]
        return (y_bar, t0_bar, args_bar), t_bar

    init = (g[-1], 0., tree_map(jnp.zeros_like, args))
    n = get_aval(ts).shape[0]
    (y_bar, t0_bar, args_bar), rev_ts_bar = lax.scan(
        back_one_interval, init, jnp.arange(n - 1, 0, -1))
    ts_bar = jnp.concatenate([jnp.array([t0_bar]), rev_ts_bar[::-1]])
    return (y_bar, ts_bar, *args_bar)


_odeint.defvjp(_odeint_fwd, _odeint_bwd)
