"""The plan of each run of native steps: row groups, then one loop plan per step.

:func:`plan_steps` is what the renderer asks before printing a list of steps: it splits
them into row groups (``row_groups.py``) and gives each group or step its plan
(``plan_loops.py``, ``plan_reduce.py``). Loops and branches have no plan of their own
(their bodies are planned when printed, as steps like any others); nor have GEMMs.

What it must not hold: C text.
"""
from __future__ import annotations

from kiln.compiler.lower.program import Conv, Kernel, Program, Reduce, Scan, Scatter
from kiln.compiler.render.plan_loops import (
    LoopTarget,
    plan_arg_reduce,
    plan_conv,
    plan_kernel,
    plan_scan,
    plan_scatter,
)
from kiln.compiler.render.plan_reduce import plan_reduce, plan_row_group
from kiln.compiler.render.row_groups import row_groups


def plan_step(prog: Program, step, t: LoopTarget):
    """The loop plan of one step (None for steps without one: loops, branches, GEMMs)."""
    if isinstance(step, Kernel):
        return plan_kernel(prog, step, t)
    if isinstance(step, Reduce):
        if step.op in ("argmax", "argmin"):
            return plan_arg_reduce(step, t)
        return plan_reduce(step, t)
    if isinstance(step, Scan):
        return plan_scan(step, t)
    if isinstance(step, Scatter):
        return plan_scatter(step, t)
    if isinstance(step, Conv):
        return plan_conv(step, t)
    return None


def plan_steps(prog: Program, steps: list, t: LoopTarget) -> list[tuple[list, object]]:
    """``[(group, plan)]`` for consecutive native ``steps`` in order: a group of several
    steps shares one loop over rows (a :class:`~.plan_reduce.RowGroupPlan`); a group of
    one step has that step's plan."""
    out = []
    for group in row_groups(prog, steps):
        if len(group) > 1:
            out.append((group, plan_row_group(group, t)))
        else:
            out.append((group, plan_step(prog, group[0], t)))
    return out
