"""Graph queries over a lowered :class:`~kiln.compiler.lower.program.Program`: the nodes
reachable from a step's roots (dynamic-index definitions included) and the buffers a step
reads or writes. Used by the lowering's own passes (control flow, kernel merging, buffer
planning) and by the renderer.
"""
from __future__ import annotations

from kiln.compiler.lower.expr import SExpr
from kiln.compiler.lower.program import (
    Branch,
    Conv,
    Gemm,
    Kernel,
    Loop,
    Program,
    Scatter,
    nested_steps,
)


def step_buffers(prog: Program, step):
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


def idx_deps(idx) -> frozenset:
    return idx.deps
