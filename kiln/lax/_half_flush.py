"""float16/bfloat16 ``+ - * /``, ``max``/``min``, comparisons, ``integer_pow`` and the
bfloat16 roots with XLA's CPU bits at subnormals and signed zeros.

What XLA's CPU backend does (read off ``jax.jit(f).lower(...).compile().as_text()`` and
checked against JAX 0.10.2 over all 2**16 values of each type):

- bfloat16: every op is wrapped in converts: the operands are widened to float32 (exact:
  a bfloat16 subnormal becomes a float32 subnormal), the op runs in float32 under the
  runtime's DAZ/FTZ (a subnormal operand reads as a zero of its sign, a subnormal result
  becomes one), and the result is rounded back. So ``x * x`` of a subnormal ``x`` is 0,
  ``sub > 0`` is false, ``sqrt(-sub)`` is ``-0``, and a float32 product just below the
  smallest normal is 0 (not rounded up to it, as rounding the exact product gives).
  ``neg``/``abs``/``round`` and the converts themselves keep subnormals.
- float16: each op is promoted to float32 and rounded; a float16 subnormal is a float32
  normal, so nothing is flushed.
- ``max``/``min`` order ``-0`` below ``+0`` (``max(-0, +0)`` is ``+0`` either way round,
  ``min`` gives ``-0``); NaN propagates. All float types.
- ``integer_pow`` is JAX's chain of multiplications by repeated squaring (``x**3`` is
  ``(x*x)*x``, ``x**-2`` is ``1/(x*x)``), every product rounded to the half type.
- a division by a broadcast divisor multiplies by its reciprocal (``xla_true_divide``);
  for bfloat16 the reciprocal is computed and kept in float32 (flushed).

Cost: the half types compute through float32 anyway; flushing adds a check of each
operand's 16-bit patterns and of the rounded result's (the float32 flush runs only where
one finds a subnormal).

What this module must not hold: rules of primitives (they live with the primitives).
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln._fp_warnings import IGNORE as _FP_IGNORE
from kiln._fp_warnings import enter as _fp_enter
from kiln._fp_warnings import leave as _fp_leave

BF16 = np.dtype(dtypes.bfloat16)
F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_TINY = np.float32(np.finfo(np.float32).tiny)
_ZERO = np.float32(0)


def is_half(dt) -> bool:
    """float16 or bfloat16 (the types this module computes)."""
    return dt == BF16 or dt == F16


def _has_subnormal(x) -> bool:
    """Whether the bfloat16 array ``x`` holds a subnormal (a check on its 16-bit
    patterns: cheaper than flushing its float32 copy)."""
    t = np.asarray(x).view(np.uint16) << 1     # the sign bit shifted out
    t -= 1                       # zeros wrap to 0xFFFF; subnormals become 1..0xFD
    return bool(t.size) and bool(t.min() < 0xFF)


_SMALL = 4096     # below: one table look-up widens and flushes (fewer NumPy calls)
_daz_table = None


def _widen_table():
    """float32 value of every bfloat16 bit pattern, subnormals as zeros of their sign."""
    global _daz_table
    if _daz_table is None:
        u = np.arange(1 << 16, dtype=np.uint32)
        daz = np.where((u & 0x7F80) == 0, u & 0x8000, u)
        _daz_table = (daz << 16).view(_F32)
    return _daz_table


def _widen(x, flush: bool):
    """``x`` as a float32 array of its own (a copy), subnormals zeroed when ``flush``."""
    if flush and np.size(x) < _SMALL:
        return _widen_table()[np.asarray(x).view(np.uint16)]
    v = np.array(x, _F32)
    if flush and _has_subnormal(x):
        _ftz(v)
    return v


def _ftz(v):
    """Replace the subnormals of the float32 array ``v`` by zeros of their sign, in place
    (zeros stay as they are)."""
    small = np.abs(v) < _TINY
    np.copysign(_ZERO, v, out=v, where=small)
    return v


def flush_f32(v):
    """Replace the subnormals of the float32 array ``v`` (one of the caller's own) by
    zeros of their sign, in place; returns ``v``."""
    return _ftz(v)


def _round_ftz(r, dt):
    """The float32 array ``r`` rounded to ``dt`` (bfloat16: its subnormals flushed
    first). Only a result that rounds to a subnormal or to the smallest normal can come
    from a float32 subnormal, so the flush runs only when the rounded result has one."""
    if dt == BF16 and r.size < _SMALL:
        return _ftz(r).astype(dt)
    out = r.astype(dt)
    if dt == BF16:
        t = out.view(np.uint16) << 1
        t -= 1                   # subnormals and the smallest normal: 1..0xFF
        if t.size and t.min() < 0x100:
            out = _ftz(r).astype(dt)
    return out


def f32_binary(fn, x, y, dt):
    """``fn`` (a float32 NumPy ufunc) of half arrays ``x``, ``y`` of dtype ``dt``, as
    XLA's CPU code computes it: in float32 (bfloat16: operands and result flushed), then
    rounded to ``dt``."""
    bf = dt == BF16
    a, b = _widen(x, bf), _widen(y, bf)
    tok = _fp_enter(_FP_IGNORE)
    try:
        r = np.asarray(fn(a, b))
    finally:
        _fp_leave(tok)
    return _round_ftz(r, dt)


def divide(x, y, dt):
    """``x / y`` for bfloat16 arrays; a broadcast divisor is inverted and multiplied, as
    XLA's simplifier rewrites ``A / Broadcast(B)`` (after widening: the reciprocal stays
    in float32, flushed)."""
    ys = np.shape(y)
    if ys != np.shape(x) and (not ys or np.broadcast_shapes(np.shape(x), ys) != ys):
        a, b = _widen(x, True), _widen(y, True)
        tok = _fp_enter(_FP_IGNORE)
        try:
            r = np.asarray(np.multiply(a, _ftz(np.asarray(np.true_divide(_F32.type(1), b)))))
        finally:
            _fp_leave(tok)
        return _round_ftz(r, dt)
    return f32_binary(np.true_divide, x, y, dt)


def _zero_ties(fn, a, b, r):
    """``r = fn(a, b)`` (``np.maximum``/``np.minimum``) with ``-0 < +0``: where both
    operands are zeros, max is ``a + b`` (``-0`` only when both are), min ``-(-a - b)``."""
    z = r == 0
    if np.any(z):
        z &= a == b
        if np.any(z):
            a, b = np.broadcast_arrays(a, b)
            tie = (a + b) if fn is np.maximum else -((-a) - b)
            r = np.where(z, tie, r)
    return r


def max_min(fn, x, y):
    """``fn`` (``np.maximum``/``np.minimum``) of float arrays with XLA's signed zeros
    (and, for bfloat16, operands flushed)."""
    dt = x.dtype
    if dt == BF16:
        a, b = _widen(x, True), _widen(y, True)
        return np.asarray(_zero_ties(fn, a, b, fn(a, b))).astype(dt)
    return np.asarray(_zero_ties(fn, x, y, fn(x, y)), dt)


def flush_bf16(x):
    """A bfloat16 array with its subnormals replaced by zeros of their sign (``x`` itself
    when it has none); other dtypes unchanged."""
    x = np.asarray(x)
    if x.dtype != BF16:
        return x
    u = x.view(np.uint16)
    sub = (u & 0x7F80) == 0
    if not sub.any():
        return x
    return np.where(sub, u & 0x8000, u).astype(np.uint16).view(BF16)


def integer_pow(x, k: int):
    """``x ** k`` (``k != 0``) for a half array: JAX's multiplications by repeated
    squaring, each rounded to the half type (bfloat16 flushed), then ``1 / acc`` for
    ``k < 0``."""
    dt = x.dtype
    n = -k if k < 0 else k
    acc = None
    while n > 0:
        if n & 1:
            acc = x if acc is None else f32_binary(np.multiply, acc, x, dt)
        n >>= 1
        if n > 0:
            x = f32_binary(np.multiply, x, x, dt)
    if k < 0:
        acc = f32_binary(np.true_divide, np.ones_like(acc), acc, dt)
    return np.array(acc) if k == 1 else acc      # a copy: the result never aliases x
