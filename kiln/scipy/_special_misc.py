"""Dawson's integral, the Fresnel integrals, the Faddeeva function and spherical harmonics
for ``kiln.scipy.special``: ``dawsn``, ``fresnel``, ``wofz`` and ``sph_harm_y``.

``dawsn`` uses the rational approximations of Cody, Paciorek and Thacher (1970);
``fresnel`` the Cephes ``fresnl`` fits (single-precision coefficients for ``float32``, as
``jnp``); ``wofz`` Weideman's (1994) N=32 rational approximation in the upper half plane
and the reflection ``w(z) = 2 exp(-z**2) - w(-z)`` below; ``sph_harm_y`` the standard
three-term recurrences for the normalized associated Legendre functions. These are the
algorithms ``jax.scipy.special`` uses, so values agree with JAX within float rounding.
``dawsn``, ``fresnel`` and ``wofz`` carry JAX's analytic derivative rules
(``kiln.custom_jvp``); ``sph_harm_y`` is differentiated through its recurrence.
"""
from __future__ import annotations

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.custom_derivatives import custom_jvp
from kiln.numpy._util import (
    check_arraylike,
    concrete_value,
    promote_args_inexact,
    promote_dtypes_complex,
)
from kiln.scipy._special_expint import Array, ArrayLike
from kiln.scipy.special import _const, _is_complex, _polyval

__all__ = ["dawsn", "fresnel", "sph_harm_y", "wofz"]


def _ratio(p, q, x):
    return _polyval(np.asarray(p, x.dtype), x) / _polyval(np.asarray(q, x.dtype), x)


def _low_precision_via_f32(impl, x):
    """Run ``impl`` in float32 for float16/bfloat16 inputs (the fits need the range)."""
    if x.dtype in (np.float32, np.float64):
        return impl(x)
    out = impl(x.astype(np.float32))
    if isinstance(out, tuple):
        return tuple(o.astype(x.dtype) for o in out)
    return out.astype(x.dtype)


# ----------------------------------------------------------------------------------------------
# dawsn

# |x| < 3.25: x P(x**2) / Q(x**2).
_DAWSN_1 = (
    (1.13681498971755972054e-11, 8.49262267667473811108e-10, 1.94434204175553054283e-8,
     9.53151741254484363489e-7, 3.07828309874913200438e-6, 3.52513368520288738649e-4,
     -8.50149846724410912031e-4, 4.22618223005546594270e-2, -9.17480371773452345351e-2,
     9.99999999999999994612e-1),
    (2.40372073066762605484e-11, 1.48864681368493396752e-9, 5.21265281010541664570e-8,
     1.27258478273186970203e-6, 2.32490249820789513991e-5, 3.25524741826057911661e-4,
     3.48805814657162590916e-3, 2.79448531198828973716e-2, 1.58874241960120565368e-1,
     5.74918629489320327824e-1, 1.00000000000000000539e0),
)
# 3.25 <= |x| < 6.25 and |x| >= 6.25: (1 + t P(t) / Q(t)) / (2x) with t = 1 / x**2.
_DAWSN_2 = (
    (5.08955156417900903354e-1, -2.44754418142697847934e-1, 9.41512335303534411857e-2,
     -2.18711255142039025206e-2, 3.66207612329569181322e-3, -4.23209114460388756528e-4,
     3.59641304793896631888e-5, -2.14640351719968974225e-6, 9.10010780076391431042e-8,
     -2.40274520828250956942e-9, 3.59233385440928410398e-11),
    (1.0, -6.31839869873368190192e-1, 2.36706788228248691528e-1, -5.31806367003223277662e-2,
     8.48041718586295374409e-3, -9.47996768486665330168e-4, 7.81025592944552338085e-5,
     -4.55875153252442634831e-6, 1.89100358111421846170e-7, -4.91324691331920606875e-9,
     7.18466403235734541950e-11),
)
_DAWSN_3 = (
    (-5.90592860534773254987e-1, 6.29235242724368800674e-1, -1.72858975380388136411e-1,
     1.64837047825189632310e-2, -4.86827613020462700845e-4),
    (1.0, -2.69820057197544900361e0, 1.73270799045947845857e0, -3.93708582281939493482e-1,
     3.44278924041233391079e-2, -9.73655226040941223894e-4),
)


def _dawsn_impl(x):
    one = _const(x, 1.0)
    half = _const(x, 0.5)
    ax = lax.abs(x)
    r1 = ax < 3.25
    r2 = (ax >= 3.25) & (ax < 6.25)
    a1 = jnp.where(r1, ax, one)
    v1 = a1 * _ratio(*_DAWSN_1, a1 * a1)
    a2 = jnp.where(r2, ax, _const(x, 4.0))
    t2 = one / (a2 * a2)
    v2 = half / a2 * (one + t2 * _ratio(*_DAWSN_2, t2))
    a3 = jnp.where(r1 | r2, _const(x, 8.0), ax)
    t3 = one / (a3 * a3)
    v3 = half / a3 * (one + t3 * _ratio(*_DAWSN_3, t3))
    return lax.sign(x) * jnp.where(r1, v1, jnp.where(r2, v2, v3))


@custom_jvp
def _dawsn(x):
    x = jnp.asarray(x)
    return _low_precision_via_f32(_dawsn_impl, x)


_dawsn.defjvps(lambda g, ans, x: g * (_const(x, 1.0) - _const(x, 2.0) * x * ans))


def dawsn(x: ArrayLike) -> Array:
    r"""Dawson's integral.

    JAX implementation of :obj:`scipy.special.dawsn`.

    .. math::

       \mathrm{dawsn}(x) = e^{-x^2} \int_0^x e^{t^2} \, dt

    Args:
      x: arraylike, real-valued.

    Returns:
      array containing values of Dawson's integral.

    See also:
      - :func:`kiln.scipy.special.erfcx`
    """
    x, = promote_args_inexact("dawsn", x)
    if _is_complex(x):
        raise ValueError("dawsn does not support complex-valued inputs.")
    return _dawsn(x)


# ----------------------------------------------------------------------------------------------
# fresnel

_FRESNEL_F32 = dict(
    sn=(1.647629463788700e-9, -1.522754752581096e-7, 8.424748808502400e-6,
        -3.120693124703272e-4, 7.244727626597022e-3, -9.228055941124598e-2,
        5.235987735681432e-1),
    cn=(1.416802502367354e-8, -1.157231412229871e-6, 5.387223446683264e-5,
        -1.604381798862293e-3, 2.818489036795073e-2, -2.467398198317899e-1,
        9.999999760004487e-1),
    fn=(-1.903009855649792e12, 1.355942388050252e11, -4.158143148511033e9,
        7.343848463587323e7, -8.732356681548485e5, 8.560515466275470e3,
        -1.032877601091159e2, 2.999401847870011e0),
    gn=(-1.860843997624650e11, 1.278350673393208e10, -3.779387713202229e8,
        6.492611570598858e6, -7.787789623358162e4, 8.602931494734327e2,
        -1.493439396592284e1, 9.999841934744914e-1),
)
_FRESNEL_F64 = dict(
    sn=(-2.99181919401019853726e3, 7.08840045257738576863e5, -6.29741486205862506537e7,
        2.54890880573376359104e9, -4.42979518059697779103e10, 3.18016297876567817986e11),
    sd=(1.0, 2.81376268889994315696e2, 4.55847810806532581675e4, 5.17343888770096400730e6,
        4.19320245898111231129e8, 2.24411795645340920940e10, 6.07366389490084639049e11),
    cn=(-4.98843114573573548651e-8, 9.50428062829859605134e-6, -6.45191435683965050962e-4,
        1.88843319396703850064e-2, -2.05525900955013891793e-1, 9.99999999999999998822e-1),
    cd=(3.99982968972495980367e-12, 9.15439215774657478799e-10, 1.25001862479598821474e-7,
        1.22262789024179030997e-5, 8.68029542941784300606e-4, 4.12142090722199792936e-2,
        1.00000000000000000118e0),
    fn=(4.21543555043677546506e-1, 1.43407919780758885261e-1, 1.15220955073585758835e-2,
        3.45017939782574027900e-4, 4.63613749287867322088e-6, 3.05568983790257605827e-8,
        1.02304514164907233465e-10, 1.72010743268161828879e-13, 1.34283276233062758925e-16,
        3.76329711269987889006e-20),
    fd=(1.0, 7.51586398353378947175e-1, 1.16888925859191382142e-1, 6.44051526508858611005e-3,
        1.55934409164153020873e-4, 1.84627567348930545870e-6, 1.12699224763999035261e-8,
        3.60140029589371370404e-11, 5.88754533621578410010e-14, 4.52001434074129701496e-17,
        1.25443237090011264384e-20),
    gn=(5.04442073643383265887e-1, 1.97102833525523411709e-1, 1.87648584092575249293e-2,
        6.84079380915393090172e-4, 1.15138826111884280931e-5, 9.82852443688422223854e-8,
        4.45344415861750144738e-10, 1.08268041139020870318e-12, 1.37555460633261799868e-15,
        8.36354435630677421531e-19, 1.86958710162783235106e-22),
    gd=(1.0, 1.47495759925128324529e0, 3.37748989120019970451e-1, 2.53603741420338795122e-2,
        8.14679107184306179049e-4, 1.27545075667729118702e-5, 1.04314589657571990585e-7,
        4.60680728146520428211e-10, 1.10273215066240270757e-12, 1.38796531259578871258e-15,
        8.39158816283118707363e-19, 1.86958710162783236342e-22),
)


def _sin_cos_half_pi_square(x):
    """``sin(pi x**2 / 2)`` and ``cos(pi x**2 / 2)`` with the argument reduced exactly:
    with ``s = x mod 2``, ``x**2 / 2 = s (x - s / 2) (mod 2)``."""
    x = lax.abs(x)
    two = _const(x, 2.0)
    pi = _const(x, np.pi)
    s = jnp.fmod(x, two)
    r = jnp.fmod(s * (x - s / two), two)
    sin = jnp.where(r < 0.5, lax.sin(pi * r),
                    jnp.where(r > 1.5, lax.sin(pi * (r - two)),
                              -lax.sin(pi * (r - _const(x, 1.0)))))
    cos = jnp.where(r == 0.5, _const(x, 0.0),
                    jnp.where(r < 1.0, -lax.sin(pi * (r - _const(x, 0.5))),
                              lax.sin(pi * (r - _const(x, 1.5)))))
    return sin, cos


def _fresnel_impl(xx):
    single = xx.dtype == np.float32
    one = _const(xx, 1.0)
    half = _const(xx, 0.5)
    pi = _const(xx, np.pi)
    x = lax.abs(xx)
    x2 = x * x
    small = x2 < 2.5625
    large = x > 36974.0
    sinpi, cospi = _sin_cos_half_pi_square(x)

    def poly(c, v):
        return _polyval(np.asarray(c, xx.dtype), v)

    # |x| < 1.6: power series in t = x**4.
    xs = jnp.where(small, x, one)
    t = xs * xs * xs * xs
    if single:
        k = _FRESNEL_F32
        s_small = xs * xs * xs * poly(k["sn"], t)
        c_small = xs * poly(k["cn"], t)
    else:
        k = _FRESNEL_F64
        s_small = xs * xs * xs * poly(k["sn"], t) / poly(k["sd"], t)
        c_small = xs * poly(k["cn"], t) / poly(k["cd"], t)
    # otherwise: auxiliary functions f, g in u = 1 / (pi x**2)**2.
    xo = jnp.where(small, _const(xx, 2.0), x)
    tt = pi * xo * xo
    u = one / (tt * tt)
    tt = one / tt
    if single:
        f = one - u * poly(k["fn"], u)
        g = tt * poly(k["gn"], u)
    else:
        f = one - u * poly(k["fn"], u) / poly(k["fd"], u)
        g = tt * poly(k["gn"], u) / poly(k["gd"], u)
    px = pi * xo
    c_other = half + (f * sinpi - g * cospi) / px
    s_other = half - (f * cospi + g * sinpi) / px
    # |x| > 36974: the leading terms (just 1/2 in single precision).
    if single:
        c_large = s_large = jnp.full_like(x, 0.5)
    else:
        xl = jnp.where(large, x, one)
        c_large = half + sinpi / (pi * xl)
        s_large = half - cospi / (pi * xl)
    inf = jnp.isinf(xx)
    s = jnp.where(inf, half, jnp.where(small, s_small, jnp.where(large, s_large, s_other)))
    c = jnp.where(inf, half, jnp.where(small, c_small, jnp.where(large, c_large, c_other)))
    s = jnp.where(jnp.isnan(xx), xx, s)
    c = jnp.where(jnp.isnan(xx), xx, c)
    neg = xx < 0
    return jnp.where(neg, -s, s), jnp.where(neg, -c, c)


@custom_jvp
def _fresnel(x):
    x = jnp.asarray(x)
    return _low_precision_via_f32(_fresnel_impl, x)


def _fresnel_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    x = jnp.asarray(x)
    out = _fresnel(x)
    sinpi, cospi = _low_precision_via_f32(_sin_cos_half_pi_square, x)
    return out, (sinpi * t, cospi * t)


_fresnel.defjvp(_fresnel_jvp)


def fresnel(x: ArrayLike) -> tuple[Array, Array]:
    r"""The Fresnel integrals.

    JAX implementation of :obj:`scipy.special.fresnel`.

    .. math::
       S(x) = \int_0^x \sin(\pi t^2 /2) dt, \qquad C(x) = \int_0^x \cos(\pi t^2 /2) dt.

    Args:
      x: arraylike, real-valued.

    Returns:
      A tuple ``(S(x), C(x))``. As in JAX, ``float32`` uses Cephes' single-precision fits
      (accurate on about ``[-10, 10]``) and half precision is computed in ``float32``.

    Raises:
      NotImplementedError: for complex inputs.
    """
    x, = promote_args_inexact("fresnel", x)
    if _is_complex(x):
        raise NotImplementedError("Support for complex-valued inputs is not implemented yet.")
    if x.dtype not in (np.float16, np.float32, np.float64, dtypes.bfloat16):
        raise NotImplementedError(f"Support for {x.dtype} dtype is not implemented yet.")
    return _fresnel(x)


# ----------------------------------------------------------------------------------------------
# wofz

_WOFZ_L = 4.7568284600108841
_WOFZ_COEFFS = (
    -1.3034426067909105e-12, 3.7411838373738471e-12, 8.030427700497756e-12,
    -2.1543593557490879e-11, -5.5442449963237932e-11, 1.165824698850374e-10,
    4.1537441121999766e-10, -5.2310202114920615e-10, -3.2080151339721323e-09,
    8.1248864216535907e-10, 2.3797556530014025e-08, 2.2930438438915445e-08,
    -1.4813078929137642e-07, -4.1840763750512053e-07, 4.2558331397138446e-07,
    4.4015317312832251e-06, 6.8210319443575151e-06, -2.1409619201999998e-05,
    -0.00013075449254579421, -0.00024532980270038237, 0.00039259136070109705,
    0.0045195411053493093, 0.019006155784845501, 0.057304403529837282,
    0.14060716226893755, 0.29544451071508743, 0.54601397206393376, 0.9019254893648001,
    1.3455441692345449, 1.8256696296324815, 2.2635372999002676, 2.5722534081245696,
)


def _wofz_upper(z):
    """Weideman's approximation, valid for ``Im(z) >= 0``."""
    ell = _const(z, _WOFZ_L)
    iz = lax.complex(-lax.imag(z), lax.real(z))
    denom = ell - iz
    big_z = (ell + iz) / denom
    p = _polyval(np.asarray(_WOFZ_COEFFS, z.dtype), big_z)
    return _const(z, 2.0) * p / (denom * denom) + _const(z, 1 / np.sqrt(np.pi)) / denom


@custom_jvp
def _wofz(z):
    z = jnp.asarray(z)
    upper = lax.imag(z) >= 0
    zu = jnp.where(upper, z, -z)
    w = _wofz_upper(zu)
    return jnp.where(upper, w, _const(z, 2.0) * lax.exp(-(z * z)) - w)


_wofz.defjvps(lambda g, ans, z: g * (-(_const(z, 2.0) * z * ans)
                                     + _const(z, 2j / np.sqrt(np.pi))))


def wofz(z: ArrayLike) -> Array:
    r"""Faddeeva function.

    JAX implementation of :obj:`scipy.special.wofz`.

    .. math::

       \mathrm{wofz}(z) = e^{-z^2} \mathrm{erfc}(-iz)

    Args:
      z: arraylike, real or complex (real inputs are promoted to complex).

    Returns:
      array of complex values of the Faddeeva function.

    See also:
      - :func:`kiln.scipy.special.erfcx`
    """
    check_arraylike("wofz", z)
    z, = promote_dtypes_complex(z)
    return _wofz(z)


# ----------------------------------------------------------------------------------------------
# sph_harm_y

def _normalized_legendre(n, m, x, n_max: int):
    """The orthonormalized associated Legendre function of degree ``n`` and order ``m``
    (``0 <= m``, elementwise; zero where ``m > n``) at ``x = cos(theta)``, with the
    Condon-Shortley phase, by recurrence in the degree up to ``n_max``."""
    dt = x.dtype
    y = lax.sqrt(_const(x, 1.0) - x * x)
    mf = m.astype(dt)
    diag0 = jnp.full_like(x, 0.5 / np.sqrt(np.pi))

    def body(ell, carry):
        p2, p1, diag, out = carry
        lf = ell.astype(dt)
        # the diagonal P_m^m, built up while ell <= m
        factor = -lax.sqrt(_const(x, 1.0) + _const(x, 0.5) / jnp.maximum(lf, _const(x, 1.0)))
        diag = jnp.where((ell >= 1) & (ell <= m), diag * factor * y, diag)
        l2, m2 = lf * lf, mf * mf
        above = ell > m
        den = jnp.where(above, l2 - m2, _const(x, 1.0))
        d0 = lax.sqrt(jnp.where(above, _const(x, 4.0) * l2 - _const(x, 1.0), den) / den)
        c3 = (lf - _const(x, 1.0)) ** 2 - m2
        d1 = jnp.where(ell >= m + 2,
                       lax.sqrt(jnp.where(ell >= m + 2,
                                          (_const(x, 2.0) * lf + _const(x, 1.0)) * c3
                                          / ((_const(x, 2.0) * lf - _const(x, 3.0)) * den),
                                          _const(x, 0.0))),
                       _const(x, 0.0))
        cur = jnp.where(above, d0 * x * p1 - d1 * p2,
                        jnp.where(ell == m, diag, _const(x, 0.0)))
        out = jnp.where(ell == n, cur, out)
        return p1, cur, diag, out

    zero = jnp.zeros_like(x)
    init = (zero, zero, diag0, zero)
    return lax.fori_loop(0, n_max + 1, body, init)[3]


def sph_harm_y(n: ArrayLike, m: ArrayLike, theta: ArrayLike, phi: ArrayLike,
               diff_n: int | None = None, n_max: int | None = None) -> Array:
    r"""Computes the spherical harmonics.

    JAX implementation of :obj:`scipy.special.sph_harm_y`, with one extra argument
    ``n_max``, the maximum value in ``n``.

    The spherical harmonic of degree ``n`` and order ``m`` is
    :math:`Y_n^m(\theta, \phi) = N_n^m P_n^m(\cos \theta) e^{i m \phi}` with
    :math:`N_n^m = \sqrt{\frac{(2n+1) (n-m)!}{4 \pi (n+m)!}}`, where :math:`\theta` is the
    colatitude and :math:`\phi` the longitude.

    Args:
      n: integer array, the degree; ``n >= 0``.
      m: integer array, the order; ``|m| <= n`` (zero is returned for ``|m| > n``).
      theta: the polar (colatitudinal) coordinate, in ``[0, pi]``.
      phi: the azimuthal (longitudinal) coordinate, in ``[0, 2 pi]``.
      diff_n: unsupported (``NotImplementedError`` unless None).
      n_max: the maximum degree ``max(n)``; it must be given when ``n`` is traced (under
        ``jit``). Degrees and orders above it are clipped to it, as in JAX.

    Returns:
      A complex array of the spherical harmonics, of the broadcast shape of the arguments.
      (JAX requires a 1-D ``n`` and indexes ``theta`` by position in ``n``; kiln broadcasts
      all four arguments, which gives the same result whenever JAX's call is valid.)
    """
    if diff_n is not None:
        raise NotImplementedError(
            "The 'diff_n' argument to jax.scipy.special.sph_harm_y is not supported.")
    n = jnp.asarray(n)
    m = jnp.asarray(m)
    for name, v in (("n", n), ("m", m)):
        if not dtypes.issubdtype(v.dtype, np.integer):
            raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                            f"{v.dtype} (argument {name} of sph_harm_y).")
    if n_max is None:
        n_max = np.max(concrete_value(n, "The `n_max` argument of `sph_harm_y` must be "
                                         "statically specified to use `sph_harm_y` within "
                                         "kiln transformations."))
    n_max = int(n_max)
    theta, phi = promote_args_inexact("sph_harm_y", theta, phi)
    n, m, theta, phi = jnp.broadcast_arrays(n, m, theta, phi)
    abs_m = lax.abs(m)
    legendre = _normalized_legendre(jnp.clip(n, 0, n_max), jnp.clip(abs_m, 0, n_max),
                                    lax.cos(theta), n_max)
    angle = abs_m.astype(phi.dtype) * phi
    harmonic = lax.complex(legendre * lax.cos(angle), legendre * lax.sin(angle))
    sign = jnp.where(lax.rem(abs_m, 2) == 1, _const(legendre, -1.0), _const(legendre, 1.0))
    return jnp.where(m < 0, lax.complex(sign, jnp.zeros_like(sign)) * lax.conj(harmonic),
                     harmonic)
