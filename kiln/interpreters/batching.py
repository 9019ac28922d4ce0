"""Vectorization (``vmap``) and named axes.

A ``BatchTracer`` holds a value with one extra axis (``bdim``) of size
``axis_data.size``. Batching rules (``batch_rules[prim](axis_data, vals, dims, **params)``)
return ``(out, out_dim)``; ``dims`` entries are ``None`` for unbatched operands.

Collectives (``psum``, ``all_gather``, ``axis_index``...) name an axis; the
BatchTrace whose ``axis_data.name`` matches performs them, others pass them up.
"""
from __future__ import annotations

import contextlib
import threading
import weakref

from kiln.core import leaks
from kiln.core.ref import AbstractRef
from kiln.core.source_info import transform_name_stack
from kiln.core.trace import (
    Trace,
    Tracer,
    UnexpectedTracerError,
    aval_str,
    check_foreign_tracer,
    current_trace,
    custom_jvp_call,
    custom_vjp_call,
    get_aval,
)
from kiln.core.trace import set_current_trace as _set_trace
from kiln.interpreters import custom_rules, lax_ops

batch_rules: dict = {}
# Primitives that must reach a BatchTrace even when no operand is batched (collectives).
collective_prims: set = set()
# Primitives whose batching rule runs even when no operand is batched (reference
# allocation: a reference created inside vmap is batched, as in JAX, since a batched value
# may be written to it later).
always_batch: set = set()

not_mapped = None


class AxisData:
    __slots__ = ("name", "size", "spmd_name", "manual", "explicit")

    def __init__(self, name, size, spmd_name=None, manual=False, explicit=False):
        self.name = name
        self.size = size
        self.spmd_name = spmd_name
        # ``spmd_name`` was inferred from arguments split along ``Explicit`` mesh axes
        # (JAX's ``explicit_mesh_axis``), not given as ``spmd_axis_name``
        self.explicit = explicit
        # a shard_map mesh axis (computed as a vmap): a value mapped along it varies
        # along that manual axis (``aval.mat.varying``)
        self.manual = manual

    def __repr__(self):
        return f"AxisData({self.name!r}, {self.size})"


# Set by ``kiln.parallel.vma``: ``hook(trace, prim, args, params, kinds)`` computes a
# primitive's outputs on a manual axis (shard_map's emulation) when an operand is typed
# reduced/unreduced there, or the primitive is one of ``ur_prims`` (the casts and
# collectives of those types), and records the outputs' types on them.
ur_hook: list = [None]
ur_tag: list = [None]       # ``tag_outputs(trace, name, params, args, kinds, outs)``
# ``check(name, args)``: JAX's varying-axes check of an operation's operands when the
# option ``jax_auto_pcast`` is off (None while it is on: nothing to check)
vma_check: list = [None]
ur_prims: set = set()


class _AxisEnv:
    """The stack of ``(name, size)`` of the named axes in scope, for abstract evaluation of
    collectives: one stack per thread, as the trace state (a thread tracing under
    ``vmap(..., axis_name='i')`` binds ``'i'`` for itself only; before, every thread saw
    it, and a second thread's own ``'i'`` of another size could be found instead). The
    list operations the binders use: ``append``/``extend``, ``pop``, ``del env[i:]``,
    iteration (``reversed`` too), ``len``, truth. A thread acting for another (a device
    thread of pmap, a background build) takes that thread's axes with :func:`bound_axes`.
    """

    def __init__(self):
        self._tls = threading.local()

    @property
    def _stack(self) -> list:
        stack = getattr(self._tls, "stack", None)
        if stack is None:
            stack = self._tls.stack = []
        return stack

    def append(self, item) -> None:
        self._stack.append(item)

    def extend(self, items) -> None:
        self._stack.extend(items)

    def pop(self, index: int = -1):
        return self._stack.pop(index)

    def __delitem__(self, index) -> None:
        del self._stack[index]

    def __getitem__(self, index):
        return self._stack[index]

    def __iter__(self):
        return iter(list(self._stack))

    def __reversed__(self):
        return reversed(list(self._stack))

    def __len__(self) -> int:
        return len(self._stack)

    def __bool__(self) -> bool:
        return bool(self._stack)

    def __repr__(self) -> str:
        return f"axis_env({self._stack!r})"

    def snapshot(self) -> tuple:
        """This thread's axes, to hand to a thread acting for it (:func:`bound_axes`)."""
        return tuple(self._stack)


axis_env = _AxisEnv()


@contextlib.contextmanager
def bound_axes(snapshot: tuple):
    """Run the body with this thread's named axes set to ``snapshot`` (another thread's
    :meth:`_AxisEnv.snapshot`), then put its own back."""
    saved = axis_env._stack
    axis_env._tls.stack = list(snapshot)
    try:
        yield
    finally:
        axis_env._tls.stack = saved


# Axis sizes bound for the calling thread only: a device thread of pmap/shard_map
# (``kiln.parallel.spmd``) sets ``thread_axes.sizes`` to its mesh, so programs it traces
# or compiles while running (a nested jit's first call) see the mesh's axis names.
thread_axes = threading.local()


def axis_size(name) -> int:
    for n, size in reversed(axis_env):
        if n == name:
            return size
    sizes = getattr(thread_axes, "sizes", None)
    if sizes is not None and name in sizes:
        return sizes[name]
    raise NameError(f"Found an unbound axis name: {name}. The axis must be bound by an enclosing "
                    "vmap(..., axis_name=...), pmap or shard_map.")


def _drop_dim(sharding, d: int, ndim: int):
    """A type's sharding without dimension ``d`` (the mapped one)."""
    spec = sharding.spec
    parts = [spec[i] if i < len(spec) else None for i in range(ndim)]
    del parts[d]
    return sharding.update(spec=type(spec)(*parts, reduced=spec.reduced,
                                          unreduced=spec.unreduced))


def _size_one_untyped() -> bool:
    """``jax_remove_size_one_mesh_axis_from_type``: a manual axis of size 1 is left out
    of the types."""
    from kiln.config import config
    return bool(config.jax_remove_size_one_mesh_axis_from_type)


class BatchTracer(Tracer):
    # ``ur``: under shard_map's emulation (a manual axis), ``'unreduced'`` for a mapped
    # value holding the partials of a sum along the axis, ``'reduced'`` for an unmapped
    # one typed reduced (``bdim`` None); None otherwise (mapped: varying)
    __slots__ = ("val", "bdim", "ur")

    def __init__(self, trace, val, bdim, ur=None):
        self._trace = trace
        self.val = val
        self.bdim = bdim
        self.ur = ur

    @property
    def aval(self):
        a = get_aval(self.val)
        if self.bdim is None:
            shape = a.shape
        else:
            shape = a.shape[:self.bdim] + a.shape[self.bdim + 1:]
        if type(a) is AbstractRef:
            return a.update(inner_aval=a.inner_aval.update(shape=shape))
        out = a.update(shape=shape)
        tsh = getattr(a, "_tsh", None)
        if tsh is not None and self.bdim is not None:
            out = out.with_type_sharding(_drop_dim(tsh, self.bdim, len(a.shape)))
        if self._trace.axis_data.manual and (self.bdim is not None or self.ur) and not (
                self._trace.axis_data.size == 1 and _size_one_untyped()):
            mat, name = out.mat, {self._trace.axis_data.name}
            if self.ur == "unreduced":
                mat = mat.update(unreduced=mat.unreduced | name)
            elif self.ur == "reduced":
                mat = mat.update(reduced=mat.reduced | name)
            else:
                mat = mat.update(varying=mat.varying | name)
            out = out.with_mat(mat)
        return out

    def _short_repr(self):
        return f"VmapTracer(aval={aval_str(self.aval)}, batched={aval_str(get_aval(self.val))})"


class BatchTrace(Trace):
    __slots__ = ("axis_data",)

    def __init__(self, axis_data: AxisData, parent=None):
        super().__init__(parent)
        self.axis_data = axis_data

    def to_val_dim(self, x):
        if isinstance(x, BatchTracer) and x._trace is self:
            return x.val, x.bdim
        if isinstance(x, Tracer):
            check_foreign_tracer(self, x)
        return x, None

    def process_primitive(self, prim, args, params):
        if self.axis_data.manual and ur_hook[0] is not None and vma_check[0] is not None:
            vma_check[0](prim.name, args)
        if self.axis_data.manual and ur_hook[0] is not None:
            kinds = [x.ur if isinstance(x, BatchTracer) and x._trace is self else None
                     for x in args]
            if any(kinds) or prim.name in ur_prims:
                return ur_hook[0](self, prim, args, params, kinds)
        return self.process_plain(prim, args, params)

    def process_plain(self, prim, args, params):
        vals, dims = [], []
        for x in args:
            v, d = self.to_val_dim(x)
            vals.append(v)
            dims.append(d)
        if (all(d is None for d in dims) and prim not in collective_prims
                and prim not in always_batch
                and not (self.axis_data.name is not None
                         and _params_use_axis(params, self.axis_data.name))):
            with _set_trace(self.parent):
                return prim.bind(*vals, **params)
        rule = batch_rules.get(prim)
        if rule is None:
            raise NotImplementedError(f"Batching rule for '{prim.name}' not implemented")
        if prim.array_impl:     # a library's rule: JAX passes tuples
            vals, dims = tuple(vals), tuple(dims)
        with _set_trace(self.parent):
            out, out_dim = rule(self.axis_data, vals, dims, **params)
        if prim.multiple_results:
            return [self.wrap(o, d) for o, d in zip(out, out_dim)]
        return self.wrap(out, out_dim)

    def wrap(self, val, dim):
        if dim is None:
            return val
        return BatchTracer(self, val, dim)

    def _ur_kinds(self, args):
        if not self.axis_data.manual or ur_tag[0] is None:
            return None
        kinds = [x.ur if isinstance(x, BatchTracer) and x._trace is self else None
                 for x in args]
        return kinds if any(kinds) else None

    def process_custom_jvp_call(self, fun, jvp, args, *, symbolic_zeros=False):
        kinds = self._ur_kinds(args)
        outs = self._custom_jvp_call(fun, jvp, args, symbolic_zeros)
        if kinds is None:
            return outs
        return ur_tag[0](self, "custom_jvp_call", {}, args, kinds, list(outs))

    def process_custom_vjp_call(self, fun, fwd, bwd, args, out_trees, *, symbolic_zeros=False):
        kinds = self._ur_kinds(args)
        outs = self._custom_vjp_call(fun, fwd, bwd, args, out_trees, symbolic_zeros)
        if kinds is None:
            return outs
        return ur_tag[0](self, "custom_vjp_call", {}, args, kinds, list(outs))

    def _custom_jvp_call(self, fun, jvp, args, symbolic_zeros):
        vals, dims = zip(*(self.to_val_dim(x) for x in args)) if args else ((), ())
        if all(d is None for d in dims):
            try:
                return custom_jvp_call(self.parent, fun, jvp, list(vals),
                                       symbolic_zeros=symbolic_zeros)
            except UnexpectedTracerError as e:
                if not self._closed_over(e):
                    raise
            # The function or its rule closes over a value this vmap batches: batch the
            # call as one with batched arguments (as JAX batches every such call).
        return custom_rules.rule("batch_custom_jvp")(self, fun, jvp, list(vals), list(dims),
                                                     symbolic_zeros)

    def _custom_vjp_call(self, fun, fwd, bwd, args, out_trees, symbolic_zeros):
        vals, dims = zip(*(self.to_val_dim(x) for x in args)) if args else ((), ())
        if all(d is None for d in dims):
            try:
                return custom_vjp_call(self.parent, fun, fwd, bwd, list(vals), out_trees,
                                       symbolic_zeros=symbolic_zeros)
            except UnexpectedTracerError as e:
                if not self._closed_over(e):
                    raise
        return custom_rules.rule("batch_custom_vjp")(self, fun, fwd, bwd, list(vals),
                                                     list(dims), out_trees, symbolic_zeros)

    def _closed_over(self, err) -> bool:
        """Whether ``err`` is about one of this trace's tracers (closed over by a custom
        function whose arguments this trace does not batch)."""
        t = getattr(err, "tracer", None)
        return isinstance(t, BatchTracer) and t._trace is self and self.alive


def batch_flat_in(trace: BatchTrace, fun, vals, dims):
    """``batch_flat`` with ``trace`` itself as the batching trace, made a child of the
    current trace while ``fun`` runs, so that values ``fun`` closes over that ``trace``
    batches are its own (JAX's subtrace of the same tag). Returns ``(vals, dims)``."""
    saved, was_alive = trace.parent, trace.alive
    trace.parent = current_trace()
    # ``fun`` may run after the vmap that made ``trace`` returned (a custom_vjp's fwd,
    # traced when it is differentiated, e.g. inside a scan's JVP): the trace is live again
    # while it runs, so the tracers it makes are not taken for leaked ones
    trace.alive = True
    try:
        ins = [v if d is None else BatchTracer(trace, v, d) for v, d in zip(vals, dims)]
        with _set_trace(trace):
            outs = fun(*ins)
        res = [trace.to_val_dim(o) for o in outs]
    finally:
        trace.parent = saved
        trace.alive = was_alive
    return [v for v, _ in res], [d for _, d in res]


def _collective_axis_names(eqn) -> tuple:
    names = eqn.params.get("axes", eqn.params.get("axis_name"))
    return tuple(names) if isinstance(names, (tuple, list)) else (names,)


def _params_use_axis(params, name) -> bool:
    """Whether a sub-jaxpr in ``params`` (of jit, cond, scan, ...) runs a collective over the
    axis ``name``: then the primitive must be batched even when no operand is (its result
    can depend on the position, e.g. ``axis_index``)."""
    from kiln.core.jaxpr import ClosedJaxpr, Jaxpr
    for p in params.values():
        for sub in (p if isinstance(p, (tuple, list)) else (p,)):
            if isinstance(sub, ClosedJaxpr):
                sub = sub.jaxpr
            if isinstance(sub, Jaxpr):
                for eqn in sub.eqns:
                    if eqn.primitive in collective_prims:
                        if name in _collective_axis_names(eqn):
                            return True
                    elif _params_use_axis(eqn.params, name):
                        return True
    return False


# ----------------------------------------------------------------------------------------------
# Helpers for batching rules (lax primitives, installed by kiln.lax: ``lax_ops``).

def moveaxis(x, src: int, dst: int):
    nd = get_aval(x).ndim
    src, dst = src % nd, dst % nd
    if src == dst:
        return x
    perm = [i for i in range(nd) if i != src]
    perm.insert(dst, src)
    return lax_ops.transpose(x, tuple(perm))


def broadcast_batched(x, size: int, axis: int = 0):
    """Insert a new axis of ``size`` at ``axis`` (for an unbatched operand)."""
    aval = get_aval(x)
    shape = list(aval.shape)
    shape.insert(axis, size)
    dims = tuple(i for i in range(len(shape)) if i != axis)
    return lax_ops.broadcast_in_dim(x, tuple(shape), dims)


def bdim_at_front(x, bdim, size: int):
    if bdim is None:
        return broadcast_batched(x, size, 0)
    return moveaxis(x, bdim, 0)


def matchaxis(x, src, dst, size: int):
    """Move or create the batch axis of ``x`` so it sits at ``dst``."""
    if src is None:
        return broadcast_batched(x, size, dst)
    return moveaxis(x, src, dst)


def vectorized_batcher(prim):
    """For elementwise unary primitives: apply directly, the batch dim stays where it is."""
    def rule(axis_data, vals, dims, **params):
        (x,), (d,) = vals, dims
        return prim.bind(x, **params), d
    batch_rules[prim] = rule
    return rule


def broadcast_batcher(prim):
    """For elementwise n-ary primitives whose operands all have the same shape."""
    def rule(axis_data, vals, dims, **params):
        batched = [(v, d) for v, d in zip(vals, dims) if d is not None]
        d0 = batched[0][1]
        if (all(d == d0 for _, d in batched) and all(d is not None for d in dims)
                and len({get_aval(v).ndim for v in vals}) == 1):
            out = prim.bind(*vals, **params)
            return out, ([d0] * len(out) if prim.multiple_results else d0)
        size = axis_data.size
        # The batch axis goes in front. Unbatched rank-0 operands broadcast as they are;
        # other unbatched operands get a leading size-1 axis and batched per-example
        # scalars trailing size-1 axes: the primitive broadcasts size-1 dimensions.
        per = [get_aval(v).shape if d is None else
               get_aval(v).shape[:d] + get_aval(v).shape[d + 1:] for v, d in zip(vals, dims)]
        rank = max(len(s) for s in per)
        args = []
        for v, d, s in zip(vals, dims, per):
            if d is None:
                if s != ():
                    v = lax_ops.broadcast_in_dim(v, (1,) + s, tuple(range(1, len(s) + 1)))
            else:
                v = moveaxis(v, d, 0)
                if len(s) < rank:
                    v = lax_ops.broadcast_in_dim(v, (size,) + (1,) * rank, (0,))
            args.append(v)
        out = prim.bind(*args, **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)
    batch_rules[prim] = rule
    prim.broadcasts_size_one = True     # the compiler makes the broadcasts explicit
    return rule


def batch_flat(fun, vals, dims, axis_data: AxisData, out_dims_req=None):
    """Run flat ``fun`` vmapped; returns outputs with the batch axis at ``out_dims_req``
    (a list; ``None`` entries leave an unbatched output unbatched)."""
    trace = BatchTrace(axis_data)
    ins = [v if d is None else BatchTracer(trace, v, d) for v, d in zip(vals, dims)]
    axis_env.append((axis_data.name, axis_data.size))
    try:
        with _set_trace(trace), transform_name_stack("vmap"):
            outs = fun(*ins)
        res_vals, res_dims = [], []
        for o in outs:
            v, d = trace.to_val_dim(o)
            res_vals.append(v)
            res_dims.append(d)
    finally:
        axis_env.pop()
        trace.alive = False
    if leaks.enabled():
        ref = weakref.ref(trace)
        del trace
        ins = outs = o = None  # noqa: F841  (drop this trace's tracers before the check)
        leaks.check_leaks(ref)
    if out_dims_req is None:
        return res_vals, res_dims
    final = []
    for v, d, want in zip(res_vals, res_dims, out_dims_req):
        if want is None:
            if d is not None:
                raise ValueError(
                    "vmap has mapped output but out_axes is None: an output that depends on "
                    "the mapped input cannot be returned unmapped.")
            final.append(v)
        else:
            nd = get_aval(v).ndim + (1 if d is None else 0)
            final.append(matchaxis(v, d, want % nd, axis_data.size))
    return final, list(out_dims_req)


# ----------------------------------------------------------------------------------------------
# JAX's names (``jax.interpreters.batching``): the same table kiln's BatchTrace reads, and
# the two older rule signatures JAX still accepts, adapted to it on registration.

#: ``rule(axis_data, vals, dims, **params) -> (out, out_dims)``: kiln's own signature.
fancy_primitive_batchers = batch_rules


def _all_unbatched(prim, vals, params):
    out = prim.bind(*vals, **params)
    return (out, [None] * len(out)) if prim.multiple_results else (out, None)


class _PrimitiveBatchers:
    """``batching.primitive_batchers``: rules ``rule(vals, dims, **params)`` (no axis data).
    Registering one stores it, adapted, in :data:`fancy_primitive_batchers`."""

    def __setitem__(self, prim, rule):
        def adapted(axis_data, vals, dims, **params):
            if all(d is None for d in dims):
                return _all_unbatched(prim, vals, params)
            # JAX passes tuples (rules use them as vmap axis specs).
            return rule(tuple(vals), tuple(dims), **params)
        adapted.__wrapped__ = rule
        batch_rules[prim] = adapted

    def __getitem__(self, prim):
        rule = batch_rules[prim]
        inner = getattr(rule, "__wrapped__", None)
        if inner is not None and getattr(rule, "_kind", "plain") == "plain":
            return inner

        def plain(vals, dims, **params):
            size = next(get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
            return rule(AxisData(None, size), vals, dims, **params)
        return plain

    def __delitem__(self, prim):
        del batch_rules[prim]

    def __contains__(self, prim):
        return prim in batch_rules

    def get(self, prim, default=None):
        return self[prim] if prim in batch_rules else default


class _AxisPrimitiveBatchers:
    """``batching.axis_primitive_batchers``: rules
    ``rule(axis_size, axis_name, trace_type, vals, dims, **params)``."""

    def __setitem__(self, prim, rule):
        def adapted(axis_data, vals, dims, **params):
            return rule(axis_data.size, axis_data.name, None, tuple(vals), tuple(dims),
                        **params)
        adapted.__wrapped__ = rule
        adapted._kind = "axis"
        batch_rules[prim] = adapted

    def __delitem__(self, prim):
        del batch_rules[prim]

    def __contains__(self, prim):
        return prim in batch_rules


primitive_batchers = _PrimitiveBatchers()
axis_primitive_batchers = _AxisPrimitiveBatchers()


def broadcast(x, sz: int, axis: int, mesh_axis=None):
    """``x`` with a new axis of size ``sz`` inserted at ``axis`` (JAX's
    ``batching.broadcast``)."""
    del mesh_axis
    return broadcast_batched(x, sz, axis)


def _same_bdim(vals, dims, size):
    """All operands with their batch axis at the first batched operand's position."""
    d0 = next(d for d in dims if d is not None)
    return [matchaxis(v, d, d0, size) if d != d0 else v for v, d in zip(vals, dims)], d0


def defvectorized(prim):
    """Register the rule of a primitive that maps over leading axes as they are (an
    elementwise operation on operands of one shape): apply it with the batch axes aligned."""
    def rule(axis_data, vals, dims, **params):
        if all(d is None for d in dims):
            return _all_unbatched(prim, vals, params)
        vals, d0 = _same_bdim(vals, dims, axis_data.size)
        out = prim.bind(*vals, **params)
        return out, ([d0] * len(out) if prim.multiple_results else d0)
    batch_rules[prim] = rule


def defbroadcasting(prim):
    """Register the rule of an elementwise primitive whose operands broadcast (rank-0
    operands and size-1 axes): the batch axis goes in front."""
    broadcast_batcher(prim)


def defreducer(prim):
    """Register the rule of a reduction with an ``axes`` parameter: the reduced axes are
    renumbered around the batch axis, which stays (shifted past the removed axes)."""
    def rule(axis_data, vals, dims, *, axes, **params):
        if all(d is None for d in dims):
            return _all_unbatched(prim, vals, dict(params, axes=axes))
        vals, d = _same_bdim(vals, dims, axis_data.size)
        nd = get_aval(vals[0]).ndim - 1
        axes = tuple(a % nd if nd else a for a in axes)
        new_axes = tuple(a + (a >= d) for a in axes)
        out = prim.bind(*vals, axes=new_axes, **params)
        out_d = d - sum(1 for a in new_axes if a < d)
        return out, ([out_d] * len(out) if prim.multiple_results else out_d)
    batch_rules[prim] = rule


# Types registered with ``register_vmappable`` (JAX's protocol for containers that vmap maps
# with handlers of their own: ``to_elt``/``from_elt``): type -> (spec_type, axis_size_type,
# to_elt, from_elt, make_iota).
vmappables: dict = {}
spec_types: set = set()


def register_vmappable(data_type: type, spec_type: type, axis_size_type: type, to_elt,
                       from_elt, make_iota=None) -> None:
    """Register a container type that ``vmap`` maps through handlers (JAX's
    ``batching.register_vmappable``). kiln records the registration; its ``vmap`` does not
    drive these handlers (they take JAX's internal trace objects), so mapping over a value
    of a registered type raises ``NotImplementedError`` naming the type."""
    vmappables[data_type] = (spec_type, axis_size_type, to_elt, from_elt, make_iota)
    spec_types.add(spec_type)


def unregister_vmappable(data_type: type) -> None:
    """Remove a registration made by :func:`register_vmappable`."""
    entry = vmappables.pop(data_type, None)
    if entry is not None and not any(e[0] is entry[0] for e in vmappables.values()):
        spec_types.discard(entry[0])


def is_vmappable(x) -> bool:
    return type(x) in vmappables
