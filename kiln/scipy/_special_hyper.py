"""Confluent and Gauss hypergeometric functions for ``kiln.scipy.special``: ``hyp1f1`` and
``hyp2f1``.

Both follow Pearson, Olver & Porter, "Numerical methods for the computation of the
confluent and Gauss hypergeometric functions" (2014, arXiv:1407.7786), the scheme
``jax.scipy.special`` uses, including its restricted domain: ``hyp1f1`` sums the Taylor
series for ``|x| < 100`` and the asymptotic series beyond; ``hyp2f1`` covers real ``x <= 1``
with the Taylor series, the terminating polynomial for non-positive integer ``a``/``b``,
Euler's transformation for ``c - a - b <= -1`` and the digamma expansion (AMS 55
15.3.10-12) near ``x = 1`` when ``c - a - b`` is an integer; ``x > 1`` gives ``inf``. So the
values (and the places where they are inaccurate) match JAX's.

The series run as one ``lax.while_loop`` over the whole (broadcast) array in which finished
elements are frozen, so each element sees the terms a scalar loop would. Derivatives are
JAX's: series in the parameters (with digamma weights) and the contiguous-function
identity in ``x``.
"""
from __future__ import annotations

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.custom_derivatives import custom_jvp
from kiln.numpy._util import promote_args_inexact
from kiln.scipy._special_expint import Array, ArrayLike, _iterate
from kiln.scipy.special import _const, _is_complex, gamma

__all__ = ["hyp1f1", "hyp2f1"]

_MAX_TERMS = 250


def _eps(x):
    return _const(x, dtypes.finfo(x.dtype).eps)


def _taylor(first, factor, x, active, weight=None):
    """``sum_{k >= 0} t_k`` (``t_0 = 1``, ``t_1 = first``, ``t_{k+1} = t_k * factor(k)``)
    until ``|t_k| <= eps |sum|`` or 250 terms; with ``weight``, ``sum_{k >= 1} w(k) t_k``
    (the parameter derivatives)."""
    one = _const(x, 1.0)
    eps = _eps(x)
    serie = jnp.zeros_like(x) if weight is not None else jnp.ones_like(x)
    state = dict(serie=serie, k=jnp.ones_like(x), term=first)

    def step(s):
        k, term = s["k"], s["term"]
        add = term if weight is None else term * weight(k)
        return dict(serie=s["serie"] + add, k=k + one, term=term * factor(k))

    def done(s):
        return ~(active & (s["k"] < _MAX_TERMS)
                 & (lax.abs(s["term"]) / lax.abs(s["serie"]) > eps))

    return _iterate(step, done, state, _MAX_TERMS)["serie"]


# ----------------------------------------------------------------------------------------------
# hyp1f1

def _hyp1f1_value(a, b, x):
    a, b, x = jnp.broadcast_arrays(a, b, x)
    one = _const(x, 1.0)
    near = lax.abs(x) < 100
    xs = jnp.where(near, x, _const(x, 0.0))
    series = _taylor(a / b * xs, lambda k: (a + k) / (b + k) * xs / (k + one), xs, near)
    xa = jnp.where(near, _const(x, 200.0), x)
    asym = _taylor((b - a) * (one - a) / xa,
                   lambda k: (b - a + k) * (one - a + k) / (k + one) / xa, xa, ~near)
    asym = gamma(b) / gamma(a) * lax.exp(xa) * xa ** (a - b) * asym
    out = jnp.where(near, series, asym)
    a_nonzero = a != 0
    out = jnp.where((b == 0) & a_nonzero, _const(x, np.inf), out)
    out = jnp.where((a == b) & a_nonzero, lax.exp(x), out)
    return jnp.where(a == 0, one, out)


def _hyp1f1_param_derivative(a, b, x, which):
    a, b, x = jnp.broadcast_arrays(*map(jnp.asarray, (a, b, x)))
    one = _const(x, 1.0)
    if which == "a":
        def weight(k):
            return lax.digamma(a + k) - lax.digamma(a)
    else:
        def weight(k):
            return lax.digamma(b) - lax.digamma(b + k)
    return _taylor(a / b * x, lambda k: (a + k) / (b + k) * x / (k + one), x,
                   jnp.ones(x.shape, bool), weight)


@custom_jvp
def _hyp1f1(a, b, x):
    return _hyp1f1_value(*map(jnp.asarray, (a, b, x)))


_hyp1f1.defjvps(
    lambda g, ans, a, b, x: _hyp1f1_param_derivative(a, b, x, "a") * g,
    lambda g, ans, a, b, x: _hyp1f1_param_derivative(a, b, x, "b") * g,
    lambda g, ans, a, b, x: a / b * _hyp1f1(a + _const(a, 1.0), b + _const(b, 1.0), x) * g,
)


def hyp1f1(a: ArrayLike, b: ArrayLike, x: ArrayLike) -> Array:
    r"""The 1F1 hypergeometric function.

    JAX implementation of :obj:`scipy.special.hyp1f1`.

    .. math::

       \mathrm{hyp1f1}(a, b, x) = {}_1F_1(x;a, b) = \sum_{k=0}^\infty \frac{(a)_k}{(b)_kk!}x^k

    where :math:`(\cdot)_k` is the Pochhammer symbol.

    As in JAX, only real inputs are accepted, and values of ``a``, ``b`` and ``x`` for
    which 1F1 is large may be inaccurate (enable double precision). The convention for
    ``a = b = 0`` is ``1``, unlike SciPy.

    Args:
      a: arraylike, real-valued
      b: arraylike, real-valued
      x: arraylike, real-valued

    Returns:
      array of 1F1 values.
    """
    a, b, x = promote_args_inexact("hyp1f1", a, b, x)
    if _is_complex(x):
        raise ValueError("hyp1f1 does not support complex-valued inputs.")
    return _hyp1f1(a, b, x)


# ----------------------------------------------------------------------------------------------
# hyp2f1

def _round(v):
    return jnp.round(v)  # half to even, as JAX


def _is_nonpos_int(v, tol):
    return (v <= 0) & (lax.abs(v - _round(v)) < tol)


def _hyp2f1_series(a, b, c, x, active):
    one = _const(x, 1.0)
    eps = _eps(x)
    state = dict(serie=jnp.zeros_like(x), k=jnp.ones_like(x), term=jnp.ones_like(x))

    def step(s):
        k, term = s["k"], s["term"]
        factor = (a + k - one) * (b + k - one) / (c + k - one) / k * x
        return dict(serie=s["serie"] + term, k=k + one, term=term * factor)

    def done(s):
        return ~(active & (s["k"] < _MAX_TERMS) & (lax.abs(s["term"]) > eps * lax.abs(s["serie"])))

    return _iterate(step, done, state, _MAX_TERMS)["serie"]


def _hyp2f1_polynomial(a, b, c, x, active):
    """The terminating series when ``a`` or ``b`` is a non-positive integer."""
    one = _const(x, 1.0)
    tol = _eps(x) * 50
    # Use the integer parameter of larger magnitude (unless c hits a pole first).
    c_pole_first = (jnp.remainder(c, one) == 0) & (c <= 0) & (c > b)
    swap = (b < a) & (lax.abs(b - _round(b)) < tol) & ~c_pole_first
    a, b = jnp.where(swap, b, a), jnp.where(swap, a, b)
    a = lax.abs(a)
    stop = jnp.where(active, a + one, one)
    state = dict(serie=jnp.ones_like(x), term=jnp.ones_like(x), i=jnp.ones_like(x))

    def step(s):
        i = s["i"]
        term = s["term"] * (-(a - i + one) / (c + i - one) * (b + i - one) / i * x)
        return dict(serie=s["serie"] + term, term=term, i=i + one)

    return _iterate(step, lambda s: ~(s["i"] < stop), state, 100000)["serie"]


def _hyp2f1_near_one(a, b, c, x, active):
    """The expansion about ``x = 1`` for integer ``c - a - b`` (AMS 55 15.3.10-12)."""
    one = _const(x, 1.0)
    eps = _eps(x)
    x = jnp.where(active, x, _const(x, 0.5))
    d = c - a - b
    s = one - x
    rd = _round(d)
    pos = rd >= 0
    e = jnp.where(pos, d, -d)
    d1 = jnp.where(pos, d, _const(x, 0.0))
    d2 = jnp.where(pos, _const(x, 0.0), d)
    ard = jnp.where(active, jnp.where(pos, rd, -rd), _const(x, 0.0)).astype(np.int32)
    log_s = lax.log(s)
    psi = lax.digamma
    y = (psi(one) + psi(one + e) - psi(a + d1) - psi(b + d1) - log_s) / gamma(e + one)
    p = (a + d1) * (b + d1) * s / gamma(e + _const(x, 2.0))
    state = dict(p=p, q=y, t=jnp.ones_like(x), y=y)

    def step(st):
        t, p = st["t"], st["p"]
        r = psi(one + t) + psi(one + t + e) - psi(a + t + d1) - psi(b + t + d1) - log_s
        q = p * r
        p = p * (s * (a + t + d1) / (t + one))
        p = p * ((b + t + d1) / (t + one + e))
        return dict(p=p, q=q, t=t + one, y=st["y"] + q)

    def done(st):
        return ~(active & (st["t"] < _MAX_TERMS) & (lax.abs(st["q"]) >= eps * lax.abs(st["y"])))

    y = _iterate(step, done, state, _MAX_TERMS)["y"]

    # the finite sum of ard - 1 terms
    fin = dict(p=jnp.ones_like(x), t=jnp.zeros_like(x), y1=jnp.ones_like(x),
               i=jnp.ones(x.shape, np.int32))

    def fin_step(st):
        t = st["t"]
        p = st["p"] * (s * (a + t + d2) * (b + t + d2) / (one - e + t))
        t = t + one
        p = p / t
        return dict(p=p, t=t, y1=st["y1"] + p, i=st["i"] + 1)

    y1 = _iterate(fin_step, lambda st: ~(st["i"] < ard), fin, 100000)["y1"]
    gc = gamma(c)
    y1 = y1 * (gamma(e) * gc / (gamma(a + d1) * gamma(b + d1)))
    yy = y * (gc / (gamma(a + d2) * gamma(b + d2)))
    yy = jnp.where(lax.rem(ard, np.int32(2)) != 0, -yy, yy)
    q = s ** rd
    summed = jnp.where(rd > 0, yy * q + y1, yy + y1 * q)
    return jnp.where(rd == 0, y * gc / (gamma(a) * gamma(b)), summed)


def _hyp2f1_inner(a, b, c, x, active):
    tol = _eps(x) * 50
    d = c - a - b
    terminates = _is_nonpos_int(a, tol) | _is_nonpos_int(b, tol)
    d_is_int = lax.abs(d - _round(d)) < tol
    near_one = (x > 0.9) & ~terminates & d_is_int
    poly = active & terminates
    return jnp.where(
        near_one, _hyp2f1_near_one(a, b, c, x, active & near_one),
        jnp.where(poly, _hyp2f1_polynomial(a, b, c, x, poly),
                  _hyp2f1_series(a, b, c, x, active & ~near_one & ~poly)))


def _hyp2f1_value(a, b, c, x):
    a, b, c, x = jnp.broadcast_arrays(a, b, c, x)
    one = _const(x, 1.0)
    tol = _eps(x) * 50
    d = c - a - b
    s = one - x
    ca, cb = c - a, c - b
    # First match wins, in JAX's order.
    cases = [
        (x == 0) | (((a == 0) | (b == 0)) & (c != 0)),
        (c == 0) | ((c < 0) & (jnp.remainder(c, one) == 0)),
        (d <= -1) & ~((lax.abs(d - _round(d)) >= tol) & (s < 0)),
        (d <= 0) & (x == 1),
        (x < 1) & (b == c),
        (x < 1) & (a == c),
        x > 1,
        x == 1,
    ]
    which = jnp.full(x.shape, len(cases), np.int32)
    for i in reversed(range(len(cases))):
        which = jnp.where(cases[i], np.int32(i), which)
    sx = jnp.where(which == 2, x, _const(x, 0.5))
    euler = s ** d * _hyp2f1_inner(ca, cb, c, sx, which == 2)
    direct = _hyp2f1_inner(a, b, c, jnp.where(which == 8, x, _const(x, 0.5)), which == 8)
    vals = [jnp.ones_like(x), jnp.full_like(x, np.inf), euler, jnp.full_like(x, np.inf),
            s ** (-a), s ** (-b), jnp.full_like(x, np.inf),
            gamma(c) * gamma(d) / (gamma(ca) * gamma(cb)), direct]
    out = vals[-1]
    for i in range(len(vals) - 1):
        out = jnp.where(which == i, vals[i], out)
    return out


def _hyp2f1_param_derivative(a, b, c, x, which):
    a, b, c, x = jnp.broadcast_arrays(*map(jnp.asarray, (a, b, c, x)))
    one = _const(x, 1.0)
    psi = lax.digamma
    weight = {"a": lambda k: psi(a + k) - psi(a),
              "b": lambda k: psi(b + k) - psi(b),
              "c": lambda k: psi(c) - psi(c + k)}[which]
    return _taylor(a * b / c * x, lambda k: (a + k) * (b + k) / (c + k) / (k + one) * x, x,
                   jnp.ones(x.shape, bool), weight)


@custom_jvp
def _hyp2f1(a, b, c, x):
    return _hyp2f1_value(*map(jnp.asarray, (a, b, c, x)))


def _hyp2f1_x_derivative(a, b, c, x):
    one = _const(a, 1.0)
    return a * b / c * _hyp2f1(a + one, b + one, c + one, x)


_hyp2f1.defjvps(
    lambda g, ans, a, b, c, x: _hyp2f1_param_derivative(a, b, c, x, "a") * g,
    lambda g, ans, a, b, c, x: _hyp2f1_param_derivative(a, b, c, x, "b") * g,
    lambda g, ans, a, b, c, x: _hyp2f1_param_derivative(a, b, c, x, "c") * g,
    lambda g, ans, a, b, c, x: _hyp2f1_x_derivative(a, b, c, x) * g,
)


def hyp2f1(a: ArrayLike, b: ArrayLike, c: ArrayLike, x: ArrayLike) -> Array:
    r"""The 2F1 hypergeometric function.

    JAX implementation of :obj:`scipy.special.hyp2f1`.

    .. math::

       \mathrm{hyp2f1}(a, b, c, x) = {}_2F_1(a; b; c; x) =
       \sum_{k=0}^\infty \frac{(a)_k(b)_k}{(c)_k}\frac{x^k}{k!}

    where :math:`(\cdot)_k` is the Pochhammer symbol.

    As in JAX, only real inputs are accepted and ``x > 1`` gives ``inf``; values of
    ``a``, ``b``, ``c`` and ``x`` for which 2F1 is large may be inaccurate (enable double
    precision).

    Args:
      a: arraylike, real-valued
      b: arraylike, real-valued
      c: arraylike, real-valued
      x: arraylike, real-valued

    Returns:
      array of 2F1 values.
    """
    a, b, c, x = promote_args_inexact("hyp2f1", a, b, c, x)
    if _is_complex(x):
        raise TypeError(f"rem does not accept dtype {x.dtype} at position 0. Accepted dtypes "
                        "at position 0 are subtypes of integer, floating.")
    return _hyp2f1(a, b, c, x)
