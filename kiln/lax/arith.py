"""Elementwise arithmetic and math primitives with their jvp/transpose/batching rules."""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln._fp_warnings import IGNORE as _FP_IGNORE
from kiln._fp_warnings import enter as _fp_enter
from kiln._fp_warnings import leave as _fp_leave
from kiln.core.trace import get_aval
from kiln.interpreters import ad
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax import _half_flush, _half_steps
from kiln.lax._factory import (
    _any,
    _float,
    _inexact,
    _num,
    as_dtype,
    bool_result,
    naryop,
    unop,
)
from kiln.lax._xla_eager import complex_binary as _xla_complex_binary
from kiln.lax._xla_eager import complex_integer_pow as _xla_complex_integer_pow
from kiln.lax._xla_eager import complex_unary as _xla_complex_unary
from kiln.lax._xla_eager import integer_pow as _xla_integer_pow
from kiln.lax._xla_eager import unary as _xla_unary
from kiln.lax.accuracy import check_accuracy as _check_accuracy


def _scalar_like(x, ref):
    """Turn a Python scalar operand into a weak array of ``ref``'s dtype (lax promotes
    Python scalars, nothing else)."""
    if type(x) in (int, float, complex, bool):
        from kiln.array import make_array
        return make_array(np.asarray(x, get_aval(ref).dtype), True)
    return x


_py_scalars = (int, float, complex, bool)


def _binargs(x, y):
    if type(x) in _py_scalars and type(y) not in _py_scalars:
        return _scalar_like(x, y), y
    if type(y) in _py_scalars and type(x) not in _py_scalars:
        return x, _scalar_like(y, x)
    return x, y


def _bind2(prim, x, y):
    """Bind a binary elementwise primitive as ``lax``'s function does: Python scalars take
    the other operand's dtype; the primitive broadcasts rank-0 operands and size-1
    dimensions (JAX: ``lax.mul(f32[1], f32[2])`` is ``f32[2]``, one ``mul`` equation)."""
    tx, ty = type(x), type(y)
    if tx in _py_scalars:
        if ty not in _py_scalars:
            x = _scalar_like(x, y)
    elif ty in _py_scalars:
        y = _scalar_like(y, x)
    return prim.bind(x, y)


def _same(fn):
    def impl(*args):
        return as_dtype(fn(*args), args[0].dtype)
    return impl


def _quiet(fn):
    """Like ``_same`` but without NumPy's floating-point warnings (JAX gives inf/nan silently)."""
    def impl(*args):
        tok = _fp_enter(_FP_IGNORE)   # np.errstate's effect, ~15x cheaper (_fp_warnings)
        try:
            return as_dtype(fn(*args), args[0].dtype)
        finally:
            _fp_leave(tok)
    return impl


# ----------------------------------------------------------------------------------------------
# add / sub / mul / div / neg

_BF16 = _half_flush.BF16


def _arith(fn, complex_op=None):
    """``fn``'s impl: bfloat16 computed in float32 under XLA's flushing (``_half_flush``);
    complex operands through ``_xla_eager``'s ``complex_op`` kernel (XLA's complex
    arithmetic, JAX's bits) when given and the native library is there."""
    def impl(x, y):
        dt = x.dtype
        if dt == _BF16:
            return _half_flush.f32_binary(fn, x, y, dt)
        if complex_op is not None and dt.kind == "c":
            out = _xla_complex_binary(complex_op, x, y)
            if out is not None:
                return out
        return as_dtype(fn(x, y), dt)
    return impl


add_p = naryop("add", _arith(np.add), _num)
sub_p = naryop("sub", _arith(np.subtract), _num)
# complex: fma(ar, br, -ai bi) + i fma(ai, br, ar bi), as XLA's CPU code contracts it
mul_p = naryop("mul", _arith(np.multiply, "mul"), _num)


def _div_impl(x, y):
    dt = x.dtype
    if dt.kind == "i":
        # Truncating division (C/XLA), from NumPy's flooring divmod: step the quotient up
        # when the remainder is nonzero and the operands' signs differ. XLA's special
        # cases: x / 0 == -1 and x / -1 == -x (so INT_MIN / -1 == INT_MIN, wrapping).
        zero = y == 0
        minus_one = y == -1
        special = (zero | minus_one).any()
        safe = np.where(zero | minus_one, dt.type(1), y) if special else y
        q, r = np.divmod(x, safe)
        q = q + ((r != 0) & ((x ^ safe) < 0)).astype(dt)
        if special:
            q = np.where(zero, dt.type(-1), np.where(minus_one, np.negative(q), q))
        return as_dtype(q, dt)
    if dt.kind == "u":
        # x / 0 is the maximum value, as in XLA.
        if (y == 0).any():
            return as_dtype(np.where(y == 0, np.iinfo(dt).max,
                                     x // np.where(y == 0, dt.type(1), y)), dt)
        return as_dtype(x // y, dt)
    if dt == _BF16:
        return _half_flush.divide(x, y, dt)
    if dt.kind == "c":      # XLA's Smith division and its special values (xla_complex.h)
        out = _xla_complex_binary("div", x, y)
        if out is not None:
            return out
    tok = _fp_enter(_FP_IGNORE)
    try:
        return as_dtype(xla_true_divide(x, y), dt)
    finally:
        _fp_leave(tok)


_RECIPROCAL_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def xla_true_divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x / y`` for NumPy float arrays of one dtype, as XLA computes it: a divisor that
    the division broadcasts (rank 0, or size-1/missing dimensions) is inverted first and
    multiplied (``A / Broadcast(B) => A * Broadcast(1 / B)``, XLA's simplifier; see
    ``kiln/compiler/passes/xla_divide.py``) for float16/32/64; otherwise a true division."""
    if y.shape != x.shape and x.dtype in _RECIPROCAL_DTYPES:
        ys = y.shape
        if not ys or np.broadcast_shapes(x.shape, ys) != ys:
            return np.multiply(x, np.true_divide(x.dtype.type(1), y))
    return np.true_divide(x, y)


div_p = naryop("div", _div_impl, _num)
neg_p = unop("neg", _same(np.negative), _num)


def _max_min(fn):
    """``np.maximum``/``np.minimum``; for the 2-byte floats with XLA's semantics, ``-0 <
    +0`` and bfloat16 operands flushed (``_half_flush.max_min``). float32/float64 keep
    NumPy's tie (the first of two zeros), as the compiled kernels do: checking for ties
    cost a common op (``maximum(x, 0)``) 2-3x eagerly (session 20)."""
    def impl(x, y):
        if x.dtype == _BF16 or (x.dtype.kind == "f" and x.dtype.itemsize == 2):
            return _half_flush.max_min(fn, x, y)
        return as_dtype(fn(x, y), x.dtype)
    return impl


max_p = naryop("max", _max_min(np.maximum), _any)
min_p = naryop("min", _max_min(np.minimum), _any)


def _add_transpose(ct, x, y):
    return [_unbroadcast_ct(ct, x), _unbroadcast_ct(ct, y)]


def _unbroadcast_ct(ct, x):
    """The cotangent for operand ``x`` of an elementwise op (rank-0 operands broadcast)."""
    if not is_undefined_primal(x):
        return None
    if type(ct) is Zero:
        return Zero(x.aval)
    return unbroadcast(ct, x.aval)


def unbroadcast(ct, aval):
    """Sum ``ct`` down to ``aval``'s shape when ``aval`` is an operand that the elementwise
    op broadcast (rank 0, or size-1 dimensions of an operand of the result's rank)."""
    cshape = get_aval(ct).shape
    if cshape == aval.shape:
        return ct
    from kiln.lax.reductions import reduce_sum
    if aval.shape == ():
        return reduce_sum(ct, tuple(range(len(cshape))))
    axes = tuple(i for i, (a, c) in enumerate(zip(aval.shape, cshape)) if a == 1 and c != 1)
    from kiln.lax.structural import reshape
    return reshape(reduce_sum(ct, axes), aval.shape)


def broadcast_to_shape(t, shape):
    """``t`` (rank 0, or of ``shape``'s rank with size-1 dimensions) broadcast to ``shape``."""
    tshape = get_aval(t).shape
    shape = tuple(shape)
    if tshape == shape:
        return t
    from kiln.lax.structural import broadcast_in_dim
    return broadcast_in_dim(t, shape, tuple(range(len(tshape))))


def _sub_transpose(ct, x, y):
    cy = None
    if is_undefined_primal(y):
        cy = Zero(y.aval) if type(ct) is Zero else unbroadcast(neg(ct), y.aval)
    return [_unbroadcast_ct(ct, x), cy]


ad.defjvp2(add_p, lambda g, ans, x, y: g, lambda g, ans, x, y: g)
ad.transpose_rules[add_p] = _add_transpose
ad.defjvp2(sub_p, lambda g, ans, x, y: g, lambda g, ans, x, y: neg(g))
ad.transpose_rules[sub_p] = _sub_transpose
ad.defjvp2(mul_p, lambda g, ans, x, y: mul(g, y), lambda g, ans, x, y: mul(x, g))


def _mul_transpose(ct, x, y):
    if is_undefined_primal(x) and is_undefined_primal(y):
        raise ValueError("mul: both operands linear (the product is not linear)")
    if type(ct) is Zero:
        return [Zero(x.aval) if is_undefined_primal(x) else None,
                Zero(y.aval) if is_undefined_primal(y) else None]
    if is_undefined_primal(x):
        return [unbroadcast(mul(ct, y), x.aval), None]
    return [None, unbroadcast(mul(x, ct), y.aval)]


ad.transpose_rules[mul_p] = _mul_transpose
ad.defjvp2(div_p, lambda g, ans, x, y: div(g, y),
          lambda g, ans, x, y: mul(mul(neg(g), x), integer_pow(y, -2)))


def _div_transpose(ct, x, y):
    if is_undefined_primal(y):
        raise ValueError("div: the divisor cannot be linear")
    if type(ct) is Zero:
        return [Zero(x.aval), None]
    return [unbroadcast(div(ct, y), x.aval), None]


ad.transpose_rules[div_p] = _div_transpose
ad.deflinear2(neg_p, lambda ct, x: [Zero(x.aval) if type(ct) is Zero else neg(ct)])


def _max_jvp_x(g, ans, x, y):
    from kiln.lax.structural import select
    g = broadcast_to_shape(g, get_aval(ans).shape)    # a size-1 operand's tangent
    return select(gt(x, y), g, select(eq(x, y), mul(g, _scalar_like(0.5, g)),
                                      mul(g, _scalar_like(0.0, g))))


def _max_jvp_y(g, ans, x, y):
    from kiln.lax.structural import select
    g = broadcast_to_shape(g, get_aval(ans).shape)    # a size-1 operand's tangent
    return select(lt(x, y), g, select(eq(x, y), mul(g, _scalar_like(0.5, g)),
                                      mul(g, _scalar_like(0.0, g))))


def _min_jvp_x(g, ans, x, y):
    from kiln.lax.structural import select
    g = broadcast_to_shape(g, get_aval(ans).shape)    # a size-1 operand's tangent
    return select(lt(x, y), g, select(eq(x, y), mul(g, _scalar_like(0.5, g)),
                                      mul(g, _scalar_like(0.0, g))))


def _min_jvp_y(g, ans, x, y):
    from kiln.lax.structural import select
    g = broadcast_to_shape(g, get_aval(ans).shape)    # a size-1 operand's tangent
    return select(gt(x, y), g, select(eq(x, y), mul(g, _scalar_like(0.5, g)),
                                      mul(g, _scalar_like(0.0, g))))


ad.defjvp2(max_p, _max_jvp_x, _max_jvp_y)
ad.defjvp2(min_p, _min_jvp_x, _min_jvp_y)


def add(x, y):
    """Elementwise ``x + y`` (operands of equal shape and dtype; Python scalars promote)."""
    return _bind2(add_p, x, y)


def sub(x, y):
    """Elementwise ``x - y``."""
    return _bind2(sub_p, x, y)


def mul(x, y, *, out_dtype=None):
    """Elementwise ``x * y``.

    Args:
      x, y: arrays of equal numeric dtypes (any numeric dtypes when ``out_dtype`` is
        given); Python scalars take the other operand's dtype.
      out_dtype: optional dtype of the result. As JAX describes it, the operands are
        cast to ``out_dtype`` and then multiplied (kiln stages it as two
        ``convert_element_type`` and a ``mul``; JAX keeps one ``mul[out_dtype=...]``
        equation). Gradients come back in each operand's own dtype.

    Returns:
      The elementwise product.
    """
    if out_dtype is not None:
        from kiln.lax.structural import convert_element_type
        dt = dtypes.canonicalize_dtype(out_dtype)
        x, y = _binargs(x, y)
        x = convert_element_type(x, dt) if type(x) not in _py_scalars else x
        y = convert_element_type(y, dt) if type(y) not in _py_scalars else y
    return _bind2(mul_p, x, y)


def div(x, y):
    """Elementwise ``x / y`` (integer division rounds toward zero)."""
    return _bind2(div_p, x, y)


def neg(x):
    """Elementwise ``-x``."""
    return neg_p.bind(x)


def max(x, y):  # noqa: A001
    """Elementwise maximum (NaN-propagating)."""
    return _bind2(max_p, x, y)


def min(x, y):  # noqa: A001
    """Elementwise minimum (NaN-propagating)."""
    return _bind2(min_p, x, y)


# ----------------------------------------------------------------------------------------------
# comparisons

def _cmp(name, fn, kinds=_any):
    def impl(x, y):
        if x.dtype == _BF16:     # subnormal operands read as zeros (XLA's DAZ)
            x, y = _half_flush.flush_bf16(x), _half_flush.flush_bf16(y)
        return np.asarray(fn(x, y))
    prim = naryop(name, impl, kinds, result_dtype=bool_result)
    ad.defjvp_zero(prim)
    return prim


# Ordered comparisons reject complex operands (JAX: TypeError naming the dtype).
_ordered = ("signedinteger", "unsignedinteger", "floating", "bool")
eq_p = _cmp("eq", np.equal)
ne_p = _cmp("ne", np.not_equal)
lt_p = _cmp("lt", np.less, _ordered)
le_p = _cmp("le", np.less_equal, _ordered)
gt_p = _cmp("gt", np.greater, _ordered)
ge_p = _cmp("ge", np.greater_equal, _ordered)


def eq(x, y):
    """Elementwise ``x == y``."""
    return _bind2(eq_p, x, y)


def ne(x, y):
    """Elementwise ``x != y``."""
    return _bind2(ne_p, x, y)


def lt(x, y):
    """Elementwise ``x < y``."""
    return _bind2(lt_p, x, y)


def le(x, y):
    """Elementwise ``x <= y``."""
    return _bind2(le_p, x, y)


def gt(x, y):
    """Elementwise ``x > y``."""
    return _bind2(gt_p, x, y)


def ge(x, y):
    """Elementwise ``x >= y``."""
    return _bind2(ge_p, x, y)


# ----------------------------------------------------------------------------------------------
# transcendental basics (the rest live in kiln.lax.elementwise)

# Ops whose float16/bfloat16 results XLA computes with the float32 formula and rounds once
# (checked over all 2**16 values of both types against JAX): float32 kernel, then cast.
# Ops in ``_half_steps._STEPPED`` (logistic, the inverse trigonometric/hyperbolic
# functions, float16 expm1) are expanded in the half type and rounded after every step.
_HALF_VIA_F32 = frozenset({"exp", "log", "log1p", "cbrt", "sinh", "cosh", "erf", "erfc",
                           "erf_inv", "lgamma", "digamma", "bessel_i0e", "bessel_i1e",
                           "expm1", "tan", "atan"})
# Ops whose complex64/complex128 impls run XLA's complex formulas (``_xla_eager.
# complex_unary``, ``kiln/compiler/csrc/xla_complex.h``: JAX's bits).
_COMPLEX_OPS = frozenset({"exp", "log", "sqrt", "expm1", "log1p", "tanh", "tan", "sin",
                          "cos", "sinh", "cosh", "logistic", "sign", "asin", "acos", "atan",
                          "asinh", "acosh", "atanh", "abs"})


def xla_math(op, fallback):
    """An impl with JAX's bits for float32/float64 (XLA's formulas, ``_xla_eager``) and,
    for the ops in ``_COMPLEX_OPS``, complex64/complex128, that calls ``fallback`` (NumPy)
    for other dtypes or when the native library is missing.
    Half floats of the ops in ``_HALF_VIA_F32`` run the float32 kernel and are rounded;
    those ``_half_steps.stepped`` says are expanded step by step, as XLA does."""
    half = op in _HALF_VIA_F32
    steps = op in _half_steps._STEPPED

    cplx = op in _COMPLEX_OPS

    def impl(x):
        out = _xla_unary(op, x)
        if out is None and cplx and x.dtype.kind == "c":
            out = _xla_complex_unary(op, x)     # XLA's complex formula (xla_complex.h)
        if out is None and x.dtype.itemsize == 2 and x.dtype.kind in "fV":
            if steps and _half_steps.stepped(op, x.dtype):
                out = _half_steps.half_steps(op, x)
            elif half:
                out = _xla_unary(op, np.asarray(x, np.float32))
                if out is not None:
                    out = out.astype(x.dtype)
        return fallback(x) if out is None else out
    impl.__name__ = f"{op}_impl"
    return impl


exp_p = unop("exp", xla_math("exp", _quiet(np.exp)), _inexact)
log_p = unop("log", xla_math("log", _quiet(np.log)), _inexact)
sin_p = unop("sin", xla_math("sin", _same(np.sin)), _inexact)
cos_p = unop("cos", xla_math("cos", _same(np.cos)), _inexact)
tanh_p = unop("tanh", xla_math("tanh", _same(np.tanh)), _inexact)

ad.defjvp2(exp_p, lambda g, ans, x: mul(g, ans))
ad.defjvp2(log_p, lambda g, ans, x: div(g, x))
ad.defjvp2(sin_p, lambda g, ans, x: mul(g, cos(x)))
ad.defjvp2(cos_p, lambda g, ans, x: neg(mul(g, sin(x))))
ad.defjvp2(tanh_p, lambda g, ans, x: mul(g, sub(_scalar_like(1, ans), mul(ans, ans))))


def exp(x, *, accuracy=None):
    """Elementwise e**x. (``accuracy``: see :mod:`kiln.lax.accuracy`.)"""
    _check_accuracy("exp", accuracy)
    return exp_p.bind(x)


def log(x, *, accuracy=None):
    """Elementwise natural logarithm. (``accuracy``: see :mod:`kiln.lax.accuracy`.)"""
    _check_accuracy("log", accuracy)
    return log_p.bind(x)


def sin(x, *, accuracy=None):
    """Elementwise sine. (``accuracy``: see :mod:`kiln.lax.accuracy`.)"""
    _check_accuracy("sin", accuracy)
    return sin_p.bind(x)


def cos(x, *, accuracy=None):
    """Elementwise cosine. (``accuracy``: see :mod:`kiln.lax.accuracy`.)"""
    _check_accuracy("cos", accuracy)
    return cos_p.bind(x)


def tanh(x, *, accuracy=None):
    """Elementwise hyperbolic tangent. (``accuracy``: see :mod:`kiln.lax.accuracy`.)"""
    _check_accuracy("tanh", accuracy)
    return tanh_p.bind(x)


def _integer_pow_impl(x, *, y):
    if y == 0:
        return np.ones_like(x)
    if x.dtype.kind in "iu" and y < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    if _half_flush.is_half(x.dtype):     # JAX's chain of rounded products
        return _half_flush.integer_pow(x, y)
    if x.dtype.kind == "c":     # JAX's chain of XLA complex products (xla_complex.h)
        out = _xla_complex_integer_pow(x, y)
    else:
        out = _xla_integer_pow(x, y)    # JAX's bits for float32/float64 (_xla_eager)
    if out is not None:
        return out
    tok = _fp_enter(_FP_IGNORE)
    try:
        return as_dtype(np.power(x, x.dtype.type(y)) if x.dtype.kind in "iu" else
                        np.power(x, y), x.dtype)
    finally:
        _fp_leave(tok)


integer_pow_p = unop("integer_pow", _integer_pow_impl, _num)


def _integer_pow_jvp(g, ans, x, *, y):
    if y == 0:
        return mul(g, _scalar_like(0, g))
    coef = _scalar_like(float(y) if get_aval(x).dtype.kind in "fc" else y, x)
    return mul(g, mul(coef, integer_pow(x, y - 1)))


ad.defjvp2(integer_pow_p, _integer_pow_jvp)


def integer_pow(x, y: int):
    """Elementwise ``x ** y`` for a static Python integer ``y``."""
    return integer_pow_p.bind(x, y=int(y))


def _square_impl(x):
    if x.dtype == _BF16:
        return _half_flush.f32_binary(np.multiply, x, x, x.dtype)
    if x.dtype.kind == "c":
        return _complex_square(x)
    # One multiply x * x, as integer_pow(x, 2): its eager path has XLA's bits (results
    # flushed to zero below the smallest normal; the half types' rounding).
    return _integer_pow_impl(x, y=2)


def _complex_square(z):
    """XLA's expansion of a complex square (JAX's ``lax.square``): real part
    ``(x - y) * (x + y)``, exactly 0 where ``|x| == |y|`` with ``x`` finite; imaginary part
    ``2 * (x * y)``. (``z * z`` rounds ``x*x - y*y``: an ulp apart from JAX near
    ``|x| = |y|`` and elsewhere, e.g. ``(0.001 + 1j)**2``.)"""
    from kiln.lax.linalg import _flush_denormals  # XLA's DAZ/FTZ, part by part
    z = _flush_denormals(np.asarray(z))
    x, y = z.real, z.imag
    with np.errstate(all="ignore"):
        re = np.where(np.isfinite(x) & (np.abs(x) == np.abs(y)), x.dtype.type(0),
                      (x - y) * (x + y))
        im = x.dtype.type(2) * (x * y)
    out = np.empty(z.shape, z.dtype)
    out.real = re
    out.imag = im
    return _flush_denormals(out)


square_p = unop("square", _square_impl, _num)
ad.defjvp2(square_p, lambda g, ans, x: mul(g, mul(_scalar_like(2, x), x)))


def square(x):
    """Elementwise ``x * x``."""
    return square_p.bind(x)


_ = (_float, _any)
__all__ = ["add", "sub", "mul", "div", "neg", "max", "min", "eq", "ne", "lt", "le", "gt", "ge",
           "exp", "log", "sin", "cos", "tanh", "integer_pow", "square",
           "add_p", "sub_p", "mul_p", "div_p", "neg_p", "max_p", "min_p", "eq_p", "ne_p", "lt_p",
           "le_p", "gt_p", "ge_p", "exp_p", "log_p", "sin_p", "cos_p", "tanh_p", "integer_pow_p", "square_p"]
