"""kiln's optimised jaxpr as a graph of XLA-style instructions (for ``compiler_ir``).

:func:`build_module` turns a ``ClosedJaxpr`` (after kiln's passes) into a small
instruction graph with XLA's opcodes and attributes: one or a few instructions per
equation, following JAX's lowering of each primitive to HLO (``integer_pow`` by repeated
squaring, ``select_n`` to ``select`` with the cases swapped, reductions to ``reduce`` with
a region computation, ``while``/``cond`` to ``while``/``conditional`` computations, ...).
Primitives with no HLO counterpart become ``custom-call`` instructions whose target is
``kiln.<primitive>`` (with their sub-jaxprs as ``called_computations``), so every program
can be printed. :mod:`kiln.compiler.hlo.text` prints the graph in HLO text syntax and
:mod:`kiln.compiler.hlo.stablehlo_text` in StableHLO MLIR syntax.

This is a rendering of kiln's program, not XLA's output: there is no layout assignment,
fusion or algebraic simplification beyond kiln's own passes.
"""
from __future__ import annotations

from kiln.compiler.hlo.ir import (  # noqa: F401  (the graph's names, re-exported)
    Computation,
    Ctx,
    Instr,
    Module,
    TensorT,
    result_types,
    sanitize,
    tensor_of,
)
from kiln.compiler.hlo.rules import jaxpr_computation, lower_jaxpr  # noqa: F401
from kiln.core.jaxpr import ClosedJaxpr


def build_module(closed: ClosedJaxpr, name: str) -> Module:
    """The instruction graph of ``closed`` (an optimised jaxpr) as module ``jit_<name>``."""
    module = Module(f"jit_{sanitize(name)}")
    entry = Computation("main")
    ctx = Ctx(module, entry)
    jaxpr = closed.jaxpr
    for i, v in enumerate(jaxpr.invars):
        entry.params.append(entry.add(Instr("parameter", tensor_of(v.aval), [], f"Arg_{i}",
                                            index=i)))
    outs = lower_jaxpr(ctx, jaxpr, closed.consts, entry.params)
    entry.root = outs[0] if len(outs) == 1 else ctx.tuple(outs)
    module.computations.append(entry)
    module.entry = entry
    module.finish()
    return module
