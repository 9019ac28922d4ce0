"""JAX's generic call primitives, ``closed_call`` and ``call``.

``closed_call_p`` applies a ``ClosedJaxpr`` (its ``call_jaxpr`` parameter) to its operands:
the same operation as a nested ``jit`` without a name, and transformed by the very same
rules (``jit``'s JVP, transpose, batching and partial evaluation), which re-emit ``jit``
calls. The compiler inlines it like ``jit``.

``call_p`` is JAX's call primitive over a Python function (a ``WrappedFun`` or any
callable): ``call_p.bind(f, *args)`` traces ``f`` at the operands' types and binds
``closed_call_p``, so kiln's jaxprs only ever hold ``closed_call``. Libraries (NumPyro's
provenance tracking) key rule tables on both objects.
"""
from __future__ import annotations

from kiln.core.jaxpr import ClosedJaxpr, eval_jaxpr
from kiln.core.trace import Primitive, get_aval
from kiln.interpreters import ad, batching, pjit, staging

__all__ = ["CallPrimitive", "call", "call_impl", "call_p", "closed_call_p"]

class _ClosedCallPrimitive(Primitive):
    """``closed_call``; ``bind(*args, subfuns=(f,))`` (JAX's calling convention for a
    function operand) traces ``f`` at the operands' types first."""

    def bind(self, *args, **params):
        subfuns = params.pop("subfuns", None)
        if subfuns is not None:
            (fun,) = subfuns
            return _bind_traced(fun, args)
        return super().bind(*args, **params)


closed_call_p = _ClosedCallPrimitive("closed_call")
closed_call_p.multiple_results = True
closed_call_p.call_primitive = True
closed_call_p.array_impl = True     # its impl evaluates the jaxpr with kiln operations


def _closed_call_impl(*args, call_jaxpr: ClosedJaxpr, **_):
    return eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *args)


closed_call_p.impl = _closed_call_impl
closed_call_p.abstract_eval = lambda *avals, call_jaxpr, **_: call_jaxpr.out_avals
closed_call_p.weak_type_rule = lambda *w, call_jaxpr, **_: [
    a.weak_type for a in call_jaxpr.out_avals]


def _as_jit(rule):
    def adapted(*args, call_jaxpr: ClosedJaxpr, **_):
        return rule(*args, jaxpr=call_jaxpr, name="closed_call")
    return adapted


ad.jvp_rules[closed_call_p] = _as_jit(pjit._jvp_rule)
ad.transpose_rules[closed_call_p] = _as_jit(pjit._transpose_rule)
batching.batch_rules[closed_call_p] = _as_jit(pjit._batch_rule)


def _partial_eval(trace, args, params):
    return pjit._partial_eval_rule(trace, args,
                                   dict(jaxpr=params["call_jaxpr"], name="closed_call"))


staging.partial_eval_rules[closed_call_p] = _partial_eval


class CallPrimitive(Primitive):
    """A primitive applied to a Python function and operands: ``bind(f, *args)``."""

    multiple_results = True
    call_primitive = True

    def bind(self, *args, subfuns=None, **params):
        # ``bind(f, *args)``, or JAX's ``bind(*args, subfuns=(f,))``.
        if subfuns is not None:
            (fun,) = subfuns
        else:
            fun, *args = args
        return _bind_traced(fun, args)


def _bind_traced(fun, args):
    """``closed_call`` of ``fun`` (a ``WrappedFun`` or callable) traced at ``args``."""
    f = getattr(fun, "call_wrapped", fun)
    closed, tconsts = pjit.trace_closed(lambda *xs: list(f(*xs)), [get_aval(a) for a in args])
    return closed_call_p.bind(*tconsts, *args, call_jaxpr=closed)


def call_impl(fun, *args, **params):
    """Apply ``fun`` (a ``WrappedFun`` or callable) to ``args`` (``params`` parameterize
    the call, not the function)."""
    del params
    return getattr(fun, "call_wrapped", fun)(*args)


call_p = CallPrimitive("call")
call_p.impl = call_impl
call = call_p.bind
