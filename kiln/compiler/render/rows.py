"""Printing row groups as C: consecutive steps sharing one loop over rows (decided by
``row_groups.py``), with skewed rows (a reduction's row ahead of its users) and fused
row pairs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from kiln.compiler.lower.index import row_major_strides
from kiln.compiler.lower.program import (
    Kernel,
    Program,
    Reduce,
)
from kiln.compiler.lower.walk import walk
from kiln.compiler.render.c_expr import (
    _DECLARED,
    C_TYPES,
    F32,
    F64,
    Body,
    _cost_of,
    _flat_of_syms,
    _row_major_buffer,
    c_literal,
)
from kiln.compiler.render.reductions import _summed
from kiln.compiler.render.row_groups import lead_dims, loop_shape, row_count


@dataclass
class _RowStep:
    """One step of a row group with its rendered bodies."""
    st: object
    m: int                  # leading dims enumerating the rows
    shape: tuple
    body: Body
    row: Body              # what depends on the row only
    vals: list
    prelude: list


def _step_cost(st) -> int:
    return st.body.cost if isinstance(st, Reduce) else _cost_of(st.outs)


def _skewable(parts: list) -> bool:
    """Whether a row group opens with a reduction (float max, min or sum) then a float
    sum or an elementwise kernel over rows of the same length (one trailing loop dim
    each): the case :meth:`CRenderer._skewed_rows` pipelines."""
    if len(parts) < 2:
        return False
    a, b = parts[0], parts[1]
    if not (isinstance(a.st, Reduce) and a.st.op in ("max", "min", "sum")
            and a.st.out.dtype in (F32, F64)):
        return False
    if isinstance(b.st, Reduce):
        if not (b.st.op == "sum" and b.st.out.dtype in (F32, F64)):
            return False
    elif not isinstance(b.st, Kernel) or b.st.offset is not None:
        return False
    if len(a.shape) - a.m != 1 or len(b.shape) - b.m != 1 or a.shape[-1] != b.shape[-1]:
        return False
    # Work enough per row that hiding the next row's loads is worth a second inner body.
    return a.shape[-1] >= 256


def _bounded_exps(second: _RowStep, r0: Reduce) -> dict:
    """The float32 exps in the second step of a row group (a float sum, elementwise
    kernel) whose argument is ``e - c``, with ``e`` the value the group's first step
    (``r0``, a float32 max over the same row) reduced and ``c`` constant along the row:
    ``{argument name: guard}``, the guard a C condition true when every such argument in
    row ``g`` is at most ``fast_math.FIN_MAX`` and none is NaN (``e <= max(e)`` and
    rounding is monotone, so ``fl(e - c) <= fl(max - c)``; a NaN max means a NaN in the
    row). That is ``exp(x - max(x))`` in logsumexp and softmax, whose exps then need no
    overflow or NaN select (``fexp32_fin``, ``xexp32_fin``)."""
    from kiln.compiler.render.fast_math import FIN_MAX
    st = second.st
    if isinstance(st, Reduce):
        if not _summed(st):
            return {}
        roots = [st.body]
    else:
        roots = [e for _, e in st.outs]
    if not (r0.op == "max" and r0.out.dtype == F32):
        return {}
    same_loops = (tuple(r0.in_shape) == tuple(second.shape)
                  and [s.name for s in r0.syms] == [s.name for s in st.syms])
    maxed = _row_major_buffer(r0.body, r0.syms, r0.in_shape)
    body = second.body
    inner = {s.name for s in st.syms[second.m:]}
    in_loop = {m.group(1) for m in map(_DECLARED.match, body.lines) if m}
    out = {}
    for e in walk(body.prog, roots):
        if not (e.kind == "op" and e.params[0] == "exp" and e.dtype == F32):
            continue
        a = e.args[0]
        if not (a.kind == "op" and a.params[0] == "sub"):
            continue
        # e is what r0 maxed, element for element: the same node over the same loops,
        # or a load of the same buffer at the row-major position of each step's own
        # loop indices (a vmapped group may see the rows as [120, n] and [3, 40, n]).
        if not ((same_loops and a.args[0].uid == r0.body.uid)
                or (maxed is not None
                    and _row_major_buffer(a.args[0], st.syms, second.shape) == maxed)):
            continue
        c = a.args[1]
        arg, cname = body.names.get(a.uid), body.names.get(c.uid)
        if arg is None or cname is None or cname in in_loop or body.loop_deps(c) & inner:
            continue
        # r0's output holds one value per row, row-major over its leading dims: row g.
        out[arg] = f"((float)(b{r0.out.id}[g] - {cname}) <= {FIN_MAX})"
    return out



class RowsMixin:
    """Methods of :class:`~kiln.compiler.render.render_c.CRenderer` (see its attributes)."""

    def render_row_group(self, prog: Program, steps: list) -> str:
        """Steps sharing one loop over rows (``row_groups``): for each row, each step's
        work in turn, so later steps read the row from cache. Each step names the row
        its own way (its leading loop symbols, from the flat row number ``g``).

        When the group opens with a float reduction followed by a float sum or an
        elementwise step over the same row length (a max then a sum of exps:
        ``logsumexp``; a max then the exps: softmax; a mean then a sum of squares: layer
        norm), the loop is skewed (:meth:`_skewed_rows`): the first reduction of row
        ``g + 1`` runs in the same inner loop as the second step of row ``g``, so the
        next row's loads from memory overlap the current row's arithmetic."""
        n_rows = row_count(steps[0])
        work, parts, prelude = 0, [], []
        for st in steps:
            m = lead_dims(st, n_rows)
            part = self._row_step_bodies(prog, st, m)
            work += math.prod(loop_shape(st)) * max(1, _step_cost(st))
            parts.append(part)
            prelude += [x for x in part.prelude if x not in prelude]
        skew = _skewable(parts) and n_rows >= 2
        if skew:
            # The first step once more, for the row after the one being summed: its own
            # bodies (rendered again), every name it declares suffixed ``_n``.
            ahead = self._row_step_bodies(prog, steps[0], parts[0].m)
            prelude += [x for x in ahead.prelude if x not in prelude]
        lines = ["  {"] + ["    " + x for x in prelude]
        parallel = work >= self.parallel_threshold
        if skew:
            lines += self._skewed_rows(parts, ahead, n_rows, parallel)
        else:
            if parallel:
                lines.append("    " + self.parallel_for)
            lines.append(f"    for (int64_t g = 0; g < {n_rows}; g++) {{")
            for part in parts:
                lines += self._row_step(part, " " * 6)
            lines.append("    }")
        lines.append("  }")
        return "\n".join(lines)

    def _row_step_bodies(self, prog: Program, st, m: int) -> _RowStep:
        body = Body(self, prog)
        # What depends on the row only is computed once per row, before the step's
        # inner loops (else gcc may leave those loops scalar).
        row = body.hoisting(st.syms[m:])
        if isinstance(st, Reduce):
            body.summed = _summed(st)
            vals = [body.value(st.body)]
        else:
            vals = [body.value(e) for _, e in st.outs]
        prelude = [x for b in (row, body) for x in b.prelude_lines()]
        return _RowStep(st, m, loop_shape(st), body, row, vals, prelude)

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
                                      parallel=False,
                                      next_row=st.syms[m - 1] if m else None)
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
                     parallel: bool) -> list[str]:
        """The row loop of a group opening with a reduction then a step over rows of the
        same length, software-pipelined: rows go in blocks (taken dynamically by the
        threads); each block reduces its first row with the first step alone, then for each row ``g``
        runs one inner loop computing the second step of row ``g`` and the first step
        of row ``g + 1`` (``ahead``: the first step rendered again, its names suffixed
        ``_n``), then the other steps of row ``g``. At the last row of a block the loop
        folds that row again rather than branching, and drops the result."""
        first, second = parts[0], parts[1]
        r0 = first.st
        s1 = second.st.syms[second.m].name
        declared = {s.name for s in r0.syms}
        for x in ahead.row.lines + ahead.body.lines:
            hit = _DECLARED.match(x)
            if hit:
                declared.add(hit.group(1))
        pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, declared))) + r")\b")

        def renamed(xs):
            return [pattern.sub(r"\1_n", x) for x in xs]

        ind = " " * 6
        lines = []
        # Blocks of rows handed out dynamically: under a loaded machine a thread that
        # loses its core does not hold the others up (each block costs one extra pass of
        # the first step over its first row: ~1/150 of the work).
        block = max(16, -(-n_rows // 32))
        n_blocks = -(-n_rows // block)
        if parallel:
            lines.append("    #pragma omp parallel for schedule(dynamic, 1)")
        lines += [f"    for (int64_t blk = 0; blk < {n_blocks}; blk++) {{",
                  f"      const int64_t g_lo = blk * {block}, g_hi = g_lo + {block} < {n_rows} "
                  f"? g_lo + {block} : {n_rows};"]
        lines += ["      if (g_lo < g_hi) {",
                  "      { const int64_t g = g_lo;"]
        lines += self._row_step(first, ind + "  ")
        lines += ["      }",
                  "      for (int64_t g = g_lo; g < g_hi; g++) {",
                  "        const int64_t gn = g + 1 < g_hi ? g + 1 : g;",
                  "        {"]
        ind2 = " " * 10
        lines += [ind2 + x for x in self._lead_lines(second, "g")]
        lines += [ind2 + x for x in second.row.lines]
        lines += [ind2 + x for x in self._lead_lines(ahead, "gn", "_n")]
        lines += [ind2 + x for x in renamed(ahead.row.lines)]
        oflat0 = pattern.sub(r"\1_n", _flat_of_syms(r0.syms[:first.m], first.shape[:first.m]))
        inner_n = f"const int64_t {r0.syms[first.m].name}_n = {s1};"
        lines += self._fused_rows(
            second, r0, [inner_n] + renamed(ahead.body.lines),
            pattern.sub(r"\1_n", ahead.vals[0]), oflat0, ind2, s1)
        lines.append("        }")
        for part in parts[2:]:
            lines += self._row_step(part, " " * 8)
        lines += ["      }", "      }", "    }"]
        return lines

    def _fused_rows(self, second: _RowStep, r0: Reduce, lines0, val0, oflat0, ind,
                    s1) -> list[str]:
        """One loop over a row doing the second step for this row (a reduction or an
        elementwise kernel) and folding ``r0`` (the first step, a reduction) for the next
        row, each reduction folded the same way as :meth:`_reduce_row` would alone
        (chunked float sums, NaN-flagged float max/min), so no bits change. ``oflat0``
        indexes ``r0``'s output at the next row."""
        st1 = second.st
        n = second.shape[-1]
        t0 = C_TYPES[r0.out.dtype]
        reduce1 = isinstance(st1, Reduce)
        chunk1 = reduce1 and n > 2 * self.chunk            # a float sum (_skewable)
        chunk0 = r0.op == "sum" and n > 2 * self.chunk
        chunked = chunk0 or chunk1
        out = []
        if reduce1:
            out.append(ind + f"{C_TYPES[st1.out.dtype]} acc = "
                             f"{self.reduce_init(st1.op, st1.out.dtype)};")
            clause1 = "reduction(+:part)" if chunk1 else "reduction(+:acc)"
            body1 = list(second.body.lines) + [("part" if chunk1 else "acc") +
                                               f" += {second.vals[0]};"]
        else:
            clause1 = ""
            flat = _flat_of_syms(st1.syms, second.shape)
            body1 = list(second.body.lines) + [
                f"b{buf.id}[{flat}] = ({C_TYPES[buf.dtype]})({v});"
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
        body = body1 + list(lines0) + fold0
        pragma = " ".join(x for x in ("#pragma omp simd", clause1, clause0) if x)

        def loop(body, ind):
            if not chunked:
                return ([ind + pragma,
                         ind + f"for (int64_t {s1} = 0; {s1} < {n}; {s1}++) {{"]
                        + [ind + "  " + x for x in body] + [ind + "}"])
            lines = [ind + f"for (int64_t c0 = 0; c0 < {n}; c0 += {self.chunk}) {{",
                     ind + f"  const int64_t c1 = c0 + {self.chunk} < {n} ? "
                           f"c0 + {self.chunk} : {n};"]
            if chunk1:
                lines.append(ind + f"  {C_TYPES[st1.out.dtype]} part = 0;")
            if chunk0:
                lines.append(ind + f"  {t0} part_n = 0;")
            lines += [ind + "  " + pragma,
                      ind + f"  for (int64_t {s1} = c0; {s1} < c1; {s1}++) {{"]
            lines += [ind + "    " + x for x in body]
            lines.append(ind + "  }")
            if chunk1:
                lines.append(ind + "  acc += part;")
            if chunk0:
                lines.append(ind + "  acc_n += part_n;")
            return lines + [ind + "}"]

        bounded = _bounded_exps(second, r0)
        if bounded:
            # Every such exp argument is at most its row's bound (and no NaN) when the
            # guard holds: that row runs the loop with fexp32_fin/xexp32_fin (same bits,
            # fewer instructions); an infinity or NaN in the row takes the general loop.
            guard = " && ".join(sorted(set(bounded.values())))
            fast = list(body)
            for arg in bounded:
                for f in ("fexp32", "xexp32"):
                    fast = [x.replace(f"{f}({arg})", f"{f}_fin({arg})") for x in fast]
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
        return out
