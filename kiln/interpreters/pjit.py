"""The ``jit`` call primitive: a closed jaxpr called as one operation.

Its rules transform the inner jaxpr (by tracing an evaluation of it under the
transformation), so ``grad(jit(f))`` and ``jit(grad(f))`` agree and nested jits
stay calls in the staged program.
"""
from __future__ import annotations

import weakref

from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, eval_jaxpr
from kiln.core.trace import Primitive, Tracer, get_aval, set_current_trace
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero

jit_p = Primitive("jit")
jit_p.multiple_results = True


# jit_p's eager impl compiles and runs the program on the default backend, which installs
# its runner here when it is imported (``kiln.backends.cpu``: the backends sit above the
# interpreters, so this layer does not import them).
_backend_run = None


def set_backend_runner(run) -> None:
    """Install ``run(closed_jaxpr, args, name) -> outs``, how an eager ``jit`` call runs."""
    global _backend_run
    _backend_run = run


def _impl(*args, jaxpr: ClosedJaxpr, name: str, **_):
    if _backend_run is None:
        raise RuntimeError("no backend is installed to run jit: import kiln (kiln.backends.cpu "
                           "installs it)")
    return _backend_run(jaxpr, args, name)


def _abstract_eval(*avals, jaxpr: ClosedJaxpr, name: str, **_):
    return jaxpr.out_avals


jit_p.impl = _impl
jit_p.abstract_eval = _abstract_eval
jit_p.weak_type_rule = lambda *w, jaxpr, name, **_: [a.weak_type for a in jaxpr.out_avals]


def trace_closed(fun, in_avals):
    """Trace a flat function to a ClosedJaxpr plus tracer consts to pass as leading args."""
    jaxpr, consts = staging.trace_to_jaxpr(fun, in_avals)
    return staging.split_concrete_consts(jaxpr, consts)


def bind_closed(fun, args, name: str):
    """Trace ``fun`` at ``args``' avals and bind it as a jit call on ``args``."""
    closed, tconsts = trace_closed(fun, [get_aval(a) for a in args])
    return jit_p.bind(*tconsts, *args, jaxpr=closed, name=name)


# A small cache of transformed jaxprs, keyed weakly by the source jaxpr.
_transform_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cached(kind, jaxpr: ClosedJaxpr, key, make):
    per = _transform_cache.setdefault(jaxpr, {})
    k = (kind, key)
    hit = per.get(k)
    if hit is None:
        hit = make()
        if not hit[1] if isinstance(hit, tuple) and len(hit) == 3 else True:
            per[k] = hit
    return hit


# -- jvp -----------------------------------------------------------------------------------------

def _jvp_rule(primals, tangents, *, jaxpr: ClosedJaxpr, name: str, **_):
    nonzero = tuple(type(t) is not Zero for t in tangents)

    def make():
        out_nz = []
        n = len(primals)

        def fun(*args):
            ps = list(args[:n])
            it = iter(args[n:])
            ts = [next(it) if nz else Zero(ad.tangent_aval(get_aval(p)))
                  for p, nz in zip(ps, nonzero)]
            p_out, t_out = ad.jvp_flat(ad_fun, ps, ts, instantiate=False)
            out_nz[:] = [type(t) is not Zero for t in t_out]
            return p_out + [t for t in t_out if type(t) is not Zero]

        def ad_fun(*xs):
            return eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *xs)

        in_avals = list(jaxpr.in_avals) + [ad.tangent_aval(a) for a, nz in
                                           zip(jaxpr.in_avals, nonzero) if nz]
        closed, tconsts = trace_closed(fun, in_avals)
        return closed, tconsts, tuple(out_nz)

    closed, tconsts, out_nz = _cached("jvp", jaxpr, nonzero, make)
    nz_tangents = [t for t in tangents if type(t) is not Zero]
    outs = jit_p.bind(*tconsts, *primals, *nz_tangents, jaxpr=closed, name=name)
    n_out = len(jaxpr.out_avals)
    p_out = outs[:n_out]
    it = iter(outs[n_out:])
    t_out = [next(it) if nz else Zero.from_primal_value(p) for p, nz in zip(p_out, out_nz)]
    return p_out, t_out


ad.jvp_rules[jit_p] = _jvp_rule


# -- transpose: a jit call of the inner jaxpr's backward pass -----------------------------------

def _transpose_rule(cts, *args, jaxpr: ClosedJaxpr, name: str, **_):
    """As JAX, the transpose of a jit call is a jit call: of the inner jaxpr's backward
    pass, traced once per (which inputs are linear, which cotangents are zero) and cached
    with the jaxpr, so ``grad(jit(f))`` runs compiled code and traces ``f``'s custom
    backward rules once."""
    lin = tuple(type(a) is ad.UndefinedPrimal for a in args)
    ct_nz = tuple(type(c) is not Zero for c in cts)
    in_avals, out_avals = jaxpr.in_avals, jaxpr.out_avals

    def make():
        flags = []

        def fun(*xs):
            it = iter(xs)
            full = [ad.UndefinedPrimal(a) if is_lin else next(it)
                    for a, is_lin in zip(in_avals, lin)]
            full_cts = [next(it) if nz else Zero(ad.tangent_aval(a))
                        for a, nz in zip(out_avals, ct_nz)]
            outs = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, full, full_cts)
            lin_outs = [o for o, is_lin in zip(outs, lin) if is_lin]
            flags[:] = [o is not None and type(o) is not Zero for o in lin_outs]
            return [o for o, f in zip(lin_outs, flags) if f]

        avals = ([a for a, is_lin in zip(in_avals, lin) if not is_lin]
                 + [ad.tangent_aval(a) for a, nz in zip(out_avals, ct_nz) if nz])
        closed, tconsts = trace_closed(fun, avals)
        return closed, tconsts, tuple(flags)

    closed, tconsts, flags = _cached("transpose", jaxpr, (lin, ct_nz), make)
    res = [a for a, is_lin in zip(args, lin) if not is_lin]
    outs = jit_p.bind(*tconsts, *res, *[c for c in cts if type(c) is not Zero],
                      jaxpr=closed, name=name)
    it_out, it_flag = iter(outs), iter(flags)
    result = []
    for a, is_lin in zip(args, lin):
        if not is_lin:
            result.append(None)
        else:
            result.append(next(it_out) if next(it_flag) else Zero(ad.tangent_aval(a.aval)))
    return result


ad.transpose_rules[jit_p] = _transpose_rule


# -- batching ------------------------------------------------------------------------------------

def _batch_rule(axis_data, vals, dims, *, jaxpr: ClosedJaxpr, name: str, **_):
    key = (tuple(dims), axis_data.name, axis_data.size)

    def make():
        def fun(*xs):
            outs, out_dims = batching.batch_flat(
                lambda *a: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *a), list(xs), list(dims),
                axis_data)
            return [o if d is None else batching.moveaxis(o, d, 0)
                    for o, d in zip(outs, out_dims)], out_dims

        dims_cell = []

        def traced(*xs):
            outs, out_dims = fun(*xs)
            dims_cell[:] = [None if d is None else 0 for d in out_dims]
            return outs

        closed, tconsts = trace_closed(traced, [get_aval(v) for v in vals])
        return closed, tconsts, tuple(dims_cell)

    batching.axis_env.append((axis_data.name, axis_data.size))
    try:
        closed, tconsts, out_dims = _cached("batch", jaxpr, key, make)
    finally:
        batching.axis_env.pop()
    outs = jit_p.bind(*tconsts, *vals, jaxpr=closed, name=name)
    return outs, list(out_dims)


batching.batch_rules[jit_p] = _batch_rule


# -- partial evaluation ---------------------------------------------------------------------------

def partial_eval_jaxpr(jaxpr: ClosedJaxpr, unknowns, instantiate=False):
    """Split ``jaxpr`` into a known part and an unknown part.

    ``instantiate`` (a bool or one per output) forces outputs to be unknown even when
    they could be computed from known inputs.

    Returns ``(known, unknown, out_unknowns, num_res)``: ``known`` maps the known inputs to
    the known outputs followed by ``num_res`` residuals; ``unknown`` maps
    ``(*residuals, *unknown_inputs)`` to the unknown outputs.
    """
    info = {}
    in_avals = jaxpr.in_avals

    def known_fun(*known_vals):
        pe = staging.JaxprTrace(forward_known=True)
        it = iter(known_vals)
        args = [pe.new_arg(a) if u else next(it) for a, u in zip(in_avals, unknowns)]
        with set_current_trace(pe):
            outs = eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)
        inst = instantiate if isinstance(instantiate, (list, tuple)) else \
            [instantiate] * len(outs)
        out_unk = [pe.is_own(o) or bool(i) for o, i in zip(outs, inst)]
        unk_jaxpr, res = pe.to_jaxpr([o for o, u in zip(outs, out_unk) if u], dce=True)
        info["out_unknowns"] = out_unk
        info["unknown"] = staging.convert_constvars_jaxpr(unk_jaxpr)
        info["num_res"] = len(res)
        return [o for o, u in zip(outs, out_unk) if not u] + list(res)

    known_avals = [a for a, u in zip(in_avals, unknowns) if not u]
    known_jaxpr, kconsts = staging.trace_to_jaxpr(known_fun, known_avals)
    if any(isinstance(c, Tracer) for c in kconsts):
        raise AssertionError("partial_eval_jaxpr: closed jaxpr with tracer consts")
    return (ClosedJaxpr(known_jaxpr, kconsts), ClosedJaxpr(info["unknown"], ()),
            info["out_unknowns"], info["num_res"])


def _forwarded_residuals(known: ClosedJaxpr, num_res: int):
    """JAX's residual forwarding: ``known`` without the residual outputs that are one
    of its known outputs or inputs, and per residual where it comes from: ``None``
    (still an output), ``("out", j)`` or ``("in", k)``."""
    j = known.jaxpr
    nk = len(j.outvars) - num_res
    fwd = []
    for r in j.outvars[nk:]:
        src = next((("out", i) for i, v in enumerate(j.outvars[:nk]) if v is r), None)
        if src is None:
            src = next((("in", i) for i, v in enumerate(j.invars) if v is r), None)
        fwd.append(src)
    if all(f is None for f in fwd):
        return known, fwd
    outvars = list(j.outvars[:nk]) + [v for v, f in zip(j.outvars[nk:], fwd) if f is None]
    pruned = Jaxpr(j.constvars, j.invars, outvars, j.eqns, j.effects, j.debug_info)
    return ClosedJaxpr(pruned, known.consts), fwd


def _partial_eval_rule(trace, args, params):
    jaxpr, name = params["jaxpr"], params["name"]
    unknowns = tuple(trace.is_own(x) for x in args)

    def make():
        known, unknown, out_unk, num_res = partial_eval_jaxpr(jaxpr, unknowns)
        known, fwd = _forwarded_residuals(known, num_res)
        return known, unknown, out_unk, num_res, fwd
    known, unknown, out_unk, num_res, fwd = _cached("pe", jaxpr, unknowns, make)
    known_args = [x for x, u in zip(args, unknowns) if not u]
    with set_current_trace(trace.parent):
        kouts = jit_p.bind(*known_args, jaxpr=known, name=name)
    n_known_out = len(out_unk) - sum(out_unk)
    known_outs, it_res = kouts[:n_known_out], iter(kouts[n_known_out:])
    res = [next(it_res) if f is None else known_outs[f[1]] if f[0] == "out"
           else known_args[f[1]] for f in fwd]
    unknown_args = [x for x, u in zip(args, unknowns) if u]
    uouts = trace.stage(jit_p, [*res, *unknown_args], dict(jaxpr=unknown, name=name),
                        out_avals=unknown.out_avals)
    ki, ui = iter(known_outs), iter(uouts)
    return [next(ui) if u else next(ki) for u in out_unk]


staging.partial_eval_rules[jit_p] = _partial_eval_rule


# -- dead-code elimination ------------------------------------------------------------------------

def _dce_rule(used, eqn):
    """A jit equation computing only its ``used`` results, with the operands its body
    still reads (JAX's dce rule of pjit)."""
    from kiln.interpreters.partial_eval import dce_jaxpr_consts
    closed = eqn.params["jaxpr"]
    j, used_consts, used_in = dce_jaxpr_consts(closed.jaxpr, list(used))
    body = ClosedJaxpr(j, [c for c, u in zip(closed.consts, used_consts) if u])
    return eqn.replace(invars=[v for v, u in zip(eqn.invars, used_in) if u],
                       outvars=[v for v, u in zip(eqn.outvars, used) if u],
                       params=dict(eqn.params, jaxpr=body))


jit_p.dce_rule = _dce_rule
