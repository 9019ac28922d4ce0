"""Complex branches of ``gamma``, ``loggamma`` and ``erfcx`` (as ``jax.scipy.special``).

``loggamma(z)`` is the principal branch with SciPy's single cut along the negative real
axis: points left of ``Re z = 1/2`` are first shifted right by ``n`` unit steps with
``loggamma(z) = loggamma(z + n) - sum_k log(z + k)`` (summing the logs keeps each on its
principal branch, which is what places the cut), then evaluated with the Lanczos
approximation (g = 7, nine terms; the reflection formula covers ``Re z < 1/2`` inside it).
``gamma(z) = exp(loggamma(z))``. Poles (non-positive integers) and NaNs give
``nan + nan j``. ``erfcx(z) = w(i z)`` with Faddeeva's ``w`` (``wofz``).

Built from ``kiln.numpy``/``kiln.lax`` (a ``while_loop`` for the shift), so it works under
``jit``, ``grad`` (holomorphic) and ``vmap``.
"""
from __future__ import annotations

import numpy as np

import kiln.numpy as jnp
from kiln import lax

# Lanczos coefficients for g = 7, n = 9 (the published double-precision set).
_G = 7.0
_COEFFS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028,
           771.32342877765313, -176.61502916214059, 12.507343278686905,
           -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)


def _lanczos_loggamma(z):
    """log Gamma(z) for complex ``z``; the reflection formula for ``Re z < 1/2``."""
    dt = z.dtype
    reflect = jnp.real(z) < 0.5
    w = jnp.where(reflect, 1.0 - z, z) - 1.0
    series = jnp.full_like(w, _COEFFS[0])
    for k, c in enumerate(_COEFFS[1:], start=1):
        series = series + np.array(c, dt) / (w + np.array(k, dt))
    t = w + np.array(_G + 0.5, dt)
    direct = (np.array(0.5 * np.log(2 * np.pi), dt) + (w + np.array(0.5, dt)) * jnp.log(t)
              - t + jnp.log(series))
    # Keep the unused branch finite so that its zero cotangent stays zero (0 * nan = nan).
    z_refl = jnp.where(reflect, z, jnp.full_like(z, 0.5))
    reflected = (np.array(np.log(np.pi), dt) - jnp.log(jnp.sin(np.array(np.pi, dt) * z_refl))
                 - direct)
    return jnp.where(reflect, reflected, direct)


def _poles_or_nan(z):
    re = jnp.real(z)
    pole = (jnp.imag(z) == 0) & (re == jnp.floor(re)) & (re <= 0)
    return pole | jnp.isnan(z)


def complex_loggamma(z):
    """Principal-branch log-gamma of a complex array (SciPy's branch cut)."""
    bad = _poles_or_nan(z)
    zs = jnp.where(bad, jnp.ones_like(z), z)
    n = jnp.maximum(0, jnp.ceil(0.5 - jnp.real(zs))).astype(jnp.int32)

    def cond(state):
        k, _ = state
        return jnp.any(k < n)

    def body(state):
        k, acc = state
        active = k < n
        term = jnp.log(jnp.where(active, zs + k.astype(z.dtype), jnp.ones_like(zs)))
        return k + 1, acc + jnp.where(active, term, jnp.zeros_like(acc))

    _, shift = lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), jnp.zeros_like(zs)))
    out = _lanczos_loggamma(zs + n.astype(z.dtype)) - shift
    return jnp.where(bad, jnp.full_like(z, complex(np.nan, np.nan)), out)


def complex_gamma(z):
    """Gamma of a complex array: ``exp`` of the Lanczos log-gamma (no branch issue)."""
    bad = _poles_or_nan(z)
    zs = jnp.where(bad, jnp.ones_like(z), z)
    return jnp.where(bad, jnp.full_like(z, complex(np.nan, np.nan)),
                     jnp.exp(_lanczos_loggamma(zs)))


def complex_erfcx(z):
    """``exp(z**2) erfc(z)`` for complex ``z``: ``w(i z)``."""
    from kiln.scipy._special_misc import wofz
    return wofz(lax.complex(lax.neg(lax.imag(z)), lax.real(z)))
