"""Lowering of control flow: ``while``, ``scan`` (``fori_loop`` is one or the other) and
``cond`` become native loops and branches around their bodies' fused steps.

A loop's carry lives in buffers of its own. Before the loop, a kernel copies each
initial value in. Each iteration lowers to the body's steps reading the carry buffers;
the new carry values are written to fresh buffers (the body may still read the old ones
while computing them), then copied over the carry at the end of the iteration. Values
that do not change (a carry passed through) are not copied. A ``cond`` whose branches
either pass a carry through or scatter into a copy of it writes the carry in place (no
copy of the whole carry per step; NumPyro's ``fori_collect``).

``scan``'s inputs ``xs`` are never sliced: the body reads ``xs[counter, ...]`` by index
arithmetic, the loop counter being a symbol of the index expressions like any loop
variable. Its stacked outputs ``ys`` are written in place, ``ys[counter, ...]``, by
kernels with an offset.

A loop or branch is native only when everything in its bodies is (after the bodies
are optimised like the program: nested calls inlined); otherwise it stays a host
island, run by the reference implementation as before.

What it must not hold: C text (``render_c.py``).
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.lower import lower as _lower
from kiln.compiler.lower.index import Idx
from kiln.compiler.lower.program import Branch, Island, Loop
from kiln.compiler.lower.walk import idx_of, step_buffers, walk

CONTROL = ("while", "scan", "cond")

_optimized: dict = {}


def _optimize(closed):
    """A body optimised as programs are (cached per body object)."""
    hit = _optimized.get(id(closed))
    if hit is not None and hit[0] is closed:
        return hit[1]
    from kiln.compiler.passes.passes import optimize
    out = optimize(closed)
    if len(_optimized) > 512:
        _optimized.clear()
    _optimized[id(closed)] = (closed, out)
    return out


def bodies(eqn) -> list:
    """The closed jaxprs of a control-flow equation, optimised."""
    p = eqn.params
    name = eqn.primitive.name
    if name == "while":
        return [_optimize(p["cond_jaxpr"]), _optimize(p["body_jaxpr"])]
    if name == "scan":
        return [_optimize(p["jaxpr"])]
    return [_optimize(b) for b in p["branches"]]


def is_native(eqn) -> bool:
    """Whether a control-flow equation compiles natively: every equation of its bodies
    does (recursively) and no value has a dtype the C code lacks."""
    from kiln.compiler.lower import linalg as lower_linalg
    from kiln.compiler.lower.host_calls import host_callable
    from kiln.compiler.lower.lower import NATIVE_DTYPES, _is_native
    for v in list(eqn.invars) + list(eqn.outvars):
        if np.dtype(v.aval.dtype) not in NATIVE_DTYPES:
            return False
    if eqn.primitive.name == "cond" and np.dtype(eqn.invars[0].aval.dtype).kind not in "iub":
        return False
    for closed in bodies(eqn):
        for v in list(closed.jaxpr.invars) + list(closed.jaxpr.outvars):
            if np.dtype(v.aval.dtype) not in NATIVE_DTYPES:
                return False
        # Small cholesky/triangular_solve are expanded in bodies (lower_linalg); other
        # equations without a native lowering are called back for (host_calls).
        if not all(_is_native(e) or lower_linalg.expandable(e) or host_callable(e)
                   for e in closed.jaxpr.eqns):
            return False
    return True


def lower_eqn(ctx, eqn, ins) -> list:
    name = eqn.primitive.name
    if name == "while":
        return _while(ctx, eqn, ins)
    if name == "scan":
        return _scan(ctx, eqn, ins)
    return _cond(ctx, eqn, ins)


def _invariant(ctx, node):
    """A value read by every iteration: stored once before the loop when recomputing it
    would cost more than reading it."""
    from kiln.compiler.lower.lower import CHEAP, LazyNode
    if isinstance(node, LazyNode) and node.cost > CHEAP:
        return ctx.materialize(node)
    return node


def _carry_buffers(ctx, avals, init) -> list:
    from kiln.compiler.lower.lower import BufNode
    bufs = []
    for aval, x in zip(avals, init):
        buf = ctx.prog.new_buffer(aval.shape, aval.dtype, "tmp")
        ctx.write_into(_converted(ctx, x, aval.dtype), buf)
        bufs.append(buf)
    return bufs, [BufNode(ctx, b) for b in bufs]


def _converted(ctx, node, dtype):
    """``node`` as ``dtype`` (body outputs and operands agree on dtypes in valid jaxprs;
    weak-typed literals may still come as another width)."""
    from kiln.compiler.lower.lower import LazyNode
    dtype = np.dtype(dtype)
    if node.dtype == dtype:
        return node
    table = ctx.table
    return LazyNode(node.shape, dtype,
                    lambda idxs: table.op("convert_element_type", dtype, node.read(idxs)),
                    None, node.cost + 1)


def _update_carry(ctx, steps: list, carry: list, outs: list, before_commit=None) -> None:
    """Make ``outs`` the loop's new carry, at the end of the body (``steps``).

    Each changed value is first written to a buffer of its own, since the body's other
    steps (and ``before_commit``: a scan's ``ys`` writes) still read the old carry;
    then copied over the carry. A value computed elementwise from its own carry buffer
    (``c * 0.9 + x``) is instead written in place, after everything else has read the
    old carry: its kernel moves to the end of the body, and there is nothing to copy.
    """
    from kiln.compiler.lower.lower import BufNode
    carry_ids = {b.id for b in carry}
    pending = []            # (carry buffer, kernel writing the new value or None, source)
    for buf, node in zip(carry, outs):
        node = _converted(ctx, node, buf.dtype)
        if isinstance(node, BufNode) and node.buf is buf:
            continue                          # passed through unchanged
        if isinstance(node, BufNode) and node.buf.id not in carry_ids \
                and node.buf.size == buf.size:
            pending.append((buf, None, node))
            continue
        nxt = ctx.prog.new_buffer(buf.shape, buf.dtype, "tmp")
        pending.append((buf, ctx.write_into(node, nxt), BufNode(ctx, nxt)))
    if before_commit is not None:
        before_commit()
    # Candidates for an update in place: carry buffer id -> (moved steps, buffers read).
    cand: dict = {}
    in_branch: dict = {}    # carry buffer id -> edits making a cond write it in place
    for buf, kern, src in pending:
        if kern is None:
            # A scatter / dynamic_update_slice of the old carry (``c.at[i].set(v)``):
            # scatter straight into the carry, with no copy of the whole array.
            sc = _scatter_of_copy(ctx.prog, steps, src.buf, buf)
            if sc is not None:
                r = _reads_of(ctx.prog, sc[1]) - {src.buf.id}
                if buf.id not in r:
                    cand[buf.id] = (sc, r)
            else:
                plan = _branch_in_place(ctx.prog, steps, src.buf, buf)
                if plan is not None:
                    in_branch[buf.id] = plan
            continue
        loads = _loads(ctx.prog, kern)
        if _elementwise_on(kern, buf, loads):
            cand[buf.id] = ((kern,), {bid for bid, _ in loads} - {buf.id})
    order = _reader_first_order(cand)
    # A cond output that is the carry passed through or scattered into (NumPyro's
    # ``fori_collect``: ``cond(i >= 0, lambda c: c.at[i].set(v), lambda c: c, c)``) is
    # written by the branch into the carry itself, where the branch stands; the updates
    # moved to the end of the body must then not read that carry.
    moved_reads = set().union(*(cand[b][1] for b in order)) if order else set()
    for bid, edits in in_branch.items():
        if bid in moved_reads:
            continue
        _apply_branch_edits(edits, ctx.prog.buffers[bid])
        order.append(bid)
    for bid in order:
        if bid not in cand:
            continue
        moved = cand[bid][0]
        carry_buf = ctx.prog.buffers[bid]
        for st in moved:
            steps.remove(st)
        if len(moved) == 2:
            scatter = moved[1]
            scatter.out = carry_buf
            steps.append(scatter)
        else:
            (kern,) = moved
            kern.outs = [(carry_buf, kern.outs[0][1])]
            steps.append(kern)
    for buf, _, src in pending:
        if buf.id not in order:
            ctx.write_into(src, buf)


def _reader_first_order(cand: dict) -> list:
    """An order of the in-place updates in which each runs before those whose carry it
    reads (so it sees the old values); updates on a cycle of such reads are dropped
    (they keep their copy)."""
    live = dict(cand)
    while True:
        order, done = [], set()
        pending = set(live)
        progress = True
        while pending and progress:
            progress = False
            for bid in sorted(pending):
                # bid may run once every live update reading bid's carry has run.
                if all(other in done for other in live
                       if other != bid and bid in live[other][1]):
                    order.append(bid)
                    done.add(bid)
                    pending.discard(bid)
                    progress = True
        if not pending:
            return order
        live.pop(min(pending))          # break a cycle: that one is copied instead


def _reads_of(prog, step) -> set:
    return {b.id for b in step_buffers(prog, step)}


def _scatter_of_copy(prog, steps: list, tmp, carry_buf, reader=None):
    """(copy kernel, scatter) when ``tmp`` is made in ``steps`` by a kernel copying
    ``carry_buf`` element for element and then one Scatter into it, and no other step
    (but ``reader``) touches ``tmp``; else None."""
    from kiln.compiler.lower.program import Kernel, Scatter, walk_steps
    found = [j for j, s in enumerate(steps) if isinstance(s, Scatter) and s.out is tmp]
    if len(found) != 1 or found[0] == 0:
        return None
    j = found[0]
    copy, scatter = steps[j - 1], steps[j]
    if not isinstance(copy, Kernel) or len(copy.outs) != 1 or copy.outs[0][0] is not tmp:
        return None
    e = copy.outs[0][1]
    if e.kind != "load" or e.params[0] != carry_buf.id:
        return None
    if not _elementwise_on(copy, carry_buf, [(e.params[0], e.params[1])]):
        return None
    for s in walk_steps(steps):
        if s is not copy and s is not scatter and s is not reader and \
                tmp.id in _reads_of(prog, s):
            return None
    return copy, scatter


def _copy_source(prog, kern, out):
    """The buffer ``kern`` copies element for element into all of ``out``, or None."""
    from kiln.compiler.lower.program import Kernel
    if not isinstance(kern, Kernel) or len(kern.outs) != 1 or kern.outs[0][0] is not out:
        return None
    e = kern.outs[0][1]
    if e.kind != "load":
        return None
    src = prog.buffers[e.params[0]]
    if src.size != out.size or not _elementwise_on(kern, src, [(e.params[0], e.params[1])]):
        return None
    return src


def _branch_in_place(prog, steps: list, out, carry_buf):
    """Edits that make the ``cond`` writing ``out`` (the loop's new ``carry_buf``) write
    the carry in place, or None. Each branch must end its work on ``out`` by one copy
    into it, either of ``carry_buf`` itself (passed through: the copy goes) or of a
    temporary made as a copy of ``carry_buf`` and one scatter (the scatter then targets
    the carry; both copies go). Nothing else in the branch may touch the carry or
    ``out``; nothing else in the body may touch ``out``, nor the carry after the cond."""
    from kiln.compiler.lower.program import Branch, walk_steps
    js = [j for j, s in enumerate(steps) if isinstance(s, Branch)
          and any(_writes(t, out) for br in s.branches for t in walk_steps(br))]
    if len(js) != 1:
        return None
    j = js[0]
    for k, s in enumerate(steps):
        if k != j:
            ids = _reads_of(prog, s)
            if out.id in ids or (k > j and carry_buf.id in ids):
                return None
    edits = []
    for br in steps[j].branches:
        ws = [t for t in br if _writes(t, out)]
        if len(ws) != 1 or any(_writes(t, out) for t in walk_steps(br) if t is not ws[0]):
            return None
        w = ws[0]
        src = _copy_source(prog, w, out)
        if src is None:
            return None
        if src is carry_buf:
            keep = ()
            gone = (w,)
        else:
            sc = _scatter_of_copy(prog, br, src, carry_buf, reader=w)
            if sc is None or carry_buf.id in _reads_of(prog, sc[1]) - {src.id}:
                return None
            keep = (sc[1],)
            gone = (sc[0], w)
        touched = (carry_buf.id, out.id)
        for t in walk_steps(br):
            if all(t is not x for x in keep + gone) and \
                    any(b in _reads_of(prog, t) for b in touched):
                return None
        edits.append((br, gone, keep))
    return edits


def _apply_branch_edits(edits, carry_buf) -> None:
    for br, gone, keep in edits:
        for st in gone:
            br.remove(st)
        for scatter in keep:
            scatter.out = carry_buf


def _loads(prog, kern) -> list:
    """(buffer id, index key) of every load of a kernel, index definitions included."""
    return [(e.params[0], e.params[1]) for e in walk(prog, [e for _, e in kern.outs])
            if e.kind == "load"]


def _elementwise_on(kern, buf, loads) -> bool:
    """Whether ``kern`` reads ``buf`` only at the very element it stores."""
    from kiln.compiler.lower.index import flat_index
    if kern.offset is not None or len(kern.outs) != 1:
        return False
    if buf.size == 1:
        return True             # one element: read (at any index) before it is written
    store = flat_index([Idx.sym(s) for s in kern.syms], kern.shape)
    mine = [key for bid, key in loads if bid == buf.id]
    return all(key == store.key() for key in mine)


def _while(ctx, eqn, ins):
    from kiln.compiler.lower.lower import BufNode, lower_nested
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cconsts = [_invariant(ctx, x) for x in ins[:cn]]
    bconsts = [_invariant(ctx, x) for x in ins[cn:cn + bn]]
    cond_closed, body_closed = bodies(eqn)
    carry, nodes = _carry_buffers(ctx, [v.aval for v in eqn.outvars], ins[cn + bn:])
    with ctx.capture() as cond_steps:
        (pred_node,) = lower_nested(ctx, cond_closed, cconsts + nodes)
        pred = pred_node.read([])
    with ctx.capture() as body:
        outs = lower_nested(ctx, body_closed, bconsts + nodes)
        _update_carry(ctx, body, carry, outs)
    ctx.prog.steps.append(Loop("while", body, cond_steps, pred, name=ctx.kernel_name("w")))
    return [BufNode(ctx, b) for b in carry]


def _scan(ctx, eqn, ins):
    from kiln.compiler.lower.lower import BufNode, LazyNode, _size, lower_nested
    p = eqn.params
    nc, ncar, length = p["num_consts"], p["num_carry"], int(p["length"])
    (body_closed,) = bodies(eqn)
    consts = [_invariant(ctx, x) for x in ins[:nc]]
    carry, nodes = _carry_buffers(ctx, [v.aval for v in eqn.outvars[:ncar]],
                                  ins[nc:nc + ncar])
    counter = ctx.new_loop_sym(length)
    at = Idx.sym(counter)

    def x_slice(x):
        inner = _size(x.shape[1:])

        def read(idxs):
            return x.read([at] + list(idxs))

        read_flat = None
        if isinstance(x, BufNode) or getattr(x, "_read_flat", None) is not None:
            def read_flat(flat):
                return x.read_flat(flat + at * inner)
        return LazyNode(x.shape[1:], x.dtype, read, read_flat, x.cost)

    xs = [x_slice(x) for x in ins[nc + ncar:]]
    y_avals = [v.aval for v in eqn.outvars[ncar:]]
    ys: list = [None] * len(y_avals)
    invariant: dict = {}        # y index -> node computing it from values outside the loop
    with ctx.capture() as body:
        outs = lower_nested(ctx, body_closed, consts + nodes + xs)
        for k, node in enumerate(outs[ncar:]):
            if length > 0 and _loop_invariant(ctx, node, body, carry, counter):
                # The same value every iteration (a residual such as a transposed
                # weight): stored once, read back for every index of the stack.
                invariant[k] = _converted(ctx, node, y_avals[k].dtype)
            else:
                ys[k] = ctx.prog.new_buffer(y_avals[k].shape, y_avals[k].dtype, "tmp")

        def write_ys():
            for buf, node in zip(ys, outs[ncar:]):
                if buf is not None:
                    inner = _size(buf.shape[1:])
                    ctx.write_into(_converted(ctx, node, buf.dtype), buf, at * inner)
        _update_carry(ctx, body, carry, outs[:ncar], write_ys)
    y_nodes = []
    for k, aval in enumerate(y_avals):
        if k not in invariant:
            y_nodes.append(BufNode(ctx, ys[k]))
            continue
        node = invariant[k]
        if not isinstance(node, BufNode):
            once = ctx.prog.new_buffer(aval.shape[1:], aval.dtype, "tmp")
            ctx.write_into(node, once)
            node = BufNode(ctx, once)
        y_nodes.append(LazyNode(tuple(aval.shape), aval.dtype,
                                lambda idxs, node=node: node.read(list(idxs)[1:]), None, 1))
    ctx.prog.steps.append(Loop("scan", body, length=length, counter=counter,
                               reverse=bool(p["reverse"]), name=ctx.kernel_name("l")))
    return [BufNode(ctx, b) for b in carry] + y_nodes


def _loop_invariant(ctx, node, body: list, carry: list, counter) -> bool:
    """Whether ``node`` (a scan body output) is the same at every iteration: it reads
    nothing the body writes, no carry, and not the loop counter."""
    from kiln.compiler.lower.index import Sym
    from kiln.compiler.lower.lower import BufNode, ConstNode
    from kiln.compiler.lower.program import walk_steps
    if isinstance(node, ConstNode):
        return True
    changing = {b.id for b in carry}
    for s in walk_steps(body):
        if isinstance(s, Island):               # a call back into Python (host_calls)
            changing |= {b.id for b in s.outs}
        else:
            changing |= {b.id for b in step_buffers(ctx.prog, s)
                         if _writes(s, b)}
    if isinstance(node, BufNode):
        return node.buf.id not in changing
    syms = [Sym(f"v{d}", 0, max(int(n) - 1, 0)) for d, n in enumerate(node.shape)]
    expr = node.read([Idx.sym(q) for q in syms])
    for e in walk(ctx.prog, [expr]):
        if e.kind == "load" and e.params[0] in changing:
            return False
        for idx in idx_of(e):
            if counter in idx.deps:
                return False
    return True


def _writes(step, buf) -> bool:
    from kiln.compiler.lower.program import Conv, Gemm, Kernel, Reduce, Scan, Scatter
    if isinstance(step, Kernel):
        return any(b is buf for b, _ in step.outs)
    if isinstance(step, (Reduce, Scan, Scatter, Gemm, Conv)):
        return step.out is buf
    if isinstance(step, Island):
        return any(b is buf for b in step.outs)
    return False


def _cond(ctx, eqn, ins):
    from kiln.compiler.lower.lower import BufNode, lower_nested
    index, ops = ins[0], ins[1:]
    outs = [ctx.prog.new_buffer(v.aval.shape, v.aval.dtype, "tmp") for v in eqn.outvars]
    branches = []
    for closed in bodies(eqn):
        with ctx.capture() as steps:
            nodes = lower_nested(ctx, closed, ops)
            for buf, node in zip(outs, nodes):
                ctx.write_into(_converted(ctx, node, buf.dtype), buf)
        branches.append(steps)
    ctx.prog.steps.append(Branch(index.read([]), branches, name=ctx.kernel_name("b")))
    return [BufNode(ctx, b) for b in outs]


_lower.register_rule(CONTROL, is_native,
                    lambda ctx, eqn, ins, out_kind: lower_eqn(ctx, eqn, ins))
