"""Merging elementwise kernels over the same loop into one multi-output kernel.

An optimizer's update is several outputs of one shape computed from the same inputs:
Adam's ``m' = b1*m + (1-b1)*g``, ``v' = b2*v + (1-b2)*g*g`` and ``p' = p - lr*m'/(sqrt(v')+eps)``.
The lowering materializes each program output with its own kernel, and the last one
reads ``m'`` and ``v'`` back from memory: three passes reading 7 arrays and writing 3.
Merged, one loop reads ``p, m, v, g`` once and writes ``p', m', v'``: 7 array passes
instead of 10 on a memory-bound step.

Two top-level :class:`Kernel` steps A, B (B later, with no step between them that
B depends on or that touches what B writes; see :func:`merge_kernels`) merge when they
run the same loop
(same shape and symbols, no offset), B writes nothing A writes and overwrites what A
reads only at the element A reads (an in-place update), every read of
an A output in B is of the element being written (B's read is replaced by A's
expression for it, computed once per element in the merged body), and neither reads
through a dynamic index (gather-style indices are defined program-wide, so a read
inside one could not be replaced). At most ``MAX_OUTPUTS`` outputs per kernel. The
same merging runs inside loop bodies and branches (a ``fori_loop`` training step's
optimizer update: ``mnist_vae``'s momentum step read 7 arrays and wrote 2 per weight,
now 5 in one pass).

What it must not hold: C text, buffer planning (``plan_buffers.py`` runs after this).
"""
from __future__ import annotations

from kiln.compiler.lower.program import Kernel, Program, nested_steps
from kiln.compiler.lower.walk import idx_deps, idx_of, same_element, step_buffer_ids, walk

MAX_OUTPUTS = 8
LOOK_BACK = 24


def _same_loop(a: Kernel, b: Kernel) -> bool:
    return (a.offset is None and b.offset is None and tuple(a.shape) == tuple(b.shape)
            and [(s.name, s.lo, s.hi) for s in a.syms] == [(s.name, s.lo, s.hi) for s in b.syms])


def _dynamic(prog: Program, nodes) -> bool:
    """Whether any node indexes through a symbol defined by an expression."""
    return any(s.name in prog.sym_defs for e in nodes for idx in idx_of(e)
               for s in idx_deps(idx))


def _rebuild(table, e, subst: dict, memo: dict):
    """``e`` with the nodes in ``subst`` (uid -> node) replaced, re-interned in ``table``."""
    hit = memo.get(e.uid)
    if hit is not None:
        return hit
    if e.uid in subst:
        out = subst[e.uid]
    elif not e.args:
        out = e
    else:
        args = tuple(_rebuild(table, a, subst, memo) for a in e.args)
        if all(x is y for x, y in zip(args, e.args)):
            out = e
        else:
            out = table._make(e.kind, e.dtype, args, e.params, e.cost)
            src = table.source.get(e.uid)
            if src is not None:
                table.source.setdefault(out.uid, src)
    memo[e.uid] = out
    return out


def _try_merge(prog: Program, table, a: Kernel, b: Kernel) -> Kernel | None:
    if not _same_loop(a, b) or len(a.outs) + len(b.outs) > MAX_OUTPUTS:
        return None
    a_nodes = walk(prog, [e for _, e in a.outs])
    b_nodes = walk(prog, [e for _, e in b.outs])
    if _dynamic(prog, a_nodes) or _dynamic(prog, b_nodes):
        return None
    a_writes = {buf.id: e for buf, e in a.outs}
    b_writes = {buf.id for buf, _ in b.outs}
    if b_writes & set(a_writes):
        return None
    # B may overwrite what A reads only element for element (an in-place update such as
    # a momentum step's ``v' = mass*v + g`` after ``x' = x - lr*(mass*v + g)``): in the
    # merged loop A's read of an element comes before B's store to it.
    for e in a_nodes:
        if e.kind == "load" and e.params[0] in b_writes and not same_element(a, e):
            return None
    subst = {}
    for e in b_nodes:
        if e.kind == "load" and e.params[0] in a_writes:
            if not same_element(b, e):
                return None
            subst[e.uid] = a_writes[e.params[0]]
    memo: dict = {}
    outs = list(a.outs) + [(buf, _rebuild(table, e, subst, memo)) for buf, e in b.outs]
    return Kernel(tuple(a.shape), list(a.syms), outs, f"{a.name}+{b.name}")


def _reads_writes(prog: Program, k: Kernel) -> tuple[set, set]:
    reads = {e.params[0] for e in walk(prog, [e for _, e in k.outs]) if e.kind == "load"}
    return reads, {buf.id for buf, _ in k.outs}


def merge_kernels(prog: Program, table) -> int:
    """Merge kernels of ``prog``'s top level in place (see the module doc); ``table`` is
    the program's :class:`~.expr.ExprTable`. Returns the merges made.

    A kernel B merges into the nearest earlier kernel A (at most ``LOOK_BACK`` steps back)
    it can merge with, taking A's place, when no step between them touches a buffer B
    writes or writes one B reads (temporaries and outputs: inputs and constants are
    never written). Optax updates a pytree leaf by leaf (all ``m``, then all ``v``, then
    the parameters), so one parameter's kernels are several steps apart."""
    if table is None:
        return 0
    fixed = {b.id for b in prog.inputs} | {b.id for b, _ in prog.consts}
    merged = _merge_steps(prog, table, prog.steps, fixed)
    if merged:
        _drop_dead_outputs(prog)
    return merged


def _merge_steps(prog: Program, table, steps: list, fixed: set) -> int:
    """Merge within one step list (the program's, or a loop body's or branch's: the
    same rules hold inside one iteration), then inside the loops and branches in it."""
    merged = 0
    j = 1
    while j < len(steps):
        b = steps[j]
        if not isinstance(b, Kernel) or b.offset is not None:
            j += 1
            continue
        b_reads, b_writes = _reads_writes(prog, b)
        touchy = (b_reads | b_writes) - fixed
        done = False
        for i in range(j - 1, max(-1, j - 1 - LOOK_BACK), -1):
            a = steps[i]
            if isinstance(a, Kernel):
                m = _try_merge(prog, table, a, b)
                if m is not None:
                    src = prog.step_source.get(id(a)) or prog.step_source.get(id(b))
                    if src is not None:
                        prog.step_source[id(m)] = src
                    steps[i] = m
                    del steps[j]
                    merged += 1
                    done = True
                    break
            if step_buffer_ids(prog, a) & touchy:
                break
        if not done:
            j += 1
    for step in steps:
        for inner in nested_steps(step):
            merged += _merge_steps(prog, table, inner, fixed)
    return merged


def _drop_dead_outputs(prog: Program):
    """Drop the outputs of merged kernels that nothing reads any more: a value stored
    for its consumers (the cost rule) whose consumers all merged into its kernel, which
    then computes it in place (a GELU gradient's 8x128x1024 term was still written to a
    buffer no step read). Temporaries only; program outputs and every buffer another
    step (or the kernel itself) reads are kept."""
    steps = prog.steps
    keep = {o[1].id for o in prog.outputs if o[0] == "buf"}
    touched = [step_buffer_ids(prog, s) for s in steps]
    users: dict = {}
    for ids in touched:
        for b in ids:
            users[b] = users.get(b, 0) + 1
    for i, k in enumerate(steps):
        if not isinstance(k, Kernel) or len(k.outs) < 2:
            continue
        reads, _ = _reads_writes(prog, k)
        live = [(buf, e) for buf, e in k.outs
                if buf.kind != "tmp" or buf.id in keep or buf.id in reads
                or users.get(buf.id, 0) > 1]
        if live and len(live) < len(k.outs):
            steps[i] = Kernel(tuple(k.shape), list(k.syms), live, k.name, k.offset, k.strides)
            src = prog.step_source.get(id(k))
            if src is not None:
                prog.step_source[id(steps[i])] = src
