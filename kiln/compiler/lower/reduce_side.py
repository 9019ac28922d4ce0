"""A kernel over a column reduction's loop, stored by the reduction as it folds.

A dense layer's backward computes its pre-activation gradient ``dz = g * (1 - t*t)``
twice: once folded into the bias gradient (``sum(dz, axis=0)``, a column reduction that
recomputes ``dz`` from ``g`` and ``t`` rather than wait for it to be stored) and once by
the kernel that stores ``dz`` for the two matrix products. Both loop over the same
``[batch, features]`` elements and read the same arrays. Here the kernel is merged into
the reduction (``Reduce.side``): one pass reads ``g`` and ``t`` once, folds the column
sums and stores ``dz``. The sums fold in the same order and the stored values are the
same expressions: the same bits.

Merged when the reduction is two-dimensional over its first axis (the kept axis is the
innermost loop: the column plan, or plain loops on one thread), the kernel loops over the
same symbols and shape (no offset, no strides), neither reads through a dynamic index, the
kernel does not read the reduction's output, and no step between them (the reduction
included) touches what the kernel writes or writes what it reads.

What it must not hold: C text (``render/reductions.py`` prints the side stores).
"""
from __future__ import annotations

from kiln.compiler.lower.index import Idx
from kiln.compiler.lower.merge_kernels import _dynamic, _rebuild, _same_loop
from kiln.compiler.lower.program import Gemm, Kernel, Program, Reduce, Scan, Scatter
from kiln.compiler.lower.walk import step_buffer_ids, walk

# How far after the reduction the kernel may be (steps).
LOOK_AHEAD = 8
MAX_SIDE = 4


def merge_side_stores(prog: Program) -> int:
    """Merge kernels into the column reductions before them; returns how many."""
    steps = prog.steps
    merged = 0
    for i, r in enumerate(steps):
        if not _column_reduction(r) or _dynamic(prog, walk(prog, [r.body])):
            continue
        j = i + 1
        while j < min(len(steps), i + 1 + LOOK_AHEAD) and len(r.side) < MAX_SIDE:
            k = steps[j]
            outs = _mergeable(prog, steps, i, j) if isinstance(k, Kernel) else None
            if outs is not None:
                r.side.extend(outs)
                r.name = f"{r.name}+{k.name}"
                del steps[j]
                merged += 1
                continue
            j += 1
    return merged


def _column_reduction(r) -> bool:
    return (isinstance(r, Reduce) and len(r.in_shape) == 2 and tuple(r.axes) == (0,)
            and r.op not in ("argmax", "argmin"))


def _mergeable(prog: Program, steps: list, i: int, j: int):
    """The kernel's outputs over the reduction's loop symbols when it can be merged,
    else None."""
    r, k = steps[i], steps[j]
    if k.strides is not None or len(r.side) + len(k.outs) > MAX_SIDE:
        return None
    nodes = walk(prog, [e for _, e in k.outs])
    if _dynamic(prog, nodes):
        return None
    # The kernel's loop is the reduction's (Kernel and Reduce both carry shape and syms),
    # or the same elements flattened into one loop (elementwise kernels over contiguous
    # arrays are lowered so): re-indexed over the reduction's symbols.
    shaped = Kernel(tuple(r.in_shape), list(r.syms), [], "")
    if _same_loop(shaped, k):
        outs = list(k.outs)
    else:
        outs = _reindexed(prog, r, k, nodes)
        if outs is None:
            return None
    reads = {e.params[0] for e in nodes if e.kind == "load"}
    writes = {b.id for b, _ in k.outs}
    if r.out.id in reads or any(b.id in reads or b.id in writes for b, _ in r.side):
        return None
    for t in range(i, j):
        if step_buffer_ids(prog, steps[t]) & writes:
            return None
        if t > i and _writes(prog, steps[t]) & reads:
            return None
    return outs


def _reindexed(prog: Program, r: Reduce, k: Kernel, nodes):
    """``k``'s outputs over ``r``'s two loop symbols when ``k`` is one flat loop over the
    same elements and reads only at affine positions of it; else None."""
    rows, cols = r.in_shape
    if (k.offset is not None or len(k.syms) != 1 or tuple(k.shape) != (rows * cols,)
            or (k.syms[0].lo, k.syms[0].hi) != (0, rows * cols - 1)):
        return None
    flat = k.syms[0]
    si, sj = r.syms
    pos = Idx.sym(si) * cols + Idx.sym(sj)
    table = prog.table
    subst = {}
    for e in nodes:
        if e.kind in ("const", "op"):
            continue
        if e.kind != "load":
            return None          # an index or a condition over the loop: not rewritten
        idx = e.params[2].v
        if not idx.is_affine or any(s != flat for s, _ in idx.terms):
            return None
        new = Idx.lit(idx.const) + pos * idx.coef(flat) if idx.terms else idx
        subst[e.uid] = table.load(prog.buffers[e.params[0]], new)
    memo: dict = {}
    return [(buf, _rebuild(table, e, subst, memo)) for buf, e in k.outs]


def _writes(prog: Program, step) -> set:
    """Buffers a step may write (everything it touches when it is not a plain step)."""
    if isinstance(step, Kernel):
        return {b.id for b, _ in step.outs}
    if isinstance(step, Reduce):
        return {step.out.id} | {b.id for b, _ in step.side}
    if isinstance(step, (Gemm, Scan, Scatter)):
        return {step.out.id}
    return step_buffer_ids(prog, step)
