"""Printing scalar expressions as C: literals, C types, each operation's C text with
XLA's semantics (``op_text``), math functions, reduction identities and combiners.
``body.py``'s :class:`~.body.Body` turns a kernel's expression graph into statements
with them.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.compiler.lower import random as lower_random
from kiln.compiler.lower.expr import SExpr
from kiln.compiler.lower.index import row_major_strides
from kiln.compiler.render import binary_math, trig_math

C_TYPES = {
    np.dtype(np.bool_): "uint8_t", np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t",
    np.dtype(np.uint8): "uint8_t", np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t",
    np.dtype(np.float32): "float", np.dtype(np.float64): "double",
}

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)



def _uniform(e) -> bool:
    """Whether the scalar expression ``e`` has one value for the whole loop nest: a
    constant or a load at a fixed offset (a broadcast scalar)."""
    if e.kind == "const":
        return True
    if e.kind == "load":
        idx = e.params[2].v
        return not idx.terms and idx.opaque is None
    return False

def _short(dt: np.dtype) -> str:
    return {"b": "u8", "i": "i", "u": "u"}[dt.kind] + ("" if dt.kind == "b" else
                                                      str(dt.itemsize * 8))


def c_literal(value, dtype) -> str:
    """Exact C text for a scalar of ``dtype``."""
    dtype = np.dtype(dtype)
    v = np.asarray(value, dtype)[()]
    if dtype.kind == "f":
        suffix = "f" if dtype == F32 else ""
        fv = float(v)
        if math.isnan(fv):
            return "((float)NAN)" if suffix else "((double)NAN)"
        if math.isinf(fv):
            return ("(-INFINITY)" if fv < 0 else "INFINITY") if suffix else \
                ("(-(double)INFINITY)" if fv < 0 else "((double)INFINITY)")
        return f"({fv.hex()}{suffix})"
    if dtype.kind == "b":
        return "1" if bool(v) else "0"
    iv = int(v)
    if dtype.kind == "u":
        return f"(({C_TYPES[dtype]}){iv}ULL)"
    if iv == -(2 ** 63):
        return "(-9223372036854775807LL - 1)"
    return f"(({C_TYPES[dtype]}){iv}LL)"


def _int_extreme(dt, low) -> str:
    info = np.iinfo(dt)
    return c_literal(info.min if low else info.max, dt)


def _flat_of_syms(syms, shape, suffix: str = "") -> str:
    """The row-major flat position of loop indices ``syms`` over ``shape`` (each name
    with ``suffix``)."""
    strides = row_major_strides(shape)
    parts = [s.name + suffix if st == 1 else f"{st}*{s.name}{suffix}"
             for s, st in zip(syms, strides)]
    return " + ".join(parts) or "0"


class FmaTerm(str):
    """A summand ``x * y`` that a float sum folds as ``fma(x, y, acc)`` (a reduction of
    ``reduce_sum_fma``); as text, the product."""

    def __new__(cls, x: str, y: str):
        self = super().__new__(cls, f"({x} * {y})")
        self.factors = (x, y)
        return self


class ExprMixin:
    """Methods of :class:`~kiln.compiler.render.render_c.CRenderer` (see its attributes)."""

    # ---- scalar semantics ---------------------------------------------------------------
    def reduce_init(self, op, dt) -> str:
        if op == "sum" or op == "or" or op == "xor":
            return c_literal(0, dt)
        if op == "prod":
            return c_literal(1, dt)
        if op == "and":
            return c_literal(1, dt) if dt.kind == "b" else c_literal(-1 if dt.kind == "i" else
                                                                     np.iinfo(dt).max, dt)
        low = op == "max"
        if dt.kind == "f":
            return c_literal(-np.inf if low else np.inf, dt)
        if dt.kind == "b":
            return "0" if low else "1"
        return _int_extreme(dt, low)

    def combine(self, op, dt, acc, v) -> str:
        if op == "sum" and isinstance(v, FmaTerm):
            x, y = v.factors
            return f"{'fmaf' if dt == F32 else 'fma'}({x}, {y}, {acc})"
        if op == "sum":
            return f"{acc} + {v}" if dt.kind != "b" else f"{acc} | {v}"
        if op == "prod":
            return f"{acc} * {v}" if dt.kind != "b" else f"{acc} & {v}"
        if op in ("and", "or", "xor"):
            return f"{acc} {dict(zip(('and', 'or', 'xor'), '&|^'))[op]} {v}"
        if dt.kind == "f":
            f = {"max": "kiln_max", "min": "kiln_min"}[op] + ("f" if dt == F32 else "d")
            return f"{f}({acc}, {v})"
        if dt.kind == "b":
            return f"{acc} | {v}" if op == "max" else f"{acc} & {v}"
        cmp = ">" if op == "max" else "<"
        return f"({v} {cmp} {acc} ? {v} : {acc})"

    def math_fn(self, name, dt) -> str:
        xla = self.xla_math.get((name, "f" if dt == F32 else "d")) if dt in (F32, F64) \
            else None
        if xla is not None:
            return xla
        if dt == F32 and name in trig_math.FUNCTIONS and trig_math.usable(name):
            return trig_math.FUNCTIONS[name]     # glibc's sinf/cosf/tanf bits, vectorizable
        if dt == F64 and name in trig_math.FUNCTIONS64 and trig_math.usable64(name):
            return trig_math.FUNCTIONS64[name]   # glibc's sin/cos bits, SIMD clones
        if dt == F32 and name in binary_math.FUNCTIONS and binary_math.usable(name):
            return binary_math.FUNCTIONS[name]   # glibc's powf/atan2f bits, vectorizable
        hit = self.math_functions.get(name)
        if hit:
            return hit[0] if dt == F32 else hit[1]
        libm = {"exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "tanh": "tanh",
                "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos",
                "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
                "acosh": "acosh", "atanh": "atanh", "atan2": "atan2", "sqrt": "sqrt",
                "cbrt": "cbrt", "pow": "pow", "erf": "erf", "erfc": "erfc", "exp2": "exp2",
                "lgamma": "lgamma",
                "floor": "floor", "ceil": "ceil", "nextafter": "nextafter", "fabs": "fabs",
                "round_away": "round", "rint": "rint", "fmod": "fmod"}
        if name == "logistic":
            return "kiln_logistic_xla32" if dt == F32 else "kiln_logistic_xla64"
        if name == "rsqrt":
            return "kiln_rsqrtf" if dt == F32 else "kiln_rsqrtd"
        base = libm[name]
        return base + "f" if dt == F32 else base

    def op_text(self, e: SExpr, args: list[str], arg_dtypes: list) -> str:
        name = e.params[0]
        params = dict(e.params[1:])
        dt = e.dtype
        t = C_TYPES.get(dt)
        a = args[0] if args else None
        b = args[1] if len(args) > 1 else None
        fl = dt.kind == "f"
        mine = lower_random.render_op(name, params, args, dt)
        if mine is not None:
            return mine
        if name == "bitcast_convert_type":
            src = C_TYPES[arg_dtypes[0]]
            return (f"__extension__ ({{ {t} _r; {src} _v = {a}; "
                    f"memcpy(&_r, &_v, sizeof _r); _r; }})")
        if name == "add":
            return f"({a} + {b})" if dt.kind != "b" else f"({a} | {b})"
        if name == "sub":
            return f"({a} - {b})"
        if name == "mul":
            return f"({a} * {b})" if dt.kind != "b" else f"({a} & {b})"
        if name == "fma":     # XLA's contraction (passes/xla_fma.py), rounded once
            return f"{'fmaf' if dt == F32 else 'fma'}({a}, {b}, {args[2]})"
        if name == "div":
            return f"({a} / {b})" if fl else f"kiln_div_{_short(dt)}({a}, {b})"
        if name == "rem":
            return f"{self.math_fn('fmod', dt)}({a}, {b})" if fl else \
                f"kiln_rem_{_short(dt)}({a}, {b})"
        if name == "neg":
            return f"(-{a})" if dt.kind != "u" else f"({t})(0 - {a})"
        if name in ("max", "min"):
            if fl:
                return f"kiln_{name}{'f' if dt == F32 else 'd'}({a}, {b})"
            if dt.kind == "b":
                return f"({a} | {b})" if name == "max" else f"({a} & {b})"
            cmp = ">" if name == "max" else "<"
            return f"({a} {cmp} {b} ? {a} : {b})"
        if name == "abs":
            if fl:
                return f"{self.math_fn('fabs', dt)}({a})"
            return f"({a} < 0 ? ({t})(0 - ({t}){a}) : {a})" if dt.kind == "i" else a
        if name == "sign":
            if fl:
                return f"kiln_sign{'f' if dt == F32 else 'd'}({a})"
            if dt.kind == "u":
                return f"({t})({a} > 0)"
            return f"({t})(({a} > 0) - ({a} < 0))"
        if name in ("floor", "ceil"):
            return f"{self.math_fn(name, dt)}({a})"
        if name == "round":
            m = params.get("rounding_method", 0)
            return f"{self.math_fn('round_away' if m == 0 else 'rint', dt)}({a})"
        if name == "exp2" and dt in (F32, F64):
            # JAX lowers exp2 to exp(log(2) * x) in the operand's dtype (JAX's bits).
            ln2 = "0.693147180559945309417232121458176568" + ("f" if dt == F32 else "")
            return f"{self.math_fn('exp', dt)}(({t})({a} * {ln2}))"
        if name == "atan" and "form" in params and dt in (F32, F64):
            stem = {"one": "xatan1", "short": "xatanp"}.get(params["form"], "xatan")
            return f"{stem}{32 if dt == F32 else 64}({a})"
        if name in ("asinh", "acosh") and params.get("form") == "scalar" and dt == F32:
            return f"x{name}s32({a})"
        if name in ("exp", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan",
                    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt",
                    "rsqrt", "cbrt", "erf", "erfc", "exp2", "lgamma", "digamma", "bessel_i0e",
                    "bessel_i1e"):
            return f"{self.math_fn(name, dt)}({a})"
        if name == "polygamma" and dt in (F32, F64) and _uniform(e.args[0]):
            # One order for the whole array (a scalar operand or a literal): XLA's
            # rewrites around the broadcast order (xla_math.h, xpolygammas*).
            return f"xpolygammas{32 if dt == F32 else 64}({a}, {b})"
        if name in ("atan2", "nextafter", "zeta", "polygamma", "igamma", "igammac",
                    "igamma_grad_a", "random_gamma_grad"):
            return f"{self.math_fn(name, dt)}({a}, {b})"
        if name == "pow":
            if arg_dtypes[1] != dt:
                b = f"({t})({b})"
            return f"{self.math_fn('pow', dt)}({a}, {b})"
        if name == "integer_pow":
            return self._integer_pow(a, int(params["y"]), dt)
        if name == "square":
            return f"({a} * {a})"
        if name in ("eq", "ne", "lt", "le", "gt", "ge"):
            op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[name]
            return f"({a} {op} {b})"
        if name in ("and", "or", "xor"):
            op = {"and": "&", "or": "|", "xor": "^"}[name]
            return f"({t})({a} {op} {b})"
        if name == "not":
            return f"(!{a})" if dt.kind == "b" else f"({t})(~{a})"
        if name in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
            f = {"shift_left": "shl", "shift_right_logical": "shrl",
                 "shift_right_arithmetic": "shra"}[name]
            return f"kiln_{f}_{_short(dt)}({a}, {b})"
        if name == "select_n":
            which = args[0]
            cases = args[1:]
            if len(cases) == 1:
                return cases[0]
            if arg_dtypes[0].kind == "b":
                return f"({which} ? {cases[1]} : {cases[0]})"
            expr = cases[-1]
            for j in range(len(cases) - 2, -1, -1):
                expr = f"({which} <= {j} ? {cases[j]} : {expr})"
            return expr
        if name == "convert_element_type":
            return self._convert(a, arg_dtypes[0], dt)
        if name == "clamp":
            lo, x, hi = args
            if fl:
                sfx = "f" if dt == F32 else "d"
                return f"kiln_min{sfx}(kiln_max{sfx}({x}, {lo}), {hi})"
            inner = f"({x} > {lo} ? {x} : {lo})"
            return f"({inner} < {hi} ? {inner} : {hi})"
        if name == "is_finite":
            return f"(isfinite({a}) ? 1 : 0)"
        if name == "population_count":
            u = f"uint{dt.itemsize * 8}_t"
            return f"({t})__builtin_popcountll((uint64_t)({u}){a})"
        if name == "clz":
            bits = dt.itemsize * 8
            u = f"uint{bits}_t"
            return (f"({t})(({u}){a} == 0 ? {bits} : "
                    f"__builtin_clzll((uint64_t)({u}){a}) - {64 - bits})")
        raise NotImplementedError(f"no C rendering for {name}")

    def _integer_pow(self, a, y, dt) -> str:
        if y == 0:
            return c_literal(1, dt)
        n = abs(y)
        # binary powering, as XLA: x**5 = (x*x)*(x*x)*x
        acc = None
        base = a
        terms = []
        while n:
            if n & 1:
                terms.append(base)
            n >>= 1
            if n:
                base = f"({base} * {base})"
        acc = terms[0]
        for t in terms[1:]:
            acc = f"({acc} * {t})"
        if y < 0:
            return f"({c_literal(1, dt)} / {acc})"
        return acc

    def _convert(self, a, src, dst) -> str:
        t = C_TYPES[dst]
        if src == dst:
            return a
        if dst.kind == "b":
            return f"({a} != 0)"
        if src.kind == "b" and dst.kind == "f":
            # A select, not `(float)(b)`: in a loop that also stores the bool (a Bernoulli
            # sample and its float copy) gcc 12 does not vectorize the conversion of a
            # compare's result ("mixed mask and nonmask vector types"): mnist_vae's
            # 10000x784 sample ran scalar at 18 ns an element (AVX2) instead of 3.3.
            return f"({a} ? {c_literal(1, dst)} : {c_literal(0, dst)})"
        if src.kind == "u" and src.itemsize < 4 and dst.kind == "f":
            # Through int32 (exact): x86 before AVX-512 has no unsigned conversion.
            return f"({t})((int32_t)({a}))"
        if src.kind == "f" and dst.kind in "iu":
            info = np.iinfo(dst)
            hi = c_literal(float(info.max), src)
            lo = c_literal(float(info.min), src)
            return (f"({a} != {a} ? ({t})0 : ({a} >= {hi} ? {c_literal(info.max, dst)} : "
                    f"({a} <= {lo} ? {c_literal(info.min, dst)} : ({t}){a})))")
        return f"({t})({a})"


def prefetch_loop(var: str, lo: str, hi: str, step: int, index: str, buf, hint: str) -> str:
    """A loop prefetching ``&b[index]`` for ``var`` from ``lo`` below ``hi`` by ``step``,
    stopping at the end of ``buf`` (``index`` is ``var`` plus a constant, so the last
    ``var`` in the buffer is found once, before the loop): an add, a compare and the
    prefetch per line (clamping each address took six more instructions a line, in the
    integer ports that the vector loop after it shares)."""
    end = f"{var}_pe"
    stop = f"{var} + ({buf.size} - ({index}))"
    return (f"for (int64_t {var} = {lo}, {end} = {stop} < {hi} ? {stop} : {hi}; "
            f"{var} < {end}; {var} += {step}) {hint.format(addr=f'&b{buf.id}[{index}]')};")
