"""Statements computing a kernel's scalar expressions: :class:`Body`.

A Body turns an expression graph into C statements, one ``const`` temporary per node
(``op_text`` of ``c_expr.py`` gives each node's C text), dynamic-index symbols defined
where they are needed, loop-invariant nodes hoisted before their loops. It also decides
every name it prints: ``t<uid>`` for a node, the symbol's own name for a symbol, and,
in a second copy of a loop body, those names with a suffix.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.compiler.lower.expr import SExpr
from kiln.compiler.lower.index import Idx
from kiln.compiler.lower.program import Program
from kiln.compiler.lower.walk import loop_dependent
from kiln.compiler.render.c_expr import C_TYPES, F32, c_literal
from kiln.compiler.render.plan_loops import loop_deps

if TYPE_CHECKING:
    from kiln.compiler.render.render_c import CRenderer


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

    def lines_fin(self, uids, inside=()) -> list[str]:
        """``lines`` with the float32 exps of nodes ``uids`` calling their variants for
        arguments known to be finite and at most ``fast_math.FIN_MAX`` (``_fin``), those
        of ``inside`` (``fexp32`` only) for arguments known to lie in [``FIN_MIN``,
        ``FIN_MAX``] (``fexp32_in``)."""
        out = list(self.lines)
        for uid in uids:
            hit = self._exps.get(uid)
            if hit is not None:
                k, fn, arg = hit
                variant = "_in" if uid in inside and fn == "fexp32" else "_fin"
                out[k] = f"const float {self.names[uid]} = (float)({fn}{variant}({arg}));"
        return out

    def summed_exps(self, uids) -> list:
        """The nodes of ``uids`` whose exp is ``fexp32`` (inside a float sum)."""
        return [u for u in uids if self._exps.get(u, (0, ""))[1] == "fexp32"]

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
