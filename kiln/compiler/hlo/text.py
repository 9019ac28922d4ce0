"""kiln's optimised program printed in XLA's HLO text syntax (``compiler_ir("hlo")``).

``jit(f).lower(x).compiler_ir(dialect="hlo")`` returns an :class:`HloComputation` whose
:meth:`~HloComputation.as_hlo_text` is the program kiln compiles (the jaxpr after
``kiln.compiler.passes.passes.optimize``) written as an HLO module::

    HloModule jit_f, entry_computation_layout={(f32[2]{0})->f32[2]{0}}

    ENTRY main.1 {
      Arg_0.1 = f32[2]{0} parameter(0)
      ROOT mul.1 = f32[2]{0} multiply(Arg_0.1, Arg_0.1)
    }

Instructions carry XLA's opcodes and attributes as JAX lowers each primitive
(:mod:`kiln.compiler.hlo.rules`) and are named, as in JAX's HLO, after the primitive they
come from with a per-name counter; parameters are ``Arg_<i>`` (kiln's ``Lowered`` does not
keep the Python argument names JAX uses). Instructions are listed in XLA's order (each
after its operands, in a depth-first walk from the root). This is kiln's program in XLA's
syntax, not XLA's output: XLA's own passes (constant folding, fusion, layout assignment)
do not run, so numbering and instruction choice can differ from JAX's.
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.hlo.build import Computation, Instr, Module, build_module
from kiln.core.jaxpr import ClosedJaxpr

__all__ = ["HloComputation", "hlo_module_text", "hlo_type", "lower_to_hlo"]

_DTYPES = {
    "bool": "pred", "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f16",
    "bfloat16": "bf16", "float32": "f32", "float64": "f64", "complex64": "c64",
    "complex128": "c128", "int4": "s4", "uint4": "u4", "int2": "s2", "uint2": "u2",
}


def hlo_dtype(dtype) -> str:
    name = np.dtype(dtype).name
    if name in _DTYPES:
        return _DTYPES[name]
    if name.startswith("float8_"):
        return "f8" + name[len("float8_"):]
    return name


def hlo_type(t, layout: bool = True) -> str:
    """XLA's spelling of a type, e.g. ``f32[2,3]{1,0}`` or a tuple ``(f32[], s32[])``."""
    if isinstance(t, tuple):
        parts = []
        for i, s in enumerate(t):
            mark = f"/*index={i}*/" if i and i % 5 == 0 else ""
            parts.append(mark + hlo_type(s, layout))
        return "(" + ", ".join(parts) + ")"
    dims = ",".join(str(d) for d in t.shape)
    text = f"{hlo_dtype(t.dtype)}[{dims}]"
    if layout and t.shape:
        text += "{" + ",".join(str(d) for d in reversed(range(len(t.shape)))) + "}"
    return text


# ----------------------------------------------------------------------------------------------
# Literals.

def _scalar_text(v, dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "true" if v else "false"
    if np.issubdtype(dtype, np.complexfloating):
        part = np.finfo(dtype).dtype
        return f"({_scalar_text(v.real, part)}, {_scalar_text(v.imag, part)})"
    if np.issubdtype(dtype, np.floating) or dtype.kind == "V" or "float" in dtype.name:
        f = float(v)
        if np.isnan(f):
            return "nan"
        if np.isinf(f):
            return "inf" if f > 0 else "-inf"
        digits = {8: 17, 4: 9}.get(dtype.itemsize, 5)
        return f"{f:.{digits}g}"
    return str(int(v))


def _literal_text(value: np.ndarray) -> str:
    if value.ndim == 0:
        return _scalar_text(value[()], value.dtype)
    if value.size > 10:
        return "{...}"

    def elem(v):
        return ("1" if v else "0") if value.dtype == np.bool_ else _scalar_text(v, value.dtype)

    if value.ndim == 1:
        return "{" + ", ".join(elem(v) for v in value) + "}"

    def nested(a):
        if a.ndim == 1:
            inner = ", ".join(elem(v) for v in a)
            return "{" + inner + "}" if len(a) == 1 else "{ " + inner + " }"
        return "{ " + ", ".join(nested(s) for s in a) + " }"
    return nested(value)


# ----------------------------------------------------------------------------------------------
# Attributes.

def _ints(xs) -> str:
    return "{" + ",".join(str(int(x)) for x in xs) + "}"


def _window_text(w: dict) -> str:
    parts = ["size=" + "x".join(str(s) for s in w["size"])]
    if "stride" in w and any(s != 1 for s in w["stride"]):
        parts.append("stride=" + "x".join(str(s) for s in w["stride"]))
    if any(tuple(p) != (0, 0) for p in w["pad"]):
        parts.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in w["pad"]))
    for key in ("lhs_dilate", "rhs_dilate"):
        if key in w and any(d != 1 for d in w[key]):
            parts.append(f"{key}=" + "x".join(str(d) for d in w[key]))
    return "{" + " ".join(parts) + "}"


def _attr_text(key, value) -> str:
    if isinstance(value, Computation):
        return f"{key}={value.name}"
    if key in ("branch_computations", "called_computations"):
        return f"{key}={{" + ", ".join(c.name for c in value) + "}"
    if key == "slice":
        return "slice={" + ", ".join(f"[{s}:{e}]" if st == 1 else f"[{s}:{e}:{st}]"
                                     for s, e, st in value) + "}"
    if key == "padding":
        return "padding=" + "x".join(f"{lo}_{hi}" if not it else f"{lo}_{hi}_{it}"
                                     for lo, hi, it in value)
    if key == "window":
        return "window=" + _window_text(value)
    if key == "operand_precision":
        return f"{key}={{{','.join(value)}}}"
    if key == "custom_call_target":
        return f'{key}="{value}"'
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    if isinstance(value, tuple):
        return f"{key}={_ints(value)}"
    return f"{key}={value}"


# ----------------------------------------------------------------------------------------------
# Printing.

class _Names:
    """Instruction names: ``<hint>.<n>`` with a counter per hint over the whole module."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.names: dict[int, str] = {}

    def name(self, ins: Instr) -> str:
        got = self.names.get(id(ins))
        if got is None:
            base = ins.hint.replace("<", "_").replace(">", "")
            n = self.counts.get(base, 0) + 1
            self.counts[base] = n
            got = self.names[id(ins)] = f"{base}.{n}"
        return got


def _post_order(comp: Computation) -> list[Instr]:
    """XLA's instruction order: a depth-first post-order walk (operands in order) from each
    instruction nobody uses, the root last."""
    used = {id(o) for ins in comp.instrs for o in ins.operands}
    seen: set[int] = set()
    order: list[Instr] = []

    def visit(ins):
        stack = [(ins, 0)]
        while stack:
            node, k = stack.pop()
            if id(node) in seen:
                continue
            if k < len(node.operands):
                stack.append((node, k + 1))
                op = node.operands[k]
                if id(op) not in seen:
                    stack.append((op, 0))
                continue
            seen.add(id(node))
            order.append(node)

    for ins in comp.instrs:
        if ins is not comp.root and id(ins) not in used and ins.opcode == "parameter":
            visit(ins)
    for ins in comp.instrs:
        if ins is not comp.root and id(ins) not in used:
            visit(ins)
    visit(comp.root)
    return order


def _instr_text(ins: Instr, names: _Names, root: bool) -> str:
    head = f"{'ROOT ' if root else ''}{names.name(ins)} = {hlo_type(ins.type)} "
    if ins.opcode == "parameter":
        return head + f"parameter({ins.index})"
    if ins.opcode == "constant":
        return head + f"constant({_literal_text(ins.value)})"
    operands = ", ".join(names.name(o) for o in ins.operands)
    attrs = "".join(", " + _attr_text(k, v) for k, v in ins.attrs.items())
    return head + f"{ins.opcode}({operands}){attrs}"


def _computation_text(comp: Computation, names: _Names, entry: bool) -> str:
    lines = [f"{'ENTRY ' if entry else ''}{comp.name} {{"]
    for ins in _post_order(comp):
        lines.append("  " + _instr_text(ins, names, ins is comp.root))
    lines.append("}")
    return "\n".join(lines)


def hlo_module_text(module: Module) -> str:
    """The HLO text of a module built by :func:`kiln.compiler.hlo.build.build_module`."""
    entry = module.entry
    params = ", ".join(hlo_type(p.type) for p in entry.params)
    layout = f"{{({params})->{hlo_type(entry.root.type)}}}"
    names = _Names()
    parts = [f"HloModule {module.name}, entry_computation_layout={layout}", ""]
    for comp in module.computations:
        parts.append(_computation_text(comp, names, comp is entry))
        parts.append("")
    return "\n".join(parts) + "\n"


class HloComputation:
    """kiln's program as an HLO module (what ``Lowered.compiler_ir("hlo")`` returns, in
    place of JAX's ``XlaComputation``)."""

    def __init__(self, module: Module):
        self._module = module
        self._text: str | None = None

    def as_hlo_text(self, print_large_constants: bool = False) -> str:
        """The module in HLO text syntax.

        Args:
          print_large_constants: accepted for JAX compatibility; constants of more than
            ten elements are printed as ``{...}`` either way.

        Returns:
          The text, starting with ``HloModule jit_<name>``.
        """
        if self._text is None:
            self._text = hlo_module_text(self._module)
        return self._text

    def as_hlo_module(self) -> HloComputation:
        """This object (JAX returns the ``HloModule``; its ``to_string()`` is the text)."""
        return self

    def to_string(self) -> str:
        """The HLO text (as ``HloModule.to_string``)."""
        return self.as_hlo_text()

    def name(self) -> str:
        """The module's name, ``jit_<function name>``."""
        return self._module.name

    def __str__(self) -> str:
        return self.as_hlo_text()

    def __repr__(self) -> str:
        return f"<kiln HloComputation {self._module.name}>"


def lower_to_hlo(jaxpr: ClosedJaxpr, name: str) -> HloComputation:
    """The HLO rendering of an optimised ``jaxpr`` named ``jit_<name>``."""
    return HloComputation(build_module(jaxpr, name))

