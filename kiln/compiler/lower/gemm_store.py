"""Matrix products that store straight into the buffer a copy would have moved them to.

A batched product whose result is only ever copied, element for element, into another
buffer (attention's per-head ``dq``/``dk``/``dv`` written into their places of the
``[batch, time, 3 * d]`` gradient of the fused q/k/v projection; a per-head output
transposed back to ``[batch, time, heads * d]``) can write each of its matrices there
itself: BLAS takes any leading dimension for ``C``, and the batch index becomes a
strided offset (``Gemm.out_view``). The copy kernel is dropped: one pass over the data
less (the transformer block's three gradient copies were ~0.5 ms of a 40 ms step on the
AVX2 host). The product's values, hence its bits, do not change: only where they land.

The copy's index map is checked numerically, element by element (the kernel's loop
space enumerated with NumPy), so any layout the lowering produced qualifies as long as
it is ``offset + f(batch) + row * ld + column`` with ``f`` a row-major split of the
batch index into strided dimensions.

What it must not hold: C text (``render/kernels.py`` renders ``out_view``), buffer
planning (``plan_buffers.py`` calls this first, before lifetimes are computed).
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.lower.index import Idx, row_major_strides
from kiln.compiler.lower.program import Gemm, Kernel, Program
from kiln.compiler.lower.walk import step_buffer_ids

# Copies of more elements than this are left alone: the check enumerates them (~50 ms
# per million elements on a slow VM, at compile time).
MAX_ELEMENTS = 1 << 22

_BINARY = {
    "({} + {})": lambda a, b: a + b,
    "({} * {})": lambda a, b: a * b,
    "({} / {})": lambda a, b: a // b,
    "kiln_floordiv({}, {})": lambda a, b: a // b,
    "({} % {})": lambda a, b: a % b,
    "kiln_floormod({}, {})": lambda a, b: a % b,
}


def store_products_in_place(prog: Program) -> int:
    """Redirect products whose result is only copied into another buffer; returns how
    many copy kernels were dropped."""
    steps = prog.steps
    outputs = {o[1].id for o in prog.outputs if o[0] == "buf"}
    touched = [step_buffer_ids(prog, s) for s in steps]
    # Regions (arrays of flat positions) already claimed in a buffer by redirected products.
    claimed: dict = {}
    dropped = 0
    j = 0
    while j < len(steps):
        found = _candidate(prog, steps, touched, outputs, claimed, j)
        if found is None:
            j += 1
            continue
        i, view, dst = found
        g = steps[i]
        g.out = steps[j].outs[0][0]
        g.out_view = view
        claimed.setdefault(g.out.id, []).append(dst)
        touched[i] = step_buffer_ids(prog, g)
        del steps[j]
        del touched[j]
        dropped += 1
    return dropped


def _candidate(prog, steps, touched, outputs, claimed, j):
    """``(producer index, out_view, destination positions)`` when step ``j`` is a copy of
    a product's result that the product can store itself, else None."""
    k = steps[j]
    if not isinstance(k, Kernel) or len(k.outs) != 1:
        return None
    dst_buf, e = k.outs[0]
    if e.kind != "load" or dst_buf.kind not in ("tmp", "out"):
        return None
    src = prog.buffers[e.params[0]]
    if (src.kind != "tmp" or src.id in outputs or src.dtype != dst_buf.dtype
            or src.id == dst_buf.id or src.size > MAX_ELEMENTS):
        return None
    # The product writing the source: the closest earlier step touching it.
    i = j - 1
    while i >= 0 and src.id not in touched[i]:
        i -= 1
    g = steps[i] if i >= 0 else None
    if (not isinstance(g, Gemm) or g.out is not src or getattr(g, "out_view", None)
            or src.id in (g.a.id, g.b.id) or dst_buf.id in (g.a.id, g.b.id)):
        return None
    # Nothing else reads the source; nothing between the two touches the destination
    # but products already redirected into it (their regions are checked disjoint below).
    if any(src.id in touched[t] for t in range(len(steps)) if t not in (i, j)):
        return None
    for t in range(i + 1, j):
        if dst_buf.id in touched[t]:
            s = steps[t]
            if not (isinstance(s, Gemm) and getattr(s, "out_view", None)
                    and s.out is dst_buf):
                return None
    mapping = _copy_map(k, e, src.size, dst_buf.size)
    if mapping is None:
        return None
    view = _as_view(mapping, g.batch, g.m, g.n)
    if view is None:
        return None
    for other in claimed.get(dst_buf.id, ()):
        seen = np.zeros(dst_buf.size, bool)
        seen[other] = True
        if seen[mapping].any():
            return None
    return i, view, mapping


def _copy_map(k: Kernel, e, src_size: int, dst_size: int):
    """``dst[s]``: where the kernel stores source element ``s`` (an int64 array over the
    whole source), or None when it is not a one-to-one copy of every source element."""
    n = int(np.prod(k.shape, dtype=np.int64))
    if n != src_size or n == 0 or len(k.syms) != len(k.shape):
        return None
    # int32 (MAX_ELEMENTS and the buffers' sizes allow it): half the memory traffic.
    if dst_size >= 1 << 31:
        return None
    grids = np.indices(k.shape, dtype=np.int32).reshape(len(k.shape), -1)
    env = {s.name: grids[d] for d, s in enumerate(k.syms)}
    src = _eval(e.params[2].v, env)
    if src is None:
        return None
    strides = k.strides if k.strides is not None else row_major_strides(k.shape)
    dst = np.zeros(n, np.int32)
    for d, st in enumerate(strides):
        if st:
            dst += grids[d] * np.int32(st)
    if k.offset is not None:
        off = _eval(k.offset, env)
        if off is None:
            return None
        dst = dst + off
    src = np.broadcast_to(src, (n,))
    if src.min() < 0 or src.max() >= src_size or dst.min() < 0 or dst.max() >= dst_size:
        return None
    # One to one both ways (linear time: flags, not a sort).
    for positions, size in ((src, src_size), (dst, dst_size)):
        seen = np.zeros(size, bool)
        seen[positions] = True
        if np.count_nonzero(seen) != n:
            return None
    out = np.empty(src_size, np.int64)
    out[src] = dst
    return out


def _eval(idx: Idx, env: dict):
    """The value of ``idx`` over the loop space (NumPy), or None for forms it does not
    know (a runtime scalar, a clamp)."""
    # Every partial value must fit int32 (the nodes carry conservative ranges).
    if idx.is_affine:
        bound = abs(idx.const) + sum(abs(c) * max(abs(s.lo), abs(s.hi)) for s, c in idx.terms)
        if bound >= 1 << 31:
            return None
        val = np.int32(idx.const)
        for s, c in idx.terms:
            if s.name not in env:
                return None
            val = val + env[s.name] * np.int32(c)
        return val
    if idx.parts is None or max(abs(idx.lo), abs(idx.hi)) >= 1 << 31:
        return None
    fmt, args = idx.parts
    fn = _BINARY.get(fmt)
    if fn is None or len(args) != 2:
        return None
    vals = [_eval(a, env) if isinstance(a, Idx) else np.int32(a) for a in args]
    if any(v is None for v in vals):
        return None
    return fn(*vals)


def _as_view(mapping: np.ndarray, batch: int, m: int, n: int):
    """``(ld, ((size, stride), ...), offset)`` such that element ``(b, r, c)`` of the
    product lands at ``offset + f(b) + r * ld + c`` (``f`` the row-major split of ``b``
    over those sizes), or None."""
    pos = mapping.reshape(batch, m, n)
    offset = int(pos[0, 0, 0])
    ld = int(pos[0, 1, 0] - offset) if m > 1 else n
    if ld < n:
        return None
    f = pos[:, 0, 0] - offset
    dims = []
    inner = 1
    while inner < batch:
        # The next (outer) dimension: as many steps of ``inner`` as keep one stride.
        stride = int(f[inner])
        size = 2
        while inner * size < batch and f[inner * size] == size * stride:
            size += 1
        if batch % (inner * size):
            return None
        dims.append((size, stride))
        inner *= size
    dims = tuple(reversed(dims)) or ((1, 0),)
    # The whole map, checked against the view.
    bidx = np.arange(batch, dtype=np.int64)
    fb = np.zeros(batch, np.int64)
    inner = 1
    for size, stride in reversed(dims):
        fb += (bidx // inner % size) * stride
        inner *= size
    want = (offset + fb[:, None, None] + np.arange(m, dtype=np.int64)[None, :, None] * ld
            + np.arange(n, dtype=np.int64)[None, None, :])
    if not np.array_equal(want, pos):
        return None
    return ld, dims, offset
