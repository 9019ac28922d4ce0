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


def saveable(policy, eqn) -> bool:
    """Whether ``policy`` lets the outputs of ``eqn`` be saved as residuals (JAX's
    answers: a true bool, ``Saveable`` or an ``Offloadable``; ``Recompute``/false: not).
    No policy: nothing is saved."""
    if policy is None:
        return False
    ans = policy(eqn.primitive, *[v.aval for v in eqn.invars], **eqn.params)
    if isinstance(ans, bool) or ans is None:
        return bool(ans)
    return repr(ans) != "Recompute"


def _saved_plan(jaxpr, n_out: int, policy):
    """For the known jaxpr of a checkpoint (outputs: ``n_out`` primal outputs, then the
    residuals): which equations the backward pass replays and which values it takes as
    saved instead. Walking back from the residuals, an equation the policy saves gives its
    outputs (``saved``, in program order) and is not replayed; any other equation that is
    needed, or that has effects, is replayed (``replay``: equation indices)."""
    from kiln.core.jaxpr import Var
    from kiln.interpreters.staging import has_effects
    live = {v for v in jaxpr.outvars[n_out:] if isinstance(v, Var)}
    save_eqn = [saveable(policy, e) for e in jaxpr.eqns]
    # Values the backward pass has without saving anything: the inputs and what it
    # recomputes anyway (outputs of equations the policy does not save). An effect the
    # policy saves is replayed only when all of its operands are such values (JAX's rule
    # for debug callbacks: print again, but never recompute more to do so).
    at_hand = set(jaxpr.invars) | set(jaxpr.constvars)
    for e, keep in zip(jaxpr.eqns, save_eqn):
        if not keep:
            at_hand.update(e.outvars)
    replay, saved = set(), []
    for i in range(len(jaxpr.eqns) - 1, -1, -1):
        e = jaxpr.eqns[i]
        needed = [v for v in e.outvars if v in live]
        effect = has_effects(e)
        if save_eqn[i] and not (effect and all(v in at_hand for v in e.invars
                                               if isinstance(v, Var))):
            saved = needed + saved
            continue
        if needed or effect:
            replay.add(i)
            live.update(v for v in e.invars if isinstance(v, Var))
    return replay, saved


def _prune_known_inputs(jaxpr, consts, n_known: int):
    """``jaxpr`` without dead equations and without those of its first ``n_known``
    inputs (known values: residuals of the forward pass) that nothing uses, so they are
    not saved. Returns ``(jaxpr, consts, kept)``, ``kept`` saying which of them stay."""
    from kiln.core.jaxpr import Jaxpr, Var
    j, used_consts = staging.dce_jaxpr_consts(jaxpr)
    consts = [c for c, u in zip(consts, used_consts) if u]
    used = {v for e in j.eqns for v in e.invars if isinstance(v, Var)}
    used.update(v for v in j.outvars if isinstance(v, Var))
    kept = [v in used for v in j.invars[:n_known]]
    out = Jaxpr(j.constvars, [v for v, k in zip(j.invars[:n_known], kept) if k]
                + j.invars[n_known:], j.outvars, j.eqns, j.effects, j.debug_info)
    return out, consts, kept


def _remat_partial_eval(trace, args, params):
    """Known part: the primal outputs, and the values the policy saves (none without a
    policy). Unknown part: the forward pass recomputed from the known inputs and the saved
    values inside the linear jaxpr (only what the residuals need; effects replayed unless
    the policy saves them)."""
    from kiln.core.jaxpr import Jaxpr, Literal
    from kiln.interpreters.partial_eval import dce_jaxpr
    from kiln.interpreters.pjit import partial_eval_jaxpr
    from kiln.interpreters.remat_opt import has_remat_opt
    jaxpr = params["jaxpr"]
    unknowns = [trace.is_own(x) for x in args]
    from kiln.lax.control.common import has_io_callback
    if any(unknowns) and has_io_callback(jaxpr):
        # Recomputing the forward pass would run the IO callback twice (JAX refuses too;
        # debug prints and pure callbacks are replayed).
        raise NotImplementedError("Effects not supported in partial-eval of `checkpoint`")
    known, unknown, out_unk, num_res = partial_eval_jaxpr(jaxpr, unknowns)
    kj = known.jaxpr
    n_known_out = len(kj.outvars) - num_res
    replay, saved_vars = _saved_plan(kj, n_known_out, params["policy"])
    fwd = Jaxpr(kj.constvars, kj.invars, [*kj.outvars[:n_known_out], *saved_vars], kj.eqns,
                kj.effects, kj.debug_info)
    if has_remat_opt(fwd):
        # As JAX's forward pass (dead-code eliminated): a custom_vjp forward rule with
        # ``optimize_remat`` whose residuals are not saved runs as its function.
        fwd, _ = dce_jaxpr(fwd, [True] * len(fwd.outvars), instantiate=True)
    known_args = [x for x, u in zip(args, unknowns) if not u]
    with set_current_trace(trace.parent):
        kouts = eval_jaxpr(fwd, known.consts, *known_args)
    known_outs, saved = kouts[:n_known_out], kouts[n_known_out:]
    unknown_args = [x for x, u in zip(args, unknowns) if u]
    n_k, n_s = len(known_args), len(saved)

    def recompute(*xs):
        env = dict(zip(kj.constvars, known.consts))
        env.update(zip(kj.invars, xs[:n_k]))
        env.update(zip(saved_vars, xs[n_k:n_k + n_s]))
        for i, e in enumerate(kj.eqns):
            if i not in replay:
                continue
            ins = [a.val if isinstance(a, Literal) else env[a] for a in e.invars]
            outs = e.primitive.bind(*ins, **e.params)
            env.update(zip(e.outvars, outs if e.primitive.multiple_results else [outs]))
        res = [a.val if isinstance(a, Literal) else env[a] for a in kj.outvars[n_known_out:]]
        return eval_jaxpr(unknown.jaxpr, unknown.consts, *res, *xs[n_k + n_s:])

    rec_avals = ([get_aval(x) for x in known_args] + [v.aval for v in saved_vars]
                 + [x.aval for x in unknown_args])
    rec_jaxpr, rec_consts = staging.trace_to_jaxpr(recompute, rec_avals)
    rec_jaxpr, rec_consts, kept = _prune_known_inputs(rec_jaxpr, rec_consts, n_k + n_s)
    closed, tconsts = staging.split_concrete_consts(rec_jaxpr, rec_consts)
    known_args = [x for x, keep in zip([*known_args, *saved], kept) if keep]
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
