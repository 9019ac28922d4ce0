"""``kiln.experimental.multihost_utils`` (as ``jax.experimental.multihost_utils``):
helpers for programs running as several processes (``kiln.distributed``, over MPI).

In a single process each helper is the identity (with NumPy results, as in JAX)."""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from kiln.array import Array, make_array, to_array
from kiln.tree_util import tree_flatten, tree_map, tree_unflatten


def _comm():
    from kiln import distributed
    return distributed.comm()


def process_allgather(in_tree: Any, tiled: bool = False) -> Any:
    """Gather every process's value of each leaf (same shape everywhere): stacked on a
    new leading axis, or concatenated along axis 0 with ``tiled=True``. NumPy arrays.

    A global array over several processes (``is_fully_addressable`` False) gives its
    whole global value instead, and needs ``tiled=True`` (JAX's ``ValueError`` else)."""
    comm = _comm()

    def gather(x):
        if type(x) is Array and not x.is_fully_addressable:
            if not tiled:
                raise ValueError("Gathering global non-fully-addressable arrays only "
                                 "supports tiled=True")
            from kiln.parallel.global_array import gather_global
            return gather_global(x)
        v = np.asarray(x)
        if v.ndim == 0 or not tiled:
            v = v[None]
        if comm is None:
            return v
        return np.concatenate(comm.allgather(v), axis=0)
    return tree_map(gather, in_tree)


def broadcast_one_to_all(in_tree: Any, is_source: bool | None = None) -> Any:
    """Every process gets the source process's leaves (process 0 unless ``is_source``
    marks another one). NumPy arrays."""
    comm = _comm()
    if comm is None:
        return tree_map(np.asarray, in_tree)
    if is_source is None:
        is_source = comm.Get_rank() == 0
    sources = comm.allgather(bool(is_source))
    if sum(sources) != 1:
        raise ValueError(f"broadcast_one_to_all needs exactly one source process; "
                         f"is_source was True in {sum(sources)}")
    root = sources.index(True)
    return tree_map(lambda x: comm.bcast(np.asarray(x) if is_source else None, root=root),
                    in_tree)


def assert_equal(in_tree: Any, fail_message: str = "") -> None:
    """Raise ``AssertionError`` unless every process passed equal values."""
    gathered = process_allgather(in_tree)

    def check(g):
        if not all(np.array_equal(g[0], g[i]) for i in range(1, len(g))):
            raise AssertionError(f"{fail_message} Expected equal values on every process, "
                                 f"got {g}")
    tree_map(check, gathered)


def sync_global_devices(name: str) -> None:
    """A barrier across all processes; every process must pass the same ``name``."""
    h = np.uint32(zlib.crc32(name.encode()))
    assert_equal(h, f"sync_global_devices name mismatch ('{name}')")


def _spec_list(what: str, tree_leaves_n: int, treedef, pspecs) -> list:
    from kiln.parallel.placement import _per_leaf
    from kiln.sharding import PartitionSpec
    if pspecs is None:
        raise ValueError("`None` is not a valid input to the pspecs argument. Please use "
                         "jax.sharding.PartitionSpec() if you wanted to replicate your input.")
    specs = _per_leaf(treedef, tree_leaves_n, pspecs, what)
    for s in specs:
        if not isinstance(s, PartitionSpec):
            raise ValueError(f"{what} must be PartitionSpecs (a tree prefix of the inputs); "
                             f"got {s!r}. Use PartitionSpec() to replicate.")
    return specs


def _scale(shape, mesh, spec, up: bool) -> tuple:
    """Host-local <-> global shape: each dimension times (or divided by) the number of
    processes' slices its mesh axes make (global axis size / local axis size)."""
    local = mesh.local_mesh.shape
    out = []
    for d, n in enumerate(shape):
        k = 1
        for a in spec.axes_of(d):
            k *= mesh.shape[a] // local[a]
        if not up and n % k:
            raise ValueError(f"dimension {d} of size {n} does not divide into the {k} "
                             f"process slices of mesh axes {spec.axes_of(d)}")
        out.append(n * k if up else n // k)
    return tuple(out)


def host_local_array_to_global_array(local_inputs: Any, global_mesh, pspecs: Any) -> Any:
    """Global Arrays from each process's host-local values (``jax.experimental.
    multihost_utils.host_local_array_to_global_array``).

    Args:
      local_inputs: a tree of this process's values; each is laid out over this process's
        devices (``global_mesh.local_mesh``) as ``pspecs`` say.
      global_mesh: the mesh of every process's devices; this process's devices must form a
        sub-grid of it.
      pspecs: a tree prefix of ``PartitionSpec``s.

    Returns:
      A tree of global Arrays (``NamedSharding(global_mesh, spec)``), whose global shape
      puts the processes' values side by side along the split dimensions.
    """
    from kiln.core.trace import Tracer
    from kiln.parallel import global_array
    from kiln.sharding import NamedSharding
    leaves, treedef = tree_flatten(local_inputs)
    specs = _spec_list("host_local_array_to_global_array pspecs", len(leaves), treedef, pspecs)
    out = []
    for x, spec in zip(leaves, specs):
        if type(x) is Array and not x.is_fully_addressable:
            out.append(x)
            continue
        if isinstance(x, Tracer):
            if global_array.spans_processes(global_mesh):
                raise NotImplementedError("host_local_array_to_global_array of a traced value "
                                          "over several processes: call it eagerly")
            out.append(x)
            continue
        v = np.asarray(x)
        sharding = NamedSharding(global_mesh, spec)
        if not global_array.spans_processes(global_mesh):
            from kiln.parallel.placement import place
            out.append(place(v, sharding, "host_local_array_to_global_array"))
            continue
        local = NamedSharding(global_mesh.local_mesh, spec)
        gshape = _scale(v.shape, global_mesh, spec, up=True)
        local.check_shape(v.shape)
        lidx = {d.id: local.block_index(c, v.shape) for d, c in global_mesh.local_mesh.coords()}
        w = getattr(x, "weak_type", False)
        dt = v.dtype if type(x) is Array else to_array(v).dtype
        out.append(global_array.assemble(sharding, gshape, dt, w,
                                         {i: v[idx] for i, idx in lidx.items()}))
    return tree_unflatten(treedef, out)


def global_array_to_host_local_array(global_inputs: Any, global_mesh, pspecs: Any) -> Any:
    """This process's host-local Arrays of global Arrays (the inverse of
    :func:`host_local_array_to_global_array`): each laid out as ``pspecs`` over
    ``global_mesh.local_mesh``. Fully addressable inputs are returned as they are."""
    from kiln.core.trace import Tracer
    from kiln.parallel import global_array
    from kiln.sharding import NamedSharding
    leaves, treedef = tree_flatten(global_inputs)
    specs = _spec_list("global_array_to_host_local_array pspecs", len(leaves), treedef, pspecs)
    out = []
    for x, spec in zip(leaves, specs):
        if isinstance(x, Tracer) or (type(x) is Array and x.is_fully_addressable):
            out.append(x)
            continue
        sharding = NamedSharding(global_mesh, spec)
        a = x if type(x) is Array else to_array(x)
        a = global_array.put(a, sharding)       # a collective if the layout changes
        lmesh = global_mesh.local_mesh
        local = NamedSharding(lmesh, spec)
        lshape = _scale(a.shape, global_mesh, spec, up=False)
        v = np.empty(lshape, a.dtype)
        for d, c in global_array.local_placements(global_mesh):
            v[local.block_index(_local_coords(lmesh, d), lshape)] = \
                global_array.block_of(a, sharding, d, c)
        r = make_array(v, a.weak_type)
        r._sharding = local
        out.append(r)
    return tree_unflatten(treedef, out)


def _local_coords(mesh, device) -> dict:
    for d, c in mesh.coords():
        if d.id == device.id:
            return c
    raise ValueError(f"{device} is not in {mesh!r}")


def reached_preemption_sync_point(step_id: int) -> bool:
    """kiln has no preemption notices: always ``False``."""
    return False


__all__ = ["assert_equal", "broadcast_one_to_all", "global_array_to_host_local_array",
           "host_local_array_to_global_array", "process_allgather",
           "reached_preemption_sync_point", "sync_global_devices"]
