"""``checkpoint``/``remat``'s primitive and its interpreter rules.

``remat_p`` (named ``checkpoint`` in jaxprs, as in JAX) applies a ``ClosedJaxpr`` (its
``jaxpr`` parameter) whose intermediates the backward pass recomputes instead of saving:
its partial-evaluation rule keeps only the primal outputs on the known side and stages
the whole forward pass again into the linear jaxpr. :func:`kiln.checkpoint` (in
:mod:`kiln.custom_derivatives`) binds it.
"""
from __future__ import annotations

from kiln import dtypes
from kiln.core.jaxpr import eval_jaxpr
from kiln.core.trace import Primitive, get_aval, set_current_trace
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero
from kiln.interpreters.custom_calls import _call_impl, _trace_fun
from kiln.interpreters.transpose_jaxpr import transpose_jaxpr

__all__ = ["remat_p"]


remat_p = Primitive("checkpoint")
remat_p.multiple_results = True
remat_p.impl = lambda *args, jaxpr, prevent_cse, differentiated, policy: _call_impl(
    *args, call_jaxpr=jaxpr)
remat_p.abstract_eval = lambda *avals, jaxpr, **_: jaxpr.out_avals
remat_p.weak_type_rule = lambda *w, jaxpr, **_: [a.weak_type for a in jaxpr.out_avals]


def _remat_jvp(primals, tangents, *, jaxpr, prevent_cse, differentiated, policy):
    nonzero = [type(t) is not Zero for t in tangents]
    n = len(primals)

    def fun(*args):
        ps = list(args[:n])
        it = iter(args[n:])
        ts = [next(it) if nz else Zero(ad.tangent_aval(get_aval(p)))
              for p, nz in zip(ps, nonzero)]
        p_out, t_out = ad.jvp_flat(lambda *xs: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *xs), ps, ts)
        return list(p_out) + list(t_out)

    args = list(primals) + [t for t in tangents if type(t) is not Zero]
    closed, tconsts = _trace_fun(fun, args)
    outs = remat_p.bind(*tconsts, *args, jaxpr=closed, prevent_cse=prevent_cse,
                        differentiated=True, policy=policy)
    k = len(outs) // 2
    # integer/boolean outputs have symbolic-zero (float0) tangents, as under jit
    t_out = [Zero(get_aval(t)) if get_aval(t).dtype == dtypes.float0 else t
             for t in outs[k:]]
    return outs[:k], t_out


ad.jvp_rules[remat_p] = _remat_jvp


def _remat_partial_eval(trace, args, params):
    """Known part: compute only the primal outputs. Unknown part: recompute the forward
    pass from the (known) inputs inside the linear jaxpr, so no intermediate is saved."""
    from kiln.interpreters.pjit import partial_eval_jaxpr
    jaxpr = params["jaxpr"]
    unknowns = [trace.is_own(x) for x in args]
    known, unknown, out_unk, num_res = partial_eval_jaxpr(jaxpr, unknowns)
    known_args = [x for x, u in zip(args, unknowns) if not u]
    with set_current_trace(trace.parent):
        kouts = eval_jaxpr(known.jaxpr, known.consts, *known_args)
    n_known_out = len(kouts) - num_res
    known_outs = kouts[:n_known_out]
    unknown_args = [x for x, u in zip(args, unknowns) if u]
    n_k = len(known_args)

    def recompute(*xs):
        ka, ua = xs[:n_k], xs[n_k:]
        res = eval_jaxpr(known.jaxpr, known.consts, *ka)[n_known_out:]
        return eval_jaxpr(unknown.jaxpr, unknown.consts, *res, *ua)

    rec_avals = [get_aval(x) for x in known_args] + [x.aval for x in unknown_args]
    rec_jaxpr, rec_consts = staging.trace_to_jaxpr(recompute, rec_avals)
    closed, tconsts = staging.split_concrete_consts(rec_jaxpr, rec_consts)
    uouts = trace.stage(remat_p, [*tconsts, *known_args, *unknown_args],
                        dict(jaxpr=closed, prevent_cse=params["prevent_cse"],
                             differentiated=True, policy=params["policy"]),
                        out_avals=closed.out_avals)
    ki, ui = iter(known_outs), iter(uouts)
    return [next(ui) if u else next(ki) for u in out_unk]


staging.partial_eval_rules[remat_p] = _remat_partial_eval


def _remat_transpose(cts, *args, jaxpr, prevent_cse, differentiated, policy):
    # The transposed body stays inside a checkpoint equation, so the recomputed forward
    # pass remains a separate region of the program.
    linear = [ad.is_undefined_primal(x) for x in args]
    ct_avals = jaxpr.out_avals
    cts = [ad.instantiate_zeros(c) if type(c) is Zero else c for c in cts]
    t = transpose_jaxpr(jaxpr, linear, ct_avals)
    nonlin = [x for x, lin in zip(args, linear) if not lin]
    outs = remat_p.bind(*nonlin, *cts, jaxpr=t, prevent_cse=prevent_cse,
                        differentiated=True, policy=policy)
    it = iter(outs)
    return [next(it) if lin else None for lin in linear]


ad.transpose_rules[remat_p] = _remat_transpose


def _remat_batch(axis_data, vals, dims, *, jaxpr, prevent_cse, differentiated, policy):
    size = axis_data.size

    def fun(*xs):
        outs, odims = batching.batch_flat(
            lambda *a: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *a), list(xs), list(dims), axis_data)
        return [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]

    closed, tconsts = _trace_fun(fun, vals)
    outs = remat_p.bind(*tconsts, *vals, jaxpr=closed, prevent_cse=prevent_cse,
                        differentiated=differentiated, policy=policy)
    return outs, [0] * len(outs)


batching.batch_rules[remat_p] = _remat_batch
