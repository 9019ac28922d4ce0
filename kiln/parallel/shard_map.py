"""``shard_map``: a function written for one device's block, run on every device of a mesh.

Eagerly, the function is traced once per argument signature with the block shapes and
every mesh axis name bound, and that program runs on each device's worker thread over
its block (``kiln.parallel.spmd``); ``out_specs`` say how the blocks assemble into the
global outputs (Arrays with a ``NamedSharding``). Under a transformation (``jit``,
``grad``, ``vmap``) the same values are computed as nested ``vmap``s, one per mesh axis,
over the blocks laid side by side (so collectives mean the same thing); an output whose
spec omits a mesh axis must then not vary along it, else ``vmap``'s ``ValueError``.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln.array import Array, make_array, to_array
from kiln.core import trace as core
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import batching
from kiln.parallel import global_array, spmd
from kiln.sharding import (
    AbstractMesh,
    Mesh,
    NamedSharding,
    PartitionSpec,
    concrete_named_sharding,
    context_mesh,
)
from kiln.transformations import _check_arg


def _specs_for(what: str, tree, specs, n_leaves: int) -> list:
    """Broadcast a tree prefix of PartitionSpecs (``P`` leaves) to one per leaf."""
    from kiln.transformations import _flatten_axes
    def is_spec(s):
        return isinstance(s, PartitionSpec) or s is None
    s_leaves, s_tree = tree_flatten(specs, is_leaf=is_spec)
    # Replace each spec by a placeholder int so the generic prefix broadcast applies.
    proxy = tree_unflatten(s_tree, list(range(len(s_leaves))))
    try:
        idx = _flatten_axes(f"shard_map {what}", tree, proxy, n_leaves)
    except ValueError:
        raise ValueError(f"shard_map {what} must be a tree prefix of the corresponding "
                         f"value, got {what}={specs} for value tree {tree}.") from None
    out = []
    for i in idx:
        s = s_leaves[i] if i is not None else None
        out.append(PartitionSpec() if s is None else s)
    return out


def _check_spec(spec: PartitionSpec, mesh: Mesh, what: str, where: str) -> None:
    seen: set = set()
    for a in spec.mesh_axes():
        if a not in mesh.axis_names:
            raise ValueError(f"shard_map {what} argument must refer to an axis marked as "
                             f"manual ({frozenset(mesh.axis_names)}), but:\n\n  {what} refers "
                             f"to {a!r} ({where})\n\nCheck the {what} values passed to "
                             "shard_map.")
        if a in seen:
            raise ValueError(f"shard_map {what} {spec!r} ({where}) names mesh axis {a!r} twice; "
                             "each mesh axis may split at most one dimension.")
        seen.add(a)


@api_boundary
def shard_map(f: Callable | None = None, /, *, out_specs, in_specs=None, mesh=None,
              axis_names=frozenset(), check_vma: bool = True, check_rep=None,
              auto=frozenset()) -> Callable:
    """Map ``f`` over the blocks of its arguments, one block per device of ``mesh``.

    Args:
      f: a function of the per-device blocks; collectives over mesh axis names
        (``lax.psum(x, 'x')``) combine blocks across devices.
      out_specs: a tree prefix of the outputs, of ``PartitionSpec``s: which mesh axes
        split each output dimension. A mesh axis an output spec omits means the output is
        the same on every device along it.
      in_specs: a tree prefix of the positional arguments, of ``PartitionSpec``s.
      mesh: the device mesh (default: the one set by ``kiln.sharding.set_mesh``).
      axis_names: accepted for compatibility (kiln binds every mesh axis).
      check_vma: accepted; see the module docstring for the check kiln makes.

    Returns:
      The mapped function; eagerly its outputs are Arrays with ``NamedSharding``s.
    """
    if f is None:
        return functools.partial(shard_map, out_specs=out_specs, in_specs=in_specs,
                                 mesh=mesh, axis_names=axis_names, check_vma=check_vma)
    if not callable(f):
        raise TypeError(f"shard_map requires a callable, got {f!r}")
    if check_rep is not None:       # the name before JAX 0.6
        check_vma = bool(check_rep)
    cache: dict = {}

    @api_boundary
    @functools.wraps(f)
    def mapped(*args):
        m = mesh if mesh is not None else context_mesh()
        if isinstance(m, AbstractMesh):     # resolved against the mesh context, as JAX
            m = concrete_named_sharding(NamedSharding(m), "shard_map mesh").mesh
        if m is None:
            raise ValueError("shard_map requires a mesh: pass mesh=, or set one with "
                             "kiln.sharding.set_mesh(mesh) / `with mesh:`.")
        if in_specs is None:
            raise ValueError("shard_map: kiln needs in_specs (JAX infers them from arguments "
                             "whose sharding is explicit).")
        flat, in_tree = tree_flatten(args)
        ispecs = _specs_for("in_specs", in_tree, in_specs if isinstance(in_specs, tuple)
                            or len(args) != 1 else (in_specs,), len(flat))
        for i, (x, s) in enumerate(zip(flat, ispecs)):
            _check_arg(x, "shard_map arguments")
            _check_spec(s, m, "in_specs", f"args leaf {i}")
            a = get_aval(x)
            if len(s) > a.ndim:
                raise ValueError(f"shard_map in_specs {s!r} has {len(s)} entries but args "
                                 f"leaf {i} is {a.str_short()} (rank {a.ndim}).")
            for d in range(a.ndim):
                k = math.prod(m.shape[ax] for ax in s.axes_of(d))
                if a.shape[d] % k:
                    raise ValueError(
                        "shard_map applied to the function "
                        f"'{getattr(f, '__name__', f)}' was given argument arrays with axis "
                        "sizes that are not evenly divisible by the corresponding mesh axis "
                        f"sizes:\n\nThe mesh given has shape {m.axis_sizes} with "
                        f"corresponding axis names {m.axis_names}.\n\nthe passed args leaf "
                        f"{i} of shape {a.str_short()} has dimension {d} of size "
                        f"{a.shape[d]}, split {k} ways by {s!r}.")
        nested = (core.current_trace() is not core.eval_trace
                  or any(isinstance(x, Tracer) for x in flat)
                  or spmd.current_context() is not None)
        if nested:
            return _emulate(f, m, flat, in_tree, ispecs, out_specs)
        return _run(f, m, flat, in_tree, ispecs, out_specs, cache, check_vma)

    return mapped


def _local_shape(shape, spec: PartitionSpec, mesh: Mesh) -> tuple:
    return tuple(n // math.prod(mesh.shape[a] for a in spec.axes_of(d))
                 for d, n in enumerate(shape))


def _global_shape(shape, spec: PartitionSpec, mesh: Mesh) -> tuple:
    return tuple(n * math.prod(mesh.shape[a] for a in spec.axes_of(d))
                 for d, n in enumerate(shape))


def _run(f, mesh: Mesh, flat, in_tree, ispecs, out_specs, cache, check_vma=True):
    from kiln.interpreters.pjit import trace_closed
    multi = global_array.spans_processes(mesh)
    if multi:
        global_array.check_mesh(mesh, "shard_map")
    arrays = [x if type(x) is Array else to_array(x) for x in flat]
    local = [a.aval.update(shape=_local_shape(a.shape, s, mesh))
             for a, s in zip(arrays, ispecs)]
    key = (tuple((a.shape, a.dtype, a.weak_type) for a in local), in_tree,
           tuple(ispecs), mesh)
    entry = cache.get(key)
    if entry is None:
        store = {}

        def flat_fun(*xs):
            out = f(*tree_unflatten(in_tree, list(xs)))
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return [o if isinstance(o, (Array, Tracer)) else to_array(o) for o in leaves]

        for name, size in zip(mesh.axis_names, mesh.axis_sizes):
            batching.axis_env.append((name, size))
        try:
            closed, tconsts = trace_closed(flat_fun, local)
        finally:
            for _ in mesh.axis_names:
                batching.axis_env.pop()
        assert not tconsts
        out_tree = store["tree"]
        ospecs = _specs_for("out_specs", out_tree, out_specs, out_tree.num_leaves)
        for i, s in enumerate(ospecs):
            _check_spec(s, mesh, "out_specs", f"output leaf {i}")
        entry = cache[key] = (closed, out_tree, ospecs)
    closed, out_tree, ospecs = entry
    if multi:
        return _run_processes(closed, mesh, arrays, ispecs, out_tree, ospecs, check_vma)
    placements = mesh.coords()
    values = [np.asarray(a._value) for a in arrays]
    in_shardings = [NamedSharding(mesh, s) for s in ispecs]
    per_device = [[v[sh.block_index(c, v.shape)] for v, sh in zip(values, in_shardings)]
                  for _, c in placements]
    results = spmd.run_spmd(closed, dict(mesh.shape), placements, per_device,
                            name="shard_map")
    outs = []
    sizes = dict(mesh.shape)
    for k, (aval, s) in enumerate(zip(closed.out_avals, ospecs)):
        sh = NamedSharding(mesh, s)
        gshape = _global_shape(aval.shape, s, mesh)
        g = np.empty(gshape, aval.dtype)
        for (_, c), r in zip(placements, results):
            if sh.replica_id(c) == 0:
                g[sh.block_index(c, gshape)] = r[k]
        missing = [a for a in mesh.axis_names if a not in s.mesh_axes() and sizes[a] > 1]
        if check_vma and missing:
            for (_, c), r in zip(placements, results):
                if sh.replica_id(c) and not np.array_equal(
                        g[sh.block_index(c, gshape)], r[k],
                        equal_nan=aval.dtype.kind in "fc"):
                    raise ValueError(
                        f"shard_map out_specs {s!r} say output leaf {k} is the same on every "
                        f"device of mesh axes {missing} (the spec does not name them), but "
                        "it varies along them. Name the axes in out_specs, or make the value "
                        "the same everywhere (e.g. with lax.psum), or pass check_vma=False "
                        "to take the first device's value.")
        arr = make_array(g, aval.weak_type)
        arr._sharding = sh
        outs.append(arr)
    return tree_unflatten(out_tree, outs)


def _vma_error(s, k, missing) -> ValueError:
    return ValueError(
        f"shard_map out_specs {s!r} say output leaf {k} is the same on every device of "
        f"mesh axes {missing} (the spec does not name them), but it varies along them. "
        "Name the axes in out_specs, or make the value the same everywhere (e.g. with "
        "lax.psum), or pass check_vma=False to take the first device's value.")


def _run_processes(closed, mesh: Mesh, arrays, ispecs, out_tree, ospecs, check_vma):
    """The eager call over a mesh spanning several processes (``kiln.distributed``): this
    process runs its devices' blocks; collectives cross processes over MPI; outputs are
    global Arrays holding this process's blocks."""
    from kiln import distributed
    placements = global_array.local_placements(mesh)
    blocks = [global_array.local_blocks(a, NamedSharding(mesh, s), placements)
              for a, s in zip(arrays, ispecs)]
    per_device = [[b[i] for b in blocks] for i in range(len(placements))]
    results = spmd.run_spmd(closed, dict(mesh.shape), placements, per_device,
                            name="shard_map", world=distributed.comm(),
                            layout=global_array.layout(mesh))
    sizes = dict(mesh.shape)
    outs = []
    for k, (aval, s) in enumerate(zip(closed.out_avals, ospecs)):
        sh = NamedSharding(mesh, s)
        gshape = _global_shape(aval.shape, s, mesh)
        missing = [a for a in mesh.axis_names if a not in s.mesh_axes() and sizes[a] > 1]
        first: dict = {}
        out_blocks = {}
        for (d, c), r in zip(placements, results):
            key = sh.block_index(c, gshape)
            kk = tuple((x.start, x.stop) for x in key)
            v = np.asarray(r[k])
            if kk in first:
                # this process's replicas of a block: checked against each other (other
                # processes' replicas are not compared)
                if check_vma and missing and not np.array_equal(
                        first[kk], v, equal_nan=aval.dtype.kind in "fc"):
                    raise _vma_error(s, k, missing)
                if not check_vma:
                    v = first[kk]
            else:
                first[kk] = v
            out_blocks[d.id] = v
        outs.append(global_array.assemble(sh, gshape, aval.dtype, aval.weak_type,
                                          out_blocks))
    return tree_unflatten(out_tree, outs)


def _emulate(f, mesh: Mesh, flat, in_tree, ispecs, out_specs):
    """The same values as nested vmaps over the mesh axes (under transformations)."""
    from kiln import lax
    if global_array.spans_processes(mesh):
        raise NotImplementedError(
            "shard_map over a mesh with other processes' devices under a transformation "
            "(grad, vmap, or inside a traced jit): kiln runs it only eagerly (a jit of it "
            "called eagerly runs it so); call it outside the transformation.")
    names = mesh.axis_names
    sizes = dict(mesh.shape)

    def split(x, spec):
        # (..., n_d, ...) -> (mesh axes splitting x, in mesh order, ..., local dims)
        a = get_aval(x)
        shape, order = [], []
        for d, n in enumerate(a.shape):
            axes = spec.axes_of(d)
            k = math.prod(sizes[ax] for ax in axes)
            for ax in axes:
                order.append((names.index(ax), len(shape)))
                shape.append(sizes[ax])
            shape.append(n // k)
        y = lax.reshape(x, tuple(shape))
        order.sort()
        front = [pos for _, pos in order]
        rest = [i for i in range(len(shape)) if i not in front]
        return lax.transpose(y, tuple(front + rest))

    xs = [split(x, s) for x, s in zip(flat, ispecs)]
    store = {}

    def inner(*blocks):
        out = f(*tree_unflatten(in_tree, list(blocks)))
        leaves, tree = tree_flatten(out)
        store["tree"] = tree
        return leaves

    fn = inner
    for j in reversed(range(len(names))):
        ax = names[j]
        in_ax = [0 if ax in s.mesh_axes() else None for s in ispecs]
        fn = _vmap_level(fn, ax, sizes[ax], in_ax, store, out_specs)
    outs = fn(*xs)
    out_tree = store["tree"]
    ospecs = _specs_for("out_specs", out_tree, out_specs, out_tree.num_leaves)
    final = []
    for o, s in zip(outs, ospecs):
        final.append(_merge(o, s, names, sizes))
    return tree_unflatten(out_tree, final)


def _vmap_level(fn, ax, size, in_ax, store, out_specs):
    """One mesh axis as a vmap; each output is mapped at 0 when its spec names ``ax``."""
    def out_axes_for():
        tree = store["tree"]
        ospecs = _specs_for("out_specs", tree, out_specs, tree.num_leaves)
        return [0 if ax in s.mesh_axes() else None for s in ospecs]
    return _vmap_dynamic_out(fn, in_ax, ax, size, out_axes_for)


def _vmap_dynamic_out(fn, in_ax, name, size, out_axes_for):
    """``vmap`` whose ``out_axes`` are computed after tracing ``fn``."""
    def run(*xs):
        outs, dims = batching.batch_flat(lambda *ys: list(fn(*ys)), list(xs), list(in_ax),
                                         batching.AxisData(name, size))
        want = out_axes_for()
        final = []
        for o, d, w in zip(outs, dims, want):
            if w is None:
                if d is not None:
                    raise ValueError(
                        f"shard_map out_specs say an output is the same on every device of "
                        f"mesh axis {name!r} (the spec does not name it), but it varies "
                        "along that axis. Name the axis in out_specs, or make the value "
                        f"the same everywhere (e.g. lax.psum(x, {name!r})).")
                final.append(o)
            else:
                final.append(batching.matchaxis(o, d, 0, size))
        return final
    return run


def _merge(o, spec: PartitionSpec, names, sizes):
    """Inverse of ``split``: leading mesh-axis dims (mesh order) back into their dims."""
    from kiln import lax
    used = [a for a in names if a in spec.mesh_axes()]
    a = get_aval(o)
    nlead = len(used)
    local = a.shape[nlead:]
    perm, shape = [], []
    for d, n in enumerate(local):
        axes = spec.axes_of(d)
        for ax in axes:
            perm.append(used.index(ax))
        perm.append(nlead + d)
        shape.append(n * math.prod(sizes[ax] for ax in axes))
    y = lax.transpose(o, tuple(perm)) if perm != list(range(len(perm))) else o
    return lax.reshape(y, tuple(shape))

