"""``lax.ragged_dot``, ``lax.ragged_dot_general`` and ``lax.RaggedDotDimensionNumbers``.

A ragged dot multiplies each *group* of consecutive rows of ``lhs`` (along its ragged
dimension; the groups' sizes are ``group_sizes``) by that group's matrix of ``rhs`` (along
its group dimension). Rows past ``sum(group_sizes)`` give zeros, as JAX on CPU.

kiln computes it as a composite of ``lax`` operations (no primitive of its own): one
``dot_general`` against every group, then each row keeps its group's product (a select
and a sum over the group axis, both exact). So it is differentiable, batchable and
jittable like any ``lax`` code; its cost is that of the dense product with all groups.
Only JAX's first mode is implemented: the lhs ragged dimension is a free (non-contracting)
dimension and ``rhs`` has a group dimension. The other two modes (ragged contracting or
batch dimension, no rhs group dimension) raise NotImplementedError; ``group_offset`` is
not supported (as in JAX on CPU).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from kiln import dtypes

__all__ = ["RaggedDotDimensionNumbers", "ragged_dot", "ragged_dot_general"]


@dataclasses.dataclass(frozen=True, init=False)
class RaggedDotDimensionNumbers:
    """The dimensions of a ragged dot.

    Args:
      dot_dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch,
        rhs_batch))``, sequences of ints (as for ``lax.dot_general``).
      lhs_ragged_dimensions: the ragged dimensions of the left operand.
      rhs_group_dimensions: the group dimensions of the right operand.
    """

    dot_dimension_numbers: tuple
    lhs_ragged_dimensions: tuple
    rhs_group_dimensions: tuple

    def __init__(self, dot_dimension_numbers: Sequence, lhs_ragged_dimensions: Sequence[int],
                 rhs_group_dimensions: Sequence[int]):
        dims = tuple(tuple(tuple(int(d) for d in part) for part in pair)
                     for pair in dot_dimension_numbers)
        object.__setattr__(self, "dot_dimension_numbers", dims)
        object.__setattr__(self, "lhs_ragged_dimensions",
                           tuple(int(d) for d in lhs_ragged_dimensions))
        object.__setattr__(self, "rhs_group_dimensions",
                           tuple(int(d) for d in rhs_group_dimensions))


def _lax():
    import kiln.lax as lax
    return lax


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
    """Ragged matrix multiplication: rows ``lhs[start_g:start_g + group_sizes[g]]`` times
    ``rhs[g]``.

    Args:
      lhs: shape ``(m, k)``.
      rhs: shape ``(g, k, n)``.
      group_sizes: integer, shape ``(g,)``: consecutive row counts of ``lhs``.
      precision: as for ``lax.dot_general``.
      preferred_element_type: the result dtype (default: the operands' promoted dtype).
      group_offset: not supported (NotImplementedError), as in JAX on CPU.
      out_sharding: ``None`` only.

    Returns:
      Shape ``(m, n)``; rows past ``sum(group_sizes)`` are zero.
    """
    dn = RaggedDotDimensionNumbers((((1,), (1,)), ((), ())), (0,), (0,))
    return ragged_dot_general(lhs, rhs, group_sizes, dn, precision=precision,
                              preferred_element_type=preferred_element_type,
                              group_offset=group_offset, out_sharding=out_sharding)


def _check(lhs_shape, rhs_shape, gs_shape, dn):
    """JAX's checks of a ragged ``dot_general``, in JAX's order; ``(ragged dim, groups)``."""
    (lc, rc), (lb, rb) = dn.dot_dimension_numbers
    lc, rc, lb, rb = (list(v) for v in (lc, rc, lb, rb))
    if len(dn.lhs_ragged_dimensions) != 1:
        raise TypeError("ragged_dot_general expects exactly one lhs ragged dimension.")
    r = dn.lhs_ragged_dimensions[0]
    if not 0 <= r < len(lhs_shape):
        raise TypeError("ragged_dot_general requires lhs ragged dimension numbers to be "
                        "nonnegative and less than the number of axes of the lhs value, "
                        f"got {dn.lhs_ragged_dimensions} for lhs of rank {len(lhs_shape)}")
    free = [d for d in range(len(lhs_shape)) if d not in lc and d not in lb]
    mode = "noncontracting" if r in free else "contracting" if r in lc else "batch"
    if len(gs_shape) == 0:
        raise TypeError("expected rank of group_sizes to be >=1.")
    # group_sizes is [g] or [b..., x..., g]: the lhs dims before the ragged one of its kind
    prefix = {"noncontracting": lb + free[:free.index(r)] if r in free else [],
              "contracting": lb + lc[:lc.index(r)] if r in lc else [],
              "batch": lb[:lb.index(r)] if r in lb else []}[mode]
    expected = tuple(lhs_shape[i] for i in prefix) + (gs_shape[-1],)
    if len(gs_shape) != 1 and tuple(gs_shape) != expected:
        raise TypeError(f"expected group_sizes to have shape {expected}, got "
                        f"{tuple(gs_shape)}.")
    g = gs_shape[-1]
    gdims = list(dn.rhs_group_dimensions)
    if mode != "noncontracting":
        if gdims:
            raise TypeError("ragged_dot_general requires zero group dimensions in the rhs "
                            "when lhs ragged dimension is contracting or batch.")
        return mode, r, g, prefix
    if len(gdims) != 1:
        raise TypeError("ragged_dot_general requires exactly one rhs group dimension when "
                        "lhs ragged dimension is noncontracting.")
    gd = gdims[0]
    if not 0 <= gd < len(rhs_shape):
        raise TypeError("ragged_dot_general requires rhs group dimension numbers to be "
                        "nonnegative and less than the number of axes of the rhs value")
    if gd in rc or gd in rb:
        raise TypeError("ragged_dot_general requires rhs group dimension numbers to be "
                        "distinct from contracting and batch dimensions.")
    if rhs_shape[gd] != g:
        raise TypeError(f"expected rhs group dimension size to be {g}, got {rhs_shape[gd]}.")
    if len(gs_shape) != 1 and tuple(gs_shape) != tuple(lhs_shape[:r]) + (g,):
        raise NotImplementedError(
            f"ragged_dot_general: group_sizes of shape {tuple(gs_shape)} (per-batch group "
            "sizes over lhs dimensions that are not the leading ones) is not supported")
    return mode, r, g, prefix


def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers,
                       precision=None, preferred_element_type=None, group_offset=None,
                       out_sharding=None):
    """Ragged ``dot_general``: see :func:`ragged_dot` and :class:`RaggedDotDimensionNumbers`.

    The result's dimensions are those of ``lax.dot_general`` with the rhs group dimension
    removed: batch dimensions, lhs free dimensions, rhs free dimensions.
    """
    lax = _lax()
    if group_offset is not None:
        raise NotImplementedError("ragged_dot_general: group_offset is not supported "
                                  "(as in JAX on CPU)")
    if out_sharding is not None:
        raise NotImplementedError("ragged_dot_general: out_sharding is not supported")
    dn = ragged_dot_dimension_numbers
    if not isinstance(dn, RaggedDotDimensionNumbers):
        raise TypeError("ragged_dot_dimension_numbers must be a "
                        f"RaggedDotDimensionNumbers, got {dn!r}")
    lshape, rshape, gshape = np.shape(lhs), np.shape(rhs), np.shape(group_sizes)
    mode, r, g, prefix = _check(lshape, rshape, gshape, dn)
    gdt = dtypes.dtype(group_sizes)
    if not dtypes.issubdtype(gdt, np.integer):
        raise TypeError(f"ragged_dot_general: group_sizes must be integers, got {gdt}")
    if mode == "batch":      # each batch row is in one group: a plain dot_general
        return lax.dot_general(lhs, rhs, dn.dot_dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type)
    if mode == "contracting":
        return _ragged_contracting(lhs, rhs, group_sizes, dn, r, g, prefix, precision,
                                   preferred_element_type)
    (lc, rc), (lb, rb) = dn.dot_dimension_numbers
    gd = dn.rhs_group_dimensions[0]
    full = lax.dot_general(lhs, rhs, dn.dot_dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type)
    lfree = [d for d in range(len(lshape)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(rshape)) if d not in rc and d not in rb]
    out_pos = {("l", d): lb.index(d) if d in lb else len(lb) + lfree.index(d)
               for d in range(r + 1) if d not in lc}
    gpos = len(lb) + len(lfree) + rfree.index(gd)
    # Group membership of each position along the ragged dimension, per prefix.
    gs = lax.convert_element_type(group_sizes, np.int32)
    if gs.ndim == 1 and r > 0:
        gs = lax.broadcast_in_dim(gs, tuple(lshape[:r]) + (g,), (r,))
    ends = lax.cumsum(gs, axis=gs.ndim - 1)
    starts = lax.sub(ends, gs)
    m = lshape[r]
    iota = lax.broadcasted_iota(np.int32, tuple(lshape[:r]) + (m, g), r)
    bshape = tuple(lshape[:r]) + (m, g)
    st = lax.broadcast_in_dim(starts, bshape, tuple(range(r)) + (r + 1,))
    en = lax.broadcast_in_dim(ends, bshape, tuple(range(r)) + (r + 1,))
    member = lax.bitwise_and(lax.ge(iota, st), lax.lt(iota, en))
    if any(d in lc for d in range(r)):
        raise NotImplementedError("ragged_dot_general: contracting lhs dimensions before "
                                  "the ragged one are not supported")
    dims = tuple(out_pos[("l", d)] for d in range(r + 1)) + (gpos,)
    member = lax.broadcast_in_dim(member, full.shape, dims)
    picked = lax.select(member, full, lax.full_like(full, 0))
    return lax.reduce_sum(picked, (gpos,))


def _group_mask(x_shape, ragged, prefix, gs, g):
    """``(g,) + x_shape`` booleans: position ``i`` of ``x``'s ``ragged`` dimension is in
    group ``j`` (per the prefix dimensions ``prefix`` that ``gs[..., j]`` is indexed by)."""
    lax = _lax()
    gs = lax.convert_element_type(gs, np.int32)
    if gs.ndim == 1 and prefix:
        gs = lax.broadcast_in_dim(gs, tuple(x_shape[d] for d in prefix) + (g,),
                                  (len(prefix),))
    ends = lax.cumsum(gs, axis=gs.ndim - 1)
    starts = lax.sub(ends, gs)
    shape = (g,) + tuple(x_shape)
    dims = tuple(1 + d for d in prefix) + (0,)
    st = lax.broadcast_in_dim(starts, shape, dims)
    en = lax.broadcast_in_dim(ends, shape, dims)
    iota = lax.broadcasted_iota(np.int32, shape, 1 + ragged)
    return lax.bitwise_and(lax.ge(iota, st), lax.lt(iota, en))


def _ragged_contracting(lhs, rhs, group_sizes, dn, r, g, prefix, precision, pet):
    """The ragged contracting mode: for each group, the product over that group's part of
    the contracting dimension; the group is the result's leading dimension."""
    lax = _lax()
    from kiln.array import Array, to_array
    from kiln.core.trace import Tracer
    lhs, rhs = (x if isinstance(x, (Array, Tracer)) else to_array(x) for x in (lhs, rhs))
    (lc, rc), (lb, rb) = dn.dot_dimension_numbers
    lc, rc, lb, rb = (list(v) for v in (lc, rc, lb, rb))
    rr = rc[lc.index(r)]
    rprefix = [rb[lb.index(d)] if d in lb else rc[lc.index(d)] for d in prefix]

    def expand(x, ragged, pre):
        shape = tuple(np.shape(x))
        mask = _group_mask(shape, ragged, pre, group_sizes, g)
        xb = lax.broadcast_in_dim(x, (g,) + shape, tuple(range(1, len(shape) + 1)))
        return lax.select(mask, xb, lax.full_like(xb, 0))

    inc = lambda ds: tuple(d + 1 for d in ds)  # noqa: E731
    return lax.dot_general(expand(lhs, r, prefix), expand(rhs, rr, rprefix),
                           ((inc(lc), inc(rc)), ((0,) + inc(lb), (0,) + inc(rb))),
                           precision=precision, preferred_element_type=pet)
