"""Transposing a closed jaxpr as a whole, for the rules of higher-order primitives.

``cond``, ``scan``/``while`` and ``checkpoint`` transpose their bodies into new bodies of
the same primitive: ``transpose_jaxpr`` traces the backward pass of a jaxpr with respect to
its linear inputs into a jaxpr of its own; ``match_aval`` keeps bodies type-stable.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.trace import get_aval
from kiln.interpreters import ad, lax_ops, staging
from kiln.interpreters.ad import Zero


def transpose_jaxpr(closed: ClosedJaxpr, linear: Sequence[bool],
                    ct_avals: Sequence[ShapedArray]) -> ClosedJaxpr:
    """Transpose: a jaxpr ``(*nonlinear_inputs, *cts) -> cts of the linear inputs``
    (zeros instantiated)."""
    in_avals = closed.in_avals
    nl_avals = [a for a, lin in zip(in_avals, linear) if not lin]
    n_nl = len(nl_avals)

    def fun(*args):
        nl, cts = args[:n_nl], args[n_nl:]
        it = iter(nl)
        primals = [ad.UndefinedPrimal(a) if lin else next(it) for a, lin in zip(in_avals, linear)]
        res = ad.backward_pass(closed.jaxpr, closed.consts, primals, list(cts))
        return [match_aval(ad.instantiate_zeros(r) if type(r) is Zero else r, a)
                for r, a, lin in zip(res, in_avals, linear) if lin]

    jaxpr, consts = staging.trace_to_jaxpr(fun, nl_avals + list(ct_avals))
    return ClosedJaxpr(jaxpr, consts)


def match_aval(x: Any, aval: ShapedArray) -> Any:
    """Cast ``x`` to exactly ``aval``'s dtype and weak type (for type-stable bodies)."""
    a = get_aval(x)
    if a.dtype == aval.dtype and a.weak_type == aval.weak_type:
        return x
    return lax_ops.convert_element_type(x, aval.dtype, aval.weak_type)
