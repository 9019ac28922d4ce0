"""kiln's optimised program printed in StableHLO MLIR syntax (``compiler_ir("stablehlo")``).

The instruction graph of :mod:`kiln.compiler.hlo.build` written as an MLIR module, as
JAX's ``Lowered.compiler_ir("stablehlo")`` prints::

    module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
      func.func public @main(%arg0: tensor<2xf32>) -> (tensor<2xf32> {jax.result_info = "result"}) {
        %0 = stablehlo.multiply %arg0, %arg0 : tensor<2xf32>
        return %0 : tensor<2xf32>
      }
    }

``while``/``conditional`` bodies and reduction, sort and scatter regions are printed
inline as regions; ``call`` targets and the sub-jaxprs of ``custom-call`` s are private
functions. Ops with regions other than ``while`` and single-op ``reduce`` use MLIR's
generic op syntax. It is kiln's program in StableHLO's syntax, not JAX's lowering.
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.hlo.build import Computation, Instr, Module, TensorT, build_module
from kiln.core.jaxpr import ClosedJaxpr

__all__ = ["StableHloModule", "lower_to_stablehlo", "mlir_type"]

_ELEMENT = {"bool": "i1", "bfloat16": "bf16", "float16": "f16", "float32": "f32",
            "float64": "f64", "complex64": "complex<f32>", "complex128": "complex<f64>"}
_F8 = {"float8_e4m3fn": "f8E4M3FN", "float8_e5m2": "f8E5M2", "float8_e4m3fnuz": "f8E4M3FNUZ",
       "float8_e5m2fnuz": "f8E5M2FNUZ", "float8_e4m3b11fnuz": "f8E4M3B11FNUZ"}
# HLO opcodes printed as ``stablehlo.<name> %a, %b : type``.
_SIMPLE = {
    "negate", "exponential", "log", "sine", "cosine", "tan", "tanh", "sqrt", "rsqrt", "cbrt",
    "abs", "sign", "floor", "ceil", "log-plus-one", "exponential-minus-one", "logistic",
    "not", "is-finite", "popcnt", "count-leading-zeros", "real", "imag", "add", "subtract",
    "multiply", "divide", "remainder", "maximum", "minimum", "power", "and", "or", "xor",
    "atan2", "shift-left", "shift-right-arithmetic", "shift-right-logical", "complex",
    "round-nearest-even", "round-nearest-afz", "convert", "reshape", "bitcast-convert",
    "clamp",
}
_CHLO = {"erf"}


def _element(dtype) -> str:
    dtype = np.dtype(dtype)
    name = dtype.name
    if name in _ELEMENT:
        return _ELEMENT[name]
    if name in _F8:
        return _F8[name]
    if np.issubdtype(dtype, np.signedinteger):
        return f"i{dtype.itemsize * 8}"
    if np.issubdtype(dtype, np.unsignedinteger):
        return f"ui{dtype.itemsize * 8}"
    return name


def mlir_type(t: TensorT) -> str:
    """MLIR's spelling of an array type, e.g. ``tensor<2x3xf32>``."""
    dims = "".join(f"{d}x" for d in t.shape)
    return f"tensor<{dims}{_element(t.dtype)}>"


def _types(t) -> list[TensorT]:
    return list(t) if isinstance(t, tuple) else [t]


def _ilist(xs) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def _precisions(attrs) -> tuple:
    """The operands' precisions of a dot or convolution (lower-case names)."""
    return attrs.get("operand_precision", ("default", "default"))


def _algorithm_text(name: str) -> str:
    """StableHLO's ``#stablehlo.dot_algorithm`` body for XLA's algorithm ``name``
    (``dot_bf16_bf16_f32_x3``: operand and accumulation types, primitive operations)."""
    parts = name[len("dot_"):].split("_")
    ops = 1
    if parts[-1].startswith("x") and parts[-1][1:].isdigit():
        ops = int(parts.pop()[1:])
    if parts[-1] == "accum":      # ..._fast_accum
        parts = parts[:-2]
    lhs, rhs, acc = ("_".join(parts[:-2]) if len(parts) > 3 else parts[0]), parts[-2], parts[-1]
    if len(parts) > 3:              # any_f8_any_f8_<acc>
        lhs, rhs = "_".join(parts[:2]), "_".join(parts[2:4])
    return (f"<lhs_precision_type = {lhs}, rhs_precision_type = {rhs}, accumulation_type = "
            f"{acc}, lhs_component_count = 1, rhs_component_count = 1, "
            f"num_primitive_operations = {ops}, allow_imprecise_accumulation = false>")


def _iarray(xs) -> str:
    return "array<i64" + "".join(f"{', ' if i else ': '}{int(x)}" for i, x in enumerate(xs)) + ">"


# ----------------------------------------------------------------------------------------------
# Constants.

def _float_text(f, dtype) -> str:
    if np.isfinite(f):
        return f"{float(f):.6e}"
    bits = np.asarray(f, dtype=dtype).view(f"u{np.dtype(dtype).itemsize}")
    return "0x" + format(int(bits), f"0{np.dtype(dtype).itemsize * 2}X")


def _elem_text(v, dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "true" if v else "false"
    if np.issubdtype(dtype, np.complexfloating):
        part = np.finfo(dtype).dtype
        return f"({_float_text(v.real, part)},{_float_text(v.imag, part)})"
    if np.issubdtype(dtype, np.integer):
        return str(int(v))
    return _float_text(v, dtype)


def _all_equal(flat: np.ndarray) -> bool:
    nan = np.issubdtype(flat.dtype, np.inexact)
    return bool(np.array_equal(flat, np.full_like(flat, flat[0]), equal_nan=nan))


def _dense_text(value: np.ndarray) -> str:
    flat = value.reshape(-1)
    if value.ndim == 0 or (flat.size and _all_equal(flat)):
        return f"dense<{_elem_text(flat[0], value.dtype)}>"
    if value.size > 100:
        return 'dense<"0x' + np.ascontiguousarray(value).tobytes().hex().upper() + '">'

    def nested(a):
        if a.ndim == 1:
            return "[" + ", ".join(_elem_text(v, value.dtype) for v in a) + "]"
        return "[" + ", ".join(nested(s) for s in a) + "]"
    return f"dense<{nested(value)}>"


def _attribute_text(value) -> str:
    """MLIR's text of a composite attribute's value, converted as JAX's
    ``mlir.ir_attribute`` does: Python ints/floats/bools as 64-bit integers, doubles and
    ``i1``, NumPy scalars with their own type, arrays as dense elements, dtypes as types,
    strings as strings, sequences as arrays, dicts as dictionaries."""
    from kiln.lax.composite import HashableArray
    if isinstance(value, HashableArray):
        value = value.val
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, np.dtype) or (isinstance(value, type)
                                       and issubclass(value, np.generic)):
        return _element(np.dtype(value))
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_attribute_text(value[k])}"
                               for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_attribute_text(v) for v in value) + "]"
    if isinstance(value, bool):
        value = np.bool_(value)
    elif isinstance(value, int):
        value = np.int64(value)
    elif isinstance(value, float):
        value = np.float64(value)
    if isinstance(value, np.generic):
        if value.dtype == np.bool_:
            return "true" if value else "false"
        if np.issubdtype(value.dtype, np.complexfloating):
            raise TypeError(f"Unsupported scalar attribute type: {type(value)}")
        return f"{_elem_text(value, value.dtype)} : {_element(value.dtype)}"
    if isinstance(value, np.ndarray):
        return f"{_dense_text(value)} : {mlir_type(TensorT(value.shape, value.dtype))}"
    raise TypeError(f"No attribute handler defined for type: {type(value)}")


# ----------------------------------------------------------------------------------------------
# The printer.

class _Scope:
    """SSA names of one region: ``%N`` numbering and unique names (``%cst``, ``%cst_0``)."""

    def __init__(self, parent: _Scope | None = None):
        self.next = parent.next if parent else 0
        self.used = set(parent.used) if parent else set()
        self.suffix = parent.suffix if parent else 0

    def number(self) -> str:
        n = self.next
        self.next += 1
        return f"%{n}"

    def unique(self, base: str) -> str:
        if base not in self.used:
            self.used.add(base)
            return f"%{base}"
        while f"{base}_{self.suffix}" in self.used:
            self.suffix += 1
        name = f"{base}_{self.suffix}"
        self.suffix += 1
        self.used.add(name)
        return f"%{name}"


class _Printer:
    def __init__(self, module: Module):
        self.module = module
        self.funcs: list[str] = []
        self.func_names: dict[int, str] = {}
        self.taken: set[str] = {"main"}
        self.n_args = 0

    # -- functions ------------------------------------------------------------------------

    def func_name(self, comp: Computation) -> str:
        got = self.func_names.get(id(comp))
        if got is None:
            base = got = comp.base_name
            k = 0
            while got in self.taken:
                got = f"{base}_{k}"
                k += 1
            self.taken.add(got)
            self.func_names[id(comp)] = got
            self.funcs.append(self.function(comp, got, public=False))
        return got

    def function(self, comp: Computation, name: str, public: bool,
                 result_info: list[str] | None = None) -> str:
        saved = self.n_args
        self.n_args = 0
        refs = {}
        args = []
        for p in comp.params:
            r = f"%arg{self.n_args}"
            self.n_args += 1
            refs[id(p)] = r
            args.append(f"{r}: {mlir_type(p.type)}")
        scope = _Scope()
        body, outs = self.region_body(comp, refs, scope, "  ")
        out_types = _types(comp.root.type)
        if result_info is not None:
            res = ", ".join(f'{mlir_type(t)} {{jax.result_info = "{info}"}}'
                            for t, info in zip(out_types, result_info))
            res = f"({res})"
        else:
            res = ", ".join(mlir_type(t) for t in out_types)
            res = f"({res})" if len(out_types) != 1 else res
        vis = "public" if public else "private"
        lines = [f"func.func {vis} @{name}({', '.join(args)}) -> {res} {{"]
        lines += body
        lines.append(f"  return {', '.join(outs)} : "
                     f"{', '.join(mlir_type(t) for t in out_types)}")
        lines.append("}")
        self.n_args = saved
        return "\n".join(lines)

    def region_body(self, comp: Computation, refs: dict, scope: _Scope, indent: str):
        """Lines of ``comp``'s instructions and the refs of its results."""
        lines: list[str] = []
        for ins in comp.instrs:
            if id(ins) in refs:
                continue
            self.instr(ins, refs, scope, lines, indent)
        root = refs[id(comp.root)]
        return lines, (root if isinstance(root, list) else [root])

    def region(self, comp: Computation, refs: dict, scope: _Scope, indent: str,
               block_args: bool, ret: str = "stablehlo.return") -> list[str]:
        """An inline region: ``^bb0(args):`` (when ``block_args``), body, return."""
        inner = _Scope(scope)
        local = dict(refs)
        lines = []
        if block_args:
            decl = []
            for p in comp.params:
                r = f"%arg{self.n_args}"
                self.n_args += 1
                local[id(p)] = r
                decl.append(f"{r}: {mlir_type(p.type)}")
            lines.append(f"{indent}^bb0({', '.join(decl)}):")
        body, outs = self.region_body(comp, local, inner, indent + "  ")
        lines += body
        types = ", ".join(mlir_type(t) for t in _types(comp.root.type))
        lines.append(f"{indent}  {ret} {', '.join(outs)} : {types}")
        return lines

    # -- instructions ---------------------------------------------------------------------

    def instr(self, ins: Instr, refs: dict, scope: _Scope, lines: list, indent: str):
        op = ins.opcode
        if op == "tuple":
            refs[id(ins)] = [self.flat_ref(refs, o) for o in ins.operands]
            return
        if op == "get-tuple-element":
            src = refs[id(ins.operands[0])]
            refs[id(ins)] = src[ins.attrs["index"]]
            return
        if op == "constant":
            kind = "cst" if np.issubdtype(ins.value.dtype, np.inexact) else "c"
            name = scope.unique(kind)
            refs[id(ins)] = name
            lines.append(f"{indent}{name} = stablehlo.constant {_dense_text(ins.value)} : "
                         f"{mlir_type(ins.type)}")
            return
        results = _types(ins.type)
        name = scope.number() if results else ""
        if isinstance(ins.type, tuple):
            refs[id(ins)] = [f"{name}#{i}" for i in range(len(results))]
            lhs = f"{name}:{len(results)}"
        else:
            refs[id(ins)] = name
            lhs = name
        ops = [self.flat_ref(refs, o) for o in ins.operands
               if op not in ("while", "conditional")]
        in_t = [mlir_type(o.type) for o in ins.operands if not isinstance(o.type, tuple)]
        out_t = [mlir_type(t) for t in results]
        sig = f"({', '.join(in_t)}) -> " + (out_t[0] if len(out_t) == 1 and
                                             not isinstance(ins.type, tuple)
                                             else f"({', '.join(out_t)})")
        a = ins.attrs
        pre = f"{indent}{lhs} = " if results else indent      # no results: no name
        if op in _SIMPLE or op in _CHLO:
            dialect = "chlo" if op in _CHLO else "stablehlo"
            mname = op.replace("-", "_")
            same = all(o.type == ins.type for o in ins.operands) and ins.operands
            lines.append(f"{pre}{dialect}.{mname} {', '.join(ops)} : "
                         f"{out_t[0] if same else sig}")
        elif op == "compare":
            dt = ins.operands[0].type.dtype
            kind = a.get("type") or ("FLOAT" if np.issubdtype(dt, np.inexact) else
                                     "SIGNED" if np.issubdtype(dt, np.signedinteger)
                                     else "UNSIGNED")
            lines.append(f"{pre}stablehlo.compare  {a['direction']}, {ops[0]}, {ops[1]},  "
                         f"{kind} : {sig}")
        elif op == "select":
            lines.append(f"{pre}stablehlo.select {', '.join(ops)} : {in_t[0]}, {out_t[0]}")
        elif op == "broadcast":
            lines.append(f"{pre}stablehlo.broadcast_in_dim {ops[0]}, "
                         f"dims = {_ilist(a['dimensions'])} : {sig}")
        elif op == "transpose":
            lines.append(f"{pre}stablehlo.transpose {ops[0]}, dims = "
                         f"{_ilist(a['dimensions'])} : {sig}")
        elif op == "reverse":
            lines.append(f"{pre}stablehlo.reverse {ops[0]}, dims = "
                         f"{_ilist(a['dimensions'])} : {out_t[0]}")
        elif op == "slice":
            spec = ", ".join(f"{s}:{e}" if st == 1 else f"{s}:{e}:{st}"
                             for s, e, st in a["slice"])
            lines.append(f"{pre}stablehlo.slice {ops[0]} [{spec}] : {sig}")
        elif op == "concatenate":
            lines.append(f"{pre}stablehlo.concatenate {', '.join(ops)}, dim = "
                         f"{a['dimensions'][0]} : {sig}")
        elif op == "pad":
            lo, hi, it = zip(*a["padding"]) if a["padding"] else ((), (), ())
            lines.append(f"{pre}stablehlo.pad {ops[0]}, {ops[1]}, low = {_ilist(lo)}, "
                         f"high = {_ilist(hi)}, interior = {_ilist(it)} : {sig}")
        elif op == "iota":
            lines.append(f"{pre}stablehlo.iota dim = {a['iota_dimension']} : {out_t[0]}")
        elif op == "dot":
            parts = []
            if a.get("lhs_batch_dims"):
                parts.append(f"batching_dims = {_ilist(a['lhs_batch_dims'])} x "
                             f"{_ilist(a['rhs_batch_dims'])}")
            parts.append(f"contracting_dims = {_ilist(a['lhs_contracting_dims'])} x "
                         f"{_ilist(a['rhs_contracting_dims'])}")
            parts.append("precision = [" + ", ".join(p.upper() for p in _precisions(a)) + "]")
            if "algorithm" in a:
                parts.append("algorithm = " + _algorithm_text(a["algorithm"]))
            lines.append(f"{pre}stablehlo.dot_general {ops[0]}, {ops[1]}, "
                         f"{', '.join(parts)} : {sig}")
        elif op == "dynamic-slice":
            lines.append(f"{pre}stablehlo.dynamic_slice {', '.join(ops)}, sizes = "
                         f"{_ilist(a['dynamic_slice_sizes'])} : {sig}")
        elif op == "dynamic-update-slice":
            lines.append(f"{pre}stablehlo.dynamic_update_slice {', '.join(ops)} : {sig}")
        elif op == "fft":
            lines.append(f"{pre}stablehlo.fft {ops[0]}, type =  {a['fft_type']}, length = "
                         f"{_ilist(a['fft_length'])} : {sig}")
        elif op == "reduce-precision":
            lines.append(f"{pre}stablehlo.reduce_precision {ops[0]}, format = "
                         f"e{a['exponent_bits']}m{a['mantissa_bits']} : {out_t[0]}")
        elif op == "gather":
            dn = ", ".join(f"{k} = {_ilist(a[k])}" if isinstance(a[k], tuple) else
                           f"{k} = {a[k]}" for k in ("offset_dims", "collapsed_slice_dims",
                                                     "operand_batching_dims",
                                                     "start_indices_batching_dims",
                                                     "start_index_map", "index_vector_dim")
                           if k in a)
            extra = ", indices_are_sorted = true" if a.get("indices_are_sorted") else ""
            lines.append(f'{pre}"stablehlo.gather"({", ".join(ops)}) <{{dimension_numbers = '
                         f'#stablehlo.gather<{dn}>{extra}, slice_sizes = '
                         f'{_iarray(a["slice_sizes"])}}}> : {sig}')
        elif op == "convolution":
            lines.append(f"{pre}{self.convolution(ins, ops, sig)}")
        elif op == "call":
            fname = self.func_name(a["to_apply"])
            lines.append(f"{pre}call @{fname}({', '.join(ops)}) : {sig}")
        elif op == "composite":
            lines.append(f"{pre}{self.composite(ins, ops, sig)}")
        elif op == "top-k":
            res = f"({', '.join(out_t)})"
            lines.append(f"{pre}chlo.top_k({ops[0]}, k = {a['k']}) : {in_t[0]} -> {res}")
        elif op == "custom-call":
            extra = ""
            if "called_computations" in a:
                names = ", ".join(f"@{self.func_name(c)}" for c in a["called_computations"])
                extra = f" {{called_computations = [{names}]}}"
            lines.append(f"{pre}stablehlo.custom_call @{a['custom_call_target']}"
                         f"({', '.join(ops)}){extra} : {sig}")
        elif op == "reduce" and self.simple_region(a["to_apply"]) and len(ops) == 2:
            region_op = a["to_apply"].root.opcode.replace("-", "_")
            lines.append(f"{pre}stablehlo.reduce({ops[0]} init: {ops[1]}) applies "
                         f"stablehlo.{region_op} across dimensions = "
                         f"{_ilist(a['dimensions'])} : {sig}")
        elif op == "while":
            self.while_(ins, refs, scope, lines, indent, lhs)
        elif op == "conditional":
            self.case(ins, refs, scope, lines, indent, pre, sig)
        elif op in ("reduce", "sort", "scatter", "reduce-window"):
            self.generic_region_op(ins, ops, refs, scope, lines, indent, pre, sig)
        else:
            lines.append(f'{pre}"stablehlo.{op.replace("-", "_")}"({", ".join(ops)}) : {sig}')

    @staticmethod
    def flat_ref(refs, ins):
        r = refs[id(ins)]
        if isinstance(r, list):
            raise ValueError("a tuple is only an operand of while/conditional")
        return r

    @staticmethod
    def simple_region(comp: Computation) -> bool:
        r = comp.root
        return (len(comp.params) == 2 and len(comp.instrs) == 3 and r.opcode in _SIMPLE
                and r.operands == comp.params)

    def while_(self, ins, refs, scope, lines, indent, lhs):
        a = ins.attrs
        init = refs[id(ins.operands[0])]
        init = init if isinstance(init, list) else [init]
        types = [mlir_type(t) for t in _types(ins.type)]
        iters = [scope.unique("iterArg") for _ in init]
        binds = ", ".join(f"{i} = {v}" for i, v in zip(iters, init))
        lines.append(f"{indent}{lhs} = stablehlo.while({binds}) : {', '.join(types)}")
        for key, head in (("condition", "cond {"), ("body", "} do {")):
            comp = a[key]
            local = dict(refs)
            local[id(comp.params[0])] = iters
            lines.append(f"{indent}{head}")
            lines += self.region(comp, local, scope, indent, block_args=False)
        lines.append(f"{indent}}}")

    def case(self, ins, refs, scope, lines, indent, pre, sig):
        a = ins.attrs
        idx = self.flat_ref(refs, ins.operands[0])
        regions = []
        for comp, operand in zip(a["branch_computations"], ins.operands[1:]):
            local = dict(refs)
            val = refs[id(operand)]
            local[id(comp.params[0])] = val
            regions.append("\n".join(self.region(comp, local, scope, indent + "  ",
                                                 block_args=False)))
        body = (f"\n{indent}}}, {{\n").join(regions)
        out = sig.split(" -> ", 1)[1]
        lines.append(f'{pre}"stablehlo.case"({idx}) ({{\n{body}\n{indent}}}) : '
                     f'({mlir_type(ins.operands[0].type)}) -> {out}')

    def generic_region_op(self, ins, ops, refs, scope, lines, indent, pre, sig):
        a, op = ins.attrs, ins.opcode
        if op == "reduce":
            props = f"dimensions = {_iarray(a['dimensions'])}"
        elif op == "sort":
            props = (f"dimension = {a['dimensions'][0]} : i64, is_stable = "
                     f"{'true' if a['is_stable'] else 'false'}")
        elif op == "reduce-window":
            w = a["window"]
            n = len(w["size"])
            pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in w["pad"])
            props = (f"base_dilations = {_iarray(w.get('lhs_dilate', (1,) * n))}, padding = "
                     f"dense<[{pads}]> : tensor<{n}x2xi64>, window_dilations = "
                     f"{_iarray(w.get('rhs_dilate', (1,) * n))}, window_dimensions = "
                     f"{_iarray(w['size'])}, window_strides = "
                     f"{_iarray(w.get('stride', (1,) * n))}")
        else:
            keys = ("update_window_dims", "inserted_window_dims", "input_batching_dims",
                    "scatter_indices_batching_dims", "scatter_dims_to_operand_dims")
            dn = ", ".join([f"{k} = {_ilist(a[k])}" for k in keys if k in a]
                           + [f"index_vector_dim = {a['index_vector_dim']}"])
            props = f"scatter_dimension_numbers = #stablehlo.scatter<{dn}>"
            for flag in ("indices_are_sorted", "unique_indices"):
                if a.get(flag):
                    props += f", {flag} = true"
        body = self.region(a["to_apply"], refs, scope, indent + "  ", block_args=True)
        lines.append(f'{pre}"stablehlo.{op.replace("-", "_")}"({", ".join(ops)}) <{{{props}}}> '
                     "({")
        lines += body
        lines.append(f"{indent}}}) : {sig}")

    def composite(self, ins, ops, sig):
        """``stablehlo.composite "name" %args {composite_attributes = {...},
        decomposition = @name, version = N : i32}`` (JAX's lowering: attributes that are
        ``None`` are left out, an empty dictionary and version 0 are not printed)."""
        a = ins.attrs
        fname = self.func_name(a["decomposition"])
        props = []
        attrs = {}
        for key, leaves, treedef in a["composite_attributes"]:
            value = treedef.unflatten(list(leaves))
            if value is not None:
                attrs[key] = _attribute_text(value)
        if attrs:
            props.append("composite_attributes = {" + ", ".join(
                f"{k} = {attrs[k]}" for k in sorted(attrs)) + "}")
        props.append(f"decomposition = @{fname}")
        if a["version"]:
            props.append(f"version = {a['version']} : i32")
        args = f" {', '.join(ops)}" if ops else ""
        return f'stablehlo.composite "{a["name"]}"{args} {{{", ".join(props)}}} : {sig}'

    @staticmethod
    def convolution(ins, ops, sig):
        a = ins.attrs
        lhs, rhs, out = a["dim_labels"].replace("->", "_").split("_")
        fmt = lambda s: "[" + ", ".join(s) + "]"     # noqa: E731
        w = a["window"]
        pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in w["pad"])
        win = (f"stride = {_ilist(w['stride'])}, pad = [{pads}], lhs_dilate = "
               f"{_ilist(w['lhs_dilate'])}, rhs_dilate = {_ilist(w['rhs_dilate'])}, reverse = ["
               + ", ".join(["false"] * len(w["stride"])) + "]")
        prec = ", ".join(f"#stablehlo<precision {p.upper()}>" for p in _precisions(a))
        return (f"stablehlo.convolution({ops[0]}, {ops[1]}) dim_numbers = {fmt(lhs)}x"
                f"{fmt(rhs)}->{fmt(out)}, window = {{{win}}} {{batch_group_count = "
                f"{a.get('batch_group_count', 1)} : i64, feature_group_count = "
                f"{a.get('feature_group_count', 1)} : i64, precision_config = [{prec}]}} : "
                f"{sig}")

    # -- the module -----------------------------------------------------------------------

    def text(self, result_info: list[str]) -> str:
        main = self.function(self.module.entry, "main", public=True, result_info=result_info)
        funcs = [main] + self.funcs
        body = "\n".join("  " + line if line else line
                         for f in funcs for line in f.split("\n"))
        return (f"module @{self.module.name} attributes {{mhlo.num_partitions = 1 : i32, "
                f"mhlo.num_replicas = 1 : i32}} {{\n{body}\n}}\n")


# ----------------------------------------------------------------------------------------------
# JAX's ``ir.Module`` surface.

class _Operation:
    """The module's operation (``ir.Module.operation``)."""

    def __init__(self, text: str):
        self._text = text

    def get_asm(self, *, large_elements_limit=None, enable_debug_info=False,
                pretty_debug_info=False, print_generic_op_form=False,
                use_local_scope=False, binary=False, **_options) -> str | bytes:
        """The module's text (``binary=True``: as UTF-8 bytes); the options of MLIR's
        printer are accepted and, except ``binary``, do not change the text."""
        return self._text.encode() if binary else self._text

    def __str__(self) -> str:
        return self._text


class StableHloModule:
    """kiln's program as a StableHLO module's text (what ``compiler_ir("stablehlo")``
    returns, in place of JAX's ``jaxlib.mlir.ir.Module``)."""

    def __init__(self, text: str):
        self._text = text
        self.operation = _Operation(text)

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return self._text

    def dump(self) -> None:
        """Print the module to stdout (as ``ir.Module.dump``)."""
        print(self._text, end="")


def _result_info(out_tree, n: int) -> list[str]:
    if out_tree is not None:
        try:
            from kiln.tree_util import keystr, tree_flatten_with_path, tree_unflatten
            leaves, _ = tree_flatten_with_path(tree_unflatten(out_tree, list(range(n))))
            if len(leaves) == n:
                return ["result" + keystr(path) for path, _ in leaves]
        except Exception:           # a tree kiln's public tree_util cannot rebuild
            pass
    return ["result"] if n == 1 else [f"result[{i}]" for i in range(n)]


def lower_to_stablehlo(jaxpr: ClosedJaxpr, name: str, out_tree=None) -> StableHloModule:
    """The StableHLO rendering of an optimised ``jaxpr`` as module ``@jit_<name>``;
    ``out_tree`` (the outputs' pytree) names the results as JAX does."""
    module = build_module(jaxpr, name)
    n = len(_types(module.entry.root.type))
    return StableHloModule(_Printer(module).text(_result_info(out_tree, n)))
