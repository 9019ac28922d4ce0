"""Placing arrays on shardings: ``device_put(x, sharding)``, ``jit``'s
``in_shardings``/``out_shardings``, ``lax.with_sharding_constraint``, ``reshard``.

kiln keeps an array's global value in host memory; a sharding records which block of
it each device owns (``Array.addressable_shards``) and is what ``shard_map``/``pmap``
split along. Constraints never change values. A ``jit`` with shardings runs its
program once over the global arrays (its kernels already use every core) and gives
its outputs the requested shardings; only ``pmap`` and ``shard_map`` run one program
per device.
"""
from __future__ import annotations

import numpy as np

from kiln.array import Array, make_array, to_array
from kiln.core.trace import Tracer
from kiln.tree_util import tree_flatten, tree_unflatten


def _as_sharding(s, what: str):
    from kiln.devices import Device
    from kiln.sharding import (
        NamedSharding,
        PartitionSpec,
        Sharding,
        SingleDeviceSharding,
        get_abstract_mesh,
    )
    if s is None or isinstance(s, Sharding):
        return s
    if isinstance(s, Device):
        return SingleDeviceSharding(s)
    if isinstance(s, PartitionSpec):
        mesh = get_abstract_mesh()
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


def place_tree(tree, shardings, what: str):
    """Apply a tree prefix of shardings to the leaves of ``tree``."""
    from kiln.sharding import PartitionSpec, Sharding
    leaves, treedef = tree_flatten(tree)
    if shardings is None:
        return tree
    if isinstance(shardings, (Sharding, PartitionSpec)):
        per_leaf = [shardings] * len(leaves)
    else:
        from kiln.api import _flatten_axes

        def is_leaf(s):
            return isinstance(s, (Sharding, PartitionSpec)) or s is None
        s_leaves, s_tree = tree_flatten(shardings, is_leaf=is_leaf)
        proxy = tree_unflatten(s_tree, list(range(len(s_leaves))))
        idx = _flatten_axes(what, treedef, proxy, len(leaves))
        per_leaf = [None if i is None else s_leaves[i] for i in idx]
    return tree_unflatten(treedef, [place(x, s, what) for x, s in zip(leaves, per_leaf)])


def with_sharding_constraint(x, shardings):
    """``x`` unchanged in value, laid out as ``shardings`` (a tree prefix of Shardings or
    PartitionSpecs). Under ``jit`` it is the identity."""
    return place_tree(x, shardings, "with_sharding_constraint shardings")


def reshard(x, out_shardings):
    """``x`` with its layout changed to ``out_shardings`` (values unchanged)."""
    return place_tree(x, out_shardings, "reshard out_shardings")


class ShardedJit:
    """``jit(f, in_shardings=..., out_shardings=...)``: the jitted function with its
    arguments checked against ``in_shardings`` and outputs laid out as
    ``out_shardings``. Other attributes (``lower``, ``trace``, ...) are the jit's."""

    def __init__(self, jitted, in_shardings, out_shardings):
        self._jitted = jitted
        self._in = in_shardings
        self._out = out_shardings
        self.__wrapped__ = jitted
        self.__name__ = getattr(jitted, "__name__", "fun")
        self.__doc__ = getattr(jitted, "__doc__", None)

    def __call__(self, *args, **kwargs):
        if self._in is not None:
            from kiln.sharding import PartitionSpec, Sharding
            ins = self._in
            if isinstance(ins, (Sharding, PartitionSpec)):
                ins = tuple(ins for _ in args)
            if not isinstance(ins, tuple) or len(ins) != len(args):
                raise ValueError(f"jit in_shardings must be a Sharding or a tuple with one "
                                 f"entry per positional argument; got {self._in!r} for "
                                 f"{len(args)} arguments.")
            args = tuple(place_tree(a, s, "jit in_shardings") for a, s in zip(args, ins))
        out = self._jitted(*args, **kwargs)
        return place_tree(out, self._out, "jit out_shardings")

    def __getattr__(self, name):
        return getattr(self._jitted, name)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        import functools
        return functools.partial(self, obj)


def make_array_from_callback(shape, sharding, data_callback, dtype=None):
    """A global array of ``shape`` laid out as ``sharding``, whose blocks come from
    ``data_callback(index)`` (``index``: a tuple of slices), as ``jax.make_array_from_callback``."""
    shape = tuple(int(d) for d in shape)
    sharding = _as_sharding(sharding, "make_array_from_callback")
    out = None
    for _, index in sharding.devices_indices_map(shape).items():
        block = np.asarray(data_callback(index))
        if out is None:
            out = np.empty(shape, dtype if dtype is not None else block.dtype)
        out[index] = block
    if out is None:
        out = np.empty(shape, dtype or np.float32)
    return place(out, sharding, "make_array_from_callback")


def make_array_from_single_device_arrays(shape, sharding, arrays, *, dtype=None):
    """A global array assembled from one block per device (in ``sharding``'s device
    order, as ``jax.make_array_from_single_device_arrays``)."""
    shape = tuple(int(d) for d in shape)
    sharding = _as_sharding(sharding, "make_array_from_single_device_arrays")
    indices = list(sharding.devices_indices_map(shape).values())
    if len(arrays) != len(indices):
        raise ValueError(f"make_array_from_single_device_arrays got {len(arrays)} arrays for "
                         f"a sharding over {len(indices)} devices")
    out = np.empty(shape, dtype if dtype is not None else np.asarray(arrays[0]).dtype)
    for index, a in zip(indices, arrays):
        block = np.asarray(a)
        if out[index].shape != block.shape:
            raise ValueError(f"make_array_from_single_device_arrays: a block of shape "
                             f"{block.shape} for index {index} of a {shape} array")
        out[index] = block
    return place(out, sharding, "make_array_from_single_device_arrays")


def make_array_from_process_local_data(sharding, local_data, global_shape=None):
    """In one process: ``local_data`` is the whole array, laid out as ``sharding``."""
    from kiln import distributed
    if distributed.process_count() > 1:
        raise NotImplementedError("make_array_from_process_local_data over several "
                                  "processes: kiln's multi-process arrays are pmap's "
                                  "per-process slices")
    data = np.asarray(local_data)
    if global_shape is not None and tuple(global_shape) != data.shape:
        raise ValueError(f"global_shape {tuple(global_shape)} differs from the local data's "
                         f"{data.shape} in a single process")
    return place(data, sharding, "make_array_from_process_local_data")


def typeof(x):
    """The abstract value (``ShapedArray``) of ``x``, as ``jax.typeof`` (also of a
    ``ShapeDtypeStruct``)."""
    from kiln.core.avals import ShapedArray
    from kiln.core.trace import get_aval
    aval = getattr(x, "aval", None)
    if isinstance(aval, ShapedArray):
        return aval
    return get_aval(x)
