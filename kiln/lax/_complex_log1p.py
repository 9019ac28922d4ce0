"""``log1p`` of complex arrays, accurate near zero as XLA's is (NumPy's is not).

NumPy computes ``log(1 + z)`` for complex ``z``, so ``log1p(1e-5 + 0j)`` in complex64 comes
out as ``1.0014e-05`` (the rounding of ``1 + z`` is all that is left). JAX's (XLA's) result
is correctly rounded there. This module follows the same mathematics as XLA's expansion:

* the imaginary part is ``atan2(y, 1 + x)``;
* the real part is ``log|1 + z| = 0.5 * log1p(2x + x² + y²)``, with the argument of
  ``log1p`` summed in extended precision: each square split exactly into a high and a low
  part (Veltkamp splitting, Dekker's product) and the terms added with error-free
  two-sums, so ``2x + x² + y²`` is exact to a couple of units in its last place even when
  it cancels (``x`` near ``-y²/2``);
* near ``z = -1`` (``|1 + x| + |y| < 0.2``) the real part is ``0.5 * log((1+x)² + y²)``;
* for huge ``|z|`` (past the square root of the type's largest value, divided by a margin)
  it is ``log(m) + 0.5 * log1p((n/m)²)`` with ``m``, ``n`` the larger and smaller of
  ``|x|``, ``|y|``, so nothing overflows.

The real-valued ``log``, ``log1p`` and ``atan2`` are kiln's (XLA's float32/float64
formulas). ``log1p_p``'s impl runs this only without the native library: the native kernel
(``kc_clog1p`` in ``kiln/compiler/csrc/xla_complex.h``) computes the same expansion with
XLA's FMA contractions and flushing, JAX's bits. What it must not hold: the primitive
(``elementwise.log1p_p``).
"""
from __future__ import annotations

import numpy as np

# Veltkamp's splitting constants (2**ceil(p/2) + 1 for p mantissa bits), and the size
# past which the squares would overflow: the largest value's square root over 100.
_SPLIT = {np.dtype(np.float32): 4097.0, np.dtype(np.float64): 134217729.0}
_HUGE = {np.dtype(np.float32): 1.8446742e17, np.dtype(np.float64): 1.3407807929942595e152}


def _two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``a + b = s + e`` exactly."""
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


def _square(a, split):
    """``(h, l)`` with ``h = fl(a * a)`` and ``a * a = h + l`` exactly (Dekker)."""
    h = a * a
    t = split * a
    ah = t + (a - t)
    al = a - ah
    m = ah * al
    return h, (((-h + ah * ah) + m) + m) + al * al


def complex_log1p(z: np.ndarray) -> np.ndarray:
    """``log(1 + z)`` of a complex64/complex128 array, elementwise."""
    from kiln.lax.arith import log_p
    from kiln.lax.elementwise import atan2_p, log1p_p
    from kiln.lax.linalg import _flush_denormals
    z = np.asarray(z)
    y_raw = z.imag          # atan2 reads its operands' bits: a subnormal y is kept
    z = _flush_denormals(z)  # the rest is XLA's arithmetic on flushed parts (DAZ)
    ft = np.dtype(np.float32 if z.dtype == np.complex64 else np.float64)
    with np.errstate(all="ignore"):
        x = np.ascontiguousarray(z.real, ft)
        y = np.ascontiguousarray(z.imag, ft)
        half, one = ft.type(0.5), ft.type(1.0)
        ax, ay = np.abs(x), np.abs(y)
        mx, mn = np.maximum(ax, ay), np.minimum(ax, ay)
        xp1 = x + one
        split = ft.type(_SPLIT[ft])
        # 2x + x^2 + y^2, compensated: high parts summed with two-sums, the low parts of
        # the squares and of each sum added at the end.
        y2h, y2l = _square(y, split)
        x2h, x2l = _square(x, split)
        s1, e1 = _two_sum(x + x, y2h)
        s2, e2 = _two_sum(s1, x2h)
        s3, e3 = _two_sum(s2, y2l)
        s4, e4 = _two_sum(s3, x2l)
        s = s4 + (((e1 + e2) + e3) + e4)
        regular = half * log1p_p.impl(s)
        near_minus_one = half * log_p.impl(xp1 * xp1 + y2h)
        ratio = np.where(mn == mx, one, (mn / mx) * (mn / mx)).astype(ft)
        huge = log_p.impl(mx) + half * log1p_p.impl(ratio)
        real = np.where(mx > ft.type(_HUGE[ft]), huge,
                        np.where(np.abs(xp1) + ay < ft.type(0.2), near_minus_one, regular))
        real = _flush_denormals(np.ascontiguousarray(real, ft))     # FTZ
        imag = atan2_p.impl(np.ascontiguousarray(y_raw, ft), xp1)
    out = np.empty(z.shape, z.dtype)
    out.real = real
    out.imag = imag
    return out
