"""Op records for the elementwise lax primitives (``kiln.lax.arith`` and
``kiln.lax.elementwise``).

References are NumPy/``math``/SciPy computed in float64 (complex128) and rounded to the
input dtype; where possible they use a formula other than the one kiln's impl calls
(e.g. ``1 / (1 + exp(-x))`` for ``logistic``), and the bit-level ops (shifts, clz,
population count, reduce_precision) have references written with Python integers.
Samplers keep inputs inside each function's domain and away from kinks, ties and
branch cuts, so finite differences are meaningful.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special as sps

from kiln import lax

try:  # tests/ is on sys.path under pytest; the repository root when run as a package
    from op_records import OpRecord, args_of, boolean, f32, i32, pos32
except ImportError:  # pragma: no cover
    from tests.op_records import OpRecord, args_of, boolean, f32, i32, pos32

# ----------------------------------------------------------------------------------------------
# samplers


def away32(*shape, low=0.3, high=2.0):
    """float32 with |x| in [low, high] and random sign (away from kinks at 0)."""
    def sample(rng):
        x = rng.uniform(low, high, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        return x.astype(np.float32)
    return sample


def frac32(*shape, low=-4, high=4):
    """float32 an integer plus a fraction in (0.1, 0.4) or (0.6, 0.9): away from integers
    and from halves (floor/ceil/round are locally constant there)."""
    def sample(rng):
        k = rng.integers(low, high, size=shape)
        f = rng.uniform(0.1, 0.4, size=shape) + rng.choice([0.0, 0.5], size=shape)
        return (k + f).astype(np.float32)
    return sample


def halves32(*shape):
    """float32 exact halves (ties for round)."""
    def sample(rng):
        return (rng.integers(-5, 5, size=shape) + 0.5).astype(np.float32)
    return sample


def cplx(*shape, re=(-2.0, 2.0), im=(-2.0, 2.0)):
    def sample(rng):
        return (rng.uniform(*re, size=shape) + 1j * rng.uniform(*im, size=shape)).astype(
            np.complex64)
    return sample


def special32():
    """A fixed float32 vector of edge values (signed zeros, halves, infinities, NaN)."""
    vals = np.array([0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, np.inf, -np.inf, np.nan,
                     1e-30, 3.0e38, 0.49999997], np.float32)

    def sample(rng):
        return (rng.permutation(vals),)
    return sample


def apart_pair(*shape):
    """Two float32 arrays whose elements differ by at least 0.3 (no ties for max/min)."""
    def sample(rng):
        x = rng.uniform(-2, 2, size=shape)
        y = x + rng.uniform(0.3, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        return x.astype(np.float32), y.astype(np.float32)
    return sample


def rem_pair(*shape):
    """(x, y) with |y| in [0.5, 2] and x / y an integer plus a fraction in (0.2, 0.8), so
    the truncated quotient is locally constant."""
    def sample(rng):
        y = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        q = rng.integers(-3, 4, size=shape) + rng.uniform(0.2, 0.8, size=shape)
        return (q * y).astype(np.float32), y.astype(np.float32)
    return sample


def clamp_triple(*shape):
    """(lo, x, hi) with lo < hi and x at least 0.1 away from both."""
    def sample(rng):
        lo = rng.uniform(-1.5, -0.5, size=shape)
        hi = rng.uniform(0.5, 1.5, size=shape)
        x = rng.uniform(-2.5, 2.5, size=shape)
        near = (np.abs(x - lo) < 0.1) | (np.abs(x - hi) < 0.1)
        x = np.where(near, 0.0, x)
        return lo.astype(np.float32), x.astype(np.float32), hi.astype(np.float32)
    return sample


def clamp_scalar_bounds(*shape):
    def sample(rng):
        x = rng.uniform(-2.5, 2.5, size=shape)
        x = np.where(np.abs(np.abs(x) - 1.0) < 0.1, 0.0, x)
        return np.float32(-1.0), x.astype(np.float32), np.float32(1.0)
    return sample


def int_choice(values, *shape, dtype=np.int32):
    def sample(rng):
        return rng.choice(np.array(values, dtype=np.int64), size=shape).astype(dtype)
    return sample


def fixed(*arrays):
    def sample(rng):
        return tuple(np.array(a) for a in arrays)
    return sample


def u8(*shape):
    def sample(rng):
        return rng.integers(0, 256, size=shape).astype(np.uint8)
    return sample


def small_float_ints(*shape, low=0, high=4):
    def sample(rng):
        return rng.integers(low, high, size=shape).astype(np.float32)
    return sample


# ----------------------------------------------------------------------------------------------
# reference helpers


def w64(fn, out_dtype=None):
    """Evaluate ``fn`` in float64/complex128 and round to ``out_dtype`` (default: the first
    argument's dtype)."""
    def ref(*args):
        wide = [np.asarray(a).astype(np.complex128 if np.iscomplexobj(a) else np.float64)
                for a in args]
        with np.errstate(all="ignore"):
            out = fn(*wide)
        return np.asarray(out).astype(out_dtype or np.asarray(args[0]).dtype)
    return ref


def same_dtype(fn):
    def ref(*args):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*args)).astype(np.asarray(args[0]).dtype)
    return ref


def vec(fn, otypes=(float,)):
    return np.vectorize(fn, otypes=list(otypes))


def round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _bits(dt):
    return np.dtype(dt).itemsize * 8


def _to_int(v, dt):
    """Python integer ``v`` wrapped into ``dt``'s range."""
    nb = _bits(dt)
    v &= (1 << nb) - 1
    if np.dtype(dt).kind == "i" and v >= 1 << (nb - 1):
        v -= 1 << nb
    return v


def shift_ref(kind):
    def ref(x, y):
        dt = x.dtype
        nb = _bits(dt)
        out = []
        for a, s in zip(x.ravel().tolist(), y.ravel().tolist()):
            ua = a & ((1 << nb) - 1)                  # the bit pattern
            sa = _to_int(ua, np.dtype(f"i{dt.itemsize}"))  # as signed
            if kind == "left":
                r = (ua << s) if 0 <= s < nb else 0
            elif kind == "logical":
                r = (ua >> s) if 0 <= s < nb else 0
            else:
                r = sa >> (s if 0 <= s < nb else nb - 1)
            out.append(_to_int(r, dt))
        return np.array(out, dtype=np.int64).astype(dt).reshape(x.shape)
    return ref


def popcount_ref(x):
    nb = _bits(x.dtype)
    return np.array([bin(v & ((1 << nb) - 1)).count("1") for v in x.ravel().tolist()],
                    np.int64).astype(x.dtype).reshape(x.shape)


def clz_ref(x):
    nb = _bits(x.dtype)
    return np.array([nb - (v & ((1 << nb) - 1)).bit_length() for v in x.ravel().tolist()],
                    np.int64).astype(x.dtype).reshape(x.shape)


def rem_int_ref(x, y):
    out = []
    for a, b in zip(x.ravel().tolist(), y.ravel().tolist()):
        if b == 0:
            out.append(a)
        else:
            out.append(_to_int(int(math.fmod(a, b)) if abs(a) < 2**52 else
                               a - b * int(a / b), x.dtype))
    return np.array(out, np.int64).astype(x.dtype).reshape(x.shape)


def round_mantissa(x, mantissa_bits):
    """Round float32 ``x`` to ``mantissa_bits`` explicit mantissa bits (ties to even),
    exponent range unchanged: an independent reference for reduce_precision(x, 8, m)."""
    m, e = np.frexp(x.astype(np.float64))   # x = m * 2**e, 0.5 <= |m| < 1
    scale = 2.0 ** (mantissa_bits + 1)
    return np.ldexp(np.round(m * scale) / scale, e).astype(np.float32)


def igamma_grad_a_ref(a, x):
    a64, x64 = a.astype(np.float64), x.astype(np.float64)
    h = 1e-6 * a64
    d = (sps.gammainc(a64 + h, x64) - sps.gammainc(a64 - h, x64)) / (2 * h)
    return d.astype(a.dtype)


def random_gamma_grad_ref(a, x):
    a64, x64 = a.astype(np.float64), x.astype(np.float64)
    h = 1e-6 * a64
    dpda = (sps.gammainc(a64 + h, x64) - sps.gammainc(a64 - h, x64)) / (2 * h)
    pdf = np.exp((a64 - 1) * np.log(x64) - x64 - sps.gammaln(a64))
    return (-dpda / pdf).astype(a.dtype)


def polygamma_ref(m, x):
    return sps.polygamma(m.astype(np.int64), x.astype(np.float64)).astype(x.dtype)


# ----------------------------------------------------------------------------------------------
# records

RECORDS: list[OpRecord] = []


def rec(name, fun, args, ref, **kw):
    RECORDS.append(OpRecord(name=name, fun=fun, args=args, ref=ref, **kw))


NODIFF = dict(diff_argnums=())

# -- arith.py: add/sub/mul/div/neg/max/min, comparisons, exp/log/sin/cos/tanh, integer_pow --
rec("add", lax.add, args_of(f32(3, 4), f32(3, 4)), np.add, diff_argnums=(0, 1))
rec("add_int", lax.add, args_of(i32(3, 4), i32(3, 4)), np.add, **NODIFF)
rec("sub", lax.sub, args_of(f32(3, 4), f32(3, 4)), np.subtract, diff_argnums=(0, 1))
rec("mul", lax.mul, args_of(f32(3, 4), f32(3, 4)), np.multiply, diff_argnums=(0, 1))
rec("mul_c64", lax.mul, args_of(cplx(3), cplx(3)), np.multiply, diff_argnums=(0, 1))
rec("div", lax.div, args_of(f32(3, 4), away32(3, 4)), w64(np.divide), diff_argnums=(0, 1))
rec("div_int", lax.div, args_of(i32(12), int_choice([-7, -3, -1, 1, 2, 5], 12)),
    lambda x, y: np.trunc(x / y).astype(np.int32), **NODIFF)
rec("neg", lax.neg, args_of(f32(3, 4)), np.negative)
rec("copy", lax.copy_p.bind, args_of(f32(3, 4)), np.copy)   # jnp.array(tracer) binds it
rec("max", lax.max, apart_pair(3, 4), np.maximum, diff_argnums=(0, 1))
rec("min", lax.min, apart_pair(3, 4), np.minimum, diff_argnums=(0, 1))
rec("max_int", lax.max, args_of(i32(8), i32(8)), np.maximum, **NODIFF)
for _name, _fn in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                   ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)]:
    rec(_name, getattr(lax, _name), args_of(i32(4, 5, low=-3, high=3), i32(4, 5, low=-3, high=3)),
        _fn, **NODIFF)
    rec(f"{_name}_f32", getattr(lax, _name), args_of(f32(6), f32(6)), _fn, **NODIFF)
rec("exp", lax.exp, args_of(f32(3, 4)), w64(np.exp))
rec("exp_c64", lax.exp, args_of(cplx(5)), w64(np.exp))
rec("log", lax.log, args_of(pos32(3, 4)), w64(np.log))
rec("log_c64", lax.log, args_of(cplx(5, re=(0.3, 2.0))), w64(np.log))
rec("sin", lax.sin, args_of(f32(3, 4)), w64(np.sin))
rec("sin_c64", lax.sin, args_of(cplx(5)), w64(np.sin), tol=1e-4)
rec("cos", lax.cos, args_of(f32(3, 4)), w64(np.cos))
rec("tanh", lax.tanh, args_of(f32(3, 4)), w64(np.tanh))
rec("tanh_c64", lax.tanh, args_of(cplx(5, im=(-1.0, 1.0))), w64(np.tanh), tol=1e-4)
rec("integer_pow_3", lambda x: lax.integer_pow(x, 3), args_of(f32(3, 4)), w64(lambda x: x ** 3))
rec("integer_pow_neg2", lambda x: lax.integer_pow(x, -2), args_of(away32(3, 4)),
    w64(lambda x: x ** -2.0), tol=1e-4)
rec("integer_pow_int", lambda x: lax.integer_pow(x, 3), args_of(i32(6)),
    lambda x: x ** 3, **NODIFF)
rec("square", lax.square, args_of(f32(3, 4)), w64(np.square))

# -- sign, floor, ceil, round, is_finite ----------------------------------------------------------
rec("sign", lax.sign, args_of(away32(3, 4)), np.sign)
rec("sign_special", lax.sign, special32(), same_dtype(lambda x: np.where(x == 0, x, np.sign(x))),
    **NODIFF)
rec("sign_int", lax.sign, args_of(i32(10)), np.sign, **NODIFF)
rec("sign_c64", lax.sign, args_of(cplx(6)), w64(lambda z: z / np.abs(z)), **NODIFF)
rec("floor", lax.floor, args_of(frac32(3, 4)), np.floor)
rec("ceil", lax.ceil, args_of(frac32(3, 4)), np.ceil)
rec("round", lax.round, args_of(frac32(3, 4)), w64(round_away))
rec("round_halves", lax.round, args_of(halves32(10)), w64(round_away), **NODIFF)
rec("round_to_even", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
    args_of(halves32(10)), np.rint, **NODIFF)
rec("round_special", lax.round, special32(), w64(round_away), **NODIFF)
rec("is_finite", lax.is_finite, special32(), np.isfinite, **NODIFF)

# -- exponentials, logs, logistic --------------------------------------------------------------
rec("exp2", lax.exp2, args_of(f32(3, 4)), w64(lambda x: 2.0 ** x))
rec("exp2_c64", lax.exp2, args_of(cplx(5)), w64(lambda z: np.exp(z * np.log(2.0))), tol=1e-4)
rec("log1p", lax.log1p, args_of(f32(3, 4, low=-0.8, high=3.0)), w64(np.log1p))
rec("log1p_c64", lax.log1p, args_of(cplx(5, re=(-0.5, 2.0))), w64(lambda z: np.log(1 + z)),
    tol=1e-4)
rec("expm1", lax.expm1, args_of(f32(3, 4)), w64(lambda x: np.exp(x) - 1))
rec("expm1_c64", lax.expm1, args_of(cplx(5)), w64(lambda z: np.exp(z) - 1), tol=1e-4)
rec("logistic", lax.logistic, args_of(f32(3, 4, low=-6, high=6)),
    w64(lambda x: 1 / (1 + np.exp(-x))))
rec("logistic_c64", lax.logistic, args_of(cplx(5, im=(-1.0, 1.0))),
    w64(lambda z: 1 / (1 + np.exp(-z))), tol=1e-4)

# -- trigonometric, hyperbolic ------------------------------------------------------------------
rec("tan", lax.tan, args_of(f32(3, 4, low=-1.2, high=1.2)), w64(lambda x: np.sin(x) / np.cos(x)))
rec("tan_c64", lax.tan, args_of(cplx(5, re=(-1.0, 1.0), im=(-1.0, 1.0))),
    w64(lambda z: np.sin(z) / np.cos(z)), tol=1e-4)
rec("asin", lax.asin, args_of(f32(3, 4, low=-0.9, high=0.9)), w64(np.arcsin))
rec("asin_c64", lax.asin, args_of(cplx(5, re=(-0.8, 0.8), im=(0.2, 1.5))), w64(np.arcsin),
    tol=1e-4)
rec("acos", lax.acos, args_of(f32(3, 4, low=-0.9, high=0.9)), w64(np.arccos))
rec("atan", lax.atan, args_of(f32(3, 4, low=-4, high=4)), w64(np.arctan))
rec("sinh", lax.sinh, args_of(f32(3, 4, low=-3, high=3)),
    w64(lambda x: (np.exp(x) - np.exp(-x)) / 2))
rec("sinh_c64", lax.sinh, args_of(cplx(5)), w64(lambda z: (np.exp(z) - np.exp(-z)) / 2),
    tol=1e-4)
rec("cosh", lax.cosh, args_of(f32(3, 4, low=-3, high=3)),
    w64(lambda x: (np.exp(x) + np.exp(-x)) / 2))
rec("asinh", lax.asinh, args_of(f32(3, 4, low=-4, high=4)),
    w64(lambda x: np.sign(x) * np.log(np.abs(x) + np.sqrt(x * x + 1))))
rec("acosh", lax.acosh, args_of(f32(3, 4, low=1.2, high=4)),
    w64(lambda x: np.log(x + np.sqrt(x * x - 1))))
rec("atanh", lax.atanh, args_of(f32(3, 4, low=-0.9, high=0.9)),
    w64(lambda x: 0.5 * np.log((1 + x) / (1 - x))))
rec("atanh_c64", lax.atanh, args_of(cplx(5, re=(-0.8, 0.8), im=(-0.8, 0.8))),
    w64(lambda z: 0.5 * np.log((1 + z) / (1 - z))), tol=1e-4)
rec("atan2", lax.atan2, args_of(away32(3, 4), away32(3, 4)), w64(np.arctan2),
    diff_argnums=(0, 1))

# -- roots, abs, reciprocal ---------------------------------------------------------------------
rec("sqrt", lax.sqrt, args_of(pos32(3, 4)), w64(lambda x: x ** 0.5))
rec("sqrt_c64", lax.sqrt, args_of(cplx(5, re=(0.2, 2.0))), w64(np.sqrt))
rec("rsqrt", lax.rsqrt, args_of(pos32(3, 4)), w64(lambda x: 1 / np.sqrt(x)))
rec("rsqrt_c64", lax.rsqrt, args_of(cplx(5, re=(0.2, 2.0))), w64(lambda z: 1 / np.sqrt(z)),
    tol=1e-4)
rec("cbrt", lax.cbrt, args_of(away32(3, 4)), w64(lambda x: np.sign(x) * np.abs(x) ** (1 / 3)))
rec("abs", lax.abs, args_of(away32(3, 4)), np.abs)
rec("abs_int", lax.abs, fixed(np.array([-2**31, -5, 0, 7], np.int32)), np.abs, **NODIFF)
rec("abs_c64", lax.abs, args_of(cplx(3, 2)), w64(np.abs, np.float32))
rec("reciprocal", lax.reciprocal, args_of(away32(3, 4)), w64(lambda x: 1 / x), tol=1e-4)

# -- pow, rem, nextafter ------------------------------------------------------------------------
rec("pow", lax.pow, args_of(pos32(3, 4), f32(3, 4)), w64(np.power), diff_argnums=(0, 1),
    tol=1e-4)
rec("pow_int_exponent", lax.pow, args_of(away32(3, 4), i32(3, 4, low=-3, high=4)),
    w64(lambda x, y: x ** y), tol=1e-4)
rec("pow_c64", lax.pow, args_of(cplx(4, re=(0.3, 2.0)), cplx(4, re=(-1.0, 1.0), im=(-1.0, 1.0))),
    w64(lambda x, y: np.exp(y * np.log(x))), diff_argnums=(0, 1), tol=1e-4)
rec("pow_scalar_exponent", lambda x: lax.pow(x, 2.5), args_of(pos32(5)),
    w64(lambda x: x ** 2.5))
rec("rem", lax.rem, rem_pair(3, 4), w64(np.fmod), diff_argnums=(0, 1), tol=1e-4)
rec("rem_int", lax.rem,
    fixed(np.array([7, -7, 7, -7, 3, -2**31, -2**31, 5], np.int32),
          np.array([3, 3, -3, -3, 0, -1, 7, 0], np.int32)),
    rem_int_ref, **NODIFF)
rec("rem_special", lax.rem,
    fixed(np.array([3.0, -3.0, np.inf, 3.0, -0.0, 5.5], np.float32),
          np.array([0.0, 0.0, 2.0, np.inf, 1.0, -2.0], np.float32)),
    w64(np.fmod), **NODIFF)
rec("nextafter", lax.nextafter, args_of(f32(3, 4), f32(3, 4)), np.nextafter,
    diff_argnums=(0,), tol=0)

# -- complex parts ------------------------------------------------------------------------------
rec("real", lax.real, args_of(cplx(3, 4)), np.real)
rec("imag", lax.imag, args_of(cplx(3, 4)), np.imag)
rec("conj", lax.conj, args_of(cplx(3, 4)), np.conj)
rec("conj_real_input", lax.conj, args_of(f32(3, 4)),
    lambda x: np.conj(x.astype(np.complex64)))
rec("complex", lax.complex, args_of(f32(3, 4), f32(3, 4)),
    lambda x, y: (x + 1j * y.astype(np.complex64)).astype(np.complex64), diff_argnums=(0, 1))
rec("complex_scalar_real", lambda y: lax.complex(1.5, y), args_of(f32(4)),
    lambda y: (1.5 + 1j * y.astype(np.complex64)).astype(np.complex64))

# -- bitwise, shifts, bit counting --------------------------------------------------------------
rec("bitwise_not", lax.bitwise_not, args_of(i32(10, low=-2**31, high=2**31 - 1)), np.invert,
    **NODIFF)
rec("bitwise_not_bool", lax.bitwise_not, args_of(boolean(10)), np.logical_not, **NODIFF)
for _name, _fn, _lfn in [("bitwise_and", np.bitwise_and, np.logical_and),
                         ("bitwise_or", np.bitwise_or, np.logical_or),
                         ("bitwise_xor", np.bitwise_xor, np.logical_xor)]:
    rec(_name, getattr(lax, _name),
        args_of(i32(10, low=-2**31, high=2**31 - 1), i32(10, low=-2**31, high=2**31 - 1)),
        _fn, **NODIFF)
    rec(f"{_name}_bool", getattr(lax, _name), args_of(boolean(10), boolean(10)), _lfn, **NODIFF)
    rec(f"{_name}_u8", getattr(lax, _name), args_of(u8(10), u8(10)), _fn, **NODIFF)
for _name, _kind in [("shift_left", "left"), ("shift_right_logical", "logical"),
                     ("shift_right_arithmetic", "arith")]:
    rec(_name, getattr(lax, _name),
        args_of(i32(16, low=-2**31, high=2**31 - 1), int_choice([-1, 0, 1, 5, 31, 32, 40], 16)),
        shift_ref(_kind), **NODIFF)
    rec(f"{_name}_u8", getattr(lax, _name),
        args_of(u8(16), int_choice([0, 1, 3, 7, 8, 9, 200], 16, dtype=np.uint8)),
        shift_ref(_kind), **NODIFF)
rec("population_count", lax.population_count, args_of(i32(12, low=-2**31, high=2**31 - 1)),
    popcount_ref, **NODIFF)
rec("population_count_u8", lax.population_count, args_of(u8(12)), popcount_ref, **NODIFF)
rec("clz", lax.clz, fixed(np.array([0, 1, -1, 2**30, 12345, -2**31, 255, 2**16], np.int32)),
    clz_ref, **NODIFF)
rec("clz_u8", lax.clz, args_of(u8(12)), clz_ref, **NODIFF)

# -- special functions --------------------------------------------------------------------------
rec("erf", lax.erf, args_of(f32(3, 4)), w64(vec(math.erf)))
rec("erfc", lax.erfc, args_of(f32(3, 4)), w64(vec(math.erfc)))
rec("erf_inv", lax.erf_inv, args_of(f32(3, 4, low=-0.9, high=0.9)), w64(sps.erfinv))
rec("lgamma", lax.lgamma, args_of(f32(3, 4, low=0.3, high=5.0)), w64(vec(math.lgamma)),
    tol=1e-4)
rec("lgamma_negative", lax.lgamma, args_of(frac32(6, low=-4, high=0)), w64(vec(math.lgamma)),
    tol=1e-4)
rec("digamma", lax.digamma, args_of(f32(3, 4, low=0.5, high=5.0)), w64(sps.psi), tol=1e-4)
rec("polygamma", lax.polygamma, args_of(small_float_ints(6), f32(6, low=0.5, high=3.0)),
    polygamma_ref, diff_argnums=(1,), tol=1e-4)
rec("zeta", lax.zeta, args_of(f32(6, low=1.5, high=4.0), f32(6, low=0.5, high=3.0)),
    w64(sps.zeta), diff_argnums=(), tol=1e-4)
rec("igamma", lax.igamma, args_of(f32(6, low=0.5, high=3.0), f32(6, low=0.2, high=4.0)),
    w64(sps.gammainc), diff_argnums=(0, 1), grad_order=1, tol=1e-4)
rec("igamma_x", lax.igamma, args_of(f32(6, low=0.5, high=3.0), f32(6, low=0.2, high=4.0)),
    w64(sps.gammainc), diff_argnums=(1,), tol=1e-4)
rec("igammac", lax.igammac, args_of(f32(6, low=0.5, high=3.0), f32(6, low=0.2, high=4.0)),
    w64(sps.gammaincc), diff_argnums=(0, 1), grad_order=1, tol=1e-4)
rec("igamma_grad_a", lax.igamma_grad_a,
    args_of(f32(8, low=0.3, high=6.0), f32(8, low=0.1, high=8.0)),
    igamma_grad_a_ref, tol=1e-4, **NODIFF)
rec("random_gamma_grad", lax.random_gamma_grad,
    args_of(f32(8, low=0.3, high=6.0), f32(8, low=0.1, high=8.0)),
    random_gamma_grad_ref, tol=1e-4, **NODIFF)
rec("betainc", lax.betainc,
    args_of(f32(6, low=0.5, high=3.0), f32(6, low=0.5, high=3.0), f32(6, low=0.1, high=0.9)),
    w64(sps.betainc), diff_argnums=(2,), tol=1e-4)
rec("bessel_i0e", lax.bessel_i0e, args_of(away32(3, 4, low=0.2, high=4.0)), w64(sps.i0e))
rec("bessel_i1e", lax.bessel_i1e, args_of(f32(3, 4, low=-4, high=4)), w64(sps.i1e))

# -- clamp, reduce_precision, bitcast_convert_type ----------------------------------------------
rec("clamp", lax.clamp, clamp_triple(3, 4), lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi),
    diff_argnums=(0, 1, 2))
rec("clamp_scalar_bounds", lax.clamp, clamp_scalar_bounds(3, 4),
    lambda lo, x, hi: np.clip(x, lo, hi), diff_argnums=(0, 1, 2))
rec("clamp_python_bounds", lambda x: lax.clamp(-1.0, x, 1.0), args_of(away32(6, low=0.1, high=0.9)),
    lambda x: np.clip(x, -1, 1))
rec("clamp_int", lax.clamp, fixed(np.int32(-2), np.arange(-5, 5, dtype=np.int32), np.int32(3)),
    lambda lo, x, hi: np.clip(x, lo, hi), **NODIFF)
rec("reduce_precision_f16", lambda x: lax.reduce_precision(x, 5, 10), args_of(f32(3, 4)),
    lambda x: x.astype(np.float16).astype(np.float32), tol=0, **NODIFF)
rec("reduce_precision_bf16", lambda x: lax.reduce_precision(x, 8, 7),
    args_of(f32(3, 4, low=-100, high=100)), lambda x: round_mantissa(x, 7), tol=0, **NODIFF)
rec("reduce_precision_fine", lambda x: lax.reduce_precision(x, 8, 20), args_of(f32(3, 4)),
    lambda x: round_mantissa(x, 20), tol=0)
rec("bitcast_f32_i32", lambda x: lax.bitcast_convert_type(x, np.int32), args_of(f32(3, 4)),
    lambda x: x.view(np.int32), **NODIFF)
rec("bitcast_f32_u8", lambda x: lax.bitcast_convert_type(x, np.uint8), args_of(f32(3)),
    lambda x: x.reshape(3, 1).view(np.uint8), **NODIFF)
rec("bitcast_u8_f32", lambda x: lax.bitcast_convert_type(x, np.float32), args_of(u8(2, 3, 4)),
    lambda x: x.view(np.float32).reshape(2, 3), **NODIFF)
