"""float16/bfloat16 ``expm1``, ``logistic``, ``asin``, ``acos``, ``asinh``, ``acosh`` and
``atanh`` with JAX's bits: their expansions evaluated one step at a time, each step's
float32 result rounded to the half type.

Why: JAX lowers ``logistic`` to ``1 / (1 + exp(-x))`` and the inverse trigonometric and
hyperbolic functions to CHLO ops that XLA expands into a chain of HLO ops *in the
operand's type*; XLA's CPU backend then runs every op of the chain in float32 and rounds
its result back (bfloat16: a normalization pass wraps each op in converts; float16: LLVM
promotes each half operation). Rounding once at the end, as the other half-precision
math does (``arith._HALF_VIA_F32``), differs from JAX in 1-17% of the 2**16 values.
``expm1`` is a single HLO op: bfloat16 runs it whole in float32 (rounded once, not
here), float16 expands it in half (``h = x/2``; ``exp(x) - 1`` for ``|x| > 1/2``, else
``tanh(h) * (exp(x) + 1)``; ``x`` itself where ``h`` is zero).

Each step: a float32 operation, then rounded to the half type: XLA's ``exp``/``log``/
``log1p``/``tanh`` kernels from ``_xla_eager`` (they flush subnormals as XLA's do), the C
library's ``atan2`` (subnormals pass through it), or NumPy's correctly rounded ``+ - * /
sqrt`` on operands and result with subnormals flushed (XLA's CPU runtime sets DAZ/FTZ: it
matters for bfloat16, whose subnormals are float32's; ``neg``/``abs``/``sign`` and the
rounding itself keep them). The constants (``ln 2``,
the large-argument thresholds ``sqrt(max)`` and ``max / 2``) are rounded to the half type
first, as the expansion builds them in that type. Checked against JAX over all 2**16
values of both types (``tests/parity/test_half_steps_jax_bits.py``).

:func:`half_steps` returns None when the native kernels are unavailable (callers then keep
their NumPy path).

What this module must not hold: rules of primitives (they live with the primitives).
"""
from __future__ import annotations

import numpy as np

from kiln._fp_warnings import IGNORE as _FP_IGNORE
from kiln._fp_warnings import enter as _fp_enter
from kiln._fp_warnings import leave as _fp_leave
from kiln.lax._xla_eager import binary as _xla_binary
from kiln.lax._xla_eager import unary as _xla_unary

_F32 = np.dtype(np.float32)
_TINY = np.float32(np.finfo(np.float32).tiny)
_ONE = np.float32(1.0)
_HALF = np.float32(0.5)
_LN2 = float(np.log(2.0))

# (op, kind of half type) expanded step by step; "f16" only: float16 alone.
_STEPPED = {"logistic": "both", "asin": "both", "acos": "both", "asinh": "both",
            "acosh": "both", "atanh": "both", "expm1": "f16"}


def stepped(op: str, dt) -> bool:
    """Whether ``op`` on the 2-byte float dtype ``dt`` takes :func:`half_steps`."""
    k = _STEPPED.get(op)
    return k == "both" or (k == "f16" and dt == np.float16)


class _NoKernel(Exception):
    """A float32 XLA kernel is unavailable (no native library)."""


def _flush(v):
    """``v`` as float32 with subnormals replaced by zeros of their sign (DAZ/FTZ)."""
    v = np.asarray(v, _F32)
    small = np.abs(v) < _TINY
    if small.any():
        v = np.where(small, np.copysign(np.float32(0), v), v).astype(_F32)
    return v


class _Steps:
    """The step helpers for one half dtype."""

    def __init__(self, dt):
        self.dt = dt

    def r(self, v):
        """A float32 step result rounded to the half type (as float32 again)."""
        return np.asarray(v, _F32).astype(self.dt).astype(_F32)

    def c(self, value):
        """A Python constant rounded to the half type (as a float32 scalar)."""
        return _F32.type(np.asarray(value, np.float64).astype(self.dt).astype(_F32))

    def f(self, op, v):
        """XLA's float32 ``op`` of ``v``, rounded (the kernel flushes as XLA's does)."""
        out = _xla_unary(op, v)
        if out is None:
            raise _NoKernel(op)
        return self.r(out)

    def atan2(self, a, b):
        """The C library's float32 atan2 (as XLA calls it: subnormals pass through)."""
        out = _xla_binary("atan2", a, b)
        if out is None:
            raise _NoKernel("atan2")
        return self.r(out)

    def add(self, a, b):
        return self.r(_flush(_flush(a) + _flush(b)))

    def sub(self, a, b):
        return self.r(_flush(_flush(a) - _flush(b)))

    def mul(self, a, b):
        return self.r(_flush(_flush(a) * _flush(b)))

    def div(self, a, b):
        return self.r(_flush(_flush(a) / _flush(b)))

    def sqrt(self, a):
        return self.r(np.sqrt(_flush(a)))

    def neg(self, a):
        return self.r(-a)

    def abs(self, a):
        return self.r(np.abs(a))

    def max_value(self):
        from kiln import dtypes
        return float(dtypes.finfo(self.dt).max)


def _logistic(s, x):
    e = s.f("exp", s.neg(x))
    return s.div(_ONE, s.add(e, _ONE))


def _expm1(s, x):
    h = s.mul(x, _HALF)
    e = s.f("exp", x)
    big = s.sub(e, _ONE)
    small = s.mul(s.f("tanh", h), s.add(e, _ONE))
    return np.where(h == 0, x, np.where(np.abs(x) > _HALF, big, small))


def _sqrt_one_minus_sq(s, x):
    """``sqrt((1 - x) * (1 + x))``, step by step."""
    return s.sqrt(s.mul(s.sub(_ONE, x), s.add(x, _ONE)))


def _asin(s, x):
    t = s.atan2(x, s.add(_sqrt_one_minus_sq(s, x), _ONE))
    return s.add(t, t)


def _acos(s, x):
    return s.atan2(_sqrt_one_minus_sq(s, x), x)


def _asinh(s, x):
    sign = s.r(np.where(x == 0, x, np.sign(x)))
    ax = s.abs(x)
    large = s.add(s.f("log", ax), s.c(_LN2))
    sq = s.mul(x, x)
    q = s.div(sq, s.add(s.sqrt(s.add(sq, _ONE)), _ONE))
    small = s.f("log1p", s.add(ax, q))
    return s.mul(sign, np.where(ax >= s.c(np.sqrt(s.max_value())), large, small))


def _acosh(s, x):
    large = s.add(s.f("log", x), s.c(_LN2))
    below = s.sqrt(s.add(x, np.float32(-1.0)))
    above = s.sqrt(s.add(x, _ONE))
    small = s.f("log1p", s.mul(below, s.add(above, below)))
    return np.where(x >= s.c(s.max_value() / 2), large, small)


def _atanh(s, x):
    d = s.sub(s.f("log1p", x), s.f("log1p", s.neg(x)))
    return np.where(s.abs(x) > _ONE, np.float32(np.nan), s.mul(d, _HALF))


_EXPANSIONS = {"logistic": _logistic, "expm1": _expm1, "asin": _asin, "acos": _acos,
               "asinh": _asinh, "acosh": _acosh, "atanh": _atanh}


def half_steps(op: str, x):
    """JAX's ``op(x)`` for a float16/bfloat16 array ``x`` (``stepped(op, x.dtype)``), or
    None without the native float32 kernels."""
    dt = x.dtype
    xf = np.asarray(x, _F32)
    tok = _fp_enter(_FP_IGNORE)
    try:
        out = _EXPANSIONS[op](_Steps(dt), xf)
    except _NoKernel:
        return None
    finally:
        _fp_leave(tok)
    return np.asarray(out, _F32).astype(dt)
