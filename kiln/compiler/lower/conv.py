"""Lowering of ``conv_general_dilated`` to a :class:`~.program.Conv` step.

The patches (im2col) are index arithmetic on the input node, so whatever produced the
input (a bias and activation of the previous layer, a transpose) fuses into the patch
gathering; the kernel is packed once per call as [groups, k_sp... * cg, og] by a
kernel; the output is written as [n, o_sp..., o] and read back in the requested layout
through index arithmetic (free when that layout is already channels-last).

Native for float32/float64 with one dtype throughout (mixed dtypes stay host islands).
A ``batch_group_count`` of B (the kernel gradient of a grouped convolution) is the same
step with B groups: group ``g`` reads the input's batch block ``g`` (the batch is split
group-major, as XLA does) and all its channels, and writes output features block ``g``.

What it must not hold: C text (``render_c.py``).
"""
from __future__ import annotations

import math

import numpy as np

from kiln.compiler.lower import lower as _lower
from kiln.compiler.lower.index import Cond, Idx, Sym
from kiln.compiler.lower.program import Conv


def is_native(eqn) -> bool:
    from kiln.compiler.lower.lower import FLOAT_DTYPES
    p = eqn.params
    lhs, rhs = (v.aval for v in eqn.invars)
    out = eqn.outvars[0].aval
    dts = {np.dtype(lhs.dtype), np.dtype(rhs.dtype), np.dtype(out.dtype)}
    if len(dts) != 1 or next(iter(dts)) not in FLOAT_DTYPES:
        return False
    if int(p.get("batch_group_count", 1)) != 1 and int(p.get("feature_group_count", 1)) != 1:
        return False
    if lhs.ndim < 3:        # no spatial dimensions (a dot): the native kernel needs one
        return False
    return all(int(d) > 0 for d in out.shape) and all(int(d) > 0 for d in rhs.shape)


def lower_conv(ctx, eqn, ins, kind):
    from kiln.compiler.lower.lower import CHEAP, BufNode, LazyNode, _transpose_node
    x, k = ins
    p = eqn.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = (tuple(int(d) for d in s) for s in dn)
    strides = tuple(int(s) for s in p["window_strides"])
    pads = tuple((int(lo), int(hi)) for lo, hi in p["padding"])
    nsp = len(strides)
    ldil = tuple(int(d) for d in (p.get("lhs_dilation") or (1,) * nsp))
    rdil = tuple(int(d) for d in (p.get("rhs_dilation") or (1,) * nsp))
    groups = int(p.get("feature_group_count", 1))
    batch_groups = int(p.get("batch_group_count", 1))
    out_aval = eqn.outvars[0].aval
    dtype = np.dtype(out_aval.dtype)

    nd = len(x.shape)
    k_sp0 = tuple(k.shape[d] for d in rhs_spec[2:])
    if isinstance(x, LazyNode) and x.cost > CHEAP and math.prod(k_sp0) > 1:
        # Each input element is gathered into prod(kernel) patches: store an expensive
        # producer (the previous layer's pooling) once rather than recompute it.
        x = ctx.materialize(x)
    if lhs_spec[1] != nd - 1:
        # The patch rows are gathered channel by channel (innermost): with the channels
        # strided in memory (NCHW, or the batch-as-channels convolution of a kernel
        # gradient) every element would come from another cache line. One copy of the
        # input channels-last first (a pass over it) makes those reads contiguous.
        perm = (lhs_spec[0],) + tuple(lhs_spec[2:]) + (lhs_spec[1],)
        x = ctx.materialize(_transpose_node(x, perm))
        lhs_spec = (0, nd - 1) + tuple(range(1, nd - 1))
    n = x.shape[lhs_spec[0]] // batch_groups
    if batch_groups > 1:
        groups = batch_groups
    in_sp = tuple(x.shape[d] for d in lhs_spec[2:])
    o_total = k.shape[rhs_spec[0]]
    cg = k.shape[rhs_spec[1]]
    k_sp = tuple(k.shape[d] for d in rhs_spec[2:])
    out_sp = tuple(out_aval.shape[d] for d in out_spec[2:])
    og = o_total // groups
    kk = math.prod(k_sp)

    # Kernel packed as [g, k_sp..., c, j] (row-major: K = k_sp..., c contiguous per j).
    w = ctx.prog.new_buffer((groups, kk * cg, og), dtype, "tmp")
    wsyms = [Sym("wg", 0, groups - 1)] + [Sym(f"wk{j}", 0, m - 1) for j, m in enumerate(k_sp)] \
        + [Sym("wc", 0, cg - 1), Sym("wj", 0, og - 1)]
    ridx = [None] * len(k.shape)
    g_i, c_i, j_i = Idx.sym(wsyms[0]), Idx.sym(wsyms[-2]), Idx.sym(wsyms[-1])
    ridx[rhs_spec[0]] = g_i * og + j_i
    ridx[rhs_spec[1]] = c_i
    for j, d in enumerate(rhs_spec[2:]):
        ridx[d] = Idx.sym(wsyms[1 + j])
    from kiln.compiler.lower.program import Kernel
    ctx.prog.steps.append(Kernel((groups,) + k_sp + (cg, og), wsyms,
                                 [(w, k.read(ridx))], ctx.kernel_name("k")))

    # Patch value at (n, g, o_sp..., k_sp..., c).
    syms = ([Sym("cn", 0, n - 1), Sym("cg", 0, groups - 1)]
            + [Sym(f"co{j}", 0, m - 1) for j, m in enumerate(out_sp)]
            + [Sym(f"ck{j}", 0, m - 1) for j, m in enumerate(k_sp)]
            + [Sym("cc", 0, cg - 1)])
    o_syms = syms[2:2 + nsp]
    k_syms = syms[2 + nsp:2 + 2 * nsp]
    xidx = [None] * len(x.shape)
    if batch_groups > 1:        # group g: batch block g, every input channel
        xidx[lhs_spec[0]] = Idx.sym(syms[1]) * n + Idx.sym(syms[0])
        xidx[lhs_spec[1]] = Idx.sym(syms[-1])
    else:
        xidx[lhs_spec[0]] = Idx.sym(syms[0])
        xidx[lhs_spec[1]] = Idx.sym(syms[1]) * cg + Idx.sym(syms[-1])
    cond = Cond()
    for j, d in enumerate(lhs_spec[2:]):
        t = Idx.sym(o_syms[j]) * strides[j] + Idx.sym(k_syms[j]) * rdil[j] - pads[j][0]
        cond = cond & Cond.in_range(t, 0, (in_sp[j] - 1) * ldil[j] + 1) \
            & Cond.divisible(t, ldil[j])
        xidx[d] = t.floordiv(ldil[j]) if ldil[j] > 1 else t
    if cond.never:
        col = ctx.table.const(np.zeros((), dtype)[()], dtype)
    else:
        # Reads outside the input are masked; clamp the index so it stays valid C.
        col = ctx.table.where(cond, x.read(xidx), ctx.table.const(np.zeros((), dtype)[()],
                                                                   dtype))
    out = ctx.prog.new_buffer((n,) + out_sp + (o_total,), dtype, kind if _channels_last(
        out_spec) else "tmp")
    ctx.prog.steps.append(Conv(n, groups, out_sp, k_sp, cg, og, syms, col, w, out,
                               name=ctx.kernel_name("v")))
    node = BufNode(ctx, out)
    if _channels_last(out_spec):
        return node
    # canonical [n, sp..., o] -> requested: out dim out_spec[0] is n, out_spec[1] is o, ...
    nd = len(out_spec)
    perm = [0] * nd
    canon_of = {out_spec[0]: 0, out_spec[1]: nd - 1}
    for j, d in enumerate(out_spec[2:]):
        canon_of[d] = 1 + j
    for d in range(nd):
        perm[d] = canon_of[d]
    return _transpose_node(node, tuple(perm))


def _channels_last(out_spec) -> bool:
    nd = len(out_spec)
    return tuple(out_spec) == (0, nd - 1) + tuple(range(1, nd - 1))


_lower.register_rule(("conv_general_dilated",), is_native,
                    lambda ctx, eqn, ins, out_kind: [lower_conv(ctx, eqn, ins, out_kind)])
