"""The custom-derivative call primitives and their interpreter rules.

``custom_jvp_call`` and ``custom_vjp_call`` are the equations a staging trace records for a
``custom_jvp``/``custom_vjp`` function (:mod:`kiln.custom_derivatives` is the user-facing
API that reaches the traces); ``custom_lin`` is the linear tangent map of a ``custom_vjp``
function under differentiation, transposed by calling its ``bwd``. Each primitive sits
here beside its JVP, transpose, batching and partial-evaluation rules, and beside the
helpers the traces call (:func:`stage_custom_jvp`, :func:`batch_custom_jvp`,
:func:`bind_custom_lin`, ...), so the interpreters find them in their own layer.

Flat callables (as :mod:`kiln.custom_derivatives` describes them): ``fun(*args) -> outs``,
``jvp(primals, tangents) -> (primals_out, tangents_out)``,
``fwd(primals, perturbed=None) -> (primals_out, residuals)``,
``bwd(residuals, cts_out) -> cts_in``.
"""
from __future__ import annotations

import functools

from kiln.array import Array
from kiln.core.jaxpr import ClosedJaxpr, eval_jaxpr, pp_param_rules, run_reference
from kiln.core.trace import (
    Primitive,
    Tracer,
    current_trace,
    custom_jvp_call,
    custom_vjp_call,
    get_aval,
    set_current_trace,
)
from kiln.interpreters import ad, batching, custom_rules, lax_ops, pjit, staging
from kiln.interpreters.ad import Zero

__all__ = ["SymbolicZero", "batch_custom_jvp", "batch_custom_vjp", "bind_custom_lin",
           "custom_jvp_call_p", "custom_lin_p", "custom_vjp_call_p", "stage_custom_jvp",
           "stage_custom_vjp"]


class SymbolicZero:
    """A zero tangent (or cotangent) that a ``symbolic_zeros=True`` custom rule sees in
    place of an array; a rule may also return one. Its aval's attributes (``shape``,
    ``dtype``, ``ndim``, ...) read through, as in JAX. It is a pytree leaf."""

    def __init__(self, aval):
        self.aval = aval

    def __getattr__(self, name):
        if name == "aval":              # not yet set (copy/pickle)
            raise AttributeError(name)
        try:
            return getattr(self.aval, name)
        except AttributeError:
            raise AttributeError(f"SymbolicZero has no attribute {name}") from None

    def __repr__(self):
        return f"SymbolicZero({self.aval.str_short()})"


def _zeros_from_aval(aval):
    return ad.zeros_like_aval(aval)     # an extended dtype's zero is its rules' zero


# ----------------------------------------------------------------------------------------------
# custom_lin: the linear tangent map of a custom_vjp function.

custom_lin_p = Primitive("custom_lin")
custom_lin_p.multiple_results = True


def _custom_lin_impl(*args, **params):
    raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


custom_lin_p.impl = _custom_lin_impl
custom_lin_p.abstract_eval = lambda *avals, out_avals, **_: list(out_avals)
custom_lin_p.weak_type_rule = lambda *w, out_avals, **_: [a.weak_type for a in out_avals]


def _custom_lin_transpose(cts, *args, num_res, bwd, out_avals, in_avals, symbolic_zeros):
    res = args[:num_res]
    cts_in = bwd(list(res), list(cts))
    return [None] * num_res + list(cts_in)


ad.transpose_rules[custom_lin_p] = _custom_lin_transpose
# The user's bwd runs even when every output cotangent is zero (it gets zeros), as in JAX.
ad.zero_cotangent_transposes[custom_lin_p] = lambda eqn: True


def bind_custom_lin(res, tangents, *, bwd, out_avals, in_avals, symbolic_zeros):
    """Bind ``custom_lin`` for residuals ``res`` of a forward rule.

    Residuals that are not arrays or tracers (Python scalars and other objects, such as
    the perturbation flags that Equinox keeps) reach ``bwd`` exactly as ``fwd`` returned
    them, as in JAX, where the forward rule's outputs are passed on untraced: they are
    closed over by the rule instead of becoming operands (which would turn them into
    arrays)."""
    res = list(res)
    dyn = [i for i, r in enumerate(res) if isinstance(r, (Tracer, Array))]
    if len(dyn) != len(res):
        static = {i: r for i, r in enumerate(res) if not isinstance(r, (Tracer, Array))}
        n_all = len(res)
        inner = bwd

        def bwd(dyn_res, cts):
            it = iter(dyn_res)
            return inner([static[i] if i in static else next(it) for i in range(n_all)], cts)
        _copy_display(bwd, inner)
        res = [res[i] for i in dyn]
    return custom_lin_p.bind(*res, *tangents, num_res=len(res), bwd=bwd,
                             out_avals=tuple(out_avals), in_avals=tuple(in_avals),
                             symbolic_zeros=symbolic_zeros)


def _custom_lin_jvp(primals, tangents, **params):
    raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


ad.jvp_rules[custom_lin_p] = _custom_lin_jvp


def _custom_lin_batch(axis_data, vals, dims, *, num_res, bwd, out_avals, in_avals,
                      symbolic_zeros):
    size = axis_data.size
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    res_avals = [get_aval(v) for v in vals[:num_res]]

    def batched_bwd(res, cts):
        def f(*xs):
            r, c = list(xs[:num_res]), list(xs[num_res:])
            out = bwd(r, c)
            return [_zeros_from_aval(o.aval) if type(o) is Zero else o for o in out]
        outs, odims = batching.batch_flat(f, list(res) + list(cts), [0] * (len(res) + len(cts)),
                                          axis_data)
        return [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]

    b_out = tuple(a.update(shape=(size,) + a.shape) for a in out_avals)
    b_in = tuple(a.update(shape=(size,) + a.shape) for a in in_avals)
    del res_avals
    outs = custom_lin_p.bind(*vals, num_res=num_res, bwd=batched_bwd, out_avals=b_out,
                             in_avals=b_in, symbolic_zeros=symbolic_zeros)
    return outs, [0] * len(outs)


batching.batch_rules[custom_lin_p] = _custom_lin_batch


# ----------------------------------------------------------------------------------------------
# Staged custom_jvp_call / custom_vjp_call equations.

class _CustomJVPCallPrimitive(Primitive):
    """``custom_jvp_call``: also re-bindable as JAX 0.10 re-binds it, from
    :meth:`get_bind_params`' ``subfuns=(fun, jvp)`` (``lu.WrappedFun`` s: ``fun`` applies
    the function; ``jvp(*primals, *tangents)`` returns ``(*primals_out, *tangents_out)``,
    zeros as :class:`SymbolicZero`)."""

    def get_bind_params(self, params):
        from kiln.extend.linear_util import wrap_init
        new = dict(params)
        call_jaxpr = new.pop("call_jaxpr")
        new.pop("num_consts")
        jvp_fun = new.pop("jvp_jaxpr_fun")

        def fun(*xs):
            return eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *xs)

        def jvp(*xs):
            n = len(xs) // 2
            ts = [Zero(t.aval) if type(t) is SymbolicZero else t for t in xs[n:]]
            p_out, t_out = jvp_fun(list(xs[:n]), ts)
            return [*p_out, *[SymbolicZero(t.aval) if type(t) is Zero else t for t in t_out]]

        new["subfuns"] = (wrap_init(fun), wrap_init(jvp))
        return new

    def bind(self, *args, **params):
        if "subfuns" not in params:
            return super().bind(*args, **params)
        fun, jvp = params.pop("subfuns")
        symbolic = params.pop("symbolic_zeros", False)

        def flat_fun(*xs):
            return list(fun.call_wrapped(*xs))

        def flat_jvp(primals, tangents):
            ts = [SymbolicZero(t.aval) if type(t) is Zero else t for t in tangents]
            outs = list(jvp.call_wrapped(*primals, *ts))
            k = len(outs) // 2
            return outs[:k], [Zero(t.aval) if type(t) is SymbolicZero else t for t in outs[k:]]

        return current_trace().process_custom_jvp_call(flat_fun, flat_jvp, list(args),
                                                       symbolic_zeros=symbolic)


custom_jvp_call_p = _CustomJVPCallPrimitive("custom_jvp_call")
custom_jvp_call_p.multiple_results = True
custom_vjp_call_p = Primitive("custom_vjp_call")
custom_vjp_call_p.multiple_results = True


def _fn_name(f) -> str:
    f = getattr(f, "func", f)          # functools.partial
    return getattr(f, "__name__", type(f).__name__)


def _set_display(fn, **shown):
    """Attach what a staged equation prints (JAX prints the user's function names, not our
    internal wrappers) to the callable that is stored in the equation's params."""
    fn._kiln_display = shown
    return fn


def _copy_display(dst, src):
    shown = getattr(src, "_kiln_display", None)
    if shown is not None:
        dst._kiln_display = shown
    return dst


def _pp_custom_jvp(params):
    shown = dict(getattr(params["jvp_jaxpr_fun"], "_kiln_display", {}))
    shown.update(call_jaxpr=params["call_jaxpr"], symbolic_zeros=params["symbolic_zeros"])
    return shown


def _pp_custom_vjp(params):
    shown = dict(getattr(params["fwd_jaxpr_thunk"], "_kiln_display", {}))
    shown.update(call_jaxpr=params["call_jaxpr"], symbolic_zeros=params["symbolic_zeros"])
    return shown


def _pp_custom_lin(params):
    # As JAX prints it: the user's bwd rule by name, which tangent operands are symbolic
    # zeros (none: kiln instantiates them before binding), no avals.
    bwd = params["bwd"]
    return dict(bwd=getattr(bwd, "_kiln_display", {}).get("bwd", bwd),
                in_zeros=[False] * len(params["in_avals"]), num_res=params["num_res"],
                symbolic_zeros=params["symbolic_zeros"])


pp_param_rules["custom_jvp_call"] = _pp_custom_jvp
pp_param_rules["custom_lin"] = _pp_custom_lin
pp_param_rules["custom_vjp_call"] = _pp_custom_vjp


def _call_impl(*args, call_jaxpr: ClosedJaxpr, **_):
    return run_reference(call_jaxpr.jaxpr, call_jaxpr.consts, args)


for _p in (custom_jvp_call_p, custom_vjp_call_p):
    _p.impl = _call_impl
    _p.abstract_eval = lambda *avals, call_jaxpr, **_: call_jaxpr.out_avals
    _p.weak_type_rule = lambda *w, call_jaxpr, **_: [a.weak_type for a in call_jaxpr.out_avals]


def _trace_fun(fun, args):
    jaxpr, consts = staging.trace_to_jaxpr(fun, [get_aval(a) for a in args])
    return staging.split_concrete_consts(jaxpr, consts)


def stage_custom_jvp(trace, fun, jvp, args, symbolic_zeros):
    with set_current_trace(trace):
        closed, tconsts = _trace_fun(fun, args)
    nc = len(tconsts)

    def jvp_c(primals, tangents):
        return jvp(list(primals[nc:]), list(tangents[nc:]))
    _copy_display(jvp_c, jvp)

    return trace.stage(custom_jvp_call_p, [*tconsts, *args],
                       dict(call_jaxpr=closed, jvp_jaxpr_fun=jvp_c, num_consts=nc,
                            symbolic_zeros=symbolic_zeros),
                       out_avals=closed.out_avals)


def _custom_jvp_call_jvp(primals, tangents, *, call_jaxpr, jvp_jaxpr_fun, num_consts,
                         symbolic_zeros):
    if not symbolic_zeros:
        tangents = [ad.instantiate_zeros(t) for t in tangents]
    return jvp_jaxpr_fun(list(primals), list(tangents))


ad.jvp_rules[custom_jvp_call_p] = _custom_jvp_call_jvp


def _custom_jvp_call_dce(used_outputs, eqn):
    """``eqn`` computing only the used outputs: the function's jaxpr pruned, the rule's
    outputs filtered (its operands are kept)."""
    from kiln.interpreters.partial_eval import dce_jaxpr
    call = eqn.params["call_jaxpr"]
    body, _ = dce_jaxpr(call.jaxpr, used_outputs, instantiate=True)
    jvp = eqn.params["jvp_jaxpr_fun"]

    def pruned_jvp(primals, tangents):
        p_out, t_out = jvp(primals, tangents)
        return ([p for p, u in zip(p_out, used_outputs) if u],
                [t for t, u in zip(t_out, used_outputs) if u])

    params = dict(eqn.params, call_jaxpr=ClosedJaxpr(body, call.consts),
                  jvp_jaxpr_fun=_copy_display(pruned_jvp, jvp))
    return eqn.replace(outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
                       params=params)


custom_jvp_call_p.dce_rule = _custom_jvp_call_dce


def _custom_vjp_call_dce(used_outputs, eqn):
    """``eqn`` computing only the used outputs (JAX's rule): the function's jaxpr pruned,
    the forward rule's primal outputs filtered, and the backward rule given zero
    cotangents for the outputs that are gone (its operands are kept)."""
    from kiln.interpreters.partial_eval import dce_jaxpr
    call = eqn.params["call_jaxpr"]
    body, _ = dce_jaxpr(call.jaxpr, used_outputs, instantiate=True)
    fwd, bwd = eqn.params["fwd_jaxpr_thunk"], eqn.params["bwd"]
    ct_avals = [ad.tangent_aval(a) for a in call.out_avals]

    def pruned_fwd(primals, perturbed=None):
        p_out, res = fwd(primals, perturbed)
        return [p for p, u in zip(p_out, used_outputs) if u], res

    def pruned_bwd(res, cts):
        it = iter(cts)
        return bwd(res, [next(it) if u else Zero(a) for u, a in zip(used_outputs, ct_avals)])

    params = dict(eqn.params, call_jaxpr=ClosedJaxpr(body, call.consts),
                  fwd_jaxpr_thunk=_copy_display(pruned_fwd, fwd),
                  bwd=_copy_display(pruned_bwd, bwd))
    return eqn.replace(outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
                       params=params)


custom_vjp_call_p.dce_rule = _custom_vjp_call_dce


def _custom_jvp_call_transpose(cts, *args, call_jaxpr, **_):
    # Linear use (a JVP rule applying the function to its tangent, ``f(x_dot)``): as JAX,
    # transpose the function itself (the custom rule plays no part in reverse mode).
    return pjit._transpose_rule(cts, *args, jaxpr=call_jaxpr, name="custom_jvp_call")


ad.transpose_rules[custom_jvp_call_p] = _custom_jvp_call_transpose


def _custom_jvp_call_batch(axis_data, vals, dims, *, call_jaxpr, jvp_jaxpr_fun, num_consts,
                           symbolic_zeros):
    fun = functools.partial(eval_jaxpr, call_jaxpr.jaxpr, call_jaxpr.consts)
    out_dims: list = []
    bfun, bjvp, bvals = _batched_jvp_callables(axis_data, fun, jvp_jaxpr_fun, vals, dims,
                                               out_dims=out_dims)
    with set_current_trace(current_trace()):
        closed, tconsts = _trace_fun(bfun, bvals)
    outs = custom_jvp_call_p.bind(*tconsts, *bvals, call_jaxpr=closed,
                                  jvp_jaxpr_fun=_copy_display(_drop_consts(bjvp, len(tconsts)),
                                                              jvp_jaxpr_fun),
                                  num_consts=len(tconsts), symbolic_zeros=symbolic_zeros)
    return outs, list(out_dims)


def _drop_consts(jvp, nc):
    if nc == 0:
        return jvp
    return lambda p, t: jvp(list(p[nc:]), list(t[nc:]))


batching.batch_rules[custom_jvp_call_p] = _custom_jvp_call_batch


def _batcher(axis_data, trace):
    """``batch(fun, vals, dims) -> (outs, out_dims)``: a new batching trace, or ``trace``
    itself (a call of a ``vmap`` whose function may close over that vmap's values)."""
    if trace is None:
        return lambda f, vals, dims: batching.batch_flat(f, vals, dims, axis_data)
    return lambda f, vals, dims: batching.batch_flat_in(trace, f, vals, dims)


def _batched_jvp_callables(axis_data, fun, jvp, vals, dims, trace=None, out_dims=None):
    size = axis_data.size
    batch = _batcher(axis_data, trace)
    bvals = [batching.bdim_at_front(v, d, size) if d is not None else v
             for v, d in zip(vals, dims)]
    bdims = [None if d is None else 0 for d in dims]

    # No operand batched (the call is batched only for a collective over the axis inside
    # it): outputs the function leaves unbatched stay unbatched, as JAX's batched jaxpr.
    keep = out_dims is not None and all(d is None for d in dims)

    def to_dims(outs, odims, want=None):
        if not keep:
            return [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]
        want = odims if want is None else want
        return [o if w is None and d is None else batching.matchaxis(o, d, 0, size)
                for o, d, w in zip(outs, odims, want)]

    def bfun(*xs):
        outs, odims = batch(fun, list(xs), bdims)
        outs = to_dims(outs, odims)
        if out_dims is not None:
            out_dims[:] = [None if keep and d is None else 0 for d in odims]
        return outs

    def bjvp(primals, tangents):
        n = len(primals)
        # Symbolic zeros (a ``symbolic_zeros=True`` rule) stay symbolic: the rule sees a
        # zero of one element's type, not a batched array of zeros (as JAX).
        zero = [type(t) is Zero for t in tangents]
        nz = [(p, t, d) for p, t, d, z in zip(primals, tangents, bdims, zero) if not z]
        elt_avals = [_unbatched_aval(get_aval(p), d) for p, d in zip(primals, bdims)]

        def f(*xs):
            it = iter(xs[n:])
            ts = [Zero(ad.tangent_aval(a)) if z else next(it)
                  for a, z in zip(elt_avals, zero)]
            p_out, t_out = jvp(list(xs[:n]), ts)
            out_zero[:] = [type(t) is Zero for t in t_out]
            return list(p_out) + [ad.instantiate_zeros(t) for t in t_out]
        out_zero: list = []
        tdims = [d if get_aval(t).ndim == get_aval(p).ndim else None for p, t, d in nz]
        outs, odims = batch(f, list(primals) + [t for _, t, _ in nz], bdims + tdims)
        outs = to_dims(outs, odims, None if out_dims is None else out_dims * 2)
        k = len(outs) // 2
        # A zero tangent the rule returned stays a symbolic zero (as JAX's batched rule),
        # so a symbolic_zeros rule fed by it sees a SymbolicZero, not batched zeros.
        t_out = [Zero(ad.tangent_aval(get_aval(p))) if z else t
                 for p, t, z in zip(outs[:k], outs[k:], out_zero)]
        return outs[:k], t_out

    return bfun, bjvp, bvals


def _unbatched_aval(aval, bdim):
    if bdim is None:
        return aval
    return aval.update(shape=aval.shape[:bdim] + aval.shape[bdim + 1:])


def batch_custom_jvp(trace, fun, jvp, vals, dims, symbolic_zeros):
    bfun, bjvp, bvals = _batched_jvp_callables(trace.axis_data, fun, jvp, vals, dims, trace)
    _copy_display(bjvp, jvp)
    outs = custom_jvp_call(trace.parent, bfun, bjvp, bvals, symbolic_zeros=symbolic_zeros)
    return [batching.BatchTracer(trace, o, 0) for o in outs]


def stage_custom_vjp(trace, fun, fwd, bwd, args, out_trees, symbolic_zeros):
    with set_current_trace(trace):
        closed, tconsts = _trace_fun(fun, args)
    nc = len(tconsts)

    def fwd_c(primals, perturbed=None):
        return fwd(list(primals[nc:]), None if perturbed is None else list(perturbed[nc:]))
    _copy_display(fwd_c, fwd)

    def bwd_c(res, cts):
        return [None] * 0 + list(bwd(res, cts))
    _copy_display(bwd_c, bwd)

    return trace.stage(custom_vjp_call_p, [*tconsts, *args],
                       dict(call_jaxpr=closed, fwd_jaxpr_thunk=fwd_c, bwd=bwd_c, num_consts=nc,
                            symbolic_zeros=symbolic_zeros),
                       out_avals=closed.out_avals)


def _custom_vjp_call_jvp(primals, tangents, *, call_jaxpr, fwd_jaxpr_thunk, bwd, num_consts,
                         symbolic_zeros):
    nc = num_consts
    perturbed = [type(t) is not Zero for t in tangents]
    p_out, res = fwd_jaxpr_thunk(list(primals), perturbed)
    tangents = [ad.instantiate_zeros(t) for t in tangents[nc:]]
    in_avals = [get_aval(p) for p in primals[nc:]]
    out_avals = [ad.tangent_aval(get_aval(p)) for p in p_out]
    t_out = bind_custom_lin(res, tangents, bwd=bwd, out_avals=out_avals, in_avals=in_avals,
                            symbolic_zeros=symbolic_zeros)
    return p_out, t_out


ad.jvp_rules[custom_vjp_call_p] = _custom_vjp_call_jvp


def _batched_vjp_callables(axis_data, fun, fwd, bwd, vals, dims, trace=None,
                           out_dims=None):
    size = axis_data.size
    batch = _batcher(axis_data, trace)
    bvals = [batching.bdim_at_front(v, d, size) if d is not None else v
             for v, d in zip(vals, dims)]
    bdims = [None if d is None else 0 for d in dims]
    res_dims = {}
    # As in _batched_jvp_callables: with no operand batched, unbatched outputs stay so.
    keep = out_dims is not None and all(d is None for d in dims)

    def bfun(*xs):
        outs, odims = batch(fun, list(xs), bdims)
        if out_dims is not None:
            out_dims[:] = [None if keep and d is None else 0 for d in odims]
        return [o if keep and d is None else batching.matchaxis(o, d, 0, size)
                for o, d in zip(outs, odims)]

    def bfwd(primals, perturbed=None):
        cell = {}

        def f(*xs):
            p_out, res = fwd(list(xs), perturbed)
            cell["n"] = len(p_out)
            return list(p_out) + list(res)
        outs, odims = batch(f, list(primals), bdims)
        k = cell["n"]
        want = list(out_dims) if keep else [0] * k
        outs = [o if i < k and want[i] is None and d is None
                else batching.matchaxis(o, d, 0, size)
                for i, (o, d) in enumerate(zip(outs, odims))]
        res_dims["n"] = len(outs) - k
        return outs[:k], outs[k:]

    def bbwd(res, cts):
        n = len(res)
        # Zero cotangents stay symbolic (one element's type) for a symbolic_zeros rule.
        zero = [type(c) is Zero for c in cts]
        nz = [c for c, z in zip(cts, zero) if not z]

        def f(*xs):
            it = iter(xs[n:])
            cs = [Zero(_unbatched_aval(c.aval, 0)) if z else next(it)
                  for c, z in zip(cts, zero)]
            out = bwd(list(xs[:n]), cs)
            return [_zeros_from_aval(o.aval) if type(o) is Zero else o for o in out]
        ct_dims = [d for d, z in zip(out_dims if keep else [0] * len(cts), zero) if not z]
        outs, odims = batch(f, list(res) + nz, [0] * n + ct_dims)
        # Inputs that were not batched get the sum of the per-lane cotangents.
        return [batching.matchaxis(o, d, 0, size) if bd is not None else
                (lax_ops.reduce_sum(o, (d,)) if d is not None else o)
                for o, d, bd in zip(outs, odims, bdims)]

    return bfun, bfwd, bbwd, bvals


def batch_custom_vjp(trace, fun, fwd, bwd, vals, dims, out_trees, symbolic_zeros):
    bfun, bfwd, bbwd, bvals = _batched_vjp_callables(trace.axis_data, fun, fwd, bwd, vals, dims,
                                                     trace)
    _copy_display(bfwd, fwd)
    outs = custom_vjp_call(trace.parent, bfun, bfwd, bbwd, bvals, out_trees,
                           symbolic_zeros=symbolic_zeros)
    return [batching.BatchTracer(trace, o, 0) for o in outs]


def _custom_vjp_call_batch(axis_data, vals, dims, *, call_jaxpr, fwd_jaxpr_thunk, bwd,
                           num_consts, symbolic_zeros):
    fun = functools.partial(eval_jaxpr, call_jaxpr.jaxpr, call_jaxpr.consts)
    out_dims: list = []
    bfun, bfwd, bbwd, bvals = _batched_vjp_callables(axis_data, fun, fwd_jaxpr_thunk, bwd, vals,
                                                     dims, out_dims=out_dims)
    closed, tconsts = _trace_fun(bfun, bvals)
    nc = len(tconsts)
    outs = custom_vjp_call_p.bind(*tconsts, *bvals, call_jaxpr=closed,
                                  fwd_jaxpr_thunk=_copy_display(
                                      (lambda p, z=None: bfwd(
                                          list(p[nc:]), None if z is None else list(z[nc:])))
                                      if nc else bfwd,
                                      fwd_jaxpr_thunk),
                                  bwd=bbwd, num_consts=nc, symbolic_zeros=symbolic_zeros)
    return outs, list(out_dims)


batching.batch_rules[custom_vjp_call_p] = _custom_vjp_call_batch


# The staging, batching and JVP traces (below this module) process custom calls with these.
custom_rules.install(stage_custom_jvp=stage_custom_jvp, stage_custom_vjp=stage_custom_vjp,
                     batch_custom_jvp=batch_custom_jvp, batch_custom_vjp=batch_custom_vjp,
                     bind_custom_lin=bind_custom_lin)
