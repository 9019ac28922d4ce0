"""C for control flow: :class:`~.program.Loop` and :class:`~.program.Branch` steps.

A scan is a counted ``for`` whose variable is the loop symbol the body's index
expressions use; a while loop is ``for (;;)`` that evaluates its condition's steps and
predicate, then breaks or runs the body; a branch is a ``switch`` on the clamped index.
The steps inside render as anywhere else (fused kernels, row groups, BLAS calls, their
own parallel loops), nested one level deeper.

What it must not hold: lowering decisions (``lower_control.py``).
"""
from __future__ import annotations


def _indented(texts, by: str = "  ") -> list[str]:
    return [by + line for _, text in texts for line in text.split("\n")]


class ControlMixin:
    """Rendering of loops and branches for :class:`~.render_c.CRenderer`."""

    def render_loop(self, prog, loop) -> str:
        from kiln.compiler.render_c import _Body
        lines = ["  {"]
        if loop.kind == "scan":
            c, n = loop.counter.name, loop.length
            if loop.reverse:
                lines.append(f"  for (int64_t {c} = {n - 1}; {c} >= 0; {c}--) {{")
            else:
                lines.append(f"  for (int64_t {c} = 0; {c} < {n}; {c}++) {{")
        else:
            lines.append("  for (;;) {")
            lines += _indented(self.render_step_list(prog, loop.cond_steps))
            body = _Body(self, prog)
            v = body.value(loop.pred)
            lines.append("    {")
            lines += ["      " + x for x in body.prelude_lines() + body.lines]
            lines.append(f"      if (!({v})) break;")
            lines.append("    }")
        lines += _indented(self.render_step_list(prog, loop.body))
        lines.append("  }")
        lines.append("  }")
        return "\n".join(lines)

    def render_branch(self, prog, branch) -> str:
        from kiln.compiler.render_c import _Body
        body = _Body(self, prog)
        v = body.value(branch.index)
        n = len(branch.branches)
        lines = ["  {"] + ["    " + x for x in body.prelude_lines() + body.lines]
        lines.append(f"    switch (kiln_clampi((int64_t)({v}), 0, {n - 1})) {{")
        for k, steps in enumerate(branch.branches):
            lines.append(f"    case {k}: {{")
            lines += _indented(self.render_step_list(prog, steps), "    ")
            lines.append("      break;")
            lines.append("    }")
        lines.append("    }")
        lines.append("  }")
        return "\n".join(lines)
