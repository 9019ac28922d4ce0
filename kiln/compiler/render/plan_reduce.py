"""Loop plans of reductions and row groups, decided before any C is printed.

A reduction folds each output element over its trailing reduced dims (a :class:`FoldPlan`:
chunked and vectorized for long float sums, with software prefetch when the body is
expensive; NaN-flagged for float max/min), inside loops over the kept dims (parallel when
large), or accumulates into the output when a reduced dim is outer; a reduction over
rows into columns runs over column tiles (:class:`ColumnPlan`).

A row group (``row_groups.py`` decides its steps) is one loop over rows
(:class:`RowGroupPlan`), skewed (:class:`SkewPlan`) when it opens with a float
reduction followed by a float sum or an elementwise step over rows of the same length:
rows go in blocks shared by work stealing and one inner loop does the second step of row
``g`` and the first reduction of row ``g + 1``. :func:`bounded_exps` finds the exps
whose arguments the group's first step (a float32 max) bounds, which may run without
their overflow and NaN selects.

What it must not hold: C text (the printers: ``reductions.py``, ``rows.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kiln.compiler.lower.index import Idx, Sym, row_major_strides
from kiln.compiler.lower.program import Kernel, Program, Reduce
from kiln.compiler.lower.walk import walk
from kiln.compiler.render.plan_loops import LoopTarget, cost_of, loop_deps
from kiln.compiler.render.row_groups import lead_dims, loop_shape, row_count

F32 = "float32"
_FLOATS = ("float32", "float64")


@dataclass(frozen=True)
class FoldPlan:
    """How one output element of a reduction folds over its trailing reduced dims.

    ``kind``: ``"chunked"`` (a float sum over one long dim, in ``chunk``-element chunks,
    each a vectorized partial sum; the chunks shared by the threads when ``parallel``;
    ``prefetch``: prefetch ``prefetch_ahead`` elements ahead, or with ``next_row`` (the
    innermost row loop's symbol in a row group) the same lines of the next row;
    ``cheap``: a body under ``prefetch_min_cost``, prefetched with the L2 hint),
    ``"nan_minmax"`` (float max/min: a vectorized fold plus a NaN flag), or ``"plain"``
    (vectorized with ``simd_op`` when there is one)."""

    kind: str
    loops: tuple                    # ((Sym, extent), ...) over the trailing dims
    length: int
    simd_op: str | None = None
    chunk: int = 0
    parallel: bool = False
    prefetch: bool = False
    prefetch_ahead: int = 0
    next_row: Sym | None = None
    cheap: bool = False


@dataclass(frozen=True)
class ColumnPlan:
    """A reduction over the rows of a [rows, cols] array into columns: ``n_tiles`` tiles of
    ``tile`` columns over the threads, each folded in a local array, rows in order."""

    tile: int
    n_tiles: int


@dataclass(frozen=True)
class ReducePlan:
    """A reduction: loops over the leading dims ``prefix`` (``(dim, Sym, extent)``; the
    outermost parallel when ``parallel``), then ``fold`` over the trailing reduced dims,
    or (``fold`` None) one combine into the output per element when no dim is trailing.
    ``outer_reduced``: a reduced dim is among the leading ones, so the output is
    initialised first and accumulated into. ``column``: the column-tile form instead."""

    prefix: tuple
    outer_reduced: bool
    parallel: bool
    fold: FoldPlan | None
    column: ColumnPlan | None = None


@dataclass(frozen=True)
class RowStepPlan:
    """One step of a row group: its first ``m`` loop dims enumerate the rows; a
    reduction's ``fold`` over the rest of its dims."""

    step: object
    m: int
    shape: tuple
    fold: FoldPlan | None = None


@dataclass(frozen=True)
class SkewPlan:
    """The skewed row loop: ``n_blocks`` blocks of ``block`` rows (shared by work
    stealing when ``parallel``, ``csrc/steal.h``); the fused inner loop over rows of ``length`` elements is chunked
    (``chunk`` elements) when the first step (``chunk_first``) or second step
    (``chunk_second``) is a float sum longer than two chunks."""

    block: int
    n_blocks: int
    parallel: bool
    length: int
    chunk: int
    chunk_first: bool
    chunk_second: bool


@dataclass(frozen=True)
class RowGroupPlan:
    """Steps sharing one loop over ``n_rows`` rows (parallel when ``parallel``), skewed
    when ``skew`` is set."""

    n_rows: int
    steps: tuple
    parallel: bool
    skew: SkewPlan | None = None


def summed(r: Reduce) -> bool:
    """Whether ``r`` is a float sum, whose body may use ``fast_math``'s exp."""
    return r.op == "sum" and r.out.dtype.kind == "f"


def trailing_dims(r: Reduce) -> tuple[list[int], list[int]]:
    """(leading dims, trailing block of reduced dims) of ``r``."""
    nd = len(r.in_shape)
    t0 = nd
    while t0 > 0 and (t0 - 1) in r.axes:
        t0 -= 1
    return list(range(t0)), list(range(t0, nd))


def plan_fold(r: Reduce, t: LoopTarget, parallel: bool,
              next_row: Sym | None = None) -> FoldPlan:
    """The fold of one output element of ``r`` over its trailing reduced dims."""
    _, trailing = trailing_dims(r)
    loops = tuple((r.syms[d], r.in_shape[d]) for d in trailing)
    tn = math.prod(r.in_shape[d] for d in trailing)
    fl = r.out.dtype.kind == "f"
    if r.fma:
        # XLA's short sums of products: in order, one fma per element (no SIMD
        # reduction, which would fold lanes apart).
        return FoldPlan("plain", loops, tn, None)
    if len(trailing) == 1 and tn > 2 * t.chunk and r.op == "sum" and fl:
        dear = r.body.cost >= t.prefetch_min_cost
        cheap = not dear and next_row is None and t.prefetch_cheap
        return FoldPlan("chunked", loops, tn, "+", t.chunk, parallel,
                        (t.prefetch and dear) or cheap, t.prefetch_ahead, next_row, cheap)
    if r.op in ("max", "min") and fl:
        return FoldPlan("nan_minmax", loops, tn, r.op)
    boolean = r.out.dtype.kind == "b"
    simd_op = {"sum": "+", "prod": "*"}.get(r.op) if fl else \
        {"sum": "+", "prod": "*", "and": "&", "or": "|", "xor": "^",
         "max": "max" if not boolean else "|",
         "min": "min" if not boolean else "&"}.get(r.op)
    return FoldPlan("plain", loops, tn, simd_op)


def plan_reduce(r: Reduce, t: LoopTarget) -> ReducePlan:
    """A reduction's loops: column tiles for a large sum over rows into columns, else
    loops over the leading dims (parallel over the outermost when it is kept and the
    work large) around the fold (parallel itself when there are no leading dims)."""
    axes = set(r.axes)
    prefix, trailing = trailing_dims(r)
    work = math.prod(r.in_shape) * max(1, r.body.cost)
    big = work >= t.parallel_threshold
    loops = tuple((d, r.syms[d], r.in_shape[d]) for d in prefix)
    if (len(prefix) == 2 and not trailing and prefix[0] in axes and prefix[1] not in axes
            and big and r.in_shape[1] >= 64):
        n_cols = r.in_shape[1]
        eighth = -(-n_cols // 8)
        tile = min(256, max(16, -(-eighth // 16) * 16))    # ~n/8 in whole vectors
        return ReducePlan(loops, True, True, None, ColumnPlan(tile, -(-n_cols // tile)))
    outer_reduced = any(d in axes for d in prefix)
    par = bool(big and prefix and prefix[0] not in axes and r.in_shape[prefix[0]] > 1)
    fold = plan_fold(r, t, parallel=not prefix and big) if trailing else None
    return ReducePlan(loops, outer_reduced, par, fold)


def _step_cost(st) -> int:
    return st.body.cost if isinstance(st, Reduce) else cost_of(st.outs)


def skewable(parts: list) -> bool:
    """Whether a row group (its :class:`RowStepPlan` list) opens with a reduction (float
    max, min or sum) then a float sum or an elementwise kernel over rows of the same
    length (one trailing loop dim each)."""
    if len(parts) < 2:
        return False
    a, b = parts[0], parts[1]
    if not (isinstance(a.step, Reduce) and a.step.op in ("max", "min", "sum")
            and a.step.out.dtype.name in _FLOATS):
        return False
    if isinstance(b.step, Reduce):
        if not (b.step.op == "sum" and b.step.out.dtype.name in _FLOATS):
            return False
    elif not isinstance(b.step, Kernel) or b.step.offset is not None:
        return False
    if len(a.shape) - a.m != 1 or len(b.shape) - b.m != 1 or a.shape[-1] != b.shape[-1]:
        return False
    # Work enough per row that hiding the next row's loads is worth a second inner body.
    return a.shape[-1] >= 256


def plan_row_group(steps: list, t: LoopTarget) -> RowGroupPlan:
    """One loop over the rows of ``steps`` (a group of ``row_groups``), skewed when
    :func:`skewable`. A reduction of the group folds without threads of its own; an
    expensive chunked one prefetches the next row (its own row is in cache)."""
    n_rows = row_count(steps[0])
    work, parts = 0, []
    for st in steps:
        m = lead_dims(st, n_rows)
        fold = None
        if isinstance(st, Reduce):
            fold = plan_fold(st, t, parallel=False, next_row=st.syms[m - 1] if m else None)
        parts.append(RowStepPlan(st, m, loop_shape(st), fold))
        work += math.prod(loop_shape(st)) * max(1, _step_cost(st))
    parallel = work >= t.parallel_threshold
    skew = None
    if skewable(parts) and n_rows >= 2:
        # Blocks of rows handed out dynamically: under a loaded machine a thread that
        # loses its core does not hold the others up (each block costs one extra pass
        # of the first step over its first row: ~1/150 of the work).
        block = max(16, -(-n_rows // 32))
        n = parts[1].shape[-1]
        skew = SkewPlan(block, -(-n_rows // block), parallel, n, t.chunk,
                        parts[0].step.op == "sum" and n > 2 * t.chunk,
                        isinstance(parts[1].step, Reduce) and n > 2 * t.chunk)
    return RowGroupPlan(n_rows, tuple(parts), parallel, skew)


def row_major_buffer(e, syms, shape):
    """The id of the buffer ``e`` loads from at the row-major position of the loop
    indices ``syms`` over ``shape`` (plain ``x[i, j]`` reads), or None."""
    if e.kind != "load":
        return None
    idx: Idx = e.params[2].v
    if not idx.is_affine or idx.const != 0:
        return None
    want = {s.name: st for s, n, st in zip(syms, shape, row_major_strides(shape)) if n > 1}
    got = {s.name: c for s, c in idx.terms}
    return e.params[0] if got == want else None


def bounded_exps(prog: Program, second: RowStepPlan, r0: Reduce) -> list:
    """The float32 exps in the second step of a skewed row group whose argument is
    ``e - c``, with ``e`` the value the group's first step ``r0`` (a float32 max over the
    same row) reduced and ``c`` constant along the row: ``[(exp node, c node)]``. When
    ``fl(max - c) <= fast_math.FIN_MAX`` for row ``g``, every such argument in the row is
    at most that bound and none is NaN (``e <= max(e)`` and rounding is monotone; a NaN
    max means a NaN in the row): that is ``exp(x - max(x))`` in logsumexp and softmax,
    whose exps then need no overflow or NaN select (``fexp32_fin``, ``xexp32_fin``)."""
    st = second.step
    if isinstance(st, Reduce):
        if not summed(st):
            return []
        roots = [st.body]
    else:
        roots = [e for _, e in st.outs]
    if not (r0.op == "max" and r0.out.dtype.name == F32):
        return []
    same_loops = (tuple(r0.in_shape) == tuple(second.shape)
                  and [s.name for s in r0.syms] == [s.name for s in st.syms])
    maxed = row_major_buffer(r0.body, r0.syms, r0.in_shape)
    inner = {s.name for s in st.syms[second.m:]}
    memo: dict = {}
    out = []
    for e in walk(prog, roots):
        if not (e.kind == "op" and e.params[0] == "exp" and e.dtype.name == F32):
            continue
        a = e.args[0]
        if not (a.kind == "op" and a.params[0] == "sub"):
            continue
        # e is what r0 maxed, element for element: the same node over the same loops,
        # or a load of the same buffer at the row-major position of each step's own
        # loop indices (a vmapped group may see the rows as [120, n] and [3, 40, n]).
        if not ((same_loops and a.args[0].uid == r0.body.uid)
                or (maxed is not None
                    and row_major_buffer(a.args[0], st.syms, second.shape) == maxed)):
            continue
        c = a.args[1]
        if loop_deps(prog, c, memo) & inner:
            continue
        out.append((e, c))
    return out
