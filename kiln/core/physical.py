"""Jaxprs of extended dtypes rewritten to their physical storage (``kiln._extended``).

``physical_jaxpr`` replaces every extended dtype (a ``dtypes.ExtendedDType`` with rules) of
a jaxpr by its representation dtype and drops the ``to_edtype``/``from_edtype``
conversions (identities on the data); the reference backend, the compiled backend and
loops run the result on the storage arrays, and ``EvalTrace`` the jaxprs in the parameters
of an eager primitive on extended arrays (this module installs that rewrite in
``kiln.core.trace``, which sits below the jaxpr IR).
"""
from __future__ import annotations

from kiln._extended import EValue, has_rules, physical_aval
from kiln.core import trace as _trace
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal, Var, sub_jaxprs

__all__ = ["physical_closed", "physical_const", "physical_jaxpr"]


def _jaxpr_has_extended(jaxpr) -> bool:
    for v in (*jaxpr.constvars, *jaxpr.invars):
        if has_rules(v.aval.dtype):
            return True
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            if has_rules(v.aval.dtype):
                return True
        if any(_jaxpr_has_extended(j) for j in sub_jaxprs(eqn.params)):
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
    return ClosedJaxpr(j, [physical_const(c) for c in closed.consts])


def physical_const(c):
    """A const of a jaxpr with an extended array replaced by its physical data."""
    v = getattr(c, "_value", None)
    if type(v) is EValue:
        return _trace.make_array(v.data, c.weak_type)
    return c


_EDTYPE_PRIMS = ("to_edtype", "from_edtype")


def _physical_param(v):
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


_trace.set_physical_param(_physical_param)
