"""Splitting a kernel's loop where its reads divide the loop index (reshape arithmetic).

A kernel reading a transposed and reshaped value (attention's heads ``[b, h, t, d]``
written back as ``[b, t, h*d]``, or the gradient of ``jnp.split`` written piece by
piece) loops over the output's dims and reads its operand at ``(i2 / 64) * 8192 +
(i2 % 64)``: a division and a remainder per element, which gcc does not vectorize (a
scalar loop with gathers at best). Splitting the loop ``i2`` (extent 256) into
``i2 = 64*q + r`` (``q`` over 4, ``r`` over 64) makes both terms affine (``q`` and ``r``
by :class:`~.index.Idx`'s range rules), so the inner loop reads and writes contiguous
elements. The split loops visit the same elements in the same row-major order and every
element's expression is unchanged (only how its position is computed), so the results
are the same bits.

:func:`refine_loops` does this for the program's top-level :class:`Kernel` steps whose
reads (loads, ``iota`` values, padding conditions) hold a ``floordiv``/``mod`` of a loop
symbol by a constant dividing that loop's extent, one split at a time while a split
removes such an operation. Kernels indexing through a dynamic symbol (gathers,
``dynamic_slice``) are left alone.

What it must not hold: C text; fusion decisions (``lower.py``); buffer planning.
"""
from __future__ import annotations

import math

from kiln.compiler.lower.index import Cond, Idx, Sym
from kiln.compiler.lower.program import Kernel, Program
from kiln.compiler.lower.walk import idx_of, walk

_DIV = ("({} / {})", "kiln_floordiv({}, {})")
_MOD = ("({} % {})", "kiln_floormod({}, {})")
MAX_SPLITS = 4      # per kernel


def _divmods(idx: Idx, out: list):
    """Append ``(A, d)`` for each ``A // d`` or ``A % d`` inside ``idx``."""
    if idx.is_affine:
        return
    fmt, args = idx.parts
    if fmt in _DIV or fmt in _MOD:
        out.append((args[0], args[1]))
    for a in args:
        if isinstance(a, Idx):
            _divmods(a, out)


def _subst(idx: Idx, s: Sym, q: int, hi: Sym, lo: Sym) -> Idx | None:
    """``idx`` with ``s`` replaced by ``q*hi + lo``, re-simplified (None: an expression
    this module does not know how to rebuild)."""
    if s not in idx.deps:
        return idx
    if idx.is_affine:
        out = Idx.lit(idx.const)
        for t, c in idx.terms:
            if t == s:
                out = out + Idx.sym(hi) * (c * q) + Idx.sym(lo) * c
            else:
                out = out + Idx.sym(t) * c
        return out
    fmt, args = idx.parts
    new = []
    for a in args:
        if isinstance(a, Idx):
            a = _subst(a, s, q, hi, lo)
            if a is None:
                return None
        new.append(a)
    if fmt == "({} + {})":
        return new[0] + new[1]
    if fmt == "({} * {})":
        return new[0] * new[1]
    if fmt in _DIV:
        return new[0].floordiv(new[1])
    if fmt in _MOD:
        return new[0].mod(new[1])
    return None


def _subst_cond(cond: Cond, s, q, hi, lo) -> Cond | None:
    clauses = []
    for cl in cond.clauses:
        if len(cl) > 1:
            e = _subst(cl[1], s, q, hi, lo)
            if e is None:
                return None
            cl = (cl[0], e) + tuple(cl[2:])
        clauses.append(cl)
    return Cond(clauses)


def _count(idxs, syms) -> int:
    """How many divisions/remainders in ``idxs`` depend on a symbol of ``syms``."""
    n = 0
    for idx in idxs:
        found: list = []
        _divmods(idx, found)
        n += sum(1 for a, _ in found if a.deps & syms)
    return n


def _all_idxs(nodes, k: Kernel):
    out = [i for e in nodes for i in idx_of(e)]
    if k.offset is not None:
        out.append(k.offset)
    return out


def _candidates(idxs, k: Kernel):
    """``(dim, q)``: split loop ``dim`` into ``q``-element inner blocks, innermost first."""
    seen = []
    for d in range(len(k.syms) - 1, -1, -1):
        s, n = k.syms[d], int(k.shape[d])
        for idx in idxs:
            found: list = []
            _divmods(idx, found)
            for a, dv in found:
                if not a.is_affine:
                    continue
                c = a.coef(s)
                if c == 0:
                    continue
                q = dv // math.gcd(abs(c), dv)
                if 1 < q < n and n % q == 0 and (d, q) not in seen:
                    seen.append((d, q))
    return seen


def _rebuild(prog: Program, table, e, s, q, hi, lo, memo):
    hit = memo.get(e.uid)
    if hit is not None:
        return hit
    if e.kind == "load":
        idx = _subst(e.params[2].v, s, q, hi, lo)
        out = None if idx is None else table.load(prog.buffers[e.params[0]], idx)
    elif e.kind == "index":
        idx = _subst(e.params[1].v, s, q, hi, lo)
        out = None if idx is None else table.index(idx, e.dtype)
    else:
        args = []
        for a in e.args:
            a = _rebuild(prog, table, a, s, q, hi, lo, memo)
            if a is None:
                return None
            args.append(a)
        if e.kind == "where":
            cond = _subst_cond(e.params[1].v, s, q, hi, lo)
            out = None if cond is None else table.where(cond, args[0], args[1])
        elif all(x is y for x, y in zip(args, e.args)):
            out = e
        else:
            out = table._make(e.kind, e.dtype, tuple(args), e.params, e.cost)
    if out is None:
        return None
    src = table.source.get(e.uid)
    if src is not None and out is not e:
        table.source.setdefault(out.uid, src)
    memo[e.uid] = out
    return out


def _split(prog: Program, table, k: Kernel, d: int, q: int) -> Kernel | None:
    s, n = k.syms[d], int(k.shape[d])
    names = {x.name for x in k.syms}
    base = s.name
    while f"{base}q" in names or f"{base}r" in names:
        base += "_"
    hi, lo = Sym(f"{base}q", 0, n // q - 1), Sym(f"{base}r", 0, q - 1)
    memo: dict = {}
    outs = []
    for buf, e in k.outs:
        e2 = _rebuild(prog, table, e, s, q, hi, lo, memo)
        if e2 is None:
            return None
        outs.append((buf, e2))
    offset = k.offset
    if offset is not None:
        offset = _subst(offset, s, q, hi, lo)
        if offset is None:
            return None
    strides = k.strides
    if strides is not None:
        strides = tuple(strides[:d]) + (strides[d] * q, strides[d]) + tuple(strides[d + 1:])
    shape = tuple(k.shape[:d]) + (n // q, q) + tuple(k.shape[d + 1:])
    syms = list(k.syms[:d]) + [hi, lo] + list(k.syms[d + 1:])
    k2 = Kernel(shape, syms, outs, k.name, offset, strides)
    # _subst rewrites the symbol equal to the loop's (name and range) and re-simplifies
    # by the other symbols' ranges. An index naming a symbol that is not one of the
    # loops (nor a dynamic one) would be left naming the old loop (C that does not
    # compile) or simplified by a range the loop does not have (wrong values): not split.
    # Index keys hold the symbols' ranges, so interning does not make such expressions.
    mine = set(syms)
    if any(x not in mine and x.name not in prog.sym_defs
           for i in _all_idxs(walk(prog, [e for _, e in outs]), k2) for x in i.deps):
        return None
    return k2


def refine_kernel(prog: Program, table, k: Kernel) -> Kernel:
    """``k`` with loops split while a split removes a division or remainder of a loop
    symbol from its reads (``k`` itself when none does)."""
    for _ in range(MAX_SPLITS):
        nodes = walk(prog, [e for _, e in k.outs])
        idxs = _all_idxs(nodes, k)
        if any(x.name in prog.sym_defs for i in idxs for x in i.deps):
            return k
        loop_syms = frozenset(k.syms)
        before = _count(idxs, loop_syms)
        if before == 0:
            return k
        best = None
        for d, q in _candidates(idxs, k):
            k2 = _split(prog, table, k, d, q)
            if k2 is None:
                continue
            after = _count(_all_idxs(walk(prog, [e for _, e in k2.outs]), k2),
                           frozenset(k2.syms))
            if after < before and (best is None or after < best[0]):
                best = (after, k2)
        if best is None:
            return k
        k = best[1]
    return k


def refine_loops(prog: Program, table) -> int:
    """Split the loops of ``prog``'s top-level kernels (see the module doc) in place.
    Returns how many kernels changed."""
    if table is None:
        return 0
    changed = 0
    for i, k in enumerate(prog.steps):
        if not isinstance(k, Kernel) or all(int(n) <= 1 for n in k.shape):
            continue
        k2 = refine_kernel(prog, table, k)
        if k2 is not k:
            src = prog.step_source.get(id(k))
            if src is not None:
                prog.step_source[id(k2)] = src
            prog.steps[i] = k2
            changed += 1
    return changed
