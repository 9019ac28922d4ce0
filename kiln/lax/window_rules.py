"""Windowed-reduction primitives for the standard monoids and the pooling gradients, with
all their rules (as in JAX's ``lax.windowed_reductions``).

- ``reduce_window_sum`` / ``reduce_window_max`` / ``reduce_window_min``: one operand;
  parameters ``window_dimensions``, ``window_strides``, ``padding`` (``(lo, hi)`` pairs,
  negative crops), ``base_dilation``, ``window_dilation`` (tuples of Python ints). Padding
  and base-dilation holes hold the monoid's identity. The sum is linear; its transpose is a
  ``pad`` (strides become interior padding) and a ``reduce_window_sum`` whose strides are
  the base dilation. The JVP of max/min is ``select_and_gather_add``.
- ``select_and_gather_add(tangents, operand)`` (parameters above plus ``select_prim``,
  ``lax.ge_p`` for max or ``lax.le_p`` for min): per window, the tangent at the element
  the select chooses, scanning the window in row-major order from the identity and keeping
  the current choice while ``select_prim(current, candidate)`` holds (so the first of tied
  elements wins). Padding and holes are skipped, as in XLA's CPU ReduceWindow. Linear in
  ``tangents``; its transpose is ``select_and_scatter_add`` (after padding the operand's
  base-dilation holes with the identity). With window dilation, where JAX has no transpose,
  it gathers each window's chosen position (``select_and_gather_add`` of 1-based indices)
  and scatter-adds the cotangent there.
- ``select_and_scatter_add(source, operand)`` (``select_prim``, ``window_dimensions``,
  ``window_strides``, ``padding``): the gradient of max/min pooling; each window's source
  value is added at the element the select chooses. As in JAX on CPU, padding positions
  hold the identity and take part in the selection (their share is dropped). Linear in
  ``source``; its transpose is ``select_and_gather_add`` with unit dilations.

The NumPy impls pad with the identity (base dilation as interior padding) and reduce over an
``as_strided`` view of shape ``out_shape + window_dimensions``. Floating sums accumulate in
the window's row-major order in the operand's dtype, as XLA's CPU reduce_window does for
unpadded windows (bit-exact there for float32/bfloat16; its emitter visits some padded
windows in another order, so those agree to rounding). The selection primitives follow the
row-major rule everywhere; in the padded windows that XLA visits out of order, JAX's JVP
can pick another of several tied elements (its gradient, select_and_scatter_add, agrees).
"""
from __future__ import annotations

import itertools
import math
import operator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax._factory import as_dtype, standard_primitive
from kiln.lax.arith import ge_p, le_p
from kiln.lax.slicing import _pad_impl, _zero_scalar, pad
from kiln.lax.slicing import slice as _slice
from kiln.lax.structural import broadcast_in_dim, reshape

# ----------------------------------------------------------------------------------------------
# Shapes and argument checks (JAX's messages and error types).


def _dilate_dim(d: int, r: int) -> int:
    return 0 if d == 0 else 1 + r * (d - 1)


def _dilate_shape(shape, dilation):
    if not all(int(r) >= 1 for r in dilation):
        raise TypeError(f"All dilations must be positive, got {tuple(dilation)}.")
    return tuple(_dilate_dim(int(d), int(r)) for d, r in zip(shape, dilation))


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None) -> tuple[int, ...]:
    """The output shape of a windowed reduction with explicit ``(lo, hi)`` padding pairs.

    Args:
      operand_shape: the operand's shape.
      window_dimensions: the window size per axis.
      window_strides: the window strides per axis.
      padding: one ``(low, high)`` pair per axis (negative values crop).
      base_dilation: optional operand dilation per axis.
      window_dilation: optional window dilation per axis.

    Returns:
      The number of window positions per axis (0 where the window does not fit).
    """
    shape = tuple(int(d) for d in operand_shape)
    window = tuple(int(w) for w in window_dimensions)
    if base_dilation is not None:
        shape = _dilate_shape(shape, base_dilation)
    if window_dilation is not None:
        window = _dilate_shape(window, window_dilation)
    padding = tuple(padding)
    if len(padding) != len(shape):
        raise ValueError(f"reduce_window: padding {padding} must have one (low, high) pair "
                         f"per operand axis (operand shape {tuple(operand_shape)}).")
    padded = [d + int(lo) + int(hi) for d, (lo, hi) in zip(shape, padding)]
    return tuple(max((p - w) // int(s) + 1, 0) for p, w, s in zip(padded, window, window_strides))


def check_shapelike(fun_name, arg_name, obj, non_zero_shape=False):
    """``obj`` is a tuple/list/array of non-negative (or positive) integers, else TypeError."""
    if not isinstance(obj, (tuple, list, np.ndarray)):
        raise TypeError(f"{fun_name} {arg_name} must be of type tuple/list/ndarray, got "
                        f"{type(obj)}.")
    if not len(obj):
        return
    if np.ndim(obj) != 1:
        raise TypeError(f"{fun_name} {arg_name} must be 1-dimensional, got {np.ndim(obj)}.")
    try:
        for d in obj:
            operator.index(d)
    except TypeError as err:
        raise TypeError(f"{fun_name} {arg_name} must have every element be an integer type, "
                        f"got {tuple(map(type, obj))}.") from err
    low, what = (1, "strictly positive") if non_zero_shape else (0, "nonnegative")
    if not all(int(d) >= low for d in obj):
        raise TypeError(f"{fun_name} {arg_name} must have every element be {what}, got {obj}.")


def common_shape_rule(operand, window_dimensions, window_strides, padding, base_dilation,
                      window_dilation) -> tuple[int, ...]:
    """Checks of every reduce-window-like primitive; returns the output shape."""
    check_shapelike("reduce_window", "window_dimensions", window_dimensions, True)
    check_shapelike("reduce_window", "window_strides", window_strides, True)
    check_shapelike("reduce_window", "base_dilation", base_dilation)
    check_shapelike("reduce_window", "window_dilation", window_dilation)
    if operand.ndim != len(window_dimensions):
        raise TypeError("reduce_window got the wrong number of window_dimensions for operand: "
                        f"got operand shape {operand.shape} with window_dimensions "
                        f"{window_dimensions}.")
    for name, seq in (("window_strides", window_strides), ("base_dilation", base_dilation),
                      ("window_dilation", window_dilation)):
        if len(seq) != len(window_dimensions):
            raise TypeError(f"reduce_window got inconsistent {name} and window_dimensions: got "
                            f"{name} {seq} and window_dimensions {window_dimensions}.")
    return reduce_window_shape_tuple(operand.shape, window_dimensions, window_strides, padding,
                                     base_dilation, window_dilation)


# ----------------------------------------------------------------------------------------------
# NumPy window machinery shared by the impls.


def _is_float(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind in "fc" or dtypes.issubdtype(dtype, np.inexact)


def _supports_inf(dtype) -> bool:
    with np.errstate(all="ignore"):
        return bool(np.isinf(np.asarray(np.inf).astype(dtype)))


def max_identity(dtype):
    """The identity of ``max`` (and the initial choice of a ``ge`` select) for ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(False)
    if _is_float(dtype):
        v = -np.inf if _supports_inf(dtype) else dtypes.finfo(dtype).min
        return np.asarray(v).astype(dtype)
    return np.asarray(np.iinfo(dtype).min, dtype)


def min_identity(dtype):
    """The identity of ``min`` (and the initial choice of an ``le`` select) for ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(True)
    if _is_float(dtype):
        v = np.inf if _supports_inf(dtype) else dtypes.finfo(dtype).max
        return np.asarray(v).astype(dtype)
    return np.asarray(np.iinfo(dtype).max, dtype)


def pad_np(x, value, padding, base_dilation):
    """``x`` padded with ``value`` (``(lo, hi)`` pairs, negative crops) and base-dilated."""
    cfg = tuple((int(lo), int(hi), int(b) - 1) for (lo, hi), b in zip(padding, base_dilation))
    if not any(lo or hi or i for lo, hi, i in cfg):
        return np.asarray(x)
    return _pad_impl(np.asarray(x), np.asarray(value, np.asarray(x).dtype), padding_config=cfg)


def window_view(xp, out_shape, window_dimensions, window_strides, window_dilation):
    """A read-only view of shape ``out_shape + window_dimensions`` over the padded ``xp``."""
    st = xp.strides
    strides = tuple(st[i] * int(s) for i, s in enumerate(window_strides)) + \
        tuple(st[i] * int(r) for i, r in enumerate(window_dilation))
    return as_strided(xp, tuple(out_shape) + tuple(window_dimensions), strides, writeable=False)


def window_offsets(window_dimensions):
    """Window offsets in row-major order (the order XLA's CPU reduction visits them)."""
    return itertools.product(*(range(int(w)) for w in window_dimensions))


def _at(view, k):
    return view[(Ellipsis,) + tuple(k)]


def valid_view(shape, out_shape, window_dimensions, window_strides, padding, base_dilation,
               window_dilation):
    """Boolean window view: True where a window position holds an operand element (not
    padding or a base-dilation hole)."""
    m = pad_np(np.ones(shape, bool), False, padding, base_dilation)
    return window_view(m, out_shape, window_dimensions, window_strides, window_dilation)


# ----------------------------------------------------------------------------------------------
# reduce_window_sum / max / min


_PARAMS = ("window_dimensions", "window_strides", "padding", "base_dilation",
           "window_dilation")


def _monoid_impl(kind):
    def impl(x, *, window_dimensions, window_strides, padding, base_dilation,
             window_dilation):
        x = np.asarray(x)
        out_shape = reduce_window_shape_tuple(x.shape, window_dimensions, window_strides,
                                              padding, base_dilation, window_dilation)
        dtype = x.dtype
        if kind == "sum":
            ident = np.zeros((), dtype)
        else:
            ident = max_identity(dtype) if kind == "max" else min_identity(dtype)
        if math.prod(out_shape) == 0 or x.size == 0:
            return np.full(out_shape, ident, dtype)
        xp = pad_np(x, ident, padding, base_dilation)
        view = window_view(xp, out_shape, window_dimensions, window_strides, window_dilation)
        axes = tuple(range(len(out_shape), 2 * len(out_shape)))
        k = math.prod(window_dimensions)
        if kind == "sum":
            if _is_float(dtype) and k <= 256:
                # XLA's order: from the identity, each element of the window in turn.
                acc = np.zeros(out_shape, dtype)
                for off in window_offsets(window_dimensions):
                    acc = acc + _at(view, off)
                return as_dtype(acc, dtype)
            if dtype == dtypes.bfloat16:
                return as_dtype(np.sum(view.astype(np.float32), axis=axes), dtype)
            return as_dtype(np.sum(view, axis=axes, dtype=dtype), dtype)
        if dtype == dtypes.bfloat16:     # exact in float32; NumPy reduces it natively
            view = window_view(xp.astype(np.float32), out_shape, window_dimensions,
                               window_strides, window_dilation)
        red = np.max if kind == "max" else np.min
        return as_dtype(red(view, axis=axes), dtype)
    return impl


def _sum_abstract_eval(x, **params):
    if x.dtype == np.bool_ or not dtypes.issubdtype(x.dtype, np.number):
        raise TypeError("operand to reduce_window_sum must have a number dtype, got "
                        f"{np.dtype(x.dtype).name}")
    shape = common_shape_rule(x, *(params[p] for p in _PARAMS))
    return ShapedArray(shape, x.dtype, x.weak_type)


def _chooser_abstract_eval(x, **params):
    shape = common_shape_rule(x, *(params[p] for p in _PARAMS))
    return ShapedArray(shape, x.dtype, x.weak_type)


reduce_window_sum_p = standard_primitive("reduce_window_sum", _sum_abstract_eval,
                                         _monoid_impl("sum"))
reduce_window_max_p = standard_primitive("reduce_window_max", _chooser_abstract_eval,
                                         _monoid_impl("max"))
reduce_window_min_p = standard_primitive("reduce_window_min", _chooser_abstract_eval,
                                         _monoid_impl("min"))


def _window_params(window_dimensions, window_strides, padding, base_dilation=None,
                   window_dilation=None):
    nd = len(window_dimensions)
    ones = (1,) * nd
    return dict(window_dimensions=tuple(int(w) for w in window_dimensions),
                window_strides=tuple(int(s) for s in window_strides),
                padding=tuple((int(lo), int(hi)) for lo, hi in padding),
                base_dilation=ones if base_dilation is None else
                tuple(int(d) for d in base_dilation),
                window_dilation=ones if window_dilation is None else
                tuple(int(d) for d in window_dilation))


def _reduce_window_sum(operand, window_dimensions, window_strides, padding,
                       base_dilation=None, window_dilation=None):
    return reduce_window_sum_p.bind(operand, **_window_params(
        window_dimensions, window_strides, padding, base_dilation, window_dilation))


def _reduce_window_max(operand, window_dimensions, window_strides, padding,
                       base_dilation=None, window_dilation=None):
    return reduce_window_max_p.bind(operand, **_window_params(
        window_dimensions, window_strides, padding, base_dilation, window_dilation))


def _reduce_window_min(operand, window_dimensions, window_strides, padding,
                       base_dilation=None, window_dilation=None):
    return reduce_window_min_p.bind(operand, **_window_params(
        window_dimensions, window_strides, padding, base_dilation, window_dilation))


def _zeros(aval_shape, dtype):
    return broadcast_in_dim(_zero_scalar(dtype), tuple(aval_shape), ())


def _reduce_window_sum_transpose(ct, operand, *, window_dimensions, window_strides, padding,
                                 base_dilation, window_dilation):
    assert is_undefined_primal(operand)
    in_shape = operand.aval.shape
    if type(ct) is Zero:
        return [Zero(operand.aval)]
    ct_shape = get_aval(ct).shape
    if math.prod(in_shape) == 0 or math.prod(ct_shape) == 0:
        return [_zeros(in_shape, operand.aval.dtype)]
    # out[o] = sum_k xd[o*s + k*r - lo] (xd: x base-dilated by b) gives
    # ct_xd[p] = sum_k' P[p + k'*r], P = ct stride-dilated and padded by (Wd-1-lo) below.
    cfg = []
    for n, w, s, (lo, _), b, r, m in zip(in_shape, window_dimensions, window_strides, padding,
                                         base_dilation, window_dilation, ct_shape):
        wd = _dilate_dim(w, r)
        before = wd - 1 - lo
        after = _dilate_dim(n, b) + wd - 1 - _dilate_dim(m, s) - before
        cfg.append((before, after, s - 1))
    padded = pad(ct, _zero_scalar(get_aval(ct).dtype), cfg)
    nd = len(in_shape)
    out = _reduce_window_sum(padded, window_dimensions, base_dilation, ((0, 0),) * nd,
                             (1,) * nd, window_dilation)
    assert get_aval(out).shape == tuple(in_shape), (get_aval(out).shape, in_shape)
    return [out]


ad.deflinear2(reduce_window_sum_p, _reduce_window_sum_transpose)


def _select_prim(prim):
    return ge_p if prim is reduce_window_max_p else le_p


def _chooser_jvp(prim):
    def jvp(g, ans, x, **params):
        return select_and_gather_add_p.bind(g, x, select_prim=_select_prim(prim), **params)
    return jvp


def _insert(seq, d, v):
    seq = tuple(seq)
    return seq[:d] + (v,) + seq[d:]


def _monoid_batch(prim):
    def rule(axis_data, vals, dims, *, window_dimensions, window_strides, padding,
             base_dilation, window_dilation):
        (x,), (d,) = vals, dims
        out = prim.bind(x, window_dimensions=_insert(window_dimensions, d, 1),
                        window_strides=_insert(window_strides, d, 1),
                        padding=_insert(padding, d, (0, 0)),
                        base_dilation=_insert(base_dilation, d, 1),
                        window_dilation=_insert(window_dilation, d, 1))
        return out, d
    batching.batch_rules[prim] = rule


for _p in (reduce_window_sum_p, reduce_window_max_p, reduce_window_min_p):
    _monoid_batch(_p)
ad.defjvp2(reduce_window_max_p, _chooser_jvp(reduce_window_max_p))
ad.defjvp2(reduce_window_min_p, _chooser_jvp(reduce_window_min_p))


# ----------------------------------------------------------------------------------------------
# select_and_gather_add: the JVP of max/min pooling.


def _check_select_prim(name, select_prim):
    if select_prim is not ge_p and select_prim is not le_p:
        raise ValueError(f"{name}: select_prim must be lax.ge_p or lax.le_p, got "
                         f"{select_prim!r}.")


def _sga_abstract_eval(tangents, operand, *, select_prim, window_dimensions, window_strides,
                       padding, base_dilation, window_dilation):
    _check_select_prim("select_and_gather_add", select_prim)
    if tangents.shape != operand.shape:
        raise TypeError("select_and_gather_add tangents and operand shapes must match, got "
                        f"{tangents.shape} and {operand.shape}.")
    shape = common_shape_rule(operand, window_dimensions, window_strides, padding,
                              base_dilation, window_dilation)
    return ShapedArray(shape, tangents.dtype, tangents.weak_type and operand.weak_type)


def _sga_impl(tangents, operand, *, select_prim, window_dimensions, window_strides, padding,
              base_dilation, window_dilation):
    t, x = np.asarray(tangents), np.asarray(operand)
    out_shape = reduce_window_shape_tuple(x.shape, window_dimensions, window_strides, padding,
                                          base_dilation, window_dilation)
    acc_t = np.zeros(out_shape, t.dtype)
    if math.prod(out_shape) == 0 or x.size == 0:
        return acc_t
    ge = select_prim is ge_p
    ident = max_identity(x.dtype) if ge else min_identity(x.dtype)
    args = (out_shape, window_dimensions, window_strides, window_dilation)
    xv = window_view(pad_np(x, ident, padding, base_dilation), *args)
    tv = window_view(pad_np(t, np.zeros((), t.dtype), padding, base_dilation), *args)
    mv = valid_view(x.shape, out_shape, window_dimensions, window_strides, padding,
                    base_dilation, window_dilation)
    acc_x = np.full(out_shape, ident, x.dtype)
    cmp = np.greater_equal if ge else np.less_equal
    for off in window_offsets(window_dimensions):
        e, m = _at(xv, off), _at(mv, off)
        take = ~cmp(acc_x, e)          # NaN compares false: a NaN is replaced, and replaces
        take &= m
        acc_x = np.where(take, e, acc_x)
        acc_t = np.where(take, _at(tv, off), acc_t)
    return as_dtype(acc_t, t.dtype)


select_and_gather_add_p = standard_primitive("select_and_gather_add", _sga_abstract_eval,
                                             _sga_impl)


def _select_and_gather_add(tangents, operand, select_prim, window_dimensions, window_strides,
                           padding, base_dilation, window_dilation):
    return select_and_gather_add_p.bind(tangents, operand, select_prim=select_prim,
                                        **_window_params(window_dimensions, window_strides,
                                                         padding, base_dilation,
                                                         window_dilation))


def _sga_jvp(primals, tangents, **params):
    (t, x), (g_t, _) = primals, tangents
    out = select_and_gather_add_p.bind(t, x, **params)
    if type(g_t) is Zero or not ad.is_differentiable_dtype(get_aval(out).dtype):
        return out, Zero.from_primal_value(out)
    return out, select_and_gather_add_p.bind(g_t, x, **params)


def _sga_transpose_by_index(ct, operand, params):
    """Transpose for window-dilated windows (JAX has none): gather each window's chosen
    position (1-based flat index; 0 = nothing chosen) and scatter-add ``ct`` there."""
    from kiln.array import make_array
    from kiln.lax.gather_scatter import ScatterDimensionNumbers, scatter_add
    shape = get_aval(operand).shape
    n = math.prod(shape)
    ids = make_array(np.arange(1, n + 1, dtype=np.int32).reshape(shape))
    chosen = select_and_gather_add_p.bind(ids, operand, **params)
    m = math.prod(get_aval(chosen).shape)
    dtype = get_aval(ct).dtype
    dn = ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                 scatter_dims_to_operand_dims=(0,))
    buf = scatter_add(_zeros((n + 1,), dtype), reshape(chosen, (m, 1)), reshape(ct, (m,)), dn)
    return reshape(_slice(buf, (1,), (n + 1,)), shape)


def _sga_transpose(ct, tangents, operand, *, select_prim, window_dimensions, window_strides,
                   padding, base_dilation, window_dilation):
    assert is_undefined_primal(tangents) and not is_undefined_primal(operand)
    if type(ct) is Zero:
        return [Zero(tangents.aval), None]
    shape = tangents.aval.shape
    if math.prod(shape) == 0 or math.prod(get_aval(ct).shape) == 0:
        return [_zeros(shape, tangents.aval.dtype), None]
    if any(r != 1 for r in window_dilation):
        params = dict(select_prim=select_prim, window_dimensions=window_dimensions,
                      window_strides=window_strides, padding=padding,
                      base_dilation=base_dilation, window_dilation=window_dilation)
        return [_sga_transpose_by_index(ct, operand, params), None]
    dilated = any(b != 1 for b in base_dilation)
    if dilated:
        dt = get_aval(operand).dtype
        ident = max_identity(dt) if select_prim is ge_p else min_identity(dt)
        from kiln.array import make_array
        operand = pad(operand, make_array(ident), tuple((0, 0, b - 1) for b in base_dilation))
    out = select_and_scatter_add_p.bind(ct, operand, select_prim=select_prim,
                                        window_dimensions=window_dimensions,
                                        window_strides=window_strides, padding=padding)
    if dilated:
        out = _slice(out, (0,) * len(shape), get_aval(out).shape, base_dilation)
    return [out, None]


def _front(vals, dims, size):
    return [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]


def _sga_batch(axis_data, vals, dims, *, select_prim, window_dimensions, window_strides,
               padding, base_dilation, window_dilation):
    t, x = _front(vals, dims, axis_data.size)
    out = select_and_gather_add_p.bind(
        t, x, select_prim=select_prim, window_dimensions=(1,) + window_dimensions,
        window_strides=(1,) + window_strides, padding=((0, 0),) + padding,
        base_dilation=(1,) + base_dilation, window_dilation=(1,) + window_dilation)
    return out, 0


ad.jvp_rules[select_and_gather_add_p] = _sga_jvp
ad.transpose_rules[select_and_gather_add_p] = _sga_transpose
batching.batch_rules[select_and_gather_add_p] = _sga_batch


# ----------------------------------------------------------------------------------------------
# select_and_scatter_add: the gradient of max/min pooling.


def _sas_abstract_eval(source, operand, *, select_prim, window_dimensions, window_strides,
                       padding):
    _check_select_prim("select_and_scatter_add", select_prim)
    check_shapelike("select_and_scatter", "window_dimensions", window_dimensions)
    check_shapelike("select_and_scatter", "window_strides", window_strides)
    if len(window_dimensions) != len(window_strides):
        raise TypeError("select_and_scatter got inconsistent window_strides and "
                        f"window_dimensions: got window_strides {window_strides} and "
                        f"window_dimensions {window_dimensions}.")
    if operand.ndim != len(window_dimensions):
        raise TypeError("select_and_scatter_add got the wrong number of window_dimensions for "
                        f"operand: got operand shape {operand.shape} with window_dimensions "
                        f"{window_dimensions}.")
    expected = reduce_window_shape_tuple(operand.shape, window_dimensions, window_strides,
                                         padding)
    if tuple(source.shape) != expected:
        raise TypeError(f"select_and_scatter_add source shape {source.shape} does not match "
                        f"the window positions {expected} of operand shape {operand.shape}.")
    return ShapedArray(operand.shape, source.dtype, source.weak_type and operand.weak_type)


def _choose(view, window_dimensions, select_prim):
    """Per window, the window offset (flat, row-major) that the select chooses: start at
    the first element, then replace the choice wherever ``select_prim(choice, candidate)``
    fails (a NaN choice is replaced; a NaN candidate replaces)."""
    cmp = np.greater_equal if select_prim is ge_p else np.less_equal
    offs = window_offsets(window_dimensions)
    sel = _at(view, next(offs)).copy()
    k = np.zeros(sel.shape, np.int32)
    take = np.empty(sel.shape, bool)
    for j, off in enumerate(offs, 1):
        e = _at(view, off)
        cmp(sel, e, out=take)
        np.logical_not(take, out=take)
        np.copyto(sel, e, where=take)
        np.copyto(k, j, where=take)
    return k


def _sas_impl(source, operand, *, select_prim, window_dimensions, window_strides, padding):
    src, x = np.asarray(source), np.asarray(operand)
    out = np.zeros(x.shape, src.dtype)
    out_shape = src.shape
    if math.prod(out_shape) == 0 or x.size == 0:
        return out
    ident = max_identity(x.dtype) if select_prim is ge_p else min_identity(x.dtype)
    ones = (1,) * x.ndim
    # As XLA on CPU: padding holds the identity and competes; cropped elements are absent.
    xp = np.ascontiguousarray(pad_np(x, ident, padding, ones))
    k = _choose(window_view(xp, out_shape, window_dimensions, window_strides, ones),
                window_dimensions, select_prim)
    # The chosen position as a flat index into the padded operand, then into the operand
    # (-1 for padding).
    pst = [st // xp.itemsize for st in xp.strides]
    pos = np.zeros(out_shape, np.int64)
    for d, (m, s) in enumerate(zip(out_shape, window_strides)):
        pos += (np.arange(m, dtype=np.int64) * (s * pst[d])).reshape(
            (-1,) + (1,) * (len(out_shape) - d - 1))
    table = np.array([sum(o * p for o, p in zip(off, pst))
                      for off in window_offsets(window_dimensions)], np.int64)
    pos += table[k]
    ids = pad_np(np.arange(x.size, dtype=np.int64).reshape(x.shape), -1, padding, ones)
    idx = np.ascontiguousarray(ids).reshape(-1)[pos]
    keep = idx >= 0
    idx = idx[keep]
    vals = src[keep]
    flat = out.reshape(-1)
    if src.dtype == np.bool_:
        np.logical_or.at(flat, idx, vals)
    elif src.dtype.kind in "fciu":
        np.add.at(flat, idx, vals)
    else:   # bfloat16 and other extension dtypes: accumulate in float32
        acc = np.zeros(flat.shape, np.float32)
        np.add.at(acc, idx, vals.astype(np.float32))
        flat = acc.astype(src.dtype)
    return flat.reshape(x.shape)


select_and_scatter_add_p = standard_primitive("select_and_scatter_add", _sas_abstract_eval,
                                              _sas_impl)


def _select_and_scatter_add(source, operand, select_prim, window_dimensions, window_strides,
                            padding):
    return select_and_scatter_add_p.bind(
        source, operand, select_prim=select_prim,
        window_dimensions=tuple(int(w) for w in window_dimensions),
        window_strides=tuple(int(s) for s in window_strides),
        padding=tuple((int(lo), int(hi)) for lo, hi in padding))


def _sas_jvp(primals, tangents, **params):
    (s, x), (g_s, _) = primals, tangents
    out = select_and_scatter_add_p.bind(s, x, **params)
    if type(g_s) is Zero or not ad.is_differentiable_dtype(get_aval(out).dtype):
        return out, Zero.from_primal_value(out)
    return out, select_and_scatter_add_p.bind(g_s, x, **params)


def _sas_transpose(ct, source, operand, *, select_prim, window_dimensions, window_strides,
                   padding):
    assert is_undefined_primal(source) and not is_undefined_primal(operand)
    if type(ct) is Zero:
        return [Zero(source.aval), None]
    ones = (1,) * len(window_dimensions)
    return [select_and_gather_add_p.bind(ct, operand, select_prim=select_prim,
                                         window_dimensions=window_dimensions,
                                         window_strides=window_strides, padding=padding,
                                         base_dilation=ones, window_dilation=ones), None]


def _sas_batch(axis_data, vals, dims, *, select_prim, window_dimensions, window_strides,
               padding):
    s, x = _front(vals, dims, axis_data.size)
    out = select_and_scatter_add_p.bind(
        s, x, select_prim=select_prim, window_dimensions=(1,) + window_dimensions,
        window_strides=(1,) + window_strides, padding=((0, 0),) + padding)
    return out, 0


ad.jvp_rules[select_and_scatter_add_p] = _sas_jvp
ad.transpose_rules[select_and_scatter_add_p] = _sas_transpose
batching.batch_rules[select_and_scatter_add_p] = _sas_batch


__all__ = ["reduce_window_sum_p", "reduce_window_max_p", "reduce_window_min_p",
           "select_and_gather_add_p", "select_and_scatter_add_p"]
