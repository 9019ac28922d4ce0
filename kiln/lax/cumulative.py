"""Cumulative reductions along one axis: cumsum, cumprod, cummax, cummin, cumlogsumexp
(parameters ``axis`` and ``reverse``, as in ``jax.lax``), with their rules.

cumsum is linear (its transpose is the cumsum in the other direction). The others get
their JVP from a Hillis–Steele prefix scan over (value, tangent) pairs: log2(n) steps,
each combining every element with the one ``2**k`` before it. This is exact where
division-based formulas are not (cumprod with zeros) and gives max/min ties JAX's
balanced tangents.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax import _half_flush
from kiln.lax._factory import as_dtype, standard_primitive
from kiln.lax.arith import add, div, eq, exp, log, mul, sub
from kiln.lax.arith import max as _lax_max
from kiln.lax.arith import min as _lax_min
from kiln.lax.slicing import concatenate, eager_checked, full_like, rev, slice_in_dim
from kiln.lax.structural import select


def _cumred_abstract_eval(name):
    def abstract_eval(x, *, axis, reverse):
        if x.dtype == np.bool_ or not (dtypes.issubdtype(x.dtype, np.number)):
            raise TypeError(f"{name} does not accept dtype {x.dtype.name}. Accepted dtypes are "
                            "subtypes of number.")
        if axis < 0:
            raise ValueError("XLA operations do not allow negative axes")
        if axis >= x.ndim:
            raise ValueError(f"axis {axis} is out of bounds for array of shape {x.shape}")
        return ShapedArray(x.shape, x.dtype, x.weak_type)
    return abstract_eval


def _cumred_impl(accumulate):
    def impl(x, *, axis, reverse):
        x = np.asarray(x)
        dt = x.dtype
        work = x.astype(np.float32) if dt == dtypes.bfloat16 else x
        if dt == dtypes.bfloat16 and getattr(accumulate, "daz", False):
            _half_flush.flush_f32(work)     # XLA's max/min read bfloat16 subnormals as 0
        if reverse:
            work = np.flip(work, axis)
        out = accumulate(work, axis)
        if reverse:
            out = np.flip(out, axis)
        return as_dtype(out, dt)
    return impl


def _cumsum_np(x, axis):
    return np.cumsum(x, axis=axis, dtype=x.dtype)


def _cumprod_np(x, axis):
    return np.cumprod(x, axis=axis, dtype=x.dtype)


def _cumlogsumexp_np(x, axis):
    if x.dtype.kind in "iub":
        x = x.astype(dtypes.default_float_dtype())
    with np.errstate(invalid="ignore"):
        return np.logaddexp.accumulate(x, axis=axis)


def _cumulative_primitive(name, accumulate):
    prim = standard_primitive(name, _cumred_abstract_eval(name), _cumred_impl(accumulate),
                              weak_type_rule=lambda w, **_: w)

    def batch(axis_data, vals, dims, *, axis, reverse):
        (x,), (d,) = vals, dims
        return prim.bind(x, axis=axis + 1 if axis >= d else axis, reverse=reverse), d

    batching.batch_rules[prim] = batch
    eager_checked(prim)
    return prim


cumsum_p = _cumulative_primitive("cumsum", _cumsum_np)
cumprod_p = _cumulative_primitive("cumprod", _cumprod_np)
def _cum_max_min(fn):
    """``fn.accumulate`` (``np.maximum``/``np.minimum``) as XLA's ``reduce_window`` of
    ``max``/``min`` computes it: ``-0`` below ``+0`` (a running maximum that is zero is
    ``+0`` once a ``+0`` was seen; a minimum ``-0`` once a ``-0`` was); bfloat16
    (widened to float32 by the impl) has its subnormals flushed first."""
    neg = fn is np.minimum          # the zero that wins a tie: -0 for min, +0 for max

    def accumulate(x, axis):
        if x.dtype.kind != "f":
            return fn.accumulate(x, axis=axis)
        r = fn.accumulate(x, axis=axis)
        z = r == 0
        if np.any(z):
            x32 = np.asarray(x, np.float32)
            seen = np.logical_or.accumulate((x32 == 0) & (np.signbit(x32) == neg), axis=axis)
            win, lose = np.array(-0.0 if neg else 0.0, x.dtype), np.array(0.0 if neg else -0.0,
                                                                          x.dtype)
            r = np.where(z, np.where(seen, win, lose), r).astype(x.dtype)
        return r
    accumulate.daz = True     # bfloat16 operands are flushed before (``_cumred_impl``)
    return accumulate


cummax_p = _cumulative_primitive("cummax", _cum_max_min(np.maximum))
cummin_p = _cumulative_primitive("cummin", _cum_max_min(np.minimum))
cumlogsumexp_p = _cumulative_primitive("cumlogsumexp", _cumlogsumexp_np)

ad.deflinear2(cumsum_p, lambda ct, x, *, axis, reverse: [
    Zero(x.aval) if type(ct) is Zero else cumsum(ct, axis, not reverse)])


# ----------------------------------------------------------------------------------------------
# JVPs by a prefix scan over (value, tangent) pairs.


def _scan_tangent(x, t, axis, reverse, combine):
    """The tangent of the inclusive scan of ``x`` under ``combine`` in direction ``t``.

    ``combine(a, da, b, db) -> (r, dr)`` merges an earlier block ``a`` with a later one
    ``b``; ``dr`` must be linear in ``da``/``db`` (the primal values only weight them).
    """
    if reverse:
        x, t = rev(x, (axis,)), rev(t, (axis,))
    n = get_aval(x).shape[axis]
    y, dy = x, t
    s = 1
    while s < n:
        r, dr = combine(slice_in_dim(y, 0, n - s, axis=axis), slice_in_dim(dy, 0, n - s, axis=axis),
                        slice_in_dim(y, s, n, axis=axis), slice_in_dim(dy, s, n, axis=axis))
        y = concatenate([slice_in_dim(y, 0, s, axis=axis), r], axis)
        dy = concatenate([slice_in_dim(dy, 0, s, axis=axis), dr], axis)
        s *= 2
    return rev(dy, (axis,)) if reverse else dy


def _combine_mul(a, da, b, db):
    return mul(a, b), add(mul(da, b), mul(a, db))


def _balanced(x, r, other):
    # JAX's max/min tangent: 1 where x attains the result alone, 1/2 on a tie, else 0.
    one, half, zero = full_like(r, 1), full_like(r, 0.5), full_like(r, 0)
    return select(eq(x, r), select(eq(other, r), half, one), zero)


def _combine_extremum(op):
    def combine(a, da, b, db):
        r = op(a, b)
        return r, add(mul(da, _balanced(a, r, b)), mul(db, _balanced(b, r, a)))
    return combine


def _combine_logaddexp(a, da, b, db):
    m = _lax_max(a, b)
    zero, one = full_like(m, 0), full_like(m, 1)
    m = select(eq(m, -np.inf), zero, m)            # both -inf: keep exp finite
    ea, eb = exp(sub(a, m)), exp(sub(b, m))
    s = add(ea, eb)
    r = add(m, log(s))
    s_safe = select(eq(s, 0), one, s)
    return r, add(mul(da, div(ea, s_safe)), mul(db, div(eb, s_safe)))


def _scan_jvp(prim, combine):
    def rule(primals, tangents, *, axis, reverse):
        (x,), (t,) = primals, tangents
        ans = prim.bind(x, axis=axis, reverse=reverse)
        if type(t) is Zero or not ad.is_differentiable_dtype(get_aval(x).dtype):
            return ans, Zero.from_primal_value(ans)
        return ans, _scan_tangent(x, t, axis, reverse, combine)
    ad.jvp_rules[prim] = rule


_scan_jvp(cumprod_p, _combine_mul)
_scan_jvp(cummax_p, _combine_extremum(_lax_max))
_scan_jvp(cummin_p, _combine_extremum(_lax_min))
_scan_jvp(cumlogsumexp_p, _combine_logaddexp)


# ----------------------------------------------------------------------------------------------
# public wrappers


def cumsum(operand, axis=0, reverse=False):
    """Cumulative sum along ``axis`` (from the end when ``reverse``)."""
    return cumsum_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def cumprod(operand, axis=0, reverse=False):
    """Cumulative product along ``axis``."""
    return cumprod_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def cummax(operand, axis=0, reverse=False):
    """Cumulative maximum along ``axis`` (NaN propagates)."""
    return cummax_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def cummin(operand, axis=0, reverse=False):
    """Cumulative minimum along ``axis`` (NaN propagates)."""
    return cummin_p.bind(operand, axis=int(axis), reverse=bool(reverse))


def cumlogsumexp(operand, axis=0, reverse=False):
    """Cumulative ``log(sum(exp(x)))`` along ``axis``, computed stably."""
    return cumlogsumexp_p.bind(operand, axis=int(axis), reverse=bool(reverse))


__all__ = ["cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", "cumsum_p", "cumprod_p",
           "cummax_p", "cummin_p", "cumlogsumexp_p"]
