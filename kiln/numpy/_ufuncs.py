"""Elementwise functions (NumPy's ufuncs) with NumPy broadcasting and JAX promotion.

Each function checks its arguments (``check_arraylike``), promotes dtypes as JAX
does (``promote_dtypes*``), broadcasts shapes with ``lax.broadcast_in_dim`` and then
applies ``lax`` primitives, so it works on Arrays and on every kind of tracer.

What it must not hold: NumPy computation on traced values.
"""
from __future__ import annotations

import operator
import sys
import warnings

import numpy as np

from kiln import dtypes, lax
from kiln._fp_warnings import call_quietly
from kiln.array import Array, make_array
from kiln.config import config
from kiln.core.trace import Tracer, get_aval
from kiln.custom_derivatives import custom_jvp
from kiln.numpy import _eager, _util
from kiln.numpy._error import _set_error_if_divide_by_zero, _set_error_if_nan
from kiln.numpy._logaddexp import logaddexp, logaddexp2
from kiln.numpy._util import (
    as_operand,
    broadcast_operands,
    check_arraylike,
    ensure_arraylike,
    promote_args,
    promote_args_inexact,
    promote_args_numeric,
    promote_dtypes_inexact,
    promote_dtypes_numeric,
    promote_shapes,
)

_kind_cache: dict = {}


def _dtype_kind(dt) -> str:
    k = _kind_cache.get(dt)
    if k is not None:
        return k
    if dt == np.bool_:
        k = "b"
    elif dtypes.issubdtype(dt, np.complexfloating):
        k = "c"
    elif dtypes.issubdtype(dt, np.floating):
        k = "f"
    elif dtypes.issubdtype(dt, np.unsignedinteger):
        k = "u"
    elif dtypes.issubdtype(dt, np.integer):
        k = "i"
    elif isinstance(dt, dtypes.ExtendedDType):
        k = "k"       # typed keys: the lax operation raises JAX's error
    else:
        raise TypeError(f"unsupported dtype {dt}")
    _kind_cache[dt] = k
    return k


def _kind(x) -> str:
    """'b', 'i', 'u', 'f' or 'c' for an operand (ml_dtypes floats count as 'f')."""
    return _dtype_kind(x.dtype if isinstance(x, (Array, Tracer)) else get_aval(x).dtype)


def _const(x, value):
    """A scalar of ``x``'s dtype, weak like ``x``, broadcast to ``x``'s shape."""
    a = get_aval(x)
    return _util.broadcast_to(make_array(np.asarray(value, a.dtype), a.weak_type), a.shape)


def _strong_const(x, value):
    """A strong scalar of ``x``'s dtype broadcast to ``x``'s shape: JAX's ``_constant_like``
    (where JAX's function uses it, the result is not weak even for a weak ``x``)."""
    a = get_aval(x)
    return _util.broadcast_to(make_array(np.asarray(value, a.dtype), False), a.shape)


def _zeros_bool(x):
    return _util.full_const(get_aval(x).shape, False, np.bool_)


def _ones_bool(x):
    return _util.full_const(get_aval(x).shape, True, np.bool_)


def _rounding_nearest_even():
    rm = getattr(lax, "RoundingMethod", None)
    return rm.TO_NEAREST_EVEN if rm is not None else 1


# ----------------------------------------------------------------------------------------------
# factories


def _unary_inexact(name, fn, doc, check_nan=False):
    # check_nan: JAX's jax_error_checking_behavior_nan check of the result.
    def f(x, /):
        x = ensure_arraylike(name, x)
        (x,) = promote_dtypes_inexact(x)
        out = fn(x)
        if check_nan:
            _set_error_if_nan(out)
        return out
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


def _binary_inexact(name, fn, doc):
    def f(x1, x2, /):
        x1, x2 = promote_args_inexact(name, x1, x2)
        return fn(x1, x2)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


# ----------------------------------------------------------------------------------------------
# arithmetic


def add(x1, x2, /):
    """Elementwise ``x1 + x2`` (logical or on booleans)."""
    x1, x2 = promote_args("add", x1, x2)
    if _kind(x1) == "b":
        return lax.bitwise_or(x1, x2)
    out = lax.add(x1, x2)
    _set_error_if_nan(out)
    return out


def subtract(x1, x2, /):
    """Elementwise ``x1 - x2``."""
    x1, x2 = promote_args("subtract", x1, x2)
    if _kind(x1) == "b":
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    out = lax.sub(x1, x2)
    _set_error_if_nan(out)
    return out


def _bool_array(x) -> bool:
    """Whether ``x`` is a boolean array operand (not a Python or NumPy scalar constant)."""
    return isinstance(x, (Array, Tracer, np.ndarray)) and get_aval(x).dtype == np.bool_


def multiply(x1, x2, /):
    """Elementwise ``x1 * x2`` (logical and on booleans).

    A number times a boolean array of the result's shape is ``where(b, x, 0)``, as JAX
    computes it: XLA rewrites ``x * convert(b)`` into a select, so ``inf * False`` and
    ``nan * False`` are ``0`` (NumPyro's ``binary_cross_entropy_with_logits`` relies on
    it). A Python or NumPy ``bool`` scalar is a constant and multiplies (``inf * 0`` is
    NaN), and so does a boolean array that must broadcast, as on JAX.
    """
    b1, b2 = _bool_array(x1), _bool_array(x2)
    p1, p2 = x1, x2
    x1, x2 = promote_args("multiply", x1, x2)
    kind = _kind(x1)
    if kind == "b":
        return lax.bitwise_and(x1, x2)
    if b1 != b2 and kind in "fc":
        pred, other = (p1, x2) if b1 else (p2, x1)
        dt = get_aval(other).dtype
        shape = np.broadcast_shapes(np.shape(x1), np.shape(x2))
        # XLA's CPU code computes bfloat16 in float32 (a second convert hides the pattern).
        if np.shape(pred) == shape and dt != dtypes.bfloat16:
            if np.shape(other) != shape:
                nd = np.ndim(other)
                other = lax.broadcast_in_dim(other, shape,
                                             tuple(range(len(shape) - nd, len(shape))))
            return lax.select(pred, other, lax.full_like(other, 0))
    return lax.mul(x1, x2)


def true_divide(x1, x2, /):
    """Elementwise ``x1 / x2``; integers are promoted to the default float first."""
    x1, x2 = promote_args_inexact("true_divide", x1, x2)
    _set_error_if_divide_by_zero(x2)
    out = lax.div(x1, x2)
    _set_error_if_nan(out)
    return out


def divide(x1, x2, /):
    """Alias of :func:`kiln.numpy.true_divide` (its own function, named ``divide``, as
    JAX's)."""
    return true_divide(x1, x2)


def _float_divmod(x1, x2):
    # Python semantics: the remainder takes the sign of the divisor.
    # As in JAX: x / ±0 keeps x (not x - nan), so the quotient is ±inf rather than nan.
    mod = lax.rem(x1, x2)
    div = lax.div(lax.select(lax.eq(x2, _const(x2, 0)), x1, lax.sub(x1, mod)), x2)
    ind = lax.bitwise_and(lax.ne(mod, _const(mod, 0)), lax.ne(lax.sign(x2), lax.sign(mod)))
    mod_plus, div_minus = lax.add(mod, x2), lax.sub(div, _const(div, 1))
    # JAX computes these two with jnp's ``+``/``-``, so they are checked for NaNs.
    _set_error_if_nan(mod_plus)
    _set_error_if_nan(div_minus)
    mod = lax.select(ind, mod_plus, mod)
    div = lax.select(ind, div_minus, div)
    return lax.round(div, _rounding_nearest_even()), mod


def _eager_int(npfn, x1, x2, zero_ok):
    """NumPy's value of ``npfn`` for eager integer Arrays of one dtype, when it is JAX's:
    NumPy's integer ``floor_divide``, ``remainder`` and ``fmod`` are, INT_MIN and -1
    included, except ``floor_divide`` by zero (``zero_ok=False``: then None). Else None."""
    if type(x1) is Array and type(x2) is Array and _eager.eager():
        a, b = x1._value, x2._value
        if a.dtype is b.dtype and a.dtype.kind in "iu" and (zero_ok or b.all()):
            try:
                r = call_quietly(npfn, a, b)    # x % 0, fmod(x, 0): NumPy would warn
            except ValueError:      # shapes don't broadcast: the general path raises
                return None
            return make_array(_eager.as_ndarray(r), x1.weak_type and x2.weak_type)
    return None


def floor_divide(x1, x2, /):
    """Elementwise ``x1 // x2`` (rounding toward minus infinity)."""
    if config.jax_error_checking_behavior_divide == "raise":
        _set_error_if_divide_by_zero(promote_args_numeric("floor_divide", x1, x2)[1])
    r = _eager_int(np.floor_divide, x1, x2, False)
    if r is not None:
        return r
    # lax.select needs one shape (JAX: its ``_where`` broadcasts)
    x1, x2 = broadcast_operands("floor_divide", *promote_args_numeric("floor_divide", x1, x2))
    k = _kind(x1)
    if k == "i":
        # lax.div truncates toward zero; step down when the signs differ and it is inexact.
        # As JAX: compare signs with ``sign`` (so x // 0 follows XLA's div/rem by zero).
        q = lax.div(x1, x2)
        zero = _const(x1, 0)
        select = lax.bitwise_and(lax.ne(lax.sign(x1), lax.sign(x2)),
                                 lax.ne(lax.rem(x1, x2), zero))
        return lax.select(select, lax.sub(q, _const(q, 1)), q)
    if k == "u":
        return lax.div(x1, x2)
    if k == "c":
        raise TypeError("floor_divide does not support complex-valued inputs")
    return _float_divmod(x1, x2)[0]


def remainder(x1, x2, /):
    """Elementwise remainder with the sign of the divisor (Python's ``%``)."""
    if config.jax_error_checking_behavior_divide == "raise":
        _set_error_if_divide_by_zero(promote_args_numeric("remainder", x1, x2)[1])
    r = _eager_int(np.remainder, x1, x2, True)
    if r is not None:
        return r
    x1, x2 = promote_args_numeric("remainder", x1, x2)
    if _kind(x1) == "c":
        raise TypeError("remainder does not support complex-valued inputs")
    if _kind(x2) in "iu":
        # As JAX: an integer remainder by zero is 0.
        x2 = lax.select(lax.eq(x2, _const(x2, 0)), _const(x2, 1), x2)
    trunc_mod = lax.rem(x1, x2)
    if _kind(x1) == "u":
        return trunc_mod
    zero = _const(trunc_mod, 0)
    fix = lax.bitwise_and(lax.ne(trunc_mod, zero),
                   lax.ne(lax.lt(trunc_mod, zero), lax.lt(x2, _const(x2, 0))))
    out = lax.select(fix, lax.add(trunc_mod, x2), trunc_mod)
    _set_error_if_nan(out)
    return out


def mod(x1, x2, /):
    """Alias of :func:`kiln.numpy.remainder` (its own function, as JAX's)."""
    return remainder(x1, x2)


def fmod(x1, x2, /):
    """Elementwise remainder with the sign of the dividend (C's ``fmod``)."""
    r = _eager_int(np.fmod, x1, x2, True)
    if r is not None:
        return r
    x1, x2 = promote_args_numeric("fmod", x1, x2)
    if _kind(x1) == "c":
        raise TypeError("fmod does not support complex-valued inputs")
    if _kind(x1) in "iu":
        # As JAX: an integer fmod by zero is 0 (the divisor is replaced by 1), where
        # lax.rem gives the dividend.
        x2 = lax.select(lax.eq(x2, _const(x2, 0)), _const(x2, 1), x2)
    out = lax.rem(x1, x2)
    _set_error_if_nan(out)
    return out


def divmod(x1, x2, /):  # noqa: A001
    """``(floor_divide(x1, x2), remainder(x1, x2))``."""
    x1, x2 = broadcast_operands("divmod", *promote_args_numeric("divmod", x1, x2))
    if _kind(x1) in "fc":
        if _kind(x1) == "c":
            raise TypeError("divmod does not support complex-valued inputs")
        _set_error_if_divide_by_zero(x2)
        return _float_divmod(x1, x2)
    return floor_divide(x1, x2), remainder(x1, x2)


def _static_int_exponent(x2):
    """The Python int value of a concrete integer scalar, else None."""
    if isinstance(x2, Tracer) or isinstance(x2, bool):
        return None
    if isinstance(x2, int):
        return x2
    if isinstance(x2, (Array, np.ndarray, np.generic)) and np.ndim(x2) == 0:
        try:
            return operator.index(x2)
        except TypeError:
            return None
    return None


def _integer_pow(x1, n):
    if _kind(x1) in "iu" and n < 0:
        raise TypeError(f"Integers cannot be raised to negative powers, got "
                        f"integer_pow({get_aval(x1).str_short()}, {n})")
    return lax.integer_pow(x1, n)


def _pow_int_int(x1, x2):
    # Binary exponentiation; six squarings cover every exponent that does not overflow
    # for |x1| > 1 (as JAX does). Negative exponents give 0 (except for bases ±1).
    x1, x2 = broadcast_operands("power", x1, x2)     # select needs one shape
    zero, one = _const(x2, 0), _const(x2, 1)
    acc = lax.select(lax.bitwise_and(lax.eq(x1, _const(x1, 0)), lax.ne(x2, zero)),
                     _const(x1, 0), _const(x1, 1))
    base, e = x1, x2
    for _ in range(6):
        acc = lax.select(lax.ne(lax.bitwise_and(e, one), zero), lax.mul(acc, base), acc)
        base = lax.mul(base, base)
        e = lax.shift_right_logical(e, one)
    return acc


def power(x1, x2, /):
    """Elementwise ``x1 ** x2``. A concrete integer exponent uses ``lax.integer_pow``."""
    check_arraylike("power", x1, x2)
    n = _static_int_exponent(x2)
    if n is not None:
        (x1,) = promote_dtypes_numeric(x1)
        return _integer_pow(x1, n)
    a1, a2 = promote_shapes("power", as_operand(x1), as_operand(x2))
    p1, p2 = promote_args_numeric("power", a1, a2)
    if _kind(p1) in "iu":
        return _pow_int_int(p1, p2)
    if _kind(a1) in "fc" and _kind(a2) in "iu":
        out = lax.pow(a1, a2)
    else:
        out = lax.pow(p1, p2)
    _set_error_if_nan(out)
    return out


def pow(x1, x2, /):  # noqa: A001
    """Alias of :func:`kiln.numpy.power` (its own function, as JAX's)."""
    return power(x1, x2)


def float_power(x1, x2, /):
    """``x1 ** x2`` computed in the default float (or complex) precision."""
    x1, x2 = promote_args_inexact("float_power", x1, x2)
    out = lax.pow(x1, x2)
    _set_error_if_nan(out)
    return out


def negative(x, /):
    """Elementwise ``-x``."""
    x = ensure_arraylike("negative", x)
    if _kind(x) == "b":
        raise TypeError("The numpy boolean negative, the `-` operator, is not supported, use "
                        "the `~` operator or the logical_not function instead.")
    return lax.neg(x)


def positive(x, /):
    """Elementwise ``+x``."""
    return ensure_arraylike("positive", x)


def absolute(x, /):
    """Elementwise absolute value (complex → magnitude)."""
    x = ensure_arraylike("absolute", x)
    if _kind(x) in "bu":
        return x
    return lax.abs(x)


abs = absolute  # noqa: A001


def fabs(x, /):
    """Absolute value as a float (complex inputs are rejected)."""
    x = ensure_arraylike("fabs", x)
    (x,) = promote_dtypes_inexact(x)
    if _kind(x) == "c":
        raise TypeError("ufunc 'fabs' does not support complex dtypes")
    return lax.abs(x)


def isin(element, test_elements, assume_unique=False, invert=False, *, method="auto"):
    """Elementwise membership of ``element`` in ``test_elements``."""
    check_arraylike("isin", element, test_elements)
    element, test_elements = _util.promote_dtypes(element, test_elements)
    shape = element.shape
    n, m = element.size, test_elements.size
    e = lax.broadcast_in_dim(lax.reshape(element, (n,)), (n, m), (0,))
    t = lax.broadcast_in_dim(lax.reshape(test_elements, (m,)), (n, m), (1,))
    found = lax.reduce_or(lax.eq(e, t), (1,)) if m else _util.full_const((n,), False, np.bool_)
    if invert:
        found = lax.bitwise_not(found)
    return lax.reshape(found, shape)


def sign(x, /):
    """Elementwise sign: -1, 0 or 1 (``x / |x|`` for complex)."""
    x = ensure_arraylike("sign", x)
    if _kind(x) == "b":
        return x
    return lax.sign(x)


def square(x, /):
    """Elementwise ``x * x``."""
    x = ensure_arraylike("square", x)
    (x,) = promote_dtypes_numeric(x)
    return lax.square(x)        # JAX's primitive (complex: XLA's expansion, not z * z)


def reciprocal(x, /):
    """Elementwise ``1 / x`` in inexact precision."""
    x = ensure_arraylike("reciprocal", x)
    (x,) = promote_dtypes_inexact(x)
    return lax.integer_pow(x, -1)


sqrt = _unary_inexact("sqrt", lambda x: lax.sqrt(x), "Elementwise square root.", check_nan=True)
cbrt = _unary_inexact("cbrt", lambda x: lax.cbrt(x), "Elementwise cube root.")
exp = _unary_inexact("exp", lambda x: lax.exp(x), "Elementwise e**x.")
exp2 = _unary_inexact("exp2", lambda x: lax.exp2(x), "Elementwise 2**x.")
expm1 = _unary_inexact("expm1", lambda x: lax.expm1(x), "Elementwise e**x - 1.")
log = _unary_inexact("log", lambda x: lax.log(x), "Elementwise natural logarithm.", check_nan=True)
log1p = _unary_inexact("log1p", lambda x: lax.log1p(x), "Elementwise log(1 + x).", check_nan=True)
# log(x) / log(2) with a scalar divisor: XLA folds log(2) and multiplies by its reciprocal
# (kiln/compiler/passes/xla_divide.py; eagerly kiln's div does the same).
def _log_base(x, scale):
    """``scale(log(x))`` of a real ``x``; of a complex one, applied to the real and the
    imaginary part apart, with the scale a real constant (as JAX: a complex product or
    quotient would turn ``log(0) = -inf + 0j`` into ``-inf + nan j``)."""
    r = lax.log(x)
    if get_aval(x).dtype.kind != "c":
        return scale(r)
    return lax.complex(scale(lax.real(r)), scale(lax.imag(r)))


def _real_const(x, value):
    return make_array(np.asarray(value, dtypes.finfo(get_aval(x).dtype).dtype), False)


log2 = _unary_inexact("log2", lambda x: _log_base(x, lambda r: lax.div(
                          r, lax.log(_real_const(r, 2)))),
                      "Elementwise base-2 logarithm.", check_nan=True)
# JAX 0.10 multiplies by log10(e) (NumPy's value rounded to the dtype): not a division.
log10 = _unary_inexact("log10", lambda x: _log_base(x, lambda r: lax.mul(
                           r, _strong_const(r, np.log10(np.e)))),
                       "Elementwise base-10 logarithm.", check_nan=True)
sin = _unary_inexact("sin", lambda x: lax.sin(x), "Elementwise sine.", check_nan=True)
cos = _unary_inexact("cos", lambda x: lax.cos(x), "Elementwise cosine.", check_nan=True)
tan = _unary_inexact("tan", lambda x: lax.tan(x), "Elementwise tangent.", check_nan=True)
arcsin = _unary_inexact("arcsin", lambda x: lax.asin(x), "Elementwise inverse sine.",
                        check_nan=True)
arccos = _unary_inexact("arccos", lambda x: lax.acos(x), "Elementwise inverse cosine.",
                        check_nan=True)
arctan = _unary_inexact("arctan", lambda x: lax.atan(x), "Elementwise inverse tangent.")
sinh = _unary_inexact("sinh", lambda x: lax.sinh(x), "Elementwise hyperbolic sine.")
cosh = _unary_inexact("cosh", lambda x: lax.cosh(x), "Elementwise hyperbolic cosine.")
tanh = _unary_inexact("tanh", lambda x: lax.tanh(x), "Elementwise hyperbolic tangent.")
arcsinh = _unary_inexact("arcsinh", lambda x: lax.asinh(x), "Elementwise inverse sinh.")
arccosh = _unary_inexact("arccosh", lambda x: lax.acosh(x), "Elementwise inverse cosh.",
                         check_nan=True)
arctanh = _unary_inexact("arctanh", lambda x: lax.atanh(x), "Elementwise inverse tanh.",
                         check_nan=True)
# The array API's names: functions of their own (named so, as JAX's), same checks.
asin = _unary_inexact("asin", lambda x: lax.asin(x), "Alias of :func:`kiln.numpy.arcsin`.",
                      check_nan=True)
acos = _unary_inexact("acos", lambda x: lax.acos(x), "Alias of :func:`kiln.numpy.arccos`.",
                      check_nan=True)
atan = _unary_inexact("atan", lambda x: lax.atan(x), "Alias of :func:`kiln.numpy.arctan`.")
asinh = _unary_inexact("asinh", lambda x: lax.asinh(x), "Alias of :func:`kiln.numpy.arcsinh`.")
acosh = _unary_inexact("acosh", lambda x: lax.acosh(x), "Alias of :func:`kiln.numpy.arccosh`.",
                       check_nan=True)
atanh = _unary_inexact("atanh", lambda x: lax.atanh(x), "Alias of :func:`kiln.numpy.arctanh`.",
                       check_nan=True)

arctan2 = _binary_inexact("arctan2", lambda a, b: lax.atan2(a, b),
                          "Elementwise arctangent of ``x1 / x2`` using the signs of both.")
atan2 = arctan2


def deg2rad(x, /):
    """Convert degrees to radians."""
    x = ensure_arraylike("deg2rad", x)
    (x,) = promote_dtypes_inexact(x)
    return lax.mul(x, _const(x, np.pi / 180))


def rad2deg(x, /):
    """Convert radians to degrees."""
    x = ensure_arraylike("rad2deg", x)
    (x,) = promote_dtypes_inexact(x)
    return lax.mul(x, _const(x, 180 / np.pi))


radians = deg2rad
degrees = rad2deg


def hypot(x1, x2, /):
    """Elementwise ``sqrt(x1**2 + x2**2)`` without undue overflow."""
    x1, x2 = promote_args_inexact("hypot", x1, x2)
    if _kind(x1) == "c":
        raise TypeError("hypot does not support complex-valued inputs")
    a1, a2 = lax.abs(x1), lax.abs(x2)
    big, small = lax.max(a1, a2), lax.min(a1, a2)
    safe = lax.select(lax.eq(big, _const(big, 0)), _const(big, 1), big)
    r = lax.div(small, safe)
    out = lax.mul(big, lax.sqrt(lax.add(_const(r, 1), lax.mul(r, r))))
    inf = lax.bitwise_or(lax.eq(a1, _const(a1, np.inf)), lax.eq(a2, _const(a2, np.inf)))
    return lax.select(inf, _const(out, np.inf), out)


# ----------------------------------------------------------------------------------------------
# rounding


def _round_int_passthrough(name, fn, doc):
    def f(x, /):
        x = ensure_arraylike(name, x)
        k = _kind(x)
        if k in "biu":
            return x
        if k == "c":
            raise TypeError(f"{name} does not support complex-valued inputs")
        return fn(x)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


floor = _round_int_passthrough("floor", lambda x: lax.floor(x), "Elementwise floor.")
ceil = _round_int_passthrough("ceil", lambda x: lax.ceil(x), "Elementwise ceiling.")


def _trunc(x):
    return lax.select(lax.lt(x, _const(x, 0)), lax.ceil(x), lax.floor(x))


trunc = _round_int_passthrough("trunc", _trunc, "Round toward zero.")


def rint(x, /):
    """Round to the nearest integer (ties to even); integers become floats."""
    x = ensure_arraylike("rint", x)
    k = _kind(x)
    if k in "biu":
        return lax.convert_element_type(x, dtypes.default_float_dtype())
    if k == "c":
        return lax.complex(rint(lax.real(x)), rint(lax.imag(x)))
    return lax.round(x, _rounding_nearest_even())


def round(a, decimals=0, out=None):  # noqa: A001
    """Round to ``decimals`` decimal places (ties to even)."""
    a = ensure_arraylike("round", a)
    decimals = _util.core_int(decimals, "The 'decimals' argument of jnp.round must be static.")
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.round is not supported.")
    k = _kind(a)
    if k in "biu":
        if decimals < 0:
            raise NotImplementedError("integer np.round not implemented for decimals < 0")
        return a
    dt = get_aval(a).dtype

    def _round_float(x):
        if decimals == 0:
            return lax.round(x, _rounding_nearest_even())
        if dt == np.float16:
            x = lax.convert_element_type(x, np.float32)
        factor = _const(x, 10.0 ** decimals)
        r = lax.div(lax.round(lax.mul(x, factor), _rounding_nearest_even()), factor)
        return lax.convert_element_type(r, dt) if dt == np.float16 else r

    if decimals > np.log10(float(dtypes.finfo(dt).max)):
        return a
    if k == "c":
        return lax.complex(_round_float(lax.real(a)), _round_float(lax.imag(a)))
    return _round_float(a)


around = round


# ----------------------------------------------------------------------------------------------
# comparisons, extrema


def _is_key(x) -> bool:
    """Whether ``x`` is a typed PRNG key array (``kiln.random`` loaded lazily)."""
    keys = sys.modules.get("kiln.random._keys")
    return keys is not None and isinstance(x, keys.PRNGKeyArray)


def _keys_equal(name, a, b):
    """Elementwise equality of two typed key arrays (whole keys compared); JAX's TypeError
    when only one operand is a key array."""
    if not (_is_key(a) and _is_key(b)):
        def dt(x):
            return str(x.dtype) if _is_key(x) else str(as_operand(x).dtype)
        raise TypeError(f"{name} does not accept dtypes {dt(a)}, {dt(b)}.")
    return a == b


def _cmp(name, fn, doc):
    def f(x1, x2, /):
        x1, x2 = promote_args(name, x1, x2)
        return fn(x1, x2)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


equal = _cmp("equal", lambda a, b: lax.eq(a, b), "Elementwise ``x1 == x2``.")
not_equal = _cmp("not_equal", lambda a, b: lax.ne(a, b), "Elementwise ``x1 != x2``.")


def _ordered(op):
    """An ordered comparison that, like JAX's ``jnp.less`` & co., compares complex
    operands lexicographically (real parts, then imaginary parts on ties); ``lax.lt`` and
    its siblings reject complex dtypes."""
    def f(a, b):
        if dtypes.issubdtype(get_aval(a).dtype, np.complexfloating):
            ra, rb = lax.real(a), lax.real(b)
            return lax.select(lax.eq(ra, rb), op(lax.imag(a), lax.imag(b)), op(ra, rb))
        return op(a, b)
    return f


less = _cmp("less", _ordered(lax.lt), "Elementwise ``x1 < x2``.")
less_equal = _cmp("less_equal", _ordered(lax.le), "Elementwise ``x1 <= x2``.")
greater = _cmp("greater", _ordered(lax.gt), "Elementwise ``x1 > x2``.")
greater_equal = _cmp("greater_equal", _ordered(lax.ge), "Elementwise ``x1 >= x2``.")
maximum = _cmp("maximum", lambda a, b: lax.max(a, b), "Elementwise maximum (NaNs propagate).")
minimum = _cmp("minimum", lambda a, b: lax.min(a, b), "Elementwise minimum (NaNs propagate).")


def fmax(x1, x2, /):
    """Elementwise maximum ignoring NaNs."""
    x1, x2 = promote_args("fmax", x1, x2)
    return _where_op(lax.bitwise_or(_ordered(lax.gt)(x1, x2), isnan(x2)), x1, x2)


def fmin(x1, x2, /):
    """Elementwise minimum ignoring NaNs."""
    x1, x2 = promote_args("fmin", x1, x2)
    return _where_op(lax.bitwise_or(_ordered(lax.lt)(x1, x2), isnan(x2)), x1, x2)


def clip(arr=None, /, min=None, max=None, *, a=None, a_min=None, a_max=None):  # noqa: A002
    """Clip values to ``[min, max]`` (either may be None). ``a_min``/``a_max`` are the
    deprecated spellings."""
    if a is not None or a_min is not None or a_max is not None:
        warnings.warn("Passing arguments 'a', 'a_min' or 'a_max' to jax.numpy.clip is "
                      "deprecated. Please use 'arr', 'min' or 'max' respectively instead.",
                      DeprecationWarning, stacklevel=2)
    if arr is None:
        arr = a
    if a_min is not None:
        min = a_min  # noqa: A001
    if a_max is not None:
        max = a_max  # noqa: A001
    arr = ensure_arraylike("clip", arr)
    if min is not None:
        arr = maximum(min, arr)
    if max is not None:
        arr = minimum(max, arr)
    return arr


# ----------------------------------------------------------------------------------------------
# logical and bitwise


def _to_bool(x):
    x = as_operand(x)
    if _kind(x) == "b":
        return x
    return lax.ne(x, _const(x, 0))


def _logical(name, fn, doc):
    def f(x1, x2, /):
        check_arraylike(name, x1, x2)
        a, b = broadcast_operands(name, _to_bool(x1), _to_bool(x2))
        return fn(a, b)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


logical_and = _logical("logical_and", lambda a, b: lax.bitwise_and(a, b), "Elementwise logical and.")
logical_or = _logical("logical_or", lambda a, b: lax.bitwise_or(a, b), "Elementwise logical or.")
logical_xor = _logical("logical_xor", lambda a, b: lax.bitwise_xor(a, b), "Elementwise logical xor.")


def logical_not(x, /):
    """Elementwise logical not."""
    x = ensure_arraylike("logical_not", x)
    return lax.bitwise_not(_to_bool(x))


def _check_integer_or_bool(name, x):
    if _kind(x) not in "biu":
        raise TypeError(f"{name} requires integer or boolean arguments, got "
                        f"{get_aval(x).dtype.name}")


def _bitwise(name, fn, doc):
    def f(x1, x2, /):
        x1, x2 = promote_args(name, x1, x2)
        _check_integer_or_bool(name, x1)
        return fn(x1, x2)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


bitwise_and = _bitwise("bitwise_and", lambda a, b: lax.bitwise_and(a, b), "Elementwise bitwise and.")
bitwise_or = _bitwise("bitwise_or", lambda a, b: lax.bitwise_or(a, b), "Elementwise bitwise or.")
bitwise_xor = _bitwise("bitwise_xor", lambda a, b: lax.bitwise_xor(a, b), "Elementwise bitwise xor.")


def invert(x, /):
    """Elementwise bitwise not (logical not on booleans)."""
    x = ensure_arraylike("invert", x)
    _check_integer_or_bool("invert", x)
    return lax.bitwise_not(x)


bitwise_not = bitwise_invert = invert


def left_shift(x1, x2, /):
    """Elementwise ``x1 << x2``."""
    x1, x2 = promote_args_numeric("left_shift", x1, x2)
    _check_integer_or_bool("left_shift", x1)
    return lax.shift_left(x1, x2)


def right_shift(x1, x2, /):
    """Elementwise ``x1 >> x2`` (arithmetic for signed, logical for unsigned)."""
    x1, x2 = promote_args_numeric("right_shift", x1, x2)
    _check_integer_or_bool("right_shift", x1)
    if _kind(x1) == "u":
        return lax.shift_right_logical(x1, x2)
    return lax.shift_right_arithmetic(x1, x2)


bitwise_left_shift = left_shift
bitwise_right_shift = right_shift


def bitwise_count(x, /):
    """Number of set bits in ``|x|``."""
    x = ensure_arraylike("bitwise_count", x)
    _check_integer_or_bool("bitwise_count", x)
    return lax.convert_element_type(lax.population_count(absolute(x)), np.uint8)


# ----------------------------------------------------------------------------------------------
# floating point classification


def isnan(x, /):
    """Elementwise NaN test."""
    x = ensure_arraylike("isnan", x)
    k = _kind(x)
    if k == "c":
        re, im = lax.real(x), lax.imag(x)
        return lax.bitwise_or(lax.ne(re, re), lax.ne(im, im))
    return lax.ne(x, x)     # False for integers, weak like x (as JAX's)


def isinf(x, /):
    """Elementwise infinity test (either sign)."""
    x = ensure_arraylike("isinf", x)
    k = _kind(x)
    if k == "c":
        return lax.bitwise_or(isinf(lax.real(x)), isinf(lax.imag(x)))
    if k == "f":
        return lax.eq(lax.abs(x), _strong_const(x, np.inf))
    return _zeros_bool(x)


def isposinf(x, /):
    """Elementwise ``x == +inf``."""
    x = ensure_arraylike("isposinf", x)
    if _kind(x) == "f":
        return lax.eq(x, _strong_const(x, np.inf))
    if _kind(x) == "c":
        raise ValueError("isposinf is not defined for complex inputs")
    return _zeros_bool(x)


def isneginf(x, /):
    """Elementwise ``x == -inf``."""
    x = ensure_arraylike("isneginf", x)
    if _kind(x) == "f":
        return lax.eq(x, _strong_const(x, -np.inf))
    if _kind(x) == "c":
        raise ValueError("isneginf is not defined for complex inputs")
    return _zeros_bool(x)


def isfinite(x, /):
    """Elementwise test for finite values (not NaN, not infinite)."""
    x = ensure_arraylike("isfinite", x)
    k = _kind(x)
    if k == "c":
        return lax.bitwise_and(lax.is_finite(lax.real(x)), lax.is_finite(lax.imag(x)))
    if k == "f":
        return lax.is_finite(x)
    return _ones_bool(x)


def signbit(x, /):
    """Elementwise test of the sign bit (True for -0.0)."""
    x = ensure_arraylike("signbit", x)
    k = _kind(x)
    if k == "b":
        return _zeros_bool(x)
    if k in "iu":
        return lax.lt(x, _const(x, 0))
    if k == "c":
        raise ValueError("jnp.signbit is not well defined for complex inputs")
    # The top bit of the bits as a signed integer of the same width: also right for
    # -0.0 and for NaNs with the sign bit set.
    bits = lax.bitcast_convert_type(x, np.dtype(f"int{get_aval(x).dtype.itemsize * 8}"))
    return lax.lt(bits, _const(bits, 0))


def copysign(x1, x2, /):
    """``|x1|`` with the sign of ``x2``."""
    x1, x2 = broadcast_operands("copysign", *promote_args_inexact("copysign", x1, x2))
    if _kind(x1) == "c":
        raise TypeError("copysign does not support complex-valued inputs")
    a = lax.abs(x1)
    return lax.select(signbit(x2), lax.neg(a), a)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (infinities equal when they match);
    typed keys compare for equality, as in JAX."""
    if _is_key(a) or _is_key(b):
        return _keys_equal("isclose", a, b)
    a, b = promote_args("isclose", a, b)
    k = _kind(a)
    if k not in "fc":
        return lax.eq(a, b)
    dt = get_aval(a).dtype
    rdt = dtypes.finfo(dt).dtype if k == "c" else dt
    rtol_ = lax.convert_element_type(as_operand(rtol), rdt)
    atol_ = lax.convert_element_type(as_operand(atol), rdt)
    shape = get_aval(a).shape
    rtol_ = _util.broadcast_to(rtol_, shape)
    atol_ = _util.broadcast_to(atol_, shape)
    out = lax.le(lax.abs(lax.sub(a, b)), lax.add(atol_, lax.mul(rtol_, lax.abs(b))))
    a_inf, b_inf = isinf(a), isinf(b)
    any_inf = lax.bitwise_or(a_inf, b_inf)
    both_inf = lax.bitwise_and(a_inf, b_inf)
    out = lax.bitwise_and(out, lax.bitwise_not(any_inf))
    out = lax.bitwise_or(out, lax.bitwise_and(both_inf, lax.eq(a, b)))
    a_nan, b_nan = isnan(a), isnan(b)
    if equal_nan:
        return lax.bitwise_or(lax.bitwise_and(out, lax.bitwise_not(lax.bitwise_or(a_nan, b_nan))), lax.bitwise_and(a_nan, b_nan))
    return lax.bitwise_and(out, lax.bitwise_not(lax.bitwise_or(a_nan, b_nan)))


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when every element is ``isclose``."""
    if not (_is_key(a) or _is_key(b)):
        check_arraylike("allclose", a, b)
    from kiln.numpy._reductions import all as _all
    return _all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan=False):
    """True when the arrays have the same shape and elements."""
    if _is_key(a1) or _is_key(a2):
        if _is_key(a1) and _is_key(a2) and (a1.shape != a2.shape or a1.dtype != a2.dtype):
            return make_array(np.bool_(False))
        eq = _keys_equal("equal", a1, a2)       # JAX's TypeError for a non-key operand
        from kiln.numpy._reductions import all as _all
        return _all(eq)
    try:
        a1, a2 = as_operand(a1), as_operand(a2)
    except Exception:
        return make_array(np.bool_(False))
    if get_aval(a1).shape != get_aval(a2).shape:
        return make_array(np.bool_(False))
    from kiln.numpy._reductions import all as _all
    eq = equal(a1, a2)
    if equal_nan:
        eq = lax.bitwise_or(eq, lax.bitwise_and(isnan(a1), isnan(a2)))
    return _all(eq)


def array_equiv(a1, a2):
    """True when the arrays broadcast together and are elementwise equal."""
    if _is_key(a1) or _is_key(a2):
        if not (_is_key(a1) and _is_key(a2)):
            _keys_equal("equal", a1, a2)        # JAX's TypeError
        try:
            _util.broadcast_shapes(a1.shape, a2.shape)
        except ValueError:
            return make_array(np.bool_(False))
        from kiln.numpy._reductions import all as _all
        return _all(_keys_equal("equal", a1, a2))
    a1, a2 = as_operand(a1), as_operand(a2)
    try:
        _util.broadcast_shapes(get_aval(a1).shape, get_aval(a2).shape)
    except ValueError:
        return make_array(np.bool_(False))
    from kiln.numpy._reductions import all as _all
    return _all(equal(a1, a2))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """Replace NaN by ``nan`` and infinities by ``posinf``/``neginf`` (default: the largest
    finite values)."""
    x = ensure_arraylike("nan_to_num", x)
    k = _kind(x)
    if k == "c":
        return lax.complex(nan_to_num(lax.real(x), nan=nan, posinf=posinf, neginf=neginf),
                           nan_to_num(lax.imag(x), nan=nan, posinf=posinf, neginf=neginf))
    if k != "f":
        return x
    info = dtypes.finfo(get_aval(x).dtype)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    out = _where_op(isnan(x), _const_like_value(x, nan), x)
    out = _where_op(isposinf(out), _const_like_value(x, posinf), out)
    out = _where_op(isneginf(out), _const_like_value(x, neginf), out)
    return out


def _const_like_value(x, value):
    if isinstance(value, (Tracer, Array)):
        return _util.broadcast_to(lax.convert_element_type(value, get_aval(x).dtype),
                                  get_aval(x).shape)
    return _strong_const(x, value)


# ----------------------------------------------------------------------------------------------
# selection


def _where_op(cond, x, y):
    """``select`` on already-promoted operands of equal dtype (broadcasting them)."""
    shapes = [get_aval(v).shape for v in (cond, x, y)]
    try:
        shape = _util.broadcast_shapes(*shapes)
    except ValueError:   # JAX's where broadcasts with broadcast_arrays: ValueError
        raise ValueError(f"Incompatible shapes for broadcasting: shapes={list(shapes)}") from None
    # As JAX's (broadcast_arrays), where is exempt from jax_numpy_rank_promotion.
    cond, x, y = (_util.broadcast_to(as_operand(v), shape) for v in (cond, x, y))
    return lax.select(cond, x, y)


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """``x`` where ``condition`` else ``y``; with one argument, ``nonzero(condition)``."""
    if x is None and y is None:
        from kiln.numpy._indexing import nonzero
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        check_arraylike("where", condition, x, y)  # TypeError for the None, as JAX
        raise ValueError("Either both or neither of the x and y arguments should be provided "
                         f"to jax.numpy.where, got {x} and {y}.")
    if type(condition) is Array:
        out = _eager.where3(condition, x, y)
        if out is not None:
            return out
    check_arraylike("where", condition, x, y)
    condition = as_operand(condition)
    if _kind(condition) != "b":
        condition = _to_bool(condition)
    x, y = _util.promote_dtypes(x, y)
    return _where_op(condition, x, y)


def select(condlist, choicelist, default=0):
    """The element of the first ``choicelist`` entry whose condition holds, else default."""
    if len(condlist) != len(choicelist):
        raise ValueError("condlist must have length equal to choicelist "
                         f"({len(condlist)} vs {len(choicelist)})")
    if len(condlist) == 0:
        raise ValueError("condlist must be non-empty")
    check_arraylike("select", *condlist, *choicelist, default)
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        cond = as_operand(cond)
        if _kind(cond) != "b":      # JAX takes any condition, as its truth value
            cond = _to_bool(cond)
        out = where(cond, choice, out)
    return as_operand(out)


# ----------------------------------------------------------------------------------------------
# complex numbers


def real(val, /):
    """The real part (the input itself for real dtypes)."""
    val = ensure_arraylike("real", val)
    return lax.real(val) if _kind(val) == "c" else val


def imag(val, /):
    """The imaginary part (zeros for real dtypes)."""
    val = ensure_arraylike("imag", val)
    if _kind(val) == "c":
        return lax.imag(val)
    return _const(val, 0)


def conjugate(x, /):
    """The complex conjugate (the input itself for real dtypes)."""
    x = ensure_arraylike("conjugate", x)
    return lax.conj(x) if _kind(x) == "c" else x


conj = conjugate


def angle(z, deg=False):
    """The argument of complex numbers (0 or pi for reals), in radians unless ``deg``."""
    z = ensure_arraylike("angle", z)
    if _kind(z) == "c":
        re, im = lax.real(z), lax.imag(z)
    else:
        (re,) = promote_dtypes_inexact(z)
        re = lax._convert_element_type(re, get_aval(re).dtype, False)
        im = _const(re, 0)
    out = lax.atan2(im, re)
    return rad2deg(out) if deg else out


def iscomplex(x):
    """Elementwise test for a nonzero imaginary part."""
    x = ensure_arraylike("iscomplex", x)
    i = imag(x)
    return lax.ne(i, _const(i, 0))


def isreal(x):
    """Elementwise test for a zero imaginary part."""
    x = ensure_arraylike("isreal", x)
    i = imag(x)
    return lax.eq(i, _const(i, 0))


# ----------------------------------------------------------------------------------------------
# miscellaneous


def heaviside(x1, x2, /):
    """0 for negative ``x1``, 1 for positive, ``x2`` where ``x1 == 0``, NaN where ``x1`` is
    NaN (as JAX and NumPy)."""
    x1, x2 = broadcast_operands("heaviside", *promote_args_inexact("heaviside", x1, x2))
    zero = _const(x1, 0)
    return lax.select(lax.lt(x1, zero), zero,
                      lax.select(lax.gt(x1, zero), _const(x1, 1),
                                 lax.select(lax.eq(x1, zero), x2, x1)))


def _sinc_maclaurin_value(k, x):
    # The k-th derivative of ``sin(x) / x`` at 0 (as JAX: broadcast against ``x``, so its
    # own derivative, the next term, flows through the custom JVP below).
    zero = lax.mul(x, _const(x, 0))
    if k % 2:
        return zero
    return lax.add(zero, _const(x, (-1) ** (k // 2) / (k + 1)))


_sinc_maclaurin_value.__name__ = "_sinc_maclaurin"
_sinc_maclaurin = custom_jvp(_sinc_maclaurin_value, nondiff_argnums=(0,))


@_sinc_maclaurin.defjvp
def _sinc_maclaurin_jvp(k, primals, tangents):
    (x,), (t,) = primals, tangents
    return _sinc_maclaurin(k, x), lax.mul(_sinc_maclaurin(k + 1, x), t)


def sinc(x, /):
    """``sin(pi x) / (pi x)``, 1 at 0; its derivatives of every order at 0 come from the
    Taylor series (a ``custom_jvp``, as in JAX)."""
    x = ensure_arraylike("sinc", x)
    (x,) = promote_dtypes_inexact(x)
    is_zero = lax.eq(x, _const(x, 0))
    pi_x = lax.mul(_const(x, np.pi), x)
    safe_pi_x = lax.select(is_zero, _const(x, 1), pi_x)
    return lax.select(is_zero, _sinc_maclaurin(0, pi_x),
                      lax.div(lax.sin(safe_pi_x), safe_pi_x))


def i0(x):
    """Modified Bessel function of the first kind, order zero."""
    x = ensure_arraylike("i0", x)
    (x,) = promote_dtypes_inexact(x)
    if _kind(x) == "c":
        raise ValueError("i0 does not support complex-valued inputs")
    return lax.mul(lax.exp(lax.abs(x)), lax.bessel_i0e(x))


def nextafter(x1, x2, /):
    """The next representable float after ``x1`` toward ``x2``."""
    x1, x2 = promote_args_inexact("nextafter", x1, x2)
    return lax.nextafter(x1, x2)


def ldexp(x1, x2, /):
    """``x1 * 2**x2`` (``x2`` integer)."""
    check_arraylike("ldexp", x1, x2)
    x2 = as_operand(x2)
    x1_dt = get_aval(as_operand(x1)).dtype
    if _kind(x2) not in "iub" or dtypes.issubdtype(x1_dt, np.complexfloating):
        raise ValueError("ldexp not supported for input types "
                         f"{(np.dtype(x1_dt), np.dtype(get_aval(x2).dtype))}")
    (x1,) = promote_dtypes_inexact(x1)
    x1, x2 = broadcast_operands("ldexp", x1, x2)
    from kiln.numpy._number_parts import frexp
    dt = get_aval(x1).dtype
    # As JAX: split x1 into mantissa and exponent first, so that a tiny x1 with a large x2
    # (or a huge x1 with a negative x2) does not overflow/underflow 2**x2 on its own.
    m, e = frexp(x1)
    e = lax.add(lax.convert_element_type(e, dt), lax.convert_element_type(x2, dt))
    pos = lax.gt(e, _const(e, 0))    # the exponent may exceed the range by one: move it to m
    m = lax.select(pos, lax.mul(m, _const(m, 2)), m)
    e = lax.select(pos, lax.sub(e, _const(e, 1)), e)
    x = lax.mul(m, power(_const(m, 2), e))
    keep = lax.bitwise_or(isinf(x1), lax.eq(x1, _const(x1, 0)))
    return lax.select(keep, x1, x)


def spacing(x, /):
    """The distance to the next representable number away from zero."""
    x = ensure_arraylike("spacing", x)
    (x,) = promote_dtypes_inexact(x)
    toward = lax.select(lax.lt(x, _const(x, 0)), _strong_const(x, -np.inf),
                        _strong_const(x, np.inf))
    return lax.sub(lax.nextafter(x, toward), x)


__all__ = [
    "add", "subtract", "multiply", "true_divide", "divide", "floor_divide", "remainder", "mod",
    "fmod", "divmod", "power", "pow", "float_power", "negative", "positive", "absolute", "abs",
    "sign", "fabs", "isin", "square", "reciprocal", "sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log1p",
    "log2", "log10", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "arcsinh", "arccosh", "arctanh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
    "arctan2", "atan2", "deg2rad", "rad2deg", "radians", "degrees", "hypot", "logaddexp",
    "logaddexp2", "floor", "ceil", "trunc", "rint", "round", "around", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "maximum", "minimum", "fmax",
    "fmin", "clip", "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_xor", "invert", "bitwise_not", "bitwise_invert", "left_shift",
    "right_shift", "bitwise_left_shift", "bitwise_right_shift", "bitwise_count", "isnan",
    "isinf", "isposinf", "isneginf", "isfinite", "signbit", "copysign", "isclose", "allclose",
    "array_equal", "array_equiv", "nan_to_num", "where", "select", "real", "imag", "conjugate",
    "conj", "angle", "iscomplex", "isreal", "heaviside", "sinc", "i0", "nextafter", "ldexp",
    "spacing",
]
