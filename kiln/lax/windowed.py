"""Windowed reductions (``jax.lax.reduce_window``) built from existing primitives only.

The operand is padded with the monoid's identity (base dilation as interior padding), each
window offset contributes one strided ``slice``, and the slices are combined pairwise
with the monoid (``add``/``mul``/``max``/``min``), then with ``init_value`` once. Only these four monoids are supported;
a general reducer would need its own primitive.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln import dtypes
from kiln.core.trace import Tracer, concretize, get_aval
from kiln.lax import arith
from kiln.lax.convolution import padtype_to_pads
from kiln.lax.elementwise import bitwise_and, bitwise_or
from kiln.lax.slicing import _scalar_operand, pad
from kiln.lax.slicing import slice as _slice
from kiln.lax.structural import broadcast_in_dim, select

Array = Any


def _dilate_dim(d: int, r: int) -> int:
    return 0 if d == 0 else 1 + r * (d - 1)


def reduce_window_shape_tuple(operand_shape: Sequence[int], window_dimensions: Sequence[int],
                              window_strides: Sequence[int],
                              padding: Sequence[tuple[int, int]],
                              base_dilation: Sequence[int] | None = None,
                              window_dilation: Sequence[int] | None = None
                              ) -> tuple[int, ...]:
    """Output shape of :func:`reduce_window` for explicit ``padding`` pairs."""
    shape = [int(d) for d in operand_shape]
    window = [int(w) for w in window_dimensions]
    if base_dilation is not None:
        shape = [_dilate_dim(d, r) for d, r in zip(shape, base_dilation)]
    if window_dilation is not None:
        window = [_dilate_dim(w, r) for w, r in zip(window, window_dilation)]
    padded = [d + int(lo) + int(hi) for d, (lo, hi) in zip(shape, padding)]
    return tuple(max(0, (p - w) // int(s) + 1) for p, w, s in zip(padded, window, window_strides))


def _identity(op, dtype) -> Any:
    dtype = np.dtype(dtype)
    if op is arith.add:
        return 0
    if op is arith.mul:
        return 1
    if op is arith.max:
        if dtype.kind == "b":
            return False
        return -np.inf if dtype.kind in "fc" or dtype == dtypes.bfloat16 \
            else np.iinfo(dtype).min
    if dtype.kind == "b":
        return True
    return np.inf if dtype.kind in "fc" or dtype == dtypes.bfloat16 else np.iinfo(dtype).max


def _identity_value(op, dtype) -> Any:
    v = _identity(op, dtype)
    if np.dtype(dtype).kind == "b":
        return bool(v)
    if np.dtype(dtype).kind in "fc" or np.dtype(dtype) == dtypes.bfloat16:
        return float(v)
    return int(v)


def _is_identity(init, op, dtype) -> bool:
    v = concretize(init)
    if isinstance(v, Tracer):
        return False
    v = np.asarray(getattr(v, "_value", v))
    if v.shape != ():
        return False
    return bool(v == np.asarray(_identity(op, dtype)).astype(v.dtype))


def _combine(op, acc, piece):
    """``op(acc, piece)``; for max/min a ``select`` that keeps the earlier element on ties,
    so the derivative flows to one chosen element (as JAX's select-and-scatter does) rather
    than being split between tied elements. NaNs propagate as with ``lax.max``/``min``."""
    if op is arith.max or op is arith.min:
        better = arith.gt(piece, acc) if op is arith.max else arith.lt(piece, acc)
        if np.dtype(get_aval(acc).dtype).kind in "fc" or \
                get_aval(acc).dtype == dtypes.bfloat16:
            # Take a NaN piece unless a NaN is already held.
            better = bitwise_and(bitwise_or(better, arith.ne(piece, piece)),
                                 arith.eq(acc, acc))
        return select(better, piece, acc)
    return op(acc, piece)


_MONOIDS = {arith.add: "add", arith.mul: "mul", arith.max: "max", arith.min: "min"}


def reduce_window(operand: Array, init_value: Any, computation: Callable,
                  window_dimensions: Sequence[int],
                  window_strides: Sequence[int] | None = None,
                  padding: str | Sequence[tuple[int, int]] = "VALID",
                  base_dilation: Sequence[int] | None = None,
                  window_dilation: Sequence[int] | None = None) -> Array:
    """Reduction over padded windows.

    Args:
      operand: the input array.
      init_value: the scalar initial value, combined once into every window (padding and
        base-dilation holes do not contribute, as in XLA).
      computation: one of ``lax.add``, ``lax.mul``, ``lax.max``, ``lax.min``.
      window_dimensions: the window size, one integer per operand axis.
      window_strides: the window strides (default: all 1).
      padding: ``'VALID'`` (default), ``'SAME'``, ``'SAME_LOWER'`` or ``(low, high)`` pairs.
      base_dilation: the dilation of the operand (default: all 1).
      window_dilation: the dilation of the window (default: all 1).

    Returns:
      An array with one reduced value per window position.

    Raises:
      NotImplementedError: for another ``computation`` or a pytree of operands.
    """
    if computation not in _MONOIDS:
        raise NotImplementedError(
            "kiln.lax.reduce_window supports only computation in (lax.add, lax.mul, lax.max, "
            f"lax.min); got {computation!r}. General reducers (JAX's reduce_window_p with a "
            "traced computation) are not implemented.")
    if isinstance(operand, (tuple, list, dict)):
        raise NotImplementedError("kiln.lax.reduce_window does not support pytrees of "
                                  "operands (variadic reduce_window) yet.")
    aval = get_aval(operand)
    nd = aval.ndim
    window_dimensions = tuple(int(w) for w in window_dimensions)
    if len(window_dimensions) != nd:
        raise TypeError(f"reduce_window: window_dimensions {window_dimensions} must have one "
                        f"entry per operand axis (operand shape {aval.shape}).")
    ones = (1,) * nd
    strides = ones if window_strides is None else tuple(int(s) for s in window_strides)
    bdil = ones if base_dilation is None else tuple(int(d) for d in base_dilation)
    wdil = ones if window_dilation is None else tuple(int(d) for d in window_dilation)
    for name, seq in (("window_strides", strides), ("base_dilation", bdil),
                      ("window_dilation", wdil)):
        if len(seq) != nd:
            raise TypeError(f"reduce_window: {name} {seq} must have one entry per operand "
                            f"axis (operand shape {aval.shape}).")
        if any(v < 1 for v in seq):
            raise TypeError(f"reduce_window: {name} must be positive, got {seq}.")
    if isinstance(padding, str):
        eff_w = [_dilate_dim(w, r) for w, r in zip(window_dimensions, wdil)]
        padding = tuple(padtype_to_pads(aval.shape, eff_w, strides, padding))
    else:
        padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    if len(padding) != nd:
        raise TypeError(f"reduce_window: padding {padding} must have one pair per operand "
                        f"axis (operand shape {aval.shape}).")

    init = _scalar_operand(init_value, aval.dtype)
    init_aval = get_aval(init)
    if init_aval.shape != ():
        raise TypeError(f"reduce_window: init_value must be a scalar, got shape "
                        f"{init_aval.shape}.")
    if init_aval.dtype != aval.dtype:
        raise TypeError("reduce_window: operand and init_value must have the same dtype, got "
                        f"{aval.dtype.name} and {init_aval.dtype.name}.")

    padded = [lo + hi + _dilate_dim(d, r)
              for d, (lo, hi), r in zip(aval.shape, padding, bdil)]
    if any(p < 0 for p in padded):
        raise ValueError(f"reduce_window: padding {padding} crops more than the (dilated) "
                         f"operand shape {aval.shape}.")
    out_shape = reduce_window_shape_tuple(aval.shape, window_dimensions, strides, padding,
                                          bdil, wdil)
    if any(w == 0 for w in window_dimensions):
        return broadcast_in_dim(init, out_shape, ())
    x = operand
    cfg = tuple((lo, hi, r - 1) for (lo, hi), r in zip(padding, bdil))
    if any(lo or hi or i for lo, hi, i in cfg):
        # Padding and dilation holes hold the monoid's identity: as in XLA (CPU), they do
        # not contribute; ``init_value`` enters once per window, below.
        x = pad(x, _scalar_operand(_identity_value(computation, aval.dtype), aval.dtype), cfg)

    acc = None
    for offs in itertools.product(*(range(w) for w in window_dimensions)):
        starts, limits = [], []
        for off, r, s, p, m in zip(offs, wdil, strides, padded, out_shape):
            start = max(0, min(off * r, p))
            starts.append(start)
            limits.append(start + (m - 1) * s + 1 if m else start)
        piece = _slice(x, tuple(starts), tuple(limits), strides)
        acc = piece if acc is None else _combine(computation, acc, piece)
    if not _is_identity(init, computation, aval.dtype):
        acc = computation(broadcast_in_dim(init, out_shape, ()), acc)
    return acc


__all__ = ["reduce_window", "reduce_window_shape_tuple"]
