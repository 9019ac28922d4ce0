"""The ``custom_vmap_call`` primitive: a function whose batching is a user rule.

``custom_vmap_call_p.bind(*operands, call=closed_jaxpr, rule=flat_rule, name=...)`` applies
``call`` (a ``ClosedJaxpr`` over the operands) everywhere except under ``vmap``, where the
batching rule calls ``rule(axis_size, batched, operands) -> (outs, out_batched)`` with the
batched operands' batch axis moved to the front (``batched``: one bool per operand; the
rule's outputs that it marks batched carry the batch axis at the front). The rules work on
flat lists: :mod:`kiln.custom_batching` (``jax.custom_batching``) flattens the user's
pytrees around them.

Rules, as JAX's (``jax._src.custom_batching``):

* eager / compiled: ``call`` (the compiler inlines it);
* batching: ``rule``;
* JVP: another ``custom_vmap_call`` over the JVP of ``call`` (primals and tangents in and
  out), whose batching rule is the JVP of ``rule``: operands batched both as primal and
  as tangent reach ``rule`` as batched; operands batched on one side only are vmapped
  over by ordinary ``vmap`` around the JVP of ``rule`` called on the others;
* no transpose and no partial evaluation rule: reverse mode needs a ``custom_vjp`` around
  it (``grad`` alone fails as in JAX, "Linearization failed to produce known values for
  all output primals").
"""
from __future__ import annotations

from kiln.core.jaxpr import ClosedJaxpr, eval_jaxpr, pp_param_rules, run_reference
from kiln.core.trace import Primitive
from kiln.interpreters import ad, batching, staging

__all__ = ["custom_vmap_call_p", "trace_call"]

custom_vmap_call_p = Primitive("custom_vmap_call")
custom_vmap_call_p.multiple_results = True


def _impl(*args, call: ClosedJaxpr, **_):
    return run_reference(call.jaxpr, call.consts, args)


custom_vmap_call_p.impl = _impl
custom_vmap_call_p.abstract_eval = lambda *avals, call, **_: call.out_avals
custom_vmap_call_p.weak_type_rule = lambda *w, call, **_: [a.weak_type for a in call.out_avals]


def _pp(params):
    return dict(call=params["call"], rule=params["name"])


pp_param_rules["custom_vmap_call"] = _pp


def trace_call(fun, avals):
    """``fun`` (flat) traced at ``avals``: ``(closed_jaxpr, tracer_consts)``; bind with
    ``*tracer_consts, *args`` (closed-over tracers become leading operands)."""
    jaxpr, consts = staging.trace_to_jaxpr(fun, list(avals))
    return staging.split_concrete_consts(jaxpr, consts)


# -- batching ------------------------------------------------------------------------------------

def _batch(axis_data, vals, dims, *, call, rule, name):
    del call, name
    size = axis_data.size
    args = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    outs, out_batched = rule(size, [d is not None for d in dims], args)
    return list(outs), [0 if b else None for b in out_batched]


batching.batch_rules[custom_vmap_call_p] = _batch


# -- jvp -----------------------------------------------------------------------------------------

def _jvp_call(call: ClosedJaxpr) -> ClosedJaxpr:
    """``call``'s JVP as a closed jaxpr: ``(*primals, *tangents) -> (*p_out, *t_out)``."""
    n = len(call.in_avals)

    def fun(*xs):
        p_out, t_out = ad.jvp_flat(lambda *ps: eval_jaxpr(call.jaxpr, call.consts, *ps),
                                   list(xs[:n]), list(xs[n:]), instantiate=True)
        return list(p_out) + list(t_out)

    avals = list(call.in_avals) + [ad.tangent_aval(a) for a in call.in_avals]
    closed, tconsts = trace_call(fun, avals)
    assert not tconsts, "the jvp of a closed call closes over no tracer"
    return closed


def _jvp_of_rule(rule, n: int):
    """The batching rule of the JVP call: the JVP of ``rule`` (see the module's doc)."""

    def jvp_rule(axis_size, batched, args):
        ps, ts = list(args[:n]), list(args[n:])
        pb, tb = batched[:n], batched[n:]
        both = [a and b for a, b in zip(pb, tb)]
        extra = ([0 if a and not b else None for a, b in zip(pb, tb)]
                 + [0 if b and not a else None for a, b in zip(pb, tb)])
        store = {}

        def primal_fun(*xs):
            outs, out_batched = rule(axis_size, list(both), list(xs))
            store["batched"] = list(out_batched)
            return list(outs)

        def jvp_fun(*xs):
            p_out, t_out = ad.jvp_flat(primal_fun, list(xs[:n]), list(xs[n:]),
                                       instantiate=True)
            return list(p_out) + list(t_out)

        if any(d is not None for d in extra):
            outs, out_dims = batching.batch_flat(jvp_fun, ps + ts, extra,
                                                 batching.AxisData(None, axis_size))
        else:
            outs = jvp_fun(*ps, *ts)
            out_dims = [None] * len(outs)
        outs = [o if d is None else batching.moveaxis(o, d, 0) for o, d in zip(outs, out_dims)]
        m = len(outs) // 2
        rule_batched = store["batched"]
        out_batched = ([b or d is not None for b, d in zip(rule_batched, out_dims[:m])]
                       + [b or d is not None for b, d in zip(rule_batched, out_dims[m:])])
        return outs, out_batched

    return jvp_rule


def _jvp(primals, tangents, *, call, rule, name):
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    outs = custom_vmap_call_p.bind(*primals, *tangents, call=_jvp_call(call),
                                   rule=_jvp_of_rule(rule, len(primals)), name=f"jvp({name})")
    m = len(outs) // 2
    return list(outs[:m]), list(outs[m:])


ad.jvp_rules[custom_vmap_call_p] = _jvp
