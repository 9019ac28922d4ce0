"""C for control flow: :class:`~.program.Loop` and :class:`~.program.Branch` steps.

A scan is a counted ``for`` whose variable is the loop symbol the body's index
expressions use; a while loop is ``for (;;)`` that evaluates its condition's steps and
predicate, then breaks or runs the body; a branch is a ``switch`` on the clamped index.
The steps inside render as anywhere else (fused kernels, row groups, BLAS calls, their
own parallel loops), nested one level deeper.

What it must not hold: lowering decisions (``lower_control.py``).
"""
from __future__ import annotations

import os

import numpy as np

from kiln.compiler.render.body import Body
from kiln.compiler.render.c_expr import C_TYPES
from kiln.compiler.render.plan_loops import ConvPlan


def _indented(texts, by: str = "  ") -> list[str]:
    return [by + line for _, text in texts for line in text.split("\n")]


class ControlMixin:
    """Rendering of loops and branches for :class:`~.render_c.CRenderer`."""

    def render_loop(self, prog, loop) -> str:
        lines = ["  {"]
        if loop.kind == "scan":
            c, n = loop.counter.name, loop.length
            if loop.reverse:
                lines.append(f"  for (int64_t {c} = {n - 1}; {c} >= 0; {c}--) {{")
            else:
                lines.append(f"  for (int64_t {c} = 0; {c} < {n}; {c}++) {{")
        else:
            lines.append("  for (;;) {")
        if getattr(self, "_host", False):
            # a failed call back into Python stops every loop of the program (host_entry)
            lines.append("    if (kiln_host_failed) break;")
        if loop.kind != "scan":
            lines += _indented(self.render_step_list(prog, loop.cond_steps))
            body = Body(self, prog)
            v = body.value(loop.pred)
            # The prelude (dynamic-index symbols) may declare a temporary the lines
            # declare too (rendered before the first symbol needed it): the lines go in
            # a block of their own, where their declaration shadows the prelude's.
            lines.append("    {")
            lines += ["      " + x for x in body.prelude_lines()]
            lines.append("      {")
            lines += ["        " + x for x in body.lines]
            lines.append(f"        if (!({v})) break;")
            lines.append("      }")
            lines.append("    }")
        lines += _indented(self._timed_body(prog, loop, loop.body))
        lines.append("  }")
        lines.append("  }")
        return "\n".join(lines)

    def _timed_body(self, prog, loop, steps):
        """The loop body's rendered steps; with ``time_loop_bodies`` (the profiler's
        per-step build) each is bracketed by a clock read that adds its time and one call
        to the library's ``kiln_loop_t``/``kiln_loop_n`` slot ``k``, and ``(k, step,
        loop, segment name)`` is appended to ``loop_timers`` (a nested loop's own slot is
        the one whose step is that loop)."""
        texts = self.render_step_list(prog, steps)
        if not getattr(self, "time_loop_bodies", False):
            return texts
        timers = self.loop_timers
        out = []
        for step, text in texts:
            k = len(timers)
            timers.append((k, step, loop, getattr(self, "_cur_segment", None)))
            out.append((step, f"  {{ double kiln_t0_ = kiln_loop_now();\n{text}\n"
                              f"  kiln_loop_t[{k}] += kiln_loop_now() - kiln_t0_; "
                              f"kiln_loop_n[{k}]++; }}"))
        return out

    def render_branch(self, prog, branch) -> str:
        body = Body(self, prog)
        v = body.value(branch.index)
        n = len(branch.branches)
        # The lines in a block of their own (see render_loop's predicate).
        lines = ["  {"] + ["    " + x for x in body.prelude_lines()] + ["  {"]
        lines += ["    " + x for x in body.lines]
        lines.append(f"    switch (kiln_clampi((int64_t)({v}), 0, {n - 1})) {{")
        for k, steps in enumerate(branch.branches):
            lines.append(f"    case {k}: {{")
            lines += _indented(self.render_step_list(prog, steps), "    ")
            lines.append("      break;")
            lines.append("    }")
        lines.append("    }")
        lines.append("  }")
        lines.append("  }")
        return "\n".join(lines)


class ConvMixin:
    """Rendering of :class:`~.program.Conv` steps for :class:`~.render_c.CRenderer`, as
    their :class:`~.plan_loops.ConvPlan` (``plan_loops.plan_conv``) says."""

    # Patch rows per tile: at least conv_min_rows, else as many as keep the tile
    # (rows x k) within conv_tile_elements (read into the plans' LoopTarget).
    conv_tile_elements = 1 << 16
    conv_min_rows = 128
    conv_cores = max(1, os.cpu_count() or 1)
    conv_position_major_min_n = 16

    def render_conv(self, prog, cv, plan: ConvPlan) -> str:
        import math

        t = C_TYPES[cv.out.dtype]
        body = Body(self, prog)
        val = body.value(cv.col)
        nsp = len(cv.out_sp)
        kdim = math.prod(cv.k_sp) * cv.cg
        o_total = cv.groups * cv.og
        rows0 = cv.out_sp[0]
        row_len = math.prod(cv.out_sp[1:])            # patches per row of the first dim
        ipt, rpt, nblk, ntiles = plan.ipt, plan.rpt, plan.nblk, plan.ntiles
        f = "kiln_gemm_f32" if cv.out.dtype == np.dtype(np.float32) else "kiln_gemm_f64"
        zero = "0.0f" if cv.out.dtype == np.dtype(np.float32) else "0.0"
        n_s, g_s = cv.syms[0].name, cv.syms[1].name
        o_syms = cv.syms[2:2 + nsp]
        k_syms = cv.syms[2 + nsp:2 + 2 * nsp]
        c_s = cv.syms[-1].name
        lines = ["  {"] + ["    " + x for x in body.prelude_lines()]
        par = plan.parallel
        if par:
            lines.append("    " + self.parallel_region)
        lines.append("    {")
        lines.append(f"      {t} *cols = ({t} *)malloc(sizeof({t}) * "
                     f"{ipt * rpt * row_len * kdim});")
        if par:
            lines.append("      " + self.for_in_region)
        lines.append(f"      for (int64_t tile = 0; tile < {ntiles}; tile++) {{")
        if nblk == 1:
            lines.append(f"        const int64_t n0 = tile * {ipt};")
            lines.append(f"        const int64_t n1 = n0 + {ipt} < {cv.n} ? n0 + {ipt} : {cv.n};")
            lines.append(f"        const int64_t r0 = 0, r1 = {rows0};")
        else:
            lines.append(f"        const int64_t n0 = tile / {nblk}, n1 = n0 + 1;")
            lines.append(f"        const int64_t r0 = (tile % {nblk}) * {rpt};")
            lines.append(f"        const int64_t r1 = r0 + {rpt} < {rows0} ? r0 + {rpt} : {rows0};")
        lines.append(f"        for (int64_t {g_s} = 0; {g_s} < {cv.groups}; {g_s}++) {{")
        depth = 10
        loops = [(n_s, "n0", "n1"), (o_syms[0].name, "r0", "r1")] \
            + [(s.name, "0", str(m)) for s, m in zip(o_syms[1:], cv.out_sp[1:])] \
            + [(s.name, "0", str(m)) for s, m in zip(k_syms, cv.k_sp)] + [(c_s, "0", str(cv.cg))]
        for name, lo, hi in loops:
            lines.append(" " * depth + f"for (int64_t {name} = {lo}; {name} < {hi}; {name}++) {{")
            depth += 2
        # Row of the tile: (image, first out dim from r0, other out dims); then k.
        prow = f"(({n_s} - n0) * (r1 - r0) + ({o_syms[0].name} - r0))"
        for s, m in zip(o_syms[1:], cv.out_sp[1:]):
            prow = f"({prow} * {m} + {s.name})"
        kcol = "0"
        for s, m in zip(k_syms, cv.k_sp):
            kcol = f"({kcol} * {m} + {s.name})"
        kcol = f"({kcol} * {cv.cg} + {c_s})"
        lines += [" " * depth + x for x in body.lines]
        lines.append(" " * depth + f"cols[{prow} * {kdim} + {kcol}] = ({t})({val});")
        for _ in loops:
            depth -= 2
            lines.append(" " * depth + "}")
        lines.append(f"          {f}(0, 0, (n1 - n0) * (r1 - r0) * {row_len}, {cv.og}, {kdim}, "
                     f"cols, {kdim}, b{cv.w.id} + {g_s} * {kdim * cv.og}, {cv.og}, "
                     f"b{cv.out.id} + (n0 * {rows0} + r0) * {row_len * o_total} + "
                     f"{g_s} * {cv.og}, {o_total}, {zero});")
        lines.append("        }")
        lines.append("      }")
        lines.append("      free(cols);")
        lines.append("    }")
        lines.append("  }")
        return "\n".join(lines)
