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
(``ShardMapPrimitive.expand(eqn)``); any trace other than plain staging (``grad``,
``vmap``, partial evaluation, eager evaluation) applies the expansion's operations, so
every transformation gives exactly the values it gave before the primitive existed.
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


def _transpose(cts, *args, **params):
    closed = expansion(params, [a.aval if type(a) is ad.UndefinedPrimal else get_aval(a)
                                for a in args])
    outs = ad.backward_pass(closed.jaxpr, closed.consts, list(args), list(cts))
    return [o if type(a) is ad.UndefinedPrimal else None for o, a in zip(outs, args)]


ad.transpose_rules[shard_map_p] = _transpose


# -- the expansion --------------------------------------------------------------------------------

# body ClosedJaxpr -> {(operand avals, params key): expansion}
_expansions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.RLock()
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
                        params["check_vma"], mesh, layouts)
        return tree_flatten(outs)[0]

    closed, tconsts = trace_closed(fun, list(in_avals))
    if tconsts:
        raise AssertionError("shard_map expansion closed over tracers")
    return closed


def record(params, in_avals, closed: ClosedJaxpr) -> None:
    """Keep ``closed`` as the expansion of ``params`` at ``in_avals``."""
    with _lock:
        _expansions.setdefault(params["jaxpr"], {})[_key(params, in_avals)] = closed


# -- vmap of a staged shard_map ---------------------------------------------------------------------

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
        return None
    from kiln.parallel.placement import note_type
    from kiln.sharding import NamedSharding
    with set_current_trace(trace.parent):
        outs = shard_map_p.bind(*vals, **new)
    outs = [note_type(o, NamedSharding(mesh, s)) for o, s in zip(outs, out_specs)]
    return [o if d is None else BatchTracer(trace, o, d) for o, d in zip(outs, cell["dims"])]
