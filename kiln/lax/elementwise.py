"""The elementwise primitives of ``jax.lax`` beyond the basics in ``kiln.lax.arith``:
rounding, transcendental and special functions, complex parts, bitwise and shift
operations, ``pow``/``rem``/``atan2``/``nextafter``, ``clamp``, ``reduce_precision``
and ``bitcast_convert_type``, each beside its JVP/transpose/batching rules.

Impls take NumPy values and return exactly the dtype the abstract evaluation
promises. Half-precision floats (float16, bfloat16) are computed in float32 and
rounded back, as XLA does on CPU. Integer operations wrap and treat edge cases
(shift amounts out of range, ``rem`` by zero) as XLA does. Special functions run XLA's
expansions (or JAX's algorithms) natively (``_xla_eager``) and fall back to
``scipy.special`` without the native library (imported on first use: it costs a quarter
of a second, which ``import kiln`` should not pay). This module must not define anything that is not elementwise.
"""
from __future__ import annotations

import enum
import importlib

import ml_dtypes
import numpy as np

from kiln import dtypes
from kiln._fp_warnings import IGNORE as _FP_IGNORE
from kiln._fp_warnings import enter as _fp_enter
from kiln._fp_warnings import leave as _fp_leave
from kiln.array import make_array
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval, standard_weak_type_rule
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax import _half_flush
from kiln.lax._factory import (
    _any,
    _complex,
    _float,
    _inexact,
    _int,
    _int_or_bool,
    _num,
    _signedint,
    as_dtype,
    check_dtype,
    check_same_dtypes,
    check_same_shapes,
    false_weak_type_rule,
    naryop,
    standard_primitive,
    unop,
)
from kiln.lax._half_flush import flush_bf16 as _flush_bf16
from kiln.lax._xla_eager import betainc as _xla_betainc
from kiln.lax._xla_eager import binary as _xla_binary
from kiln.lax._xla_eager import complex_unary as _xla_complex_unary
from kiln.lax._xla_eager import power as _xla_power
from kiln.lax._xla_eager import unary as _xla_unary
from kiln.lax.accuracy import check_accuracy as _check_accuracy
from kiln.lax.arith import (
    _binargs,
    _bind2,
    _scalar_like,
    add,
    broadcast_to_shape,
    div,
    eq,
    exp,
    ge,
    gt,
    integer_pow,
    log,
    lt,
    mul,
    neg,
    square,
    sub,
    unbroadcast,
    xla_math,
)
from kiln.lax.structural import broadcast_in_dim, convert_element_type, select

# ----------------------------------------------------------------------------------------------
# Helpers for impls and rules.

class _LazyModule:
    """A module imported on its first attribute access. Each attribute read is then kept on
    this object, so later reads cost what a module attribute read costs."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):  # only called for attributes not yet kept
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = getattr(importlib.import_module(self._name), attr)
        setattr(self, attr, value)
        return value


sps = _LazyModule("scipy.special")


_HALF: dict = {}


def _is_half(dt) -> bool:
    """float16, bfloat16 and the float8 types: computed in float32."""
    r = _HALF.get(dt)
    if r is None:
        d = np.dtype(dt)
        r = _HALF[dt] = d.itemsize < 4 and dtypes.issubdtype(d, np.floating)
    return r


def _math(fn, *, upcast=True, quiet=True):
    """Wrap a NumPy/SciPy function of float/complex arrays as an impl: half floats are
    computed in float32 (``upcast``), warnings about NaN/inf are silenced (``quiet``: JAX
    never warns, e.g. for the untaken branch of a ``where``), the dtype is restored.
    ``fn`` may be the name of a ``scipy.special`` function: it is looked up on the first
    call (so defining the impl imports nothing)."""
    def impl(*args, **params):
        nonlocal fn
        if type(fn) is str:
            fn = getattr(sps, fn)
        dt = args[0].dtype
        if upcast and _is_half(dt):
            args = [np.asarray(a, np.float32) for a in args]
        if quiet:   # the error state by context variable: ~15x cheaper than np.errstate
            tok = _fp_enter(_FP_IGNORE)
            try:
                out = fn(*args, **params)
            finally:
                _fp_leave(tok)
        else:
            out = fn(*args, **params)
        return out if out.dtype == dt else out.astype(dt)
    return impl


def _contiguous(x):
    """A C-contiguous array with ``x``'s shape (``np.ascontiguousarray`` turns 0-d into 1-d)."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else x.copy()


def _const(x, val):
    """A weak rank-0 constant of ``x``'s dtype (rank-0 operands broadcast in lax ops)."""
    return make_array(np.asarray(val, get_aval(x).dtype), True)


def _full_like(x, val):
    """A constant with ``x``'s shape and dtype, built as a broadcast of a scalar."""
    aval = get_aval(x)
    c = make_array(np.asarray(val, aval.dtype), True)
    return broadcast_in_dim(c, aval.shape, ()) if aval.shape else c


def _bcast_to(t, shape):
    """Broadcast a rank-0 (or size-1-dimensioned, or already full) value ``t`` to ``shape``."""
    return broadcast_to_shape(t, shape)


def _replace_zero(x):
    return select(eq(x, _const(x, 0)), _full_like(x, 1), x)


def _unbroadcast(aval, ct):
    """Sum a full-shape cotangent down to a broadcast operand's shape."""
    return unbroadcast(ct, aval)


def _unsigned(dt):
    return np.dtype(f"u{np.dtype(dt).itemsize}")


def _signed(dt):
    return np.dtype(f"i{np.dtype(dt).itemsize}")


_HALF_COMPLEX = {np.dtype(np.complex64): np.dtype(np.float32),
                 np.dtype(np.complex128): np.dtype(np.float64)}


def _complex_basetype(dt):
    dt = np.dtype(dt)
    return _HALF_COMPLEX.get(dt, dt)


def _complex_of(dt):
    return np.dtype(np.complex128) if np.dtype(dt) == np.float64 else np.dtype(np.complex64)


# ----------------------------------------------------------------------------------------------
# sign, floor, ceil, round, is_finite

def _sign_impl(x):
    x = np.asarray(x)
    if x.dtype.kind == "c":
        # XLA's: the parts divided by XLA's |z|, z itself where |z| is 0 (xla_complex.h)
        out = _xla_complex_unary("sign", x)
        if out is not None:
            return out
        with np.errstate(all="ignore"):
            # Each part divided by the magnitude (XLA's): sign(-inf + 0j) is nan + 0j, where
            # a complex division would make both parts NaN.
            mag = np.abs(x)
            safe = np.where(mag == 0, 1, mag)
            out = np.empty_like(x)
            out.real = np.where(mag == 0, x.real, x.real / safe)     # a zero keeps its signs
            out.imag = np.where(mag == 0, x.imag, x.imag / safe)
        return as_dtype(out, x.dtype)
    if dtypes.issubdtype(x.dtype, np.floating):
        # Keep the sign of zeros (sign(-0.) == -0.) and NaNs, as XLA does.
        return as_dtype(np.where(x == 0, x, np.sign(x)), x.dtype)
    return as_dtype(np.sign(x), x.dtype)


def _daz(impl):
    """``impl`` with bfloat16 subnormal operands read as zeros of their sign (XLA's CPU
    code computes bfloat16 in float32 under DAZ; ``kiln/lax/_half_flush.py``)."""
    def wrapped(x, **params):
        return impl(_flush_bf16(x), **params)
    return wrapped


sign_p = unop("sign", _daz(_sign_impl), _num)
ad.defjvp_zero(sign_p)

floor_p = unop("floor", _daz(_math(np.floor, quiet=False)), _float)
ad.defjvp_zero(floor_p)
ceil_p = unop("ceil", _daz(_math(np.ceil, quiet=False)), _float)
ad.defjvp_zero(ceil_p)


class RoundingMethod(enum.IntEnum):
    """How :func:`round` treats halfway values."""

    AWAY_FROM_ZERO = 0
    """Halfway values round away from zero (0.5 -> 1, -0.5 -> -1)."""

    TO_NEAREST_EVEN = 1
    """Halfway values round to the nearest even integer (0.5 -> 0, 1.5 -> 2)."""


def _round_impl(x, *, rounding_method):
    if rounding_method == RoundingMethod.TO_NEAREST_EVEN:
        return as_dtype(np.rint(x), x.dtype)
    # Away from zero. ``x - trunc(x)`` is exact, so no double rounding (0.49999997 -> 0).
    with np.errstate(invalid="ignore"):
        t = np.trunc(x)
        bump = np.abs(x - t) >= 0.5
        out = np.where(bump, t + np.copysign(np.ones_like(t), x), t)
    return as_dtype(out, x.dtype)


round_p = unop("round", _round_impl, _float)
ad.defjvp_zero(round_p)

is_finite_p = unop("is_finite", lambda x: np.asarray(np.isfinite(x)), _float,
                   result_dtype=lambda dt: np.dtype(bool))
ad.defjvp_zero(is_finite_p)


def sign(x):
    """Elementwise sign: -1, 0 or 1 (signed zeros and NaN kept); ``x / |x|`` for complex."""
    return sign_p.bind(x)


def floor(x):
    """Elementwise floor (largest integer not above ``x``); floating inputs only."""
    return floor_p.bind(x)


def ceil(x):
    """Elementwise ceiling (smallest integer not below ``x``); floating inputs only."""
    return ceil_p.bind(x)


def round(x, rounding_method=RoundingMethod.AWAY_FROM_ZERO):  # noqa: A001
    """Elementwise rounding to the nearest integer. Halfway values go away from zero by
    default; ``RoundingMethod.TO_NEAREST_EVEN`` rounds them to even (NumPy's rule)."""
    return round_p.bind(x, rounding_method=RoundingMethod(rounding_method))


def is_finite(x):
    """Elementwise test for finite values (not inf, not NaN); boolean result."""
    return is_finite_p.bind(x)


# ----------------------------------------------------------------------------------------------
# exponentials, logarithms and the logistic function

def _exp2(x):
    if x.dtype.kind == "c":
        return np.exp(x * np.log(2.0))
    if x.dtype in (np.float32, np.float64):
        # JAX lowers exp2 to exp(log(2) * x) in the operand's dtype; XLA's exp formula
        # then gives its bits (NumPy's exp2 differs in the last bit, and is SVML's on
        # AVX-512 machines). The compiled kernels use the same formula.
        with np.errstate(all="ignore"):
            y = x * x.dtype.type(np.log(2.0))
        out = _xla_unary("exp", np.asarray(y))
        if out is not None:
            return out
    return np.exp2(x)


def _expm1(x):
    out = np.expm1(x)
    if x.dtype.kind == "c":
        # As XLA: a real argument (imaginary part ±0) gives imaginary part +0 even when
        # exp(re) is inf or NaN, and a zero real part is +0.
        out = np.asarray(out)
        out.imag = np.where(x.imag == 0, 0.0, out.imag)
        out.real = out.real + 0.0
    return out


def _logistic(x):
    if x.dtype.kind == "c":
        return 1.0 / (1.0 + np.exp(-x))
    return sps.expit(x)


exp2_p = unop("exp2", _math(_exp2), _inexact)
_np_log1p = _math(np.log1p)


def _log1p_fallback(x):
    # Complex: NumPy's log1p is log(1 + z), all precision lost near 0 (_complex_log1p).
    if x.dtype.kind == "c":
        from kiln.lax._complex_log1p import complex_log1p
        return complex_log1p(x)
    return _np_log1p(x)


log1p_p = unop("log1p", xla_math("log1p", _log1p_fallback), _inexact)
expm1_p = unop("expm1", xla_math("expm1", _math(_expm1)), _inexact)
logistic_p = unop("logistic", xla_math("logistic", _math(_logistic)), _inexact)

ad.defjvp2(exp2_p, lambda g, ans, x: mul(mul(g, ans), _const(x, np.log(2.0))))
ad.defjvp2(log1p_p, lambda g, ans, x: div(g, add(x, _const(x, 1))))
ad.defjvp2(expm1_p, lambda g, ans, x: mul(g, add(ans, _const(ans, 1))))
ad.defjvp2(logistic_p, lambda g, ans, x: mul(g, mul(ans, sub(_const(ans, 1), ans))))


def exp2(x, *, accuracy=None):
    """Elementwise base-2 exponential ``2**x``. (``accuracy``: see
    :mod:`kiln.lax.accuracy`.)"""
    _check_accuracy("exp2", accuracy)
    return exp2_p.bind(x)


def log1p(x, *, accuracy=None):
    """Elementwise ``log(1 + x)``, accurate for small ``x``."""
    _check_accuracy("log1p", accuracy)
    return log1p_p.bind(x)


def expm1(x, *, accuracy=None):
    """Elementwise ``exp(x) - 1``, accurate for small ``x``."""
    _check_accuracy("expm1", accuracy)
    return expm1_p.bind(x)


def logistic(x, *, accuracy=None):
    """Elementwise logistic sigmoid ``1 / (1 + exp(-x))``."""
    _check_accuracy("logistic", accuracy)
    return logistic_p.bind(x)


# ----------------------------------------------------------------------------------------------
# trigonometric and hyperbolic functions

tan_p = unop("tan", xla_math("tan", _math(np.tan)), _inexact)
asin_p = unop("asin", xla_math("asin", _math(np.arcsin)), _inexact)
acos_p = unop("acos", xla_math("acos", _math(np.arccos)), _inexact)
atan_p = unop("atan", xla_math("atan", _math(np.arctan)), _inexact)
sinh_p = unop("sinh", xla_math("sinh", _math(np.sinh)), _inexact)
cosh_p = unop("cosh", xla_math("cosh", _math(np.cosh)), _inexact)
asinh_p = unop("asinh", xla_math("asinh", _math(np.arcsinh)), _inexact)
acosh_p = unop("acosh", xla_math("acosh", _math(np.arccosh)), _inexact)
atanh_p = unop("atanh", xla_math("atanh", _math(np.arctanh)), _inexact)

ad.defjvp2(tan_p, lambda g, ans, x: mul(g, add(_const(x, 1), square(ans))))
ad.defjvp2(asin_p, lambda g, ans, x: mul(g, rsqrt(sub(_const(x, 1), square(x)))))
ad.defjvp2(acos_p, lambda g, ans, x: mul(g, neg(rsqrt(sub(_const(x, 1), square(x))))))
ad.defjvp2(atan_p, lambda g, ans, x: div(g, add(_const(x, 1), square(x))))
ad.defjvp2(sinh_p, lambda g, ans, x: mul(g, cosh(x)))
ad.defjvp2(cosh_p, lambda g, ans, x: mul(g, sinh(x)))
ad.defjvp2(asinh_p, lambda g, ans, x: mul(g, rsqrt(add(square(x), _const(x, 1)))))
# x**2 - 1 rather than (x+1)(x-1): the domain is x >= 1, as in JAX.
ad.defjvp2(acosh_p, lambda g, ans, x: mul(g, rsqrt(sub(square(x), _const(x, 1)))))
ad.defjvp2(atanh_p, lambda g, ans, x: mul(reciprocal(add(_const(x, 1), x)),
                                         div(g, sub(_const(x, 1), x))))


def tan(x, *, accuracy=None):
    """Elementwise tangent."""
    _check_accuracy("tan", accuracy)
    return tan_p.bind(x)


def asin(x):
    """Elementwise arc sine."""
    return asin_p.bind(x)


def acos(x):
    """Elementwise arc cosine."""
    return acos_p.bind(x)


def atan(x):
    """Elementwise arc tangent."""
    return atan_p.bind(x)


def sinh(x):
    """Elementwise hyperbolic sine."""
    return sinh_p.bind(x)


def cosh(x):
    """Elementwise hyperbolic cosine."""
    return cosh_p.bind(x)


def asinh(x):
    """Elementwise inverse hyperbolic sine."""
    return asinh_p.bind(x)


def acosh(x):
    """Elementwise inverse hyperbolic cosine (NaN below 1 for real inputs)."""
    return acosh_p.bind(x)


def atanh(x):
    """Elementwise inverse hyperbolic tangent."""
    return atanh_p.bind(x)


def _atan2(x, y):
    if x.dtype.kind == "c":
        # arg(y + i x), extended to complex arguments.
        return -1j * np.log((y + 1j * x) / np.sqrt(x * x + y * y))
    if np.ndim(x) and np.ndim(y) and np.shape(x) != np.shape(y):
        x, y = np.broadcast_arrays(x, y)   # size-1 dimensions: the native kernel's shapes
    # The C library's atan2, as XLA's CPU code (NumPy's is SVML's on AVX-512 machines).
    out = _xla_binary("atan2", x, y)
    return np.arctan2(x, y) if out is None else out


atan2_p = naryop("atan2", _math(_atan2), _inexact)
ad.defjvp2(atan2_p,
          lambda g, ans, x, y: mul(g, div(y, add(square(x), square(y)))),
          lambda g, ans, x, y: mul(g, div(neg(x), add(square(x), square(y)))))


def atan2(x, y):
    """Elementwise arc tangent of ``x / y`` in the quadrant of the point ``(y, x)``."""
    return _bind2(atan2_p, x, y)


# ----------------------------------------------------------------------------------------------
# roots and abs

def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _complex_native(op, impl):
    """``impl``, with complex64/complex128 operands through XLA's complex formula for
    ``op`` (``_xla_eager.complex_unary``, JAX's bits) when the native library is there."""
    def wrapped(x):
        if x.dtype.kind == "c":
            out = _xla_complex_unary(op, x)
            if out is not None:
                return out
        return impl(x)
    wrapped.__name__ = f"{op}_impl"
    return wrapped


sqrt_p = unop("sqrt", _complex_native("sqrt", _daz(_math(np.sqrt))), _inexact)
rsqrt_p = unop("rsqrt", _daz(xla_math("rsqrt", _math(_rsqrt))), _inexact)
cbrt_p = unop("cbrt", xla_math("cbrt", _math(np.cbrt)), _float)

ad.defjvp2(sqrt_p, lambda g, ans, x: mul(g, div(_const(x, 0.5), ans)))
ad.defjvp2(rsqrt_p, lambda g, ans, x: mul(g, mul(_const(x, -0.5), div(ans, x))))
ad.defjvp2(cbrt_p, lambda g, ans, x: mul(g, mul(_const(x, 1 / 3), integer_pow(ans, -2))))


def sqrt(x, *, accuracy=None):
    """Elementwise square root."""
    _check_accuracy("sqrt", accuracy)
    return sqrt_p.bind(x)


def rsqrt(x, *, accuracy=None):
    """Elementwise reciprocal square root ``1 / sqrt(x)``."""
    _check_accuracy("rsqrt", accuracy)
    return rsqrt_p.bind(x)


def cbrt(x, *, accuracy=None):
    """Elementwise real cube root (negative for negative ``x``)."""
    _check_accuracy("cbrt", accuracy)
    return cbrt_p.bind(x)


def _abs_impl(x):
    if x.dtype.kind == "c":     # XLA's max * sqrt(1 + (min/max)^2) (xla_complex.h)
        out = _xla_complex_unary("abs", x)
        if out is not None:
            return out
    with np.errstate(all="ignore"):
        out = np.abs(x)  # abs(INT_MIN) wraps to INT_MIN, as in XLA
    return as_dtype(out, _complex_basetype(x.dtype))


abs_p = unop("abs", _abs_impl, _signedint + _inexact, result_dtype=_complex_basetype)


def _abs_jvp(g, ans, x):
    if get_aval(x).dtype.kind == "c":
        ans_c = convert_element_type(ans, get_aval(x).dtype)
        return real(mul(g, div(conj(x), _replace_zero(ans_c))))
    return select(ge(x, _const(x, 0)), g, neg(g))


ad.defjvp2(abs_p, _abs_jvp)


def abs(x):  # noqa: A001
    """Elementwise absolute value; the magnitude (a real array) for complex ``x``."""
    return abs_p.bind(x)


def reciprocal(x):
    """Elementwise ``1 / x``."""
    return integer_pow(x, -1)


# ----------------------------------------------------------------------------------------------
# pow, rem, nextafter

def _pow_abstract_eval(x, y):
    check_dtype("pow", x.dtype, _inexact)
    check_dtype("pow", y.dtype, _int + _inexact)
    if not (dtypes.issubdtype(y.dtype, np.integer) or x.dtype == y.dtype):
        raise TypeError("the first argument to pow must have an inexact dtype (float or complex), "
                        "and the second argument must have an inexact or integer dtype, and two "
                        f"inexact dtypes must match, but got {np.dtype(x.dtype).name} and "
                        f"{np.dtype(y.dtype).name} respectively.")
    shape = check_same_shapes("pow", [x, y])
    return ShapedArray(shape, x.dtype, standard_weak_type_rule(x.weak_type, y.weak_type))


def _quiet_nan(v):
    """``v`` with signaling NaNs made quiet, as the hardware's float16-to-float32
    conversion in XLA's code does (``powf(qNaN, 0)`` is 1, ``powf(sNaN, 0)`` NaN;
    XLA widens bfloat16 by a shift, which keeps them signaling)."""
    nan = np.isnan(v)
    return np.where(nan, np.float32(np.nan), v) if nan.any() else v


def _pow_impl(x, y):
    dt = x.dtype
    if np.ndim(x) and np.ndim(y) and np.shape(x) != np.shape(y):
        x, y = np.broadcast_arrays(x, y)   # size-1 dimensions: the native kernel's shapes
    out = _xla_power(x, y)     # JAX's bits for float32/float64 (kiln/lax/_xla_eager.py)
    if out is not None:
        return out
    # An integer exponent is converted to the base's dtype first (as XLA does).
    if _is_half(dt):
        x, y = np.asarray(x, np.float32), np.asarray(np.asarray(y, dt), np.float32)
        if dt == np.float16:
            x, y = _quiet_nan(x), _quiet_nan(y)
        out = _xla_power(x, y)    # float32 powf under XLA's flushing, rounded once
        if out is not None:
            return out.astype(dt)
    else:
        y = np.asarray(y, dt)
    with np.errstate(all="ignore"):
        return as_dtype(np.power(x, y), dt)


pow_p = standard_primitive("pow", _pow_abstract_eval, _pow_impl)
batching.broadcast_batcher(pow_p)


def _pow_jvp_x(g, ans, x, y):
    xa, ya = get_aval(x), get_aval(y)
    shape = get_aval(ans).shape
    yf = convert_element_type(y, xa.dtype)
    xb, yb = _bcast_to(x, shape), _bcast_to(yf, shape)
    if dtypes.issubdtype(ya.dtype, np.integer):
        jac = select(eq(yb, _const(yb, 0)), _full_like(yb, 0),
                     mul(_replace_zero(yb), pow(xb, sub(yb, _const(yb, 1)))))
    else:
        jac = mul(yb, pow(xb, sub(yb, _const(yb, 1))))
    return mul(g, jac)


def _pow_jvp_y(g, ans, x, y):
    # log(x) is replaced by log(1) = 0 where x == 0, so d(0**y)/dy = 0 rather than NaN.
    return mul(g, mul(log(_replace_zero(x)), ans))


ad.defjvp2(pow_p, _pow_jvp_x, _pow_jvp_y)


def pow(x, y):  # noqa: A001
    """Elementwise ``x ** y``: ``x`` float or complex; ``y`` integer, or of ``x``'s dtype."""
    py = (int, float, complex, bool)
    if type(y) in (float, complex) and type(x) not in py:
        y = _scalar_like(y, x)
    if type(x) in py and type(y) not in py and \
            dtypes.issubdtype(get_aval(y).dtype, np.inexact):
        x = _scalar_like(x, y)
    return pow_p.bind(x, y)


def _rem_impl(x, y):
    dt = x.dtype
    if dt.kind in "iu":
        # C semantics (sign of the dividend); XLA gives x for y == 0 and 0 for INT_MIN % -1.
        bad = y == 0
        if dt.kind == "i":
            bad = bad | (y == -1)
        r = np.fmod(x, np.where(bad, 1, y).astype(dt))
        r = np.where(y == 0, x, r)
        return as_dtype(r, dt)
    if _is_half(dt):     # computed in float32 and rounded, as XLA
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    if np.ndim(x) and np.ndim(y) and np.shape(x) != np.shape(y):
        x, y = np.broadcast_arrays(x, y)   # size-1 dimensions: the native kernel's shapes
    # The C library's fmod under XLA's flushing of subnormals (NumPy's keeps them).
    out = _xla_binary("rem", x, y)
    if out is not None:
        return as_dtype(out, dt)
    with np.errstate(all="ignore"):
        return as_dtype(np.fmod(x, y), dt)


rem_p = naryop("rem", _rem_impl, _int + _float)


def _rem_jvp_y(g, ans, x, y):
    q = div(x, y)
    return mul(neg(g), mul(sign(q), floor(abs(q))))


ad.defjvp2(rem_p, lambda g, ans, x, y: _bcast_to(g, get_aval(ans).shape), _rem_jvp_y)


def rem(x, y):
    """Elementwise remainder of ``x / y`` truncated toward zero (C ``fmod``): the result
    has the sign of ``x``."""
    return _bind2(rem_p, x, y)


_nextafter_np = _math(np.nextafter, upcast=False)


def _nextafter_impl(x, y):
    """NumPy's ``nextafter`` except where ``x == y``: there ``y``, as C and XLA give it
    (NumPy's float16 loop returns ``x``: ``nextafter(-0, +0)``); bfloat16 compares under
    XLA's DAZ, so two subnormals, or a subnormal and a zero, count as equal."""
    out = _nextafter_np(x, y)
    same = _flush_bf16(x) == _flush_bf16(y)
    if np.any(same):
        out = np.where(same, np.broadcast_to(y, np.shape(out)), out).astype(out.dtype)
    return out


nextafter_p = naryop("nextafter", _nextafter_impl, _float)
# nextafter(x, y) = x + (an ulp that is locally constant): d/dx = 1, d/dy = 0 almost
# everywhere. (JAX has no rule here; giving the a.e. derivative is harmless.)
ad.defjvp2(nextafter_p, lambda g, ans, x, y: _bcast_to(g, get_aval(ans).shape), None)


def nextafter(x1, x2):
    """The next representable value after ``x1`` in the direction of ``x2``."""
    return _bind2(nextafter_p, x1, x2)


# ----------------------------------------------------------------------------------------------
# complex numbers: real, imag, complex, conj

real_p = unop("real", lambda x: as_dtype(np.real(x), _complex_basetype(x.dtype)), _complex,
              result_dtype=_complex_basetype)
imag_p = unop("imag", lambda x: as_dtype(np.imag(x), _complex_basetype(x.dtype)), _complex,
              result_dtype=_complex_basetype)


def _real_transpose(ct, x):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    return [complex(ct, _const(ct, 0))]


def _imag_transpose(ct, x):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    return [complex(_const(ct, 0), neg(ct))]


ad.deflinear2(real_p, _real_transpose)
ad.deflinear2(imag_p, _imag_transpose)

def _check_complex_elem(name, dt):
    if np.dtype(dt) not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name} does not accept dtype {np.dtype(dt).name}. Accepted dtypes "
                        "are float32, float64" + (" and complex" if name == "conj" else "") +
                        ".")


def _complex_abstract_eval(x, y):
    _check_complex_elem("complex", x.dtype)
    _check_complex_elem("complex", y.dtype)
    check_same_dtypes("complex", [x, y])
    shape = check_same_shapes("complex", [x, y])
    return ShapedArray(shape, _complex_of(x.dtype),
                       standard_weak_type_rule(x.weak_type, y.weak_type))


def _complex_impl(x, y):
    dt = _complex_of(x.dtype)
    out = np.empty(np.broadcast_shapes(np.shape(x), np.shape(y)), dt)
    out.real = x
    out.imag = y
    return out


complex_p = standard_primitive("complex", _complex_abstract_eval, _complex_impl)
batching.broadcast_batcher(complex_p)


def _complex_transpose(ct, x, y):
    out = []
    for arg, part in ((x, real), (y, lambda t: neg(imag(t)))):
        if not is_undefined_primal(arg):
            out.append(None)
        elif type(ct) is Zero:
            out.append(Zero(arg.aval))
        else:
            out.append(_unbroadcast(arg.aval, part(ct)))
    return out


ad.deflinear2(complex_p, _complex_transpose)


def _conj_abstract_eval(x, *, input_dtype):
    if not dtypes.issubdtype(x.dtype, np.complexfloating):
        _check_complex_elem("conj", x.dtype)
    return ShapedArray(x.shape, _complex_of(_complex_basetype(x.dtype)), x.weak_type)


def _conj_impl(x, *, input_dtype):
    out_dt = _complex_of(_complex_basetype(x.dtype))
    return as_dtype(np.conj(np.asarray(x, out_dt)), out_dt)


conj_p = standard_primitive("conj", _conj_abstract_eval, _conj_impl)
batching.vectorized_batcher(conj_p)


def _conj_transpose(ct, x, *, input_dtype):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    if dtypes.issubdtype(input_dtype, np.complexfloating):
        return [conj(ct)]
    return [real(ct)]


ad.deflinear2(conj_p, _conj_transpose)


def real(x):
    """Elementwise real part of a complex array."""
    return real_p.bind(x)


def imag(x):
    """Elementwise imaginary part of a complex array."""
    return imag_p.bind(x)


def complex(x, y):  # noqa: A001
    """Elementwise ``x + 1j * y`` from float32/float64 parts of equal dtype."""
    return _bind2(complex_p, x, y)


def conj(x):
    """Elementwise complex conjugate (a real input gives a complex result)."""
    return conj_p.bind(x, input_dtype=get_aval(x).dtype)


# ----------------------------------------------------------------------------------------------
# bitwise and logical operations

def _not_impl(x):
    if x.dtype == np.bool_:
        return np.asarray(np.logical_not(x))
    return as_dtype(np.invert(x), x.dtype)


not_p = unop("not", _not_impl, _int_or_bool)
and_p = naryop("and", lambda x, y: as_dtype(np.bitwise_and(x, y), x.dtype), _int_or_bool)
or_p = naryop("or", lambda x, y: as_dtype(np.bitwise_or(x, y), x.dtype), _int_or_bool)
xor_p = naryop("xor", lambda x, y: as_dtype(np.bitwise_xor(x, y), x.dtype), _int_or_bool)
for _p in (not_p, and_p, or_p, xor_p):
    ad.defjvp_zero(_p)


def bitwise_not(x):
    """Elementwise NOT: logical for booleans, bitwise (two's complement) for integers."""
    return not_p.bind(x)


def bitwise_and(x, y):
    """Elementwise AND (logical for booleans)."""
    return _bind2(and_p, x, y)


def bitwise_or(x, y):
    """Elementwise OR (logical for booleans)."""
    return _bind2(or_p, x, y)


def bitwise_xor(x, y):
    """Elementwise XOR (logical for booleans)."""
    return _bind2(xor_p, x, y)


def _shift_parts(x, y):
    x, y = np.asarray(x), np.asarray(y)
    nbits = x.dtype.itemsize * 8
    ut = _unsigned(x.dtype)
    amount = y.view(_unsigned(y.dtype))  # negative amounts are out of range
    valid = amount < nbits
    return x, ut, nbits, valid, np.where(valid, amount, 0).astype(ut)


def _shift_left_impl(x, y):
    x, ut, nbits, valid, s = _shift_parts(x, y)
    out = np.where(valid, np.left_shift(x.view(ut), s), ut.type(0)).astype(ut)
    return out.view(x.dtype)


def _shift_right_logical_impl(x, y):
    x, ut, nbits, valid, s = _shift_parts(x, y)
    out = np.where(valid, np.right_shift(x.view(ut), s), ut.type(0)).astype(ut)
    return out.view(x.dtype)


def _shift_right_arithmetic_impl(x, y):
    # Out-of-range amounts fill with the sign bit; unsigned operands shift as signed.
    x, ut, nbits, valid, s = _shift_parts(x, y)
    st = _signed(x.dtype)
    s = np.where(valid, s, nbits - 1).astype(st)
    return np.asarray(np.right_shift(x.view(st), s), st).view(x.dtype)


shift_left_p = naryop("shift_left", _shift_left_impl, _int)
shift_right_arithmetic_p = naryop("shift_right_arithmetic", _shift_right_arithmetic_impl, _int)
shift_right_logical_p = naryop("shift_right_logical", _shift_right_logical_impl, _int)
for _p in (shift_left_p, shift_right_arithmetic_p, shift_right_logical_p):
    ad.defjvp_zero(_p)


def shift_left(x, y):
    """Elementwise ``x << y``; amounts outside ``[0, bits)`` give 0."""
    return _bind2(shift_left_p, x, y)


def shift_right_arithmetic(x, y):
    """Elementwise arithmetic ``x >> y`` (sign-filling); amounts outside ``[0, bits)``
    give all sign bits."""
    return _bind2(shift_right_arithmetic_p, x, y)


def shift_right_logical(x, y):
    """Elementwise logical ``x >> y`` (zero-filling); amounts outside ``[0, bits)`` give 0."""
    return _bind2(shift_right_logical_p, x, y)


_POPCOUNT_TABLE = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def _population_count_impl(x):
    x = _contiguous(x)
    flat = x.reshape(-1).view(np.uint8).reshape(-1, x.dtype.itemsize)
    counts = _POPCOUNT_TABLE[flat].sum(axis=1, dtype=np.int64)
    return counts.reshape(x.shape).astype(x.dtype)


def _clz_impl(x):
    x = np.asarray(x)
    nbits = x.dtype.itemsize * 8
    u = x.view(_unsigned(x.dtype)).astype(np.uint64)
    length = np.zeros(x.shape, np.int64)   # bit length, found by binary search
    for s in (32, 16, 8, 4, 2, 1):
        if s >= nbits:
            continue
        t = u >> np.uint64(s)
        m = t != 0
        length += np.where(m, s, 0)
        u = np.where(m, t, u)
    length += (u != 0)
    return (nbits - length).astype(x.dtype)


population_count_p = unop("population_count", _population_count_impl, _int)
clz_p = unop("clz", _clz_impl, _int)
ad.defjvp_zero(population_count_p)
ad.defjvp_zero(clz_p)


def population_count(x):
    """Elementwise number of set bits."""
    return population_count_p.bind(x)


def clz(x):
    """Elementwise number of leading zero bits."""
    return clz_p.bind(x)


# ----------------------------------------------------------------------------------------------
# special functions

def _nan_where(cond, out):
    return np.where(cond, np.nan, out)


def _digamma(x):
    # Poles at the non-positive integers give NaN (SciPy gives -inf at 0).
    return _nan_where((x <= 0) & (x == np.floor(x)), sps.psi(x))


def _polygamma(m, x):
    mi = np.where((m >= 0) & (m == np.floor(m)), m, 0)
    other = (-1.0) ** (mi + 1) * sps.gamma(mi + 1) * sps.zeta(mi + 1, x)
    out = np.where(mi == 0, _digamma(x), other)
    return _nan_where((m < 0) | (m != np.floor(m)), out)


def _zeta(x, q):
    return _nan_where((x < 1) | ~np.isfinite(q), sps.zeta(x, q))


def _lgamma(x):
    return np.where(x == -np.inf, np.inf, sps.gammaln(x))  # log|Gamma(-inf)| = inf


def _igamma(a, x):
    return _nan_where(np.isinf(a), sps.gammainc(a, x))


def _igammac(a, x):
    return _nan_where(np.isinf(a), sps.gammaincc(a, x))


erf_p = unop("erf", xla_math("erf", _math("erf")), _float)
erfc_p = unop("erfc", xla_math("erfc", _math("erfc")), _float)
erf_inv_p = unop("erf_inv", xla_math("erf_inv", _math("erfinv")), _float)
lgamma_p = unop("lgamma", xla_math("lgamma", _math(_lgamma)), _float)
digamma_p = unop("digamma", xla_math("digamma", _math(_digamma)), _float)
bessel_i0e_p = unop("bessel_i0e", xla_math("bessel_i0e", _math("i0e")), _float)
bessel_i1e_p = unop("bessel_i1e", xla_math("bessel_i1e", _math("i1e")), _float)
def _xla_math2(op, fallback):
    """A binary impl with JAX's bits (XLA's expansion, ``_xla_eager``) for float32/float64,
    half floats computed in float32 and rounded; ``fallback`` where no kernel applies."""
    def impl(x, y):
        dt = x.dtype
        if _is_half(dt):
            x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        if np.ndim(x) and np.ndim(y) and np.shape(x) != np.shape(y):
            x, y = np.broadcast_arrays(x, y)   # size-1 dimensions: the kernel's shapes
        name = op
        if op == "polygamma" and np.ndim(x) == 0 and np.size(y) > 1:
            name = "polygammas"     # one order for the whole array: XLA's scalar rewrites
        out = _xla_binary(name, x, y)
        return fallback(x, y).astype(dt) if out is None else as_dtype(out, dt)
    impl.__name__ = f"{op}_impl"
    return impl


polygamma_p = naryop("polygamma", _xla_math2("polygamma", _math(_polygamma)), _float)
zeta_p = naryop("zeta", _xla_math2("zeta", _math(_zeta)), _float)
igamma_p = naryop("igamma", _xla_math2("igamma", _math(_igamma)), _float)
igammac_p = naryop("igammac", _xla_math2("igammac", _math(_igammac)), _float)
def _betainc_impl(a, b, x):
    dt = x.dtype
    if _is_half(dt):     # computed in float32 and rounded, as JAX
        a, b, x = (np.asarray(v, np.float32) for v in (a, b, x))
    out = _xla_betainc(a, b, x)
    return _math("betainc")(a, b, x).astype(dt) if out is None else as_dtype(out, dt)


regularized_incomplete_beta_p = standard_primitive(
    "regularized_incomplete_beta", None, _betainc_impl)

_TWO_OVER_SQRT_PI = 2.0 / np.sqrt(np.pi)

ad.defjvp2(erf_p, lambda g, ans, x: mul(_const(x, _TWO_OVER_SQRT_PI),
                                       mul(g, exp(neg(square(x))))))
ad.defjvp2(erfc_p, lambda g, ans, x: mul(_const(x, -_TWO_OVER_SQRT_PI),
                                        mul(g, exp(neg(square(x))))))
ad.defjvp2(erf_inv_p, lambda g, ans, x: mul(_const(x, np.sqrt(np.pi) / 2.0),
                                           mul(g, exp(square(ans)))))
ad.defjvp2(lgamma_p, lambda g, ans, x: mul(g, digamma(x)))
ad.defjvp2(digamma_p, lambda g, ans, x: mul(g, polygamma(_const(x, 1), x)))
ad.defjvp2(bessel_i0e_p, lambda g, ans, x: mul(g, sub(bessel_i1e(x), mul(sign(x), ans))))


def _bessel_i1e_jvp(g, ans, x):
    # d/dx i1e = i0e - i1e * (sign(x) + 1/x); near 0 the limit 1/2 avoids 0 * inf.
    eps = float(ml_dtypes.finfo(get_aval(x).dtype).eps)
    not_tiny = gt(abs(x), _const(x, eps))
    safe_x = select(not_tiny, x, _full_like(x, eps))
    d = sub(bessel_i0e(safe_x), mul(ans, add(sign(safe_x), reciprocal(safe_x))))
    return mul(g, select(not_tiny, d, _full_like(x, 0.5)))


ad.defjvp2(bessel_i1e_p, _bessel_i1e_jvp)


def _polygamma_jvp_m(g, ans, m, x):
    raise ValueError("polygamma gradient with respect to m is not supported")


ad.defjvp2(polygamma_p, _polygamma_jvp_m,
          lambda g, ans, m, x: mul(g, polygamma(add(m, _const(m, 1)), x)))


def _igamma_jvp_x(g, ans, a, x):
    # d/dx P(a, x) = x**(a-1) exp(-x) / Gamma(a), as JAX orders it: exp((-x + (a - 1) log x)
    # - lgamma(a)) (its rounding; XLA contracts the product into the first add)
    return mul(g, exp(sub(add(neg(x), mul(sub(a, _const(a, 1)), log(x))), lgamma(a))))


ad.defjvp2(igamma_p, lambda g, ans, a, x: mul(g, igamma_grad_a(a, x)), _igamma_jvp_x)
ad.defjvp2(igammac_p, lambda g, ans, a, x: neg(mul(g, igamma_grad_a(a, x))),
          lambda g, ans, a, x: neg(_igamma_jvp_x(g, ans, a, x)))


# d/da of the regularized incomplete gamma function P(a, x) (SciPy has no routine).
# We write dP/da = exp(L) * T and evaluate T in float64:
# - small x (power series): P = exp(a log x - x - lgamma(a+1)) * sum_n u_n with
#   u_n = x**n / ((a+1)...(a+n)); differentiating term by term (the n = 0 term's 1/a**2
#   pieces cancel analytically, which keeps tiny ``a`` accurate) gives
#   T = sum_n u_n (log x - psi(a+1) - H_n), H_n = sum_{k=1..n} 1/(a+k), L = a log x - x - lgamma(a+1);
# - large x (continued fraction of Q = 1 - P = exp(L) * F, L = a log x - x - lgamma(a)):
#   T = -(F (log x - psi(a)) + dF/da), dF/da by forward-mode differentiation of the recurrence.
# random_gamma_grad = -(dP/da) / (dP/dx) with dP/dx = exp(a log x - x - lgamma(a)) / x,
# i.e. -(x/a) T for the series and -x T for the continued fraction (no under/overflow).

_MAX_TERMS = 4000


def _igamma_series_t(a, x):
    base = np.log(x) - sps.psi(a + 1.0)
    u = np.ones_like(a)
    h = np.zeros_like(a)
    total = base.copy()
    active = np.ones(a.shape, bool)
    n = 0
    while active.any() and n < _MAX_TERMS:
        n += 1
        u = np.where(active, u * x / (a + n), 0.0)
        h = h + 1.0 / (a + n)
        total = total + u * (base - h)
        active = active & (u * (np.abs(base) + h) > 1e-17 * np.abs(total))
    return total


def _igammac_cf_t(a, x):
    # The classic recurrence p_k/q_k for F (as in Cephes' igamc), with d/da carried along.
    y = 1.0 - a
    z = x + y + 1.0
    c = np.zeros_like(a)
    pkm2, qkm2, pkm1, qkm1 = np.ones_like(a), x.copy(), x + 1.0, z * x
    dpkm2, dqkm2, dpkm1, dqkm1 = np.zeros_like(a), np.zeros_like(a), np.zeros_like(a), -x
    f = pkm1 / qkm1
    df = (dpkm1 - f * dqkm1) / qkm1
    active = np.ones(a.shape, bool)
    n = 0
    big = 2.0 ** 512
    while active.any() and n < _MAX_TERMS:
        n += 1
        c = c + 1.0
        y = y + 1.0
        z = z + 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        dpk = dpkm1 * z - pkm1 - dpkm2 * yc + pkm2 * c
        dqk = dqkm1 * z - qkm1 - dqkm2 * yc + qkm2 * c
        ok = active & (qk != 0)
        safe_qk = np.where(qk != 0, qk, 1.0)
        r = pk / safe_qk
        dr = (dpk - r * dqk) / safe_qk
        conv = ok & (np.abs(r - f) <= 1e-16 * np.abs(r)) & \
            (np.abs(dr - df) <= 1e-15 * np.abs(dr))
        f = np.where(ok, r, f)
        df = np.where(ok, dr, df)
        pkm2, qkm2, pkm1, qkm1 = pkm1, qkm1, pk, qk
        dpkm2, dqkm2, dpkm1, dqkm1 = dpkm1, dqkm1, dpk, dqk
        scale = np.where(np.abs(pk) > big, 1.0 / big, 1.0)
        pkm2, qkm2, pkm1, qkm1 = pkm2 * scale, qkm2 * scale, pkm1 * scale, qkm1 * scale
        dpkm2, dqkm2, dpkm1, dqkm1 = dpkm2 * scale, dqkm2 * scale, dpkm1 * scale, dqkm1 * scale
        active = active & ~conv
    return -(f * (np.log(x) - sps.psi(a)) + df)


def _igamma_t(a, x):
    """Returns ``(a, x, L, T, series_mask, bad, zero)`` (see above), broadcast, float64."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    bad = ~np.isfinite(a) | ~np.isfinite(x) | (x < 0) | (a <= 0)
    zero = (x == 0) & ~bad
    use_cf = (x > 1) & (x > a) & ~bad
    use_series = ~use_cf & ~bad & ~zero
    t = np.zeros(a.shape)
    if use_series.any():
        t[use_series] = _igamma_series_t(a[use_series], x[use_series])
    if use_cf.any():
        t[use_cf] = _igammac_cf_t(a[use_cf], x[use_cf])
    with np.errstate(all="ignore"):
        lg = np.where(use_series, sps.gammaln(a + 1.0), sps.gammaln(a))
        log_scale = a * np.log(x) - x - lg
    return a, x, log_scale, t, use_series, bad, zero


def _igamma_grad_a_impl(a, x):
    a, x, log_scale, t, series, bad, zero = _igamma_t(a, x)
    with np.errstate(all="ignore"):
        out = np.where(zero, 0.0, np.exp(log_scale) * t)
    return np.where(bad, np.nan, out)


def _random_gamma_grad_impl(a, x):
    a, x, log_scale, t, series, bad, zero = _igamma_t(a, x)
    with np.errstate(all="ignore"):
        out = np.where(zero, 0.0, -x * t / np.where(series, a, 1.0))
    return np.where(bad, np.nan, out)


igamma_grad_a_p = naryop("igamma_grad_a", _xla_math2("igamma_grad_a", _math(_igamma_grad_a_impl)),
                         _float)
random_gamma_grad_p = naryop("random_gamma_grad",
                             _xla_math2("random_gamma_grad", _math(_random_gamma_grad_impl)),
                             _float)
# Like JAX, these two have no derivative rules of their own.


def _betainc_abstract_eval(a, b, x):
    for v in (a, b, x):
        check_dtype("regularized_incomplete_beta", v.dtype, _float)
    check_same_dtypes("regularized_incomplete_beta", [a, b, x])
    shape = check_same_shapes("regularized_incomplete_beta", [a, b, x])
    return ShapedArray(shape, a.dtype, standard_weak_type_rule(a.weak_type, b.weak_type,
                                                               x.weak_type))


regularized_incomplete_beta_p.abstract_eval = _betainc_abstract_eval
batching.broadcast_batcher(regularized_incomplete_beta_p)


def _betainc_grad_ab(g, ans, a, b, x):
    raise ValueError("Betainc gradient with respect to a and b not supported.")


def _betainc_jvp_x(g, ans, a, b, x):
    lbeta = sub(add(lgamma(a), lgamma(b)), lgamma(add(a, b)))
    one = _const(x, 1)
    return mul(g, exp(sub(add(mul(sub(b, one), log1p(neg(x))), mul(sub(a, one), log(x))),
                          lbeta)))


ad.defjvp2(regularized_incomplete_beta_p, _betainc_grad_ab, _betainc_grad_ab, _betainc_jvp_x)


def erf(x):
    """Elementwise error function."""
    return erf_p.bind(x)


def erfc(x):
    """Elementwise complementary error function ``1 - erf(x)``."""
    return erfc_p.bind(x)


def erf_inv(x):
    """Elementwise inverse error function (±inf at ±1, NaN outside [-1, 1])."""
    return erf_inv_p.bind(x)


def lgamma(x):
    """Elementwise log of the absolute value of the gamma function."""
    return lgamma_p.bind(x)


def digamma(x):
    """Elementwise digamma function (derivative of ``lgamma``); NaN at the poles."""
    return digamma_p.bind(x)


def polygamma(m, x):
    """Elementwise polygamma function of order ``m`` (a non-negative integer value)."""
    return _bind2(polygamma_p, m, x)


def zeta(x, q):
    """Elementwise Hurwitz zeta function ``sum_n (n + q) ** -x``."""
    return _bind2(zeta_p, x, q)


def igamma(a, x):
    """Elementwise regularized lower incomplete gamma function ``P(a, x)``."""
    return _bind2(igamma_p, a, x)


def igammac(a, x):
    """Elementwise regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``."""
    return _bind2(igammac_p, a, x)


def igamma_grad_a(a, x):
    """Elementwise derivative of ``igamma(a, x)`` with respect to ``a``."""
    return _bind2(igamma_grad_a_p, a, x)


def random_gamma_grad(a, x):
    """Elementwise derivative, with respect to ``a``, of a sample ``x`` of Gamma(a, 1)
    at fixed CDF value: ``-(dP/da) / (dP/dx)``."""
    return _bind2(random_gamma_grad_p, a, x)


def betainc(a, b, x):
    """Elementwise regularized incomplete beta function ``I_x(a, b)``."""
    a, x = _binargs(a, x)
    b, x = _binargs(b, x)
    a, b = _binargs(a, b)
    return regularized_incomplete_beta_p.bind(a, b, x)


def bessel_i0e(x):
    """Exponentially scaled modified Bessel function of order 0: ``exp(-|x|) I0(x)``."""
    return bessel_i0e_p.bind(x)


def bessel_i1e(x):
    """Exponentially scaled modified Bessel function of order 1: ``exp(-|x|) I1(x)``."""
    return bessel_i1e_p.bind(x)


# ----------------------------------------------------------------------------------------------
# clamp

def _clamp_abstract_eval(lo, x, hi):
    for v in (lo, x, hi):
        check_dtype("clamp", v.dtype, _any)
    check_same_dtypes("clamp", [lo, x, hi])
    if lo.shape and lo.shape != x.shape:
        raise TypeError("clamp requires min.shape == operand.shape or min.shape == (), got "
                        f"min.shape={lo.shape}, operand.shape={x.shape}.")
    if hi.shape and hi.shape != x.shape:
        raise TypeError("clamp requires max.shape == operand.shape or max.shape == (), got "
                        f"max.shape={hi.shape}, operand.shape={x.shape}.")
    return ShapedArray(x.shape, x.dtype,
                       standard_weak_type_rule(lo.weak_type, x.weak_type, hi.weak_type))


def _clamp_impl(lo, x, hi):
    # min(max(x, lo), hi): NaN propagates; if lo > hi the result is hi (as in XLA).
    if x.dtype.kind == "f" or x.dtype == _half_flush.BF16:
        # XLA's max/min: -0 below +0, bfloat16 subnormals read as zeros.
        return _half_flush.max_min(np.minimum, _half_flush.max_min(np.maximum, x, lo), hi)
    return as_dtype(np.minimum(np.maximum(x, lo), hi), x.dtype)


clamp_p = standard_primitive("clamp", _clamp_abstract_eval, _clamp_impl)


def _clamp_jvp_lo(g, ans, lo, x, hi):
    shape = get_aval(x).shape
    lo, hi = _bcast_to(lo, shape), _bcast_to(hi, shape)
    return select(bitwise_and(gt(lo, x), lt(lo, hi)), _bcast_to(g, shape), _full_like(x, 0))


def _clamp_jvp_x(g, ans, lo, x, hi):
    shape = get_aval(x).shape
    lo, hi = _bcast_to(lo, shape), _bcast_to(hi, shape)
    return select(bitwise_and(gt(x, lo), lt(x, hi)), g, _full_like(x, 0))


def _clamp_jvp_hi(g, ans, lo, x, hi):
    shape = get_aval(x).shape
    return select(lt(_bcast_to(hi, shape), x), _bcast_to(g, shape), _full_like(x, 0))


ad.defjvp2(clamp_p, _clamp_jvp_lo, _clamp_jvp_x, _clamp_jvp_hi)


def _clamp_batch(axis_data, vals, dims):
    lo, x, hi = vals
    dlo, dx, dhi = dims
    size = axis_data.size
    x_shape = get_aval(x).shape if dx is None else \
        get_aval(x).shape[:dx] + get_aval(x).shape[dx + 1:]
    full = (size,) + tuple(x_shape)
    args = []
    for i, (v, d) in enumerate(zip(vals, dims)):
        if d is None and i != 1 and get_aval(v).ndim == 0:
            args.append(v)   # an unbatched scalar bound stays a scalar
            continue
        v = batching.bdim_at_front(v, d, size)
        if get_aval(v).shape != full:   # a batched scalar bound: one value per example
            v = broadcast_in_dim(v, full, (0,))
        args.append(v)
    return clamp_p.bind(*args), 0


batching.batch_rules[clamp_p] = _clamp_batch


def clamp(min, x, max):  # noqa: A002
    """Elementwise ``min(max(x, min), max)``; ``min``/``max`` may be scalars."""
    return clamp_p.bind(_scalar_like(min, x), x, _scalar_like(max, x))


# ----------------------------------------------------------------------------------------------
# reduce_precision

def _reduce_precision_abstract_eval(x, *, exponent_bits, mantissa_bits):
    check_dtype("reduce_precision", x.dtype, _float)
    if exponent_bits < 1:
        raise ValueError(f"reduce_precision: exponent_bits must be positive; got {exponent_bits}")
    if mantissa_bits < 0:
        raise ValueError("reduce_precision: mantissa_bits must be non-negative; got "
                         f"{mantissa_bits}")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _reduce_precision_impl(x, *, exponent_bits, mantissa_bits):
    """Round to the nearest value with ``exponent_bits``/``mantissa_bits`` (ties to even),
    overflowing to inf and flushing what would be subnormal to (signed) zero. Works on
    the bit pattern, like XLA's ReducePrecision."""
    x = _contiguous(x)
    dt = x.dtype
    info = ml_dtypes.finfo(dt)
    src_m, src_e = int(info.nmant), int(info.nexp)
    nbits = dt.itemsize * 8
    ut = _unsigned(dt).type
    u = x.view(_unsigned(dt)).copy()
    if mantissa_bits < src_m:
        shift = ut(src_m - mantissa_bits)
        last = ut(1) << shift
        last_bit = (u & last) >> shift
        bias = last_bit + ((last >> ut(1)) - ut(1))
        u = (u + bias) & ~(last - ut(1))
    if exponent_bits < src_e:
        sign_mask = ut(1) << ut(nbits - 1)
        exp_mask = ut(((1 << src_e) - 1) << src_m)
        src_bias = (1 << (src_e - 1)) - 1
        red_bias = (1 << (exponent_bits - 1)) - 1
        exponent = u & exp_mask
        over = exponent > ut((src_bias + red_bias) << src_m)
        under = exponent <= ut((src_bias - red_bias) << src_m)
        signed_zero = u & sign_mask
        u = np.where(over, signed_zero | exp_mask, np.where(under, signed_zero, u))
    out = np.asarray(u, _unsigned(dt)).view(dt)
    return np.where(np.isnan(x), x, out).astype(dt)


reduce_precision_p = standard_primitive("reduce_precision", _reduce_precision_abstract_eval,
                                        _reduce_precision_impl)
batching.vectorized_batcher(reduce_precision_p)
ad.deflinear2(reduce_precision_p, lambda ct, x, **params: [
    Zero(x.aval) if type(ct) is Zero else reduce_precision_p.bind(ct, **params)])


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """Round ``operand`` to a float format with the given exponent and mantissa widths,
    keeping its dtype (e.g. ``(5, 10)`` emulates float16, ``(8, 7)`` bfloat16)."""
    import operator
    return reduce_precision_p.bind(operand, exponent_bits=operator.index(exponent_bits),
                                   mantissa_bits=operator.index(mantissa_bits))


# ----------------------------------------------------------------------------------------------
# bitcast_convert_type

def _bitcast_abstract_eval(x, *, new_dtype):
    old = np.dtype(x.dtype)
    new = np.dtype(new_dtype)
    if old != new and (old == np.bool_ or old.kind == "c" or new == np.bool_ or
                       new.kind == "c"):
        raise TypeError("lax.bitcast_convert_type does not support bool or complex values "
                        "unless the operand and destination types match. "
                        f"Got operand dtype={old.name}, new_dtype={new.name}. "
                        "Consider using the arr.view() method instead.")
    ob, nb = old.itemsize * 8, new.itemsize * 8
    if ob == nb:
        shape = x.shape
    elif ob > nb:
        shape = (*x.shape, ob // nb)
    else:
        dim = x.shape[-1] if x.shape else 1
        if dim * ob != nb:
            raise ValueError(f"Attempting to convert array of shape {x.shape} from {old.name} "
                             f"of size {ob} bits to {new.name} of size {nb}, bits but "
                             f"{dim} * {ob} != {nb}")
        shape = x.shape[:-1]
    return ShapedArray(shape, new, False)


def _bitcast_impl(x, *, new_dtype):
    x = _contiguous(x)
    new = np.dtype(new_dtype)
    ob, nb = x.dtype.itemsize, new.itemsize
    if ob == nb:
        return x.view(new)
    if ob > nb:
        return x.reshape(x.shape + (1,)).view(new)
    return x.view(new).reshape(x.shape[:-1])


bitcast_convert_type_p = standard_primitive("bitcast_convert_type", _bitcast_abstract_eval,
                                            _bitcast_impl, weak_type_rule=false_weak_type_rule)
ad.defjvp_zero(bitcast_convert_type_p)


def _bitcast_batch(axis_data, vals, dims, *, new_dtype):
    (x,), (d,) = vals, dims
    # The op adds or removes a trailing axis, so the batch axis must not be the last one.
    if np.dtype(new_dtype).itemsize != get_aval(x).dtype.itemsize:
        x, d = batching.moveaxis(x, d, 0), 0
    return bitcast_convert_type_p.bind(x, new_dtype=new_dtype), d


batching.batch_rules[bitcast_convert_type_p] = _bitcast_batch


def bitcast_convert_type(operand, new_dtype):
    """Reinterpret the bits of ``operand`` as ``new_dtype``. A narrower type adds a
    trailing axis (of the width ratio); a wider one consumes the trailing axis."""
    new_dtype = dtypes.check_and_canonicalize_user_dtype(new_dtype, "bitcast_convert_type")
    return bitcast_convert_type_p.bind(operand, new_dtype=np.dtype(new_dtype))


__all__ = [
    "RoundingMethod",
    "sign", "floor", "ceil", "round", "is_finite", "exp2", "log1p", "expm1", "logistic",
    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh",
    "sqrt", "rsqrt", "cbrt", "abs", "reciprocal", "pow", "rem", "nextafter",
    "real", "imag", "complex", "conj",
    "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor",
    "shift_left", "shift_right_arithmetic", "shift_right_logical", "population_count", "clz",
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "polygamma", "zeta", "igamma", "igammac",
    "igamma_grad_a", "random_gamma_grad", "betainc", "bessel_i0e", "bessel_i1e",
    "clamp", "reduce_precision", "bitcast_convert_type",
    "sign_p", "floor_p", "ceil_p", "round_p", "is_finite_p", "exp2_p", "log1p_p", "expm1_p",
    "logistic_p", "tan_p", "asin_p", "acos_p", "atan_p", "atan2_p", "sinh_p", "cosh_p",
    "asinh_p", "acosh_p", "atanh_p", "sqrt_p", "rsqrt_p", "cbrt_p", "abs_p", "pow_p", "rem_p",
    "nextafter_p", "real_p", "imag_p", "complex_p", "conj_p", "not_p", "and_p", "or_p",
    "xor_p", "shift_left_p", "shift_right_arithmetic_p", "shift_right_logical_p",
    "population_count_p", "clz_p", "erf_p", "erfc_p", "erf_inv_p", "lgamma_p", "digamma_p",
    "polygamma_p", "zeta_p", "igamma_p", "igammac_p", "igamma_grad_a_p", "random_gamma_grad_p",
    "regularized_incomplete_beta_p", "bessel_i0e_p", "bessel_i1e_p", "clamp_p",
    "reduce_precision_p", "bitcast_convert_type_p",
]
