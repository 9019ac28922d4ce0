"""Printing reductions as C: row reductions with scalar accumulators (chunked for long
rows, software prefetch for expensive ones), column reductions into the output, argmax/
argmin, and cumulative scans, as their plans (``plan_reduce.py``, ``plan_loops.py``) say.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.compiler.lower.index import row_major_strides
from kiln.compiler.lower.program import (
    Program,
    Reduce,
    Scan,
)
from kiln.compiler.render.body import Body
from kiln.compiler.render.c_expr import (
    C_TYPES,
    FmaTerm,
    _flat_of_syms,
    _int_extreme,
    c_literal,
    prefetch_loop,
)
from kiln.compiler.render.kernels import STEAL_ONE
from kiln.compiler.render.plan_loops import NestPlan
from kiln.compiler.render.plan_reduce import ColumnPlan, FoldPlan, summed


def sum_blocks(n: int, chunk: int) -> tuple[int, int]:
    """(chunks per block, blocks) of a parallel chunked sum of ``n`` elements: up to 64
    chunks a block (256 KiB of float32: taking one costs a compare-and-swap, far under
    1% of reading it), at least 32 blocks when there are chunks enough, and at most
    4,096 (their sums sit in an array on the stack). A function of ``n`` alone, so the
    bits are the same on any number of cores."""
    n_chunks = -(-n // chunk)
    per = max(1, min(64, n_chunks // 32), -(-n_chunks // 4096))
    return per, -(-n_chunks // per)


class ReduceMixin:
    """Methods of :class:`~kiln.compiler.render.render_c.CRenderer` (see its attributes)."""

    def render_reduce(self, prog: Program, r: Reduce, plan) -> str:
        """``plan``: a :class:`~.plan_reduce.ReducePlan` (argmax/argmin: a
        :class:`~.plan_loops.NestPlan`)."""
        if r.op in ("argmax", "argmin"):
            return self._render_arg_reduce(prog, r, plan)
        nd = len(r.in_shape)
        axes = set(r.axes)
        out_t = C_TYPES[r.out.dtype]
        kept = [d for d in range(nd) if d not in axes]
        out_shape = [r.in_shape[d] for d in kept]
        ostr = row_major_strides(out_shape)
        oflat = " + ".join(f"{st}*{r.syms[d].name}" for d, st in zip(kept, ostr)) or "0"
        init = self.reduce_init(r.op, r.out.dtype)
        pad = "  "
        body = Body(self, prog)
        body.summed = summed(r)
        val = self.reduce_value(body, r)
        lines = [pad + "{"]
        lines += [pad + "  " + s for s in body.prelude_lines()]
        if plan.column is not None:
            # a reduction over rows into columns: parallel over column tiles
            lines += self._column_reduce(r, body, val, pad + "  ", plan.column)
            lines.append(pad + "}")
            return "\n".join(lines)
        if plan.outer_reduced:
            n_out = math.prod(out_shape)
            lines.append(pad + f"  for (int64_t o = 0; o < {n_out}; o++) b{r.out.id}[o] = "
                         f"{init};")
        depth = len(pad) + 2
        for j, (_, s, n) in enumerate(plan.prefix):
            if j == 0 and plan.parallel:
                # Output elements shared by work stealing (csrc/steal.h): each is folded
                # by one thread in the same order whichever thread it is.
                opened, closes = self._steal_open(n, s.name, " " * depth,
                                                  math.prod(r.in_shape) // max(1, n))
                lines += opened
                depth += 2
                continue
            lines.append(" " * depth + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                         f"{s.name}++) {{")
            depth += 2
        ind = " " * depth
        if plan.fold is None:
            lines += [ind + s for s in body.lines]
            lines.append(ind + f"b{r.out.id}[{oflat}] = ({out_t})"
                         f"({self.combine(r.op, r.out.dtype, f'b{r.out.id}[{oflat}]', val)});")
        else:
            start = f"b{r.out.id}[{oflat}]" if plan.outer_reduced else init
            lines += self._reduce_row(r, body, val, ind, start, oflat, plan.fold)
        for j, _ in enumerate(plan.prefix):
            depth -= 2
            lines.append(" " * depth + "}")
            if j == len(plan.prefix) - 1 and plan.parallel:
                lines += [" " * depth + "}"] * (closes - 1)    # the region, the blocks
        lines.append(pad + "}")
        return "\n".join(lines)

    def reduce_value(self, body: Body, r: Reduce) -> str:
        """The C value ``r`` folds: its body's, or for ``r.fma`` (XLA's short sums of
        products, ``acc = fma(x, y, acc)``) an :class:`~.c_expr.FmaTerm` of the two
        factors, which ``combine`` folds with one rounding."""
        if r.fma:
            return FmaTerm(body.value(r.body.args[0]), body.value(r.body.args[1]))
        return body.value(r.body)

    def _column_reduce(self, r: Reduce, body: Body, val: str, ind: str,
                       plan: ColumnPlan) -> list[str]:
        """``out[j] = fold over i of body(i, j)`` (a bias gradient: the sum over the batch
        of a [batch, features] array): tiles of columns over the threads, each folded in a
        local array (its own cache lines: threads writing neighbouring columns of ``out``
        row after row fought over the line they share, 4x slower than one thread), rows
        in order, so each column folds exactly as a serial loop would."""
        (n_rows, n_cols), (si, sj) = r.in_shape, r.syms
        t = C_TYPES[r.out.dtype]
        tile, n_tiles = plan.tile, plan.n_tiles
        init = self.reduce_init(r.op, r.out.dtype)
        # Column tiles shared by work stealing (csrc/steal.h): a thread not scheduled yet
        # holds up none of them; each tile folds its columns alone, in row order.
        opened, closes = self._steal_open(n_tiles, "jt", "", STEAL_ONE)
        lines = opened + [
                 f"  const int64_t j0 = jt * {tile}, "
                 f"j1 = j0 + {tile} < {n_cols} ? j0 + {tile} : {n_cols};",
                 f"  {t} acc[{tile}];",
                 f"  for (int64_t j = 0; j < {tile}; j++) acc[j] = {init};",
                 f"  for (int64_t {si.name} = 0; {si.name} < {n_rows}; {si.name}++) {{",
                 "    " + self.simd,
                 f"    for (int64_t {sj.name} = j0; {sj.name} < j1; {sj.name}++) {{"]
        lines += ["      " + x for x in body.lines]
        lines += [f"      acc[{sj.name} - j0] = ({t})"
                  f"({self.combine(r.op, r.out.dtype, f'acc[{sj.name} - j0]', val)});",
                  "    }", "  }",
                  f"  for (int64_t j = j0; j < j1; j++) b{r.out.id}[j] = acc[j - j0];",
                  "}"] + ["}"] * (closes - 1)
        return [ind + x for x in lines]

    def _reduce_row(self, r: Reduce, body: Body, val: str, ind: str, start: str,
                    oflat: str, fold: FoldPlan) -> list[str]:
        """The statements folding one output element of ``r`` over its trailing reduced
        dims as ``fold`` says (the loops of the kept dims around them are open) and
        storing it."""
        out_t = C_TYPES[r.out.dtype]
        depth = len(ind)
        lines = []
        lines.append(ind + f"{out_t} acc = {start};")
        tn = fold.length
        if fold.kind == "chunked":
            (sym, _), = fold.loops
            s, chunk = sym.name, fold.chunk
            lo, hi, acc, d = "0", str(tn), "acc", ind
            if fold.parallel:
                # Blocks of chunks shared by work stealing (csrc/steal.h): each thread
                # starts on its contiguous share, then takes blocks off the end of the
                # others' (a thread that loses its core for a while holds up one block,
                # not half the sum); each block's sum goes to its slot, then the slots
                # are added in order. The bits depend on the length only, not on the
                # threads or who ran which block.
                per, n_blocks = sum_blocks(tn, chunk)
                span = per * chunk
                self._needs.add("steal")
                lines += [ind + f"{out_t} kiln_bs[{n_blocks}];",
                          ind + "const int kiln_nt = kiln_team_max();",
                          ind + "uint64_t kiln_rg[8 * kiln_nt];",
                          ind + f"kiln_steal_init(kiln_rg, kiln_nt, {n_blocks});",
                          ind + "#pragma omp parallel num_threads(kiln_nt)" + self.ftz_clause,
                          ind + "{",
                          ind + "  const int kiln_t = kiln_team_rank();",
                          ind + "  for (int64_t blk; (blk = kiln_steal_next(kiln_rg, kiln_t, "
                                "kiln_nt)) >= 0; ) {",
                          ind + f"    const int64_t k_lo = blk * {span}, "
                                f"k_hi = k_lo + {span} < {tn} ? k_lo + {span} : {tn};",
                          ind + f"    {out_t} bacc = 0;"]
                lo, hi, acc, d = "k_lo", "k_hi", "bacc", ind + "    "
            # A cheap body's prefetch (memory-bound sums) helps one thread streaming alone
            # and costs two threads streaming at once (Intel Xeon, 100 MB `sum(x*x)`:
            # 1 thread 9.5 -> 8.0 ms with it, 2 threads 2.30 -> 2.60 ms; benchmarks/
            # NOTES.md, session 19): it runs only where the team is one thread.
            solo = fold.prefetch and fold.cheap and fold.next_row is None
            if solo:
                self._needs.add("steal")
                lines.append(d + "{ const int kiln_pf = kiln_team_solo();")
            lines.append(d + f"for (int64_t c0 = {lo}; c0 < {hi}; c0 += {chunk}) {{")
            lines.append(d + f"  const int64_t c1 = c0 + {chunk} < {hi} ? "
                         f"c0 + {chunk} : {hi};")
            lines.append(d + f"  {out_t} part = 0;")
            if fold.prefetch:
                lines += [d + "  " + ("if (kiln_pf) " if solo else "") + x
                          for x in self._prefetch_lines(body, sym, fold)]
            lines.append(d + "  " + self.simd_reduce.format(op="+", acc="part"))
            lines.append(d + f"  for (int64_t {s} = c0; {s} < c1; {s}++) {{")
            lines += [d + "    " + x for x in body.lines]
            lines.append(d + f"    part += {val};")
            lines.append(d + "  }")
            lines.append(d + f"  {acc} += part;")
            lines.append(d + "}")
            if solo:
                lines.append(d + "}")
            if fold.parallel:
                lines += [ind + "    kiln_bs[blk] = bacc;",
                          ind + "  }",
                          ind + "}",
                          ind + f"for (int64_t blk = 0; blk < {n_blocks}; blk++) "
                                "acc += kiln_bs[blk];"]
        elif fold.kind == "nan_minmax":
            # Vectorizable NaN-propagating max/min: an OpenMP max reduction over the
            # ordered values plus a NaN flag (x86 max instructions drop NaNs); the flag
            # takes the comparison mask as is (-1), one instruction fewer than 0/1.
            cmp = ">" if r.op == "max" else "<"
            lines.append(ind + "int nanf = 0;")
            d2 = depth
            for j, (s, n) in enumerate(fold.loops):
                if j == len(fold.loops) - 1:
                    lines.append(" " * d2 + f"#pragma omp simd reduction({r.op}:acc) "
                                 "reduction(|:nanf)")
                lines.append(" " * d2 + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                             f"{s.name}++) {{")
                d2 += 2
            lines += [" " * d2 + x for x in body.lines]
            lines.append(" " * d2 + f"acc = {val} {cmp} acc ? {val} : acc;")
            lines.append(" " * d2 + f"nanf |= -({val} != {val});")
            for _ in fold.loops:
                d2 -= 2
                lines.append(" " * d2 + "}")
            lines.append(ind + f"if (nanf) acc = {c_literal(np.nan, r.out.dtype)};")
        else:
            d2 = depth
            for j, (s, n) in enumerate(fold.loops):
                if j == len(fold.loops) - 1 and fold.simd_op:
                    lines.append(" " * d2 + self.simd_reduce.format(op=fold.simd_op,
                                                                     acc="acc"))
                lines.append(" " * d2 + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                             f"{s.name}++) {{")
                d2 += 2
            lines += [" " * d2 + x for x in body.lines]
            lines.append(" " * d2 + f"acc = ({out_t})"
                         f"({self.combine(r.op, r.out.dtype, 'acc', val)});")
            for _ in fold.loops:
                d2 -= 2
                lines.append(" " * d2 + "}")
        lines.append(ind + f"b{r.out.id}[{oflat}] = acc;")
        return lines

    def _prefetch_lines(self, body: Body, sym, fold: FoldPlan) -> list[str]:
        """Prefetch, for the chunk ``[c0, c1)`` of loop ``sym``, the cache lines
        ``fold.prefetch_ahead`` elements further on of every load contiguous in it (with
        ``fold.next_row``: the same lines of the next row, into the cache kept close)."""
        next_row = fold.next_row
        out, seen = [], set()
        s = sym.name
        for buf, idx in body.loads:
            if not idx.is_affine or idx.coef(sym) != 1 or (buf.id, idx.c()) in seen:
                continue
            if any(d.name in body.prog.sym_defs for d in idx.deps):
                continue
            ahead = fold.prefetch_ahead if next_row is None else idx.coef(next_row)
            if ahead <= 0:
                continue
            seen.add((buf.id, idx.c()))
            step = max(1, 64 // np.dtype(buf.dtype).itemsize)
            hint = (self.prefetch_row if next_row is not None else
                    self.resolved_hint(self.cheap_prefetch) if fold.cheap else self.prefetch)
            # Past the end of the row the stream goes on into the next one, up to the
            # buffer's end (a prefetch never faults, but the address must be valid C).
            out.append(prefetch_loop(s, f"c0 + {ahead}", f"c1 + {ahead}", step, idx.c(),
                                     buf, hint))
        return out

    def _render_arg_reduce(self, prog: Program, r: Reduce, plan: NestPlan) -> str:
        (ax,) = r.axes
        nd = len(r.in_shape)
        kept = [d for d in range(nd) if d != ax]
        ostr = row_major_strides([r.in_shape[d] for d in kept])
        oflat = " + ".join(f"{st}*{r.syms[d].name}" for d, st in zip(kept, ostr)) or "0"
        vt = C_TYPES[r.body.dtype]
        it = C_TYPES[r.out.dtype]
        fl = r.body.dtype.kind == "f"
        if r.op == "argmax":
            init = "-INFINITY" if fl else _int_extreme(r.body.dtype, low=True)
            better = "v > best" + (" || (v != v && best == best)" if fl else "")
        else:
            init = "INFINITY" if fl else _int_extreme(r.body.dtype, low=False)
            better = "v < best" + (" || (v != v && best == best)" if fl else "")
        body = Body(self, prog)
        val = body.value(r.body)
        s = r.syms[ax]
        inner = [f"{vt} best = ({vt}){init}; int64_t bi = 0;",
                 f"for (int64_t {s.name} = 0; {s.name} < {r.in_shape[ax]}; {s.name}++) {{"]
        inner += ["  " + x for x in body.lines]
        inner += [f"  const {vt} v = {val};",
                  f"  if ({better}) {{ best = v; bi = {s.name}; }}", "}",
                  f"b{r.out.id}[{oflat}] = ({it})bi;"]
        empty = Body(self, prog)
        empty._prelude = body._prelude
        return self._nest(plan, empty, inner, indent=2)

    def render_scan(self, prog: Program, c: Scan, plan: NestPlan) -> str:
        """Row-major loops; each element is ``op(previous element of out, body)``, the
        previous one along ``axis`` (the next one when ``reverse``, looping backwards)."""
        body = Body(self, prog)
        val = body.value(c.body)
        dt = c.out.dtype
        t = C_TYPES[dt]
        strides = row_major_strides(c.shape)
        flat = _flat_of_syms(c.syms, c.shape)
        a, n, st = c.syms[c.axis].name, c.shape[c.axis], strides[c.axis]
        first = f"{a} == {n - 1}" if c.reverse else f"{a} == 0"
        prev = f"b{c.out.id}[{flat} {'+' if c.reverse else '-'} {st}]"
        stmt = (f"b{c.out.id}[{flat}] = ({t})({first} ? {val} : "
                f"({t})({self.combine(c.op, dt, prev, val)}));")
        return self._nest(plan, body, [stmt])
