"""Lowering of windowed reductions (pooling) and the max/min-pooling gradient.

``reduce_window_sum/max/min`` with small windows are lazy nodes: each output element
folds its window's elements (index arithmetic on the input node, the identity in the
padding and base-dilation holes) in the window's row-major order from the identity,
as XLA's CPU reduce_window does, so pooling fuses with the relu before it and whatever
reads it. Larger windows are a :class:`~.program.Reduce` over the window dims.

``select_and_scatter_add`` (the gradient of max/min pooling) with small windows is a
lazy node over the operand's positions: each position sums, over the windows that
contain it (in increasing window order, as the reference's ``np.add.at``), the window's
source value when the window's selection (row-major scan keeping the current element
while ``current >= candidate`` for max, ``<=`` for min; padding holds the identity and
competes) chose this position.

What it must not hold: C text.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from kiln.compiler.lower import lower as _lower
from kiln.compiler.lower.index import Cond, Idx

PRIMS = ("reduce_window_sum", "reduce_window_max", "reduce_window_min",
         "select_and_scatter_add")
# Windows of at most this many elements are unrolled into lazy nodes.
UNROLL_MAX = 64
# select_and_scatter_add costs (window size)^2 per element: lazy up to this size.
SCATTER_MAX = 16


def is_native(eqn) -> bool:
    from kiln.compiler.lower.lower import NATIVE_DTYPES
    p = eqn.params
    for v in list(eqn.invars) + list(eqn.outvars):
        if np.dtype(v.aval.dtype) not in NATIVE_DTYPES:
            return False
    k = math.prod(int(w) for w in p["window_dimensions"])
    if eqn.primitive.name == "select_and_scatter_add":
        if getattr(p["select_prim"], "name", None) not in ("ge", "le"):
            return False
        if np.dtype(eqn.outvars[0].aval.dtype).kind not in "fiu":
            return False
        return 0 < k <= SCATTER_MAX
    return k > 0


def _identity(name, dtype):
    dtype = np.dtype(dtype)
    if name == "sum":
        return np.zeros((), dtype)[()]
    low = name == "max"
    if dtype.kind == "f":
        return dtype.type(-np.inf if low else np.inf)
    if dtype.kind == "b":
        return np.bool_(not low)
    info = np.iinfo(dtype)
    return dtype.type(info.min if low else info.max)


def _window_read(ctx, x, o, w, strides, pads, bdil, wdil, ident):
    """x at output position ``o`` (Idx per dim) and window offset ``w`` (ints or Idx),
    the identity in the padding and the base-dilation holes."""
    table = ctx.table
    cond = Cond()
    idx = []
    for d, n in enumerate(x.shape):
        t = o[d] * strides[d] + w[d] * wdil[d] - pads[d][0]
        cond = cond & Cond.in_range(t, 0, (n - 1) * bdil[d] + 1) & Cond.divisible(t, bdil[d])
        idx.append(t.floordiv(bdil[d]) if bdil[d] > 1 else t)
    if cond.never:
        return table.const(ident, x.dtype)
    return table.where(cond, x.read(idx), table.const(ident, x.dtype))


def _stored_if_reread(ctx, x, reads: float):
    """``x`` stored in a buffer when it is expensive and each element is read more than
    once (the fusion cost rule, for windows)."""
    from kiln.compiler.lower.lower import CHEAP, LazyNode
    if isinstance(x, LazyNode) and x.cost > CHEAP and reads > 1:
        return ctx.materialize(x)
    return x


def lower_eqn(ctx, eqn, ins, kind):
    if eqn.primitive.name == "select_and_scatter_add":
        return _select_and_scatter_add(ctx, eqn, ins)
    return _reduce_window(ctx, eqn, ins, kind)


def _params(p, nd):
    ones = (1,) * nd
    return (tuple(int(w) for w in p["window_dimensions"]),
            tuple(int(s) for s in p["window_strides"]),
            tuple((int(lo), int(hi)) for lo, hi in p["padding"]),
            tuple(int(b) for b in (p.get("base_dilation") or ones)),
            tuple(int(b) for b in (p.get("window_dilation") or ones)))


def _reduce_window(ctx, eqn, ins, kind):
    from kiln.compiler.lower.lower import BufNode, LazyNode
    from kiln.compiler.lower.program import Reduce
    (x,) = ins
    op = eqn.primitive.name[len("reduce_window_"):]
    out = eqn.outvars[0].aval
    dtype = np.dtype(out.dtype)
    nd = len(x.shape)
    window, strides, pads, bdil, wdil = _params(eqn.params, nd)
    ident = _identity(op, dtype)
    table = ctx.table
    offsets = list(itertools.product(*(range(w) for w in window)))
    x = _stored_if_reread(ctx, x, len(offsets) / max(1, math.prod(strides)))
    scalar = {"sum": "add", "max": "max", "min": "min"}[op]
    if dtype == np.bool_ and op == "sum":
        scalar = "or"
    if len(offsets) <= UNROLL_MAX:
        def read(idxs):
            acc = table.const(ident, dtype)
            for w in offsets:
                v = _window_read(ctx, x, idxs, w, strides, pads, bdil, wdil, ident)
                acc = table.op(scalar, dtype, acc, v)
            return acc
        return LazyNode(out.shape, dtype, read, None, x.cost + 2 * len(offsets))
    # A reduction over (out dims..., window dims...), window dims trailing.
    shape = tuple(out.shape) + window
    syms = ctx.syms(shape)
    o = [Idx.sym(s) for s in syms[:nd]]
    w = [Idx.sym(s) for s in syms[nd:]]
    body = _window_read(ctx, x, o, w, strides, pads, bdil, wdil, ident)
    buf = ctx.prog.new_buffer(out.shape, dtype, kind)
    ctx.prog.steps.append(Reduce(shape, syms, tuple(range(nd, 2 * nd)), op, buf, body,
                                 name=ctx.kernel_name("r")))
    return BufNode(ctx, buf)


def _select_and_scatter_add(ctx, eqn, ins):
    from kiln.compiler.lower.lower import LazyNode
    src, x = ins
    p = eqn.params
    nd = len(x.shape)
    window = tuple(int(w) for w in p["window_dimensions"])
    strides = tuple(int(s) for s in p["window_strides"])
    pads = tuple((int(lo), int(hi)) for lo, hi in p["padding"])
    ones = (1,) * nd
    ge = p["select_prim"].name == "ge"
    ident = _identity("max" if ge else "min", x.dtype)
    out = eqn.outvars[0].aval
    dtype = np.dtype(out.dtype)
    table = ctx.table
    offsets = list(itertools.product(*(range(w) for w in window)))
    x = _stored_if_reread(ctx, x, len(offsets) ** 2)
    src = _stored_if_reread(ctx, src, len(offsets))
    i64 = np.dtype(np.int64)
    zero = table.const(np.zeros((), dtype)[()], dtype)

    def chosen(o):
        """Index (into ``offsets``) of the element the window at ``o`` selects."""
        cur = _window_read(ctx, x, o, offsets[0], strides, pads, ones, ones, ident)
        which = table.const(np.int64(0), i64)
        for j, w in enumerate(offsets[1:], 1):
            cand = _window_read(ctx, x, o, w, strides, pads, ones, ones, ident)
            keep = table.op("ge" if ge else "le", np.dtype(np.bool_), cur, cand)
            cur = table.op("select_n", x.dtype, keep, cand, cur)
            which = table.op("select_n", i64, keep, table.const(np.int64(j), i64), which)
        return which

    wstrides = [math.prod(window[d + 1:]) for d in range(nd)]

    def read_disjoint(idxs):
        # Windows do not overlap (strides >= window): a position is in at most one
        # window, the one at (i + pad) // stride, at offset (i + pad) % stride.
        cond = Cond()
        o, flat = [], Idx.lit(0)
        for d in range(nd):
            t = idxs[d] + pads[d][0]
            if strides[d] == 1:
                o.append(t)
                off = Idx.lit(0)
            else:
                o.append(t.floordiv(strides[d]))
                off = t.mod(strides[d])
            cond = cond & Cond.in_range(t, 0, src.shape[d] * strides[d])
            if window[d] < strides[d]:
                cond = cond & Cond.in_range(off, 0, window[d])
            flat = flat + off * wstrides[d]
        if cond.never:
            return zero
        hit = table.op("eq", np.dtype(np.bool_), chosen(o), table.index(flat, i64))
        val = table.op("select_n", dtype, hit, zero, src.read(o))
        return table.op("add", dtype, zero, table.where(cond, val, zero))

    def read(idxs):
        acc = zero
        # Windows containing this position, in increasing window order (the reference
        # adds in that order): the larger the offset, the earlier the window.
        for j in range(len(offsets) - 1, -1, -1):
            k = offsets[j]
            cond = Cond()
            o = []
            for d in range(nd):
                t = idxs[d] + pads[d][0] - k[d]
                cond = cond & Cond.in_range(t, 0, (src.shape[d] - 1) * strides[d] + 1) \
                    & Cond.divisible(t, strides[d])
                o.append(t.floordiv(strides[d]) if strides[d] > 1 else t)
            if cond.never:
                continue
            hit = table.op("eq", np.dtype(np.bool_), chosen(o),
                           table.const(np.int64(j), i64))
            val = table.op("select_n", dtype, hit, zero, src.read(o))
            acc = table.op("add", dtype, acc, table.where(cond, val, zero))
        return acc

    disjoint = all(s >= w for s, w in zip(strides, window))
    return LazyNode(out.shape, dtype, read_disjoint if disjoint else read, None,
                    src.cost + x.cost + 4 * len(offsets) * (1 if disjoint else len(offsets)))


_lower.register_rule(
    ("reduce_window_sum", "reduce_window_max", "reduce_window_min", "select_and_scatter_add"),
    is_native, lambda ctx, eqn, ins, out_kind: [lower_eqn(ctx, eqn, ins, out_kind)])
