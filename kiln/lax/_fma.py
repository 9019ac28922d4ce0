"""``fma``: a fused multiply-add, ``a * b + c`` rounded once, as an internal primitive.

Users never stage it: the compiler's last pass (``kiln/compiler/passes/xla_fma.py``)
contracts a product feeding an add or subtract where XLA's CPU code does, so compiled
programs give JAX's bits. The compiler renders it as C's ``fmaf``/``fma``; the reference
backend (which runs the passes' output for programs with nothing native, and the first
tier of every jitted program) needs the same bits, so the NumPy implementation here is
exact (correctly rounded) for float32 and float64:

* float32: the product of two float32s is exact in float64; the sum with ``c`` is
  rounded to float64 *to odd* (an inexact result gets an odd last bit, from the sum's
  exact error), then to float32 -- rounding to odd with two extra bits makes the second
  rounding correct (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums:
  proved algorithms using rounding to odd", IEEE TC 2008).
* float64: the same paper's algorithm: ``a * b = uh + ul`` exactly (Veltkamp's split),
  ``c + uh = th + tl`` exactly (TwoSum), ``v = odd(tl + ul)``, result ``th + v``. Elements
  where an intermediate could overflow or lose bits to underflow (huge or tiny operands,
  infinities, NaNs, zero products) are computed one by one exactly with ``fractions``.

Other dtypes (float16, bfloat16) round the float64 result (never staged: the pass
contracts float32 and float64 only).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.lax._factory import _float, naryop, standard_primitive

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _odd(s, err):
    """``s`` (a rounded sum with exact error ``err``) rounded to odd instead: inexact
    results with an even last bit move one ulp toward the exact value."""
    bits = s.view(np.int64)
    fix = (err != 0) & ((bits & 1) == 0) & np.isfinite(s)
    if fix.any():
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s


def _two_sum(x, y):
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def fma32(a, b, c) -> np.ndarray:
    """``a * b + c`` of float32 arrays rounded once (broadcast), as float32."""
    with np.errstate(all="ignore"):
        p = np.asarray(a, _F64) * np.asarray(b, _F64)       # exact
        s, err = _two_sum(p, np.asarray(c, _F64))
        return np.asarray(_odd(np.asarray(s), np.asarray(err)), _F64).astype(_F32)


_SPLIT = 134217729.0            # 2**27 + 1 (Veltkamp)


def _split(x):
    t = _SPLIT * x
    hi = t - (t - x)
    return hi, x - hi


def fma64(a, b, c) -> np.ndarray:
    """``a * b + c`` of float64 arrays rounded once (broadcast), as float64."""
    a, b, c = np.broadcast_arrays(np.asarray(a, _F64), np.asarray(b, _F64),
                                  np.asarray(c, _F64))
    with np.errstate(all="ignore"):
        uh = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl
        th, tl = _two_sum(c, uh)
        v, verr = _two_sum(tl, ul)
        out = th + _odd(v, verr)
        aa, ab, ac = np.abs(a), np.abs(b), np.abs(c)
        # Every intermediate exact: operands below 2**995 (the split), the product's
        # low part a normal number, the sum far from overflow.
        safe = ((aa < 2.0 ** 995) & (ab < 2.0 ** 995) & (ac < 2.0 ** 1020)
                & (np.abs(uh) > 2.0 ** -900) & (np.abs(uh) < 2.0 ** 1020)
                & ((ac > 2.0 ** -900) | (ac == 0)))
    if not safe.all():
        out = np.array(out)
        for i in map(tuple, np.argwhere(~safe)):       # () for 0-d operands
            out[i] = _fma_exact(float(a[i]), float(b[i]), float(c[i]))
    return out


def _fma_exact(x: float, y: float, z: float) -> float:
    """One element, exactly (slow path: specials, zeros, extreme exponents)."""
    import math
    if not (math.isfinite(x) and math.isfinite(y)):
        return x * y + z                # an infinite or NaN product is exact
    if not math.isfinite(z):
        return z + 0.0 * x * y          # z, or NaN for a NaN z
    if x == 0 or y == 0:
        return x * y + z                # (+-0) + z, signs as IEEE
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        return 0.0                      # an exact zero sum of nonzero terms is +0
    try:
        return float(exact)             # correctly rounded (subnormals included)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


def fma(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once in the operands' dtype (float32 or float64)."""
    dt = np.result_type(a, b, c)
    if dt == _F32:
        return fma32(a, b, c)
    if dt == _F64:
        return fma64(a, b, c)
    return np.asarray(fma64(a, b, c)).astype(dt)


def _impl(a, b, c, *, weak_type=False):
    out = fma(a, b, c)
    return np.asarray(out, np.result_type(a, b, c))


def _weak_type_rule(*weak_types, weak_type=False):
    # The weak type of the add/subtract the fma replaces (its rule may differ: add_any).
    return bool(weak_type)


fma_p = naryop("fma", _impl, _float, weak_type_rule=_weak_type_rule)


# ---- reduce_sum_fma: XLA's short sums of products --------------------------------------

def _reduce_sum_fma_impl(a, b, *, axes, weak_type=False):
    """``sum(a * b, axes)`` folded in order, ``acc = fma(a[i], b[i], acc)`` from +0 (the
    order of the reduced positions is row-major, as XLA's loop)."""
    a, b = np.asarray(a), np.asarray(b)
    axes = tuple(sorted(int(d) for d in axes))
    keep = [d for d in range(a.ndim) if d not in axes]
    perm = keep + list(axes)
    kept_shape = tuple(a.shape[d] for d in keep)
    a2 = np.transpose(a, perm).reshape(kept_shape + (-1,))
    b2 = np.transpose(b, perm).reshape(kept_shape + (-1,))
    acc = np.zeros(kept_shape, a.dtype)
    for i in range(a2.shape[-1]):
        acc = np.asarray(fma(a2[..., i], b2[..., i], acc), a.dtype)
    return acc


def _reduce_sum_fma_abstract(a, b, *, axes, weak_type=False):
    if a.shape != b.shape or a.dtype != b.dtype:
        raise TypeError("reduce_sum_fma: operands of one shape and dtype")
    shape = tuple(n for d, n in enumerate(a.shape) if d not in axes)
    return ShapedArray(shape, a.dtype, bool(weak_type))


reduce_sum_fma_p = standard_primitive("reduce_sum_fma", _reduce_sum_fma_abstract,
                                      _reduce_sum_fma_impl)


# ---- rounded: a product XLA rounds before the sum it feeds --------------------------------

def _make_rounded():
    from kiln.interpreters import ad, batching
    prim = standard_primitive(
        "rounded", lambda x: ShapedArray(x.shape, x.dtype, x.weak_type), lambda x: x,
        weak_type_rule=lambda w: w)
    batching.vectorized_batcher(prim)
    ad.deflinear(prim, lambda ct: [prim.bind(ct)])
    return prim


rounded_p = _make_rounded()


def rounded(x):
    """``x`` itself, marked as rounded: the compiler's FMA contraction leaves a sum of it
    alone. For kiln's own code that reproduces a whole XLA program's bits (a sampler whose
    fused loop adds a product XLA rounds first: ``maxwell``'s sum of squares); the
    compiler lowers it to nothing."""
    return rounded_p.bind(x)
