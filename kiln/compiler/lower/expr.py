"""Scalar expressions of fused kernels: the per-element computation, hash-consed.

A fused kernel computes, for each point of its loop nest, one scalar expression
(a DAG of :class:`SExpr`) per output. Leaves read buffers at an :class:`~.index.Idx`,
constants, or index values (``iota``). Inner nodes are elementwise operations
named after the lax primitive (``"add"``, ``"exp"``, ``"select_n"``, ...) with the
result dtype; :class:`~.render_c.CRenderer` maps each to C.

Nodes are interned per :class:`ExprTable`, so the same computation reached twice
(``x * x`` where ``x = exp(y)``) is one node and is rendered once.

What it must not hold: loop structure, buffers' allocation, anything about C text.
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.lower.index import Cond, Idx


class SExpr:
    """A scalar expression node. ``kind`` is one of ``load``, ``const``, ``op``, ``where``,
    ``index``; ``dtype`` its NumPy dtype; ``cost`` a rough count of work to recompute it."""

    __slots__ = ("kind", "dtype", "args", "params", "uid", "cost")

    def __init__(self, kind, dtype, args, params, uid, cost):
        self.kind = kind
        self.dtype = dtype
        self.args = args
        self.params = params
        self.uid = uid
        self.cost = cost

    def __repr__(self):
        return f"SExpr#{self.uid}({self.kind} {self.params!r} {self.dtype})"


# Rough per-element costs used by the fusion cost rule (an add is 1).
EXPENSIVE = {"exp": 8, "log": 8, "log1p": 10, "expm1": 10, "tanh": 10, "logistic": 10,
             "sin": 10, "cos": 10, "tan": 16, "pow": 20, "erf": 10, "erfc": 12, "atan2": 20,
             "asin": 16, "acos": 16, "atan": 14, "sinh": 14, "cosh": 14, "asinh": 16,
             "acosh": 16, "atanh": 16, "lgamma": 30, "digamma": 40, "bessel_i0e": 40,
             "bessel_i1e": 40, "zeta": 200,
             "polygamma": 260, "igamma": 400, "igammac": 400,
             "igamma_grad_a": 500, "random_gamma_grad": 500, "sqrt": 3, "rsqrt": 4, "cbrt": 12, "div": 3,
             "rem": 6, "exp2": 8, "is_finite": 1, "threefry": 40, "xla_log": 10,
             "xla_log1p": 14, "xla_exp": 10, "xla_erf_inv": 30, "xla_erf": 12,
             "xla_tan": 16, "xla_pow": 20}


class ExprTable:
    """The interning table of one program's scalar expressions."""

    def __init__(self):
        self._table: dict = {}
        # Where each node came from, for profiles: node uid -> the source_info of the
        # equation being lowered when it was made (``current``, set by the lowering).
        self.source: dict = {}
        self.current = None

    def _make(self, kind, dtype, args, params, cost) -> SExpr:
        key = (kind, np.dtype(dtype).str, tuple(a.uid for a in args), params)
        hit = self._table.get(key)
        if hit is None:
            hit = SExpr(kind, np.dtype(dtype), tuple(args), params, len(self._table), cost)
            self._table[key] = hit
            if self.current is not None:
                self.source[hit.uid] = self.current
        return hit

    def load(self, buf, idx: Idx) -> SExpr:
        """Read ``buf`` (a :class:`~.program.Buffer`) at flat offset ``idx``."""
        return self._make("load", buf.dtype, (), (buf.id, idx.key(), _IdxBox(idx)), 1)

    def const(self, value, dtype) -> SExpr:
        dtype = np.dtype(dtype)
        v = np.asarray(value, dtype)[()]
        # Key by bits so that -0.0 and 0.0 (and NaN payloads) stay distinct.
        bits = np.asarray(v).tobytes()
        return self._make("const", dtype, (), (bits, _ValBox(v)), 0)

    def op(self, name: str, dtype, *args: SExpr, **params) -> SExpr:
        p = (name,) + tuple(sorted(params.items()))
        cost = EXPENSIVE.get(name, 1) + sum(a.cost for a in args)
        return self._make("op", dtype, args, p, cost)

    def where(self, cond: Cond, a: SExpr, b: SExpr) -> SExpr:
        """``cond ? a : b`` for an index condition (padding, concatenation)."""
        if cond.always:
            return a
        if cond.never:
            return b
        return self._make("where", a.dtype, (a, b), (cond.key(), _IdxBox(cond)),
                          1 + a.cost + b.cost)

    def index(self, idx: Idx, dtype) -> SExpr:
        """The integer value of an index expression, as ``dtype`` (``iota``)."""
        return self._make("index", dtype, (), (idx.key(), _IdxBox(idx)), 1)


class _IdxBox:
    """Carries an Idx/Cond/value inside a node's params without taking part in its key."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0


class _ValBox(_IdxBox):
    __slots__ = ()
