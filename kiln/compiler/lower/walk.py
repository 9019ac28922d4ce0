"""Graph queries over a lowered :class:`~kiln.compiler.lower.program.Program`: the nodes
reachable from a step's roots (dynamic-index definitions included) and the buffers a step
reads or writes. Used by the lowering's own passes (control flow, kernel merging, buffer
planning) and by the renderer.
"""
from __future__ import annotations

from kiln.compiler.lower.expr import SExpr
from kiln.compiler.lower.index import Idx, flat_index
from kiln.compiler.lower.program import (
    Branch,
    Conv,
    Gemm,
    Island,
    Kernel,
    Loop,
    Program,
    Scatter,
    nested_steps,
)


def step_buffers(prog: Program, step):
    if isinstance(step, Island):
        bufs = {x[0].id: x[0] for x in step.ins if not isinstance(x[0], str)}
        bufs.update((b.id, b) for b in step.outs)
        return list(bufs.values())
    if isinstance(step, Gemm):
        return [step.a, step.b, step.out]
    if isinstance(step, Conv):
        bufs = {step.w.id: step.w, step.out.id: step.out}
        for e in walk(prog, [step.col]):
            if e.kind == "load":
                bufs.setdefault(e.params[0], prog.buffers[e.params[0]])
        return list(bufs.values())
    if isinstance(step, (Loop, Branch)):
        bufs = {}
        roots = [step.pred] if isinstance(step, Loop) and step.pred is not None else []
        if isinstance(step, Branch):
            roots = [step.index]
        for e in walk(prog, roots):
            if e.kind == "load":
                bufs.setdefault(e.params[0], prog.buffers[e.params[0]])
        for steps in nested_steps(step):
            for s in steps:
                for b in step_buffers(prog, s):
                    bufs.setdefault(b.id, b)
        return list(bufs.values())
    bufs = {}
    roots = [e for _, e in step.outs] if isinstance(step, Kernel) else [step.body]
    outs = [b for b, _ in step.outs] if isinstance(step, Kernel) else [step.out]
    if isinstance(step, Scatter):     # the index arrays behind the target position
        idxs = [step.target] + [cl[1] for cl in step.cond.clauses if len(cl) > 1]
        roots += [prog.sym_defs[s.name][1] for i in idxs for s in idx_deps(i)
                  if s.name in prog.sym_defs]
    for b in outs:
        bufs[b.id] = b
    for e in walk(prog, roots):
        if e.kind == "load":
            bufs.setdefault(e.params[0], prog.buffers[e.params[0]])
    return list(bufs.values())


def step_buffer_ids(prog: Program, step) -> set:
    """The ids of the buffers ``step`` reads or writes (an island's operands and results;
    a kernel's, scan's, ... as :func:`step_buffers`)."""
    if isinstance(step, Island):
        ids = {b.id for b in step.outs}
        ids |= {x[0].id for x in step.ins if not isinstance(x[0], str)}
        return ids
    return {b.id for b in step_buffers(prog, step)}


def walk(prog: Program, roots):
    """All nodes reachable from ``roots``, including dynamic-index definitions."""
    seen = set()
    stack = list(roots)
    out = []
    while stack:
        e = stack.pop()
        if e.uid in seen:
            continue
        seen.add(e.uid)
        out.append(e)
        stack.extend(e.args)
        for idx in idx_of(e):
            for s in idx_deps(idx):
                d = prog.sym_defs.get(s.name)
                if d is not None:
                    stack.append(d[1])
    return out


def idx_of(e: SExpr):
    if e.kind == "load":
        return [e.params[2].v]
    if e.kind == "index":
        return [e.params[1].v]
    if e.kind == "where":
        return [x for cl in e.params[1].v.clauses for x in cl[1:2]]
    return []


def loop_dependent(prog: Program, defn: SExpr) -> bool:
    """Whether a dynamic index's definition reads at positions that vary with the loop
    (a loop symbol, i.e. one without a definition of its own, among its index deps)."""
    for e in walk(prog, [defn]):
        for idx in idx_of(e):
            if any(s.name not in prog.sym_defs for s in idx_deps(idx)):
                return True
    return False


def same_element(kern, load) -> bool:
    """Whether the ``load`` node reads, at each point of ``kern``'s loop, the element that
    ``kern`` stores there (a scalar kernel's one element always)."""
    if all(int(d) == 1 for d in kern.shape):
        return True     # one element (a scalar): every in-bounds load reads the stored one
    store = flat_index([Idx.sym(s) for s in kern.syms], kern.shape)
    return load.params[1] == store.key()


def idx_deps(idx) -> frozenset:
    return idx.deps
