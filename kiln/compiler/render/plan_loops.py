"""Loop plans: the loop structure of each step, decided before any C is printed.

A plan is a small frozen dataclass per step (or loop nest): the loops in order, whether
the outermost runs in parallel under OpenMP (and how), tiles and chunks, streaming
stores, prefetch distances. Plans are computed here from the program's steps and a
:class:`LoopTarget` (the numbers describing the machine and dialect: the parallel
threshold, chunk and tile sizes); the printers (``kernels.py``, ``reductions.py``,
``rows.py``, ``control.py``) read a plan and print it, deciding nothing.

This module: the target, plain nests (kernels, scans, scatters, argmax), streamed
kernels and convolution tiles. ``plan_reduce.py``: reductions and row groups.

What it must not hold: C text; fusion decisions (``lower/``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kiln.compiler.lower.index import Sym
from kiln.compiler.lower.program import Conv, Kernel, Program, Reduce, Scan, Scatter
from kiln.compiler.lower.walk import idx_of


@dataclass(frozen=True)
class LoopTarget:
    """What the plans depend on besides the program (a renderer's attributes)."""

    parallel_threshold: int          # units of work above which a loop runs on all cores
    chunk: int                       # long float sums fold in chunks of this many elements
    stream_min_bytes: int | None     # kernels writing this much stream their output
    stream_tile: int                 # elements per streamed tile
    prefetch: bool                   # software prefetch in expensive chunked sums
    prefetch_min_cost: int           # body cost from which a chunked sum prefetches
    prefetch_ahead: int              # elements ahead a chunked sum prefetches
    prefetch_cheap: bool             # cheaper bodies prefetch too (CRenderer.cheap_prefetch)
    conv_tile_elements: int          # patch elements per convolution tile (at most)
    conv_min_rows: int               # patch rows per convolution tile (at least)
    conv_cores: int                  # cores the convolution's tiles are spread over
    small_kernel_elements: int = 0   # elementwise kernels over fewer elements than this
    small_kernel_threshold: int = 0  # ... run on all cores from this much work only

    @staticmethod
    def of(r) -> LoopTarget:
        """The target a renderer (its class attributes, possibly patched) describes."""
        return LoopTarget(r.parallel_threshold, r.chunk, r.stream_min_bytes, r.stream_tile,
                          bool(r.prefetch), r.prefetch_min_cost, r.prefetch_ahead,
                          r.resolved_hint(r.cheap_prefetch) is not None,
                          r.conv_tile_elements, r.conv_min_rows, r.conv_cores,
                          r.small_kernel_elements, r.small_kernel_threshold)


@dataclass(frozen=True)
class NestPlan:
    """A loop nest over ``loops`` (``(Sym, extent)``, outermost first); ``parallel``: the
    outermost loop is an OpenMP ``parallel for`` (static schedule); the loop of
    ``backwards`` runs from its end."""

    loops: tuple
    parallel: bool = False
    backwards: Sym | None = None


@dataclass(frozen=True)
class StreamPlan:
    """A kernel whose innermost loop is cut into ``tile``-element tiles computed into a
    stack array and stored with streaming stores, in one OpenMP region (active when
    ``parallel``); the threads share the first outer loop (``split_outer``) or else the
    tiles."""

    tile: int
    parallel: bool
    split_outer: bool


@dataclass(frozen=True)
class KernelPlan:
    """An elementwise kernel: its nest, streamed or not, and ``copy_of``: the input
    buffer it copies unchanged (skipped at run time when the output is that input's own
    memory), or None."""

    nest: NestPlan
    stream: StreamPlan | None = None
    copy_of: int | None = None


@dataclass(frozen=True)
class ConvPlan:
    """Tiles of a convolution: ``ntiles`` tiles of ``ipt`` images and ``rpt`` rows of the
    first output dim (``nblk`` row blocks per image), in parallel when ``parallel``."""

    ipt: int
    rpt: int
    nblk: int
    ntiles: int
    parallel: bool


def cost_of(outs) -> int:
    """The most expensive output expression's cost (at least 1 for an empty list)."""
    return max((e.cost for _, e in outs), default=1)


def loop_deps(prog: Program, e, memo: dict) -> frozenset:
    """Names of the loop symbols (those without a definition) ``e`` depends on, through
    dynamic-index definitions too (``memo``: uid -> result, shared between calls)."""
    hit = memo.get(e.uid)
    if hit is None:
        out = set()
        for a in e.args:
            out |= loop_deps(prog, a, memo)
        for idx in idx_of(e):
            for sym in idx.deps:
                d = prog.sym_defs.get(sym.name)
                out |= {sym.name} if d is None else loop_deps(prog, d[1], memo)
        hit = memo[e.uid] = frozenset(out)
    return hit


# A kernel or reduction over at most this many elements is compiled without gcc's loop
# vectorizer, peeling and unrolling (KILN_SMALL): they cost ~10-30 ms of build per
# function, and such a loop runs in microseconds either way.
SMALL_ELEMENTS = 4096


def is_small(step) -> bool:
    """Whether a step (or row group, a list) has only loops over at most
    ``SMALL_ELEMENTS`` elements: its function is compiled without the vectorizer."""
    if isinstance(step, list):
        return all(is_small(s) for s in step)
    if isinstance(step, Kernel):
        shape = step.shape
    elif isinstance(step, Reduce):
        shape = step.in_shape
    else:
        return False
    return math.prod(shape) <= SMALL_ELEMENTS


def plan_nest(loops, work: int, t: LoopTarget, backwards: Sym | None = None) -> NestPlan:
    """A nest doing ``work`` units in all: parallel over the outermost loop when the work
    is large and that loop has more than one iteration (``work`` 0: sequential)."""
    loops = tuple(loops)
    par = bool(work >= t.parallel_threshold and loops and loops[0][1] > 1)
    return NestPlan(loops, par, backwards)


def _plain_copy_source(prog: Program, k: Kernel):
    """The input buffer id a Kernel copies element for element into an output of the
    same dtype, or None."""
    from kiln.compiler.lower.plan_buffers import _same_element
    if len(k.outs) != 1 or k.offset is not None:
        return None
    out, e = k.outs[0]
    if out.kind != "out" or e.kind != "load":
        return None
    src = prog.buffers[e.params[0]]
    if src.kind != "in" or src.dtype != out.dtype or src.size != out.size:
        return None
    return src.id if _same_element(k, e) else None


def plan_kernel(prog: Program, k: Kernel, t: LoopTarget) -> KernelPlan:
    """Streamed when it writes at least ``stream_min_bytes`` over whole buffers with an
    innermost loop of a quarter tile or more (tiles of at most that loop's length);
    parallel when its work is large: ``parallel_threshold``, or ``small_kernel_threshold``
    for a kernel over fewer than ``small_kernel_elements`` elements (its arrays are in
    cache, and its cost units, cheap vector arithmetic, add up to a few microseconds:
    a fork and join of the team costs as much, far more on a busy machine)."""
    elements = math.prod(k.shape)
    work = elements * max(1, cost_of(k.outs))
    if elements < t.small_kernel_elements and work < t.small_kernel_threshold:
        work = 0
    loops = tuple(zip(k.syms, k.shape))
    out_bytes = sum(buf.size * np.dtype(buf.dtype).itemsize for buf, _ in k.outs)
    stream = None
    # Rows of 256 elements and more stream too: per-example weight gradients (rows of
    # 512, 340 MB in all) took ~1.8x as long stored in place (a read for ownership of
    # every line; benchmarks/NOTES.md, session 16).
    if (t.stream_min_bytes is not None and out_bytes >= t.stream_min_bytes
            and k.offset is None
            and loops and loops[-1][1] >= t.stream_tile // 4
            and all(buf.size == math.prod(k.shape) for buf, _ in k.outs)):
        outer = loops[:-1]
        stream = StreamPlan(min(t.stream_tile, loops[-1][1]), work >= t.parallel_threshold,
                            bool(outer) and outer[0][1] > 1)
    return KernelPlan(plan_nest(loops, work, t), stream, _plain_copy_source(prog, k))


def plan_scatter(c: Scatter, t: LoopTarget) -> NestPlan:
    """Sequential loops over the updates: two updates may hit one element."""
    return plan_nest(zip(c.syms, c.shape), 0, t)


def plan_scan(c: Scan, t: LoopTarget) -> NestPlan:
    """Row-major loops, the scanned one backwards when ``reverse``; the outermost runs in
    parallel unless it is the scanned axis."""
    work = math.prod(c.shape) if c.axis > 0 else 0
    return plan_nest(zip(c.syms, c.shape), work, t,
                     backwards=c.syms[c.axis] if c.reverse else None)


def plan_arg_reduce(r: Reduce, t: LoopTarget) -> NestPlan:
    """argmax/argmin: a nest over the kept dims, each folding the reduced axis."""
    (ax,) = r.axes
    kept = [d for d in range(len(r.in_shape)) if d != ax]
    return plan_nest([(r.syms[d], r.in_shape[d]) for d in kept], math.prod(r.in_shape), t)


def plan_conv(cv: Conv, t: LoopTarget) -> ConvPlan:
    """A tile is a block of patch rows: at least ``conv_min_rows`` of them (a GEMM with
    few rows re-reads the whole kernel for little work), else as many as fit in
    ``conv_tile_elements``. Small images are tiled several at a time, with at least 4
    tiles per core so that no core idles at the end for long."""
    kdim = math.prod(cv.k_sp) * cv.cg
    rows0 = cv.out_sp[0]
    row_len = math.prod(cv.out_sp[1:])
    per_image = rows0 * row_len
    want = max(t.conv_min_rows, t.conv_tile_elements // max(1, kdim))
    if per_image <= want:
        ipt = max(1, min(cv.n, want // per_image))
        ipt = max(1, min(ipt, cv.n // (4 * t.conv_cores)))
        rpt, nblk = rows0, 1
        ntiles = -(-cv.n // ipt)
    else:
        ipt = 1
        rpt = max(1, min(rows0, want // max(1, row_len)))
        nblk = -(-rows0 // rpt)
        ntiles = cv.n * nblk
    work = cv.n * per_image * kdim * cv.groups * cv.og
    return ConvPlan(ipt, rpt, nblk, ntiles, work >= t.parallel_threshold and ntiles > 1)
