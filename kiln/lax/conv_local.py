"""``lax.conv_general_dilated_local``: unshared (locally connected) convolution.

Built, as in JAX, from two existing primitives: the receptive-field patches of the
input (``conv_general_dilated_patches``, itself a grouped convolution with an identity
kernel) and one ``dot_general`` that contracts each output position's patch with the
kernel of that position (the output spatial dimensions are ``dot_general`` batch
dimensions). So JVP, transposition (gradients for both operands), batching and the
compiled path are those of ``conv_general_dilated`` and ``dot_general``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.lax.convolution import conv_dimension_numbers
from kiln.lax.derived import _asarray, conv_general_dilated_patches
from kiln.lax.dot import canonicalize_precision, dot_general
from kiln.lax.structural import transpose
from kiln.typing import ArrayLike

Array = Any


def conv_general_dilated_local(
        lhs: ArrayLike, rhs: ArrayLike, window_strides: Sequence[int],
        padding: str | Sequence[tuple[int, int]], filter_shape: Sequence[int],
        lhs_dilation: Sequence[int] | None = None,
        rhs_dilation: Sequence[int] | None = None,
        dimension_numbers: Any = None, precision: Any = None) -> Array:
    """General n-dimensional unshared convolution with optional dilation.

    A locally connected layer: a convolution whose kernel is different at every
    output spatial position.

    Args:
      lhs: a rank ``n+2`` input array.
      rhs: a rank ``n+2`` kernel array. Its spatial dimensions index *output*
        positions; its ``I`` dimension holds the input channels fused with the
        receptive-window positions, in the order
        ``"C" + ''.join(c for c in rhs_spec if c not in 'OI')`` (input channel major),
        so its size is ``lhs_channels * prod(filter_shape)``.
      window_strides: ``n`` integers, the inter-window strides.
      padding: ``'SAME'``, ``'SAME_LOWER'``, ``'VALID'`` or ``n`` ``(low, high)`` pairs.
      filter_shape: ``n`` integers, the receptive window's spatial shape, in the order
        of ``rhs_spec = dimension_numbers[1]``.
      lhs_dilation: ``None`` or ``n`` integers, the dilation of ``lhs`` (transposed
        convolution).
      rhs_dilation: ``None`` or ``n`` integers, the dilation of the receptive window
        (atrous convolution).
      dimension_numbers: ``None``, a ``ConvDimensionNumbers`` or a 3-tuple of specs
        ``(lhs_spec, rhs_spec, out_spec)``; ``None`` means ``('NCHW', 'OIHW', 'NCHW')``.
      precision: ``None``, a ``Precision`` (or its name), or a pair of them.

    Returns:
      The unshared convolution, laid out as ``out_spec``.

    Raises:
      ValueError: for a precision that is not ``None`` or a (pair of) ``Precision``.
    """
    lhs = _asarray(lhs)
    c_precision = canonicalize_precision(precision)
    if c_precision is None:
        lhs_precision = None
    elif isinstance(c_precision, tuple) and len(c_precision) == 2:
        lhs_precision = c_precision[0]
    else:
        raise ValueError(
            f"Unsupported precision for conv_general_dilated_local: {precision}")
    filter_shape = tuple(filter_shape)
    patches = conv_general_dilated_patches(
        lhs, filter_shape, window_strides, padding, lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
        precision=lhs_precision)
    lhs_shape = tuple(lhs.shape)
    _, rhs_spec, out_spec = conv_dimension_numbers(
        lhs_shape, (1, 1) + filter_shape, dimension_numbers)
    # Batch over the output spatial positions, in the order they appear in ``out``;
    # the kernel's spatial dimensions pair with them in rhs_spec order.
    out_spatial = list(out_spec[2:])
    order = sorted(range(len(out_spatial)), key=lambda k: out_spatial[k])
    lhs_batch = [out_spatial[k] for k in order]
    rhs_batch = [rhs_spec[2:][k] for k in order]
    dn = (([out_spec[1]], [rhs_spec[1]]), (lhs_batch, rhs_batch))
    out = dot_general(patches, rhs, dn, precision=precision)
    # ``out`` is (spatial..., N, O): move N and O to out_spec's batch/feature places.
    ndim = len(out_spec)
    n_sp = ndim - 2
    perm = [0] * ndim
    src = iter(range(n_sp))
    for pos in range(ndim):
        if pos == out_spec[0]:
            perm[pos] = n_sp
        elif pos == out_spec[1]:
            perm[pos] = n_sp + 1
        else:
            perm[pos] = next(src)
    return transpose(out, tuple(perm))


__all__ = ["conv_general_dilated_local"]
