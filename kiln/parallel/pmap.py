"""``pmap``: a function mapped over an axis of its arguments, one device per position.

Called eagerly (no enclosing transformation), ``pmap`` traces the function once per
argument signature with the per-device shapes and the axis name bound, then runs that
program on each device's worker thread over its slice of the inputs
(``kiln.parallel.spmd``); collectives are rendezvous between the devices. The outputs
are stacked into sharded Arrays (``NamedSharding`` over a 1-D mesh, as JAX 0.10).

Under a transformation (``jit``, ``grad``, ``vmap``, an enclosing ``pmap``'s trace) a
``pmap`` means the same as ``vmap(..., axis_name=...)`` and is computed as one, so
``grad(pmap(f))``, ``pmap(grad(f))``, ``jit(pmap(f))`` and nested ``pmap`` work and
give the values JAX defines (JAX 0.10 no longer nests ``pmap``; kiln does).
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

from kiln._physical_tree import tree_flatten, tree_leaves, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln._wraps import wraps as _wraps
from kiln.array import Array, make_array, to_array
from kiln.core import trace as core
from kiln.core.trace import Tracer
from kiln.interpreters import batching
from kiln.parallel import spmd
from kiln.stages import Compiled, Lowered, check_in_tree
from kiln.transformations import _arg_names, _check_arg, _flatten_axes, vmap

_DEFAULT_AXIS = "_internal_pmap_axis_name"


def _as_tuple(x, what: str) -> tuple:
    if x is None:
        return ()
    if isinstance(x, int):
        return (x,)
    try:
        return tuple(int(i) for i in x)
    except TypeError:
        raise TypeError(f"pmap {what} must be an int or a sequence of ints, got {x!r}") \
            from None


@api_boundary
def pmap(fun: Callable, axis_name=None, *, in_axes=0, out_axes=0,
         static_broadcasted_argnums=(), devices=None, backend=None, axis_size=None,
         donate_argnums=(), global_arg_shapes=None) -> Callable:
    """Parallel map: ``fun`` runs on one device per position of the mapped axis.

    Args:
      fun: the function to map; it sees one slice of each mapped argument.
      axis_name: a name for the mapped axis, for collectives (``lax.psum(x, name)``).
      in_axes: per positional argument (a tree prefix), the axis to map or ``None`` to
        broadcast; keyword arguments are mapped over axis 0.
      out_axes: per output (a tree prefix), where the mapped axis goes; ``None``
        returns device 0's value (for outputs equal on every device).
      static_broadcasted_argnums: positional arguments that are static (hashable,
        part of the cache key) and given whole to every device.
      devices: the devices to run on (default: the first ``size`` of ``kiln.devices()``).
      backend: ``"cpu"`` or ``None``.
      axis_size: the mapped size when no argument is mapped.
      donate_argnums: positional arguments whose buffers the caller gives up: they are
        deleted after the call, as in JAX.

    Returns:
      The mapped function. Its outputs are Arrays sharded over the devices used.
    """
    if not callable(fun):
        raise TypeError(f"pmap requires a callable, got {fun!r}")
    if backend not in (None, "cpu"):
        raise ValueError(f"Unknown backend {backend!r} for pmap: kiln has 'cpu'")
    if global_arg_shapes is not None:
        raise ValueError("pmap's global_arg_shapes was removed from JAX; pass full arrays")
    static = _as_tuple(static_broadcasted_argnums, "static_broadcasted_argnums")
    donate = set(_as_tuple(donate_argnums, "donate_argnums"))
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    cache: dict = {}

    @_wraps(fun)
    @api_boundary
    def pmapped(*args, **kwargs):
        n = len(args)
        for i in static:
            if not -n <= i < n:
                raise ValueError(f"pmapped function has static_broadcasted_argnums={static} "
                                 f"but was called with only {n} positional argument"
                                 f"{'s' if n != 1 else ''}. All static broadcasted arguments "
                                 "must be passed positionally.")
        static_pos = {i % n for i in static}
        statics = tuple(args[i] for i in sorted(static_pos))
        for i, s in zip(sorted(static_pos), statics):
            try:
                hash(s)
            except TypeError:
                raise ValueError(f"Non-hashable static arguments are not supported. An error "
                                 f"occurred while trying to hash an object of type {type(s)}, "
                                 f"{s!r} (static_broadcasted_argnums {i}). Make the argument "
                                 "hashable (a tuple instead of a list), or pass it as a "
                                 "traced argument.") from None
        dyn_pos = [i for i in range(n) if i not in static_pos]
        if isinstance(in_axes, tuple):
            if len(in_axes) != n:
                raise ValueError(f"pmap in_axes must be an int, None, or a tuple of entries "
                                 f"corresponding to the positional arguments passed to the "
                                 f"function, but got len(in_axes)={len(in_axes)}, "
                                 f"len(args)={n}")
            dyn_in_axes = tuple(in_axes[i] for i in dyn_pos)
        else:
            dyn_in_axes = tuple(in_axes for _ in dyn_pos)
        dyn_args = [args[i] for i in dyn_pos]

        def call(*dargs, **kw):
            full = list(args)
            for i, a in zip(dyn_pos, dargs):
                full[i] = a
            return fun(*full, **kw)

        leaves = tree_leaves((dyn_args, kwargs))
        nested = (core.current_trace() is not core.eval_trace
                  or any(isinstance(x, Tracer) for x in leaves)
                  or spmd.current_context() is not None)
        if nested:
            # Inside a transformation: the same values as vmap with the axis name bound.
            # The devices it stands for are still needed: nested pmaps multiply.
            size = _nested_size(dyn_args, kwargs, dyn_in_axes, axis_size)
            _check_devices(size, devices)
            mapped = vmap(_entered(call, size), in_axes=dyn_in_axes, out_axes=out_axes,
                          axis_name=axis_name, axis_size=axis_size)
            return mapped(*dyn_args, **kwargs)
        out = _run(call, fun, dyn_args, kwargs, dyn_in_axes, dyn_pos, statics,
                   axis_name, axis_size, out_axes, devices, cache)
        for i in donate:
            if i < n and i not in static_pos:
                for leaf in tree_leaves(args[i]):
                    if type(leaf) is Array:
                        leaf.delete()
        return out

    pmapped.lower = lambda *args, **kwargs: PmapLowered(pmapped, args, kwargs)
    return pmapped


class PmapLowered(Lowered):
    """``pmap(f).lower(*args)``: the mapped computation staged for these arguments' types
    (``jax.stages.Lowered`` for pmap). ``as_text()`` prints kiln's program (a jaxpr of the
    whole mapped computation; kiln builds no HLO); ``compile()`` gives the executable."""

    def __init__(self, pmapped, args, kwargs):
        from kiln.core.avals import ShapedArray
        from kiln.jitting import make_jaxpr
        from kiln.shape_eval import ShapeDtypeStruct
        # Abstract arguments (``ShapeDtypeStruct``, ``core.ShapedArray``) stand for arrays
        # of their type, as in ``jit(f).lower``.
        leaves, in_tree = tree_flatten((args, kwargs))
        leaves = [ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type)
                  if isinstance(x, ShapedArray) else x for x in leaves]
        args, kwargs = tree_unflatten(in_tree, leaves)
        jaxpr, shapes = make_jaxpr(lambda a, k: pmapped(*a, **k), return_shape=True)(
            args, kwargs)
        super().__init__(jaxpr, in_tree, tree_flatten(shapes)[1],
                         getattr(pmapped, "__name__", "pmap"))
        self._pmapped = pmapped
        self._leaf_avals = [ShapedArray(x.shape, x.dtype) if isinstance(x, ShapeDtypeStruct)
                            else to_array(x).aval if not isinstance(x, Array) else x.aval
                            for x in leaves]
        self._jaxpr = jaxpr

    @property
    def in_avals(self):
        """The arguments' abstract values (the unmapped, per-call types): a pytree
        ``(args, kwargs)``, as ``Lowered.in_avals``."""
        return tree_unflatten(self.in_tree, self._leaf_avals)

    def as_text(self, dialect=None, **_kw) -> str:
        return str(self._jaxpr)

    def compile(self, compiler_options=None) -> PmapCompiled:
        from kiln.stages import _check_compiler_options
        _check_compiler_options(compiler_options)
        return PmapCompiled(self)


class PmapCompiled(Compiled):
    """The executable of a :class:`PmapLowered`: called with arguments of the lowered
    types (others raise ``TypeError`` as JAX's ``Compiled``)."""

    def __init__(self, lowered: PmapLowered):
        super().__init__(lowered)
        self._lowered = lowered

    def as_text(self) -> str:
        return self._lowered.as_text()

    def runtime_executable(self):
        """What runs (``jax.stages.Compiled.runtime_executable``, for debugging): the
        staged jaxpr of the mapped computation."""
        return self._lowered._jaxpr

    @api_boundary
    def __call__(self, *args, **kwargs):
        leaves, tree = tree_flatten((args, kwargs))
        lowered = self._lowered
        check_in_tree(lowered.in_tree, tree)
        for x, a in zip(leaves, lowered._leaf_avals):
            xa = x.aval if isinstance(x, (Array, Tracer)) else to_array(x).aval
            if xa.shape != a.shape or xa.dtype != a.dtype:
                raise TypeError("Argument types differ from the types for which this "
                                f"computation was compiled: got {xa.str_short()}, expected "
                                f"{a.str_short()}")
        return lowered._pmapped(*args, **kwargs)


_tracing = threading.local()


def _enclosing() -> int:
    """The number of devices the ``pmap``s being traced in this thread stand for."""
    return math.prod(getattr(_tracing, "sizes", ()))


def _entered(call, size: int):
    """``call`` with ``size`` on the stack of enclosing pmap sizes while it runs."""
    def inner(*a, **k):
        stack = _tracing.__dict__.setdefault("sizes", [])
        stack.append(size)
        try:
            return call(*a, **k)
        finally:
            stack.pop()
    return inner


def _check_devices(size, devices) -> None:
    from kiln.devices import local_devices
    if size is None:
        return
    pool = list(devices) if devices is not None else local_devices()
    need = size * _enclosing()
    if need > len(pool):
        raise ValueError(f"compiling computation that requires {need} logical devices, but "
                         f"only {len(pool)} XLA devices are available (num_replicas={need}). "
                         f"Set config.update('jax_num_cpu_devices', N) (or "
                         f"KILN_NUM_CPU_DEVICES) before using kiln to have more.")


def _nested_size(dyn_args, kwargs, dyn_in_axes, axis_size):
    """The mapped size of a ``pmap`` called under a transformation (``None`` when no
    argument is mapped and no ``axis_size`` is given: ``vmap`` reports that)."""
    if axis_size is not None:
        return int(axis_size)
    flat, in_tree = tree_flatten((tuple(dyn_args), kwargs))
    axes = _flatten_axes("pmap in_axes", in_tree, (dyn_in_axes, {k: 0 for k in kwargs}),
                         len(flat))
    for x, ax in zip(flat, axes):
        if ax is not None and np.ndim(x) > 0:
            return np.shape(x)[ax]
    return None


def _run(call, fun, dyn_args, kwargs, dyn_in_axes, dyn_pos, statics, axis_name, axis_size,
         out_axes, devices, cache):
    from kiln.devices import local_devices
    from kiln.interpreters.pjit import trace_closed
    from kiln.sharding import Mesh, NamedSharding, PartitionSpec

    dyn_args = tuple(dyn_args)
    flat, in_tree = tree_flatten((dyn_args, kwargs))
    axes = _flatten_axes("pmap in_axes", in_tree,
                         (dyn_in_axes, {k: 0 for k in kwargs}), len(flat))
    names = _arg_names(fun, max(dyn_pos, default=-1) + 1)
    arrays, local_avals, norm_axes, sizes = [], [], [], []
    for x, ax in zip(flat, axes):
        _check_arg(x, "pmap arguments")
        a = x if type(x) is Array else to_array(x)
        aval = a.aval
        arrays.append(a)
        if ax is None:
            local_avals.append(aval)
            norm_axes.append(None)
            continue
        if not -aval.ndim <= ax < aval.ndim:
            raise ValueError(f"pmap was requested to map its argument along axis {ax}, which "
                             f"implies that its rank should be at least "
                             f"{ax + 1 if ax >= 0 else -ax}, but is only {aval.ndim} (its "
                             f"shape is {aval.shape})")
        ax %= aval.ndim
        norm_axes.append(ax)
        sizes.append(aval.shape[ax])
        local_avals.append(aval.update(shape=aval.shape[:ax] + aval.shape[ax + 1:]))
    size_set = set(sizes) | ({int(axis_size)} if axis_size is not None else set())
    if not size_set:
        raise ValueError("pmap requires at least one argument with a mapped axis (an in_axes "
                         "entry that is not None), or axis_size=")
    if len(size_set) > 1:
        lines = []
        leaf_owner = _owners(dyn_args, kwargs, names, dyn_pos)
        for x, ax, owner in zip(arrays, norm_axes, leaf_owner):
            if ax is not None:
                lines.append(f"  * one axis had size {x.shape[ax]}: axis {ax} of argument "
                             f"{owner} of type {x.aval.str_short()};")
        raise ValueError("pmap got inconsistent sizes for array axes to be mapped:\n"
                         + "\n".join(lines))
    size = size_set.pop()
    from kiln import distributed
    world = distributed.comm() if devices is None else None
    pool = list(devices) if devices is not None else local_devices()
    if size > len(pool):
        raise ValueError(f"compiling computation that requires {size} logical devices, but "
                         f"only {len(pool)} XLA devices are available (num_replicas={size}). "
                         f"Set config.update('jax_num_cpu_devices', N) (or "
                         f"KILN_NUM_CPU_DEVICES) before using kiln to have more.")
    name = _DEFAULT_AXIS if axis_name is None else axis_name
    key = (tuple((a.shape, a.dtype, a.weak_type) for a in local_avals), in_tree, statics,
           size, name)
    # Over several processes (kiln.distributed) the mapped axis spans every process's
    # devices: this process's slice is positions [p * size, (p + 1) * size).
    procs, first = 1, 0
    if world is not None:
        procs, first = world.Get_size(), world.Get_rank() * size
    entry = cache.get(key)
    if entry is None and world is not None:
        sizes_everywhere = world.allgather(size)
        if len(set(sizes_everywhere)) != 1:
            raise ValueError(f"pmap over {procs} processes needs the same mapped size in "
                             f"each; got {sizes_everywhere}")
    global_size = size * procs
    if entry is None:
        store = {}

        def flat_fun(*xs):
            a, k = tree_unflatten(in_tree, list(xs))
            out = call(*a, **k)
            o_leaves, o_tree = tree_flatten(out)
            store["tree"] = o_tree
            return [to_array(o) if not isinstance(o, (Array, Tracer)) else o for o in o_leaves]

        batching.axis_env.append((name, global_size))
        try:
            closed, tconsts = trace_closed(_entered(flat_fun, size), local_avals)
        finally:
            batching.axis_env.pop()
        assert not tconsts, "pmap traced at top level cannot close over tracers"
        ordered = _ordered_effects(closed.jaxpr)
        if ordered and global_size > 1:
            raise ValueError("The following ordered effects are not supported for more "
                             f"than 1 device: {ordered}")
        entry = cache[key] = (closed, store["tree"])
    closed, out_tree = entry
    devs = pool[:size]
    placements = [(d, {name: first + i}) for i, d in enumerate(devs)]
    per_device = []
    values = [np.asarray(a._value) for a in arrays]
    for i in range(size):
        per_device.append([v if ax is None else v[(slice(None),) * ax + (i,)]
                           for v, ax in zip(values, norm_axes)])
    results = spmd.run_spmd(closed, {name: global_size}, placements, per_device, name="pmap",
                            world=world)
    o_axes = _flatten_axes("pmap out_axes", out_tree, out_axes, out_tree.num_leaves)
    mesh = Mesh(np.array(devs, dtype=object), (name,))
    outs = []
    for k, (oa, aval) in enumerate(zip(o_axes, closed.out_avals)):
        if oa is None:
            v = np.asarray(results[0][k])
            spec = PartitionSpec()
        else:
            nd = aval.ndim + 1
            if not -nd <= oa < nd:
                raise ValueError(f"pmap out_axes specification {oa} is out of bounds for an "
                                 f"output of rank {nd}")
            oa %= nd
            v = np.stack([np.asarray(r[k]) for r in results], axis=oa)
            spec = PartitionSpec(*([None] * oa + [name]))
        arr = make_array(v.astype(aval.dtype, copy=False), aval.weak_type)
        arr._sharding = NamedSharding(mesh, spec)
        outs.append(arr)
    return tree_unflatten(out_tree, outs)


def _ordered_effects(jaxpr) -> list:
    """The ordered effects of ``jaxpr`` (callbacks with ``ordered=True``, sub-jaxprs
    included), named as ``ordered <primitive>``: their order across devices is undefined,
    so JAX refuses them in a ``pmap`` over more than one device."""
    from kiln.core.jaxpr import sub_jaxprs
    out = []
    for e in jaxpr.eqns:
        if e.params.get("ordered") is True:
            out.append(f"ordered {e.primitive.name}")
        for sub in sub_jaxprs(e.params):
            out += _ordered_effects(sub)
    return out


def _owners(dyn_args, kwargs, names, dyn_pos) -> list:
    owners = []
    for i, a in zip(dyn_pos, dyn_args):
        owners += [names[i]] * len(tree_leaves(a))
    for k, v in kwargs.items():
        owners += [f"kwarg {k}"] * len(tree_leaves(v))
    return owners
