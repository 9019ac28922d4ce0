"""Composite ``jax.lax`` functions built from existing kiln primitives.

``broadcast_shapes``, ``broadcast_to_rank``, ``stack``, ``unstack``, ``tile``,
``split``, ``empty``, ``optimization_barrier``, ``approx_max_k``, ``approx_min_k``,
``mulhi``, ``conv_general_dilated_patches`` and ``axis_size``. None of them defines a
primitive: each is written in terms of other ``kiln.lax`` functions, so jit, grad and
vmap work through the rules of those primitives.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln import dtypes
from kiln._physical_tree import tree_map
from kiln.array import make_array
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import batching
from kiln.lax.arith import add, mul, sub
from kiln.lax.convolution import conv_dimension_numbers, conv_general_dilated
from kiln.lax.elementwise import (
    bitcast_convert_type,
    bitwise_and,
    lt,
    shift_right_logical,
)
from kiln.lax.slicing import (
    _canonical_axis,
    broadcasted_iota,
    concatenate,
    full,
    index_in_dim,
    slice_in_dim,
    split_p,
)
from kiln.lax.sorting import sort, top_k
from kiln.lax.structural import (
    _convert_element_type,
    broadcast,
    broadcast_in_dim,
    expand_dims,
    reshape,
    select,
)

Array = Any
ArrayLike = Any


def _asarray(x: ArrayLike) -> Array:
    """``x`` as a kiln array or tracer (Python scalars become weakly typed)."""
    if isinstance(x, Tracer) or hasattr(x, "aval"):
        return x
    dt = dtypes.dtype(x, canonicalize=True)
    return make_array(np.asarray(x, dt), dtypes.is_weakly_typed(x))


# -- shapes -----------------------------------------------------------------------------------

def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """Returns the shape that results from NumPy broadcasting of ``shapes``.

    Args:
      shapes: one or more tuples of integers containing the shapes of arrays to be
        broadcast.

    Returns:
      A tuple of integers representing the broadcasted shape.

    Raises:
      ValueError: if shapes are not broadcast-compatible.
    """
    assert shapes
    for s in shapes:
        # As JAX: each shape canonicalized first (integer dimensions), then checked for
        # negative ones.
        try:
            dims = [d if isinstance(d, Tracer) else operator.index(d) for d in s]
        except TypeError:
            raise TypeError("Shapes must be 1D sequences of concrete values of integer type, "
                            f"got {s!r}.") from None
        if not all(int(d) >= 0 for d in dims):
            raise TypeError("Only non-negative indices are allowed when broadcasting static "
                            f"shapes, but got shape {s!r}.")
    if len(shapes) == 1:
        return shapes[0]
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        dims = {int(s[len(s) - ndim + i]) for s in shapes if len(s) - ndim + i >= 0}
        non_one = dims - {1}
        if len(non_one) > 1:
            raise ValueError(f"Incompatible shapes for broadcasting: shapes={list(shapes)}")
        out.append(non_one.pop() if non_one else 1)
    return tuple(out)


def broadcast_to_rank(x: ArrayLike, rank: int) -> Array:
    """Adds leading dimensions of ``1`` to give ``x`` rank ``rank``."""
    x = _asarray(x)
    ndim = get_aval(x).ndim
    if ndim == rank:
        return x
    return broadcast(x, (1,) * (rank - ndim))


# -- stacking, splitting, tiling --------------------------------------------------------------

def stack(operands: Sequence[ArrayLike], axis: int = 0) -> Array:
    """Joins a sequence of arrays along a new axis.

    Args:
      operands: a sequence of arrays to stack. All arrays must have the same shape
        and dtype.
      axis: the axis along which to stack the arrays.

    Returns:
      An array containing the stacked operands.
    """
    arrays = [_asarray(op) for op in operands]
    avals = [get_aval(a) for a in arrays]
    axis = _canonical_axis(axis, avals[0].ndim + 1)
    dts = [a.dtype for a in avals]
    if any(d != dts[0] for d in dts[1:]):
        raise TypeError("lax.stack requires arguments to have the same dtypes, got "
                        f"{', '.join(np.dtype(d).name for d in dts)}.")
    if any(a.shape != avals[0].shape for a in avals[1:]):
        raise ValueError("All input arrays must have the same shape. Got "
                         f"{', '.join(str(a.shape) for a in avals)}.")
    return concatenate([expand_dims(a, (axis,)) for a in arrays], axis)


def unstack(x: ArrayLike, axis: int = 0) -> tuple[Array, ...]:
    """Unstacks an array along an axis.

    Args:
      x: the array to unstack.
      axis: the axis along which to unstack the array.

    Returns:
      A tuple of arrays, split along ``axis``.
    """
    x = _asarray(x)
    shape = get_aval(x).shape
    axis = _canonical_axis(axis, len(shape))
    return tuple(index_in_dim(x, i, axis, keepdims=False) for i in range(shape[axis]))


def tile(operand: ArrayLike, reps: Sequence[int]) -> Array:
    """Tiles an array by repeating it along each dimension.

    Args:
      operand: an array to tile.
      reps: a sequence of integers representing the number of repeats for each
        dimension. Must have the same length as ``operand.ndim``.

    Returns:
      A tiled array with shape ``(operand.shape[0] * reps[0], ...,
      operand.shape[-1] * reps[-1])``.
    """
    operand = _asarray(operand)
    shape = get_aval(operand).shape
    reps = tuple(int(r) for r in reps)
    if len(shape) != len(reps):
        raise TypeError("reps length must be equal to the ndim of x, got "
                        f"len(reps)={len(reps)} and x.ndim={len(shape)}.")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile reps must be nonnegative, got {reps}")
    if all(r == 1 for r in reps):
        return operand
    wide = tuple(d for r, s in zip(reps, shape) for d in (r, s))
    y = broadcast_in_dim(operand, wide, tuple(range(1, 2 * len(shape), 2)))
    return reshape(y, tuple(r * s for r, s in zip(reps, shape)))


def split(operand: ArrayLike, sizes: Sequence[int], axis: int = 0) -> Sequence[Array]:
    """Splits an array along ``axis``.

    Args:
      operand: an array to split.
      sizes: the sizes of the split arrays. The sum of the sizes must be equal to
        the size of the ``axis`` dimension of ``operand``.
      axis: the axis along which to split the array.

    Returns:
      A list of ``len(sizes)`` arrays: chunks of sizes ``s1``, ``s2``, ... taken
      along ``axis``.
    """
    operand = _asarray(operand)
    axis = _canonical_axis(axis, len(get_aval(operand).shape))
    # The sizes as given (JAX's jaxpr shows jnp.split's ``np.int64`` sizes the same way).
    sizes = tuple(s if isinstance(s, (int, np.integer)) else operator.index(s) for s in sizes)
    return split_p.bind(operand, sizes=sizes, axis=axis)


def empty(shape: int | Sequence[int], dtype: Any, *, out_sharding: Any = None) -> Array:
    """Create an empty array of possibly uninitialized values.

    As on JAX's CPU backend, the values are zeros.

    Args:
      shape: int or sequence of ints specifying the shape of the created array.
      dtype: dtype for the created array.
      out_sharding: accepted for compatibility; ignored.

    Returns:
      An array of the specified shape and (canonicalized) dtype.
    """
    del out_sharding
    shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
    dt = dtypes.canonicalize_dtype(np.dtype(dtype))
    return full(shape, np.zeros((), dt), dt)


def optimization_barrier(operand: Any, /) -> Any:
    """Prevents the compiler from moving operations across the barrier.

    kiln has no optimizing compiler, so this is the identity on the pytree
    ``operand`` (its leaves converted to arrays).

    Args:
      operand: a pytree of JAX values.

    Returns:
      A pytree of JAX values, with the same structure and contents as ``operand``.
    """
    return tree_map(_asarray, operand)


# -- approximate top-k ------------------------------------------------------------------------

def _log2_ceil(x: int) -> int:
    return 0 if x <= 1 else (x - 1).bit_length()


def _approx_output_size(n: int, rank: int, k: int, recall_target: float,
                        aggregate_to_topk: bool, override: int) -> int:
    """Size of the reduction dimension of an ``approx_top_k`` result (XLA's
    ``ApproxTopKReductionOutputSize``, the size JAX uses on every backend)."""
    if aggregate_to_topk:
        return k
    tiling = 1024 if rank == 1 else 128
    if n <= tiling:
        return n
    logical = override if override >= 0 else n
    if k == 1:
        return tiling
    if recall_target == 1.0:
        return n
    m = min(max(int((1.0 - k) / math.log(recall_target)), tiling), logical)
    log2_reduction = (logical // m).bit_length() - 1
    if log2_reduction <= 0:
        return n
    log2_reduction = min(log2_reduction, _log2_ceil(n // tiling))
    windows = -(-n // tiling)
    return -(-windows // (1 << log2_reduction)) * tiling


def _approx_top_k(operand, k, reduction_dimension, recall_target, is_max_k,
                  reduction_input_size_override, aggregate_to_topk):
    operand = _asarray(operand)
    aval = get_aval(operand)
    if isinstance(k, Tracer):
        from kiln.errors import ConcretizationTypeError
        raise ConcretizationTypeError(k, "The k argument of lax.approx_max_k / approx_min_k "
                                         "must be static.")
    k = int(k)
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if aval.ndim == 0:
        raise TypeError(f"approx_top_k operand must have >= 1 dimension, got {aval.shape}")
    dims = list(aval.shape)
    n = dims[reduction_dimension]
    if n < k:
        raise ValueError(f"k must be smaller than the size of reduction_dim {n}, got {k}")
    if not dtypes.issubdtype(aval.dtype, np.floating):
        raise ValueError("operand must be a floating type")
    recall_target = float(recall_target)
    if not 0.0 < recall_target <= 1.0:
        raise ValueError(f"recall_target must be in (0, 1], got {recall_target}")
    override = int(reduction_input_size_override)
    if 0 <= override < n:
        raise ValueError(f"reduction_input_size_override: {override} should be greater "
                         f"equals to operands[reduction_dim]: {n}")
    axis = _canonical_axis(reduction_dimension, aval.ndim)
    size = _approx_output_size(n, aval.ndim, k, recall_target, bool(aggregate_to_topk),
                               override)
    if is_max_k:
        return list(top_k(operand, size, axis=axis))
    # Ascending, stable, with -0.0 == 0.0 (the LT comparator JAX uses); NaNs last.
    key = add(operand, make_array(np.zeros((), aval.dtype), aval.weak_type))
    idx = broadcasted_iota(np.int32, aval.shape, axis)
    _, vals, idx = sort((key, operand, idx), dimension=axis, is_stable=True, num_keys=1)
    return [slice_in_dim(vals, 0, size, axis=axis), slice_in_dim(idx, 0, size, axis=axis)]


def approx_max_k(operand: Array, k: int, reduction_dimension: int = -1,
                 recall_target: float = 0.95, reduction_input_size_override: int = -1,
                 aggregate_to_topk: bool = True) -> tuple[Array, Array]:
    """Returns max ``k`` values and their indices of the ``operand``.

    As JAX does on CPU and GPU, the result is exact: the ``k`` largest values in
    descending order (ties by lower index; NaN counts as largest) and their int32
    indices along ``reduction_dimension``.

    Args:
      operand: array to search for max-k. Must be a floating number type.
      k: specifies the number of max-k.
      reduction_dimension: integer dimension along which to search. Default: -1.
      recall_target: recall target for the approximation, in ``(0, 1]``.
      reduction_input_size_override: when positive, overrides the size of
        ``operand[reduction_dimension]`` for evaluating the recall.
      aggregate_to_topk: when true, the result has ``k`` entries along the reduction
        dimension; when false, as many as XLA's approximate algorithm would keep
        (at least ``k``), here the largest ones in sorted order.

    Returns:
      Tuple ``(values, indices)`` of the same shape as ``operand`` except along
      ``reduction_dimension``.
    """
    return _approx_top_k(operand, k, reduction_dimension, recall_target, True,
                         reduction_input_size_override, aggregate_to_topk)


def approx_min_k(operand: Array, k: int, reduction_dimension: int = -1,
                 recall_target: float = 0.95, reduction_input_size_override: int = -1,
                 aggregate_to_topk: bool = True) -> tuple[Array, Array]:
    """Returns min ``k`` values and their indices of the ``operand``.

    As JAX does on CPU and GPU, the result is exact: the ``k`` smallest values in
    ascending order (ties, including ``-0.0`` and ``0.0``, by lower index) and
    their int32 indices along ``reduction_dimension``.

    Args:
      operand: array to search for min-k. Must be a floating number type.
      k: specifies the number of min-k.
      reduction_dimension: integer dimension along which to search. Default: -1.
      recall_target: recall target for the approximation, in ``(0, 1]``.
      reduction_input_size_override: when positive, overrides the size of
        ``operand[reduction_dimension]`` for evaluating the recall.
      aggregate_to_topk: when true, the result has ``k`` entries along the reduction
        dimension; when false, as many as XLA's approximate algorithm would keep
        (at least ``k``), here the smallest ones in sorted order.

    Returns:
      Tuple ``(values, indices)`` of the same shape as ``operand`` except along
      ``reduction_dimension``.
    """
    return _approx_top_k(operand, k, reduction_dimension, recall_target, False,
                         reduction_input_size_override, aggregate_to_topk)


# -- mulhi ------------------------------------------------------------------------------------

def _mulhi_unsigned(a, b, bits: int, udt):
    h = bits // 2

    def c(v):
        return make_array(np.asarray(v, udt))
    mask, sh = c((1 << h) - 1), c(h)
    a0, a1 = bitwise_and(a, mask), shift_right_logical(a, sh)
    b0, b1 = bitwise_and(b, mask), shift_right_logical(b, sh)
    ll, hl, lh, hh = mul(a0, b0), mul(a1, b0), mul(a0, b1), mul(a1, b1)
    cross = add(add(shift_right_logical(ll, sh), bitwise_and(hl, mask)), lh)
    return add(add(hh, shift_right_logical(hl, sh)), shift_right_logical(cross, sh))


def mulhi(x: ArrayLike, y: ArrayLike, /) -> Array:
    r"""Elementwise multiply-high: high bits of :math:`x \times y`.

    For N-bit integer inputs, this function computes the upper N bits of the full
    2N-bit product.

    Args:
      x, y: Input arrays. Must have an integer dtype. If neither is a scalar, ``x``
        and ``y`` must have the same number of dimensions and be broadcast
        compatible.

    Returns:
      An array of the same dtype as ``x`` and ``y`` containing the most significant
      N bits of the 2N-bit product of each pair of broadcasted entries.
    """
    py = (int, float, complex, bool)
    if type(x) in py and type(y) not in py:
        y = _asarray(y)
        x = make_array(np.asarray(x, get_aval(y).dtype), True) if type(x) is int else x
    elif type(y) in py and type(x) not in py:
        x = _asarray(x)
        y = make_array(np.asarray(y, get_aval(x).dtype), True) if type(y) is int else y
    x, y = _asarray(x), _asarray(y)
    ax, ay = get_aval(x), get_aval(y)
    for i, a in enumerate((ax, ay)):
        if not dtypes.issubdtype(a.dtype, np.integer):
            raise TypeError(f"mulhi does not accept dtype {np.dtype(a.dtype).name} at "
                            f"position {i}. Accepted dtypes at position {i} are subtypes of "
                            "integer.")
    if ax.dtype != ay.dtype:
        raise TypeError("lax.mulhi requires arguments to have the same dtypes, got "
                        f"{np.dtype(ax.dtype).name}, {np.dtype(ay.dtype).name}.")
    if ax.ndim and ay.ndim and ax.ndim != ay.ndim:
        raise TypeError("mulhi: arrays must have the same number of dimensions, got "
                        f"{ {ax.ndim, ay.ndim} }")
    if ax.shape != ay.shape:
        try:
            shape = broadcast_shapes(ax.shape, ay.shape)
        except ValueError:
            raise TypeError("mulhi got incompatible shapes for broadcasting: "
                            f"{ax.shape}, {ay.shape}.") from None
        x, y = _broadcast_to(x, shape), _broadcast_to(y, shape)
    dt = np.dtype(ax.dtype)
    bits = dt.itemsize * 8
    udt = np.dtype(f"uint{bits}")
    if dt.kind == "u":
        out = _mulhi_unsigned(x, y, bits, udt)
    else:
        ux, uy = bitcast_convert_type(x, udt), bitcast_convert_type(y, udt)
        hi = _mulhi_unsigned(ux, uy, bits, udt)
        zero = make_array(np.zeros((), dt))
        zu = make_array(np.zeros((), udt))
        # signed high = unsigned high - (x < 0 ? y : 0) - (y < 0 ? x : 0)  (mod 2**bits)
        shape = get_aval(x).shape
        zu = _broadcast_to(zu, shape)
        corr_x = select(lt(x, zero), uy, zu)
        corr_y = select(lt(y, zero), ux, zu)
        hi = sub(sub(hi, corr_x), corr_y)
        out = bitcast_convert_type(hi, dt)
    if ax.weak_type and ay.weak_type:
        out = _convert_element_type(out, dt, weak_type=True)
    return out


def _broadcast_to(v, shape):
    """``v`` broadcast (NumPy-style, equal rank or rank 0) to ``shape``."""
    vshape = get_aval(v).shape
    if vshape == shape:
        return v
    if not vshape:
        return broadcast_in_dim(v, shape, ())
    return broadcast_in_dim(reshape(v, tuple(d for d in vshape if d != 1) or ()), shape,
                            tuple(i for i, d in enumerate(vshape) if d != 1))


# -- convolution patches ----------------------------------------------------------------------

def conv_general_dilated_patches(
        lhs: ArrayLike, filter_shape: Sequence[int], window_strides: Sequence[int],
        padding: str | Sequence[tuple[int, int]],
        lhs_dilation: Sequence[int] | None = None,
        rhs_dilation: Sequence[int] | None = None,
        dimension_numbers: Any = None, precision: Any = None,
        preferred_element_type: Any = None) -> Array:
    """Extract patches subject to the receptive field of ``conv_general_dilated``.

    Runs the input through a grouped convolution with an identity kernel, so that
    the output channel dimension ``"C"`` holds flattened image patches in the order
    ``"c" + ''.join(c for c in rhs_spec if c not in 'OI')`` (input channel major),
    of size ``np.prod(filter_shape) * lhs.shape[lhs_spec.index('C')]``.

    Args:
      lhs: a rank ``n+2`` dimensional input array.
      filter_shape: a sequence of ``n`` integers, the receptive window spatial shape
        in the order given by ``rhs_spec = dimension_numbers[1]``.
      window_strides: a sequence of ``n`` integers, the inter-window strides.
      padding: ``'SAME'``, ``'VALID'``, or a sequence of ``n`` ``(low, high)`` pairs.
      lhs_dilation: ``None`` or ``n`` integers, the dilation of ``lhs``.
      rhs_dilation: ``None`` or ``n`` integers, the dilation of the window.
      dimension_numbers: ``None`` or a 3-tuple ``(lhs_spec, rhs_spec, out_spec)``.
      precision: ``None`` or a ``Precision`` value.
      preferred_element_type: ``None`` or the accumulation/result dtype.

    Returns:
      A rank ``n+2`` array containing the flattened patches in the output channel
      dimension.
    """
    lhs = _asarray(lhs)
    aval = get_aval(lhs)
    filter_shape = tuple(int(d) for d in filter_shape)
    dn = conv_dimension_numbers(aval.shape, (1, 1) + filter_shape, dimension_numbers)
    lhs_spec, rhs_spec, _ = dn
    spatial_size = math.prod(filter_shape)
    n_channels = aval.shape[lhs_spec[1]]
    dt = np.dtype(aval.dtype)
    eye = np.eye(spatial_size, dtype=dt)
    rhs = np.broadcast_to(eye, (n_channels, spatial_size, spatial_size))
    rhs = rhs.reshape((n_channels * spatial_size, 1) + filter_shape)
    rhs = np.moveaxis(rhs, (0, 1), (rhs_spec[0], rhs_spec[1]))
    return conv_general_dilated(
        lhs, make_array(np.ascontiguousarray(rhs)), window_strides, padding,
        lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation, dimension_numbers=dn,
        feature_group_count=n_channels,
        precision=None if precision is None else (precision, _default_precision()),
        preferred_element_type=preferred_element_type)


def _default_precision():
    from kiln.lax.dot import Precision
    return Precision.DEFAULT


# -- named axes -------------------------------------------------------------------------------

def axis_size(axis_name: Any) -> int:
    """Return the size of the mapped axis ``axis_name`` (the product of the sizes
    when it is a tuple of names).

    Args:
      axis_name: the name of a mapped axis bound by ``vmap(..., axis_name=...)``, or
        a tuple of such names.

    Returns:
      The (static) size of the named axis, an ``int``.

    Raises:
      NameError: if an axis name is not bound by an enclosing transformation.
    """
    names = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    n = 1
    for a in names:
        n *= batching.axis_size(a)
    return n


__all__ = ["broadcast_shapes", "broadcast_to_rank", "stack", "unstack", "tile", "split",
           "empty", "optimization_barrier", "approx_max_k", "approx_min_k", "mulhi",
           "conv_general_dilated_patches", "axis_size"]
