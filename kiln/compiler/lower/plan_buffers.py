"""Buffer planning: intermediates whose lifetimes do not overlap share memory.

A program's temporaries (``tmp`` buffers) are kept in a pool across calls, all at once.
Here each gets a *slot*: a temporary is live from the first top-level step that uses
it to the last (a loop or branch counts as one step, with everything inside it), and
two temporaries whose live ranges are disjoint may share a slot, sized for the larger.
Only temporaries of at least ``MIN_SHARED_BYTES`` take part (small ones cost nothing).

A scatter or ``dynamic_update_slice`` whose operand is a temporary that dies with it
writes into the operand's memory (``alias_dead_operands``): no copy of the array.

An output paired with a donated input may be written into the input's memory when the
program allows it (``writes_into_input``; the run-time ownership check is
``kiln.donation.reusable``).

Buffers sharing a slot are declared without ``restrict`` in the generated C (the
compiler must not assume they never alias); the executable allocates one block per slot
and views it with each buffer's dtype and shape.

What it must not hold: C text, allocation (``executable.py``).
"""
from __future__ import annotations

from kiln.compiler.lower.program import Island, Program
from kiln.compiler.lower.walk import same_element as _same_element  # (render imports it here)
from kiln.compiler.lower.walk import step_buffer_ids as _buffers_of
from kiln.compiler.lower.walk import walk

MIN_SHARED_BYTES = 1 << 16


def alias_dead_operands(prog: Program) -> dict:
    """Scatters and ``dynamic_update_slice``s whose operand dies with them write into
    the operand's memory: the kernel copying the operand into the result is dropped and
    the result buffer is made an alias of the operand (``{result id: operand id}``).

    The pattern (top-level steps): a Kernel copying temporary ``X`` element for element
    into temporary ``T``, then a Scatter into ``T`` that does not read ``X``, and no
    later step touching ``X``."""
    from kiln.compiler.lower.program import Kernel, Scatter
    aliases: dict = {}
    outputs = {o[1].id for o in prog.outputs if o[0] == "buf"}
    # An island's result is an array the island returned (maybe shared with other
    # devices, see kiln.parallel): never written in place.
    outputs |= {b.id for s in prog.steps if isinstance(s, Island) for b in s.outs}
    steps = prog.steps
    j = 1
    while j < len(steps):
        copy, sc = steps[j - 1], steps[j]
        ok = (isinstance(sc, Scatter) and isinstance(copy, Kernel) and copy.offset is None
              and len(copy.outs) == 1 and copy.outs[0][0] is sc.out)
        if ok:
            t, e = sc.out, copy.outs[0][1]
            ok = e.kind == "load" and t.kind == "tmp" and t.id not in outputs
        if ok:
            x = prog.buffers[e.params[0]]
            ok = (x.kind == "tmp" and x.id not in outputs and x.dtype == t.dtype
                  and x.size == t.size and x.id not in aliases.values()
                  and x.id not in aliases and _same_element(copy, e)
                  and x.id not in _buffers_of(prog, sc)
                  and not any(x.id in _buffers_of(prog, later) for later in steps[j + 1:]))
        if ok:
            aliases[t.id] = x.id
            del steps[j - 1]
            continue
        j += 1
    return aliases


def plan(prog: Program) -> dict:
    """``{buffer id: slot}`` for the temporaries that share memory (a slot shared by at
    least two buffers, or a result aliasing its dead operand); slots are numbered from
    0. Also sets ``prog.slots``."""
    # First: a product storing into its copy's destination changes both lifetimes.
    from kiln.compiler.lower.gemm_store import store_products_in_place
    store_products_in_place(prog)
    aliases = alias_dead_operands(prog)
    # After the aliasing (it looks for a copy kernel on its own before a scatter), before
    # the lifetimes: a merged kernel is one step.
    from kiln.compiler.lower.merge_kernels import merge_kernels
    merge_kernels(prog, prog.table)
    # After the merges (they need the kernels' original loops): loops split where
    # reshape arithmetic divides a loop index, so their inner loops vectorize.
    from kiln.compiler.lower.refine_loops import refine_loops
    refine_loops(prog, prog.table)
    first: dict = {}
    last: dict = {}
    for i, step in enumerate(prog.steps):
        for bid in _buffers_of(prog, step):
            bid = aliases.get(bid, bid)         # an alias lives as its operand
            first.setdefault(bid, i)
            last[bid] = i
    outputs = {o[1].id for o in prog.outputs if o[0] == "buf"}
    cands = [b for b in prog.buffers if b.kind == "tmp" and b.id in first
             and b.id not in aliases
             and (b.nbytes >= MIN_SHARED_BYTES or b.id in aliases.values())
             and b.id not in outputs]
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
    aliased = set(aliases.values())
    for bid, k in where.items():
        if len(slots[k][1]) > 1 or bid in aliased:
            shared[bid] = numbering.setdefault(k, len(numbering))
    for t, x in aliases.items():
        shared[t] = shared[x]
    prog.slots = shared
    return shared


def writes_into_input(prog: Program, k: int, j: int):
    """The id of output ``j``'s buffer when it can be written into input ``k``'s memory,
    else None.

    It can when the first top-level step touching the output is a Kernel (no offset)
    in which the input is read only at the element being written and only by nodes of
    the output's own expression (other outputs of a merged kernel may share those
    nodes: each element is read once, before it is overwritten, whatever the loop order
    or threads), the input is not itself returned, and no later step reads the input."""
    from kiln.compiler.lower.program import Kernel
    if j >= len(prog.outputs) or k >= len(prog.inputs):
        return None
    o = prog.outputs[j]
    if o[0] != "buf" or o[1].kind != "out":
        return None
    out, x = o[1], prog.inputs[k]
    if x.dtype != out.dtype or x.size != out.size:
        return None
    if any(p[0] == "in" and p[1] == k for p in prog.outputs):
        return None
    steps = prog.steps
    first = next((i for i, s in enumerate(steps) if out.id in _buffers_of(prog, s)), None)
    if first is None:
        return None
    kern = steps[first]
    if not isinstance(kern, Kernel) or kern.offset is not None:
        return None
    own = next(e for buf, e in kern.outs if buf is out)
    own_nodes = {n.uid for n in walk(prog, [own])}
    for _buf, e in kern.outs:
        for n in walk(prog, [e]):
            if n.kind != "load" or n.params[0] != x.id:
                continue
            # Another output may read the input only through a node of this output's
            # own expression (merged kernels: Adam's p' reads m' = f(m)): the load is
            # computed once per element, before this output's store, which needs it.
            if not _same_element(kern, n) or n.uid not in own_nodes:
                return None
    for later in steps[first + 1:]:
        if x.id in _buffers_of(prog, later) and not _reads_own_targets(prog, later, x, out):
            return None
    return out.id


def _reads_own_targets(prog: Program, step, x, out) -> bool:
    """Whether ``step`` is a Scatter into ``out`` that reads ``x`` only at the element it
    is about to update, with distinct targets (``x.at[i].add(1)`` lowered as a slice, an
    add and a ``dynamic_update_slice``): with ``out`` in ``x``'s memory, each element is
    then read before it is overwritten, so the result is the same."""
    from kiln.compiler.lower.program import Scatter
    if not isinstance(step, Scatter) or step.out is not out:
        return False
    key = step.target.key()
    if not _injective(key, step.syms):
        return False
    loads = [n for n in walk(prog, [step.body]) if n.kind == "load" and n.params[0] == x.id]
    return all(n.params[1] == key for n in loads)


def _injective(key, syms) -> bool:
    """Whether the affine index ``key`` (``('a', ((sym, coeff), ...), const, ranges)``,
    :meth:`~.index.Idx.key`) takes distinct values over the box of ``syms``: each symbol
    once, and each coefficient larger than the span of the smaller ones (mixed radix)."""
    if not (isinstance(key, tuple) and len(key) == 4 and key[0] == "a"):
        return False
    span = {s.name: s.hi - s.lo for s in syms}
    terms = key[1]
    names = [t[0] for t in terms]
    if len(set(names)) != len(names) or set(names) - set(span):
        return False
    if any(span[n] > 0 for n in set(span) - set(names)):
        return False        # a symbol the target ignores: several updates of one element
    reach = 0
    for name, coeff in sorted(terms, key=lambda t: abs(t[1])):
        if span[name] == 0:
            continue
        if abs(coeff) <= reach:
            return False
        reach += abs(coeff) * span[name]
    return True
