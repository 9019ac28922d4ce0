"""Printing row groups as C: consecutive steps sharing one loop over rows (decided by
``row_groups.py``, planned by ``plan_reduce.plan_row_group``), with skewed rows (a
reduction's row ahead of its users) and fused row pairs, as the plan says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kiln.compiler.lower.index import row_major_strides
from kiln.compiler.lower.program import Program, Reduce
from kiln.compiler.render import plan_reduce
from kiln.compiler.render.body import Body
from kiln.compiler.render.c_expr import C_TYPES, F32, _flat_of_syms, c_literal, prefetch_loop
from kiln.compiler.render.plan_reduce import RowGroupPlan, RowStepPlan, SkewPlan, summed


@dataclass
class _RowStep:
    """One step of a row group with its rendered bodies."""
    plan: RowStepPlan
    body: Body
    row: Body              # what depends on the row only
    vals: list
    prelude: list

    @property
    def st(self):
        return self.plan.step

    @property
    def m(self) -> int:
        return self.plan.m

    @property
    def shape(self) -> tuple:
        return self.plan.shape


def _bounded(second: _RowStep, r0: Reduce) -> list:
    """``[(exp node uid, C name of its constant)]`` for the exps
    :func:`plan_reduce.bounded_exps` finds in the second step: only exps whose argument
    and constant the step's body names, the constant outside the inner loop."""
    body = second.body
    out = []
    for e, c in plan_reduce.bounded_exps(body.prog, second.plan, r0):
        arg, cname = body.names.get(e.args[0].uid), body.names.get(c.uid)
        if arg is None or cname is None or cname in body.declared:
            continue
        out.append((e.uid, cname))
    return out


def _guards(second: _RowStep, r0: Reduce) -> dict:
    """``{exp node uid: guard}`` for :func:`_bounded`'s exps, the guard a C condition true
    when every such argument in row ``g`` is at most ``fast_math.FIN_MAX`` and none is
    NaN (r0's output holds one value per row, row-major over its leading dims: row
    ``g``)."""
    from kiln.compiler.render.fast_math import FIN_MAX
    return {uid: f"((float)(b{r0.out.id}[g] - {cname}) <= {FIN_MAX})"
            for uid, cname in _bounded(second, r0)}


def _range_guards(second: _RowStep, r0: Reduce) -> dict:
    """``{exp node uid: guard}`` for those of :func:`_bounded`'s exps that are summed
    (``fexp32``), the guard true when every such argument in row ``g`` is at least
    ``fast_math.FIN_MIN`` (``kiln_mn``: the row's min, folded beside its max; no NaN
    when :func:`_guards` holds too). Then the row's exps need no select at all
    (``fexp32_in``): 12% of logsumexp on an AVX2 AMD host (benchmarks/NOTES.md)."""
    from kiln.compiler.render.fast_math import FIN_MIN
    bounded = _bounded(second, r0)
    summed = set(second.body.summed_exps([uid for uid, _ in bounded]))
    return {uid: f"((float)(kiln_mn - {cname}) >= {FIN_MIN})"
            for uid, cname in bounded if uid in summed}


class RowsMixin:
    """Methods of :class:`~kiln.compiler.render.render_c.CRenderer` (see its attributes)."""

    def render_row_group(self, prog: Program, plan: RowGroupPlan) -> str:
        """Steps sharing one loop over rows: for each row, each step's work in turn, so
        later steps read the row from cache. Each step names the row its own way (its
        leading loop symbols, from the flat row number ``g``). A skewed plan
        (:meth:`_skewed_rows`) runs the first reduction of row ``g + 1`` in the same
        inner loop as the second step of row ``g``."""
        parts, prelude = [], []
        for sp in plan.steps:
            part = self._row_step_bodies(prog, sp)
            parts.append(part)
            prelude += [x for x in part.prelude if x not in prelude]
        if plan.skew is not None:
            # The first step once more, for the row after the one being summed: its own
            # bodies, every name its loops declare (and its loop symbols) suffixed ``_n``.
            first = plan.steps[0]
            ahead = self._row_step_bodies(prog, first, "_n",
                                          {s.name: s.name + "_n" for s in first.step.syms})
            prelude += [x for x in ahead.prelude if x not in prelude]
        lines = ["  {"] + ["    " + x for x in prelude]
        if plan.skew is not None:
            lines += self._skewed_rows(parts, ahead, plan.n_rows, plan.skew)
        else:
            if plan.parallel:
                # Blocks of rows shared by work stealing (csrc/steal.h), as the skewed
                # groups: a thread not yet scheduled holds up none of the rows (the
                # static halves waited for all of its share). Rows are independent.
                per_row = sum(math.prod(sp.shape) for sp in plan.steps) // max(1, plan.n_rows)
                opened, closes = self._steal_open(plan.n_rows, "g", "    ", per_row)
                lines += opened
            else:
                lines.append(f"    for (int64_t g = 0; g < {plan.n_rows}; g++) {{")
            for part in parts:
                lines += self._row_step(part, " " * 6)
            lines.append("    }")
            if plan.parallel:
                lines += ["    }"] * (closes - 1)
        lines.append("  }")
        return "\n".join(lines)

    def _row_step_bodies(self, prog: Program, sp: RowStepPlan, suffix: str = "",
                         sym_names: dict | None = None) -> _RowStep:
        st, m = sp.step, sp.m
        body = Body(self, prog, suffix, sym_names)
        # What depends on the row only is computed once per row, before the step's
        # inner loops (else gcc may leave those loops scalar).
        row = body.hoisting(st.syms[m:])
        if isinstance(st, Reduce):
            body.summed = summed(st)
            vals = [self.reduce_value(body, st)]
        else:
            vals = [body.value(e) for _, e in st.outs]
        prelude = [x for b in (row, body) for x in b.prelude_lines()]
        return _RowStep(sp, body, row, vals, prelude)

    def _lead_lines(self, part: _RowStep, row_var: str, suffix: str = "") -> list[str]:
        """Definitions of a step's leading loop symbols from the flat row number."""
        lead = part.shape[:part.m]
        out = []
        for d, (s, n, stride) in enumerate(zip(part.st.syms, lead, row_major_strides(lead))):
            v = row_var if stride == 1 else f"{row_var} / {stride}"
            if d > 0:
                v = f"({v}) % {n}"
            out.append(f"const int64_t {s.name}{suffix} = {v};")
        return out

    def _row_step(self, part: _RowStep, ind: str) -> list[str]:
        """One step's work for row ``g``, as a block."""
        st, m, shape, body, row, vals = (part.st, part.m, part.shape, part.body, part.row,
                                         part.vals)
        lines = [ind + "{"] + [ind + "  " + x for x in self._lead_lines(part, "g")]
        lines += [ind + "  " + x for x in row.lines]
        if isinstance(st, Reduce):
            oflat = _flat_of_syms(st.syms[:m], shape[:m])
            # The row is in cache after the group's first step: no prefetching
            # along it; an expensive step prefetches the next row instead.
            lines += self._reduce_row(st, body, vals[0], ind + "  ",
                                      self.reduce_init(st.op, st.out.dtype), oflat,
                                      part.plan.fold)
        else:
            d2 = len(ind) + 2
            inner = list(zip(st.syms[m:], shape[m:]))
            for j, (s, n) in enumerate(inner):
                if j == len(inner) - 1:
                    # Elements are independent. Said outright: after the stores of
                    # the steps before it, gcc may not vectorize the loop alone.
                    lines.append(" " * d2 + self.simd)
                lines.append(" " * d2 + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                             f"{s.name}++) {{")
                d2 += 2
            lines += [" " * d2 + x for x in body.lines]
            flat = _flat_of_syms(st.syms, shape)
            lines += [" " * d2 + f"b{buf.id}[{flat}] = ({C_TYPES[buf.dtype]})({v});"
                      for (buf, _), v in zip(st.outs, vals)]
            for _ in inner:
                d2 -= 2
                lines.append(" " * d2 + "}")
        lines.append(ind + "}")
        return lines

    def _skewed_rows(self, parts: list, ahead: _RowStep, n_rows: int,
                     skew: SkewPlan) -> list[str]:
        """The row loop of a group opening with a reduction then a step over rows of the
        same length, software-pipelined: rows go in blocks (taken dynamically by the
        threads); each block reduces its first row with the first step alone, then for
        each row ``g`` runs one inner loop computing the second step of row ``g`` and
        the first step of row ``g + 1`` (``ahead``: the first step's bodies with their
        names suffixed ``_n``), then the other steps of row ``g``. At the last row of a
        block the loop folds that row again rather than branching, and drops the
        result."""
        first, second = parts[0], parts[1]
        r0 = first.st
        s1 = second.st.syms[second.m].name
        ind = " " * 6
        block, n_blocks = skew.block, skew.n_blocks
        lines = []
        if skew.parallel:
            # Blocks shared by work stealing (csrc/steal.h), as in parallel sums: each
            # thread starts on a contiguous share of the rows. OpenMP's dynamic schedule
            # interleaved the threads' blocks: on the quiet AMD host 0-6% slower on two
            # cores and 25% on four (session 17).
            self._needs.add("steal")
            lines += ["    const int kiln_nt = kiln_team_max();",
                      "    uint64_t kiln_rg[8 * kiln_nt];",
                      f"    kiln_steal_init(kiln_rg, kiln_nt, {n_blocks});",
                      "    #pragma omp parallel num_threads(kiln_nt)" + self.ftz_clause,
                      "    {",
                      "    const int kiln_t = kiln_team_rank();",
                      "    for (int64_t blk; (blk = kiln_steal_next(kiln_rg, kiln_t, kiln_nt))"
                      " >= 0; ) {"]
        else:
            lines.append(f"    for (int64_t blk = 0; blk < {n_blocks}; blk++) {{")
        lines.append(f"      const int64_t g_lo = blk * {block}, g_hi = g_lo + {block} < "
                     f"{n_rows} ? g_lo + {block} : {n_rows};")
        lines.append("      if (g_lo < g_hi) {")
        ranged = r0.op == "max" and bool(_range_guards(second, r0))
        if ranged:
            lines.append(f"      {C_TYPES[r0.out.dtype]} kiln_mn = "
                         f"{self.reduce_init('min', r0.out.dtype)};")
        lines.append("      { const int64_t g = g_lo;")
        lines += self._row_step(first, ind + "  ")
        if ranged:
            lines += self._row_min(ahead, r0, first.m, s1, skew.length, ind + "  ")
        lines += ["      }",
                  "      for (int64_t g = g_lo; g < g_hi; g++) {",
                  "        const int64_t gn = g + 1 < g_hi ? g + 1 : g;",
                  "        {"]
        ind2 = " " * 10
        lines += [ind2 + x for x in self._lead_lines(second, "g")]
        lines += [ind2 + x for x in second.row.lines]
        lines += [ind2 + x for x in self._lead_lines(ahead, "gn", "_n")]
        lines += [ind2 + x for x in ahead.row.lines]
        oflat0 = _flat_of_syms(r0.syms[:first.m], first.shape[:first.m], "_n")
        inner_n = f"const int64_t {r0.syms[first.m].name}_n = {s1};"
        prefetch = (self._skew_prefetch_lines(ahead, r0, first.m)
                    if skew.chunk_first or skew.chunk_second else [])
        lines += self._fused_rows(second, r0, [inner_n] + ahead.body.lines,
                                  ahead.vals[0], oflat0, ind2, s1, skew, prefetch)
        lines.append("        }")
        for part in parts[2:]:
            lines += self._row_step(part, " " * 8)
        lines += ["      }", "      }", "    }"]
        if skew.parallel:
            lines.append("    }")
        return lines

    def _row_min(self, ahead: _RowStep, r0: Reduce, m: int, s1: str, n: int,
                 ind: str) -> list[str]:
        """``kiln_mn``: the min of what ``r0`` folds over row ``g`` (a block's first
        row; the skewed loop folds the next row's min beside its max)."""
        val = ahead.vals[0]
        lines = [ind + "{ const int64_t gn = g;"]
        lines += [ind + "  " + x for x in self._lead_lines(ahead, "gn", "_n")]
        lines += [ind + "  " + x for x in ahead.row.lines]
        lines += [ind + "  #pragma omp simd reduction(min:kiln_mn)",
                  ind + f"  for (int64_t {s1} = 0; {s1} < {n}; {s1}++) {{",
                  ind + f"    const int64_t {r0.syms[m].name}_n = {s1};"]
        lines += [ind + "    " + x for x in ahead.body.lines]
        lines += [ind + f"    kiln_mn = {val} < kiln_mn ? {val} : kiln_mn;",
                  ind + "  }", ind + "}"]
        return lines

    def _skew_prefetch_lines(self, ahead: _RowStep, r0: Reduce, m: int) -> list[str]:
        """Prefetches (``skew_prefetch``) for the chunk ``[c0, c1)`` of a skewed row loop:
        the same lines of the row after the next one (the first step's row-major loads,
        ``ahead``'s names, one row further on), so that the next row's loads, which the
        fused loop issues, find them in L2."""
        hint = self.resolved_hint(self.skew_prefetch)
        if not hint or m < 1:
            return []
        body, inner, row = ahead.body, r0.syms[m], r0.syms[m - 1]
        var = body.sym_names.get(inner.name, inner.name + "_n")
        out, seen = [], set()
        for buf, idx in body.loads:
            stride = idx.coef(row) if idx.is_affine else 0
            if (not idx.is_affine or idx.coef(inner) != 1 or not stride or stride < 0
                    or (buf.id, idx.c()) in seen
                    or any(d.name in body.prog.sym_defs for d in idx.deps)):
                continue
            seen.add((buf.id, idx.c()))
            step = max(1, 64 // np.dtype(buf.dtype).itemsize)
            # Past the last row: nothing (the loop stops at the buffer's end).
            out.append(prefetch_loop(var, "c0", "c1", step,
                                     f"({idx.c(body.sym_names)}) + {stride}", buf, hint))
        return out

    def _fused_rows(self, second: _RowStep, r0: Reduce, lines0, val0, oflat0, ind,
                    s1, skew: SkewPlan, prefetch: list) -> list[str]:
        """One loop over a row doing the second step for this row (a reduction or an
        elementwise kernel) and folding ``r0`` (the first step, a reduction) for the next
        row, each reduction folded the same way as :meth:`_reduce_row` would alone
        (chunked float sums, NaN-flagged float max/min), so no bits change. ``oflat0``
        indexes ``r0``'s output at the next row."""
        st1 = second.st
        n, chunk = skew.length, skew.chunk
        t0 = C_TYPES[r0.out.dtype]
        reduce1 = isinstance(st1, Reduce)
        chunk1, chunk0 = skew.chunk_second, skew.chunk_first
        chunked = chunk0 or chunk1
        ranged = _range_guards(second, r0) if r0.op == "max" else {}
        out = []
        if reduce1:
            out.append(ind + f"{C_TYPES[st1.out.dtype]} acc = "
                             f"{self.reduce_init(st1.op, st1.out.dtype)};")
            clause1 = "reduction(+:part)" if chunk1 else "reduction(+:acc)"
            store1 = [("part" if chunk1 else "acc") + f" += {second.vals[0]};"]
        else:
            clause1 = ""
            flat = _flat_of_syms(st1.syms, second.shape)
            store1 = [f"b{buf.id}[{flat}] = ({C_TYPES[buf.dtype]})({v});"
                      for (buf, _), v in zip(st1.outs, second.vals)]
        out.append(ind + f"{t0} acc_n = {self.reduce_init(r0.op, r0.out.dtype)};")
        if r0.op == "sum":
            fold0 = [("part_n" if chunk0 else "acc_n") + f" += {val0};"]
            clause0 = "reduction(+:part_n)" if chunk0 else "reduction(+:acc_n)"
        else:
            # NaN check in one fused multiply-add: x * 0 is 0 unless x is a NaN or an
            # infinity, so a NaN total means "look again" (below), for that row only.
            # The compare-and-OR it replaces took one more vector instruction in this,
            # the group's hottest loop (3-7% of logsumexp, measured).
            cmp = ">" if r0.op == "max" else "<"
            fma = "fmaf" if r0.out.dtype == F32 else "fma"
            out.append(ind + f"{t0} nanx_n = 0;")
            fold0 = [f"acc_n = {val0} {cmp} acc_n ? {val0} : acc_n;",
                     f"nanx_n = {fma}({val0}, 0, nanx_n);"]
            clause0 = f"reduction({r0.op}:acc_n) reduction(+:nanx_n)"
            if ranged:
                out.append(ind + f"{t0} mn_n = {self.reduce_init('min', r0.out.dtype)};")
                fold0.append(f"mn_n = {val0} < mn_n ? {val0} : mn_n;")
                clause0 += " reduction(min:mn_n)"
        body = list(second.body.lines) + store1 + list(lines0) + fold0
        pragma = " ".join(x for x in ("#pragma omp simd", clause1, clause0) if x)

        def loop(body, ind):
            if not chunked:
                return ([ind + pragma,
                         ind + f"for (int64_t {s1} = 0; {s1} < {n}; {s1}++) {{"]
                        + [ind + "  " + x for x in body] + [ind + "}"])
            lines = [ind + f"for (int64_t c0 = 0; c0 < {n}; c0 += {chunk}) {{",
                     ind + f"  const int64_t c1 = c0 + {chunk} < {n} ? "
                           f"c0 + {chunk} : {n};"]
            if chunk1:
                lines.append(ind + f"  {C_TYPES[st1.out.dtype]} part = 0;")
            if chunk0:
                lines.append(ind + f"  {t0} part_n = 0;")
            lines += [ind + "  " + x for x in prefetch]
            lines += [ind + "  " + pragma,
                      ind + f"  for (int64_t {s1} = c0; {s1} < c1; {s1}++) {{"]
            lines += [ind + "    " + x for x in body]
            lines.append(ind + "  }")
            if chunk1:
                lines.append(ind + "  acc += part;")
            if chunk0:
                lines.append(ind + "  acc_n += part_n;")
            return lines + [ind + "}"]

        bounded = _guards(second, r0)
        if bounded:
            # Every such exp argument is at most its row's bound (and no NaN) when the
            # guard holds: that row runs the loop with fexp32_fin/xexp32_fin (same bits,
            # fewer instructions); an infinity or NaN in the row takes the general loop.
            guard = " && ".join(sorted(set(bounded.values())))
            fast = (second.body.lines_fin(bounded) + store1 + list(lines0) + fold0)
            if ranged:
                # Every summed exp argument also at least FIN_MIN (the row's min):
                # fexp32_in, no select at all.
                inside = (second.body.lines_fin(bounded, ranged) + store1 + list(lines0)
                          + fold0)
                within = " && ".join(sorted(set(ranged.values())))
                out += [ind + f"if ({guard} && {within}) {{"] + loop(inside, ind + "  ")
                out += [ind + f"}} else if ({guard}) {{"] + loop(fast, ind + "  ")
            else:
                out += [ind + f"if ({guard}) {{"] + loop(fast, ind + "  ")
            out += [ind + "} else {"] + loop(body, ind + "  ") + [ind + "}"]
        else:
            out += loop(body, ind)
        if reduce1:
            oflat1 = _flat_of_syms(st1.syms[:second.m], second.shape[:second.m])
            out.append(ind + f"b{st1.out.id}[{oflat1}] = acc;")
        if r0.op != "sum":
            # An infinity or a NaN in the next row: a NaN makes the max NaN (as XLA).
            out += [ind + "if (nanx_n != nanx_n) {",
                    ind + "  int nanf_n = 0;",
                    ind + f"  for (int64_t {s1} = 0; {s1} < {n}; {s1}++) {{"]
            out += [ind + "    " + x for x in lines0]
            out += [ind + f"    nanf_n |= ({val0} != {val0});",
                    ind + "  }",
                    ind + f"  if (nanf_n) acc_n = {c_literal(np.nan, r0.out.dtype)};",
                    ind + "}"]
        # The last row of a range folded its own row again (no branch in the loop);
        # not stored: a step of this row may have overwritten its input in place.
        out.append(ind + f"if (gn != g) b{r0.out.id}[{oflat0}] = acc_n;")
        if ranged:
            out.append(ind + "kiln_mn = mn_n;")
        return out
