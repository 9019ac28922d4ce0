"""Extended dtypes with rules (``dtypes.ExtendedDType`` subclasses carrying ``_rules``,
such as Flax's fp8 "meta" dtype): their physical storage.

An array of such a dtype is stored as an array of its *representation* dtype
(``dtype._rules.physical_element_aval(dtype)``, of element shape ``()``): the abstract
value (and so the jaxpr type) has the extended dtype; every primitive's NumPy impl, the
reference backend and compiled programs see the physical data. Eagerly, a concrete
array's storage is an :class:`EValue` (the physical data and the extended dtype), which
``EvalTrace`` unwraps before an impl runs and wraps again around outputs whose abstract
dtype is extended. ``physicalize`` rewrites a jaxpr to its physical form for the compiler.

PRNG key dtypes are not of this kind: key arrays cross transformations as their uint32
data (``kiln.random._keys``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.dtypes import ExtendedDType


def has_rules(dtype: Any) -> bool:
    """Whether ``dtype`` is an extended dtype with rules (stored physically)."""
    return isinstance(dtype, ExtendedDType) and getattr(dtype, "_rules", None) is not None


def rep_dtype(dtype: Any) -> np.dtype:
    """The representation (physical element) dtype of an extended dtype with rules."""
    elem = dtype._rules.physical_element_aval(dtype)
    if tuple(elem.shape) != ():
        raise NotImplementedError(
            f"extended dtype {dtype}: kiln stores extended dtypes whose physical element "
            f"shape is () only; its physical element is {elem.shape}")
    return np.dtype(elem.dtype)


def physical_aval(aval: ShapedArray) -> ShapedArray:
    """``aval`` with an extended dtype replaced by its representation dtype."""
    if has_rules(aval.dtype):
        return ShapedArray(aval.shape, rep_dtype(aval.dtype), aval.weak_type)
    return aval


class EValue:
    """The storage of a concrete array of an extended dtype: its physical NumPy ``data``
    (of the representation dtype, the same shape) and the extended ``dtype``."""

    __slots__ = ("data", "dtype")

    def __init__(self, data: np.ndarray, dtype: Any):
        self.data = data
        self.dtype = dtype

    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            f"an array of the extended dtype {self.dtype} has no NumPy value; convert it to "
            f"its representation dtype first (lax.convert_element_type(x, "
            f"{self.data.dtype.name}))")

    def __repr__(self) -> str:
        return f"EValue({self.data!r}, dtype={self.dtype})"


def physical(v: Any) -> Any:
    """The physical NumPy value of an eager value (``EValue``s unwrapped)."""
    return v.data if type(v) is EValue else v


def wrap(value: Any, aval: ShapedArray) -> Any:
    """``value`` (physical) as the storage of an array of ``aval``."""
    if has_rules(getattr(aval, "dtype", None)) and type(value) is not EValue:
        return EValue(np.asarray(value), aval.dtype)
    return value


def involves_extended(vals, out_avals) -> bool:
    """Whether an eager primitive application has an extended input or output."""
    return any(type(v) is EValue for v in vals) or \
        any(has_rules(getattr(a, "dtype", None)) for a in out_avals)


def _jaxpr_has_extended(jaxpr) -> bool:
    from kiln.interpreters.ad import _sub_jaxprs
    for v in (*jaxpr.constvars, *jaxpr.invars):
        if has_rules(v.aval.dtype):
            return True
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            if has_rules(v.aval.dtype):
                return True
        if any(_jaxpr_has_extended(j) for j in _sub_jaxprs(eqn.params)):
            return True
    return False


def physical_jaxpr(jaxpr):
    """``jaxpr`` with every extended dtype replaced by its representation dtype, and the
    conversions to and from extended dtypes (identities on the data) removed; sub-jaxprs
    in parameters are rewritten too. ``jaxpr`` itself when it has no extended dtype.
    Cached on the jaxpr."""
    p = jaxpr._physical
    if p is None:
        p = _physicalize(jaxpr) if _jaxpr_has_extended(jaxpr) else jaxpr
        jaxpr._physical = p
    return p


def physical_closed(closed):
    """``physical_jaxpr`` of a closed jaxpr (its extended consts unwrapped)."""
    j = physical_jaxpr(closed.jaxpr)
    if j is closed.jaxpr and not any(type(getattr(c, "_value", None)) is EValue
                                     for c in closed.consts):
        return closed
    from kiln.core.jaxpr import ClosedJaxpr
    return ClosedJaxpr(j, [physical_const(c) for c in closed.consts])


def physical_const(c):
    """A const of a jaxpr with an extended array replaced by its physical data."""
    v = getattr(c, "_value", None)
    if type(v) is EValue:
        from kiln.array import make_array
        return make_array(v.data, c.weak_type)
    return c


_EDTYPE_PRIMS = ("to_edtype", "from_edtype")


def _physical_param(v):
    from kiln.core.jaxpr import ClosedJaxpr, Jaxpr
    if isinstance(v, ClosedJaxpr):
        return physical_closed(v)
    if isinstance(v, Jaxpr):
        return physical_jaxpr(v)
    if isinstance(v, tuple) and any(isinstance(x, (ClosedJaxpr, Jaxpr)) for x in v):
        return tuple(_physical_param(x) for x in v)
    if isinstance(v, list) and any(isinstance(x, (ClosedJaxpr, Jaxpr)) for x in v):
        return [_physical_param(x) for x in v]
    return v


def _physicalize(jaxpr):
    from kiln.core.jaxpr import DropVar, Jaxpr, JaxprEqn, Literal, Var
    env: dict = {}

    def new(v):
        a = physical_aval(v.aval)
        if isinstance(v, DropVar):
            return DropVar(a)
        if a is v.aval:
            env[v] = v
            return v
        nv = env[v] = Var(a)
        return nv

    def read(x):
        if type(x) is Literal:
            return x if not has_rules(x.aval.dtype) else Literal(x.val, physical_aval(x.aval))
        return env[x]

    constvars = [new(v) for v in jaxpr.constvars]
    invars = [new(v) for v in jaxpr.invars]
    eqns = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _EDTYPE_PRIMS and len(eqn.invars) == 1:
            out = eqn.outvars[0]
            if not isinstance(out, DropVar):
                env[out] = read(eqn.invars[0])
            continue
        params = {k: _physical_param(v) for k, v in eqn.params.items()}
        eqns.append(JaxprEqn(eqn.primitive, [read(x) for x in eqn.invars],
                             [new(v) for v in eqn.outvars], params, eqn.source_info))
    out = Jaxpr(constvars, invars, [read(x) for x in jaxpr.outvars], eqns, jaxpr.effects,
                jaxpr.debug_info)
    out._physical = out
    return out
