"""Reductions: ``sum``, ``prod``, ``max``, ``min``, ``all``, ``any``, ``mean``, ``var``,
``std``, ``argmax``, ``argmin``, ``cumsum``, ``cumprod``, ``ptp``, ``count_nonzero``,
``average`` and the simple ``nan*`` versions.

Dtype rules are JAX's: ``sum``/``prod`` of bools and small integers give the default
integer, ``mean``/``var`` of integers give the default float, results are never weak.
Axes must be static; everything else may be traced.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from kiln import dtypes, lax
from kiln.array import to_array
from kiln.core.trace import get_aval
from kiln.numpy import _eager, _util
from kiln.numpy._util import as_operand, canonicalize_axes, ensure_arraylike, user_dtype

__all__ = ["sum", "prod", "max", "amax", "min", "amin", "all", "any", "mean", "var", "std", "argmax", "argmin", "cumsum", "cumprod",
           "cumulative_sum", "cumulative_prod", "ptp", "count_nonzero", "average", "nansum",
           "nanprod", "nanmax", "nanmin", "nanmean", "nanvar", "nanstd", "nanargmax",
           "nanargmin", "nancumsum", "nancumprod"]


def _kind(dt) -> str:
    if dt == np.bool_:
        return "b"
    if dtypes.issubdtype(dt, np.complexfloating):
        return "c"
    if dtypes.issubdtype(dt, np.floating):
        return "f"
    if dtypes.issubdtype(dt, np.unsignedinteger):
        return "u"
    return "i"


def _promote_integer_dtype(dt):
    """bool and integers narrower than the default int become the default int (uint alike)."""
    k = _kind(dt)
    if k == "b":
        return dtypes.default_int_dtype()
    if k == "u":
        d = dtypes.default_uint_dtype()
        return d if dtypes.iinfo(dt).bits < dtypes.iinfo(d).bits else dt
    if k == "i":
        d = dtypes.default_int_dtype()
        return d if dtypes.iinfo(dt).bits < dtypes.iinfo(d).bits else dt
    return dt


def _upcast_f16(dt):
    if np.dtype(dt) in (np.dtype(np.float16), np.dtype(dtypes.bfloat16)):
        return np.dtype(np.float32)
    return dt


def _check_where(name, where):
    if where is None:
        return None
    where = ensure_arraylike(name, where)
    if get_aval(where).dtype != np.bool_:
        raise ValueError(f"jnp.{name}: where must be None or a boolean array; got "
                         f"where.dtype={get_aval(where).dtype}.")
    return where


def _init_value(dt, value):
    """``value`` as a NumPy scalar of ``dt`` (±inf clamps to the extremes of ints/bools)."""
    k = _kind(dt)
    if k == "b":
        return np.asarray(value > 0, dt)
    if k in "iu" and np.isinf(value):
        info = dtypes.iinfo(dt)
        return np.asarray(info.max if value > 0 else info.min, dt)
    if k == "f" and np.isinf(value) and not dtypes.supports_inf(dt):
        info = dtypes.finfo(dt)
        return np.asarray(info.max if value > 0 else info.min, dt)
    return np.asarray(value, dt)


def _reduce(a, name, lax_reduce, init_val, *, has_identity=True, bool_reduce=None,
            upcast_f16=False, axis=None, dtype=None, out=None, keepdims=False, initial=None,
            where=None, promote_integers=False, combine=None):
    """The shared body of sum/prod/max/min/all/any."""
    if out is not None:
        raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")
    a = ensure_arraylike(name, a)
    where = _check_where(name, where)
    aval = get_aval(a)
    if isinstance(aval.dtype, dtypes.ExtendedDType):      # typed keys: JAX's TypeError
        raise TypeError(f"Cannot interpret '{aval.dtype}' as a data type")
    axes = canonicalize_axes(axis, aval.ndim)
    if initial is None and not has_identity:
        if where is not None:
            raise ValueError(f"reduction operation {name} does not have an identity, so to use "
                             "a where mask one has to specify 'initial'")
        if builtins.any(aval.shape[d] == 0 for d in axes):
            raise ValueError(f"zero-size array to reduction operation {name} which has no "
                             "identity")
    if dtype is None:
        result_dtype = aval.dtype
        if promote_integers:
            result_dtype = _promote_integer_dtype(result_dtype)
    else:
        result_dtype = user_dtype(dtype, name)
    comp_dtype = _upcast_f16(result_dtype) if upcast_f16 and _kind(result_dtype) in "fc" \
        else result_dtype
    a = lax.convert_element_type(a, comp_dtype)
    reducer = bool_reduce if (comp_dtype == np.bool_ and bool_reduce is not None) else lax_reduce
    if where is not None:
        fill = _util.full_const(aval.shape, _init_value(comp_dtype, init_val), comp_dtype)
        a = lax.select(_util.broadcast_to(where, aval.shape), a, fill)
    if axes and builtins.any(aval.shape[d] == 0 for d in axes) and not has_identity:
        # An empty reduction without an identity: the result is ``initial`` (checked above).
        out_shape = tuple(s for i, s in enumerate(aval.shape) if i not in axes)
        result = _util.full_const(out_shape, _init_value(comp_dtype, init_val), comp_dtype)
    else:
        result = reducer(a, axes) if axes else a
    if initial is not None:
        if isinstance(initial, (bool, int, float, complex, np.generic, np.ndarray)):
            # A constant converted with NumPy, as JAX's jitted reductions fold it: not an
            # eager primitive whose -inf jax_debug_infs would report (softmax's initial).
            init = to_array(np.asarray(initial).astype(comp_dtype))
        else:
            init = lax.convert_element_type(as_operand(initial), comp_dtype)
        if get_aval(init).shape != ():
            raise ValueError("initial value must be a scalar. Got array of shape "
                             f"{get_aval(init).shape}")
        init = _util.broadcast_to(init, get_aval(result).shape)
        result = combine(init, result)
    if keepdims:
        result = lax.expand_dims(result, axes)
    return lax.convert_element_type(result, result_dtype)


def _or(a, b):
    return lax.bitwise_or(a, b)


def _and(a, b):
    return lax.bitwise_and(a, b)


def _max2(a, b):
    return lax.max(a, b)


def _min2(a, b):
    return lax.min(a, b)


def _add2(a, b):
    return lax.bitwise_or(a, b) if get_aval(a).dtype == np.bool_ else lax.add(a, b)


_add_reduce = np.add.reduce   # what np.sum calls, without its argument wrapping


def _mul2(a, b):
    return lax.bitwise_and(a, b) if get_aval(a).dtype == np.bool_ else lax.mul(a, b)


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,  # noqa: A001
        promote_integers=True):
    """Sum over ``axis`` (bool and small ints accumulate in the default int)."""
    if dtype is None and initial is None and where is None and out is None:
        vals = _eager.plain_values(a)
        if vals is not None:
            v = vals[0]
            axes = _eager.axes_of(axis, v.ndim)
            if axes is not None:
                if _eager.filtered():
                    r = _add_reduce(v, axis=axes, dtype=v.dtype, keepdims=bool(keepdims))
                else:
                    r = _eager.call_quietly(_add_reduce, v, axis=axes, dtype=v.dtype,
                                            keepdims=bool(keepdims))
                return _eager.wrap(_eager.as_ndarray(r))
    return _reduce(a, "sum", lax.reduce_sum, 0, bool_reduce=lambda x, ax: lax.reduce_or(x, ax),
                   upcast_f16=True, axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                   initial=initial, where=where, promote_integers=promote_integers,
                   combine=_add2)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
         promote_integers=True):
    """Product over ``axis``."""
    return _reduce(a, "prod", lambda x, ax: lax.reduce_prod(x, ax), 1,
                   bool_reduce=lambda x, ax: lax.reduce_and(x, ax), upcast_f16=True, axis=axis,
                   dtype=dtype, out=out, keepdims=keepdims, initial=initial, where=where,
                   promote_integers=promote_integers, combine=_mul2)


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    """Maximum over ``axis`` (NaNs propagate)."""
    return _reduce(a, "max", lax.reduce_max, -np.inf, has_identity=False, axis=axis, out=out,
                   keepdims=keepdims, initial=initial, where=where, combine=_max2)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    """Minimum over ``axis`` (NaNs propagate)."""
    return _reduce(a, "min", lax.reduce_min, np.inf, has_identity=False, axis=axis, out=out,
                   keepdims=keepdims, initial=initial, where=where, combine=_min2)


amax = max
amin = min


def _to_bool(a):
    a = as_operand(a)
    if get_aval(a).dtype == np.bool_:
        return a
    return lax.ne(a, _util.zeros_like_op(a))


def all(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
    """True where every element along ``axis`` is nonzero."""
    a = ensure_arraylike("all", a)
    return _reduce(_to_bool(a), "all", lambda x, ax: lax.reduce_and(x, ax), True, axis=axis,
                   out=out, keepdims=keepdims, where=where, combine=_and)


def any(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
    """True where some element along ``axis`` is nonzero."""
    a = ensure_arraylike("any", a)
    return _reduce(_to_bool(a), "any", lambda x, ax: lax.reduce_or(x, ax), False, axis=axis,
                   out=out, keepdims=keepdims, where=where, combine=_or)


def _count(a, axis, keepdims, where, dtype):
    """The number of elements reduced (a constant unless ``where`` is given)."""
    aval = get_aval(a)
    axes = canonicalize_axes(axis, aval.ndim)
    if where is None:
        n = math.prod(aval.shape[d] for d in axes)
        shape = tuple(1 if i in axes else s for i, s in enumerate(aval.shape)) if keepdims \
            else tuple(s for i, s in enumerate(aval.shape) if i not in axes)
        return _util.full_const(shape, n, dtype)
    return sum(_util.broadcast_to(where, aval.shape), axis, dtype=dtype, keepdims=keepdims)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Arithmetic mean over ``axis`` (integers give the default float)."""
    if dtype is None and where is None and out is None:
        vals = _eager.plain_values(a)
        if vals is not None:
            v = vals[0]
            axes = _eager.axes_of(axis, v.ndim)
            if axes is not None:
                n = math.prod(v.shape[d] for d in axes)
                tok = _eager.fp_enter(_eager.FP_IGNORE)
                try:
                    total = _add_reduce(v, axis=axes, dtype=v.dtype, keepdims=bool(keepdims))
                    t = v.dtype.type
                    # XLA multiplies by the reciprocal of a constant divisor (_mean_eager).
                    r = (np.multiply(total, t(1) / t(n)) if v.dtype.kind == "f" else
                         np.true_divide(total, t(n)))
                finally:
                    _eager.fp_leave(tok)
                return _eager.wrap(_eager.as_ndarray(r))
    a = ensure_arraylike("mean", a)
    where = _check_where("mean", where)
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.mean is not supported.")
    if dtype is None:
        result_dtype = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(get_aval(a).dtype))
    else:
        result_dtype = user_dtype(dtype, "mean")
    comp = _upcast_f16(result_dtype) if _kind(result_dtype) in "fc" else result_dtype
    total = sum(a, axis, dtype=comp, keepdims=keepdims, where=where)
    if where is None and _kind(comp) == "f" and _mean_eager():
        # JAX's mean divides by a constant count inside a jit, and XLA rewrites a division
        # by a constant into a multiplication by its (correctly rounded) reciprocal: so
        # ``mean(arange(63) * 3)`` is 93.00001 in JAX, eager or jit. Eagerly kiln does the
        # same; traced, the jaxpr keeps JAX's ``div`` (docs/compatibility.md).
        t = np.dtype(comp).type
        n = _count_n(a, axis)
        recip = t(1) / t(n) if n else t(np.inf)
        scale = _util.full_const(get_aval(total).shape, recip, comp)
        return lax.convert_element_type(lax.mul(total, scale), result_dtype)
    normalizer = _count(a, axis, keepdims, where, comp)
    return lax.convert_element_type(lax.div(total, normalizer), result_dtype)


def _mean_eager() -> bool:
    """No transformation is active (eager values): mean multiplies by the reciprocal."""
    from kiln.core import trace as core
    return core._state.trace is core.eval_trace


def _count_n(a, axis) -> int:
    aval = get_aval(a)
    return math.prod(aval.shape[d] for d in canonicalize_axes(axis, aval.ndim))


def _var_promote(a_dtype, dtype):
    if dtype is not None:
        if _kind(dtype) != "c" and _kind(a_dtype) == "c":
            raise ValueError("jax.numpy.var does not yet support real dtype parameters when "
                             "computing the variance of an array of complex values.")
        comp = dtype
    elif _kind(a_dtype) not in "fc":
        dtype = comp = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(a_dtype))
    else:
        dtype = np.array(0, a_dtype).real.dtype
        comp = a_dtype
    return _upcast_f16(comp), np.dtype(dtype)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
        mean=None, correction=None):
    """Variance over ``axis`` with ``ddof`` (or ``correction``) degrees of freedom removed."""
    a = ensure_arraylike("var", a)
    where = _check_where("var", where)
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.var is not supported.")
    if correction is None:
        correction = ddof
    elif ddof != 0:
        raise ValueError("ddof and correction can't be provided simultaneously.")
    dtype = user_dtype(dtype, "var")
    comp, dtype = _var_promote(get_aval(a).dtype, dtype)
    a = lax.convert_element_type(a, comp)
    if mean is None:
        a_mean = _mean_fn(a, axis, dtype=comp, keepdims=True, where=where)
    else:
        a_mean = lax.convert_element_type(ensure_arraylike("var", mean), comp)
    a_mean = _util.broadcast_to(a_mean, get_aval(a).shape)
    centered = lax.sub(a, a_mean)
    if _kind(comp) == "c":
        centered = lax.real(lax.mul(centered, lax.conj(centered)))
        comp = get_aval(centered).dtype
    else:
        centered = lax.mul(centered, centered)
    normalizer = _count(a, axis, keepdims, where, comp)
    normalizer = lax.sub(normalizer, _util.broadcast_to(
        lax.convert_element_type(as_operand(correction), comp), get_aval(normalizer).shape))
    total = sum(centered, axis, dtype=comp, keepdims=keepdims, where=where)
    result = lax.convert_element_type(lax.div(total, normalizer), dtype)
    pos = lax.gt(normalizer, _util.zeros_like_op(normalizer))
    nan = _util.full_const(get_aval(result).shape, np.nan, get_aval(result).dtype)
    return lax.select(pos, result, nan)


_mean_fn = mean


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
        mean=None, correction=None):
    """Standard deviation: ``sqrt(var(...))``."""
    a = ensure_arraylike("std", a)
    return lax.sqrt(var(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
                        correction=correction))


def _arg_reduce(name, lax_fn, a, axis, out, keepdims):
    if out is not None:
        raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")
    a = ensure_arraylike(name, a)
    aval = get_aval(a)
    if axis is None:
        dims = tuple(range(aval.ndim))
        a = lax.reshape(a, (aval.size,))
        ax = 0
    else:
        ax = _util.canonicalize_axis(axis, aval.ndim)
        dims = (ax,)
    if get_aval(a).shape[ax] == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
    result = lax_fn(a, ax, dtypes.default_int_dtype())
    return lax.expand_dims(result, dims) if keepdims else result


def argmax(a, axis=None, out=None, keepdims=None):
    """Index of the maximum along ``axis`` (of the flattened array when None)."""
    return _arg_reduce("argmax", lambda x, ax, dt: lax.argmax(x, ax, dt), a, axis, out,
                       keepdims)


def argmin(a, axis=None, out=None, keepdims=None):
    """Index of the minimum along ``axis`` (of the flattened array when None)."""
    return _arg_reduce("argmin", lambda x, ax, dt: lax.argmin(x, ax, dt), a, axis, out,
                       keepdims)


def _cumulative(name, lax_fn, a, axis, dtype, out=None, promote_integers=False):
    a = ensure_arraylike(name, a)
    if out is not None:
        raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported")
    aval = get_aval(a)
    if axis is None or aval.ndim == 0:
        a = lax.reshape(a, (aval.size,))
    if axis is None:
        axis = 0
    aval = get_aval(a)
    axis = _util.canonicalize_axis(axis, aval.ndim)
    if dtype is None:
        if promote_integers or aval.dtype == np.bool_:
            result_dtype = _promote_integer_dtype(aval.dtype)
        else:
            result_dtype = aval.dtype
        comp = result_dtype
    elif np.dtype(dtype) == np.bool_:
        result_dtype = np.dtype(np.bool_)
        if aval.dtype != np.bool_:
            a = _to_bool(a)
        comp = _promote_integer_dtype(result_dtype)
    else:
        result_dtype = comp = user_dtype(dtype, name)
    a = lax.convert_element_type(a, comp)
    return lax.convert_element_type(lax_fn(a, axis), result_dtype)


def cumsum(a, axis=None, dtype=None, out=None):
    """Cumulative sum along ``axis`` (of the flattened array when None)."""
    return _cumulative("cumsum", lambda x, ax: lax.cumsum(x, ax), a, axis, dtype, out)


def cumprod(a, axis=None, dtype=None, out=None):
    """Cumulative product along ``axis`` (of the flattened array when None)."""
    return _cumulative("cumprod", lambda x, ax: lax.cumprod(x, ax), a, axis, dtype, out)


def _cumulative_with_initial(name, fn, identity, x, axis, dtype, include_initial):
    x = ensure_arraylike(name, x)
    if get_aval(x).ndim == 0:
        raise ValueError(f"The input must be non-scalar to take a cumulative {name}")
    if axis is None:
        if get_aval(x).ndim > 1:
            raise ValueError("The input array has rank >1; specify the axis")
        axis = 0
    out = fn(x, axis, dtype)
    if include_initial:
        aval = get_aval(out)
        ax = _util.canonicalize_axis(axis, aval.ndim)
        shape = list(aval.shape)
        shape[ax] = 1
        init = _util.full_const(tuple(shape), identity, aval.dtype)
        out = lax.concatenate([init, out], ax)
    return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Array-API cumulative sum (optionally starting with 0). Unlike ``cumsum``, small
    integer and boolean inputs accumulate in the default int/uint dtype (as ``sum``)."""
    def fn(a, ax, dt):
        return _cumulative("cumulative_sum", lambda v, k: lax.cumsum(v, k), a, ax, dt,
                           promote_integers=True)
    return _cumulative_with_initial("cumulative_sum", fn, 0, x, axis, dtype,
                                    include_initial)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Array-API cumulative product (optionally starting with 1)."""
    return _cumulative_with_initial("cumulative_prod", cumprod, 1, x, axis, dtype,
                                    include_initial)


def ptp(a, axis=None, out=None, keepdims=False):
    """Range of values (``max - min``) along ``axis``."""
    a = ensure_arraylike("ptp", a)
    from kiln.numpy._ufuncs import subtract
    return subtract(max(a, axis, out=out, keepdims=keepdims),
                    min(a, axis, keepdims=keepdims))


def count_nonzero(a, axis=None, keepdims=False):
    """Number of nonzero elements along ``axis`` (default int dtype)."""
    a = ensure_arraylike("count_nonzero", a)
    return sum(_to_bool(a), axis=axis, dtype=dtypes.default_int_dtype(), keepdims=keepdims)


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Weighted mean over ``axis``; with ``returned`` also the sum of weights."""
    a = ensure_arraylike("average", a)
    aval = get_aval(a)
    axes = canonicalize_axes(axis, aval.ndim)
    if weights is None:
        (a,) = _util.promote_dtypes_inexact(a)
        avg = mean(a, axis=axis, keepdims=keepdims)
        n = math.prod(aval.shape[d] for d in axes)
        wsum = _util.full_const((), n, get_aval(avg).dtype)
    else:
        weights = ensure_arraylike("average", weights)
        a, weights = _util.promote_dtypes_inexact(a, weights)
        wshape = get_aval(weights).shape
        if wshape != aval.shape:
            if axis is None:
                raise ValueError("Axis must be specified when shapes of a and weights differ.")
            if wshape != tuple(aval.shape[d] for d in axes):
                raise ValueError("Shape of weights must be consistent with shape of a along "
                                 "specified axis.")
            order = tuple(int(i) for i in np.argsort(axes))
            weights = lax.transpose(weights, order) if len(order) > 1 else weights
            new_shape = tuple(d if i in axes else 1 for i, d in enumerate(aval.shape))
            weights = lax.reshape(weights, new_shape)
        from kiln.numpy._ufuncs import multiply, true_divide
        wsum = sum(weights, axis=axis, keepdims=keepdims)
        avg = true_divide(sum(multiply(a, weights), axis=axis, keepdims=keepdims), wsum)
    if returned:
        wsum = _util.broadcast_to(wsum, get_aval(avg).shape)
        return avg, wsum
    return avg


# ----------------------------------------------------------------------------------------------
# nan-ignoring versions (NaNs replaced by the reduction's identity)


def _replace_nan(a, value):
    a = as_operand(a)
    dt = get_aval(a).dtype
    if _kind(dt) not in "fc":
        return a
    from kiln.numpy._ufuncs import isnan
    fill = _util.full_const(get_aval(a).shape, _init_value(dt, value) if _kind(dt) == "f"
                            else value, dt)
    return lax.select(isnan(a), fill, a)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """``sum`` treating NaN as 0."""
    a = ensure_arraylike("nansum", a)
    return sum(_replace_nan(a, 0), axis, dtype, out, keepdims, initial, where)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """``prod`` treating NaN as 1."""
    a = ensure_arraylike("nanprod", a)
    return prod(a=_replace_nan(a, 1), axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                initial=initial, where=where)


def _nan_extreme(name, fn, fill, a, axis, out, keepdims, initial, where):
    a = ensure_arraylike(name, a)
    if _kind(get_aval(a).dtype) not in "fc":
        return fn(a, axis, out=out, keepdims=keepdims, initial=initial, where=where)
    from kiln.numpy._ufuncs import isnan
    res = fn(_replace_nan(a, fill), axis, out=out, keepdims=keepdims, initial=initial,
             where=where)
    # All-NaN slices give NaN (NumPy warns; JAX returns NaN), unless ``initial`` is given;
    # as in JAX, the all-NaN test ignores ``where``.
    if initial is not None:
        return res
    all_nan = all(isnan(a), axis=axis, keepdims=keepdims)
    nan = _util.full_const(get_aval(res).shape, np.nan, get_aval(res).dtype)
    return lax.select(all_nan, nan, res)


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """``max`` ignoring NaNs (NaN where a slice is all NaN)."""
    return _nan_extreme("nanmax", max, -np.inf, a, axis, out, keepdims, initial, where)


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """``min`` ignoring NaNs (NaN where a slice is all NaN)."""
    return _nan_extreme("nanmin", min, np.inf, a, axis, out, keepdims, initial, where)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """``mean`` over the non-NaN elements."""
    a = ensure_arraylike("nanmean", a)
    if _kind(get_aval(a).dtype) not in "fc":
        return mean(a, axis, dtype, out, keepdims, where=where)
    from kiln.numpy._ufuncs import isnan, true_divide
    if dtype is None:
        dtype = get_aval(a).dtype
    valid = lax.bitwise_not(isnan(a))
    if where is not None:
        valid = lax.bitwise_and(valid, _util.broadcast_to(_check_where("nanmean", where),
                                                   get_aval(a).shape))
    td = sum(_replace_nan(a, 0), axis, dtype=dtype, keepdims=keepdims, where=valid)
    normalizer = sum(valid, axis, dtype=dtype, keepdims=keepdims)
    return true_divide(td, normalizer)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None):
    """``var`` over the non-NaN elements."""
    a = ensure_arraylike("nanvar", a)
    if _kind(get_aval(a).dtype) not in "fc":
        return var(a, axis, dtype, out, ddof, keepdims, where=where)
    from kiln.numpy._ufuncs import isnan
    valid = lax.bitwise_not(isnan(a))
    if where is not None:
        valid = lax.bitwise_and(valid, _util.broadcast_to(_check_where("nanvar", where),
                                                   get_aval(a).shape))
    return var(_replace_nan(a, 0), axis, dtype, out, ddof, keepdims, where=valid)


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None):
    """``std`` over the non-NaN elements."""
    return lax.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where=where))


def nanargmax(a, axis=None, out=None, keepdims=None):
    """``argmax`` ignoring NaNs (-1 where a slice is all NaN)."""
    return _nan_arg("nanargmax", argmax, -np.inf, a, axis, out, keepdims)


def nanargmin(a, axis=None, out=None, keepdims=None):
    """``argmin`` ignoring NaNs (-1 where a slice is all NaN)."""
    return _nan_arg("nanargmin", argmin, np.inf, a, axis, out, keepdims)


def _nan_arg(name, fn, fill, a, axis, out, keepdims):
    a = ensure_arraylike(name, a)
    if _kind(get_aval(a).dtype) not in "fc":
        return fn(a, axis, out, keepdims)
    from kiln.numpy._ufuncs import isnan
    res = fn(_replace_nan(a, fill), axis, out, keepdims)
    all_nan = all(isnan(a), axis=axis, keepdims=bool(keepdims))
    return lax.select(all_nan, _util.full_const(get_aval(res).shape, -1, get_aval(res).dtype),
                      res)


def nancumsum(a, axis=None, dtype=None, out=None):
    """``cumsum`` treating NaN as 0."""
    a = ensure_arraylike("nancumsum", a)
    return cumsum(_replace_nan(a, 0), axis, dtype, out)


def nancumprod(a, axis=None, dtype=None, out=None):
    """``cumprod`` treating NaN as 1."""
    a = ensure_arraylike("nancumprod", a)
    return cumprod(_replace_nan(a, 1), axis, dtype, out)

