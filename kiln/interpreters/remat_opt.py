"""The ``remat_opt`` primitive: a ``custom_vjp`` forward rule that dead-code elimination
can swap for the function itself (``defvjp(..., optimize_remat=True)``).

``remat_opt_p.bind(*consts, *args, num_consts=, num_res=, fwd_jaxpr=, fun_jaxpr_thunk=)``
computes ``fwd_jaxpr`` (a ``ClosedJaxpr`` over the operands) whose outputs are the
``num_res`` residuals the forward rule produces (those that are not simply one of its
arguments) followed by the primal outputs. ``fun_jaxpr_thunk()`` gives the custom
function's own ``ClosedJaxpr`` over ``args`` (memoized). As JAX's
(``jax._src.custom_derivatives``):

* eager / compiled: ``fwd_jaxpr``;
* batching and JVP: another ``remat_opt`` over the batched / JVP ``fwd_jaxpr``, whose
  ``fun_jaxpr_thunk`` gives the batched / JVP function (residuals: ``(res, res_dot)``,
  outputs ``(out, out_dot)``);
* no transpose ("does not support higher-order AD");
* dead-code elimination (:func:`_dce`, also run by the compiler before inlining and by
  ``checkpoint``'s partial evaluation on its forward pass): when some residual is used,
  ``fwd_jaxpr`` pruned to the used outputs; when no residual is used, the *function*
  (a ``closed_call`` of its jaxpr) instead of the forward rule. So under ``jit`` or
  ``checkpoint`` the forward rule runs only where its residuals are needed, and the
  primal output then comes from the function (``jit(lambda x: fwd(x)[0])`` is ``fun``).
"""
from __future__ import annotations

import functools

from kiln.core.jaxpr import (
    ClosedJaxpr,
    Jaxpr,
    eval_jaxpr,
    pp_param_rules,
    run_reference,
    sub_jaxprs,
)
from kiln.core.trace import Primitive
from kiln.interpreters import ad, batching, staging

__all__ = ["remat_opt_p", "has_remat_opt", "resolve_remat_opt"]

remat_opt_p = Primitive("remat_opt")
remat_opt_p.multiple_results = True


def _impl(*args, fwd_jaxpr: ClosedJaxpr, **_):
    return run_reference(fwd_jaxpr.jaxpr, fwd_jaxpr.consts, args)


remat_opt_p.impl = _impl
remat_opt_p.abstract_eval = lambda *avals, fwd_jaxpr, **_: fwd_jaxpr.out_avals
remat_opt_p.weak_type_rule = lambda *w, fwd_jaxpr, **_: [
    a.weak_type for a in fwd_jaxpr.out_avals]
pp_param_rules["remat_opt"] = lambda p: dict(num_consts=p["num_consts"],
                                             num_res=p["num_res"], fwd_jaxpr=p["fwd_jaxpr"])


def memoize(thunk):
    """``thunk`` computed once."""
    return functools.lru_cache(maxsize=None)(thunk)


def _closed(fun, avals) -> ClosedJaxpr:
    jaxpr, consts = staging.trace_to_jaxpr(fun, list(avals))
    closed, tconsts = staging.split_concrete_consts(jaxpr, consts)
    assert not tconsts, "a closed jaxpr's transformation closes over no tracer"
    return closed


# -- batching ------------------------------------------------------------------------------------

def _batch_closed(closed: ClosedJaxpr, batched, axis_data) -> ClosedJaxpr:
    """``closed`` vmapped over the operands marked in ``batched`` (batch axis at the
    front of operands and of every output)."""
    avals = [a.update(shape=(axis_data.size, *a.shape)) if b else a
             for a, b in zip(closed.in_avals, batched)]

    def fun(*xs):
        outs, _ = batching.batch_flat(
            lambda *ys: eval_jaxpr(closed.jaxpr, closed.consts, *ys), list(xs),
            [0 if b else None for b in batched], axis_data,
            [0] * len(closed.out_avals))
        return outs

    return _closed(fun, avals)


def _batch(axis_data, vals, dims, *, num_consts, num_res, fwd_jaxpr, fun_jaxpr_thunk):
    args = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    batched = [d is not None for d in dims]
    new_fwd = _batch_closed(fwd_jaxpr, batched, axis_data)

    @memoize
    def batched_fun():
        return _batch_closed(fun_jaxpr_thunk(), batched[num_consts:], axis_data)

    outs = remat_opt_p.bind(*args, num_consts=num_consts, num_res=num_res,
                            fwd_jaxpr=new_fwd, fun_jaxpr_thunk=batched_fun)
    return list(outs), [0] * len(outs)


batching.batch_rules[remat_opt_p] = _batch


# -- jvp -----------------------------------------------------------------------------------------

def _jvp_closed(closed: ClosedJaxpr) -> ClosedJaxpr:
    """``(*primals, *tangents) -> (*outs, *out_tangents)`` of ``closed``."""
    n = len(closed.in_avals)

    def fun(*xs):
        p_out, t_out = ad.jvp_flat(lambda *ps: eval_jaxpr(closed.jaxpr, closed.consts, *ps),
                                   list(xs[:n]), list(xs[n:]), instantiate=True)
        return list(p_out) + list(t_out)

    return _closed(fun, list(closed.in_avals)
                   + [ad.tangent_aval(a) for a in closed.in_avals])


def _jvp(primals, tangents, *, num_consts, num_res, fwd_jaxpr, fun_jaxpr_thunk):
    # Tangents are instantiated: the equation may be pruned to the function later.
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    nc, n = num_consts, len(primals)
    jvp = _jvp_closed(fwd_jaxpr)
    # Reorder the binders: (consts, consts_dot, args, args_dot) in, and
    # (res, res_dot, outs, outs_dot) out.
    order_in = [*range(nc), *range(n, n + nc), *range(nc, n), *range(n + nc, 2 * n)]
    m = len(fwd_jaxpr.out_avals)
    order_out = [*range(num_res), *range(m, m + num_res), *range(num_res, m),
                 *range(m + num_res, 2 * m)]
    j = jvp.jaxpr
    new_jaxpr = Jaxpr(j.constvars, [j.invars[i] for i in order_in],
                      [j.outvars[i] for i in order_out], j.eqns, j.effects, j.debug_info)
    new_fwd = ClosedJaxpr(new_jaxpr, jvp.consts)

    @memoize
    def jvp_fun():
        return _jvp_closed(fun_jaxpr_thunk())

    ins = list(primals) + list(tangents)
    outs = remat_opt_p.bind(*[ins[i] for i in order_in], num_consts=2 * nc,
                            num_res=2 * num_res, fwd_jaxpr=new_fwd, fun_jaxpr_thunk=jvp_fun)
    res, res_dot = outs[:num_res], outs[num_res:2 * num_res]
    k = m - num_res
    out, out_dot = outs[2 * num_res:2 * num_res + k], outs[2 * num_res + k:]
    return [*res, *out], [*res_dot, *out_dot]


ad.jvp_rules[remat_opt_p] = _jvp


def _transpose(cts, *args, **params):
    raise NotImplementedError(
        "remat optimization for custom_vjp does not support higher-order AD")


ad.transpose_rules[remat_opt_p] = _transpose


# -- dead-code elimination ----------------------------------------------------------------------

def _dce(used_outputs, eqn):
    from kiln.interpreters.calls import closed_call_p
    from kiln.interpreters.partial_eval import dce_jaxpr_consts
    p = eqn.params
    nres, nc = p["num_res"], p["num_consts"]
    used_res, used_prims = used_outputs[:nres], used_outputs[nres:]
    outvars = [v for u, v in zip(used_outputs, eqn.outvars) if u]
    if any(used_res):
        fwd = p["fwd_jaxpr"]
        body, used_consts, _ = dce_jaxpr_consts(fwd.jaxpr, used_outputs, instantiate=True)
        closed = ClosedJaxpr(body, [c for c, u in zip(fwd.consts, used_consts) if u])
        return eqn.replace(outvars=outvars, params=dict(p, fwd_jaxpr=closed,
                                                        num_res=sum(used_res)))
    # No residual is used: the function itself, not the forward rule.
    fun = p["fun_jaxpr_thunk"]()
    body, used_consts, _ = dce_jaxpr_consts(fun.jaxpr, used_prims, instantiate=True)
    closed = ClosedJaxpr(body, [c for c, u in zip(fun.consts, used_consts) if u])
    return eqn.replace(primitive=closed_call_p, invars=list(eqn.invars[nc:]),
                       outvars=outvars, params=dict(call_jaxpr=closed))


remat_opt_p.dce_rule = _dce
remat_opt_p.dce_always = True   # no residual at all: the function, even if all are used


def has_remat_opt(jaxpr) -> bool:
    """Whether ``jaxpr`` (an open ``Jaxpr``) has a ``remat_opt`` equation, at any depth."""
    for eqn in jaxpr.eqns:
        if eqn.primitive is remat_opt_p:
            return True
        if any(has_remat_opt(s) for s in sub_jaxprs(eqn.params)):
            return True
    return False


def resolve_remat_opt(closed: ClosedJaxpr) -> ClosedJaxpr:
    """``closed`` with its top-level ``remat_opt`` equations dead-code-eliminated by their
    rule (:func:`_dce`); unchanged when it has none. Nothing else is removed but dead
    equations."""
    if not has_remat_opt(closed.jaxpr):
        return closed
    from kiln.interpreters.partial_eval import dce_jaxpr_consts
    j = closed.jaxpr
    body, used_consts, _ = dce_jaxpr_consts(j, [True] * len(j.outvars), instantiate=True)
    return ClosedJaxpr(body, [c for c, u in zip(closed.consts, used_consts) if u])
