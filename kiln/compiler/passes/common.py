"""Helpers shared by the jaxpr passes of :mod:`kiln.compiler.passes.passes`.

Conventions every pass follows (and that these helpers encode):

- A pass never mutates its input: it builds new ``JaxprEqn``/``Jaxpr``/``ClosedJaxpr``
  objects and may reuse the input's ``Var`` objects, ``Literal`` objects, params and
  sub-jaxprs (all of which are treated as immutable).
- A value is replaced by another *atom* (a ``Var`` or a ``Literal``) only when the two
  abstract values are identical, weak type included: every equation downstream is then
  still well typed (``check_jaxpr`` re-runs each primitive's abstract evaluation on the
  new operands) and the jaxpr's output avals are unchanged.
- Literals are built exactly as staging builds them (``JaxprTrace.to_atom``): a rank-0
  value of a NumPy dtype of kind ``b``, ``i``, ``u``, ``f`` or ``c``, held as a
  ``kiln.Array`` whose ``_value`` is a 0-d ``np.ndarray`` and whose ``weak_type`` equals
  the literal aval's. Anything else (bfloat16/float8 scalars, arrays) is a constvar.
"""
from __future__ import annotations

import numpy as np

from kiln.array import make_array
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal, Var
from kiln.core.trace import Tracer

LITERAL_KINDS = "biufc"


def same_aval(a, b) -> bool:
    """Whether two avals have the same shape, dtype and weak type."""
    return a.shape == b.shape and a.dtype == b.dtype and a.weak_type == b.weak_type


def is_numpy_aval(aval) -> bool:
    """Whether ``aval``'s dtype is a NumPy dtype (not an extended dtype such as PRNG keys)."""
    return isinstance(aval.dtype, np.dtype)


class Subst:
    """A substitution of atoms for variables, applied to the operands of later equations.

    Bound values are already resolved (never a variable that is itself substituted),
    so reading is a single dictionary lookup.
    """

    __slots__ = ("map",)

    def __init__(self):
        self.map = {}

    def __call__(self, atom):
        if isinstance(atom, Var):
            return self.map.get(atom, atom)
        return atom

    def bind(self, var, atom) -> None:
        """Make later reads of ``var`` return ``atom`` (ignored for dropped outputs)."""
        if not isinstance(var, DropVar):
            self.map[var] = self(atom)

    def eqn(self, eqn: JaxprEqn) -> JaxprEqn:
        """``eqn`` with its operands substituted (the same object when nothing changes)."""
        new = [self(v) for v in eqn.invars]
        if all(a is b for a, b in zip(new, eqn.invars)):
            return eqn
        return eqn.replace(invars=new)

    def atoms(self, atoms) -> list:
        return [self(v) for v in atoms]


def make_literal(value, aval: ShapedArray):
    """A ``Literal`` of ``value`` typed ``aval``, built as staging builds one; ``None`` when
    staging would use a constvar instead (non-scalar or not a plain NumPy number/bool)."""
    if aval.shape != () or not is_numpy_aval(aval) or aval.dtype.kind not in LITERAL_KINDS:
        return None
    raw = np.array(value, dtype=aval.dtype).reshape(())
    return Literal(make_array(raw, aval.weak_type), ShapedArray((), aval.dtype, aval.weak_type))


def literal_value(lit: Literal) -> np.ndarray:
    """The NumPy value held by a ``Literal``."""
    v = getattr(lit.val, "_value", None)
    return np.asarray(lit.val if v is None else v)


def literal_key(lit: Literal):
    """A hashable identity of a literal's value and type: bitwise, so ``0.0`` and ``-0.0``
    differ, and a NaN equals the same NaN."""
    v = literal_value(lit)
    return ("lit", v.dtype, lit.aval.weak_type, v.shape, v.tobytes())


def concrete_value(x):
    """The NumPy value of a closed-over const, or ``None`` when it is not concrete (a tracer
    of an enclosing trace, or a non-NumPy value such as a typed PRNG key array)."""
    if isinstance(x, Tracer):
        return None
    v = getattr(x, "_value", x)
    if isinstance(v, (np.ndarray, np.generic)) and isinstance(v.dtype, np.dtype):
        return np.asarray(v)
    return None


def iter_subjaxprs(params):
    """The ``Jaxpr``/``ClosedJaxpr`` values among ``params`` (directly or in tuples/lists)."""
    for p in params.values():
        for j in (p if isinstance(p, (tuple, list)) else (p,)):
            if isinstance(j, (Jaxpr, ClosedJaxpr)):
                yield j


def has_subjaxpr(params) -> bool:
    return next(iter_subjaxprs(params), None) is not None


def has_callable(params) -> bool:
    """Whether a parameter is (or holds) a Python callable: a user function the primitive
    would call (callbacks, custom rules)."""
    for p in params.values():
        for v in (p if isinstance(p, (tuple, list)) else (p,)):
            if callable(v) and not isinstance(v, (type, np.dtype)):
                return True
    return False


def rebuild(closed: ClosedJaxpr, eqns, outvars, constvars=None, consts=None) -> ClosedJaxpr:
    """A new ``ClosedJaxpr`` with ``closed``'s invars, effects and debug info."""
    j = closed.jaxpr
    constvars = j.constvars if constvars is None else constvars
    consts = closed.consts if consts is None else consts
    return ClosedJaxpr(Jaxpr(constvars, j.invars, outvars, eqns, j.effects, j.debug_info),
                       consts)


def fresh_like(v: Var) -> Var:
    """A new variable of ``v``'s aval (a new ``DropVar`` for a dropped output)."""
    return DropVar(v.aval) if isinstance(v, DropVar) else Var(v.aval)


def checked_eqn(prim, invars, outvar: Var, params) -> JaxprEqn | None:
    """A single-output equation ``outvar = prim[params] *invars``, or ``None`` when the
    primitive's abstract evaluation rejects it or gives a type other than ``outvar``'s."""
    try:
        out = prim.abstract_eval(*[v.aval for v in invars], **params)
    except Exception:
        return None
    if prim.multiple_results or not same_aval(out, outvar.aval):
        return None
    return JaxprEqn(prim, list(invars), [outvar], params)
