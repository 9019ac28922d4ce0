"""Index arithmetic for fused kernels: affine index expressions with ranges.

Movement ops (broadcast, reshape, transpose, slice, pad, rev, concatenate,
dynamic_slice, iota) never move data in a compiled kernel: they rewrite the index
at which their operand is read. This module holds those index expressions.

An :class:`Idx` is ``sum(coef * sym) + const`` over *symbols* (loop variables and
runtime scalars such as a ``dynamic_slice`` start), each with a known integer range
``[0, extent)``, or an opaque non-affine expression (``floordiv``/``mod`` that did not
simplify). Ranges make reshape arithmetic simplify: ``(8*i + j) // 8 == i`` and
``(8*i + j) % 8 == j`` when ``0 <= j < 8``, so splitting and merging dimensions of a
row-major array costs nothing at run time.

Conditions (:class:`Cond`) guard padded and concatenated regions.

What it must not hold: anything about dtypes, buffers or C statements.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sym:
    """An integer symbol with range ``[lo, hi]`` (inclusive): a loop index or a runtime scalar."""

    name: str
    lo: int
    hi: int


class Idx:
    """An integer index expression: affine ``terms`` + ``const``, or an opaque C expression.

    ``terms`` is a tuple of ``(Sym, coef)`` with nonzero coefs, sorted by name.
    Opaque expressions carry their rendered C text and a conservative range, and how
    that text was made (``parts``: a format string and its operands) so that it can be
    rendered again with other symbol names.
    """

    __slots__ = ("terms", "const", "opaque", "lo", "hi", "deps", "parts")

    def __init__(self, terms=(), const=0, opaque=None, lo=None, hi=None, deps=frozenset(),
                 parts=None):
        self.terms = terms
        self.const = const
        self.opaque = opaque
        self.parts = parts
        if opaque is None:
            lo = const
            hi = const
            for s, c in terms:
                if c > 0:
                    lo += c * s.lo
                    hi += c * s.hi
                else:
                    lo += c * s.hi
                    hi += c * s.lo
            deps = frozenset(s for s, _ in terms)
        self.lo = lo
        self.hi = hi
        self.deps = deps

    # -- construction ------------------------------------------------------------------------
    @staticmethod
    def sym(s: Sym) -> Idx:
        return Idx(((s, 1),), 0)

    @staticmethod
    def lit(c: int) -> Idx:
        return Idx((), int(c))

    @property
    def is_affine(self) -> bool:
        return self.opaque is None

    def coef(self, s: Sym) -> int:
        for t, c in self.terms:
            if t == s:
                return c
        return 0

    # -- arithmetic --------------------------------------------------------------------------
    def __add__(self, other) -> Idx:
        if isinstance(other, int):
            other = Idx.lit(other)
        if self.is_affine and other.is_affine:
            d: dict = {}
            for s, c in self.terms + other.terms:
                d[s] = d.get(s, 0) + c
            terms = tuple(sorted(((s, c) for s, c in d.items() if c), key=lambda t: t[0].name))
            return Idx(terms, self.const + other.const)
        return _opaque("({} + {})", (self, other), self.lo + other.lo, self.hi + other.hi,
                       self.deps | other.deps)

    def __mul__(self, k: int) -> Idx:
        k = int(k)
        if k == 0:
            return Idx.lit(0)
        if self.is_affine:
            return Idx(tuple((s, c * k) for s, c in self.terms), self.const * k)
        lo, hi = sorted((self.lo * k, self.hi * k))
        return _opaque("({} * {})", (self, k), lo, hi, self.deps)

    def __neg__(self) -> Idx:
        return self * -1

    def __sub__(self, other) -> Idx:
        if isinstance(other, int):
            return self + (-other)
        return self + (-other)

    def floordiv(self, d: int) -> Idx:
        """``self // d`` for ``d > 0``, simplified with ranges."""
        d = int(d)
        if d == 1:
            return self
        if d == 0:      # a zero-size dimension: the index is never evaluated
            return Idx.lit(0)
        if 0 <= self.lo and self.hi < d:
            return Idx.lit(0)
        if self.is_affine:
            mult, rest = self._split(d)
            if rest is not None:
                return mult
        if self.lo >= 0:
            return _opaque("({} / {})", (self, d), self.lo // d, self.hi // d, self.deps)
        return _opaque("kiln_floordiv({}, {})", (self, d), self.lo // d, self.hi // d, self.deps)

    def mod(self, d: int) -> Idx:
        """``self % d`` (floor semantics) for ``d > 0``, simplified with ranges."""
        d = int(d)
        if d in (0, 1):     # 0: a zero-size dimension, the index is never evaluated
            return Idx.lit(0)
        if 0 <= self.lo and self.hi < d:
            return self
        if self.is_affine:
            _, rest = self._split(d)
            if rest is not None:
                return rest
        if self.lo >= 0:
            return _opaque("({} % {})", (self, d), 0, min(d - 1, self.hi), self.deps)
        return _opaque("kiln_floormod({}, {})", (self, d), 0, d - 1, self.deps)

    def _split(self, d: int):
        """Write ``self = d * q + r`` with ``0 <= r < d`` from the terms alone, if possible.

        Returns ``(q, r)`` or ``(None, None)``."""
        q_terms, r_terms = [], []
        for s, c in self.terms:
            if c % d == 0:
                q_terms.append((s, c // d))
            else:
                r_terms.append((s, c))
        qc, rc = divmod(self.const, d)
        r = Idx(tuple(r_terms), rc)
        if 0 <= r.lo and r.hi < d:
            return Idx(tuple(q_terms), qc), r
        return None, None

    # -- rendering ---------------------------------------------------------------------------
    def c(self, names=None) -> str:
        """C text of this expression (int64 arithmetic); ``names`` maps symbol names to
        the names to print instead (a copy of a loop body with its own names)."""
        if names and not any(s.name in names for s in self.deps):
            names = None
        if self.opaque is not None:
            if names is None:
                return self.opaque
            fmt, args = self.parts
            return fmt.format(*(a.c(names) if isinstance(a, Idx) else a for a in args))
        parts = []
        for s, c in self.terms:
            n = s.name if names is None else names.get(s.name, s.name)
            parts.append(n if c == 1 else f"{c}*{n}" if c > 0 else f"({c})*{n}")
        if self.const or not parts:
            parts.append(str(self.const) if self.const >= 0 else f"({self.const})")
        return " + ".join(parts) if len(parts) == 1 else "(" + " + ".join(parts) + ")"

    def key(self):
        """A hashable identity (structure, not object): the C text's structure and the
        ranges of the symbols it names.

        Two expressions of one text over symbols of other ranges (``i1`` over 6 in one
        kernel and over 14 in another) read the same C but are different values to
        every pass that reasons by range (load clamps, splitting loops by
        :meth:`floordiv`/:meth:`mod`, whose rules use the ranges): they must not be
        interned as one node, or a kernel would carry another kernel's ranges. Affine:
        ``("a", ((name, coef), ...), const, ((lo, hi), ...))``; opaque: ``("o", text,
        lo, hi, ((name, lo, hi), ...))``."""
        if self.opaque is not None:
            return ("o", self.opaque, self.lo, self.hi,
                    tuple(sorted((s.name, s.lo, s.hi) for s in self.deps)))
        return ("a", tuple((s.name, c) for s, c in self.terms), self.const,
                tuple((s.lo, s.hi) for s, _ in self.terms))

    def __repr__(self):
        return f"Idx({self.c()})"


def _opaque(fmt, args, lo, hi, deps) -> Idx:
    text = fmt.format(*(a.c() if isinstance(a, Idx) else a for a in args))
    return Idx(opaque=text, lo=lo, hi=hi, deps=frozenset(deps), parts=(fmt, args))


class Cond:
    """A conjunction of index conditions: ``lo <= e < hi`` and ``e % k == 0`` clauses."""

    __slots__ = ("clauses",)

    def __init__(self, clauses=()):
        self.clauses = tuple(clauses)

    @staticmethod
    def in_range(e: Idx, lo: int, hi: int) -> Cond:
        """``lo <= e < hi``, simplified against ``e``'s range (a clause always true is dropped)."""
        cl = []
        if e.lo < lo:
            cl.append(("ge", e, lo))
        if e.hi >= hi:
            cl.append(("lt", e, hi))
        if e.lo >= hi or e.hi < lo:
            cl = [("false",)]
        return Cond(cl)

    @staticmethod
    def divisible(e: Idx, k: int) -> Cond:
        if k == 1:
            return Cond()
        return Cond([("div", e, k)])

    def __and__(self, other: Cond) -> Cond:
        return Cond(self.clauses + other.clauses)

    @property
    def always(self) -> bool:
        return not self.clauses

    @property
    def never(self) -> bool:
        return any(c[0] == "false" for c in self.clauses)

    def c(self, names=None) -> str:
        """C text of the conjunction (``names``: as :meth:`Idx.c`)."""
        if not self.clauses:
            return "1"
        out = []
        for cl in self.clauses:
            if cl[0] == "false":
                return "0"
            if cl[0] == "ge":
                out.append(f"({cl[1].c(names)} >= {cl[2]})")
            elif cl[0] == "lt":
                out.append(f"({cl[1].c(names)} < {cl[2]})")
            else:
                out.append(f"(kiln_floormod({cl[1].c(names)}, {cl[2]}) == 0)")
        return " && ".join(out)

    def key(self):
        return tuple((cl[0],) + tuple(x.key() if isinstance(x, Idx) else x for x in cl[1:])
                     for cl in self.clauses)


def row_major_strides(shape) -> list[int]:
    strides = [1] * len(shape)
    acc = 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= max(int(shape[d]), 1)
    return strides


def flat_index(idxs, shape) -> Idx:
    """Row-major flat offset of multi-index ``idxs`` into an array of ``shape``."""
    out = Idx.lit(0)
    for e, s in zip(idxs, row_major_strides(shape)):
        out = out + e * s
    return out


def unflatten(flat: Idx, shape) -> list[Idx]:
    """Multi-index of row-major offset ``flat`` in ``shape`` (simplifies by ranges)."""
    out = []
    strides = row_major_strides(shape)
    for d, s in enumerate(strides):
        e = flat.floordiv(s)
        if d > 0:
            e = e.mod(int(shape[d]))
        out.append(e)
    return out
