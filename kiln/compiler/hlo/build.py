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

import numpy as np

from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal

# ----------------------------------------------------------------------------------------------
# The instruction graph.


class TensorT:
    """An array type: dimensions and a NumPy dtype."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)

    def __eq__(self, other):
        return (isinstance(other, TensorT) and self.shape == other.shape
                and self.dtype == other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))


def tensor_of(aval) -> TensorT:
    return TensorT(aval.shape, aval.dtype)


class Instr:
    """One instruction: ``opcode`` over ``operands`` giving ``type`` (a :class:`TensorT` or a
    tuple of them), with XLA attributes in ``attrs`` (structured values) and ``hint`` the
    base of its printed name (the primitive's name, as JAX's HLO names instructions)."""

    __slots__ = ("opcode", "type", "operands", "attrs", "hint", "value", "index")

    def __init__(self, opcode, type_, operands, hint, attrs=None, value=None, index=None):
        self.opcode = opcode
        self.type = type_
        self.operands = list(operands)
        self.attrs = dict(attrs or {})
        self.hint = hint
        self.value = value          # constants: the NumPy value
        self.index = index          # parameters: the parameter number


class Computation:
    """A computation: parameters, instructions in emission order, a root."""

    def __init__(self, base_name: str, kind: str = "func"):
        self.base_name = base_name
        self.kind = kind            # "func" (called), "region" (reduce/sort/... body)
        self.params: list[Instr] = []
        self.instrs: list[Instr] = []
        self.root: Instr | None = None
        self.name = base_name       # set by the module once all computations are known
        self._consts: dict = {}

    def add(self, instr: Instr) -> Instr:
        self.instrs.append(instr)
        return instr


class Module:
    """The computations of one program; ``computations`` ends with the entry."""

    def __init__(self, name: str):
        self.name = name
        self.computations: list[Computation] = []
        self.entry: Computation | None = None

    def finish(self):
        regions = 0
        for i, comp in enumerate(self.computations, 1):
            base = comp.base_name
            if base == "region":            # JAX's region_0, region_1, ...
                base, regions = f"region_{regions}", regions + 1
            comp.name = f"{base}.{i}"


# ----------------------------------------------------------------------------------------------
# Emission helpers.


class Ctx:
    """The computation being filled and the module it belongs to."""

    def __init__(self, module: Module, comp: Computation):
        self.module = module
        self.comp = comp

    def emit(self, opcode, type_, operands, hint=None, **attrs) -> Instr:
        return self.comp.add(Instr(opcode, type_, operands, hint or opcode, attrs))

    def constant(self, value, dtype) -> Instr:
        value = np.asarray(value, dtype=dtype)
        key = (value.dtype.str, value.shape, value.tobytes()) if value.size <= 16 else None
        hit = self.comp._consts.get(key) if key is not None else None
        if hit is not None:
            return hit
        ins = self.comp.add(Instr("constant", TensorT(value.shape, value.dtype), [],
                                  "constant", value=value))
        if key is not None:
            self.comp._consts[key] = ins
        return ins

    def broadcast_to(self, x: Instr, shape) -> Instr:
        """``x`` (a scalar or of ``shape`` already) at ``shape``."""
        shape = tuple(shape)
        if x.type.shape == shape:
            return x
        if x.type.shape != ():
            raise ValueError(f"cannot broadcast {x.type.shape} to {shape} implicitly")
        key = ("broadcast", id(x), shape)
        hit = self.comp._consts.get(key)
        if hit is not None:
            return hit
        ins = self.emit("broadcast", TensorT(shape, x.type.dtype), [x], "broadcast",
                        dimensions=())
        if x.opcode == "constant":
            self.comp._consts[key] = ins
        return ins

    def full(self, value, t: TensorT) -> Instr:
        return self.broadcast_to(self.constant(value, t.dtype), t.shape)

    def gte(self, x: Instr, i: int, hint=None) -> Instr:
        return self.emit("get-tuple-element", x.type[i], [x], hint or "get-tuple-element",
                         index=i)

    def tuple(self, xs, hint="tuple") -> Instr:
        return self.emit("tuple", tuple(x.type for x in xs), xs, hint)

    def region(self, base_name, param_types, hint, body) -> Computation:
        """A new computation with parameters of ``param_types`` (named ``hint``) whose
        root is ``body(ctx, params)``."""
        comp = Computation(base_name, "region")
        sub = Ctx(self.module, comp)
        for i, t in enumerate(param_types):
            comp.params.append(comp.add(Instr("parameter", t, [], hint, index=i)))
        comp.root = body(sub, comp.params)
        self.module.computations.append(comp)
        return comp

    def scalar_binop_region(self, base_name, dtype, opcode, hint) -> Computation:
        t = TensorT((), dtype)
        return self.region(base_name, [t, t], hint,
                           lambda c, ps: c.emit(opcode, t, ps, hint))


# ----------------------------------------------------------------------------------------------
# Jaxprs to computations.


def lower_jaxpr(ctx: Ctx, jaxpr: Jaxpr, consts, args) -> list[Instr]:
    """Emit the equations of ``jaxpr`` into ``ctx`` with ``args`` for its invars; the
    instructions of its outputs."""
    env: dict = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[v] = ctx.constant(np.asarray(c), v.aval.dtype)
    for v, a in zip(jaxpr.invars, args):
        env[v] = a

    def read(v):
        if isinstance(v, Literal):
            return ctx.constant(np.asarray(v.val), v.aval.dtype)
        return env[v]

    from kiln.compiler.hlo.rules import lower_eqn
    for eqn in jaxpr.eqns:
        outs = lower_eqn(ctx, eqn, [read(v) for v in eqn.invars])
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def jaxpr_computation(ctx: Ctx, closed: ClosedJaxpr | Jaxpr, base_name: str,
                      param_hint: str | None = None, tuple_param: bool = False,
                      tuple_root: bool | None = None) -> Computation:
    """A called computation for a (closed) jaxpr. Parameters are ``Arg_i`` (JAX's names
    when the argument's name is unknown), or one tuple parameter when ``tuple_param``; the
    root is a tuple when there are several outputs (or ``tuple_root``)."""
    jaxpr = closed.jaxpr if isinstance(closed, ClosedJaxpr) else closed
    consts = closed.consts if isinstance(closed, ClosedJaxpr) else []
    comp = Computation(base_name)
    sub = Ctx(ctx.module, comp)
    types = [tensor_of(v.aval) for v in jaxpr.invars]
    if tuple_param:
        p = comp.add(Instr("parameter", tuple(types), [], param_hint or "arg_tuple", index=0))
        comp.params.append(p)
        args = [sub.gte(p, i) for i in range(len(types))]
    else:
        args = []
        for i, t in enumerate(types):
            p = comp.add(Instr("parameter", t, [], param_hint or f"Arg_{i}", index=i))
            comp.params.append(p)
            args.append(p)
    outs = lower_jaxpr(sub, jaxpr, consts, args)
    if tuple_root is None:
        tuple_root = len(outs) != 1
    comp.root = sub.tuple(outs) if tuple_root else outs[0]
    ctx.module.computations.append(comp)
    return comp


def sanitize(name: str) -> str:
    """A function name as JAX spells it in module and computation names."""
    name = name.replace("<", "_").replace(">", "")
    return "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in name) or "_"


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


def result_types(module: Module) -> list[TensorT]:
    t = module.entry.root.type
    return list(t) if isinstance(t, tuple) else [t]

