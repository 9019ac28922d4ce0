"""Buffer planning: intermediates whose lifetimes do not overlap share memory.

A program's temporaries (``tmp`` buffers) are kept in a pool across calls, all at once.
Here each gets a *slot*: a temporary is live from the first top-level step that uses
it to the last (a loop or branch counts as one step, with everything inside it), and
two temporaries whose live ranges are disjoint may share a slot, sized for the larger.
Only temporaries of at least ``MIN_SHARED_BYTES`` take part (small ones cost nothing).

Buffers sharing a slot are declared without ``restrict`` in the generated C (the
compiler must not assume they never alias); the executable allocates one block per slot
and views it with each buffer's dtype and shape.

What it must not hold: C text, allocation (``executable.py``).
"""
from __future__ import annotations

from kiln.compiler.program import Island, Program

MIN_SHARED_BYTES = 1 << 16


def _buffers_of(prog: Program, step) -> set:
    from kiln.compiler.render_c import _step_buffers
    if isinstance(step, Island):
        ids = {b.id for b in step.outs}
        ids |= {x[0].id for x in step.ins if not isinstance(x[0], str)}
        return ids
    return {b.id for b in _step_buffers(prog, step)}


def plan(prog: Program) -> dict:
    """``{buffer id: slot}`` for the temporaries that share memory (a slot shared by at
    least two buffers); slots are numbered from 0. Also sets ``prog.slots``."""
    first: dict = {}
    last: dict = {}
    for i, step in enumerate(prog.steps):
        for bid in _buffers_of(prog, step):
            first.setdefault(bid, i)
            last[bid] = i
    outputs = {o[1].id for o in prog.outputs if o[0] == "buf"}
    cands = [b for b in prog.buffers if b.kind == "tmp" and b.id in first
             and b.nbytes >= MIN_SHARED_BYTES and b.id not in outputs]
    cands.sort(key=lambda b: (first[b.id], -b.nbytes))
    slots: list = []            # [free from step index, members]
    where: dict = {}
    for b in cands:
        best = None
        for k, (free_at, members) in enumerate(slots):
            if free_at < first[b.id]:
                size = max(prog.buffers[m].nbytes for m in members)
                # Prefer the slot whose size is closest to this buffer's.
                score = abs(size - b.nbytes)
                if best is None or score < best[0]:
                    best = (score, k)
        if best is None:
            slots.append([last[b.id], [b.id]])
            where[b.id] = len(slots) - 1
        else:
            k = best[1]
            slots[k][0] = last[b.id]
            slots[k][1].append(b.id)
            where[b.id] = k
    shared = {}
    numbering: dict = {}
    for bid, k in where.items():
        if len(slots[k][1]) > 1:
            shared[bid] = numbering.setdefault(k, len(numbering))
    prog.slots = shared
    return shared
