"""Convolutions: ``jax.lax.conv_general_dilated`` and its wrappers (``conv``,
``conv_with_general_padding``, ``conv_transpose``), plus the dimension-number and
shape helpers (``conv_dimension_numbers``, ``padtype_to_pads``, ``conv_shape_tuple``...).

``conv_general_dilated`` resolves string padding and string dimension numbers and binds
the ``conv_general_dilated`` primitive, defined with its NumPy impl and its
differentiation and batching rules in :mod:`kiln.lax.conv_rules`.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from kiln import dtypes
from kiln.core.trace import get_aval
from kiln.lax.conv_rules import ConvDimensionNumbers, _dilate_dim, conv_general_dilated_p
from kiln.lax.dot import canonicalize_precision
from kiln.lax.slicing import rev
from kiln.lax.structural import transpose

Array = Any


ConvGeneralDilatedDimensionNumbers = Union[tuple[str, str, str], ConvDimensionNumbers, None]


# ----------------------------------------------------------------------------------------------
# shape helpers


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _stride_dim(d: int, window: int, stride: int) -> int:
    return max(0, (d - window) // stride + 1)


def padtype_to_pads(in_shape: Sequence[int], window_shape: Sequence[int],
                    window_strides: Sequence[int], padding: str) -> list[tuple[int, int]]:
    """Convert a padding string to a list of ``(low, high)`` pairs.

    Args:
      in_shape: the input spatial shape.
      window_shape: the (dilated) window spatial shape.
      window_strides: the spatial strides.
      padding: ``'SAME'``, ``'SAME_LOWER'`` or ``'VALID'`` (case-insensitive).

    Returns:
      One ``(low, high)`` pair per spatial dimension. For ``'SAME'`` the output size is
      ``ceil(in / stride)`` and an odd total goes to the high side; ``'SAME_LOWER'`` puts
      it on the low side; ``'VALID'`` pads nothing.
    """
    if not isinstance(padding, str):
        name = getattr(padding, "name", None)
        if not isinstance(name, str):
            raise TypeError(f"Unknown padding type: {padding}.")
        padding = name
    mode = padding.upper()
    if mode not in ("SAME", "SAME_LOWER", "VALID"):
        raise RuntimeError("Unrecognized padding type: expected 'VALID', 'SAME', or "
                           f"'SAME_LOWER', got {padding}.")
    if mode == "VALID":
        return [(0, 0)] * len(in_shape)
    pads = []
    for d, w, s in zip(in_shape, window_shape, window_strides):
        d, w, s = int(d), int(w), int(s)
        total = max((_ceil_div(d, s) - 1) * s + w - d, 0)
        small, big = total // 2, total - total // 2
        pads.append((small, big) if mode == "SAME" else (big, small))
    return pads


def conv_general_permutations(dimension_numbers: tuple[str, str, str]
                              ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The ``(lhs_spec, rhs_spec, out_spec)`` permutations of string dimension numbers."""
    lhs_s, rhs_s, out_s = dimension_numbers
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for i, (a, b) in enumerate(pairs):
        spec = dimension_numbers[i]
        if not spec.count(a) == spec.count(b) == 1:
            raise TypeError(f"convolution dimension_numbers[{i}] must contain the characters "
                            f"'{a}' and '{b}' exactly once, got {spec}.")
        if len(spec) != len(set(spec)):
            raise TypeError(f"convolution dimension_numbers[{i}] cannot have duplicate "
                            f"characters, got {spec}.")
    if not (set(lhs_s) - {"N", "C"} == set(rhs_s) - {"O", "I"} == set(out_s) - {"N", "C"}):
        raise TypeError("convolution dimension_numbers elements must each have the same set "
                        f"of spatial characters, got {dimension_numbers}.")

    def perm(spec, pair):
        spatial = [i for i, c in enumerate(spec) if c not in pair]
        if spec is not rhs_s:
            # Spatial dimensions are ordered as they appear in the kernel spec.
            spatial.sort(key=lambda i: rhs_s.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1])) + tuple(spatial)

    return perm(lhs_s, pairs[0]), perm(rhs_s, pairs[1]), perm(out_s, pairs[2])


def conv_dimension_numbers(lhs_shape: Sequence[int], rhs_shape: Sequence[int],
                           dimension_numbers: ConvGeneralDilatedDimensionNumbers
                           ) -> ConvDimensionNumbers:
    """Convert convolution ``dimension_numbers`` to a :class:`ConvDimensionNumbers`.

    Args:
      lhs_shape: shape of the convolution input.
      rhs_shape: shape of the convolution kernel.
      dimension_numbers: ``None`` (``NCHW``/``OIHW``/``NCHW``-style defaults), a 3-tuple of
        strings such as ``('NHWC', 'HWIO', 'NHWC')``, or a ``ConvDimensionNumbers``.

    Returns:
      The canonical ``ConvDimensionNumbers``.
    """
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    if len(lhs_shape) != len(rhs_shape):
        raise TypeError("convolution requires lhs and rhs ndim to be equal, got "
                        f"{len(lhs_shape)} and {len(rhs_shape)}.")
    if dimension_numbers is None:
        iota = tuple(range(len(lhs_shape)))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, (list, tuple)):
        if len(dimension_numbers) != 3:
            raise TypeError("convolution dimension_numbers list/tuple must be length 3, got "
                            f"{len(dimension_numbers)}.")
        if not all(isinstance(s, str) for s in dimension_numbers):
            raise TypeError("convolution dimension_numbers elements must be strings, got "
                            f"{tuple(map(type, dimension_numbers))}.")
        for i, s in enumerate(dimension_numbers):
            if len(s) != len(lhs_shape):
                raise TypeError(f"convolution dimension_numbers[{i}] must have len equal to "
                                f"the ndim of lhs and rhs, got {len(s)} for lhs and rhs "
                                f"shapes {tuple(lhs_shape)} and {tuple(rhs_shape)}.")
        return ConvDimensionNumbers(*conv_general_permutations(tuple(dimension_numbers)))
    raise TypeError("convolution dimension_numbers must be tuple/list or None, got "
                    f"{type(dimension_numbers)}.")


def conv_shape_tuple(lhs_shape: Sequence[int], rhs_shape: Sequence[int],
                     strides: Sequence[int], pads: str | Sequence[tuple[int, int]],
                     batch_group_count: int = 1) -> tuple[int, ...]:
    """Output shape of a convolution whose operand shapes are in canonical order."""
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError("Wrong number of explicit pads for convolution: expected "
                        f"{len(lhs_shape) - 2}, got {len(pads)}.")
    padded = [int(d) + int(lo) + int(hi) for d, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(p < 0 for p in padded):
        raise ValueError("Negative padding is larger than the size of the corresponding "
                         f"dimension: got padding={pads} for lhs_shape[2:]={lhs_shape[2:]}")
    space = tuple(_stride_dim(p, int(k), int(s))
                  for p, k, s in zip(padded, rhs_shape[2:], strides))
    n = int(lhs_shape[0]) // batch_group_count if batch_group_count > 1 else int(lhs_shape[0])
    return (n, int(rhs_shape[0])) + space


def conv_general_shape_tuple(lhs_shape: Sequence[int], rhs_shape: Sequence[int],
                             window_strides: Sequence[int],
                             padding: str | Sequence[tuple[int, int]],
                             dimension_numbers: tuple[str, str, str]) -> tuple[int, ...]:
    """Output shape of ``conv_general_dilated`` (no dilation) for string dimension numbers."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    out = conv_shape_tuple(tuple(np.take(lhs_shape, lhs_perm)),
                           tuple(np.take(rhs_shape, rhs_perm)), window_strides, padding)
    return tuple(int(d) for d in np.take(out, np.argsort(out_perm)))


def _conv_transpose_padding(k: int, s: int, padding) -> tuple[int, int]:
    """Low/high padding of one spatial dimension of a transposed convolution."""
    if padding == "SAME":
        total = k + s - 2
        low = k - 1 if s > k - 1 else _ceil_div(total, 2)
    elif padding == "VALID":
        total = k + s - 2 + max(k - s, 0)
        low = k - 1
    elif isinstance(padding, (tuple, list)):
        pads = [k - p - 1 for p in padding]
        low, total = pads[0], sum(pads)
    else:
        raise ValueError(f"Invalid padding mode: {padding}")
    return low, total - low


def conv_transpose_shape_tuple(lhs_shape: Sequence[int], rhs_shape: Sequence[int],
                               window_strides: Sequence[int],
                               padding: str | Sequence[tuple[int, int]],
                               dimension_numbers: tuple[str, str, str]) -> tuple[int, ...]:
    """Output shape of ``conv_transpose`` for string dimension numbers."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    lhs_t = [int(d) for d in np.take(lhs_shape, lhs_perm)]
    rhs_t = [int(d) for d in np.take(rhs_shape, rhs_perm)]
    if isinstance(padding, str):
        padding = [_conv_transpose_padding(k, s, padding)
                   for k, s in zip(rhs_t[2:], window_strides)]
    space = [(i - 1) * s - k + 2 + int(sum(p))
             for i, k, s, p in zip(lhs_t[2:], rhs_t[2:], window_strides, padding)]
    out = (lhs_t[0], rhs_t[0]) + tuple(space)
    return tuple(int(d) for d in np.take(out, np.argsort(out_perm)))


# ----------------------------------------------------------------------------------------------
# conv_general_dilated


def conv_general_dilated(
        lhs: Array, rhs: Array, window_strides: Sequence[int],
        padding: str | Sequence[tuple[int, int]],
        lhs_dilation: Sequence[int] | None = None,
        rhs_dilation: Sequence[int] | None = None,
        dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
        feature_group_count: int = 1, batch_group_count: int = 1,
        precision: Any = None,
        preferred_element_type: Any = None, out_sharding: Any = None) -> Array:
    """General n-dimensional convolution operator, with optional dilation.

    Args:
      lhs: a rank ``n+2`` dimensional input array.
      rhs: a rank ``n+2`` dimensional array of kernel weights.
      window_strides: a sequence of ``n`` integers, the inter-window strides.
      padding: ``'SAME'``, ``'SAME_LOWER'``, ``'VALID'``, or a sequence of ``n``
        ``(low, high)`` integer pairs (negative values crop).
      lhs_dilation: ``None`` or ``n`` integers, the dilation of ``lhs`` (transposed
        convolution).
      rhs_dilation: ``None`` or ``n`` integers, the dilation of ``rhs`` (atrous
        convolution).
      dimension_numbers: ``None`` (``('NCHW', 'OIHW', 'NCHW')``-style), a
        ``ConvDimensionNumbers``, or a 3-tuple of strings of length ``n+2``.
      feature_group_count: number of feature groups (grouped / depthwise convolution).
      batch_group_count: number of batch groups.
      precision: ``None``, a ``Precision``, a string, or a pair of them (accepted for
        compatibility: CPU results are computed at full precision).
      preferred_element_type: ``None`` or the accumulation/result dtype.
      out_sharding: accepted for compatibility; kiln runs on one device.

    Returns:
      The convolution result, laid out as ``dimension_numbers``' output spec.
    """
    lhs_shape, rhs_shape = tuple(get_aval(lhs).shape), tuple(get_aval(rhs).shape)
    dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    dn = ConvDimensionNumbers(*(tuple(int(d) for d in spec) for spec in dn))
    nsp = len(lhs_shape) - 2
    window_strides = tuple(int(operator.index(s)) for s in window_strides)
    if lhs_dilation is None:
        lhs_dilation = (1,) * nsp
    elif isinstance(padding, str) and any(d != 1 for d in lhs_dilation):
        raise ValueError("String padding is not implemented for transposed convolution using "
                         "this op. Please either exactly specify the required padding or use "
                         "conv_transpose.")
    if rhs_dilation is None:
        rhs_dilation = (1,) * nsp
    lhs_dilation = tuple(int(operator.index(d)) for d in lhs_dilation)
    rhs_dilation = tuple(int(operator.index(d)) for d in rhs_dilation)
    if isinstance(padding, str):
        ksize = [rhs_shape[d] for d in dn.rhs_spec[2:]]
        eff_k = [_dilate_dim(k, r) for k, r in zip(ksize, rhs_dilation)]
        padding = padtype_to_pads([lhs_shape[d] for d in dn.lhs_spec[2:]], eff_k,
                                  window_strides, padding)
    try:
        padding = tuple((int(operator.index(lo)), int(operator.index(hi)))
                        for lo, hi in padding)
    except (ValueError, TypeError) as e:
        raise ValueError("padding argument to conv_general_dilated should be a string or a "
                         f"sequence of (low, high) pairs, got {padding}") from e
    if preferred_element_type is not None:
        preferred_element_type = dtypes.check_and_canonicalize_user_dtype(
            preferred_element_type, "conv_general_dilated")
    return conv_general_dilated_p.bind(
        lhs, rhs, window_strides=window_strides, padding=padding,
        lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation, dimension_numbers=dn,
        feature_group_count=operator.index(feature_group_count),
        batch_group_count=operator.index(batch_group_count),
        precision=canonicalize_precision(precision),
        preferred_element_type=preferred_element_type, out_sharding=None)


# ----------------------------------------------------------------------------------------------
# convenience wrappers


def conv(lhs: Array, rhs: Array, window_strides: Sequence[int], padding: str,
         precision: Any = None, preferred_element_type: Any = None) -> Array:
    """Convenience wrapper around :func:`conv_general_dilated` (``NCHW``/``OIHW`` layout).

    Args:
      lhs: a rank ``n+2`` dimensional input array.
      rhs: a rank ``n+2`` dimensional array of kernel weights.
      window_strides: a sequence of ``n`` integers, the inter-window strides.
      padding: ``'SAME'`` or ``'VALID'`` (or explicit pairs).
      precision: optional precision for the contraction.
      preferred_element_type: optional accumulation/result dtype.

    Returns:
      The convolution result.
    """
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs: Array, rhs: Array, window_strides: Sequence[int],
                              padding: str | Sequence[tuple[int, int]],
                              lhs_dilation: Sequence[int] | None,
                              rhs_dilation: Sequence[int] | None,
                              precision: Any = None,
                              preferred_element_type: Any = None) -> Array:
    """Convenience wrapper around :func:`conv_general_dilated` with dilations.

    Args:
      lhs: a rank ``n+2`` dimensional input array.
      rhs: a rank ``n+2`` dimensional array of kernel weights.
      window_strides: a sequence of ``n`` integers, the inter-window strides.
      padding: ``'SAME'``, ``'VALID'`` or a sequence of ``n`` ``(low, high)`` pairs.
      lhs_dilation: ``None`` or ``n`` integers, the input dilation.
      rhs_dilation: ``None`` or ``n`` integers, the kernel dilation.
      precision: optional precision for the contraction.
      preferred_element_type: optional accumulation/result dtype.

    Returns:
      The convolution result.
    """
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_transpose(lhs: Array, rhs: Array, strides: Sequence[int],
                   padding: str | Sequence[tuple[int, int]],
                   rhs_dilation: Sequence[int] | None = None,
                   dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
                   transpose_kernel: bool = False,
                   precision: Any = None,
                   preferred_element_type: Any = None,
                   use_consistent_padding: bool = False) -> Array:
    """N-d transposed ("fractionally strided") convolution.

    It is :func:`conv_general_dilated` with unit window strides and
    ``lhs_dilation=strides``. ``'SAME'``/``'VALID'`` (and, with
    ``use_consistent_padding=True``, explicit pairs) describe the padding of the
    corresponding forward convolution; otherwise explicit pairs pad the transposed one.

    Args:
      lhs: a rank ``n+2`` dimensional input array.
      rhs: a rank ``n+2`` dimensional array of kernel weights.
      strides: ``n`` integers, the fractional strides.
      padding: ``'SAME'``, ``'VALID'`` or ``n`` ``(low, high)`` pairs.
      rhs_dilation: ``None`` or ``n`` integers, the kernel dilation.
      dimension_numbers: as in :func:`conv_general_dilated`; defaults to the TensorFlow
        convention (``'NHWC', 'HWIO', 'NHWC'`` for 2-D).
      transpose_kernel: flip the kernel's spatial axes and swap its input/output feature
        axes (the gradient-of-conv / Keras ``Conv2DTranspose`` convention).
      precision: optional precision for the contraction.
      preferred_element_type: optional accumulation/result dtype.
      use_consistent_padding: interpret explicit pairs as forward-conv padding too.

    Returns:
      The transposed convolution result.
    """
    lhs_shape, rhs_shape = tuple(get_aval(lhs).shape), tuple(get_aval(rhs).shape)
    if not (len(lhs_shape) == len(rhs_shape) and len(lhs_shape) >= 2):
        raise ValueError("conv_transpose requires lhs and rhs of equal rank >= 2, got "
                         f"shapes {lhs_shape} and {rhs_shape}")
    ndims = len(lhs_shape)
    if dimension_numbers is None:
        defaults = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                    4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}
        if ndims not in defaults:
            raise ValueError("No 4+ dimensional dimension_number defaults.")
        dimension_numbers = defaults[ndims]
    dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    k_space = [rhs_shape[d] for d in dn.rhs_spec[2:]]
    if rhs_dilation is None:
        rhs_dilation = (1,) * (ndims - 2)
    if use_consistent_padding or (isinstance(padding, str) and padding in ("SAME", "VALID")):
        per_dim = [padding] * len(strides) if isinstance(padding, str) else \
            [tuple(p) for p in padding]
        pads = tuple(_conv_transpose_padding(_dilate_dim(k, r), s, p)
                     for k, r, s, p in zip(k_space, rhs_dilation, strides, per_dim))
    else:
        pads = padding
    if transpose_kernel:
        rhs = rev(rhs, tuple(dn.rhs_spec[2:]))
        perm = list(range(ndims))
        a, b = dn.rhs_spec[0], dn.rhs_spec[1]
        perm[a], perm[b] = perm[b], perm[a]
        rhs = transpose(rhs, tuple(perm))
    return conv_general_dilated(lhs, rhs, (1,) * (ndims - 2), pads, strides, rhs_dilation,
                                dn, precision=precision,
                                preferred_element_type=preferred_element_type)


__all__ = ["ConvDimensionNumbers", "ConvGeneralDilatedDimensionNumbers", "conv",
           "conv_dimension_numbers", "conv_general_dilated", "conv_general_dilated_p",
           "conv_general_permutations",
           "conv_general_shape_tuple", "conv_shape_tuple", "conv_transpose",
           "conv_transpose_shape_tuple", "conv_with_general_padding", "padtype_to_pads"]
