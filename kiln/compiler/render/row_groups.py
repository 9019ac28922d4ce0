"""Row groups: consecutive steps that can share one outer loop over rows.

``logsumexp``, ``softmax`` and layer normalisation over the last axis are chains of
steps over the same rows: a max (or mean) per row, then a sum of ``exp(x - max)`` per
row, then a per-row (or per-element) epilogue. Run one after another, each step streams
the whole input from memory. Run as one loop over rows, with every step's work for row
``r`` done before row ``r + 1`` starts, the input's row is still in the core's cache when
the second step reads it: one pass over memory instead of two or three.

A group is a run of consecutive :class:`Reduce` steps (over trailing axes only) and
:class:`Kernel` steps whose leading dims are all the same row shape ``P``, where every
step reads what an earlier step of the group wrote only inside its own row. This module
decides the groups; the renderer writes them.

What it must not hold: C text.
"""
from __future__ import annotations

import math

from kiln.compiler.lower.index import row_major_strides
from kiln.compiler.lower.program import Kernel, Program, Reduce
from kiln.compiler.lower.walk import walk

# A group needs at least this many rows (its outer loop is the parallel one) and rows
# this long on average (shorter ones gain nothing from staying in cache).
MIN_ROWS = 8
MIN_ROW_ELEMENTS = 64


def loop_shape(step) -> tuple:
    """The shape a Reduce or Kernel step loops over."""
    return tuple(step.in_shape if isinstance(step, Reduce) else step.shape)


def _trailing_start(r: Reduce) -> int:
    nd = len(r.in_shape)
    t0 = nd
    while t0 > 0 and (t0 - 1) in r.axes:
        t0 -= 1
    return t0


def row_count(step) -> int | None:
    """How many rows a group starting at ``step`` has: the product of the kept leading
    dims of a reduction over trailing axes only (others: None)."""
    if not isinstance(step, Reduce) or step.op in ("argmax", "argmin"):
        return None
    t0 = _trailing_start(step)
    if t0 == 0 or t0 == len(step.in_shape) or any(d in step.axes for d in range(t0)):
        return None
    return math.prod(step.in_shape[:t0])


def lead_dims(step, n_rows: int) -> int | None:
    """How many leading loop dims of ``step`` enumerate ``n_rows`` rows in row-major
    order (a step may split or merge the rows' dims differently), or None."""
    if isinstance(step, Reduce):
        return _trailing_start(step) if row_count(step) == n_rows else None
    if not isinstance(step, Kernel) or step.offset is not None:
        return None
    p = 1
    for m, n in enumerate(step.shape):
        if p == n_rows:
            return m
        p *= n
    return len(step.shape) if p == n_rows else None


def _steps_loads(prog: Program, step):
    """(buffer id, Idx) of every load in the step, dynamic-index definitions included."""
    roots = [e for _, e in step.outs] if isinstance(step, Kernel) else [step.body]
    for e in walk(prog, roots):
        if e.kind == "load":
            yield e.params[0], e.params[2].v


def _outputs(step):
    return [b for b, _ in step.outs] if isinstance(step, Kernel) else [step.out]


def _within_row(idx, syms, lead: tuple, row_size: int) -> bool:
    """Whether ``idx`` (over the reading step's loop ``syms``, whose first ``len(lead)``
    enumerate the rows) addresses only the current row of a buffer of ``row_size``
    elements per row."""
    if not idx.is_affine:
        return False
    strides = [st * row_size for st in row_major_strides(lead)]
    prefix = syms[:len(lead)]
    for s, st, n in zip(prefix, strides, lead):
        if n > 1 and idx.coef(s) != st:
            return False
    lo = hi = idx.const
    for s, c in idx.terms:
        if s in prefix:
            continue
        lo += c * (s.lo if c > 0 else s.hi)
        hi += c * (s.hi if c > 0 else s.lo)
    return lo >= 0 and hi < row_size


def row_groups(prog: Program, steps: list) -> list[list]:
    """Split consecutive native ``steps`` into groups (lists); a group of more than one
    step shares one loop over its rows. Order is kept."""
    out: list[list] = []
    i = 0
    while i < len(steps):
        first = steps[i]
        n_rows = row_count(first)
        group = [first]
        if n_rows is not None and n_rows >= MIN_ROWS:
            written = {b.id: b.size // n_rows for b in _outputs(first)}
            read = {bid for bid, _ in _steps_loads(prog, first)}
            j = i + 1
            while j < len(steps):
                step = steps[j]
                m = lead_dims(step, n_rows)
                if m is None:
                    break
                lead = tuple(loop_shape(step)[:m])
                loads = list(_steps_loads(prog, step))
                if not all(_within_row(idx, step.syms, lead, written[bid])
                           for bid, idx in loads if bid in written):
                    break
                outs = _outputs(step)
                if any(b.id in read or b.id in written for b in outs):
                    break
                read |= {bid for bid, _ in loads}
                written.update({b.id: b.size // n_rows for b in outs})
                group.append(step)
                j += 1
            total = sum(math.prod(loop_shape(s)) for s in group)
            if len(group) > 1 and total / len(group) / n_rows < MIN_ROW_ELEMENTS:
                group = [first]
        out.append(group)
        i += len(group)
    return out
