"""The ``shard_map`` primitive: a ``shard_map`` staged into a jaxpr as one equation.

Traced by ``make_jaxpr``/``jit``, a ``shard_map`` call becomes one ``shard_map``
equation (as JAX's), whose parameters are JAX's:

- ``jaxpr``: the body, a ``ClosedJaxpr`` over one device's blocks (local shapes), traced
  with the manual mesh axes bound and the values typed by the axes they vary along
  (``aval.mat``, ``kiln.parallel.vma``);
- ``mesh`` (the whole mesh), ``in_specs``/``out_specs`` (one ``PartitionSpec`` per
  operand/result; values the body closes over come first, replicated: ``P()``),
  ``check_vma``, ``newly_manual_axes`` (the mesh axes the body makes manual).

What the equation computes is what kiln computes for a ``shard_map`` under a
transformation: its *expansion*, the body evaluated as nested ``vmap``s over the mesh
axes (``kiln.parallel.shard_map._emulate``), traced once at the operands' global types
and kept with the body. Compiling (``kiln.compiler.passes.inline_calls``), the reference
backend, the SPMD partitioner and ``jit``'s output layouts read the expansion
(``ShardMapPrimitive.expand(eqn)``); eager evaluation runs it. Under a ``vmap`` directly
inside a staging trace, ``jvp``/``grad`` and partial evaluation, JAX's rules make new
shard_map equations (of the batched body, its JVP, its known and unknown parts); the
transpose is one of the body's backward pass; each rule falls back to applying the
expansion under the transformation when its body does not trace. Other traces apply
the expansion's operations.
"""
from __future__ import annotations

import contextlib
import threading
import weakref

from kiln.core.jaxpr import ClosedJaxpr, eval_jaxpr
from kiln.core.trace import Primitive, current_trace, get_aval, set_current_trace
from kiln.interpreters import ad, staging


class ShardMapPrimitive(Primitive):
    """``shard_map``: staged as an equation by a plain staging trace, applied as its
    expansion under every other trace."""

    multiple_results = True

    def bind(self, *args, **params):
        return self._apply(current_trace(), args, params)

    def bind_with_trace(self, trace, args, avals=None, params=None, /):
        if params is None and isinstance(avals, dict):
            avals, params = None, avals
        return self._apply(trace, tuple(args), dict(params or {}))

    def _apply(self, trace, args, params):
        if type(trace) is staging.JaxprTrace and not trace.forward_known:
            return trace.process_primitive(self, args, params)
        if staged_batch(trace):
            outs = _batch_staged(trace, args, params)
            if outs is not None:
                return outs
        if type(trace) is ad.JVPTrace or (type(trace) is staging.JaxprTrace
                                          and trace.forward_known):
            # ``_jvp`` / ``_partial_eval`` (bound under the parent when no input is
            # this trace's)
            return trace.process_primitive(self, args, params)
        closed = expansion(params, [get_aval(a) for a in args])
        with set_current_trace(trace):
            return eval_jaxpr(closed.jaxpr, closed.consts, *args)

    @contextlib.contextmanager
    def body_context(self, params):
        """Inside the body: its manual mesh axes bound (to check its jaxpr)."""
        from kiln.interpreters import batching
        from kiln.parallel.shard_map import _manual_mesh_context, _submesh
        sub = _submesh(params["mesh"], params["newly_manual_axes"])
        for name, size in zip(sub.axis_names, sub.axis_sizes):
            batching.axis_env.append((name, size))
        try:
            with _manual_mesh_context(params["mesh"], sub.axis_names):
                yield
        finally:
            for _ in sub.axis_names:
                batching.axis_env.pop()

    def runs_alone(self, eqn) -> bool:
        """Whether a ``jit`` whose program is just ``eqn`` runs it as the eager
        shard_map does: when an operand or result is unreduced (the eager call keeps
        each device's partials, which a single program's value, their sum, loses)."""
        p = eqn.params
        return (any(s.unreduced for s in (*p["in_specs"], *p["out_specs"]))
                and not p["mesh"].empty)

    def run_alone(self, eqn, args) -> list:
        """``eqn`` applied to ``args`` (Arrays) as the eager shard_map: the body run on
        every device's blocks."""
        from kiln._physical_tree import tree_flatten
        from kiln.parallel.shard_map import _mesh_from_args, _run, _submesh
        from kiln.sharding import AbstractMesh
        p = eqn.params
        body, mesh = p["jaxpr"], p["mesh"]
        if isinstance(mesh, AbstractMesh):
            mesh = _mesh_from_args(list(args), mesh)
        sub = _submesh(mesh, p["newly_manual_axes"])

        def run_body(*blocks):
            return list(eval_jaxpr(body.jaxpr, body.consts, *blocks))

        with _lock:
            cache = _alone_cache.setdefault(body, {})
        outs = _run(run_body, sub, list(args), tree_flatten(tuple(args))[1],
                    list(p["in_specs"]), list(p["out_specs"]), cache, p["check_vma"], mesh)
        return list(outs)

    def dce_rule(self, used, eqn):
        """``eqn`` computing only its ``used`` results, with the operands its body
        still reads (JAX's dce rule of shard_map)."""
        from kiln.interpreters.partial_eval import dce_jaxpr_consts
        p = eqn.params
        body = p["jaxpr"]
        j, used_consts, used_in = dce_jaxpr_consts(body.jaxpr, list(used))
        closed = ClosedJaxpr(j, [c for c, u in zip(body.consts, used_consts) if u])
        if body in _derived:
            _derive(closed)
        new = dict(p, jaxpr=closed,
                   in_specs=tuple(s for s, u in zip(p["in_specs"], used_in) if u),
                   out_specs=tuple(s for s, u in zip(p["out_specs"], used) if u))
        return eqn.replace(invars=[v for v, u in zip(eqn.invars, used_in) if u],
                           outvars=[v for v, u in zip(eqn.outvars, used) if u], params=new)

    def expand(self, eqn) -> ClosedJaxpr:
        """The equation's expansion: a jaxpr over the operands' global values."""
        return expansion(eqn.params, [v.aval for v in eqn.invars])


shard_map_p = ShardMapPrimitive("shard_map")


def _abstract_eval(*avals, jaxpr, mesh, in_specs, out_specs, check_vma,
                   newly_manual_axes):
    from kiln.core.avals import ShapedArray
    from kiln.parallel.shard_map import _global_shape, _submesh
    sub = _submesh(mesh, newly_manual_axes)
    out = []
    for a, s in zip(jaxpr.out_avals, out_specs):
        if type(a) is ShapedArray:
            a = ShapedArray(_global_shape(a.shape, s, sub), a.dtype, a.weak_type)
        out.append(a)
    return out


def _impl(*vals, **params):
    from kiln.array import make_array
    from kiln.core.trace import _numpy_value, eval_trace
    closed = expansion(params, [get_aval(make_array(v)) for v in vals])
    arrays = [make_array(v) for v in vals]
    with set_current_trace(eval_trace):
        outs = eval_jaxpr(closed.jaxpr, closed.consts, *arrays)
    return [_numpy_value(o) for o in outs]


shard_map_p.abstract_eval = _abstract_eval
shard_map_p.impl = _impl
shard_map_p.weak_type_rule = lambda *w, jaxpr, **_: [a.weak_type for a in jaxpr.out_avals]


def _transpose_expansion(cts, args, params):
    closed = expansion(params, [a.aval if type(a) is ad.UndefinedPrimal else get_aval(a)
                                for a in args])
    outs = ad.backward_pass(closed.jaxpr, closed.consts, list(args), list(cts))
    return [o if type(a) is ad.UndefinedPrimal else None for o, a in zip(outs, args)]


# Casts between the reduced/unreduced/varying types: their transposes follow the types;
# a body with one is transposed through its expansion.
_TYPED_CASTS = frozenset(("preduced", "vary_unreduced_cast", "reduced_vary_cast",
                          "unreduced_psum", "unreduced_reduce_scatter",
                          "all_gather_reduced", "all_gather_invariant"))


def _uses(jaxpr, names) -> bool:
    from kiln.core.jaxpr import sub_jaxprs
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in names or any(_uses(j, names) for j in sub_jaxprs(eqn.params)):
            return True
    return False


def _unmentioned(sub, spec) -> tuple:
    """The manual axes a spec neither splits nor makes unreduced (JAX's)."""
    named = set(spec.mesh_axes()) | set(spec.unreduced)
    return tuple(a for a in sub.axis_names if a not in named)


def _transpose(cts, *args, **params):
    """JAX's transpose of ``shard_map``: one shard_map of the body's backward pass
    (nonzero output cotangents and the non-linear operands in, the linear operands'
    cotangents out, specs ``to_ct_spec``). kiln's collectives transpose as over every
    device's value (``psum`` to ``psum``), so it is JAX's ``check_vma=False`` form: a
    cotangent of an output replicated along some manual axes is divided among them, and
    a linear operand's cotangent summed (``psum``) along the axes its spec leaves out;
    the ``pvary`` of an invariant operand (the identity on each device) transposes to the
    identity there. A body with reduced/unreduced casts (or specs, checked) is
    transposed through its expansion."""
    import math

    from kiln import lax
    from kiln.interpreters.pjit import trace_closed
    from kiln.parallel.shard_map import _submesh
    body, mesh = params["jaxpr"], params["mesh"]
    in_specs, out_specs = params["in_specs"], params["out_specs"]
    lin = [type(a) is ad.UndefinedPrimal for a in args]
    if (_uses(body.jaxpr, _TYPED_CASTS) or (params["check_vma"] and any(
            s.reduced or s.unreduced for s in (*in_specs, *out_specs)))):
        return _transpose_expansion(cts, args, params)
    sub = _submesh(mesh, params["newly_manual_axes"])
    sizes = dict(zip(sub.axis_names, sub.axis_sizes))
    ct_nz = [type(c) is not ad.Zero for c in cts]
    flags: list = []
    plain = _without_pvary(body)

    n_ct = sum(ct_nz)

    def fun(*xs):
        it, it_ct = iter(xs[n_ct:]), iter(xs[:n_ct])
        full = [ad.UndefinedPrimal(a) if is_lin else next(it)
                for a, is_lin in zip(plain.in_avals, lin)]
        full_cts = []
        for a, s, nz in zip(plain.out_avals, out_specs, ct_nz):
            if not nz:
                full_cts.append(ad.Zero(ad.tangent_aval(a)))
                continue
            c = next(it_ct)
            k = math.prod(sizes[n] for n in _unmentioned(sub, s.to_ct_spec()))
            full_cts.append(c if k == 1 or not _is_float(c) else
                            lax.div(c, lax.full_like(c, k)))
        outs = ad.backward_pass(plain.jaxpr, plain.consts, full, full_cts)
        lin_outs = []
        for o, s, is_lin in zip(outs, in_specs, lin):
            if not is_lin:
                continue
            if o is not None and type(o) is not ad.Zero:
                axes = _unmentioned(sub, s.to_ct_spec())
                if axes and _is_float(o):
                    o = lax.psum(o, axes)
            lin_outs.append(o)
        flags[:] = [o is not None and type(o) is not ad.Zero for o in lin_outs]
        return [o for o, f in zip(lin_outs, flags) if f]

    res = [a for a, is_lin in zip(args, lin) if not is_lin]
    nz_cts = [c for c in cts if type(c) is not ad.Zero]
    local = ([_local_aval(get_aval(c), s.to_ct_spec(), sub)
              for c, s in zip(nz_cts, [s for s, nz in zip(out_specs, ct_nz) if nz])]
             + [a for a, is_lin in zip(plain.in_avals, lin) if not is_lin])
    try:
        with shard_map_p.body_context(params):
            closed, tconsts = trace_closed(fun, local)
        if tconsts:
            raise ValueError("closed over tracers")
        lin_specs = [s for s, is_lin in zip(in_specs, lin) if is_lin]
        new = dict(params, jaxpr=_derive(closed),
                   in_specs=tuple([s.to_ct_spec() for s, nz in zip(out_specs, ct_nz) if nz]
                                  + [s for s, is_lin in zip(in_specs, lin) if not is_lin]),
                   out_specs=tuple(s.to_ct_spec() for s, f in zip(lin_specs, flags) if f))
        expansion(new, [get_aval(x) for x in (*nz_cts, *res)])
    except Exception:       # noqa: BLE001 - transposed through the expansion instead
        _debug('transpose')
        return _transpose_expansion(cts, args, params)
    outs = shard_map_p.bind(*nz_cts, *res, **new) if new["out_specs"] else []
    it_out, it_flag = iter(outs), iter(flags)
    result = []
    for a, is_lin in zip(args, lin):
        if not is_lin:
            result.append(None)
        else:
            result.append(next(it_out) if next(it_flag) else ad.Zero(ad.tangent_aval(a.aval)))
    return result


def _is_float(x) -> bool:
    import numpy as np
    dt = get_aval(x).dtype
    return isinstance(dt, np.dtype) and dt.kind in "fc"


def _local_aval(aval, spec, sub):
    from kiln.parallel.shard_map import _local_shape
    return aval.update(shape=_local_shape(aval.shape, spec, sub))


def _without_pvary(body: ClosedJaxpr) -> ClosedJaxpr:
    """``body`` with its top-level ``pvary`` equations (the identity on each device)
    taken out."""
    from kiln.core.jaxpr import Jaxpr
    if not any(e.primitive.name == "pvary" for e in body.jaxpr.eqns):
        return body
    env = {}

    def sub(v):
        return env.get(v, v) if not hasattr(v, "val") else v
    eqns = []
    for e in body.jaxpr.eqns:
        if e.primitive.name == "pvary":
            env[e.outvars[0]] = sub(e.invars[0])
            continue
        eqns.append(e.replace(invars=[sub(v) for v in e.invars]))
    j = body.jaxpr
    outvars = [sub(v) for v in j.outvars]
    return ClosedJaxpr(Jaxpr(j.constvars, j.invars, outvars, eqns, j.effects), body.consts)


ad.transpose_rules[shard_map_p] = _transpose


def _jvp(primals, tangents, **params):
    """JAX's JVP rule of ``shard_map``: one shard_map of the body's JVP (primals and
    nonzero tangents in, primal and nonzero tangent results out, tangents with their
    primals' specs), the body differentiated over one device's blocks with its axes
    bound (a ``custom_vjp`` whose forward pass runs a collective is traced there).
    When that does not trace, the expansion is differentiated instead."""
    from kiln.interpreters.pjit import trace_closed
    body = params["jaxpr"]
    nz = [type(t) is not ad.Zero for t in tangents]
    n = len(primals)
    out_nz: list = []

    def fun(*xs):
        ps = list(xs[:n])
        it = iter(xs[n:])
        ts = [next(it) if z else ad.Zero(ad.tangent_aval(a))
              for z, a in zip(nz, body.in_avals)]
        p_out, t_out = ad.jvp_flat(lambda *a: eval_jaxpr(body.jaxpr, body.consts, *a),
                                   ps, ts, instantiate=False)
        out_nz[:] = [type(t) is not ad.Zero for t in t_out]
        return list(p_out) + [t for t in t_out if type(t) is not ad.Zero]

    local = list(body.in_avals) + [ad.tangent_aval(a) for a, z in zip(body.in_avals, nz) if z]
    nz_tangents = [t for t in tangents if type(t) is not ad.Zero]
    try:
        with shard_map_p.body_context(params):
            closed, tconsts = trace_closed(fun, local)
        if tconsts:
            raise ValueError("closed over tracers")
        in_specs, out_specs = params["in_specs"], params["out_specs"]
        new = dict(params, jaxpr=_derive(closed),
                   in_specs=tuple(in_specs) + tuple(s for s, z in zip(in_specs, nz) if z),
                   out_specs=tuple(out_specs) + tuple(
                       s for s, z in zip(out_specs, out_nz) if z))
        expansion(new, [get_aval(x) for x in (*primals, *nz_tangents)])
    except Exception:       # noqa: BLE001 - the expansion is differentiated instead
        _debug('jvp')
        closed = expansion(params, [get_aval(p) for p in primals])
        return ad.jvp_flat(lambda *a: eval_jaxpr(closed.jaxpr, closed.consts, *a),
                           list(primals), list(tangents), instantiate=False)
    outs = shard_map_p.bind(*primals, *nz_tangents, **new)
    m = len(params["out_specs"])
    p_out, it = outs[:m], iter(outs[m:])
    t_out = [next(it) if z else ad.Zero.from_primal_value(p) for p, z in zip(p_out, out_nz)]
    return p_out, t_out


ad.jvp_rules[shard_map_p] = _jvp


def _partial_eval(trace, args, params):
    """JAX's partial evaluation of ``shard_map``: a shard_map of the body's known part
    (run now, under the parent trace) giving the known results and the residuals, and a
    staged shard_map of the unknown part taking them. A residual is one device's value:
    it crosses with a leading dimension split along every manual axis."""
    from kiln import lax
    from kiln.interpreters.pjit import partial_eval_jaxpr, trace_closed
    from kiln.parallel import vma
    from kiln.parallel.shard_map import _in_mat, _submesh
    from kiln.sharding import PartitionSpec
    body = params["jaxpr"]
    unknowns = tuple(trace.is_own(x) for x in args)
    sub = _submesh(params["mesh"], params["newly_manual_axes"])
    names = tuple(sub.axis_names)
    in_specs, out_specs = params["in_specs"], params["out_specs"]
    try:
        with shard_map_p.body_context(params):
            known, unknown, out_unk, num_res = partial_eval_jaxpr(body, unknowns)
            nk = len(known.out_avals) - num_res
            # each residual's spec: split (on a new leading dimension) along the manual
            # axes it varies along
            mats = vma.infer_mat(known.jaxpr, [_in_mat(s, params["check_vma"]) for s, u
                                               in zip(in_specs, unknowns) if not u])
            res_specs = []
            for m in mats[nk:]:
                if m.unreduced or m.reduced:
                    raise ValueError("a reduced/unreduced residual")
                axes = tuple(a for a in names if a in m.varying)
                res_specs.append(PartitionSpec(None if not axes else axes[0]
                                               if len(axes) == 1 else axes))

            # a residual that is a known result or a known operand is passed on as it is
            # (JAX's residual forwarding), with that value's spec
            kin_specs = [s for s, u in zip(in_specs, unknowns) if not u]
            kout_specs = [s for s, u in zip(out_specs, out_unk) if not u]
            kj = known.jaxpr
            fwd = []
            for r in kj.outvars[nk:]:
                src = next((("out", j) for j, v in enumerate(kj.outvars[:nk]) if v is r
                            and not kout_specs[j].unreduced and not kout_specs[j].reduced),
                           None)
                if src is None:
                    src = next((("in", k) for k, v in enumerate(kj.invars) if v is r
                                and not kin_specs[k].unreduced
                                and not kin_specs[k].reduced), None)
                fwd.append(src)
            emitted = [i for i, f in enumerate(fwd) if f is None]

            def known_fun(*xs):
                outs = eval_jaxpr(known.jaxpr, known.consts, *xs)
                return list(outs[:nk]) + [lax.expand_dims(outs[nk + i], (0,))
                                          for i in emitted]

            def unknown_fun(*xs):
                rs = [r if f is not None else lax.squeeze(r, (0,))
                      for r, f in zip(xs[:num_res], fwd)]
                return list(eval_jaxpr(unknown.jaxpr, unknown.consts, *rs, *xs[num_res:]))

            known2, kc = trace_closed(known_fun, list(known.in_avals))
            it_emitted = iter(known2.out_avals[nk:])
            res_local = [next(it_emitted) if f is None else a
                         for f, a in zip(fwd, unknown.in_avals[:num_res])]
            unknown2, uc = trace_closed(
                unknown_fun, res_local + list(unknown.in_avals[num_res:]))
        if kc or uc:
            raise ValueError("closed over tracers")
        res_in_specs = [res_specs[i] if f is None else
                        kout_specs[f[1]] if f[0] == "out" else kin_specs[f[1]]
                        for i, f in enumerate(fwd)]
        kparams = dict(params, jaxpr=_derive(known2), in_specs=tuple(kin_specs),
                       out_specs=tuple(kout_specs + [res_specs[i] for i in emitted]))
        uparams = dict(params, jaxpr=_derive(unknown2),
                       in_specs=tuple(res_in_specs
                                      + [s for s, u in zip(in_specs, unknowns) if u]),
                       out_specs=tuple(s for s, u in zip(out_specs, out_unk) if u))
        known_args = [x for x, u in zip(args, unknowns) if not u]
        expansion(kparams, [get_aval(x) for x in known_args])
    except Exception:       # noqa: BLE001 - the expansion is partially evaluated instead
        _debug('partial_eval')
        closed = expansion(params, [get_aval(x) for x in args])
        with set_current_trace(trace):
            return eval_jaxpr(closed.jaxpr, closed.consts, *args)
    with set_current_trace(trace.parent):
        kouts = shard_map_p.bind(*known_args, **kparams)
    known_outs, it_res = kouts[:nk], iter(kouts[nk:])
    res = [next(it_res) if f is None else
           known_outs[f[1]] if f[0] == "out" else known_args[f[1]] for f in fwd]
    unknown_args = [x for x, u in zip(args, unknowns) if u]
    uargs = [*res, *unknown_args]
    uouts = trace.stage(shard_map_p, uargs, uparams,
                        out_avals=_abstract_eval(*[get_aval(x) for x in uargs], **uparams))
    ki, ui = iter(known_outs), iter(uouts)
    return [next(ui) if u else next(ki) for u in out_unk]


staging.partial_eval_rules[shard_map_p] = _partial_eval


# -- the expansion --------------------------------------------------------------------------------

# body ClosedJaxpr -> {(operand avals, params key): expansion}
_expansions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.RLock()
# bodies made by the rules from a body whose types were checked (JVP, known and unknown
# parts, transpose, batched, dce'd): their expansion trusts the types (``_emulate``)
_derived: weakref.WeakSet = weakref.WeakSet()


def _derive(closed: ClosedJaxpr) -> ClosedJaxpr:
    _derived.add(closed)
    return closed
# body ClosedJaxpr -> the eager shard_map's cache of its per-device program (run_alone)
_alone_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _key(params, avals):
    return (tuple(avals), tuple(params["in_specs"]), tuple(params["out_specs"]),
            params["mesh"], bool(params["check_vma"]),
            frozenset(params["newly_manual_axes"]))


def expansion(params, in_avals) -> ClosedJaxpr:
    """The body evaluated as nested vmaps over the manual mesh axes, traced at
    ``in_avals`` (the operands' global types); computed once per body and types."""
    body = params["jaxpr"]
    key = _key(params, in_avals)
    with _lock:
        hit = _expansions.get(body, {}).get(key)
        if hit is not None:
            return hit
        closed = _trace_expansion(params, in_avals)
        _expansions.setdefault(body, {})[key] = closed
        return closed


def _trace_expansion(params, in_avals) -> ClosedJaxpr:
    from kiln._physical_tree import tree_flatten
    from kiln.interpreters.pjit import trace_closed
    from kiln.parallel.shard_map import _emulate, _submesh, out_type_spec
    body, mesh = params["jaxpr"], params["mesh"]
    sub = _submesh(mesh, params["newly_manual_axes"])
    in_specs, out_specs = list(params["in_specs"]), list(params["out_specs"])
    layouts = [out_type_spec(s, a, sub.axis_names) for s, a in zip(out_specs, body.out_avals)]

    def run_body(*blocks):
        return list(eval_jaxpr(body.jaxpr, body.consts, *blocks))

    def fun(*xs):
        tree = tree_flatten(tuple(xs))[1]
        outs = _emulate(run_body, sub, list(xs), tree, in_specs, out_specs,
                        params["check_vma"], mesh, layouts, typed=body in _derived)
        return tree_flatten(outs)[0]

    closed, tconsts = trace_closed(fun, list(in_avals))
    if tconsts:
        raise AssertionError("shard_map expansion closed over tracers")
    return closed


# -- vmap of a staged shard_map ---------------------------------------------------------------------

def staged_jvp(trace) -> bool:
    """A ``grad``/``jvp`` inside a plain staging trace (through its linearization's
    partial evaluation): a shard_map under it is staged as one equation, differentiated
    by its rules."""
    t = trace
    if type(t) is not ad.JVPTrace:
        return False
    while type(t) is ad.JVPTrace or (type(t) is staging.JaxprTrace and t.forward_known):
        t = getattr(t, "parent", None)
    return type(t) is staging.JaxprTrace


def staged_batch(trace) -> bool:
    """A ``vmap`` (not a shard_map's own emulated axis) directly inside a plain staging
    trace: a shard_map under it is staged as one equation over the batched body."""
    from kiln.interpreters.batching import BatchTrace
    parent = getattr(trace, "parent", None)
    return (isinstance(trace, BatchTrace) and not trace.axis_data.manual
            and type(parent) is staging.JaxprTrace and not parent.forward_known)


def batch_spec(spec, dim: int, names: tuple):
    """``spec`` of a value with a new dimension at ``dim``, split along the mesh axes
    ``names`` (a vmap's ``spmd_axis_name``; none: not split), as JAX's."""
    from kiln.sharding import PartitionSpec
    parts = list(spec)
    parts += [None] * (dim - len(parts))
    parts.insert(dim, None if not names else names[0] if len(names) == 1 else tuple(names))
    return PartitionSpec(*parts, reduced=spec.reduced, unreduced=spec.unreduced)


def _batch_staged(trace, args, params):
    """JAX's batching rule of ``shard_map``: the body vmapped over one device's block of
    the batch (split along the vmap's ``spmd_axis_name`` mesh axes, if any), the batch
    dimension inserted into the specs. Returns None when the batched body does not trace
    (the expansion is then applied under the vmap)."""
    import math

    from kiln.interpreters.batching import AxisData, BatchTracer, batch_flat, moveaxis
    from kiln.interpreters.pjit import trace_closed
    from kiln.parallel.shard_map import _local_shape, _submesh, _with_vma
    axis = trace.axis_data
    if axis.explicit:
        # a vmap over a dimension split along Explicit mesh axes: JAX takes those axes out
        # of the mesh; kiln applies the expansion under the vmap
        return None
    vals, dims = [], []
    for x in args:
        if isinstance(x, BatchTracer) and x._trace is trace:
            vals.append(x.val)
            dims.append(x.bdim)
        else:
            vals.append(x)
            dims.append(None)
    spmd = axis.spmd_name
    names = (tuple(spmd) if isinstance(spmd, (tuple, list))
             else () if spmd is None else (spmd,))
    mesh, check_vma = params["mesh"], params["check_vma"]
    sub = _submesh(mesh, params["newly_manual_axes"])
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    k = math.prod(sizes[n] for n in names)
    if axis.size % k:
        return None
    size = axis.size // k
    in_specs = [s if d is None else batch_spec(s, d, names)
                for s, d in zip(params["in_specs"], dims)]
    body = params["jaxpr"]
    cell = {}

    def fun(*xs):
        outs, odims = batch_flat(lambda *b: eval_jaxpr(body.jaxpr, body.consts, *b),
                                 list(xs), list(dims), AxisData(axis.name, size))
        cell["dims"] = [None if d is None else 0 for d in odims]
        return [o if d is None else moveaxis(o, d, 0) for o, d in zip(outs, odims)]

    local = []
    for v, s in zip(vals, in_specs):
        a = get_aval(v)
        local.append(_with_vma(a.update(shape=_local_shape(a.shape, s, sub)), s, check_vma))
    try:
        with shard_map_p.body_context(params):
            from kiln.parallel import vma
            prev, staging.vma_rule[0] = staging.vma_rule[0], vma.stage_rule
            try:
                closed, tconsts = trace_closed(fun, local)
            finally:
                staging.vma_rule[0] = prev
        if tconsts:
            return None
        out_specs = [s if d is None else batch_spec(s, d, names)
                     for s, d in zip(params["out_specs"], cell["dims"])]
        new = dict(params, jaxpr=closed, in_specs=tuple(in_specs),
                   out_specs=tuple(out_specs))
        expansion(new, [get_aval(v) for v in vals])
    except Exception:       # noqa: BLE001 - the expansion is applied instead
        _debug('batch')
        return None
    from kiln.parallel.placement import note_type
    from kiln.sharding import NamedSharding
    with set_current_trace(trace.parent):
        outs = shard_map_p.bind(*vals, **new)
    outs = [note_type(o, NamedSharding(mesh, s)) for o, s in zip(outs, out_specs)]
    return [o if d is None else BatchTracer(trace, o, d) for o, d in zip(outs, cell["dims"])]


def _debug(what: str) -> None:
    """With ``KILN_DEBUG_SHARD_MAP`` set, say why a rule fell back to the expansion."""
    import os
    if os.environ.get("KILN_DEBUG_SHARD_MAP"):
        import traceback
        print(f"shard_map {what} rule: using the expansion", file=__import__("sys").stderr)
        traceback.print_exc()
