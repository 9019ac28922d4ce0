"""Placing arrays on shardings: ``device_put(x, sharding)``, ``jit``'s
``in_shardings``/``out_shardings``, ``lax.with_sharding_constraint``, ``reshard``.

kiln keeps an array's global value in host memory; a sharding records which block of
it each device owns (``Array.addressable_shards``) and is what ``shard_map``/``pmap``
split along. Constraints never change values. A ``jit`` with shardings called eagerly
over a mesh of several devices, with some input or output split, is partitioned
(``kiln.parallel.partition``): every device runs a per-device program on its shards,
with collectives where needed. Under a transformation (``grad``/``vmap`` of it, or
inside another ``jit``) it is one program over the global values, the shardings only a
layout of the results. Over a mesh holding other processes' devices the arrays are
global arrays of which this process holds its devices' blocks
(``kiln.parallel.global_array``).
"""
from __future__ import annotations

import numpy as np

from kiln import sharding as _sharding
from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln.array import Array, from_single_device_arrays, make_array, to_array
from kiln.core.avals import ShapedArray, short_dtype_name
from kiln.core.trace import Tracer
from kiln.lax import sharding_constraint as _lax_sc
from kiln.parallel import global_array
from kiln.sharding import NamedSharding


def _as_sharding(s, what: str):
    from kiln.devices import Device
    from kiln.sharding import (
        NamedSharding,
        PartitionSpec,
        Sharding,
        SingleDeviceSharding,
        concrete_named_sharding,
        context_mesh,
    )
    if s is None or isinstance(s, Sharding):
        return concrete_named_sharding(s, what)
    if isinstance(s, Device):
        return SingleDeviceSharding(s)
    if isinstance(s, PartitionSpec):
        mesh = context_mesh()
        if mesh is None:
            raise ValueError(f"{what}: a PartitionSpec {s!r} needs a mesh; use a "
                             "NamedSharding(mesh, spec) or set one with "
                             "kiln.sharding.set_mesh(mesh).")
        return NamedSharding(mesh, s)
    raise TypeError(f"{what} must be a Sharding, a Device or a PartitionSpec, got {s!r}")


def place(x, sharding, what: str = "device_put"):
    """``x`` (an Array or array-like) laid out as ``sharding``; tracers pass through."""
    from kiln.sharding import NamedSharding
    sharding = _as_sharding(sharding, what)
    if isinstance(x, Tracer) or sharding is None:
        return x
    if isinstance(sharding, NamedSharding) and global_array.spans_processes(sharding.mesh):
        return global_array.put(x, sharding)
    a = x if type(x) is Array else to_array(x)
    if isinstance(sharding, NamedSharding):
        sharding.check_shape(a.shape)
    out = make_array(np.asarray(a._value), a.weak_type)
    out._sharding = None if _is_default(sharding) else sharding
    return out


def _is_default(sharding) -> bool:
    from kiln.devices import devices
    from kiln.sharding import SingleDeviceSharding
    return isinstance(sharding, SingleDeviceSharding) and sharding.device == devices()[0]


def _per_leaf(treedef, n_leaves: int, shardings, what: str) -> list:
    """A tree prefix of shardings (or ``None``) broadcast to one entry per leaf."""
    from kiln.sharding import PartitionSpec, Sharding
    if shardings is None:
        return [None] * n_leaves
    if isinstance(shardings, (Sharding, PartitionSpec)):
        return [shardings] * n_leaves
    from kiln.transformations import _flatten_axes

    def is_leaf(s):
        return isinstance(s, (Sharding, PartitionSpec)) or s is None
    s_leaves, s_tree = tree_flatten(shardings, is_leaf=is_leaf)
    proxy = tree_unflatten(s_tree, list(range(len(s_leaves))))
    idx = _flatten_axes(what, treedef, proxy, n_leaves)
    return [None if i is None else s_leaves[i] for i in idx]


def place_tree(tree, shardings, what: str):
    """Apply a tree prefix of shardings to the leaves of ``tree``."""
    if shardings is None:
        return tree
    leaves, treedef = tree_flatten(tree)
    per_leaf = _per_leaf(treedef, len(leaves), shardings, what)
    return tree_unflatten(treedef, [place(x, s, what) for x, s in zip(leaves, per_leaf)])


def _constrain_tree(tree, shardings, what: str):
    """``place_tree``, except that traced leaves given a ``NamedSharding`` bind the
    ``sharding_constraint`` primitive (which the SPMD partitioner reshards to)."""
    if shardings is None:
        return tree
    from kiln.parallel.constraint import constrain
    leaves, treedef = tree_flatten(tree)
    out = []
    for x, s in zip(leaves, _per_leaf(treedef, len(leaves), shardings, what)):
        s = _as_sharding(s, what)
        if isinstance(x, Tracer) and isinstance(s, NamedSharding):
            _check_not_manual(s)
            y = constrain(x, s)
            out.append(note_type(y, s))
        else:
            out.append(place(x, s, what))
    return tree_unflatten(treedef, out)


def _check_not_manual(sharding) -> None:
    """JAX's error for a constraint inside a ``shard_map`` that splits a dimension along
    one of its manual mesh axes."""
    from kiln.sharding import get_abstract_mesh
    am = get_abstract_mesh()
    manual = set(getattr(am, "manual_axes", ()) or ())
    if not manual or tuple(am.axis_names) != tuple(sharding.mesh.axis_names):
        return
    if any(a in manual for a in sharding.spec.mesh_axes()):
        raise ValueError(
            f"pspec {sharding.spec} contains a manual axes {tuple(sorted(manual, key=str))} "
            "of mesh which is not allowed. If you are using a with_sharding_constraint "
            "under a shard_map, only use the mesh axis in PartitionSpec which are not "
            "manual.")


def note_type(y, sharding):
    """A traced value laid out as ``sharding`` (a constraint's output) over a mesh with
    ``Explicit`` axes: its type's sharding is recorded (``arg_type_sharding``) and, on a
    jit's staged value, in its abstract value (``x.aval.sharding``). Returns ``y``."""
    t = _explicit_type(sharding, len(y.shape))
    if t is not None:
        record_arg_type(y, t)
        a = getattr(y, "_aval", None)
        if type(a) is ShapedArray:
            y._aval = a.with_type_sharding(t)
    return y


def _explicit_type(sharding, ndim):
    from kiln.sharding import AxisType
    if AxisType.Explicit not in tuple(getattr(sharding.mesh, "axis_types", ()) or ()):
        return None
    return type_sharding(sharding, ndim)


def with_sharding_constraint(x, shardings):
    """``x`` unchanged in value, laid out as ``shardings`` (a tree prefix of Shardings or
    PartitionSpecs). Under a trace it binds ``sharding_constraint``: the identity, except
    in a partitioned ``jit``, where the value is resharded there."""
    return _constrain_tree(x, shardings, "with_sharding_constraint shardings")


def reshard(x, out_shardings):
    """``x`` with its layout changed to ``out_shardings`` (values unchanged). A traced
    value whose type's sharding is known (a jit's argument, a value laid out over an
    ``Explicit`` mesh) is first constrained to it, so that a cotangent gets that layout
    back (reduced and unreduced swapped, JAX's)."""
    if out_shardings is not None:
        from kiln.parallel.constraint import constrain

        def src(v):
            t = arg_type_sharding(v) if isinstance(v, Tracer) else None
            if t is None:
                return v
            from kiln.sharding import context_mesh
            mesh = context_mesh()
            if mesh is None or tuple(mesh.axis_names) != tuple(t.mesh.axis_names):
                return v
            return constrain(v, NamedSharding(mesh, t.spec))
        leaves, treedef = tree_flatten(x)
        x = tree_unflatten(treedef, [src(v) for v in leaves])
    return _constrain_tree(x, out_shardings, "reshard out_shardings")


class ShardedJit:
    """``jit(f, in_shardings=..., out_shardings=...)``: the jitted function with its
    arguments checked against ``in_shardings`` and outputs laid out as
    ``out_shardings``; called eagerly over a multi-device mesh with a split input or
    output, it runs SPMD (one partitioned program per device, see
    ``kiln.parallel.partition``). Other attributes (``lower``, ``trace``, ...) are the
    jit's."""

    def __init__(self, jitted, in_shardings, out_shardings):
        self._jitted = jitted
        self._in = in_shardings
        self._out = out_shardings
        self._programs: dict = {}
        self.__wrapped__ = jitted
        self.__name__ = getattr(jitted, "__name__", "fun")
        self.__doc__ = getattr(jitted, "__doc__", None)

    @api_boundary
    def __call__(self, *args, **kwargs):
        given = args
        if self._in is not None:
            args = self._place_args(args)
        try:
            done, out = self._spmd_call(args, kwargs)
            if done:
                return out
            out = self._jitted(*args, **kwargs)
            return place_tree(out, self._out, "jit out_shardings")
        finally:
            if args is not given:
                _delete_donated_originals(given, args)

    def _place_args(self, args) -> tuple:
        """Lay out the positional arguments that are not static (``in_shardings`` has
        one entry per such argument, as in JAX)."""
        from kiln.sharding import PartitionSpec, Sharding
        static = set(getattr(self._jitted, "_static_argnums", ()))
        n = len(args)
        dyn = [i for i in range(n) if i not in static and (i - n) not in static]
        ins = self._in
        if isinstance(ins, (Sharding, PartitionSpec)):
            ins = tuple(ins for _ in dyn)
        if isinstance(ins, list):
            ins = tuple(ins)
        if not isinstance(ins, tuple) or len(ins) != len(dyn):
            got = (f"got a tuple or list of length {len(ins)}" if isinstance(ins, tuple)
                   else f"got {self._in!r}")
            raise ValueError(
                "pjit in_shardings specification must be a tree prefix of the positional "
                "arguments tuple. In particular, pjit in_shardings must either be a "
                "Sharding, a PartitionSpec, or a tuple of length equal to the number of "
                f"positional arguments. But pjit in_shardings is the wrong length: {got} "
                f"for an args tuple of length {len(dyn)}.")
        out = list(args)
        for i, s in zip(dyn, ins):
            out[i] = place_tree(args[i], s, "jit in_shardings")
        return tuple(out)

    def _spmd_call(self, args, kwargs):
        """``(True, outputs)`` when the call runs partitioned over a mesh, else
        ``(False, None)`` (transformations, one device, nothing split, effects)."""
        plan = self._plan(args, kwargs)
        if plan is None:
            return False, None
        entry, a_flat, program, blocks, out_sh = plan
        want = [s if isinstance(s, NamedSharding) else None for s in out_sh]
        if global_array.spans_processes(program.mesh):
            outs = program.run_processes(a_flat, blocks, want)
        else:
            values = [np.asarray(x._value if type(x) is Array else x, dtype=a.dtype)
                      for x, a in zip(a_flat, entry.jaxpr.in_avals)]
            outs = program(values, blocks, want)
        outs = [o if s is None or isinstance(s, NamedSharding) else place(o, s)
                for o, s in zip(outs, out_sh)]
        if entry.donated:
            from kiln import donation
            donation.delete_donated(a_flat, entry.donated)
        return True, tree_unflatten(entry.out_tree, outs)

    def spmd_jaxpr(self, *args, **kwargs):
        """The partitioned per-device program (a ``ClosedJaxpr`` over local shapes) that a
        call with these arguments runs on every mesh device, or ``None`` when such a call
        runs as one program (one device, nothing split, or effects)."""
        if self._in is not None:
            args = self._place_args(args)
        plan = self._plan(args, kwargs)
        return None if plan is None else plan[2].local

    def _plan(self, args, kwargs):
        """``(trace entry, flat arguments, partitioned program, input block shardings,
        output shardings per leaf)``, or ``None`` when the call is not partitioned."""
        from kiln import config
        from kiln.core import trace as core
        from kiln.parallel import partition, spmd
        if (config.jax_disable_jit or core.current_trace() is not core.eval_trace
                or spmd.current_context() is not None):
            return None
        from kiln.jitting import _HijaxArguments
        try:
            entry, tconsts, a_flat, _ = self._jitted._trace(args, kwargs)
        except _HijaxArguments:
            return None         # hijax arguments: one program (kiln.jitting.JitWrapped._call_hi)
        if tconsts or any(isinstance(x, Tracer) for x in a_flat):
            return None
        closed = entry.jaxpr
        out_sh = [_as_sharding(s, "jit out_shardings") for s in
                  _per_leaf(entry.out_tree, entry.out_tree.num_leaves, self._out,
                            "jit out_shardings")]
        in_sh = [getattr(x, "_sharding", None) for x in a_flat]
        named = [s for s in in_sh + out_sh if isinstance(s, NamedSharding)]
        if not named:
            return None
        mesh = named[0].mesh
        if mesh.size < 2 or any(s.mesh != mesh for s in named):
            return None
        if global_array.spans_processes(mesh):
            global_array.check_mesh(mesh, "jit with shardings")
        in_specs = [partition.spec_of(s.spec, a.ndim, mesh) if isinstance(s, NamedSharding)
                    else ((),) * a.ndim for s, a in zip(in_sh, closed.in_avals)]
        out_specs = []
        for s, a in zip(out_sh, closed.out_avals):
            if isinstance(s, NamedSharding):
                s.check_shape(a.shape)
                out_specs.append(partition.spec_of(s.spec, a.ndim, mesh))
            else:
                out_specs.append(None if s is None else ((),) * a.ndim)
        if not any(partition.is_split(s) for s in in_specs + [o for o in out_specs if o]):
            return None
        if partition.has_effects(closed.jaxpr):
            return None
        key = (id(closed), tuple(in_specs), tuple(out_specs), mesh)
        hit = self._programs.get(key)
        if hit is None or hit[0] is not closed:
            hit = self._programs[key] = (closed, partition.PartitionedProgram(
                closed, mesh, in_specs, out_specs, self.__name__))
        blocks = [NamedSharding(mesh, partition.to_pspec(s)) for s in in_specs]
        return entry, a_flat, hit[1], blocks, out_sh

    def __getattr__(self, name):
        return getattr(self._jitted, name)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        import functools
        return functools.partial(self, obj)


def _delete_donated_originals(given, placed) -> None:
    """A donated argument that ``in_shardings`` laid out anew: the call deleted the laid
    out array; the caller's array is deleted too (as JAX's donation of it)."""
    for g, p in zip(given, placed):
        if g is p:
            continue
        g_leaves, p_leaves = tree_flatten(g)[0], tree_flatten(p)[0]
        if len(g_leaves) != len(p_leaves):
            continue
        for a, b in zip(g_leaves, p_leaves):
            if type(a) is Array and type(b) is Array and a is not b and b.is_deleted():
                a.delete()


def _multi(sharding) -> bool:
    return isinstance(sharding, NamedSharding) and global_array.spans_processes(sharding.mesh)


def make_array_from_callback(shape, sharding, data_callback, dtype=None):
    """A global array of ``shape`` laid out as ``sharding``, whose blocks come from
    ``data_callback(index)`` (``index``: a tuple of slices), as ``jax.make_array_from_callback``.
    Over a mesh of several processes only this process's devices' blocks are requested,
    and the result holds just those."""
    shape = tuple(int(d) for d in shape)
    sharding = _as_sharding(sharding, "make_array_from_callback")
    if _multi(sharding):
        sharding.check_shape(shape)
        blocks, dt = {}, None
        for d, c in global_array.local_placements(sharding.mesh):
            b = np.asarray(data_callback(sharding.block_index(c, shape)))
            dt = dt or (np.dtype(dtype) if dtype is not None else b.dtype)
            blocks[d.id] = b.astype(dt, copy=False)
        return global_array.assemble(sharding, shape, dt, False, blocks)
    out = None
    block_shape = sharding.shard_shape(shape)
    for _, index in sharding.devices_indices_map(shape).items():
        block = _callback_block(data_callback(index))
        if block.shape != block_shape:
            raise ValueError(f"Expected shard shape {block_shape} doesn't match the single "
                             f"device array shape {block.shape}. Shape of Array is "
                             f"{ShapedArray(shape, block.dtype).str_short()} with sharding "
                             f"{sharding}")
        if out is None:
            out = np.empty(shape, dtype if dtype is not None else block.dtype)
        out[index] = block
    if out is None:
        out = np.empty(shape, dtype or np.float32)
    return place(out, sharding, "make_array_from_callback")


def _callback_block(r) -> np.ndarray:
    """A block ``make_array_from_callback``'s callback returned, as a NumPy array of a
    canonical dtype (a Python scalar or a 64-bit NumPy value under x64 off, as JAX)."""
    if isinstance(r, Tracer):
        from kiln.errors import UnexpectedTracerError
        raise UnexpectedTracerError(
            "jax.make_array_from_callback cannot be called within a traced context.")
    a = r if type(r) is Array else to_array(r)
    return np.asarray(a._value)


def make_array_from_single_device_arrays(shape, sharding, arrays, *, dtype=None):
    """A global array assembled from one block per device (in ``sharding``'s device
    order, as ``jax.make_array_from_single_device_arrays``). Over a mesh of several
    processes, ``arrays`` are this process's devices' blocks (each process passes its
    own)."""
    shape = tuple(int(d) for d in shape)
    sharding = _as_sharding(sharding, "make_array_from_single_device_arrays")
    if not isinstance(arrays, (list, tuple)):
        raise TypeError("jax.make_array_from_single_device_arrays `arrays` argument must be "
                        f"a list or tuple, but got {type(arrays)}.")
    arrays = list(arrays)
    if any(isinstance(a, Tracer) for a in arrays):
        raise ValueError("jax.make_array_from_single_device_arrays requires a list of "
                         f"concrete arrays as input, but got types {set(map(type, arrays))}")
    fname = "make_array_from_single_device_arrays"
    if dtype is None:
        if not arrays:
            raise ValueError("If the Array has no addressable shards, `dtype` must be "
                             f"provided via the `dtype` argument to `jax.{fname}`.")
    else:
        from kiln import dtypes
        dtype = dtypes.check_and_canonicalize_user_dtype(dtype, fname)
        if arrays and np.dtype(np.asarray(arrays[0]).dtype) != dtype:
            raise ValueError(f"If `dtype` is provided to `jax.{fname}`, it must match the "
                             f"dtype of the addressable shards. Got dtype={dtype} and shard "
                             f"dtype={np.asarray(arrays[0]).dtype}`.")
    if _multi(sharding):
        placements = global_array.local_placements(sharding.mesh)
        if len(arrays) != len(placements):
            raise ValueError(f"make_array_from_single_device_arrays got {len(arrays)} arrays "
                             f"but this process addresses {len(placements)} devices of the "
                             "sharding; pass one array per addressable device.")
        if not arrays and dtype is None:
            raise ValueError("make_array_from_single_device_arrays: pass dtype= when "
                             "arrays is empty")
        dt = np.dtype(dtype) if dtype is not None else np.asarray(arrays[0]).dtype
        blocks = {}
        for (d, c), a in zip(_by_device(placements, arrays), arrays):
            b = np.asarray(a)
            want = tuple(len(range(*s.indices(n)))
                         for s, n in zip(sharding.block_index(c, shape), shape))
            if b.shape != want:
                raise ValueError(f"make_array_from_single_device_arrays: a block of shape "
                                 f"{b.shape} for device {d}, whose block of the {shape} "
                                 f"array has shape {want}")
            blocks[d.id] = b.astype(dt, copy=False)
        return global_array.assemble(sharding, shape, dt, False, blocks)
    # Blocks given as NumPy arrays (not kiln Arrays) belong to the sharding's devices in
    # its order; kiln Arrays to the device each is on (JAX's checks, ``kiln.array``).
    order = list(sharding.devices_indices_map(shape))
    arrays = [a if type(a) is Array or i >= len(order) else place(a, order[i], fname)
              for i, a in enumerate(arrays)]
    if dtype is None:
        dtype = arrays[0].dtype
    value = from_single_device_arrays(shape, dtype, sharding, arrays)
    return place(value, sharding, fname)


def _by_device(placements: list, arrays: list) -> list:
    """The placement of each array: by the device each was put on
    (``device_put(x, device)``) when they name distinct devices of the sharding, else in
    the sharding's order."""
    from kiln.sharding import SingleDeviceSharding
    where = {d.id: (d, c) for d, c in placements}
    devs = [getattr(a, "_sharding", None) if type(a) is Array else None for a in arrays]
    ids = [s.device.id for s in devs if isinstance(s, SingleDeviceSharding)]
    if len(ids) == len(arrays) and len(set(ids)) == len(ids) and set(ids) <= set(where):
        return [where[i] for i in ids]
    return placements


def _process_slices(sharding, dim: int, ndim: int) -> tuple[int, int]:
    """This process's position among the distinct sets of slices that processes hold
    along ``dim``, and how many sets there are (JAX's ``get_process_index_and_count``);
    ``None`` count when the sharding is not process-uniform along ``dim``."""
    if sharding.is_fully_addressable or sharding.is_fully_replicated:
        return 0, 1
    n = len(sharding.device_set)
    per_process: dict = {}
    for d, index in sharding.devices_indices_map((n,) * ndim).items():
        s = index[dim]
        per_process.setdefault(d.process_index, set()).add((s.start, s.stop))
    from kiln import distributed
    mine = frozenset(per_process.get(distributed.process_index(), set()))
    if any(len(v) != len(mine) for v in per_process.values()):
        return 0, None
    distinct = list(dict.fromkeys(frozenset(v) for v in per_process.values()))
    if sum(len(v) for v in distinct) != len(set().union(*per_process.values())):
        return 0, None
    return distinct.index(mine), len(distinct)


def _from_process_local(data, sharding, global_shape):
    local_shape = data.shape
    if global_shape is None:
        global_shape = tuple(None if k is None else n * k for n, k in
                             ((n, _process_slices(sharding, i, len(local_shape))[1])
                              for i, n in enumerate(local_shape)))
        if None in global_shape:
            raise ValueError("Unable to compute global_shape due to non-uniform sharding. "
                             f"Specify global shape directly. Partially computed "
                             f"global_shape={global_shape}.")
    else:
        global_shape = tuple(global_shape)
        if None in global_shape:
            raise ValueError(f"global_shape={global_shape} has Nones. This is not supported.")
        global_shape = tuple(int(d) for d in global_shape)
    if len(global_shape) != len(local_shape):
        raise ValueError(f"make_array_from_process_local_data: global_shape {global_shape} "
                         f"and the local data's shape {local_shape} differ in rank")
    sharding.check_shape(global_shape)
    local_map = sharding.addressable_devices_indices_map(global_shape)
    starts = [sorted({idx[i].start or 0 for idx in local_map.values()})
              for i in range(len(global_shape))]
    block = sharding.shard_shape(global_shape)
    full = []
    for i, (n, g) in enumerate(zip(local_shape, global_shape)):
        full.append(n == g)
        if n != g and len(starts[i]) * block[i] != n:
            raise ValueError(
                "Invalid host data, each dimension should match either global or process "
                f"shape. In dimension {i}, the process data has {n} elements. Process "
                f"addresses {len(starts[i]) * block[i]} elements and "
                f"global_shape={global_shape}.")

    def callback(index):
        local = []
        for i, s in enumerate(index):
            if full[i]:
                local.append(s)
            else:
                lo = starts[i].index(s.start or 0) * block[i]
                local.append(slice(lo, lo + block[i]))
        return data[tuple(local)]
    return make_array_from_callback(global_shape, sharding, callback)


def make_array_from_process_local_data(sharding, local_data, global_shape=None):
    """A global array from each process's part of it (``jax.make_array_from_process_local_data``).

    Args:
      sharding: a ``Sharding`` (or a tree prefix of them, or ``PartitionSpec``s under a
        set mesh) of the global array.
      local_data: this process's data (a tree of arrays). Along each dimension it is
        either the whole global extent, or the slices this process's devices hold, laid
        side by side in order.
      global_shape: the global shape (a tuple, or a tree of them); ``None`` infers it
        from the sharding, as JAX does (each process holding its own share).

    Returns:
      Global Arrays laid out as ``sharding``; in one process, ``local_data`` placed on
      ``sharding``.
    """
    from kiln import distributed
    leaves, tree = tree_flatten(local_data)
    shardings = _per_leaf(tree, len(leaves), sharding, "make_array_from_process_local_data")
    if global_shape is None or (isinstance(global_shape, tuple) and all(
            d is None or isinstance(d, (int, np.integer)) for d in global_shape)):
        shapes = [global_shape] * len(leaves)
    else:
        shapes, _ = tree_flatten(global_shape,
                                 is_leaf=lambda x: x is None or isinstance(x, tuple))
        if len(shapes) != len(leaves):
            raise ValueError(f"make_array_from_process_local_data: global_shape "
                             f"{global_shape!r} must be a shape, or a tree of shapes with "
                             f"one per leaf of local_data ({len(leaves)} leaves)")
    outs = []
    for data, sh, gs in zip(leaves, shardings, shapes):
        data = np.asarray(data)
        sh = _as_sharding(sh, "make_array_from_process_local_data")
        if distributed.process_count() == 1:
            if gs is not None and tuple(gs) != data.shape:
                raise ValueError(
                    "When calling `make_array_from_process_local_data` on a single process, "
                    "global_shape should be None or equal to local_data.shape.Got "
                    f"global_shape={tuple(gs)} and local_data.shape={data.shape}.")
            outs.append(place(data, sh, "make_array_from_process_local_data"))
        else:
            outs.append(_from_process_local(data, sh, gs))
    return tree_unflatten(tree, outs)


def typeof(x):
    """The abstract value (``ShapedArray``) of ``x``, as ``jax.typeof`` (also of a
    ``ShapeDtypeStruct``). For an array laid out by a ``NamedSharding`` the type carries
    the sharding: its mesh, and the spec's ``Explicit`` mesh axes, printed as JAX does
    (``float32[8@x,6]``)."""
    from kiln.core.trace import get_aval
    from kiln.sharding import NamedSharding
    aval = getattr(x, "aval", None)
    if not isinstance(aval, ShapedArray):
        aval = get_aval(x)
    sh = getattr(x, "_sharding", None) if type(x) is Array else None
    if isinstance(sh, NamedSharding) and type(aval) is ShapedArray:
        return ShardedShapedArray(aval.shape, aval.dtype, aval.weak_type,
                                  type_sharding(sh, len(aval.shape)))
    return aval


# id(tracer) -> (weak reference to the tracer, its type's sharding): the arguments of a
# jit traced from arrays laid out over Explicit mesh axes (``jitting``)
_ARG_TYPES: dict = {}


def explicit_type_sharding(x):
    """The type's sharding of an Array laid out by a ``NamedSharding`` with some
    ``Explicit`` mesh axis, else None."""
    from kiln.sharding import AxisType
    sh = getattr(x, "_sharding", None)
    if not isinstance(sh, NamedSharding) or AxisType.Explicit not in tuple(
            getattr(sh.mesh, "axis_types", ()) or ()):
        return None
    return type_sharding(sh, len(x.shape))


def record_arg_type(tracer, sharding) -> None:
    import weakref
    if not isinstance(tracer, Tracer):
        return
    key = id(tracer)
    _ARG_TYPES[key] = (weakref.ref(tracer, lambda _, k=key: _ARG_TYPES.pop(k, None)),
                       sharding)
    a = getattr(tracer, "_aval", None)
    if type(a) is ShapedArray and a._tsh is None:
        tracer._aval = a.with_type_sharding(sharding)
        var = getattr(tracer, "_var", None)     # a staged argument: its variable's too
        if var is not None and getattr(var, "aval", None) is a:
            var.aval = tracer._aval


def arg_type_sharding(x):
    """The type's sharding of ``x``: an Array's (``typeof``), a traced jit argument's
    (recorded when the jit traced it), a JVP tracer's primal's; else None."""
    while True:
        if type(x) is Array:
            return explicit_type_sharding(x)
        entry = _ARG_TYPES.get(id(x))
        if entry is not None and entry[0]() is x:
            return entry[1]
        if hasattr(x, "primal") and isinstance(x, Tracer):
            x = x.primal
            continue
        if isinstance(x, Tracer):       # a type's sharding in its abstract value
            a = x.aval
            return a._tsh if type(a) is ShapedArray else None
        return None


def ct_layout(z, primal):
    """``z`` (a cotangent of ``primal``) laid out as ``primal``'s cotangent type when
    ``primal``'s type has a sharding (an array over a mesh with ``Explicit`` axes, or a
    ``jit`` argument made from one): that layout, reduced and unreduced axes swapped
    (JAX's cotangent type); else ``z``."""
    t = arg_type_sharding(primal) if isinstance(primal, (Array, Tracer)) else None
    if t is None:
        return z
    from kiln.parallel.constraint import constrain
    from kiln.sharding import context_mesh
    mesh = context_mesh()
    if mesh is None or tuple(mesh.axis_names) != tuple(t.mesh.axis_names):
        own = getattr(primal, "_sharding", None) if type(primal) is Array else None
        mesh = own.mesh if isinstance(own, NamedSharding) else None
    if mesh is None:
        if not isinstance(z, Tracer) and not isinstance(primal, Tracer):
            return z
        mesh = t.mesh       # abstract: a jit output's layout resolves it
    sh = NamedSharding(mesh, t.spec.to_ct_spec())
    if isinstance(z, Tracer) or isinstance(primal, Tracer):
        return constrain(z, sh)
    return place(z, sh)


def type_sharding(sharding, ndim: int):
    """The sharding in the type of a value laid out as ``sharding``: the abstract mesh,
    and per dimension only the mesh axes of type ``Explicit``."""
    from kiln.sharding import AxisType, NamedSharding, PartitionSpec, type_mesh
    mesh = sharding.mesh
    explicit = {a for a, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit}
    parts = []
    for d in range(ndim):
        axes = tuple(a for a in sharding.spec.axes_of(d) if a in explicit) \
            if d < len(sharding.spec) else ()
        parts.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return NamedSharding(type_mesh(mesh), PartitionSpec(*parts, reduced=sharding.spec.reduced,
                                                         unreduced=sharding.spec.unreduced))


class ShardedShapedArray(ShapedArray):
    """A ``ShapedArray`` whose type holds a sharding (``typeof`` of a sharded array):
    ``str`` is JAX's (``float32[8@x,6]``), equality includes the sharding."""

    __slots__ = ("_type_sharding",)

    def __init__(self, shape, dtype, weak_type=False, sharding=None):
        super().__init__(shape, dtype, weak_type)
        self._type_sharding = sharding

    @property
    def sharding(self):
        return self._type_sharding

    def update(self, shape=None, dtype=None, weak_type=None):
        return ShardedShapedArray(self.shape if shape is None else shape,
                                  self.dtype if dtype is None else dtype,
                                  self.weak_type if weak_type is None else weak_type,
                                  self._type_sharding)

    def str_short(self, short_dtypes: bool = True) -> str:
        dt = short_dtype_name(self.dtype) if short_dtypes else self.dtype.name
        spec = self._type_sharding.spec
        dims = []
        for d, n in enumerate(self.shape):
            axes = spec.axes_of(d) if d < len(spec) else ()
            if not axes:
                dims.append(str(n))
            elif len(axes) == 1:
                dims.append(f"{n}@{axes[0]}")
            else:
                dims.append(f"{n}@({','.join(axes)})")
        return f"{dt}[{','.join(dims)}]"

    def __str__(self):
        return self.str_short(short_dtypes=False)

    def __repr__(self):
        w = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self.str_short(False)}{w})"

    def __eq__(self, other):
        return (isinstance(other, ShapedArray) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type
                and self.sharding == other.sharding)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type, self._type_sharding))


_sharding.set_reshard(lambda x, out_shardings: reshard(x, out_shardings))  # kiln.sharding's
_lax_sc.set_placement(lambda x, shardings: with_sharding_constraint(x, shardings))
# The layouts of eager results of committed arrays (hooks on the primitives).
from kiln.parallel import eager_layout  # noqa: E402,F401
