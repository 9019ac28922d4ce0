"""1-D ``convolve``/``correlate`` and the window functions (``bartlett``,
``blackman``, ``hamming``, ``hanning``, ``kaiser``), as ``jax.numpy``.

Semantics and dtypes are JAX's (which sometimes differ from NumPy's). Static arguments
(``axis``, ``N``, ``count``, ...) must be concrete; everything else may be traced.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import get_aval
from kiln.numpy import _util

__all__ = ["convolve", "correlate", "bartlett", "blackman", "hamming", "hanning", "kaiser"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _shape(x):
    return get_aval(x).shape


def _dtype(x):
    return get_aval(x).dtype



# ----------------------------------------------------------------------------------------------
# convolution


def _conv(name, a, v, mode, precision, preferred_element_type):
    jnp = _jnp()
    a, v = _util.ensure_arraylike(name, a, v)
    if get_aval(a).ndim != 1 or get_aval(v).ndim != 1:
        raise ValueError(f"{name}() only support 1-dimensional inputs.")
    if preferred_element_type is None:
        a, v = _util.promote_dtypes_inexact(a, v)
        preferred = None
    else:
        a, v = _util.promote_dtypes(a, v)
        preferred = _util.user_dtype(preferred_element_type, name)
    n, m = _shape(a)[0], _shape(v)[0]
    if n == 0 or m == 0:
        raise ValueError(f"{name}: inputs cannot be empty, got shapes {_shape(a)} and "
                         f"{_shape(v)}.")
    reverse = False
    if name == "correlate":
        v = jnp.conj(v)
        if n < m:
            a, v, n, m = v, a, m, n
            reverse = True
    else:
        if n < m:
            a, v, n, m = v, a, m, n
        v = lax.rev(v, (0,))
    if mode == "valid":
        lo, hi = 0, 0
    elif mode == "same":
        lo, hi = m // 2, m - m // 2 - 1
    elif mode == "full":
        lo, hi = m - 1, m - 1
    else:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    # As JAX: one conv_general_dilated of the (1, 1, n) and (1, 1, m) views, the mode's
    # zero padding done by the convolution.
    out = lax.conv_general_dilated(a[None, None, :], v[None, None, :], (1,), [(lo, hi)],
                                   precision=precision,
                                   preferred_element_type=preferred)[0, 0, :]
    return lax.rev(out, (0,)) if reverse else out


def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """Discrete linear convolution of two 1-D arrays (``mode``: full, same, valid)."""
    return _conv("convolve", a, v, mode, precision, preferred_element_type)


def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    """Cross-correlation of two 1-D arrays (``mode``: valid, same, full)."""
    return _conv("correlate", a, v, mode, precision, preferred_element_type)


# ----------------------------------------------------------------------------------------------
# window functions (default float dtype)


def _window(name, M, fn):
    jnp = _jnp()
    M = _util.core_int(M, f"M argument of jnp.{name}")
    dt = dtypes.default_float_dtype()
    if M <= 1:
        return jnp.ones((max(M, 0),), dt)
    return fn(lax.iota(dt, M), M)


def bartlett(M):
    """The Bartlett (triangular) window."""
    jnp = _jnp()
    return _window("bartlett", M, lambda n, M: 1 - jnp.abs(2 * n + 1 - M) / (M - 1))


def blackman(M):
    """The Blackman window."""
    jnp = _jnp()
    return _window("blackman", M, lambda n, M: 0.42 - 0.5 * jnp.cos(2 * np.pi * n / (M - 1))
                   + 0.08 * jnp.cos(4 * np.pi * n / (M - 1)))


def hamming(M):
    """The Hamming window."""
    jnp = _jnp()
    return _window("hamming", M, lambda n, M: 0.54 - 0.46 * jnp.cos(2 * np.pi * n / (M - 1)))


def hanning(M):
    """The Hann window."""
    jnp = _jnp()
    return _window("hanning", M, lambda n, M: 0.5 * (1 - jnp.cos(2 * np.pi * n / (M - 1))))


def kaiser(M, beta):
    """The Kaiser window with shape parameter ``beta``."""
    jnp = _jnp()

    def fn(n, M):
        alpha = 0.5 * (M - 1)
        return jnp.i0(beta * jnp.sqrt(1 - ((n - alpha) / alpha) ** 2)) / jnp.i0(beta)

    return _window("kaiser", M, fn)

