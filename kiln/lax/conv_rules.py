"""The ``conv_general_dilated`` primitive and all of its rules.

Parameters (as in JAX's equation): ``window_strides``, ``padding`` (``(lo, hi)`` int
pairs, string padding already resolved), ``lhs_dilation``, ``rhs_dilation``,
``dimension_numbers`` (a :class:`ConvDimensionNumbers` of int tuples),
``feature_group_count``, ``batch_group_count``, ``precision`` (``None`` or a pair of
``Precision``), ``preferred_element_type`` (``None`` or a NumPy dtype) and
``out_sharding`` (always ``None``).

- eager impl: NumPy. The input is moved to ``(N, C, spatial...)``, dilated and padded
  in one scatter into a zero buffer, its windows are a strided view
  (``sliding_window_view``); one copy gathers them into an im2col matrix per group and a
  (batched) ``np.matmul`` contracts it with the kernel on BLAS.
- jvp: bilinear. transposes: both are convolutions again (the lhs cotangent convolves
  the output cotangent with the spatially reversed, in/out-swapped kernel, using the
  window strides as lhs dilation; the rhs cotangent convolves lhs with the output
  cotangent, feature and batch groups trading places).
- batching: the mapped axis is folded into the batch, feature or output-feature
  dimension, so a batched convolution is still one ``conv_general_dilated``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax._factory import standard_primitive
from kiln.lax.slicing import full, rev
from kiln.lax.structural import convert_element_type, reshape


class ConvDimensionNumbers(NamedTuple):
    """Describes batch, spatial, and feature dimensions of a convolution.

    Args:
      lhs_spec: ``(batch dimension, feature dimension, spatial dimensions...)`` of lhs.
      rhs_spec: ``(out feature dimension, in feature dimension, spatial dimensions...)``
        of rhs.
      out_spec: ``(batch dimension, feature dimension, spatial dimensions...)`` of the
        output.
    """
    lhs_spec: Sequence[int]
    rhs_spec: Sequence[int]
    out_spec: Sequence[int]


def _dilate_dim(d: int, r: int) -> int:
    return 0 if d == 0 else 1 + r * (d - 1)


# ----------------------------------------------------------------------------------------------
# shape and dtype rules


def _check_conv_shapes(lhs_shape, rhs_shape, dn, window_strides, feature_group_count,
                       batch_group_count):
    """JAX's checks (and messages) of operand shapes against the group counts."""
    if len(lhs_shape) != len(rhs_shape):
        raise ValueError("conv_general_dilated lhs and rhs must have the same number of "
                         f"dimensions, but got {lhs_shape} and {rhs_shape}.")
    if not feature_group_count > 0:
        raise ValueError("conv_general_dilated feature_group_count must be a positive "
                         f"integer, got {feature_group_count}.")
    c = lhs_shape[dn.lhs_spec[1]]
    if c % feature_group_count:
        raise ValueError("conv_general_dilated feature_group_count must divide lhs feature "
                         f"dimension size, but {feature_group_count} does not divide {c}.")
    if c // feature_group_count != rhs_shape[dn.rhs_spec[1]]:
        raise ValueError("conv_general_dilated lhs feature dimension size divided by "
                         "feature_group_count must equal the rhs input feature dimension "
                         f"size, but {c} // {feature_group_count} != "
                         f"{rhs_shape[dn.rhs_spec[1]]}.")
    o = rhs_shape[dn.rhs_spec[0]]
    if o % feature_group_count:
        raise ValueError("conv_general_dilated rhs output feature dimension size must be a "
                         f"multiple of feature_group_count, but {o} is not a multiple of "
                         f"{feature_group_count}.")
    if not batch_group_count > 0:
        raise ValueError("conv_general_dilated batch_group_count must be a positive "
                         f"integer, got {batch_group_count}.")
    n = lhs_shape[dn.lhs_spec[0]]
    if batch_group_count > 1 and n % batch_group_count:
        raise ValueError("conv_general_dilated batch_group_count must divide lhs batch "
                         f"dimension size, but {batch_group_count} does not divide {n}.")
    if o % batch_group_count:
        raise ValueError("conv_general_dilated rhs output feature dimension size must be a "
                         f"multiple of batch_group_count, but {o} is not a multiple of "
                         f"{batch_group_count}.")
    if batch_group_count > 1 and feature_group_count > 1:
        raise ValueError("At most one of batch_group_count and feature_group_count may be "
                         f"> 1, got batch_group_count={batch_group_count} and "
                         f"feature_group_count={feature_group_count}")
    if len(rhs_shape) - 2 != len(window_strides):
        raise ValueError("conv_general_dilated window and window_strides must have the same "
                         f"number of dimensions, but got {len(rhs_shape) - 2} and "
                         f"{len(window_strides)}")


def _conv_shape(lhs_shape, rhs_shape, *, window_strides, padding, lhs_dilation,
                rhs_dilation, dimension_numbers, feature_group_count, batch_group_count):
    """Output shape (in ``out_spec`` layout) of a convolution with resolved parameters."""
    dn = dimension_numbers
    if not isinstance(dn, ConvDimensionNumbers):
        raise TypeError("conv_general_dilated dimension_numbers must be a "
                        f"ConvDimensionNumbers, got {dn}")
    _check_conv_shapes(lhs_shape, rhs_shape, dn, window_strides, feature_group_count,
                       batch_group_count)
    nsp = len(lhs_shape) - 2
    for name, seq in (("lhs_dilation", lhs_dilation), ("rhs_dilation", rhs_dilation)):
        if len(seq) != nsp:
            raise ValueError(f"conv_general_dilated {name} must have {nsp} entries (one per "
                             f"spatial dimension), got {tuple(seq)}")
    for name, seq in (("window_strides", window_strides), ("lhs_dilation", lhs_dilation),
                      ("rhs_dilation", rhs_dilation)):
        if any(s < 1 for s in seq):
            raise ValueError(f"conv_general_dilated {name} must be positive, got "
                             f"{tuple(seq)}")
    ksize = [rhs_shape[d] for d in dn.rhs_spec[2:]]
    for i, k in enumerate(ksize):
        if k <= 0:
            raise ValueError("conv_general_dilated expects window to have positive value "
                             f"for {i}-th window dimension, but got {k}.")
    if len(padding) != nsp:
        raise TypeError("Wrong number of explicit pads for convolution: expected "
                        f"{nsp}, got {len(padding)}.")
    in_space = [_dilate_dim(lhs_shape[d], r) for d, r in zip(dn.lhs_spec[2:], lhs_dilation)]
    padded = [s + lo + hi for s, (lo, hi) in zip(in_space, padding)]
    if any(p < 0 for p in padded):
        raise ValueError("Negative padding is larger than the size of the corresponding "
                         f"dimension: got padding={tuple(padding)} for lhs_shape[2:]="
                         f"{tuple(in_space)}")
    out_space = [max(0, (p - _dilate_dim(k, r)) // s + 1)
                 for p, k, r, s in zip(padded, ksize, rhs_dilation, window_strides)]
    n = lhs_shape[dn.lhs_spec[0]] // batch_group_count
    canon = [n, rhs_shape[dn.rhs_spec[0]]] + out_space
    out = [0] * len(canon)
    for i, d in enumerate(dn.out_spec):
        out[d] = canon[i]
    return tuple(out)


def _validate_preferred(input_dt, preferred):
    if dtypes.issubdtype(input_dt, np.integer) and dtypes.issubdtype(preferred, np.floating):
        pass  # integer inputs may accumulate into any float type
    else:
        for kind in (np.integer, np.floating, np.complexfloating):
            if dtypes.issubdtype(input_dt, kind) and not dtypes.issubdtype(preferred, kind):
                raise TypeError(
                    "Input type is incompatible with `preferred_element_type`. The "
                    "compatible combinations of (input_type, preferred_element_type) are "
                    "(integral, integral), (integral, floating), (floating, floating), "
                    "(complex, complex.")
        if dtypes.issubdtype(input_dt, np.signedinteger) and \
                not dtypes.issubdtype(preferred, np.signedinteger):
            raise TypeError("`preferred_element_type` must have the same signedness as the "
                            "original type.")
    if np.dtype(preferred).itemsize < np.dtype(input_dt).itemsize:
        raise TypeError("`preferred_element_type` must not be narrower than the original "
                        "type.")


def _conv_dtype(lhs_dt, rhs_dt, preferred):
    if lhs_dt != rhs_dt:
        raise TypeError("lax.conv_general_dilated requires arguments to have the same dtypes, "
                        f"got {np.dtype(lhs_dt).name}, {np.dtype(rhs_dt).name}.")
    if preferred is None:
        return np.dtype(lhs_dt)
    _validate_preferred(lhs_dt, preferred)
    return np.dtype(preferred)


def _conv_abstract_eval(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                        dimension_numbers, feature_group_count, batch_group_count, precision,
                        preferred_element_type, out_sharding):
    shape = _conv_shape(tuple(lhs.shape), tuple(rhs.shape), window_strides=window_strides,
                        padding=padding, lhs_dilation=lhs_dilation,
                        rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
                        feature_group_count=feature_group_count,
                        batch_group_count=batch_group_count)
    dt = _conv_dtype(lhs.dtype, rhs.dtype, preferred_element_type)
    return ShapedArray(shape, dt, lhs.weak_type and rhs.weak_type)


# ----------------------------------------------------------------------------------------------
# impl


_LOW_FLOATS = (np.dtype(np.float16), np.dtype(dtypes.bfloat16))


def _inexact(dt) -> bool:
    return dtypes.issubdtype(dt, np.inexact)


def _compute_dtype(in_dt, out_dt):
    """The dtype NumPy convolves in: low floats widen to float32, integers and bools to
    64 bits (the final cast wraps exactly as XLA's narrow accumulation does)."""
    if out_dt in _LOW_FLOATS:
        return np.dtype(np.float32)
    if _inexact(out_dt):
        return out_dt if _inexact(in_dt) else np.dtype(np.float64)
    return np.dtype(np.uint64 if out_dt.kind == "u" else np.int64)


def _dilate_and_pad(x, padding, lhs_dilation):
    """``x`` (N, S..., C) dilated (zeros between elements) and padded (negative crops)."""
    if all(lo == 0 and hi == 0 for lo, hi in padding) and all(d == 1 for d in lhs_dilation):
        return x
    space = x.shape[1:-1]
    out_space = tuple(_dilate_dim(s, d) + lo + hi
                      for s, (lo, hi), d in zip(space, padding, lhs_dilation))
    out = np.zeros(x.shape[:1] + out_space + x.shape[-1:], x.dtype)
    src, dst = [slice(None)], [slice(None)]
    for s, p, (lo, _), d in zip(space, out_space, padding, lhs_dilation):
        # element j of x lands at lo + j * d; keep those inside [0, p).
        j0, j1 = max(0, -(lo // d)), min(s - 1, (p - 1 - lo) // d)
        if j0 > j1:
            return out
        src.append(slice(j0, j1 + 1))
        dst.append(slice(lo + j0 * d, lo + j1 * d + 1, d))
    out[tuple(dst)] = x[tuple(src)]
    return out


# Bytes of one im2col block: larger batches are convolved in chunks of rows.
_IM2COL_BYTES = 1 << 26


def _conv_impl(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
               dimension_numbers, feature_group_count, batch_group_count, precision,
               preferred_element_type, out_sharding):
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    out_dt = _conv_dtype(lhs.dtype, rhs.dtype, preferred_element_type)
    ct = _compute_dtype(lhs.dtype, out_dt)
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    nsp = len(lhs_spec) - 2
    # Channels last, so that every window row gathers contiguous runs of channels.
    x = np.transpose(lhs, (lhs_spec[0],) + tuple(lhs_spec[2:]) + (lhs_spec[1],))
    w = np.transpose(rhs, (rhs_spec[0],) + tuple(rhs_spec[2:]) + (rhs_spec[1],))  # (O, K.., I)
    n, c, o, i = x.shape[0], x.shape[-1], w.shape[0], w.shape[-1]
    ksize = tuple(w.shape[1:-1])
    padded = [_dilate_dim(s, d) + lo + hi
              for s, (lo, hi), d in zip(x.shape[1:-1], padding, lhs_dilation)]
    eff_k = tuple(_dilate_dim(k, r) for k, r in zip(ksize, rhs_dilation))
    out_space = tuple(max(0, (p - e) // s + 1) for p, e, s in zip(padded, eff_k, window_strides))
    g = max(feature_group_count, batch_group_count)
    rows, og = n // batch_group_count, o // g
    # The result is computed as (G, rows, out..., O/G); its axes in the requested layout:
    canon = (1,) + (0, nsp + 2) + tuple(range(2, 2 + nsp))   # (rows, (G, O/G), out...)
    out_shape_canon = (rows, o) + out_space
    out_shape = tuple(out_shape_canon[d] for d in np.argsort(out_spec))
    if 0 in out_shape_canon or i == 0:
        return np.zeros(out_shape, out_dt)
    x = _dilate_and_pad(x if x.dtype == ct else x.astype(ct), padding, lhs_dilation)
    w = w if w.dtype == ct else w.astype(ct)
    sp = tuple(range(1, 1 + nsp))
    win = np.lib.stride_tricks.sliding_window_view(x, eff_k, axis=sp)
    win = win[(slice(None),)
              + tuple(slice(0, (m - 1) * s + 1, s) for m, s in zip(out_space, window_strides))
              + (slice(None),)
              + tuple(slice(None, None, r) for r in rhs_dilation)]   # (N, out..., C, K...)
    mm, kk = math.prod(out_space), math.prod(ksize)
    outs = tuple(range(2, 2 + nsp))
    ks = tuple(range(3 + nsp, 3 + 2 * nsp))
    if batch_group_count > 1:   # (G, M, out..., K..., C): the groups split the batch
        win = win.reshape((g, rows) + out_space + (c,) + ksize)
        win = win.transpose((0, 1) + outs + ks + (2 + nsp,))
    else:                       # (G, N, out..., K..., I): the groups split the features
        win = win.reshape((n,) + out_space + (g, i) + ksize)
        win = win.transpose((1 + nsp, 0) + tuple(range(1, 1 + nsp)) + ks + (2 + nsp,))
    wg = w.reshape((g, og, kk * i)).transpose(0, 2, 1)      # (G, K*I, O/G)
    y = np.empty((g, rows * mm, og), np.result_type(ct, wg.dtype))
    step = max(1, _IM2COL_BYTES // max(1, g * mm * kk * i * np.dtype(ct).itemsize))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        a = np.ascontiguousarray(win[:, r0:r1]).reshape(g, (r1 - r0) * mm, kk * i)
        np.matmul(a, wg, out=y[:, r0 * mm:r1 * mm])
    y = y.reshape((g, rows) + out_space + (og,)).transpose(canon)
    y = y.reshape(out_shape_canon).transpose(tuple(int(d) for d in np.argsort(out_spec)))
    return y.astype(out_dt) if y.dtype != out_dt else y


conv_general_dilated_p = standard_primitive("conv_general_dilated", _conv_abstract_eval,
                                            _conv_impl)


# ----------------------------------------------------------------------------------------------
# jvp and transposes


def _conv_jvp_lhs(g, ans, lhs, rhs, **params):
    return conv_general_dilated_p.bind(g, rhs, **params)


def _conv_jvp_rhs(g, ans, lhs, rhs, **params):
    return conv_general_dilated_p.bind(lhs, g, **params)


ad.defjvp2(conv_general_dilated_p, _conv_jvp_lhs, _conv_jvp_rhs)


def _swap01(spec):
    return (spec[1], spec[0]) + tuple(spec[2:])


def _split_axis(x, axis, outer):
    """Split ``axis`` of size ``outer * r`` into ``(outer, r)`` at ``axis, axis + 1``."""
    shape = list(get_aval(x).shape)
    shape[axis:axis + 1] = [outer, shape[axis] // outer]
    return reshape(x, tuple(shape))


def _merge_axis(x, src, dst, groups=1):
    """Remove axis ``src`` (size ``b``) and fold it into axis ``dst`` (numbered after the
    removal, size ``groups * r``): the new index of ``(g, j, k)`` is
    ``g * b * r + j * r + k`` (``groups=1``: ``src`` becomes the outer factor)."""
    shape = get_aval(x).shape
    b = shape[src]
    rest = [d for d in range(len(shape)) if d != src]
    new = [shape[d] for d in rest]
    new[dst] *= b
    if groups > 1:   # split dst into (groups, r) and put src between the two
        d = rest[dst]
        x = _split_axis(x, d, groups)
        src = src + 1 if src > d else src
        rest = [a for a in range(len(shape) + 1) if a != src]
        dst += 1
    perm = rest[:dst] + [src] + rest[dst:]
    return reshape(x, tuple(new), tuple(perm))


def _unmerge_axis(x, axis, b, groups=1):
    """Inverse of :func:`_merge_axis`: axis ``axis`` (index ``g * b * r + j * r + k``)
    becomes ``(b, groups * r)`` at ``axis, axis + 1``."""
    if groups == 1:
        return _split_axis(x, axis, b)
    shape = list(get_aval(x).shape)
    r = shape[axis] // (groups * b)
    x = reshape(x, tuple(shape[:axis] + [groups, b, r] + shape[axis + 1:]))
    perm = list(range(axis)) + [axis + 1, axis] + list(range(axis + 2, len(shape) + 2))
    return reshape(x, tuple(shape[:axis] + [b, groups * r] + shape[axis + 1:]), tuple(perm))


def _dilated(shape, dilation):
    return [_dilate_dim(s, d) for s, d in zip(shape, dilation)]


def _conv_transpose_lhs(ct, rhs, lhs_aval, *, window_strides, padding, lhs_dilation,
                        rhs_dilation, dimension_numbers, feature_group_count,
                        batch_group_count, precision, preferred_element_type):
    """Cotangent of lhs: the output cotangent convolved with the spatially reversed kernel
    (in/out features swapped, groups moved onto the input features), with the forward
    window strides as lhs dilation."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    rhs_shape = get_aval(rhs).shape
    groups = max(feature_group_count, batch_group_count)
    w = rhs
    if groups > 1:   # out features (G, O/G) -> the group factor moves to the in features
        w = _merge_axis(_split_axis(w, rhs_spec[0], groups), rhs_spec[0], rhs_spec[1])
    k_space = [rhs_shape[d] for d in rhs_spec[2:]]
    in_d = _dilated([lhs_aval.shape[d] for d in lhs_spec[2:]], lhs_dilation)
    k_d = _dilated(k_space, rhs_dilation)
    out_d = _dilated([get_aval(ct).shape[d] for d in out_spec[2:]], window_strides)
    pads = []
    for i_, k_, o_, (lo, _) in zip(in_d, k_d, out_d, padding):
        before = k_ - lo - 1
        pads.append((int(before), int(i_ + k_ - 1 - o_ - before)))
    w = rev(w, tuple(rhs_spec[2:]))
    ct_dt = get_aval(ct).dtype
    if get_aval(w).dtype != ct_dt:
        w = convert_element_type(w, ct_dt)
    dn = ConvDimensionNumbers(tuple(out_spec), _swap01(rhs_spec), tuple(lhs_spec))
    out = conv_general_dilated_p.bind(
        ct, w, window_strides=tuple(lhs_dilation), padding=tuple(pads),
        lhs_dilation=tuple(window_strides), rhs_dilation=tuple(rhs_dilation),
        dimension_numbers=dn, feature_group_count=groups, batch_group_count=1,
        precision=precision, preferred_element_type=preferred_element_type,
        out_sharding=None)
    if get_aval(out).dtype != lhs_aval.dtype:
        out = convert_element_type(out, lhs_aval.dtype)
    if batch_group_count > 1:   # features (G, C) -> the group factor goes back to the batch
        out = _merge_axis(_split_axis(out, lhs_spec[1], batch_group_count), lhs_spec[1],
                          lhs_spec[0])
    return out


def _conv_transpose_rhs(ct, lhs, rhs_aval, *, window_strides, padding, lhs_dilation,
                        rhs_dilation, dimension_numbers, feature_group_count,
                        batch_group_count, precision, preferred_element_type):
    """Cotangent of rhs: lhs convolved with the output cotangent (batch and feature roles
    swapped, so feature groups become batch groups and vice versa)."""
    ct_aval = get_aval(ct)
    if ct_aval.size == 0:   # no output: no cotangent (and no degenerate empty window)
        return Zero(rhs_aval)
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    fg, bg = (batch_group_count, 1) if batch_group_count > 1 else (1, feature_group_count)
    in_d = _dilated([get_aval(lhs).shape[d] for d in lhs_spec[2:]], lhs_dilation)
    k_d = _dilated([rhs_aval.shape[d] for d in rhs_spec[2:]], rhs_dilation)
    out_d = _dilated([ct_aval.shape[d] for d in out_spec[2:]], window_strides)
    pads = tuple((int(lo), int(o_ - i_ + k_ - lo - 1))
                 for i_, k_, o_, (lo, _) in zip(in_d, k_d, out_d, padding))
    if get_aval(lhs).dtype != ct_aval.dtype:
        lhs = convert_element_type(lhs, ct_aval.dtype)
    dn = ConvDimensionNumbers(_swap01(lhs_spec), _swap01(out_spec), _swap01(rhs_spec))
    out = conv_general_dilated_p.bind(
        lhs, ct, window_strides=tuple(rhs_dilation), padding=pads,
        lhs_dilation=tuple(lhs_dilation), rhs_dilation=tuple(window_strides),
        dimension_numbers=dn, feature_group_count=fg, batch_group_count=bg,
        precision=precision, preferred_element_type=preferred_element_type,
        out_sharding=None)
    if get_aval(out).dtype != rhs_aval.dtype:
        out = convert_element_type(out, rhs_aval.dtype)
    return out


def _conv_transpose(ct, lhs, rhs, *, out_sharding, **params):
    lin_l, lin_r = is_undefined_primal(lhs), is_undefined_primal(rhs)
    if lin_l and lin_r:
        raise ValueError("conv_general_dilated: both operands linear (the product is not "
                         "linear)")
    if type(ct) is Zero:
        return [Zero(lhs.aval) if lin_l else None, Zero(rhs.aval) if lin_r else None]
    if lin_l:
        return [_conv_transpose_lhs(ct, rhs, lhs.aval, **params), None]
    return [None, _conv_transpose_rhs(ct, lhs, rhs.aval, **params)]


ad.transpose_rules[conv_general_dilated_p] = _conv_transpose


# ----------------------------------------------------------------------------------------------
# batching


def _conv_batch(axis_data, vals, dims, **params):
    (lhs, rhs), (ld, rd) = vals, dims
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    size = get_aval(lhs).shape[ld] if ld is not None else get_aval(rhs).shape[rd]
    if size == 0:
        la, ra = get_aval(lhs), get_aval(rhs)
        ls = la.shape if ld is None else la.shape[:ld] + la.shape[ld + 1:]
        rs = ra.shape if rd is None else ra.shape[:rd] + ra.shape[rd + 1:]
        out = _conv_abstract_eval(ShapedArray(ls, la.dtype), ShapedArray(rs, ra.dtype),
                                  **params)
        return full((0,) + tuple(out.shape), 0, out.dtype), 0

    def bind(x, w, **changes):
        return conv_general_dilated_p.bind(x, w, **{**params, **changes})

    if ld is not None and rd is not None:
        # One group per batch element: fold the mapped axis into the lhs batch (batch
        # groups) or feature (feature groups) dimension and the rhs output features.
        if bg > 1:
            x = _merge_axis(lhs, ld, lhs_spec[0])
            changes = dict(batch_group_count=bg * size)
        else:
            x = _merge_axis(lhs, ld, lhs_spec[1])
            changes = dict(feature_group_count=fg * size)
        out = bind(x, _merge_axis(rhs, rd, rhs_spec[0]), **changes)
        return _unmerge_axis(out, out_spec[1], size), out_spec[1]
    if ld is not None:
        # Into the batch dimension, inside each batch group.
        out = bind(_merge_axis(lhs, ld, lhs_spec[0], groups=bg), rhs)
        return _unmerge_axis(out, out_spec[0], size), out_spec[0]
    # Into the rhs output features, inside each feature/batch group.
    groups = max(fg, bg)
    out = bind(lhs, _merge_axis(rhs, rd, rhs_spec[0], groups=groups))
    return _unmerge_axis(out, out_spec[1], size, groups=groups), out_spec[1]


batching.batch_rules[conv_general_dilated_p] = _conv_batch
