"""Exponential, sine/cosine integrals and the dilogarithm for ``kiln.scipy.special``:
``expi``, ``exp1``, ``expn``, ``sici`` and ``spence``.

The algorithms are those of the Cephes library (``ei.c``, ``expn.c``, ``sici.c``,
``spence.c``), which is also what ``jax.scipy.special`` evaluates, so values, the
handling of edge cases (``expi(0)`` is NaN in JAX, not ``-inf``) and derivatives agree with
JAX. Everything is written with ``kiln.lax``/``kiln.numpy`` so it traces under ``jit``,
``vmap`` and ``grad``. Iterative pieces (the ``expn`` series and continued fraction) run
one ``lax.while_loop`` over the whole array in which finished elements are frozen, so each
element takes exactly the iterations a scalar loop would.
"""
from __future__ import annotations

from typing import Union

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.array import Array
from kiln.custom_derivatives import custom_jvp
from kiln.jitting import jit
from kiln.numpy._util import promote_args_inexact
from kiln.scipy.special import _const, _is_complex, _polyval
from kiln.tree_util import tree_map

__all__ = ["exp1", "expi", "expn", "sici", "spence"]

# What the public functions accept (as JAX's ``ArrayLike``).
ArrayLike = Union[Array, np.ndarray, np.generic, bool, int, float, complex]

_EULER = float(np.euler_gamma)


def _iterate(step, done, state, max_iter: int):
    """Apply ``step`` to the pytree ``state`` (arrays of one shape) until ``done(state)``
    holds everywhere or ``max_iter`` rounds ran; finished elements keep their values."""
    def cond(carry):
        i, s = carry
        return (i < max_iter) & jnp.any(~done(s))

    def body(carry):
        i, s = carry
        keep = done(s)
        new = step(s)
        return i + 1, tree_map(lambda old, nw: jnp.where(keep, old, nw), s, new)

    return lax.while_loop(cond, body, (np.int32(0), state))[1]


def _eps(x):
    return _const(x, dtypes.finfo(x.dtype).eps)


def _ratio(p, q, x):
    return _polyval(np.asarray(p, x.dtype), x) / _polyval(np.asarray(q, x.dtype), x)


# ----------------------------------------------------------------------------------------------
# expi: Cephes ei.c, a rational fit on (0, 2] and six on (2, 4], (4, 8], ..., (64, inf).

_EI_SMALL = (
    (-5.350447357812542947283e0, 2.185049168816613393830e2, -4.176572384826693777058e3,
     5.541176756393557601232e4, -3.313381331178144034309e5, 1.592627163384945414220e6),
    (1.0, -5.250547959112862969197e1, 1.259616186786790571525e3, -1.756549581973534652631e4,
     1.493062117002725991967e5, -7.294949239640527645655e5, 1.592627163384945429726e6),
)
# (lower end of the interval, numerator, denominator) in w = 1 / x.
_EI_LARGE = (
    (2.0,
     (1.981808503259689673238e-2, -1.271645625984917501326e0, -2.088160335681228318920e0,
      2.755544509187936721172e0, -4.409507048701600257171e-1, 4.665623805935891391017e-2,
      -1.545042679673485262580e-3, 7.059980605299617478514e-5),
     (1.0, 1.476498670914921440652e0, 5.629177174822436244827e-1, 1.699017897879307263248e-1,
      2.291647179034212017463e-2, 4.450150439728752875043e-3, 1.727439612206521482874e-4,
      3.953167195549672482304e-5)),
    (4.0,
     (-1.373215375871208729803e0, -7.084559133740838761406e-1, 1.580806855547941010501e0,
      -2.601500427425622944234e-1, 2.994674694113713763365e-2, -1.038086040188744005513e-3,
      4.371064420753005429514e-5, 2.141783679522602903795e-6),
     (1.0, 8.585231423622028380768e-1, 4.483285822873995129957e-1, 7.687932158124475434091e-2,
      2.449868241021887685904e-2, 8.832165941927796567926e-4, 4.590952299511353531215e-4,
      -4.729848351866523044863e-6, 2.665195537390710170105e-6)),
    (8.0,
     (-2.106934601691916512584e0, 1.732733869664688041885e0, -2.423619178935841904839e-1,
      2.322724180937565842585e-2, 2.372880440493179832059e-4, -8.343219561192552752335e-5,
      1.363408795605250394881e-5, -3.655412321999253963714e-7, 1.464941733975961318456e-8,
      6.176407863710360207074e-10),
     (1.0, -2.298062239901678075778e-1, 1.105077041474037862347e-1, -1.566542966630792353556e-2,
      2.761106850817352773874e-3, -2.089148012284048449115e-4, 1.708528938807675304186e-5,
      -4.459311796356686423199e-7, 1.394634930353847498145e-8, 6.150865933977338354138e-10)),
    (16.0,
     (-2.458119367674020323359e-1, -1.483382253322077687183e-1, 7.248291795735551591813e-2,
      -1.348315687380940523823e-2, 1.342775069788636972294e-3, -7.942465637159712264564e-5,
      2.644179518984235952241e-6, -4.239473659313765177195e-8),
     (1.0, -1.044225908443871106315e-1, -2.676453128101402655055e-1, 9.695000254621984627876e-2,
      -1.601745692712991078208e-2, 1.496414899205908021882e-3, -8.462452563778485013756e-5,
      2.728938403476726394024e-6, -4.239462431819542051337e-8)),
    (32.0,
     (1.212561118105456670844e-1, -5.823133179043894485122e-1, 2.348887314557016779211e-1,
      -3.040034318113248237280e-2, 1.510082146865190661777e-3, -2.523137095499571377122e-5),
     (1.0, -1.002252150365854016662e0, 2.928709694872224144953e-1, -3.337004338674007801307e-2,
      1.560544881127388842819e-3, -2.523137093603234562648e-5)),
    (64.0,
     (-7.657847078286127362028e-1, 6.886192415566705051750e-1, -2.132598113545206124553e-1,
      3.346107552384193813594e-2, -3.076541477344756050249e-3, 1.747119316454907477380e-4,
      -6.103711682274170530369e-6, 1.218032765428652199087e-7, -1.086076102793290233007e-9),
     (1.0, -1.888802868662308731041e0, 1.066691687211408896850e0, -2.751915982306380647738e-1,
      3.930852688233823569726e-2, -3.414684558602365085394e-3, 1.866844370703555398195e-4,
      -6.345146083130515357861e-6, 1.239754287483206878024e-7, -1.086076102793126632978e-9)),
)


def _expi_positive(x):
    """``Ei(x)`` for ``x > 0`` (finite); other elements get a finite placeholder."""
    one = _const(x, 1.0)
    small = x <= 2
    xs = jnp.where(small & (x > 0), x, one)
    out = xs * _ratio(*_EI_SMALL, xs) + _const(x, _EULER) + lax.log(xs)
    for i, (lo, p, q) in enumerate(_EI_LARGE):
        hi = _EI_LARGE[i + 1][0] if i + 1 < len(_EI_LARGE) else None
        inside = x > lo if hi is None else (x > lo) & (x <= hi)
        xi = jnp.where(inside, x, _const(x, 2 * lo))
        w = one / xi
        val = lax.exp(xi) * w * (w * _ratio(p, q, w) + one)
        out = jnp.where(inside, val, out)
    return out


def _expi_value(x):
    pos = _expi_positive(x)
    neg = -_exp1_value(jnp.where(x < 0, -x, _const(x, 1.0)))
    out = jnp.where(x < 0, neg, pos)
    # JAX (and so kiln) gives NaN at 0 and at both infinities.
    return jnp.where((x == 0) | jnp.isinf(x) | jnp.isnan(x), _const(x, np.nan), out)


# JAX's ``expi`` is a jitted function (and so is its derivative rule): called eagerly it is
# one compiled program, so kiln's is one too, with the compiler's FMA contractions and
# XLA's rewrites, and flushed subnormals (``exp1(87)`` is 0 in float32).
@jit
def _expi_jit(x):
    return _expi_value(x)


@custom_jvp
def _expi(x):
    return _expi_jit(x)


@jit
def _expi_tangent(x, g):
    return lax.exp(x) / x * g


_expi.defjvps(lambda g, ans, x: _expi_tangent(x, g))


def expi(x: ArrayLike) -> Array:
    r"""Exponential integral function.

    JAX implementation of :obj:`scipy.special.expi`.

    .. math::

       \mathrm{expi}(x) = \int_{-\infty}^x \frac{e^t}{t} \mathrm{d}t

    Args:
      x: arraylike, real-valued.

    Returns:
      array of expi values. As in JAX, ``expi(0)`` and ``expi(±inf)`` are NaN.

    See also:
      - :func:`kiln.scipy.special.expn`
      - :func:`kiln.scipy.special.exp1`
    """
    x, = promote_args_inexact("expi", x)
    if _is_complex(x):
        raise ValueError("expi does not support complex-valued inputs.")
    return _expi(x)


# ----------------------------------------------------------------------------------------------
# expn: Cephes expn.c (power series for x <= 1, continued fraction for x > 1, and an
# asymptotic expansion for n >= 5000).

_BIG = 1.44115188075855872e17


def _expn_series(n, x, active):
    one = _const(x, 1.0)
    zero = _const(x, 0.0)
    n = jnp.where(active, n, one)
    x = jnp.where(active, x, _const(x, 0.5))
    z = -x
    # psi(n) = -gamma - log(x) + sum_{i<n} 1/i; the sum is digamma(n) + gamma.
    psi = lax.digamma(n) - lax.log(x)
    n1 = jnp.where(n == one, one + one, n)
    state = dict(xk=jnp.zeros_like(x), yk=jnp.ones_like(x), pk=one - n,
                 ans=jnp.where(n == one, zero, one / (one - n1)),
                 t=jnp.full_like(x, np.inf))
    eps = _eps(x)

    def step(s):
        xk = s["xk"] + one
        yk = s["yk"] * z / xk
        pk = s["pk"] + one
        ans = s["ans"] + jnp.where(pk != zero, yk / pk, zero)
        t = jnp.where(ans != zero, lax.abs(yk / ans), one)
        return dict(xk=xk, yk=yk, pk=pk, ans=ans, t=t)

    def done(s):
        return ~(active & (x > zero) & (s["t"] > eps))

    s = _iterate(step, done, state, 2000)
    return z ** (n - one) * psi / lax.exp(lax.lgamma(n)) - s["ans"]


def _expn_cfrac(n, x, active):
    one = _const(x, 1.0)
    zero = _const(x, 0.0)
    two = _const(x, 2.0)
    big = _const(x, _BIG)
    n = jnp.where(active, n, one)
    x = jnp.where(active, x, two)
    state = dict(k=jnp.ones_like(x), pkm2=jnp.ones_like(x), qkm2=x, pkm1=jnp.ones_like(x),
                 qkm1=x + n, ans=one / (x + n), t=jnp.full_like(x, np.inf),
                 r=jnp.zeros_like(x))
    eps = _eps(x)

    def step(s):
        k = s["k"] + one
        odd = lax.rem(k, two) == one
        yk = jnp.where(odd, one, x)
        xk = jnp.where(odd, n + (k - one) / two, k / two)
        pk = s["pkm1"] * yk + s["pkm2"] * xk
        qk = s["qkm1"] * yk + s["qkm2"] * xk
        nz = qk != zero
        r = jnp.where(nz, pk / qk, s["r"])
        t = jnp.where(nz, lax.abs((s["ans"] - r) / r), one)
        ans = jnp.where(nz, r, s["ans"])
        scale = jnp.where(lax.abs(pk) > big, big, one)
        return dict(k=k, pkm2=s["pkm1"] / scale, qkm2=s["qkm1"] / scale, pkm1=pk / scale,
                    qkm1=qk / scale, ans=ans, t=t, r=r)

    def done(s):
        return ~(active & (x > zero) & (s["t"] > eps))

    s = _iterate(step, done, state, 2000)
    return s["ans"] * lax.exp(-x)


def _expn_large_n(n, x):
    one = _const(x, 1.0)
    xk = x + n
    yk = one / (xk * xk)
    ans = yk * n * (_const(x, 6.0) * x * x - _const(x, 8.0) * n * x + n * n)
    ans = yk * (ans + n * (n - _const(x, 2.0) * x))
    ans = yk * (ans + n)
    return (ans + one) * lax.exp(-x) / xk


def _expn_value(n, x):
    n, x = jnp.broadcast_arrays(n, x)
    zero = _const(x, 0.0)
    one = _const(x, 1.0)
    two = _const(x, 2.0)
    n1 = jnp.where(n == one, n + n, n)
    # JAX's jnp.piecewise order: the last condition that holds wins; 0 is the series.
    conds = [(n < zero) | (x < zero), (x == zero) & (n < two), (x == zero) & (n >= two),
             (n == zero) & (x >= zero), n >= _const(x, 5000.0), x > one]
    which = jnp.zeros(x.shape, np.int32)
    for i, c in enumerate(conds):
        which = jnp.where(c, np.int32(i + 1), which)
    out = _expn_series(n, x, which == 0)
    vals = [jnp.full_like(x, np.nan), jnp.full_like(x, np.inf), one / n1,
            lax.exp(-x) / x, _expn_large_n(n, x), _expn_cfrac(n, x, which == 6)]
    for i, v in enumerate(vals):
        out = jnp.where(which == i + 1, v, out)
    return out


@custom_jvp
def _expn(n, x):
    return _expn_value(jnp.asarray(n), jnp.asarray(x))


_expn.defjvps(None, lambda g, ans, n, x: -g * _expn(n - _const(n, 1.0), x))


def expn(n: ArrayLike, x: ArrayLike) -> Array:
    r"""Generalized exponential integral function.

    JAX implementation of :obj:`scipy.special.expn`.

    .. math::

       \mathrm{expn}(x) = E_n(x) = x^{n-1}\int_x^\infty\frac{e^{-t}}{t^n}\mathrm{d}t

    Args:
      n: arraylike, real-valued (the order; promoted with ``x`` to a float dtype).
      x: arraylike, real-valued.

    Returns:
      array of expn values. The derivative is taken with respect to ``x`` only (the
      derivative in ``n`` is zero, as in JAX).

    See also:
      - :func:`kiln.scipy.special.expi`
      - :func:`kiln.scipy.special.exp1`
    """
    n, x = promote_args_inexact("expn", n, x)
    if _is_complex(x):
        raise ValueError("expn does not support complex-valued inputs.")
    return _expn(n, x)


def _exp1_value(x):
    return _expn_value(jnp.ones_like(x), x)


def exp1(x: ArrayLike) -> Array:
    r"""Exponential integral function.

    JAX implementation of :obj:`scipy.special.exp1`.

    .. math::

       \mathrm{exp1}(x) = E_1(x) = \int_x^\infty\frac{e^{-t}}{t}\mathrm{d}t

    Args:
      x: arraylike, real-valued.

    Returns:
      array of exp1 values (``expn(1, x)``).

    See also:
      - :func:`kiln.scipy.special.expi`
      - :func:`kiln.scipy.special.expn`
    """
    x, = promote_args_inexact("exp1", x)
    if _is_complex(x):
        raise ValueError("exp1 does not support complex-valued inputs.")
    return _expn(jnp.ones_like(x), x)


# ----------------------------------------------------------------------------------------------
# sici: Cephes sici.c (rational series on [0, 4], auxiliary functions f, g beyond).

_SI_SERIES = (
    (-8.39167827910303881427e-11, 4.62591714427012837309e-8, -9.75759303843632795789e-6,
     9.76945438170435310816e-4, -4.13470316229406538752e-2, 1.00000000000000000302e0),
    (2.03269266195951942049e-12, 1.27997891179943299903e-9, 4.41827842801218905784e-7,
     9.96412122043875552487e-5, 1.42085239326149893930e-2, 9.99999999999999996984e-1),
)
_CI_SERIES = (
    (2.02524002389102268789e-11, -1.35249504915790756375e-8, 3.59325051419993077021e-6,
     -4.74007206873407909465e-4, 2.89159652607555242092e-2, -1.00000000000000000080e0),
    (4.07746040061880559506e-12, 3.06780997581887812692e-9, 1.23210355685883423679e-6,
     3.17442024775032769882e-4, 5.10028056236446052392e-2, 4.00000000000000000080e0),
)
# Auxiliary f and g, in z = 1 / x**2, on (4, 8) and [8, inf).
_F4 = (
    (4.23612862892216586994e0, 5.45937717161812843388e0, 1.62083287701538329132e0,
     1.67006611831323023771e-1, 6.81020132472518137426e-3, 1.08936580650328664411e-4,
     5.48900223421373614008e-7),
    (1.0, 8.16496634205391016773e0, 7.30828822505564552187e0, 1.86792257950184183883e0,
     1.78792052963149907262e-1, 7.01710668322789753610e-3, 1.10034357153915731354e-4,
     5.48900252756255700982e-7),
)
_G4 = (
    (8.71001698973114191777e-2, 6.11379109952219284151e-1, 3.97180296392337498885e-1,
     7.48527737628469092119e-2, 5.38868681462177273157e-3, 1.61999794598934024525e-4,
     1.97963874140963632189e-6, 7.82579040744090311069e-9),
    (1.0, 1.64402202413355338886e0, 6.66296701268987968381e-1, 9.88771761277688796203e-2,
     6.22396345441768420760e-3, 1.73221081474177119497e-4, 2.02659182086343991969e-6,
     7.82579218933534490868e-9),
)
_F8 = (
    (4.55880873470465315206e-1, 7.13715274100146711374e-1, 1.60300158222319456320e-1,
     1.16064229408124407915e-2, 3.49556442447859055605e-4, 4.86215430826454749482e-6,
     3.20092790091004902806e-8, 9.41779576128512936592e-11, 9.70507110881952024631e-14),
    (1.0, 9.17463611873684053703e-1, 1.78685545332074536321e-1, 1.22253594771971293032e-2,
     3.58696481881851580297e-4, 4.92435064317881464393e-6, 3.21956939101046018377e-8,
     9.43720590350276732376e-11, 9.70507110881952025725e-14),
)
_G8 = (
    (6.97359953443276214934e-1, 3.30410979305632063225e-1, 3.84878767649974295920e-2,
     1.71718239052347903558e-3, 3.48941165502279436777e-5, 3.47131167084116673800e-7,
     1.70404452782044526189e-9, 3.85945925430276600453e-12, 3.14040098946363334640e-15),
    (1.0, 1.68548898811011640017e0, 4.87852258695304967486e-1, 4.67913194259625806320e-2,
     1.90284426674399523638e-3, 3.68475504442561108162e-5, 3.57043223443740838771e-7,
     1.72693748966316146736e-9, 3.87830166023954706752e-12, 3.14040098946363335242e-15),
)


def _sici_value(x):
    half_pi = _const(x, np.pi / 2)
    zero = _const(x, 0.0)
    ax = lax.abs(x)
    small = ax <= 4
    huge = ax > 1e9
    # [0, 4]: rational series in t = x**2.
    xs = jnp.where(small & (ax > 0), ax, _const(x, 1.0))
    t = xs * xs
    si_s = xs * _ratio(*_SI_SERIES, t)
    ci_s = _const(x, _EULER) + lax.log(xs) + t * _ratio(*_CI_SERIES, t)
    # (4, 1e9]: Si = pi/2 - f cos x - g sin x, Ci = f sin x - g cos x.
    xa = jnp.where(small | huge, _const(x, 5.0), ax)
    z = _const(x, 1.0) / (xa * xa)
    lt8 = xa < 8
    f = jnp.where(lt8, _ratio(*_F4, z), _ratio(*_F8, z)) / xa
    g = z * jnp.where(lt8, _ratio(*_G4, z), _ratio(*_G8, z))
    s, c = lax.sin(xa), lax.cos(xa)
    si_a = half_pi - f * c - g * s
    ci_a = f * s - g * c
    # beyond 1e9: the leading terms.
    xh = jnp.where(huge, ax, _const(x, 2e9))
    si_h = half_pi - lax.cos(xh) / xh
    ci_h = lax.sin(xh) / xh
    si_h = jnp.where(jnp.isinf(ax), half_pi, si_h)
    ci_h = jnp.where(jnp.isinf(ax), zero, ci_h)

    si = jnp.where(small, jnp.where(ax == 0, zero, si_s), jnp.where(huge, si_h, si_a))
    ci = jnp.where(small, jnp.where(ax == 0, _const(x, -np.inf), ci_s),
                   jnp.where(huge, ci_h, ci_a))
    si = jnp.where(jnp.isnan(x), x, si)
    ci = jnp.where(jnp.isnan(x) | (x == -np.inf), _const(x, np.nan), ci)
    return lax.sign(x) * si, ci


@custom_jvp
def _sici(x):
    return _sici_value(jnp.asarray(x))


def _sici_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    x = jnp.asarray(x)
    out = _sici(x)
    return out, (jnp.sinc(x / _const(x, np.pi)) * t, lax.cos(x) / x * t)


_sici.defjvp(_sici_jvp)


def sici(x: ArrayLike) -> tuple[Array, Array]:
    r"""Sine and cosine integrals.

    JAX implementation of :obj:`scipy.special.sici`.

    .. math::

      \mathrm{Si}(x) = \int_0^x \frac{\sin t}{t} \, dt

    .. math::

      \mathrm{Ci}(x) = \gamma + \ln(x) + \int_0^x \frac{\cos t - 1}{t} \, dt

    where :math:`\gamma` is the Euler–Mascheroni constant.

    Args:
      x: array-like, real-valued input.

    Returns:
      A tuple ``(Si(x), Ci(x))`` of arrays shaped like ``x``. For negative ``x``,
      ``Ci(x)`` is ``Ci(|x|)`` (the real part of SciPy's complex value), as in JAX.

    See also:
      - :func:`kiln.numpy.sinc`
    """
    x, = promote_args_inexact("sici", x)
    if _is_complex(x):
        raise ValueError(f"Argument `x` to sici must be real-valued. Got dtype {x.dtype}.")
    return _sici(x)


# ----------------------------------------------------------------------------------------------
# spence: Cephes spence.c (a rational fit after mapping x into [0.5, 1.5]).

_SPENCE = (
    (4.65128586073990045278e-5, 7.31589045238094711071e-3, 1.33847639578309018650e-1,
     8.79691311754530315341e-1, 2.71149851196553469920e0, 4.25697156008121755724e0,
     3.29771340985225106936e0, 1.00000000000000000126e0),
    (6.90990488912553276999e-4, 2.54043763932544379113e-2, 2.82974860602568089943e-1,
     1.41172597751831069617e0, 3.63800533345137075418e0, 5.03278880143316990390e0,
     3.54771340985225096217e0, 9.99999999999999998740e-1),
)


def _spence_value(x):
    one = _const(x, 1.0)
    special = (x < 0) | (x == 0) | (x == 1)
    # A finite stand-in for the special points keeps the gradients of the unused branches
    # finite (JAX's piecewise only differentiates the branch it takes).
    xs = jnp.where(special, _const(x, 0.75), x)
    inv = xs > 2
    xs = jnp.where(inv, one / xs, xs)
    above = xs > 1.5
    below = xs < 0.5
    w = jnp.where(above, one / xs - one, jnp.where(below, -xs, xs - one))
    y = -w * _ratio(*_SPENCE, w)
    xb = jnp.where(below, xs, _const(x, 0.25))
    y = jnp.where(below, _const(x, np.pi ** 2 / 6) - lax.log(xb) * lax.log1p(-xb) - y, y)
    y = jnp.where(inv | above, _const(x, -0.5) * lax.square(lax.log(xs)) - y, y)
    y = jnp.where(x == 0, _const(x, np.pi ** 2 / 6), y)
    y = jnp.where(x == 1, _const(x, 0.0), y)
    return jnp.where(x < 0, _const(x, np.nan), y)


def spence(x: ArrayLike) -> Array:
    r"""Spence's function, also known as the dilogarithm for real values.

    JAX implementation of :obj:`scipy.special.spence`.

    .. math::
      \mathrm{spence}(x) = \int_1^x \frac{\log(t)}{1 - t}dt

    Unlike SciPy, only real ``x >= 0`` is supported; negative ``x`` gives NaN.

    Args:
      x: an array of type ``float32`` or ``float64``.

    Returns:
      An array with ``dtype=x.dtype`` of the values of Spence's function.

    Raises:
      TypeError: if the dtype of ``x`` is not ``float32`` or ``float64``.
    """
    x = jnp.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"x.dtype={x.dtype} is not supported, see docstring for supported "
                        "types.")
    return _spence_value(x)
