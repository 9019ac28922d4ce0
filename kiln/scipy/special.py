"""``kiln.scipy.special``: special functions, as ``jax.scipy.special``.

Everything is built from ``kiln.lax`` and ``kiln.numpy`` so it works under ``jit``, ``grad``
and ``vmap``. Integer and boolean inputs are promoted to the default float type (as JAX).
Where JAX attaches a custom derivative (``xlogy`` at ``x == 0``, ``log_ndtr`` in the tails,
``zeta`` in its first argument, ...) we attach the same rule with ``kiln.custom_jvp``.

This module must not import ``kiln.nn`` at import time (``kiln.nn`` imports ``logsumexp``
from here); ``softmax``/``log_softmax`` import it lazily.

The exponential and trigonometric integrals (``expi``, ``exp1``, ``expn``, ``sici``,
``spence``) live in ``_special_expint.py``, ``hyp1f1``/``hyp2f1`` in ``_special_hyper.py`` and
``dawsn``, ``fresnel``, ``wofz``, ``sph_harm_y`` in ``_special_misc.py``; they are re-exported
here. Those modules import helpers from this one, so they are imported at its end. The
complex branches of ``gamma``/``loggamma``/``erfcx`` are in ``_special_complex.py``.

Not provided: the deprecated ``lpmn``/``lpmn_values`` (JAX still resolves them with a
``DeprecationWarning`` but no longer lists them in ``dir(jax.scipy.special)``).
"""
from __future__ import annotations

import operator

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.custom_derivatives import custom_jvp
from kiln.numpy._util import (
    canonicalize_axes,
    concrete_value,
    promote_args_inexact,
    promote_dtypes_inexact,
)
from kiln.transformations import jvp as _jvp

__all__ = [
    "bernoulli", "bessel_jn", "beta", "betainc", "betaln", "boxcox", "boxcox1p", "comb",
    "dawsn", "digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp1", "expi", "expit",
    "expn", "factorial", "fresnel", "gamma", "gammainc", "gammaincc", "gammaln", "gammasgn",
    "hyp1f1", "hyp2f1", "i0", "i0e", "i1", "i1e", "kl_div", "log_ndtr", "log_softmax",
    "loggamma", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri", "owens_t", "poch",
    "polygamma", "rel_entr", "sici", "softmax", "spence", "sph_harm_y", "wofz", "xlog1py",
    "xlogy", "zeta",
]


def _const(x, value):
    """A NumPy constant of ``x``'s dtype (not weak), like JAX's ``_lax_const``."""
    return np.array(value, dtype=dtypes.dtype(x, canonicalize=True))


def _lax_const(x, value):
    """JAX's ``lax._const`` (weak for a weakly typed scalar ``x``), where JAX's function uses
    it rather than a strong constant (``logit``, ``loggamma``)."""
    from kiln.scipy.stats._common import _const as lax_const
    return lax_const(x, value)


def _is_complex(x) -> bool:
    return dtypes.issubdtype(x.dtype, np.complexfloating)


def _no_complex(name, x):
    if _is_complex(x):
        raise ValueError(f"{name} does not support complex-valued inputs.")


def _polyval(coeffs, x):
    """``jnp.polyval(coeffs, x)`` with NumPy coefficients in ``x``'s dtype, highest first, as
    JAX's special functions call it (a jitted Horner's rule from a zero start: its steps are
    fused multiply-adds eagerly too)."""
    return jnp.polyval(np.asarray(coeffs, dtype=dtypes.dtype(x, canonicalize=True)), x)


# ----------------------------------------------------------------------------------------------
# gamma family

def gammaln(x):
    """``log(abs(gamma(x)))``."""
    x, = promote_args_inexact("gammaln", x)
    return lax.lgamma(x)


def gammasgn(x):
    """The sign of the gamma function (NaN at poles and for NaN)."""
    x, = promote_args_inexact("gammasgn", x)
    _no_complex("gammasgn", x)
    one = _const(x, 1.0)
    floor_x = lax.floor(x)
    negative = x < 0
    nan_case = (negative & (x == floor_x)) | jnp.isnan(x)
    neg_case = (negative & (jnp.remainder(floor_x, 2) != 0)) | ((x == 0) & jnp.signbit(x))
    return jnp.where(nan_case, _const(x, np.nan), jnp.where(neg_case, -one, one))


def loggamma(x):
    """Principal branch of ``log(gamma(x))``: NaN for real ``x <= 0``; complex inputs use
    SciPy's branch cut along the negative real axis."""
    x, = promote_args_inexact("loggamma", x)
    if _is_complex(x):
        from kiln.scipy._special_complex import complex_loggamma
        return complex_loggamma(x)
    return jnp.where(x > 0, lax.lgamma(x), _lax_const(x, np.nan))


def gamma(x):
    """The gamma function (real or complex inputs; NaN at the poles)."""
    x, = promote_args_inexact("gamma", x)
    if _is_complex(x):
        from kiln.scipy._special_complex import complex_gamma
        return complex_gamma(x)
    return gammasgn(x) * lax.exp(lax.lgamma(x))


def _algdiv(a, b):
    """``log(gamma(b) / gamma(a + b))`` for large ``b`` (the TOMS 708 series)."""
    c0, c1, c2 = 0.833333333333333e-01, -0.277777777760991e-02, 0.793650666825390e-03
    c3, c4, c5 = -0.595202931351870e-03, 0.837308034031215e-03, -0.165322962780713e-02
    h = a / b
    c = h / (1 + h)
    x = h / (1 + h)
    d = b + (a - 0.5)
    x2 = x * x
    s3 = 1.0 + (x + x2)
    s5 = 1.0 + (x + x2 * s3)
    s7 = 1.0 + (x + x2 * s5)
    s9 = 1.0 + (x + x2 * s7)
    s11 = 1.0 + (x + x2 * s9)
    t = (1.0 / b) ** 2
    w = ((((c5 * s11 * t + c4 * s9) * t + c3 * s7) * t + c2 * s5) * t + c1 * s3) * t + c0
    w = w * (c / b)
    u = d * lax.log1p(a / b)
    v = a * (lax.log(b) - 1.0)
    return jnp.where(u <= v, (w - v) - u, (w - u) - v)


def betaln(a, b):
    """``log(abs(beta(a, b)))``, accurate for large arguments."""
    a, b = promote_args_inexact("betaln", a, b)
    a, b = jnp.minimum(a, b), jnp.maximum(a, b)
    small_b = lax.lgamma(a) + (lax.lgamma(b) - lax.lgamma(a + b))
    large_b = lax.lgamma(a) + _algdiv(a, b)
    return jnp.where(b < 8, small_b, large_b)


def beta(a, b):
    """The beta function ``gamma(a) gamma(b) / gamma(a + b)``."""
    a, b = promote_args_inexact("beta", a, b)
    _no_complex("beta", a)
    sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
    return sign * lax.exp(betaln(a, b))


def factorial(n, exact: bool = False):
    """``n!`` as a float, via the gamma function (0 for negative ``n``)."""
    if exact:
        raise NotImplementedError("factorial with exact=True")
    n, = promote_args_inexact("factorial", n)
    return jnp.where(n < 0, 0, lax.exp(lax.lgamma(n + 1)))


def comb(N, k, *, repetition: bool = False):
    """The binomial coefficient ``N choose k`` as a float (0 outside the support)."""
    N, k = promote_args_inexact("comb", N, k)
    if repetition:
        cond = (k == 0) & (N >= 0)
        return jnp.where(cond, 1.0, comb(N + k - 1, k, repetition=False))
    cond = (k <= N) & (N >= 0) & (k >= 0)
    safe_N = jnp.where(cond, N, 0.0)
    safe_k = jnp.where(cond, k, 0.0)
    result = lax.exp(gammaln(safe_N + 1) - gammaln(safe_k + 1) - gammaln(safe_N + 1 - safe_k))
    return jnp.where(cond, result, 0.0)


def betainc(a, b, x):
    """The regularized incomplete beta function."""
    a, b, x = promote_args_inexact("betainc", a, b, x)
    _no_complex("betainc", x)
    return lax.betainc(a, b, x)


def digamma(x):
    """The digamma function ``d/dx log gamma(x)``."""
    x, = promote_args_inexact("digamma", x)
    return lax.digamma(x)


def polygamma(n, x):
    """The ``n``-th derivative of the digamma function; ``n`` must have an integer dtype."""
    if not dtypes.issubdtype(dtypes.dtype(n), np.integer):
        raise ValueError("Argument `n` to polygamma must be of integer type. "
                         f"Got dtype {dtypes.dtype(n)}.")
    n_arr, x_arr = promote_args_inexact("polygamma", n, x)
    _no_complex("polygamma", x_arr)
    return lax.polygamma(n_arr, x_arr)


def gammainc(a, x):
    """The regularized lower incomplete gamma function."""
    a, x = promote_args_inexact("gammainc", a, x)
    return lax.igamma(a, x)


def gammaincc(a, x):
    """The regularized upper incomplete gamma function."""
    a, x = promote_args_inexact("gammaincc", a, x)
    return lax.igammac(a, x)


def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension ``d`` (a static int)."""
    d = operator.index(concrete_value(d, "d argument of multigammaln"))
    a, d_ = promote_args_inexact("multigammaln", a, d)
    constant = lax.mul(lax.mul(lax.mul(_const(a, 0.25), d_), lax.sub(d_, _const(a, 1))),
                       lax.log(_const(a, np.pi)))
    b = lax.div(jnp.arange(d, dtype=d_.dtype), _const(a, 2))
    res = jnp.sum(gammaln(jnp.expand_dims(a, axis=-1)
                          - jnp.expand_dims(b, axis=tuple(range(a.ndim)))), axis=-1)
    return res + constant


@custom_jvp
def poch(z, m):
    """The Pochhammer symbol ``gamma(z + m) / gamma(z)``."""
    z, m = promote_args_inexact("poch", z, m)
    if _is_complex(z):
        raise ValueError("jnp.poch does not support complex-valued inputs.")
    return jnp.where(m == 0., jnp.array(1, dtype=z.dtype), gamma(z + m) / gamma(z))


poch.defjvps(
    lambda z_dot, ans, z, m: (digamma(z + m) - digamma(z)) * poch(z, m) * z_dot,
    lambda m_dot, ans, z, m: digamma(z + m) * poch(z, m) * m_dot,
)


# ----------------------------------------------------------------------------------------------
# error function family and the normal distribution

def erf(x):
    """The error function."""
    x, = promote_args_inexact("erf", x)
    return lax.erf(x)


def erfc(x):
    """The complementary error function ``1 - erf(x)``."""
    x, = promote_args_inexact("erfc", x)
    return lax.erfc(x)


def erfinv(x):
    """The inverse of the error function."""
    x, = promote_args_inexact("erfinv", x)
    return lax.erf_inv(x)


def _erfcx_asymptotic(x, nterms):
    coeffs = [7918.06640625, -1055.7421875, 162.421875, -29.53125, 6.5625,
              -1.875, .75, -.5, 1.]
    t = _const(x, 1.) / lax.square(x)
    p = _polyval(np.array(coeffs[-nterms:], dtype=x.dtype), t)
    return p / (x * _const(x, np.sqrt(np.pi)))


def _erfcx_impl(x, nterms):
    # exp(x^2) overflows past sqrt(log(max)); the asymptotic series takes over there.
    threshold = np.sqrt(np.log(dtypes.finfo(x.dtype).max))
    large = x > _const(x, threshold)
    safe_x = lax.select(large, lax.full_like(x, 1.), x)
    direct = lax.exp(lax.square(safe_x)) * lax.erfc(safe_x)
    return lax.select(large, _erfcx_asymptotic(x, nterms), direct)


@custom_jvp
def _erfcx(x):
    x = jnp.asarray(x)
    if x.dtype == np.float64:
        return _erfcx_impl(x, nterms=9)
    if x.dtype == np.float32:
        return _erfcx_impl(x, nterms=5)
    return _erfcx_impl(x.astype(np.float32), nterms=5).astype(x.dtype)


_erfcx.defjvps(lambda g, ans, x: g * (2 * x * ans - _const(x, 2. / np.sqrt(np.pi))))


def erfcx(x):
    """The scaled complementary error function ``exp(x**2) * erfc(x)`` (complex inputs
    through Faddeeva's ``wofz``)."""
    x, = promote_args_inexact("erfcx", x)
    if _is_complex(x):
        from kiln.scipy._special_complex import complex_erfcx
        return complex_erfcx(x)
    return _erfcx(x)


def _check_float(x, name="x"):
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name}.dtype={x.dtype} is not supported, see docstring for "
                        "supported types.")


def ndtr(x):
    """The standard normal CDF."""
    x = jnp.asarray(x)
    _check_float(x)
    return _ndtr(x)


def _ndtr(x):
    dt = x.dtype.type
    half_sqrt_2 = dt(0.5) * np.sqrt(2., dtype=dt)
    w = x * half_sqrt_2
    z = lax.abs(w)
    y = lax.select(lax.lt(z, _const(x, half_sqrt_2)),
                   dt(1.) + lax.erf(w),
                   lax.select(lax.gt(w, _const(x, 0.)), dt(2.) - lax.erfc(z), lax.erfc(z)))
    return dt(0.5) * y


# Cephes ndtri: rational approximations on [exp(-2), 1 - exp(-2)] and in the tails.
_NDTRI_P0 = [-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0]
_NDTRI_Q0 = [1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
             -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
             1.59056225126211695515E1, -1.18331621121330003142E0]
_NDTRI_P1 = [4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4]
_NDTRI_Q1 = [1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
             -3.80806407691578277194E-2, -9.33259480895457427372E-4]
_NDTRI_P2 = [3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9]
_NDTRI_Q2 = [1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
             2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
             2.89247864745380683936E-6, 6.79019408009981274425E-9]


def ndtri(p):
    """The inverse of the standard normal CDF."""
    p = jnp.asarray(p)
    _check_float(p)
    return _ndtri(p)


def _ndtri(p):
    # JAX's sequence of operations, each in the same order (``1 / z`` is divided anew for
    # each polynomial): the primal's bits, and the order in which reverse mode sums the
    # cotangents of shared values, are then JAX's.
    dt = p.dtype.type
    shape = p.shape
    maybe_complement_p = jnp.where(p > dt(-np.expm1(-2.)), dt(1.) - p, p)
    # Keep the unused branches finite so their gradients stay NaN-free.
    sanitized_mcp = jnp.where(maybe_complement_p == dt(0.), jnp.full(shape, dt(0.5)),
                              maybe_complement_p)
    # p > exp(-2): x / sqrt(2 pi) = w + w^3 P0(w^2) / Q0(w^2).
    w = sanitized_mcp - dt(0.5)
    ww = lax.square(w)
    x_for_big_p = w + w * ww * (_polyval(_NDTRI_P0, ww) / _polyval(_NDTRI_Q0, ww))
    x_for_big_p = x_for_big_p * -dt(np.sqrt(2. * np.pi))
    # p <= exp(-2): x = z - log(z) / z - P(1/z) / (Q(1/z) z), z = sqrt(-2 log p), with one
    # pair of polynomials below exp(-32) (z >= 8) and another above.
    z = lax.sqrt(dt(-2.) * lax.log(sanitized_mcp))
    first_term = z - lax.log(z) / z
    second_small = _polyval(_NDTRI_P2, 1 / z) / _polyval(_NDTRI_Q2, 1 / z) / z
    second_other = _polyval(_NDTRI_P1, 1 / z) / _polyval(_NDTRI_Q1, 1 / z) / z
    x_for_small_p = first_term - second_small
    x_otherwise = first_term - second_other
    x = jnp.where(sanitized_mcp > dt(np.exp(-2.)), x_for_big_p,
                  jnp.where(z >= dt(8.0), x_for_small_p, x_otherwise))
    x = jnp.where(p > dt(1. - np.exp(-2.)), x, -x)
    infinity = jnp.full(shape, dt(np.inf))
    return jnp.where(p == dt(0.0), -infinity, jnp.where(p == dt(1.0), infinity, x))


# Beyond these, log(ndtr(x)) loses accuracy: the asymptotic series (below) or -ndtr(-x)
# (above) take over, as in JAX.
_LOGNDTR_LOWER = {np.dtype(np.float64): -20.0, np.dtype(np.float32): -10.0}
_LOGNDTR_UPPER = {np.dtype(np.float64): 8.0, np.dtype(np.float32): 5.0}


def _log_ndtr_impl(x, series_order):
    x = jnp.asarray(x)
    if x.dtype not in _LOGNDTR_LOWER:
        raise TypeError(f"x.dtype={x.dtype} is not supported.")
    lower = np.array(_LOGNDTR_LOWER[x.dtype], x.dtype)
    upper = np.array(_LOGNDTR_UPPER[x.dtype], x.dtype)
    above = lax.gt(x, upper)
    ndtr_arg = jnp.where(above, -x, lax.max(x, jnp.broadcast_to(lower, x.shape)))
    ndtr_res = _ndtr(ndtr_arg)
    return jnp.where(above, -ndtr_res,
                     jnp.where(lax.gt(x, lower), lax.log(ndtr_res),
                               _log_ndtr_lower(lax.min(x, jnp.broadcast_to(lower, x.shape)),
                                               series_order)))


def _log_ndtr_lower(x, series_order):
    dt = x.dtype.type
    x_2 = lax.square(x)
    log_scale = -dt(0.5) * x_2 - lax.log(-x) - dt(0.5 * np.log(2. * np.pi))
    return log_scale + lax.log(_log_ndtr_asymptotic_series(x, series_order))


def _double_factorial(n: int):
    return np.prod(np.arange(n, 1, -2))


def _log_ndtr_asymptotic_series(x, series_order):
    dt = x.dtype.type
    if series_order <= 0:
        return np.array(1, dt)
    x_2 = lax.square(x)
    even_sum = jnp.zeros_like(x)
    odd_sum = jnp.zeros_like(x)
    x_2n = x_2
    for n in range(1, series_order + 1):
        y = np.array(_double_factorial(2 * n - 1), dt) / x_2n
        if n % 2:
            odd_sum = odd_sum + y
        else:
            even_sum = even_sum + y
        x_2n = x_2n * x_2
    return dt(1.) + even_sum - odd_sum


def _norm_logpdf(x):
    return lax.sub(lax.mul(_const(x, -0.5), lax.square(x)),
                   _const(x, np.log(np.sqrt(2 * np.pi))))


def _log_ndtr_jvp(series_order, primals, tangents):
    (x,), (t,) = primals, tangents
    x = jnp.asarray(x)
    ans = _log_ndtr(x, series_order)
    return ans, lax.mul(t, lax.exp(lax.sub(_norm_logpdf(x), ans)))


_log_ndtr = custom_jvp(_log_ndtr_impl, nondiff_argnums=(1,))
_log_ndtr.defjvp(_log_ndtr_jvp)


def log_ndtr(x, series_order: int = 3):
    """``log(ndtr(x))``, accurate far into both tails (JAX's series/asymptotic scheme)."""
    if not isinstance(series_order, int):
        raise TypeError("series_order must be a Python integer.")
    if series_order < 0:
        raise ValueError("series_order must be non-negative.")
    if series_order > 30:
        raise ValueError("series_order must be <= 30.")
    x = jnp.asarray(x)
    if x.dtype not in _LOGNDTR_LOWER:
        raise TypeError(f"x.dtype={x.dtype} is not supported.")
    return _log_ndtr(x, series_order)


# ----------------------------------------------------------------------------------------------
# logistic, logs and entropies

def _logit_impl(x):
    x, = promote_args_inexact("logit", x)
    return lax.log(lax.div(x, lax.sub(_lax_const(x, 1), x)))


logit = custom_jvp(_logit_impl)
logit.__name__ = logit.__qualname__ = "logit"  # JAX's name (pytest ids)
logit.defjvps(lambda g, ans, x: lax.div(g, lax.mul(x, lax.sub(_lax_const(x, 1), x))))
logit.__doc__ = "The logit function ``log(x / (1 - x))``."


def expit(x):
    """The logistic sigmoid ``1 / (1 + exp(-x))``."""
    x, = promote_args_inexact("expit", x)
    return lax.logistic(x)


def logsumexp(a, axis=None, b=None, keepdims: bool = False, return_sign: bool = False,
              where=None):
    """``log(sum(b * exp(a)))`` computed stably; optionally the sign of the sum."""
    if where is not None:
        a = jnp.where(where, a, 0)
    if b is not None:
        a_arr, b_arr = promote_args_inexact("logsumexp", a, b)
        a_arr = jnp.where(b_arr != 0, a_arr, -np.inf)
    else:
        a_arr, = promote_args_inexact("logsumexp", a)
        b_arr = a_arr
    dims = tuple(range(a_arr.ndim)) if axis is None else canonicalize_axes(axis, a_arr.ndim)
    amax = jnp.max(jnp.real(a_arr), axis=dims, keepdims=True, where=where, initial=-np.inf)
    amax = lax.stop_gradient(lax.select(jnp.isfinite(amax), amax, lax.full_like(amax, 0)))
    exp_a = lax.exp(lax.sub(a_arr, jnp.broadcast_to(amax.astype(a_arr.dtype), a_arr.shape)))
    if b is not None:
        exp_a = lax.mul(exp_a, b_arr)
    sumexp = jnp.sum(exp_a, axis=dims, keepdims=keepdims, where=where)
    sign = lax.sign(sumexp)
    if return_sign or not _is_complex(a_arr):
        sumexp = jnp.abs(sumexp)
    amax_out = amax if keepdims else jnp.squeeze(amax, axis=dims)
    out = lax.add(lax.log(sumexp), amax_out.astype(sumexp.dtype))
    if return_sign:
        return out, sign
    if b is not None and not _is_complex(out):
        out = jnp.where(sign < 0, jnp.array(np.nan, dtype=out.dtype), out)
    return out


def _xlogy_impl(x, y):
    x, y = promote_args_inexact("xlogy", x, y)
    x_ok = x != 0.
    return jnp.where(x_ok | jnp.isnan(y), lax.mul(x, lax.log(y)), jnp.zeros_like(x))


def _xlogy_jvp(primals, tangents):
    x, y = primals
    x_dot, y_dot = tangents
    result = xlogy(x, y)
    return result, (x_dot * lax.log(y) + y_dot * x / y).astype(result.dtype)


xlogy = custom_jvp(_xlogy_impl)
xlogy.__name__ = xlogy.__qualname__ = "xlogy"  # JAX's name (pytest ids)
xlogy.defjvp(_xlogy_jvp)
xlogy.__doc__ = "``x * log(y)``, defined as 0 where ``x == 0`` (and its gradient there too)."


def _xlog1py_impl(x, y):
    x, y = promote_args_inexact("xlog1py", x, y)
    x_ok = x != 0.
    return jnp.where(x_ok | jnp.isnan(y), lax.mul(x, lax.log1p(y)), jnp.zeros_like(x))


def _xlog1py_jvp(primals, tangents):
    x, y = primals
    x_dot, y_dot = tangents
    result = xlog1py(x, y)
    return result, (x_dot * lax.log1p(y) + y_dot * x / (1 + y)).astype(result.dtype)


xlog1py = custom_jvp(_xlog1py_impl)
xlog1py.__name__ = xlog1py.__qualname__ = "xlog1py"  # JAX's name (pytest ids)
xlog1py.defjvp(_xlog1py_jvp)
xlog1py.__doc__ = "``x * log1p(y)``, defined as 0 where ``x == 0``."


def _xlogx_impl(x):
    return xlogy(x, x)


_xlogx = custom_jvp(_xlogx_impl)
_xlogx.defjvp(lambda primals, tangents: (_xlogx(primals[0]),
                                         tangents[0] * (lax.log(primals[0]) + 1)))


def entr(x):
    """Elementwise entropy ``-x log x`` (0 at 0, ``-inf`` for negative ``x``)."""
    x, = promote_args_inexact("entr", x)
    _no_complex("entr", x)
    return lax.select(lax.lt(x, _const(x, 0)), lax.full_like(x, -np.inf), lax.neg(_xlogx(x)))


def rel_entr(p, q):
    """Elementwise relative entropy ``p log(p / q)``, with SciPy's conventions at 0."""
    p, q = promote_args_inexact("rel_entr", p, q)
    _no_complex("rel_entr", p)
    zero = _const(p, 0.0)
    both_gt_zero = lax.bitwise_and(lax.gt(p, zero), lax.gt(q, zero))
    one_zero = lax.bitwise_and(lax.eq(p, zero), lax.ge(q, zero))
    safe_p = jnp.where(both_gt_zero, p, 1)
    safe_q = jnp.where(both_gt_zero, q, 1)
    log_val = lax.sub(_xlogx(safe_p), xlogy(safe_p, safe_q))
    return jnp.where(both_gt_zero, log_val, jnp.where(one_zero, zero, np.inf))


def kl_div(p, q):
    """Elementwise Kullback-Leibler divergence ``p log(p / q) - p + q``."""
    p, q = promote_args_inexact("kl_div", p, q)
    _no_complex("kl_div", p)
    return rel_entr(p, q) - p + q


def boxcox(x, lmbda):
    """The Box-Cox transform ``(x**lmbda - 1) / lmbda`` (``log x`` at ``lmbda == 0``)."""
    x, lmbda = promote_args_inexact("boxcox", x, lmbda)
    is_zero = lmbda == 0
    safe = jnp.where(is_zero, jnp.ones_like(lmbda), lmbda)
    log_x = jnp.log(x)
    return jnp.where(is_zero, log_x, jnp.expm1(safe * log_x) / safe)


def boxcox1p(x, lmbda):
    """The Box-Cox transform of ``1 + x``."""
    x, lmbda = promote_args_inexact("boxcox1p", x, lmbda)
    is_zero = lmbda == 0
    safe = jnp.where(is_zero, jnp.ones_like(lmbda), lmbda)
    log1p_x = jnp.log1p(x)
    return jnp.where(is_zero, log1p_x, jnp.expm1(safe * log1p_x) / safe)


# ----------------------------------------------------------------------------------------------
# zeta, Bessel functions, Bernoulli numbers

_BERNOULLI_COEFS = np.array([
    12, -720, 30240, -1209600, 47900160, -1307674368000 / 691, 74724249600,
    -10670622842880000 / 3617, 5109094217170944000 / 43867,
    -802857662698291200000 / 174611, 14101100039391805440000 / 77683,
    -1693824136731743669452800000 / 236364091, 186134520519971831808000000 / 657931,
    -37893265687455865519472640000000 / 3392780147,
    759790291646040068357842010112000000 / 1723168255201,
    -134196726836183700385281186201600000000 / 7709321041217,
])


def _zeta_impl(x, q=None):
    if q is None:
        raise NotImplementedError("Riemann zeta function not implemented; pass q != None to "
                                  "compute the Hurwitz Zeta function.")
    x, q = promote_args_inexact("zeta", x, q)
    return lax.zeta(x, q)


def _zeta_series_expansion(x, q=None):
    # Euler-Maclaurin summation, differentiable in both arguments; used for the JVP.
    if q is None:
        raise NotImplementedError("Riemann zeta function not implemented; pass q != None to "
                                  "compute the Hurwitz Zeta function.")
    s, a = promote_args_inexact("zeta", x, q)
    dt = a.dtype.type
    s_, a_ = jnp.expand_dims(s, -1), jnp.expand_dims(a, -1)
    N = M = dt(8) if a.dtype == np.float32 else dt(16)
    k = np.expand_dims(np.arange(N, dtype=a.dtype), tuple(range(a.ndim)))
    S = jnp.sum((a_ + k) ** -s_, -1)
    I = lax.div((a + N) ** (dt(1) - s), s - dt(1))
    T0 = (a + N) ** -s
    m = np.expand_dims(np.arange(2 * M, dtype=a.dtype), tuple(range(s.ndim)))
    s_over_a = (s_ + m) / (a_ + N)
    T1 = jnp.cumprod(s_over_a, -1)[..., ::2]
    T1 = jnp.clip(T1, max=dtypes.finfo(a.dtype).max)
    coefs = np.expand_dims(np.array(_BERNOULLI_COEFS[:T1.shape[-1]], dtype=a.dtype),
                           tuple(range(a.ndim)))
    T1 = T1 / coefs
    T = T0 * (dt(0.5) + T1.sum(-1))
    return S + I + T


zeta = custom_jvp(_zeta_impl)
zeta.__name__ = zeta.__qualname__ = "zeta"  # JAX's name (pytest ids)
zeta.defjvp(lambda primals, tangents: _jvp(_zeta_series_expansion, primals, tangents))
zeta.__doc__ = "The Hurwitz zeta function ``sum_k (k + q) ** -x`` (``q`` is required)."


def i0e(x):
    """Exponentially scaled modified Bessel function of order 0."""
    x, = promote_args_inexact("i0e", x)
    return lax.bessel_i0e(x)


def i0(x):
    """Modified Bessel function of order 0."""
    x, = promote_args_inexact("i0", x)
    return lax.mul(lax.exp(lax.abs(x)), lax.bessel_i0e(x))


def i1e(x):
    """Exponentially scaled modified Bessel function of order 1."""
    x, = promote_args_inexact("i1e", x)
    return lax.bessel_i1e(x)


def i1(x):
    """Modified Bessel function of order 1."""
    x, = promote_args_inexact("i1", x)
    return lax.mul(lax.exp(lax.abs(x)), lax.bessel_i1e(x))


def _bessel_jn_scalar(z, *, v, n_iter):
    # Miller's backward recurrence, normalized by J0 + 2 (J2 + J4 + ...) = 1.
    def body(carry, k):
        f0, f1, bs = carry
        f = 2.0 * (k + 1.0) * f1 / z - f0
        bs = jnp.where(jnp.remainder(k, 2) == 0, bs + 2.0 * f, bs)
        return (f1, f, bs), f

    init = (_const(z, 0.0), _const(z, 1e-16), _const(z, 0.0))
    (_, _, bs), j_vals = lax.scan(body, init, lax.iota(z.dtype, n_iter + 1), reverse=True)
    f = j_vals[0]
    return j_vals[:v + 1] / (bs - f)


def bessel_jn(z, *, v: int, n_iter: int = 50):
    """Bessel functions of the first kind of orders ``0..v``, stacked on a new first axis."""
    z = jnp.asarray(z)
    z, = promote_dtypes_inexact(z)
    if _is_complex(z):
        raise ValueError("complex input not supported.")
    v = operator.index(v)
    n_iter = int(n_iter)
    from kiln.transformations import vmap
    fun = lambda t: _bessel_jn_scalar(t, v=v, n_iter=n_iter)  # noqa: E731
    for _ in range(z.ndim):
        fun = vmap(fun)
    return jnp.moveaxis(fun(z), -1, 0)


def bernoulli(n: int):
    """The Bernoulli numbers ``B_0 .. B_n``."""
    n = operator.index(concrete_value(n, "Argument n of bernoulli"))
    if n < 0:
        raise ValueError("n must be a non-negative integer.")
    b3 = jnp.array([1, -1 / 2, 1 / 6])
    if n < 3:
        return b3[:n + 1]
    bn = jnp.zeros(n + 1).at[:3].set(b3)
    m = jnp.arange(4, n + 1, 2, dtype=bn.dtype)
    q1 = (1. / np.pi ** 2) * jnp.cumprod(-(m - 1) * m / 4 / np.pi ** 2)
    k = jnp.arange(2, 50, dtype=bn.dtype)
    q2 = jnp.sum(k[:, None] ** -m[None, :], axis=0)
    return bn.at[4::2].set(q1 * (1 + q2))


# ----------------------------------------------------------------------------------------------
# Owen's T

_OWENS_T_QUAD_PTS = np.array([
    0.0035082039676451715, 0.031279042338030754, 0.085266826283219451, 0.16245071730812277,
    0.25851196049125435, 0.36807553840697534, 0.48501092905604697, 0.60277514152618577,
    0.71477884217753227, 0.81475510988760099, 0.89711029755948966, 0.95723808085944262,
    0.99178832974629704,
])
_OWENS_T_QUAD_WTS = np.array([
    0.018831438115323503, 0.018567086243977649, 0.018042093461223386, 0.017263829606398753,
    0.016243219975989857, 0.014994592034116705, 0.013535474469662088, 0.011886351605820165,
    0.010070377242777432, 0.0081130545742299587, 0.0060419009528470239, 0.0038862217010742058,
    0.0016793031084546090,
])


def _owens_t_quadrature(h, a):
    pts = np.expand_dims(_OWENS_T_QUAD_PTS, tuple(range(a.ndim)))
    r = jnp.square(a)[..., None] * pts
    integrand = jnp.exp(-0.5 * jnp.square(h)[..., None] * (1. + r)) / (1. + r)
    return a * (integrand @ _OWENS_T_QUAD_WTS.astype(integrand.dtype))


def _owens_t_value(h, a):
    h = jnp.abs(h)
    abs_a = jnp.abs(a)
    root_2 = _const(h, np.sqrt(2))
    h_normed = h / root_2
    modified_a = jnp.where(abs_a <= 1., abs_a, jnp.reciprocal(abs_a))
    modified_h = jnp.where(abs_a <= 1., h, abs_a * h)
    result = _owens_t_quadrature(modified_h, modified_a)
    result = jnp.where(modified_h == 0., jnp.arctan(modified_a) / (2 * np.pi), result)
    result = jnp.where(modified_a == 1.,
                       0.125 * lax.erfc(-modified_h / root_2) * lax.erfc(modified_h / root_2),
                       result)
    normh = lax.erfc(h_normed)
    normah = lax.erfc(abs_a * h_normed)
    result = jnp.where(
        abs_a > 1.,
        jnp.where(abs_a * h <= 0.67,
                  0.25 - 0.25 * lax.erf(h_normed) * lax.erf(abs_a * h_normed) - result,
                  0.25 * (normh + normah - normh * normah) - result),
        result)
    result = lax.sign(a) * result
    return jnp.where(jnp.isnan(a) | jnp.isnan(h), jnp.full_like(result, jnp.nan), result)


def _owens_t_jvp(primals, tangents):
    h, a = primals
    dh, da = tangents
    result = _owens_t_impl(h, a)
    root_2 = _const(h, np.sqrt(2))
    dout_dh = (-lax.exp(-0.5 * lax.square(h)) * lax.erf(a * h / root_2)
               / (2. * _const(h, np.sqrt(2. * np.pi))))
    dout_da = (lax.exp(-0.5 * (lax.square(a) + 1.) * lax.square(h))
               / (2. * np.pi * (lax.square(a) + 1.)))
    return result, (dout_dh * dh + dout_da * da).astype(result.dtype)


_owens_t_impl = custom_jvp(_owens_t_value)
_owens_t_impl.defjvp(_owens_t_jvp)


def owens_t(h, a):
    """Owen's T function ``T(h, a)``."""
    h, a = promote_args_inexact("owens_t", h, a)
    return _owens_t_impl(h, a)


# ----------------------------------------------------------------------------------------------
# softmax (shared with kiln.nn)

def softmax(x, /, *, axis=None):
    """``exp(x) / sum(exp(x))`` over ``axis`` (all axes by default)."""
    from kiln.nn.functions import softmax as nn_softmax
    return nn_softmax(x, axis=axis)


def log_softmax(x, /, *, axis=None):
    """``x - logsumexp(x)`` over ``axis`` (all axes by default)."""
    from kiln.nn.functions import log_softmax as nn_log_softmax
    return nn_log_softmax(x, axis=axis)


# ----------------------------------------------------------------------------------------------
# re-exports (these modules use the helpers above, so they come last)

from kiln.scipy._special_expint import exp1, expi, expn, sici, spence  # noqa: E402
from kiln.scipy._special_hyper import hyp1f1, hyp2f1  # noqa: E402
from kiln.scipy._special_misc import dawsn, fresnel, sph_harm_y, wofz  # noqa: E402
