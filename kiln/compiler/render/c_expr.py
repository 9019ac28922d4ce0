"""Printing scalar expressions as C: literals, C types, each operation's C text with
XLA's semantics (``op_text``), math functions, reduction identities and combiners, and
:class:`Body`, which turns a kernel's expression graph into statements (one temporary per
node, loop-invariant nodes hoisted before their loops).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from kiln.compiler.lower import random as lower_random
from kiln.compiler.lower.expr import SExpr
from kiln.compiler.lower.index import Idx, row_major_strides
from kiln.compiler.lower.program import (
    Program,
)
from kiln.compiler.lower.walk import loop_dependent
from kiln.compiler.render.plan_loops import loop_deps

C_TYPES = {
    np.dtype(np.bool_): "uint8_t", np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t",
    np.dtype(np.uint8): "uint8_t", np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t",
    np.dtype(np.float32): "float", np.dtype(np.float64): "double",
}

if TYPE_CHECKING:
    from kiln.compiler.render.render_c import CRenderer


F32 = np.dtype(np.float32)


F64 = np.dtype(np.float64)


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


class Body:
    """Statements computing scalar expressions, one temporary per node.

    Names are decided here, per node: ``t<uid>`` for a node's temporary, the symbol's
    own name for a loop or dynamic-index symbol. A second copy of a loop body that must
    not clash with the first (a skewed row loop's next row) is a Body with a ``suffix``:
    its temporaries and the dynamic-index symbols it defines in its lines get the
    suffix, and ``sym_names`` (shared with its outer body) maps the loop symbols it
    renames (and those definitions) to their new names. What runs before the loops
    (the prelude) keeps its names.
    """

    def __init__(self, r: CRenderer, prog: Program, suffix: str = "",
                 sym_names: dict | None = None):
        self.r = r
        self.prog = prog
        self.lines: list[str] = []
        self.names: dict = {}
        self.suffix = suffix
        self.sym_names: dict = {} if sym_names is None else sym_names
        self.declared: set = set()      # names declared in ``lines``
        # Float32 exps' declarations: uid -> (line number, function, argument), so that a
        # copy of the lines may call the function's bounded variant (``lines_fin``).
        self._exps: dict = {}
        self._prelude: list[str] = []
        self._syms_done: set = set()
        self._n = 0
        self.loads: list = []       # (buffer, Idx) of every load rendered
        self._pre: Body | None = None     # renders loop-invariant symbol definitions
        self._is_prelude = False
        # With `outer` set, nodes that depend on none of the loop symbols named in
        # `inner` are rendered by `outer`, whose lines run before those loops.
        self.outer: Body | None = None
        self.inner: frozenset = frozenset()
        self._deps: dict = {}
        # In the body of a float sum reduction: exp as ``fexp32`` (``fast_math``), since
        # the sum's bits are not XLA's whatever exp it uses.
        self.summed = False

    def hoisting(self, inner_syms) -> Body:
        """Make this body render what does not vary along ``inner_syms`` (loop symbols)
        in a new outer body (returned), whose lines go before those loops."""
        self.outer = Body(self.r, self.prog, self.suffix, self.sym_names)
        self.inner = frozenset(s.name for s in inner_syms)
        return self.outer

    def loop_deps(self, e: SExpr) -> frozenset:
        """Names of the loop symbols (those without a definition) ``e`` depends on,
        through dynamic-index definitions too."""
        return loop_deps(self.prog, e, self._deps)

    def prelude_lines(self):
        return self._prelude

    def lines_fin(self, uids) -> list[str]:
        """``lines`` with the float32 exps of nodes ``uids`` calling their variants for
        arguments known to be finite and at most ``fast_math.FIN_MAX``."""
        out = list(self.lines)
        for uid in uids:
            hit = self._exps.get(uid)
            if hit is not None:
                k, fn, arg = hit
                out[k] = f"const float {self.names[uid]} = (float)({fn}_fin({arg}));"
        return out

    def _declare(self, name: str, line: str) -> None:
        self.lines.append(line)
        self.declared.add(name)

    def _need_syms(self, idx: Idx):
        for s in idx.deps:
            if s.name in self._syms_done:
                continue
            d = self.prog.sym_defs.get(s.name)
            if d is None:
                continue
            if self.outer is not None and not (self.loop_deps(d[1]) & self.inner):
                self.outer._need_syms(Idx.sym(s))
                self._syms_done.add(s.name)
                continue
            self._syms_done.add(s.name)
            sym, defn, lo, hi = d
            line = "const int64_t {} = kiln_clampi((int64_t)({}), " f"{lo}, {hi});"
            if self._is_prelude or loop_dependent(self.prog, defn):
                # In the prelude body itself, or a per-element index (gather): computed
                # here, in order, sharing this body's temporaries.
                v = self.value(defn)
                name = sym.name + self.suffix
                if self.suffix:
                    self.sym_names[sym.name] = name
                self._declare(name, line.format(name, v))
                continue
            # Loop-invariant (dynamic_slice starts): computed once before the loops, by
            # one prelude body shared by all such symbols (two symbols with the same
            # definition must not declare its temporaries twice).
            if self._pre is None:
                self._pre = Body(self.r, self.prog)
                self._pre._syms_done = self._syms_done
                self._pre._is_prelude = True
            n0 = len(self._pre.lines)
            v = self._pre.value(defn)
            self._prelude += self._pre.lines[n0:]
            self._prelude.append(line.format(sym.name, v))

    def value(self, e: SExpr) -> str:
        hit = self.names.get(e.uid)
        if hit is None and self._pre is not None:
            hit = self._pre.names.get(e.uid)    # computed before the loops: reuse it
        if hit is not None:
            return hit
        if e.kind == "const":
            text = c_literal(e.params[1].v, e.dtype)
            self.names[e.uid] = text
            return text
        if self.outer is not None and not (self.loop_deps(e) & self.inner):
            name = self.names[e.uid] = self.outer.value(e)
            return name
        if e.kind == "load":
            buf = self.prog.buffers[e.params[0]]
            idx: Idx = e.params[2].v
            self._need_syms(idx)
            it = idx.c(self.sym_names)
            if idx.lo < 0 or idx.hi > buf.size - 1:
                it = f"kiln_clampi({it}, 0, {max(buf.size - 1, 0)})"
            else:
                self.loads.append((buf, idx))
            text = f"b{buf.id}[{it}]"
        elif e.kind == "index":
            idx = e.params[1].v
            self._need_syms(idx)
            text = f"({C_TYPES[e.dtype]})({idx.c(self.sym_names)})"
        elif e.kind == "where":
            cond = e.params[1].v
            for cl in cond.clauses:
                if len(cl) > 1:
                    self._need_syms(cl[1])
            a, b = (self.value(x) for x in e.args)
            text = f"(({cond.c(self.sym_names)}) ? {a} : {b})"
        else:
            args = [self.value(x) for x in e.args]
            if self.summed and e.dtype == F32 and e.params[0] == "exp":
                text = f"fexp32({args[0]})"
            else:
                text = self.r.op_text(e, args, [x.dtype for x in e.args])
            if e.dtype == F32 and e.params[0] == "exp":
                fn = text.partition("(")[0]
                if fn in ("fexp32", "xexp32") and text == f"{fn}({args[0]})":
                    self._exps[e.uid] = (len(self.lines), fn, args[0])
        self._n += 1
        name = f"t{e.uid}{self.suffix}"
        self._declare(name, f"const {C_TYPES[e.dtype]} {name} = ({C_TYPES[e.dtype]})({text});")
        self.names[e.uid] = name
        return name


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
        if name in ("exp", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan",
                    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt",
                    "rsqrt", "cbrt", "erf", "erfc", "exp2", "lgamma"):
            return f"{self.math_fn(name, dt)}({a})"
        if name in ("atan2", "nextafter"):
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
        if src.kind == "f" and dst.kind in "iu":
            info = np.iinfo(dst)
            hi = c_literal(float(info.max), src)
            lo = c_literal(float(info.min), src)
            return (f"({a} != {a} ? ({t})0 : ({a} >= {hi} ? {c_literal(info.max, dst)} : "
                    f"({a} <= {lo} ? {c_literal(info.min, dst)} : ({t}){a})))")
        return f"({t})({a})"
