"""Gather and scatter: XLA's general indexed read and indexed update.

Primitives (names as in JAX's jaxprs): ``gather``, ``scatter``, ``scatter-add``,
``scatter-sub``, ``scatter-mul``, ``scatter-min``, ``scatter-max``, each beside its jvp,
transpose and batching rules; public wrappers ``gather``, ``scatter``, ``scatter_add``,
``scatter_sub``, ``scatter_mul``, ``scatter_min``, ``scatter_max``, ``scatter_apply`` and
``index_take``.

Semantics (XLA's, as JAX uses them; the index vector is always the last axis of the
indices):

* gather: every batch position of ``start_indices`` names the start of a window of
  ``slice_sizes`` in ``operand``; ``collapsed_slice_dims`` (size-1 windows) and
  ``operand_batching_dims`` are dropped from the window, the remaining window axes land at
  ``offset_dims`` of the output and the batch axes fill the other output positions in order.
* scatter: the mirror image; ``update_window_dims`` of ``updates`` are window axes, the other
  ``updates`` axes follow the batch axes of the indices.
* modes: ``CLIP`` clamps starts so the window fits; ``FILL_OR_DROP`` fills (gather) or drops
  (scatter) a window that does not fit entirely; ``PROMISE_IN_BOUNDS`` clamps for gather and
  drops for scatter (what XLA does with out-of-range indices).
* repeated indices: ``scatter`` keeps the last update (deterministically), the combining
  scatters accumulate in order (``ufunc.at``), as XLA does on CPU.

The NumPy impls build one coordinate array per operand axis (broadcast, never looped).
"""
from __future__ import annotations

import enum
import functools
from typing import NamedTuple

import numpy as np

from kiln import dtypes
from kiln.core import trace as _core
from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax._factory import _any, _num, check_dtype, check_same_dtypes, standard_primitive
from kiln.lax.arith import add, div, eq, mul, neg, sub
from kiln.lax.arith import max as _lax_max
from kiln.lax.arith import min as _lax_min
from kiln.lax.slicing import broadcasted_iota, full, full_like
from kiln.lax.structural import broadcast_in_dim, convert_element_type, reshape, select

# ----------------------------------------------------------------------------------------------
# dimension numbers and modes


class GatherDimensionNumbers(NamedTuple):
    """How the axes of ``operand``, ``start_indices`` and the output of a gather relate.

    ``offset_dims``: output axes holding window axes (sorted); ``collapsed_slice_dims``:
    operand axes with window size 1 dropped from the output; ``start_index_map``: the operand
    axis each index-vector entry starts; ``operand_batching_dims`` /
    ``start_indices_batching_dims``: paired batch axes of operand and indices.
    The index vector is always the last axis of ``start_indices``.
    """
    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
    """How the axes of ``operand``, ``scatter_indices`` and ``updates`` of a scatter relate
    (the mirror image of ``GatherDimensionNumbers``)."""
    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()


class GatherScatterMode(enum.Enum):
    """Out-of-bounds handling: ``CLIP`` clamps indices so the whole window is in range;
    ``FILL_OR_DROP`` returns ``fill_value`` for (gather) or discards (scatter) windows that
    are not entirely in range; ``PROMISE_IN_BOUNDS`` promises in-range indices (in practice
    gathers clamp and scatters drop)."""
    CLIP = enum.auto()
    FILL_OR_DROP = enum.auto()
    PROMISE_IN_BOUNDS = enum.auto()
    ONE_HOT = enum.auto()

    @staticmethod
    def from_any(s):
        if isinstance(s, GatherScatterMode):
            return s
        if s == "clip":
            return GatherScatterMode.CLIP
        if s is None or s == "fill" or s == "drop":
            return GatherScatterMode.FILL_OR_DROP
        if s == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        if s == "one_hot":
            return GatherScatterMode.ONE_HOT
        raise ValueError(f'Unknown gather mode "{s}"')


def _ints(xs):
    return tuple(int(x) for x in xs)


def _canon_gather_dnums(dn) -> GatherDimensionNumbers:
    if isinstance(dn, dict):
        dn = GatherDimensionNumbers(**dn)
    if not isinstance(dn, GatherDimensionNumbers):
        raise TypeError("gather dimension_numbers must be a GatherDimensionNumbers, got "
                        f"{type(dn).__name__}")
    return GatherDimensionNumbers(*(_ints(f) for f in dn))


def _canon_scatter_dnums(dn) -> ScatterDimensionNumbers:
    if isinstance(dn, dict):
        dn = ScatterDimensionNumbers(**dn)
    if not isinstance(dn, ScatterDimensionNumbers):
        raise TypeError("scatter dimension_numbers must be a ScatterDimensionNumbers, got "
                        f"{type(dn).__name__}")
    return ScatterDimensionNumbers(*(_ints(f) for f in dn))


def _gather_dnums_of_scatter(dn: ScatterDimensionNumbers) -> GatherDimensionNumbers:
    return GatherDimensionNumbers(
        offset_dims=dn.update_window_dims, collapsed_slice_dims=dn.inserted_window_dims,
        start_index_map=dn.scatter_dims_to_operand_dims,
        operand_batching_dims=dn.operand_batching_dims,
        start_indices_batching_dims=dn.scatter_indices_batching_dims)


def _scatter_dnums_of_gather(dn: GatherDimensionNumbers) -> ScatterDimensionNumbers:
    return ScatterDimensionNumbers(
        update_window_dims=dn.offset_dims, inserted_window_dims=dn.collapsed_slice_dims,
        scatter_dims_to_operand_dims=dn.start_index_map,
        operand_batching_dims=dn.operand_batching_dims,
        scatter_indices_batching_dims=dn.start_indices_batching_dims)


def _scatter_slice_sizes(operand_shape, updates_shape, dn: ScatterDimensionNumbers):
    """The window size along every operand axis (1 for inserted and batching axes)."""
    sizes, pos = [], 0
    for i in range(len(operand_shape)):
        if i in dn.inserted_window_dims or i in dn.operand_batching_dims:
            sizes.append(1)
        else:
            sizes.append(int(updates_shape[dn.update_window_dims[pos]]))
            pos += 1
    return tuple(sizes)


def _default_fill_value(dtype):
    dtype = np.dtype(dtype)
    if dtypes.issubdtype(dtype, np.inexact):
        return np.nan
    if dtypes.issubdtype(dtype, np.signedinteger):
        return int(dtypes.iinfo(dtype).min)
    if dtypes.issubdtype(dtype, np.unsignedinteger):
        return int(dtypes.iinfo(dtype).max)
    if dtype == np.bool_:
        return True
    raise ValueError(f"Unsupported dtype for gather fill_value {dtype}")


# ----------------------------------------------------------------------------------------------
# NumPy index arithmetic shared by the impls


def _window_coords(operand_shape, indices, sizes, window_axes, collapsed, start_map,
                   op_bdims, idx_bdims, out_rank, want_mask):
    """Coordinates into the operand for every element of a gather output (or of scatter
    updates): one integer array per operand axis, broadcastable to the output shape.

    Starts are clamped so the window fits; with ``want_mask`` also returns the in-bounds
    mask of the unclamped starts (shaped to broadcast against the output), else None.
    """
    idx = np.asarray(indices)
    bshape = idx.shape[:-1]
    wset = set(window_axes)
    batch_axes = [a for a in range(out_rank) if a not in wset]

    def at_batch(a):
        shp = [1] * out_rank
        for k, ax in enumerate(batch_axes):
            shp[ax] = bshape[k]
        return a.reshape(shp)

    def along(n, ax):
        shp = [1] * out_rank
        shp[ax] = n
        return np.arange(n, dtype=np.intp).reshape(shp)

    win_dims = [d for d in range(len(operand_shape)) if d not in collapsed and d not in op_bdims]
    mask = None
    coords = []
    for d, n in enumerate(operand_shape):
        c = np.zeros((1,) * out_rank, np.intp)
        if d in start_map:
            s = idx[..., start_map.index(d)]
            if s.dtype == np.uint64:
                s = np.minimum(s, np.uint64(np.iinfo(np.int64).max))
            s = s.astype(np.int64)
            hi = n - sizes[d]
            if want_mask:
                ok = (s >= 0) & (s <= hi)
                mask = ok if mask is None else mask & ok
            c = at_batch(np.minimum(np.maximum(s, 0), max(hi, 0)).astype(np.intp, copy=False))
        elif d in op_bdims:
            c = along(n, batch_axes[idx_bdims[op_bdims.index(d)]])
        if d in win_dims:
            c = c + along(sizes[d], window_axes[win_dims.index(d)])
        coords.append(c)
    if mask is not None:
        mask = at_batch(mask)
    elif want_mask:
        mask = np.ones((1,) * out_rank, bool)
    return coords, mask


def _fill_scalar(fill_value, dtype):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(fill_value).astype(dtype)


# ----------------------------------------------------------------------------------------------
# shape rules (JAX's checks and messages)


def _is_sorted(dims, op, name):
    if any(dims[i] < dims[i - 1] for i in range(1, len(dims))):
        raise TypeError(f"{name} in {op} op must be sorted; got {dims}")


def _dims_in_range(dims, rank, op, name):
    for d in dims:
        if d < 0 or d >= rank:
            raise TypeError(f"Invalid {name} set in {op} op; valid range is [0, {rank}); "
                            f"got: {d}.")


def _sorted_dims_in_range(dims, rank, op, name):
    if not dims:
        return
    bad = dims[0] if dims[0] < 0 else (dims[-1] if dims[-1] >= rank else None)
    if bad is not None:
        raise TypeError(f"Invalid {name} set in {op} op; valid range is [0, {rank}); "
                        f"got: {bad}.")


def _no_duplicate_dims(dims, op, name):
    if len(set(dims)) != len(dims):
        raise TypeError(f"{name} in {op} op must not repeat; got: {dims}.")


def _disjoint_dims(a, b, op, na, nb):
    if not set(a).isdisjoint(b):
        raise TypeError(f"{na} and {nb} in {op} op must be disjoint; got: {a} and {b}.")


def _check_index_dtype(indices):
    if not dtypes.issubdtype(indices.dtype, np.integer):
        raise ValueError("indices must have an integer type")


def _gather_shape(indices_shape, dn, slice_sizes):
    out_rank = len(dn.offset_dims) + len(indices_shape) - 1
    batch = iter(indices_shape[:-1])
    win = iter(s for i, s in enumerate(slice_sizes)
               if i not in dn.collapsed_slice_dims and i not in dn.operand_batching_dims)
    return tuple(next(win) if i in dn.offset_dims else next(batch) for i in range(out_rank))


def _gather_abstract_eval(operand, indices, *, dimension_numbers, slice_sizes, unique_indices,
                          indices_are_sorted, mode, fill_value):
    _check_index_dtype(indices)
    dn = dimension_numbers
    rank = operand.ndim
    ivd = indices.ndim - 1
    if ivd < 0:
        raise TypeError("Gather index leaf dimension must be within [0, rank(indices) + 1). "
                        f"rank(indices) is {indices.ndim} and gather index leaf dimension is "
                        f"{ivd}.")
    _is_sorted(dn.offset_dims, "gather", "offset_dims")
    _no_duplicate_dims(dn.offset_dims, "gather", "offset_dims")
    out_rank = len(dn.offset_dims) + indices.ndim - 1
    for i, d in enumerate(dn.offset_dims):
        if d < 0 or d >= out_rank:
            raise TypeError(f"Offset dimension {i} in gather op is out of bounds; got {d}, "
                            f"but should have been in [0, {out_rank})")
    if len(dn.start_index_map) != indices.shape[ivd]:
        raise TypeError(f"Gather op has {len(dn.start_index_map)} elements in start_index_map "
                        f"and the bound of dimension index_vector_dim={ivd} of indices is "
                        f"{indices.shape[ivd]}. These two numbers must be equal.")
    for i, d in enumerate(dn.start_index_map):
        if d < 0 or d >= rank:
            raise TypeError(f"Invalid start_index_map; domain is [0, {rank}), got: {i}->{d}.")
    _no_duplicate_dims(dn.start_index_map, "gather", "start_index_map")
    _is_sorted(dn.collapsed_slice_dims, "gather", "collapsed_slice_dims")
    _sorted_dims_in_range(dn.collapsed_slice_dims, rank, "gather", "collapsed_slice_dims")
    _no_duplicate_dims(dn.collapsed_slice_dims, "gather", "collapsed_slice_dims")
    _no_duplicate_dims(dn.operand_batching_dims, "gather", "operand_batching_dims")
    _is_sorted(dn.operand_batching_dims, "gather", "operand_batching_dims")
    _sorted_dims_in_range(dn.operand_batching_dims, rank, "gather", "operand_batching_dims")
    _disjoint_dims(dn.collapsed_slice_dims, dn.operand_batching_dims, "gather",
                   "collapsed_slice_dims", "operand_batching_dims")
    _disjoint_dims(dn.start_index_map, dn.operand_batching_dims, "gather",
                   "start_index_map", "operand_batching_dims")
    _no_duplicate_dims(dn.start_indices_batching_dims, "gather", "start_indices_batching_dims")
    _dims_in_range(dn.start_indices_batching_dims, indices.ndim, "gather",
                   "start_indices_batching_dims")
    if ivd in dn.start_indices_batching_dims:
        raise TypeError("Gather op cannot have the index vector dimension as a batching "
                        f"dimension; got {dn.start_indices_batching_dims}.")
    if len(dn.operand_batching_dims) != len(dn.start_indices_batching_dims):
        raise TypeError("Gather op requires equal numbers of operand_batching_dims and "
                        f"start_indices_batching_dims, got {dn.operand_batching_dims} and"
                        f"{dn.start_indices_batching_dims}.")
    ob = tuple(operand.shape[i] for i in dn.operand_batching_dims)
    ib = tuple(indices.shape[i] for i in dn.start_indices_batching_dims)
    if ob != ib:
        raise TypeError("Gather op requires operand batching dimensions and indices batching "
                        f"dimensions to have the same shape, got {ob} and {ib}.")
    if rank != len(slice_sizes):
        raise TypeError("Gather op must have one slice size for every input dimension; got: "
                        f"len(slice_sizes)={len(slice_sizes)}, input_shape.rank={rank}")
    if len(slice_sizes) != len(dn.offset_dims) + len(dn.collapsed_slice_dims) + \
            len(dn.operand_batching_dims):
        raise TypeError("All components of the offset index in a gather op must either be a "
                        f"offset dimension or explicitly collapsed/batching; got "
                        f"len(slice_sizes)={len(slice_sizes)}, output_slice_sizes="
                        f"{dn.offset_dims}, collapsed_slice_dims={dn.collapsed_slice_dims}, "
                        f"operand_batching_dims={dn.operand_batching_dims}.")
    if indices.size:
        for i, (s, n) in enumerate(zip(slice_sizes, operand.shape)):
            if not 0 <= s <= n:
                raise TypeError(f"Slice size at index {i} in gather op is out of range, must "
                                f"be within [0, {n} + 1), got {s}.")
    for i, d in enumerate(dn.collapsed_slice_dims):
        if slice_sizes[d] != 1:
            raise TypeError("Gather op can only collapse slice dims with bound 1, but bound is "
                            f"{slice_sizes[d]} for index {d} at position {i}.")
    for i, d in enumerate(dn.operand_batching_dims):
        if slice_sizes[d] > 1:
            raise TypeError("Gather op can only have operand batching dims with bound 0/1, but "
                            f"bound is {slice_sizes[d]} for index {d} at position {i}.")
    shape = _gather_shape(indices.shape, dn, slice_sizes)
    return ShapedArray(shape, operand.dtype, operand.weak_type)


def _scatter_abstract_eval_for(name, kinds):
    def abstract_eval(operand, indices, updates, *, update_jaxpr, update_consts,
                      dimension_numbers, indices_are_sorted, unique_indices, mode):
        _check_index_dtype(indices)
        check_same_dtypes("scatter", (operand, updates))
        if kinds is not None:
            check_dtype(name, operand.dtype, kinds)
        _scatter_shape_check(operand, indices, updates, dimension_numbers)
        return ShapedArray(operand.shape, operand.dtype, operand.weak_type)
    return abstract_eval


def _scatter_shape_check(operand, indices, updates, dn: ScatterDimensionNumbers):
    rank = operand.ndim
    ivd = indices.ndim - 1
    if ivd < 0:
        raise TypeError("Scatter index leaf dimension must be within [0, rank(indices) + 1). "
                        f"rank(indices) is {indices.ndim} and scatter index leaf dimension is "
                        f"{ivd}.")
    expected = indices.ndim - 1 + len(dn.update_window_dims)
    if updates.ndim != expected:
        raise TypeError(f"Updates tensor must be of rank {expected}; got {updates.ndim}.")
    _is_sorted(dn.update_window_dims, "scatter", "update_window_dims")
    _no_duplicate_dims(dn.update_window_dims, "scatter", "update_window_dims")
    _sorted_dims_in_range(dn.update_window_dims, updates.ndim, "scatter", "update_window_dims")
    _is_sorted(dn.inserted_window_dims, "scatter", "inserted_window_dims")
    _no_duplicate_dims(dn.inserted_window_dims, "scatter", "inserted_window_dims")
    _sorted_dims_in_range(dn.inserted_window_dims, rank, "scatter", "inserted_window_dims")
    _is_sorted(dn.operand_batching_dims, "scatter", "operand_batching_dims")
    _no_duplicate_dims(dn.operand_batching_dims, "scatter", "operand_batching_dims")
    _sorted_dims_in_range(dn.operand_batching_dims, rank, "scatter", "operand_batching_dims")
    _disjoint_dims(dn.inserted_window_dims, dn.operand_batching_dims, "scatter",
                   "inserted_window_dims", "operand_batching_dims")
    _disjoint_dims(dn.scatter_dims_to_operand_dims, dn.operand_batching_dims, "scatter",
                   "scatter_dims_to_operand_dims", "operand_batching_dims")
    _no_duplicate_dims(dn.scatter_indices_batching_dims, "scatter",
                       "scatter_indices_batching_dims")
    _dims_in_range(dn.scatter_indices_batching_dims, indices.ndim, "scatter",
                   "scatter_indices_batching_dims")
    if ivd in dn.scatter_indices_batching_dims:
        raise TypeError("Scatter op cannot have the index vector dimension as a batching "
                        f"dimension; got {dn.scatter_indices_batching_dims}.")
    if len(dn.operand_batching_dims) != len(dn.scatter_indices_batching_dims):
        raise TypeError("Scatter op requires equal numbers of operand_batching_dims and "
                        f"scatter_indices_batching_dims, got {dn.operand_batching_dims} and "
                        f"{dn.scatter_indices_batching_dims}.")
    ob = tuple(operand.shape[i] for i in dn.operand_batching_dims)
    ib = tuple(indices.shape[i] for i in dn.scatter_indices_batching_dims)
    if ob != ib:
        raise TypeError("Scatter op requires operand batching dimensions and indices batching "
                        f"dimensions to have the same shape, got {ob} and {ib}.")
    # The updates axis of every indices batch axis.
    scatter_axes = list(range(ivd))
    for w in dn.update_window_dims:
        scatter_axes.insert(w, None)
    ub = tuple(updates.shape[scatter_axes.index(i)] for i in dn.scatter_indices_batching_dims)
    if ob != ub:
        raise TypeError("Scatter op requires operand batching dimensions and updates batching "
                        f"dimensions to have the same shape, got {ob} and {ub}.")
    window = len(dn.update_window_dims) + len(dn.inserted_window_dims) + \
        len(dn.operand_batching_dims)
    if rank != window:
        raise TypeError(f"Scatter op has window of size {window}; doesn't match operand of "
                        f"rank {rank}.")
    if len(dn.scatter_dims_to_operand_dims) != indices.shape[ivd]:
        raise TypeError(f"Scatter op has {len(dn.scatter_dims_to_operand_dims)} elements in "
                        f"scatter_dims_to_operand_dims and the bound of dimension "
                        f"index_vector_dim={ivd} of indices is {indices.shape[ivd]}. These two "
                        "numbers must be equal")
    for i, d in enumerate(dn.scatter_dims_to_operand_dims):
        if d < 0 or d >= rank:
            raise TypeError("Invalid scatter_dims_to_operand_dims mapping; domain is "
                            f"[0, {rank}), got: {i}->{d}.")
    _no_duplicate_dims(dn.scatter_dims_to_operand_dims, "scatter",
                       "scatter_dims_to_operand_dims")
    max_sizes = [operand.shape[i] for i in range(rank)
                 if i not in dn.inserted_window_dims and i not in dn.operand_batching_dims]
    for i, w in enumerate(dn.update_window_dims):
        if max_sizes[i] < updates.shape[w]:
            raise TypeError("Bounds of the window dimensions of updates must not exceed the "
                            "bounds of the corresponding dimensions of operand. For dimension "
                            f"{w}, updates bound is {updates.shape[w]}, operand bound is "
                            f"{max_sizes[i]}.")
    seen = 0
    for i in range(updates.ndim):
        if i in dn.update_window_dims:
            continue
        if updates.shape[i] != indices.shape[seen]:
            raise TypeError("Bounds of the scatter dimensions of updates must be the same as "
                            "the bounds of the corresponding dimensions of scatter indices. "
                            f"For scatter dimension {i}, updates bound is {updates.shape[i]}, "
                            f"indices bound is {indices.shape[seen]}.")
        seen += 1


# ----------------------------------------------------------------------------------------------
# gather


def _gather_impl(operand, indices, *, dimension_numbers, slice_sizes, unique_indices,
                 indices_are_sorted, mode, fill_value):
    dn = dimension_numbers
    operand = np.asarray(operand)
    out_shape = _gather_shape(np.shape(indices), dn, slice_sizes)
    if 0 in out_shape:
        return np.zeros(out_shape, operand.dtype)
    fill = mode == GatherScatterMode.FILL_OR_DROP
    coords, mask = _window_coords(operand.shape, indices, slice_sizes, dn.offset_dims,
                                  dn.collapsed_slice_dims, dn.start_index_map,
                                  dn.operand_batching_dims, dn.start_indices_batching_dims,
                                  len(out_shape), fill)
    out = operand[tuple(coords)] if coords else operand
    out = np.broadcast_to(out, out_shape)
    if fill and not mask.all():
        fv = _default_fill_value(operand.dtype) if fill_value is None else fill_value
        out = np.where(mask, out, _fill_scalar(fv, operand.dtype))
    return out


gather_p = standard_primitive("gather", _gather_abstract_eval, _gather_impl,
                              weak_type_rule=lambda w, wi, **_: w)


def _jvp_fill(mode):
    return 0 if mode == GatherScatterMode.FILL_OR_DROP else None


def _gather_jvp(primals, tangents, *, dimension_numbers, slice_sizes, unique_indices,
                indices_are_sorted, mode, fill_value):
    operand, indices = primals
    params = dict(dimension_numbers=dimension_numbers, slice_sizes=slice_sizes,
                  unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                  mode=mode)
    out = gather_p.bind(operand, indices, fill_value=fill_value, **params)
    t = tangents[0]
    if type(t) is Zero:
        return out, Zero.from_primal_value(out)
    return out, gather_p.bind(t, indices, fill_value=_jvp_fill(mode), **params)


def _gather_transpose(ct, operand, indices, *, dimension_numbers, slice_sizes, unique_indices,
                      indices_are_sorted, mode, fill_value):
    if is_undefined_primal(indices):
        raise ValueError("gather indices cannot be linear")
    if type(ct) is Zero:
        return [Zero(operand.aval), None]
    aval = operand.aval
    zeros = full(aval.shape, 0, get_aval(ct).dtype)
    out = scatter_add(zeros, indices, ct, _scatter_dnums_of_gather(dimension_numbers),
                      indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                      mode=mode)
    return [out, None]


def _shift(dims, k=1):
    return tuple(d + k for d in dims)


def _gather_batch(axis_data, vals, dims, *, dimension_numbers, slice_sizes, unique_indices,
                  indices_are_sorted, mode, fill_value):
    operand, indices = vals
    od, id_ = dims
    dn = dimension_numbers
    if id_ is None:
        operand = batching.moveaxis(operand, od, 0)
        size = get_aval(operand).shape[0]
        new = GatherDimensionNumbers(
            offset_dims=(0,) + _shift(dn.offset_dims),
            collapsed_slice_dims=_shift(dn.collapsed_slice_dims),
            start_index_map=_shift(dn.start_index_map),
            operand_batching_dims=_shift(dn.operand_batching_dims),
            start_indices_batching_dims=dn.start_indices_batching_dims)
        return gather_p.bind(operand, indices, dimension_numbers=new,
                             slice_sizes=(size,) + tuple(slice_sizes),
                             unique_indices=unique_indices,
                             indices_are_sorted=indices_are_sorted, mode=mode,
                             fill_value=fill_value), 0
    if od is None:
        indices = batching.moveaxis(indices, id_, 0)
        new = GatherDimensionNumbers(
            offset_dims=_shift(dn.offset_dims),
            collapsed_slice_dims=dn.collapsed_slice_dims,
            start_index_map=dn.start_index_map,
            operand_batching_dims=dn.operand_batching_dims,
            start_indices_batching_dims=_shift(dn.start_indices_batching_dims))
        # Batched lookups into one array may repeat or reorder indices.
        return gather_p.bind(operand, indices, dimension_numbers=new, slice_sizes=slice_sizes,
                             unique_indices=False, indices_are_sorted=False, mode=mode,
                             fill_value=fill_value), 0
    operand = batching.moveaxis(operand, od, 0)
    indices = batching.moveaxis(indices, id_, 0)
    size = get_aval(operand).shape[0]
    new = GatherDimensionNumbers(
        offset_dims=_shift(dn.offset_dims),
        collapsed_slice_dims=_shift(dn.collapsed_slice_dims),
        start_index_map=_shift(dn.start_index_map),
        operand_batching_dims=(0,) + _shift(dn.operand_batching_dims),
        start_indices_batching_dims=(0,) + _shift(dn.start_indices_batching_dims))
    return gather_p.bind(operand, indices, dimension_numbers=new,
                         slice_sizes=(0 if size == 0 else 1,) + tuple(slice_sizes),
                         unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                         mode=mode, fill_value=fill_value), 0


ad.jvp_rules[gather_p] = _gather_jvp
ad.transpose_rules[gather_p] = _gather_transpose
batching.batch_rules[gather_p] = _gather_batch


def _as_operand(x):
    if isinstance(x, Tracer) or hasattr(x, "_value") or type(x) in _core.extended_types:
        return x
    from kiln.array import to_array
    return to_array(x)


def _hashable_fill(v):
    if v is None:
        return None
    if type(v) in _core.extended_types:
        raise TypeError(f"unhashable type: '{type(v).__name__}'")
    if isinstance(v, Tracer):
        from kiln.errors import ConcretizationTypeError
        raise ConcretizationTypeError(v, "fill_value argument to gather")
    if hasattr(v, "_value"):
        v = v._value
    a = np.asarray(v)
    if a.ndim != 0:
        raise ValueError("fill_value must be a scalar")
    return a.item()


def gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
           indices_are_sorted=False, mode=None, fill_value=None):
    """XLA's Gather: windows of ``slice_sizes`` from ``operand`` starting at the index vectors
    in the last axis of ``start_indices`` (see ``GatherDimensionNumbers``).

    ``mode``: ``'clip'`` clamps the starts so windows fit, ``'fill'`` (``'drop'``) returns
    ``fill_value`` for windows not entirely in range (default NaN for inexact dtypes, the
    minimum for signed, the maximum for unsigned integers, True for booleans),
    ``'promise_in_bounds'`` (the default) clamps.
    """
    parsed = GatherScatterMode.from_any(
        GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else mode)
    if parsed == GatherScatterMode.ONE_HOT:
        raise NotImplementedError("gather mode 'one_hot' is not supported by kiln")
    operand = _as_operand(operand)
    if parsed == GatherScatterMode.FILL_OR_DROP:
        dt = get_aval(operand).dtype
        if isinstance(dt, dtypes.ExtendedDType):     # typed keys: their data's fill
            dt = dt._rules.physical_element_aval(dt).dtype
        fill_value = (_default_fill_value(dt) if fill_value is None
                      else _hashable_fill(fill_value))
    else:
        fill_value = None
    return gather_p.bind(operand, start_indices,
                         dimension_numbers=_canon_gather_dnums(dimension_numbers),
                         slice_sizes=_ints(slice_sizes), unique_indices=bool(unique_indices),
                         indices_are_sorted=bool(indices_are_sorted), mode=parsed,
                         fill_value=fill_value)


def index_take(src, idxs, axes):
    """``src`` indexed by the integer arrays ``idxs`` along ``axes`` (taken modulo the axis
    sizes, Python-style); the indexed axes become one leading axis."""
    from kiln.array import make_array
    from kiln.lax.arith import lt
    from kiln.lax.elementwise import rem
    from kiln.lax.slicing import concatenate
    axes = _ints(axes)
    cols = [reshape(i, get_aval(i).shape + (1,)) for i in idxs]
    indices = concatenate(cols, 1) if len(cols) > 1 else cols[0]
    ia = get_aval(indices)
    shape = get_aval(src).shape
    sizes = broadcast_in_dim(make_array(np.asarray([shape[a] for a in axes], ia.dtype)),
                             ia.shape, (ia.ndim - 1,))
    r = rem(indices, sizes)
    indices = select(lt(r, full_like(r, 0)), add(r, sizes), r)
    slice_sizes = list(shape)
    for a in axes:
        slice_sizes[a] = 1
    offset = tuple(range(1, len(shape) - ia.shape[1] + 1))
    return gather(src, indices, GatherDimensionNumbers(offset, axes, axes), tuple(slice_sizes))


# ----------------------------------------------------------------------------------------------
# scatter family


def _last_wins(flat):
    """Positions of the last occurrence of every distinct value of ``flat``."""
    rev = flat[::-1]
    _, first = np.unique(rev, return_index=True)
    return len(flat) - 1 - first


_UFUNCS = {"scatter-add": np.add, "scatter-sub": np.subtract, "scatter-mul": np.multiply,
           "scatter-min": np.minimum, "scatter-max": np.maximum}


def _scatter_impl_for(name):
    def impl(operand, indices, updates, *, update_jaxpr, update_consts, dimension_numbers,
             indices_are_sorted, unique_indices, mode):
        dn = dimension_numbers
        out = np.array(operand, copy=True, order="C")
        updates = np.asarray(updates)
        if updates.size == 0 or out.size == 0:
            return out
        sizes = _scatter_slice_sizes(out.shape, updates.shape, dn)
        clip = mode == GatherScatterMode.CLIP
        coords, mask = _window_coords(out.shape, indices, sizes, dn.update_window_dims,
                                      dn.inserted_window_dims, dn.scatter_dims_to_operand_dims,
                                      dn.operand_batching_dims, dn.scatter_indices_batching_dims,
                                      updates.ndim, not clip)
        flat_out = out.reshape(-1)
        flat = np.zeros((1,) * updates.ndim, np.intp)
        stride = 1
        for c, n in zip(reversed(coords), reversed(out.shape)):
            flat = flat + c * stride
            stride *= n
        flat = np.broadcast_to(flat, updates.shape)
        vals = updates
        if mask is not None and not mask.all():
            m = np.broadcast_to(mask, updates.shape)
            flat, vals = flat[m], updates[m]
        flat, vals = flat.reshape(-1), vals.reshape(-1)
        if name == "scatter":
            keep = _last_wins(flat)
            flat_out[flat[keep]] = vals[keep]
        elif out.dtype.kind in "fc":
            with np.errstate(all="ignore"):
                _UFUNCS[name].at(flat_out, flat, vals)
        else:
            _UFUNCS[name].at(flat_out, flat, vals)
        return out
    return impl


def _make_scatter(name, kinds):
    prim = standard_primitive(name, _scatter_abstract_eval_for(name, kinds),
                              _scatter_impl_for(name),
                              weak_type_rule=lambda w, wi, wu, **_: w)
    batching.batch_rules[prim] = _scatter_batch_for(prim)
    return prim


def _scatter_batch_for(prim):
    def rule(axis_data, vals, dims, *, update_jaxpr, update_consts, dimension_numbers,
             indices_are_sorted, unique_indices, mode):
        operand, indices, updates = vals
        od, id_, ud = dims
        size = axis_data.size
        dn = dimension_numbers
        operand = batching.bdim_at_front(operand, od, size)
        updates = batching.bdim_at_front(updates, ud, size)
        if id_ is None:
            new = ScatterDimensionNumbers(
                update_window_dims=(0,) + _shift(dn.update_window_dims),
                inserted_window_dims=_shift(dn.inserted_window_dims),
                scatter_dims_to_operand_dims=_shift(dn.scatter_dims_to_operand_dims),
                operand_batching_dims=_shift(dn.operand_batching_dims),
                scatter_indices_batching_dims=dn.scatter_indices_batching_dims)
        else:
            indices = batching.bdim_at_front(indices, id_, size)
            new = ScatterDimensionNumbers(
                update_window_dims=_shift(dn.update_window_dims),
                inserted_window_dims=_shift(dn.inserted_window_dims),
                scatter_dims_to_operand_dims=_shift(dn.scatter_dims_to_operand_dims),
                operand_batching_dims=(0,) + _shift(dn.operand_batching_dims),
                scatter_indices_batching_dims=(0,) + _shift(dn.scatter_indices_batching_dims))
        return prim.bind(operand, indices, updates, update_jaxpr=update_jaxpr,
                         update_consts=update_consts, dimension_numbers=new,
                         indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                         mode=mode), 0
    return rule


scatter_p = _make_scatter("scatter", None)
scatter_add_p = _make_scatter("scatter-add", _num)
scatter_sub_p = _make_scatter("scatter-sub", _num)
scatter_mul_p = _make_scatter("scatter-mul", _num)
scatter_min_p = _make_scatter("scatter-min", _any)
scatter_max_p = _make_scatter("scatter-max", _any)


def _scatter_params(p):
    return dict(update_jaxpr=p["update_jaxpr"], update_consts=p["update_consts"],
                dimension_numbers=p["dimension_numbers"],
                indices_are_sorted=p["indices_are_sorted"],
                unique_indices=p["unique_indices"], mode=p["mode"])


def _inverse_gather(x, indices, updates_shape, dn, mode=None, fill_value=None):
    """The gather reading, for every update element, the operand element it lands on."""
    sizes = _scatter_slice_sizes(get_aval(x).shape, updates_shape, dn)
    return gather(x, indices, _gather_dnums_of_scatter(dn), sizes, mode=mode,
                  fill_value=fill_value)


# -- scatter-add / scatter-sub: linear in (operand, updates) --------------------------------------


def _scatter_addsub_jvp_for(prim):
    def rule(primals, tangents, **params):
        operand, indices, updates = primals
        out = prim.bind(operand, indices, updates, **params)
        t_op, _, t_up = tangents
        if type(t_op) is Zero and type(t_up) is Zero:
            return out, Zero.from_primal_value(out)
        t_op, t_up = ad.instantiate_zeros(t_op), ad.instantiate_zeros(t_up)
        return out, prim.bind(t_op, indices, t_up, **params)
    return rule


def _scatter_addsub_transpose_for(prim):
    def rule(ct, operand, indices, updates, **params):
        if is_undefined_primal(indices):
            raise ValueError("scatter indices cannot be linear")
        lin_op, lin_up = is_undefined_primal(operand), is_undefined_primal(updates)
        u_shape = updates.aval.shape if lin_up else get_aval(updates).shape
        if type(ct) is Zero:
            return [Zero(operand.aval) if lin_op else None, None,
                    Zero(updates.aval) if lin_up else None]
        t_op = ct if lin_op else None
        t_up = None
        if lin_up:
            t_up = _inverse_gather(ct, indices, u_shape, params["dimension_numbers"],
                                   mode=params["mode"], fill_value=0)
            if prim is scatter_sub_p:
                t_up = neg(t_up)
        return [t_op, None, t_up]
    return rule


for _p in (scatter_add_p, scatter_sub_p):
    ad.jvp_rules[_p] = _scatter_addsub_jvp_for(_p)
    ad.transpose_rules[_p] = _scatter_addsub_transpose_for(_p)


# -- scatter-mul --------------------------------------------------------------------------------


def _indices_known_unique(indices, operand_shape, updates_shape, dn, mode):
    """True when ``indices`` is concrete and no two (kept) update windows overlap: every
    indexed operand axis has window size 1 and the effective start vectors are distinct."""
    if isinstance(indices, Tracer):
        return False
    idx = np.asarray(indices._value if hasattr(indices, "_value") else indices)
    sizes = _scatter_slice_sizes(operand_shape, updates_shape, dn)
    sim = dn.scatter_dims_to_operand_dims
    if any(sizes[d] != 1 for d in sim):
        return False
    rows = idx.reshape(-1, idx.shape[-1]).astype(np.int64)
    hi = np.asarray([operand_shape[d] - 1 for d in sim], np.int64)
    if mode == GatherScatterMode.CLIP:
        rows = np.clip(rows, 0, hi)
        keep = np.ones(len(rows), bool)
    else:
        keep = np.all((rows >= 0) & (rows <= hi), axis=1)
    if dn.scatter_indices_batching_dims:
        grids = np.indices(idx.shape[:-1]).reshape(idx.ndim - 1, -1).T
        rows = np.concatenate([rows, grids[:, list(dn.scatter_indices_batching_dims)]], 1)
    rows = rows[keep]
    return len(np.unique(rows, axis=0)) == len(rows)


def _scatter_mul_jvp(primals, tangents, **params):
    operand, indices, updates = primals
    out = scatter_mul_p.bind(operand, indices, updates, **params)
    t_op, _, t_up = tangents
    if type(t_op) is Zero and type(t_up) is Zero:
        return out, Zero.from_primal_value(out)
    dn = params["dimension_numbers"]
    result = None
    if type(t_op) is not Zero:
        result = scatter_mul_p.bind(t_op, indices, updates, **params)
    if type(t_up) is not Zero:
        u_shape = get_aval(updates).shape
        if not (params["unique_indices"] or _indices_known_unique(
                indices, get_aval(operand).shape, u_shape, dn, params["mode"])):
            raise NotImplementedError(
                "scatter_mul gradients are only implemented if `unique_indices=True`")
        zeros = full_like(operand, 0)
        contrib = mul(operand, scatter_add_p.bind(zeros, indices, t_up, **params))
        result = contrib if result is None else ad.add_tangents(result, contrib)
    return out, result


def _scatter_mul_transpose(ct, operand, indices, updates, **params):
    if is_undefined_primal(indices):
        raise ValueError("scatter indices cannot be linear")
    lin_op, lin_up = is_undefined_primal(operand), is_undefined_primal(updates)
    if type(ct) is Zero:
        return [Zero(operand.aval) if lin_op else None, None,
                Zero(updates.aval) if lin_up else None]
    if lin_op and lin_up:
        raise ValueError("scatter_mul is not linear in both operand and updates")
    t_op = t_up = None
    if lin_op:
        t_op = scatter_mul_p.bind(ct, indices, updates, **params)
    if lin_up:
        if not params["unique_indices"]:
            raise NotImplementedError(
                "scatter_mul gradients are only implemented if `unique_indices=True`")
        t_up = _inverse_gather(mul(ct, operand), indices, updates.aval.shape,
                               params["dimension_numbers"], mode=params["mode"], fill_value=0)
    return [t_op, None, t_up]


ad.jvp_rules[scatter_mul_p] = _scatter_mul_jvp
ad.transpose_rules[scatter_mul_p] = _scatter_mul_transpose


# -- scatter-min / scatter-max: ties share the tangent equally -----------------------------------


def _scatter_extremal_jvp_for(prim):
    def rule(primals, tangents, **params):
        operand, indices, updates = primals
        out = prim.bind(operand, indices, updates, **params)
        t_op, _, t_up = tangents
        if type(t_op) is Zero and type(t_up) is Zero:
            return out, Zero.from_primal_value(out)
        t_op, t_up = ad.instantiate_zeros(t_op), ad.instantiate_zeros(t_up)
        dn = params["dimension_numbers"]
        mode = params["mode"]
        u_shape = get_aval(updates).shape

        def inv(x):
            return _inverse_gather(x, indices, u_shape, dn, mode=gmode)

        # Counts and gathers see the indices as the scatter does (clamped for CLIP).
        gmode = mode if mode == GatherScatterMode.CLIP else None
        kw = dict(indices_are_sorted=params["indices_are_sorted"],
                  unique_indices=params["unique_indices"], mode=mode)
        zeros_u, ones_u = full_like(updates, 0), full_like(updates, 1)
        zeros_o = full_like(operand, 0)
        initial, target = inv(operand), inv(out)
        won = eq(updates, target)                   # this update is the result
        kept = eq(initial, target)                  # the operand value is (also) the result
        n_won = inv(scatter_add(zeros_o, indices, select(won, ones_u, zeros_u), dn, **kw))
        n_refs = inv(scatter_add(zeros_o, indices, ones_u, dn, **kw))
        one = full_like(n_won, 1)
        share_kept = div(one, add(n_won, one))
        upd_norm = select(kept, share_kept, div(one, _lax_max(n_won, one)))
        upd_coef = select(won, upd_norm, zeros_u)
        op_norm = select(kept, share_kept, zeros_u)
        op_coef = div(sub(op_norm, one), _lax_max(n_refs, one))
        t_updates = add(mul(inv(t_op), op_coef), mul(t_up, upd_coef))
        tangent = scatter_add(t_op, indices, t_updates, dn, **kw)
        return out, tangent
    return rule


ad.jvp_rules[scatter_min_p] = _scatter_extremal_jvp_for(scatter_min_p)
ad.jvp_rules[scatter_max_p] = _scatter_extremal_jvp_for(scatter_max_p)


# -- scatter (overwrite) --------------------------------------------------------------------------


def _scatter_jvp(primals, tangents, **params):
    operand, indices, updates = primals
    t_op, _, t_up = tangents
    if type(t_op) is Zero and type(t_up) is Zero:
        out = scatter_p.bind(operand, indices, updates, **params)
        return out, Zero.from_primal_value(out)
    t_op, t_up = ad.instantiate_zeros(t_op), ad.instantiate_zeros(t_up)
    if params["unique_indices"]:
        return (scatter_p.bind(operand, indices, updates, **params),
                scatter_p.bind(t_op, indices, t_up, **params))
    # Which update wins is decided by scattering ids; the primal and tangent outputs are
    # then scatter-adds of masked values (so no scatter transpose is needed).
    dn = params["dimension_numbers"]
    mode = params["mode"]
    u_shape = get_aval(updates).shape
    ids_shape = list(u_shape)
    for w in dn.update_window_dims:
        ids_shape[w] = 1
    n_ids = int(np.prod(ids_shape, dtype=np.int64))
    id_dt = np.dtype(np.int32) if n_ids < 2 ** 31 - 1 else np.dtype(np.int64)
    from kiln.array import make_array
    ids = make_array(np.arange(1, n_ids + 1, dtype=id_dt).reshape(ids_shape))
    ids = broadcast_in_dim(ids, u_shape, tuple(range(len(u_shape)))) if tuple(ids_shape) != \
        tuple(u_shape) else ids
    o_shape = get_aval(operand).shape
    scattered = scatter(full(o_shape, 0, id_dt), indices, ids, dn,
                        indices_are_sorted=params["indices_are_sorted"], mode=mode)
    gathered = _inverse_gather(scattered, indices, u_shape, dn)
    untouched = eq(scattered, full(o_shape, 0, id_dt))
    winner = eq(ids, gathered)

    def masked(x, m):
        return select(m, x, full_like(x, 0))

    kw = dict(indices_are_sorted=params["indices_are_sorted"],
              unique_indices=params["unique_indices"], mode=mode)
    out = scatter_p.bind(operand, indices, updates, **params)
    tangent = scatter_add(masked(t_op, untouched), indices, masked(t_up, winner), dn, **kw)
    return out, tangent


def _scatter_transpose(ct, operand, indices, updates, **params):
    if not params["unique_indices"]:
        raise NotImplementedError("scatter transpose is only implemented where "
                                  "unique_indices=True")
    if is_undefined_primal(indices):
        raise ValueError("scatter indices cannot be linear")
    lin_op, lin_up = is_undefined_primal(operand), is_undefined_primal(updates)
    u_aval = updates.aval if lin_up else get_aval(updates)
    if type(ct) is Zero:
        return [Zero(operand.aval) if lin_op else None, None,
                Zero(updates.aval) if lin_up else None]
    t_op = t_up = None
    dt = get_aval(ct).dtype
    if lin_op:
        t_op = scatter_p.bind(ct, indices, full(u_aval.shape, 0, dt), **params)
    if lin_up:
        t_up = _inverse_gather(ct, indices, u_aval.shape, params["dimension_numbers"],
                               mode=params["mode"], fill_value=0)
    return [t_op, None, t_up]


ad.jvp_rules[scatter_p] = _scatter_jvp
ad.transpose_rules[scatter_p] = _scatter_transpose


# ----------------------------------------------------------------------------------------------
# public scatter wrappers


_COMBINERS = {"scatter-add": add, "scatter-sub": sub, "scatter-mul": mul,
              "scatter-min": _lax_min, "scatter-max": _lax_max}


@functools.cache
def _update_jaxpr(prim_name, dtype):
    """The scalar combiner as a jaxpr (``{ lambda ; a b. let c = add a b in (c,) }``), as JAX
    records it in a scatter's ``update_jaxpr`` parameter; None for plain scatter. Only
    printed: the impl and rules dispatch on the primitive."""
    fn = _COMBINERS.get(prim_name)
    if fn is None:
        return None
    from kiln.interpreters.staging import trace_to_jaxpr
    aval = ShapedArray((), dtype)
    try:
        jaxpr, _ = trace_to_jaxpr(lambda a, b: [fn(a, b)], [aval, aval])
    except TypeError:          # e.g. no lax.add on this dtype: nothing to show
        return None
    return jaxpr


def _scatter_bind(prim, operand, indices, updates, dimension_numbers, indices_are_sorted,
                  unique_indices, mode):
    mode = GatherScatterMode.from_any(mode)
    if mode == GatherScatterMode.ONE_HOT:
        raise NotImplementedError("scatter mode 'one_hot' is not supported by kiln")
    dt = get_aval(operand).dtype
    return prim.bind(operand, indices, updates,
                     update_jaxpr=None if isinstance(dt, dtypes.ExtendedDType) else
                     _update_jaxpr(prim.name, np.dtype(dt)),
                     update_consts=(),
                     dimension_numbers=_canon_scatter_dnums(dimension_numbers),
                     indices_are_sorted=bool(indices_are_sorted),
                     unique_indices=bool(unique_indices), mode=mode)


_SCATTER_DOC = """XLA's Scatter, combining ``updates`` into ``operand`` with {what}.

    ``scatter_indices`` holds index vectors in its last axis; ``dimension_numbers`` (a
    ``ScatterDimensionNumbers``) relates the axes. ``mode``: ``'clip'`` clamps indices so
    windows fit; ``'fill'``/``'drop'`` (the default) and ``'promise_in_bounds'`` discard
    windows that are not entirely in range. {dups}
    """


def scatter_add(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
    return _scatter_bind(scatter_add_p, operand, scatter_indices, updates, dimension_numbers,
                         indices_are_sorted, unique_indices, mode)


def scatter_sub(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
    return _scatter_bind(scatter_sub_p, operand, scatter_indices, updates, dimension_numbers,
                         indices_are_sorted, unique_indices, mode)


def scatter_mul(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
    return _scatter_bind(scatter_mul_p, operand, scatter_indices, updates, dimension_numbers,
                         indices_are_sorted, unique_indices, mode)


def scatter_min(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
    return _scatter_bind(scatter_min_p, operand, scatter_indices, updates, dimension_numbers,
                         indices_are_sorted, unique_indices, mode)


def scatter_max(operand, scatter_indices, updates, dimension_numbers, *,
                indices_are_sorted=False, unique_indices=False, mode=None):
    return _scatter_bind(scatter_max_p, operand, scatter_indices, updates, dimension_numbers,
                         indices_are_sorted, unique_indices, mode)


def scatter(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
            unique_indices=False, mode=None):
    return _scatter_bind(scatter_p, operand, scatter_indices, updates, dimension_numbers,
                         indices_are_sorted, unique_indices, mode)


scatter_add.__doc__ = _SCATTER_DOC.format(what="addition",
                                          dups="Repeated indices accumulate.")
scatter_sub.__doc__ = _SCATTER_DOC.format(what="subtraction",
                                          dups="Repeated indices accumulate.")
scatter_mul.__doc__ = _SCATTER_DOC.format(what="multiplication",
                                          dups="Repeated indices accumulate.")
scatter_min.__doc__ = _SCATTER_DOC.format(what="the minimum",
                                          dups="Repeated indices accumulate.")
scatter_max.__doc__ = _SCATTER_DOC.format(what="the maximum",
                                          dups="Repeated indices accumulate.")
scatter.__doc__ = _SCATTER_DOC.format(what="overwriting",
                                      dups="With repeated indices the last update wins.")


def scatter_apply(operand, scatter_indices, func, dimension_numbers, *, update_shape=(),
                  indices_are_sorted=False, unique_indices=False, mode=None):
    """``operand`` with the elementwise ``func`` applied at the scattered positions; a
    position hit k times gets ``func`` applied k times.

    Built as a count scatter plus ``func`` applied where the count exceeds the round: the
    rounds are unrolled when the indices are concrete, else a ``while_loop``. As in JAX,
    it has no derivative: ``jvp``/``grad``/``jacfwd`` raise ``NotImplementedError`` (also
    when it is staged under ``jit``: the result goes through a ``custom_jvp`` whose rule
    raises).
    """
    out = _scatter_apply(operand, scatter_indices, func, dimension_numbers, update_shape,
                         indices_are_sorted, unique_indices, mode)
    return scatter_apply_no_jvp(out)


def _raise_no_jvp(primals, tangents):
    raise NotImplementedError("scatter_apply JVP not implemented")


# ``kiln.custom_derivatives.custom_jvp``, installed by that module when it is imported
# (``lax`` sits below the custom-derivative API: docs/architecture.md, "Layer order").
_custom_jvp: list = []


def set_custom_jvp(custom_jvp) -> None:
    """Install ``custom_jvp`` (called once by ``kiln.custom_derivatives``)."""
    _custom_jvp[:] = [custom_jvp]


@functools.cache
def _no_jvp_marker():
    # (``import kiln.lax`` imports the ``kiln`` package first, which imports
    # ``kiln.custom_derivatives``: the hook is always installed by now.)
    marker = _custom_jvp[0](lambda x: x)
    marker.defjvp(_raise_no_jvp)
    return marker


def scatter_apply_no_jvp(x):
    """``x`` unchanged, through a ``custom_jvp`` whose rule raises JAX's
    ``NotImplementedError`` (``scatter_apply`` has no derivative in JAX); kept when staged
    under ``jit``, so a later ``jvp``/``grad`` of the jaxpr raises too."""
    return _no_jvp_marker()(x)


def _scatter_apply(operand, scatter_indices, func, dimension_numbers, update_shape,
                   indices_are_sorted, unique_indices, mode):
    """``scatter_apply``'s evaluation (see there)."""
    operand = _as_operand(operand)
    aval = get_aval(operand)
    update_shape = _ints(update_shape)
    ones = full(update_shape, 1, np.int32)
    counts = scatter_add(full(aval.shape, 0, np.int32), scatter_indices, ones,
                         dimension_numbers, indices_are_sorted=indices_are_sorted,
                         unique_indices=unique_indices, mode=mode)
    from kiln.lax.arith import gt

    def step(k, x):
        y = convert_element_type(func(x), aval.dtype)
        return select(gt(counts, full(aval.shape, k, np.int32)), y, x)

    if not isinstance(counts, Tracer):
        rounds = int(np.max(np.asarray(counts._value))) if aval.size else 0
        x = operand
        for k in range(rounds):
            x = step(k, x)
        return x
    from kiln.lax.control import while_loop
    from kiln.lax.reductions import reduce_max
    total = reduce_max(counts, tuple(range(aval.ndim))) if aval.ndim else counts

    def cond(c):
        from kiln.lax.arith import lt
        return lt(c[0], total)

    def body(c):
        k, x = c
        y = select(gt(counts, broadcast_in_dim(k, aval.shape, ())),
                   convert_element_type(func(x), aval.dtype), x)
        return add(k, full((), 1, np.int32)), y

    return while_loop(cond, body, (full((), 0, np.int32), operand))[1]


__all__ = ["GatherDimensionNumbers", "ScatterDimensionNumbers", "GatherScatterMode",
           "gather", "index_take", "scatter", "scatter_add", "scatter_sub", "scatter_mul",
           "scatter_min", "scatter_max", "scatter_apply", "gather_p", "scatter_p",
           "scatter_add_p", "scatter_sub_p", "scatter_mul_p", "scatter_min_p", "scatter_max_p"]
_ = (broadcasted_iota,)
