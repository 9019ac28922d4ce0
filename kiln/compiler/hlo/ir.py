"""The instruction graph of :mod:`kiln.compiler.hlo.build`: XLA-style types, instructions,
computations and modules, and the context the per-primitive rules
(:mod:`kiln.compiler.hlo.rules`) emit into.
"""
from __future__ import annotations

import numpy as np

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


def sanitize(name: str) -> str:
    """A function name as JAX spells it in module and computation names."""
    name = name.replace("<", "_").replace(">", "")
    return "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in name) or "_"


def result_types(module: Module) -> list[TensorT]:
    t = module.entry.root.type
    return list(t) if isinstance(t, tuple) else [t]
