"""``jax.interpreters.partial_eval``: partial evaluation and jaxpr dead-code elimination.

:func:`trace_to_jaxpr_nounits` runs a function on a mix of known values and unknown
(abstract) inputs: everything that depends only on known values is computed right away,
the rest is staged into a jaxpr (kiln's online partial evaluator,
``JaxprTrace(forward_known=True)``). :func:`trace_to_jaxpr_dynamic` stages the whole
function. :func:`dce_jaxpr` prunes a jaxpr to the outputs that are used.
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.core import leaks
from kiln.core.avals import AbstractValue
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal, Var
from kiln.core.trace import get_aval, set_current_trace
from kiln.interpreters.staging import JaxprTrace, JaxprTracer, close_jaxpr, has_effects

__all__ = [
    "DynamicJaxprTracer", "JaxprTracer", "PartialVal", "Val", "close_jaxpr", "dce_jaxpr",
    "dce_jaxpr_consts",
    "trace_to_jaxpr_dynamic", "trace_to_jaxpr_nounits",
]

Val = Any
# kiln has one staging tracer for both jit staging and partial evaluation.
DynamicJaxprTracer = JaxprTracer


class PartialVal(tuple):
    """A value that is either known (``(None, const)``) or unknown, with only its abstract
    value known (``(aval, None)``)."""

    def __new__(cls, xs: tuple[AbstractValue | None, Any]):
        pv, const = xs
        if pv is not None and not isinstance(pv, AbstractValue):
            raise TypeError(f"PartialVal: expected an abstract value or None, got {pv!r}")
        return tuple.__new__(cls, xs)

    @classmethod
    def known(cls, const: Val) -> PartialVal:
        return PartialVal((None, const))

    @classmethod
    def unknown(cls, aval: AbstractValue) -> PartialVal:
        return PartialVal((aval, None))

    def is_known(self) -> bool:
        return self[0] is None

    def get_known(self) -> Val | None:
        """The known value, or None if unknown."""
        return self[1] if self[0] is None else None

    def get_aval(self) -> AbstractValue:
        """The abstract value (of the known value when known)."""
        pv, const = self
        return get_aval(const) if pv is None else pv


# Typed PRNG keys are defined above this layer: ``kiln.random._keys`` registers their
# dtype class and array class here when it is imported.
_key_dtype_type: type | None = None
_key_array_type: type | None = None


def register_key_types(dtype_type: type, array_type: type) -> None:
    """Make avals of ``dtype_type`` unknown arguments that are ``array_type(impl, data)``
    key arrays (``kiln.random._keys``' ``KeyTy`` and ``PRNGKeyArray``)."""
    global _key_dtype_type, _key_array_type
    _key_dtype_type, _key_array_type = dtype_type, array_type


def _new_arg(trace, aval):
    """An unknown argument of ``aval``: a tracer, or for a key-typed aval a key array over
    a traced ``uint32`` array of its data (kiln's keys cross traces as their data, so the
    jaxpr's invar is that data)."""
    dt = getattr(aval, "dtype", None)
    if _key_dtype_type is not None and isinstance(dt, _key_dtype_type):
        from kiln.core.avals import ShapedArray
        data = trace.new_arg(ShapedArray(tuple(aval.shape) + tuple(dt._impl.key_shape),
                                         np.uint32))
        return _key_array_type(dt._impl, data)
    return trace.new_arg(aval)


def _data(x):
    """The array a key array stands on (``x`` itself otherwise)."""
    if _key_array_type is not None and isinstance(x, _key_array_type):
        return x._base_array
    return x


def _call(fun, args):
    call = getattr(fun, "call_wrapped", None)
    return call(*args) if call is not None else fun(*args)


def trace_to_jaxpr_nounits(fun, pvals: Sequence[PartialVal],
                           instantiate: bool | Sequence[bool] = False):
    """Partially evaluate ``fun`` (a ``WrappedFun`` or callable of flat arguments returning
    a flat list) on ``pvals``.

    Returns ``(jaxpr, out_pvals, consts)``: ``jaxpr`` computes the unknown outputs from
    ``consts`` (its constvars: known values the unknown part uses) and the unknown inputs
    (its invars, in order); ``out_pvals`` has the known outputs' values and the unknown
    outputs' abstract values. Outputs whose ``instantiate`` flag is set are unknown (jaxpr
    outputs) even when their value is known.
    """
    trace = JaxprTrace(forward_known=True)
    args = [pv.get_known() if pv.is_known() else _new_arg(trace, pv[0]) for pv in pvals]
    try:
        with set_current_trace(trace):
            outs = list(_call(fun, args))
        if isinstance(instantiate, bool):
            instantiate = [instantiate] * len(outs)
        unknown = [trace.is_own(_data(o)) or bool(inst) for o, inst in zip(outs, instantiate)]
        jaxpr, consts = trace.to_jaxpr([_data(o) for o, u in zip(outs, unknown) if u])
    finally:
        trace.alive = False
    out_pvals = []
    for o, u in zip(outs, unknown):
        aval = o.aval if _data(o) is not o else (get_aval(o) if u else None)
        out_pvals.append(PartialVal.unknown(aval) if u else PartialVal.known(o))
    return jaxpr, out_pvals, consts


def trace_to_jaxpr_dynamic(fun, in_avals: Sequence[AbstractValue], *, keep_inputs=None,
                           lower: bool = False, auto_dce: bool = False):
    """Stage ``fun`` (flat arguments to a flat list) on abstract inputs.

    Returns ``(jaxpr, out_avals, consts)``; the jaxpr's constvars stand for ``consts``.
    """
    del lower
    trace = JaxprTrace()
    args = [_new_arg(trace, a) for a in in_avals]
    try:
        with set_current_trace(trace):
            outs = list(_call(fun, args))
        jaxpr, consts = trace.to_jaxpr([_data(o) for o in outs], dce=auto_dce)
        key_avals = [o.aval if _data(o) is not o else None for o in outs]
    finally:
        trace.alive = False
    if leaks.enabled():
        ref = weakref.ref(trace)
        del trace, args, outs
        leaks.check_leaks(ref)
    if keep_inputs is not None:
        jaxpr = Jaxpr(jaxpr.constvars, [v for v, k in zip(jaxpr.invars, keep_inputs) if k],
                      jaxpr.outvars, jaxpr.eqns, jaxpr.effects, jaxpr.debug_info)
    # A key output's abstract value is key-typed (the jaxpr's output is its data).
    return jaxpr, [k if k is not None else v.aval
                   for k, v in zip(key_avals, jaxpr.outvars)], consts


def _dce(jaxpr: Jaxpr, used_outputs: Sequence[bool], instantiate):
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * len(jaxpr.invars)
    live = set()
    outvars = [v for v, u in zip(jaxpr.outvars, used_outputs) if u]
    for v in outvars:
        if isinstance(v, Var):
            live.add(v)
    eqns = []
    for eqn in reversed(jaxpr.eqns):
        used = [v in live for v in eqn.outvars]
        if any(used) or has_effects(eqn):
            rule = getattr(eqn.primitive, "dce_rule", None)
            if (rule is not None and not has_effects(eqn)
                    and (not all(used) or getattr(eqn.primitive, "dce_always", False))):
                # A call whose unused outputs its body can stop computing (JAX's dce rules;
                # ``dce_always``: a rule that may rewrite the equation even when all are).
                eqn = rule(used, eqn)
            eqns.append(eqn)
            live.update(v for v in eqn.invars if not isinstance(v, Literal))
    eqns.reverse()
    used_consts = [v in live for v in jaxpr.constvars]
    used_inputs = [v in live or bool(k) for v, k in zip(jaxpr.invars, instantiate)]
    return outvars, eqns, used_consts, used_inputs


def dce_jaxpr(jaxpr: Jaxpr, used_outputs: Sequence[bool],
              instantiate: bool | Sequence[bool] = False) -> tuple[Jaxpr, list[bool]]:
    """Drop the outputs of ``jaxpr`` not in ``used_outputs``, the effect-free equations
    nothing uses any more, and the inputs nothing reads (unless ``instantiate`` keeps them).

    Returns ``(new_jaxpr, used_inputs)``.
    """
    if isinstance(jaxpr, ClosedJaxpr):
        raise TypeError("dce_jaxpr takes an open Jaxpr (use closed_jaxpr.jaxpr)")
    outvars, eqns, _, used_inputs = _dce(jaxpr, used_outputs, instantiate)
    new = Jaxpr(jaxpr.constvars, [v for v, u in zip(jaxpr.invars, used_inputs) if u],
                outvars, eqns, jaxpr.effects, jaxpr.debug_info)
    return new, used_inputs


def dce_jaxpr_consts(jaxpr: Jaxpr, used_outputs: Sequence[bool],
                     instantiate: bool | Sequence[bool] = False
                     ) -> tuple[Jaxpr, list[bool], list[bool]]:
    """:func:`dce_jaxpr` that also drops unused constvars.

    Returns ``(new_jaxpr, used_consts, used_inputs)``.
    """
    outvars, eqns, used_consts, used_inputs = _dce(jaxpr, used_outputs, instantiate)
    new = Jaxpr([v for v, u in zip(jaxpr.constvars, used_consts) if u],
                [v for v, u in zip(jaxpr.invars, used_inputs) if u],
                outvars, eqns, jaxpr.effects, jaxpr.debug_info)
    return new, used_consts, used_inputs
