"""``kiln.sharding`` (as ``jax.sharding``): meshes, partition specs and shardings.

A :class:`Mesh` arranges devices in an n-dimensional grid with named axes; a
:class:`PartitionSpec` says, per array dimension, which mesh axes split it; a
:class:`NamedSharding` pairs the two. kiln keeps every array in host memory: a
sharded array holds its global value, and its sharding says which block of it each
device owns (``addressable_shards``). ``shard_map``/``pmap`` run one program per
device on those blocks, on the device's own worker thread (``kiln.parallel.spmd``).

What it must not hold: execution (see ``kiln.parallel``).
"""
from __future__ import annotations

import functools
import math
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from kiln import _abstract_mesh as _am
from kiln._abstract_mesh import (
    CPU_ABSTRACT_DEVICE,
    EMPTY_ABSTRACT_MESH,
    AbstractMesh,
    AxisType,
)
from kiln._abstract_mesh import _AbstractDevice as AbstractDevice
from kiln.devices import devices

__all__ = ["AbstractDevice", "AbstractMesh", "AxisType", "Mesh", "NamedSharding", "PartitionSpec",
           "Shard", "Sharding", "SingleDeviceSharding", "DuplicateSpecError",
           "IndivisibleError",
           "get_abstract_mesh", "get_mesh", "make_single_device_sharding", "reshard",
           "set_mesh", "use_abstract_mesh", "use_mesh", "auto_axes", "explicit_axes"]


class DuplicateSpecError(ValueError):
    """A partition spec names one mesh axis for two array dimensions."""


class IndivisibleError(ValueError):
    """A sharding splits a dimension into a number of parts that does not divide it."""


class _Unconstrained:
    def __repr__(self):
        return "UNCONSTRAINED"


def _axis_set(axes, what: str) -> frozenset:
    if isinstance(axes, frozenset):
        return axes
    if not isinstance(axes, set):
        raise TypeError(f"{what} argument of PartitionSpec should of type `frozenset` or "
                        f"`set`. Got type {axes}")
    return frozenset(axes)


def _check_spec_axes(partitions: tuple, unreduced: frozenset, reduced: frozenset) -> None:
    """JAX's checks of a spec's ``unreduced``/``reduced`` axes against its partitions."""
    for name, axes in (("unreduced", unreduced), ("reduced", reduced)):
        if None in axes:
            raise ValueError(f"{name} cannot contain None. All elements in {name} should "
                             "refer to the mesh axes.")
    if unreduced & reduced:
        raise ValueError("`unreduced` and `reduced` argument to PartitionSpec cannot "
                         f"overlap. Got unreduced: {unreduced} and reduced: {reduced}")
    for part in partitions:
        for a in (part if isinstance(part, tuple) else (part,)):
            for name, axes in (("unreduced", unreduced), ("reduced", reduced)):
                if a in axes:
                    raise ValueError(f"partitions cannot overlap with {name} axes passed "
                                     f"to PartitionSpec. Got partitions: {partitions} and "
                                     f"{name} axes: {axes}")


def _canonical_partition(p):
    if isinstance(p, list):
        p = tuple(p)
    if isinstance(p, tuple):
        for q in p:
            if isinstance(q, (tuple, list)):
                raise ValueError("A tuple inside PartitionSpec cannot contain a nested tuple. "
                                 f"Got partition: {p} and the nested tuple: {q}")
        if len(p) == 1:
            p = p[0]
        elif not p:
            p = None
    return p


class PartitionSpec:
    """Per array dimension: ``None`` (not split), a mesh axis name, or a tuple of names
    (split over their product). Trailing dimensions not named are not split.

    Specs are interned, as JAX's: equal arguments give the same object (``P((), 'x') is
    P(None, 'x')``). The class cannot be subclassed."""

    UNCONSTRAINED = _Unconstrained()
    __slots__ = ("_partitions", "reduced", "unreduced", "__weakref__")
    _interned: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def __new__(cls, *partitions, reduced=frozenset(), unreduced=frozenset()):
        parts = tuple(_canonical_partition(p) for p in partitions)
        reduced = _axis_set(reduced, "reduced")
        unreduced = _axis_set(unreduced, "unreduced")
        key = (parts, unreduced, reduced)
        try:
            hit = cls._interned.get(key)
        except TypeError:               # an unhashable entry: not interned
            hit, key = None, None
        if hit is not None:
            return hit
        if reduced or unreduced:
            _check_spec_axes(parts, unreduced, reduced)
        self = object.__new__(cls)
        self._partitions = parts
        self.reduced = reduced
        self.unreduced = unreduced
        if key is not None:
            cls._interned[key] = self
        return self

    def __init_subclass__(cls, **kwargs):
        raise TypeError("Subclassing `jax.P` is prohibited.")

    def __reduce__(self):
        return (_make_spec, (self._partitions, self.unreduced, self.reduced))

    def __iter__(self):
        return iter(self._partitions)

    def __len__(self):
        return len(self._partitions)

    def __getitem__(self, i):
        return self._partitions[i]

    def __eq__(self, other):
        if isinstance(other, PartitionSpec):
            return self._normalized() == other._normalized()
        return False

    def __hash__(self):
        return hash(self._normalized())

    def _normalized(self):
        parts = list(self._partitions)
        while parts and parts[-1] is None:
            parts.pop()
        if self.reduced or self.unreduced:
            return tuple(parts), self.reduced, self.unreduced
        return tuple(parts)

    def to_ct_spec(self) -> PartitionSpec:
        """The spec of a cotangent of a value laid out as this one (JAX's): reduced axes
        become unreduced and unreduced ones reduced."""
        return PartitionSpec(*self._partitions, reduced=self.unreduced,
                             unreduced=self.reduced)

    def __repr__(self):
        items = [repr(p) for p in self._partitions]
        for name in ("unreduced", "reduced"):
            axes = getattr(self, name)
            if axes:
                items.append(f"{name}={{{', '.join(repr(a) for a in sorted(axes, key=str))}}}")
        inner = ", ".join(items)
        if len(items) == 1 and len(self._partitions) == 1:
            inner += ","
        return f"P({inner})"

    @property
    def partitions(self) -> tuple:
        """The per-dimension entries, as a tuple."""
        return self._partitions

    def index(self, value) -> int:
        """The first dimension whose entry is ``value`` (``ValueError`` if none), as JAX's
        (tuple) ``PartitionSpec.index``."""
        return self._partitions.index(value)

    def count(self, value) -> int:
        """The number of dimensions whose entry is ``value``."""
        return self._partitions.count(value)

    def __add__(self, other):
        if isinstance(other, PartitionSpec):
            return PartitionSpec(*self._partitions, *other._partitions,
                                 reduced=self.reduced | other.reduced,
                                 unreduced=self.unreduced | other.unreduced)
        if not isinstance(other, tuple):
            return NotImplemented
        self._check_tuple_operand(other, "__add__")
        return PartitionSpec(*self._partitions, *other)

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        self._check_tuple_operand(other, "__radd__")
        return PartitionSpec(*other, *self._partitions)

    def _check_tuple_operand(self, other: tuple, op: str) -> None:
        for name in ("unreduced", "reduced"):
            if getattr(self, name):
                raise TypeError(f"other {other} cannot be of instance `tuple` when self "
                                f"{self} has {name} in `{op}` of PartitionSpec.")

    def axes_of(self, dim: int) -> tuple:
        """The mesh axes splitting array dimension ``dim`` (empty when not split)."""
        p = self._partitions[dim] if dim < len(self._partitions) else None
        if p is None or p is PartitionSpec.UNCONSTRAINED:
            return ()
        return p if isinstance(p, tuple) else (p,)

    def mesh_axes(self) -> list:
        """Every mesh axis named, in order."""
        out = []
        for d in range(len(self._partitions)):
            out.extend(self.axes_of(d))
        return out


P = PartitionSpec


def _make_spec(partitions, unreduced, reduced) -> PartitionSpec:
    """Unpickle a :class:`PartitionSpec` (the interned one)."""
    return PartitionSpec(*partitions, unreduced=unreduced, reduced=reduced)


_mesh_stack: list = []


class Mesh:
    """Devices arranged in a grid whose axes have names.

    Args:
      devices: an array (any nesting of lists) of devices, one dimension per axis.
      axis_names: one name per dimension of ``devices``.
      axis_types: one :class:`AxisType` per axis (default ``Auto``).

    Meshes are interned, as JAX's: the same devices, names and types give the same
    object. ``Mesh(np.empty((), dtype=object), ())`` is the empty mesh.
    """

    _interned: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def __new__(cls, devices, axis_names, *, axis_types=None):
        devs = np.array(devices, dtype=object)
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        if any(a is None for a in axis_names):
            raise ValueError(f"Mesh axis names cannot be None. Got: {axis_names}")
        if not axis_names and devs.ndim == 0 and devs.item() is None:
            return _EMPTY_CONCRETE_MESH
        if devs.ndim != len(axis_names):
            raise ValueError(f"Mesh requires the ndim of its first argument (`devices`) to "
                             f"equal the length of its second argument (`axis_names`), but "
                             f"got devices.ndim == {devs.ndim} and len(axis_names) == "
                             f"{len(axis_names)}.")
        if len(set(axis_names)) != len(axis_names):
            raise ValueError(f"Mesh axis names must be unique, got {axis_names}")
        ids = [d.id for d in devs.flat]
        if len(set(ids)) != len(ids):
            raise ValueError(f"Mesh devices must be unique, got ids {ids}")
        axis_types = _normalize_axis_types(axis_names, axis_types, "Mesh")
        key = (tuple(ids), devs.shape, axis_names, axis_types)
        hit = Mesh._interned.get(key) if cls is Mesh else None
        if hit is not None:
            return hit
        self = object.__new__(cls)
        devs.flags.writeable = False
        self.devices = devs
        self.axis_names = axis_names
        self.axis_types = axis_types
        if cls is Mesh:
            Mesh._interned[key] = self
        return self

    def __reduce__(self):
        return (_make_mesh_of, (self.devices, self.axis_names, self.axis_types))

    @property
    def _flat_devices_tuple(self) -> tuple:
        """The devices in row-major order (JAX's private attribute)."""
        return tuple(self.devices.flat)

    def _axes_of(self, kind) -> tuple:
        return tuple(n for n, t in zip(self.axis_names, self.axis_types) if t == kind)

    @property
    def explicit_axes(self) -> tuple:
        """The names of the axes of type ``Explicit``."""
        return self._axes_of(AxisType.Explicit)

    @property
    def auto_axes(self) -> tuple:
        """The names of the axes of type ``Auto``."""
        return self._axes_of(AxisType.Auto)

    @property
    def manual_axes(self) -> tuple:
        """The names of the axes of type ``Manual``."""
        return self._axes_of(AxisType.Manual)

    @property
    def shape(self) -> OrderedDict:
        return OrderedDict(zip(self.axis_names, self.devices.shape))

    @property
    def axis_sizes(self) -> tuple:
        return tuple(self.devices.shape)

    @property
    def shape_tuple(self) -> tuple:
        return tuple(zip(self.axis_names, self.devices.shape))

    @property
    def size(self) -> int:
        return int(self.devices.size)

    @property
    def empty(self) -> bool:
        return self.devices.size == 0

    @property
    def device_ids(self) -> np.ndarray:
        return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

    @property
    def local_devices(self) -> list:
        """The mesh's devices of this process (``kiln.distributed``)."""
        here = _process_index()
        return [d for d in self.devices.flat if d.process_index == here]

    @property
    def are_all_axes_explicit(self) -> bool:
        """Whether the mesh has axes and all are ``AxisType.Explicit``."""
        return bool(self.axis_types) and all(t == AxisType.Explicit for t in self.axis_types)

    @property
    def are_all_axes_auto(self) -> bool:
        """Whether the mesh has axes and all are ``AxisType.Auto``."""
        return bool(self.axis_types) and all(t == AxisType.Auto for t in self.axis_types)

    @property
    def are_all_axes_manual(self) -> bool:
        """Whether the mesh has axes and all are ``AxisType.Manual``."""
        return bool(self.axis_types) and all(t == AxisType.Manual for t in self.axis_types)

    @property
    def local_mesh(self) -> Mesh:
        """The sub-mesh of this process's devices (they must form a sub-grid, as JAX
        requires)."""
        here = _process_index()
        mine = np.vectorize(lambda d: d.process_index == here, otypes=[bool])(self.devices)
        if mine.all():
            return self
        keep = [np.flatnonzero(mine.any(axis=tuple(j for j in range(mine.ndim) if j != i)))
                for i in range(mine.ndim)]
        sub = self.devices[np.ix_(*keep)]
        if sub.size != int(mine.sum()):
            raise ValueError("Devices connected to this process do not form a sub-grid of "
                             f"the mesh {self!r}; build global arrays with "
                             "make_array_from_callback instead.")
        return Mesh(sub, self.axis_names, axis_types=self.axis_types)

    @property
    def abstract_mesh(self) -> AbstractMesh:
        """The mesh's axis sizes, names and types, without its devices."""
        if not self.axis_names:
            return EMPTY_ABSTRACT_MESH
        return AbstractMesh(self.axis_sizes, self.axis_names, self.axis_types,
                            abstract_device=CPU_ABSTRACT_DEVICE)

    def __eq__(self, other):
        return (isinstance(other, Mesh) and self.axis_names == other.axis_names
                and self.axis_types == other.axis_types
                and self.devices.shape == other.devices.shape
                and all(a.id == b.id for a, b in zip(self.devices.flat, other.devices.flat)))

    def __hash__(self):
        return hash((self.axis_names, self.axis_types, self.devices.shape,
                     tuple(d.id for d in self.devices.flat)))

    def __str__(self):
        sizes = ", ".join(f"{n!r}: {s}" for n, s in zip(self.axis_names, self.devices.shape))
        return f"Mesh({sizes}, axis_types={self.axis_types!r})"

    def __repr__(self):
        return (f"Mesh(axis_sizes={self.axis_sizes!r}, axis_names={self.axis_names!r}, "
                f"axis_types={self.axis_types!r})")

    def __enter__(self):
        _mesh_stack.append((self, "legacy"))
        return self

    def __exit__(self, *exc):
        _mesh_stack.pop()
        return False

    def coords(self) -> list:
        """``(device, {axis: index})`` for every device, in row-major order."""
        out = []
        for idx in np.ndindex(*self.devices.shape):
            out.append((self.devices[idx], dict(zip(self.axis_names, idx))))
        return out


class _EmptyConcreteMesh(Mesh):
    """The mesh without axes or devices that ``get_mesh()`` gives outside ``set_mesh``
    (JAX's ``Mesh(np.empty((), dtype=object), ())``)."""

    def __new__(cls):
        self = object.__new__(cls)
        self.devices = np.empty((), dtype=object)
        self.axis_names = ()
        self.axis_types = ()
        return self

    def __reduce__(self):
        return (_empty_concrete_mesh, ())

    @property
    def axis_sizes(self) -> tuple:
        return ()

    @property
    def size(self) -> int:
        return 0

    @property
    def empty(self) -> bool:
        return True

    @property
    def local_devices(self) -> list:
        return []

    def __repr__(self):
        return "Mesh(axis_sizes=(), axis_names=())"

    def __str__(self):
        return "Mesh()"


_EMPTY_CONCRETE_MESH = _EmptyConcreteMesh()


def _empty_concrete_mesh() -> Mesh:
    return _EMPTY_CONCRETE_MESH


def _make_mesh_of(devices, axis_names, axis_types) -> Mesh:
    """Unpickle a :class:`Mesh` (the interned one)."""
    return Mesh(devices, axis_names, axis_types=axis_types)


def _normalize_axis_types(axis_names: tuple, axis_types, what: str) -> tuple:
    """JAX's checks of a mesh's ``axis_types`` (a list is taken as a tuple)."""
    if isinstance(axis_types, list):
        axis_types = tuple(axis_types)
    return _am._normalize_axis_types(axis_names, axis_types, what)


def type_mesh(mesh: Mesh) -> AbstractMesh:
    """The mesh in the type of a value sharded over ``mesh`` (``typeof(x).sharding.mesh``):
    its abstract mesh."""
    return mesh.abstract_mesh


def unsharded_type_sharding(ndim: int) -> NamedSharding:
    """The sharding in the type of an ``ndim``-dimensional value outside any mesh:
    ``NamedSharding(AbstractMesh(()), P(None, ...))`` (``kiln.typeof(x).sharding``)."""
    return NamedSharding(EMPTY_ABSTRACT_MESH, PartitionSpec(*([None] * ndim)))


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None) -> Mesh:
    """A mesh of the first ``prod(axis_shapes)`` devices (as ``jax.make_mesh``).

    Args:
      axis_shapes: the size of each axis.
      axis_names: the name of each axis.
      devices: devices to use (default: ``kiln.devices()``).
      axis_types: ``AxisType`` per axis (JAX's default: ``Explicit``).
    """
    axis_shapes = tuple(int(s) for s in axis_shapes)
    n = math.prod(axis_shapes)
    pool = list(devices) if devices is not None else _all_devices()
    if len(pool) < n:
        raise ValueError(f"Number of devices {len(pool)} must be >= the product of mesh_shape "
                         f"{axis_shapes}")
    if axis_types is None:
        axis_types = (AxisType.Explicit,) * len(axis_shapes)
    axis_names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    axis_types = _normalize_axis_types(axis_names, axis_types, "make_mesh")
    return Mesh(np.array(pool[:n], dtype=object).reshape(axis_shapes), axis_names,
                axis_types=axis_types)


def _all_devices() -> list:
    return devices()


def _process_index() -> int:
    from kiln import distributed
    return distributed.process_index()


# ``Shard.data`` is a ``kiln.Array``: ``kiln.array`` installs ``make_array`` here, and a
# value type that holds only some blocks (``kiln.parallel.global_array``'s multi-process
# values) registers how to read a device's block. Both sit above these data types.
_make_array = None
_block_readers: dict = {}


def set_array_maker(make_array) -> None:
    """Install ``make_array(numpy_block)``, what ``Shard.data`` returns."""
    global _make_array
    _make_array = make_array


def register_block_reader(value_type: type, read) -> None:
    """``Shard.data`` of an array holding a ``value_type`` reads ``read(value, device)``."""
    _block_readers[value_type] = read


class Shard:
    """One device's block of a sharded array. Its ``data`` is a single-device array,
    committed to the shard's device when the array it comes from is committed."""

    __slots__ = ("device", "index", "replica_id", "_array", "_committed", "_data")

    def __init__(self, device, index, replica_id, array):
        self.device = device
        self.index = index
        self.replica_id = replica_id
        self._array = array
        self._committed = False
        self._data = None

    def _on_device(self, block):
        out = _make_array(block)
        if self._committed:
            out._sharding = (None if self.device == devices()[0]
                             else SingleDeviceSharding(self.device))
        return out

    @property
    def data(self):
        """The block as a single-device Array (the same object each time it is read)."""
        if self._data is None:
            self._data = self._read()
        return self._data

    def _read(self):
        read = _block_readers.get(type(self._array))
        if read is not None:          # e.g. a multi-process global array's local block
            return self._on_device(read(self._array, self.device))
        return self._on_device(np.asarray(self._array)[self.index])

    def __repr__(self):
        return (f"Shard(device={self.device!r}, index={self.index}, "
                f"replica_id={self.replica_id}, data={self.data})")


class _UnreducedShard(Shard):
    """A device's block of an array unreduced along mesh axes: its partial of the sum
    (the array's ``_partials``; else the whole block on the first device along those
    axes, zeros on the others)."""

    __slots__ = ("_coords", "_unreduced", "_parts")

    def __init__(self, device, index, replica_id, array, coords, unreduced, partials):
        super().__init__(device, index, replica_id, array)
        self._coords = coords
        self._unreduced = unreduced
        self._parts = partials

    def _read(self):
        parts = self._parts
        if parts is not None and self.device.id in parts:
            return self._on_device(np.asarray(parts[self.device.id]))
        block = np.asarray(self._array)[self.index]
        if any(self._coords[a] for a in self._unreduced):
            block = np.zeros_like(block)
        return self._on_device(block)


class Sharding:
    """Base class: how an array's elements are laid out over devices."""

    memory_kind = "device"

    @property
    def device_set(self) -> set:
        raise NotImplementedError

    @property
    def num_devices(self) -> int:
        return len(self.device_set)

    @property
    def addressable_devices(self) -> set:
        """The devices of this process (``kiln.distributed``) that the sharding uses."""
        here = _process_index()
        return {d for d in self.device_set if d.process_index == here}

    @property
    def is_fully_addressable(self) -> bool:
        """Whether this process holds every device of the sharding."""
        here = _process_index()
        return all(d.process_index == here for d in self.device_set)

    def devices_indices_map(self, global_shape) -> dict:
        """``{device: index}``: the slices of an array of ``global_shape`` each device
        holds (cached per sharding and shape: :func:`common_devices_indices_map`)."""
        return common_devices_indices_map(self, tuple(global_shape))

    def _devices_indices_map(self, global_shape) -> dict:
        raise NotImplementedError

    def addressable_devices_indices_map(self, global_shape) -> dict:
        here = _process_index()
        return {d: i for d, i in self.devices_indices_map(global_shape).items()
                if d.process_index == here}

    def shard_shape(self, global_shape) -> tuple:
        idx = next(iter(self.devices_indices_map(global_shape).values()))
        return tuple(len(range(*s.indices(n))) for s, n in zip(idx, global_shape))

    def is_equivalent_to(self, other, ndim: int) -> bool:
        """Whether ``self`` and ``other`` lay out every ``ndim``-dimensional array alike:
        the same devices in the same order, each holding the same block, and the same
        memory kind (JAX compares their HLO shardings)."""
        if not isinstance(other, Sharding):
            return False
        if self == other:
            return True
        if self.memory_kind != other.memory_kind:
            return False
        try:
            mine, theirs = self._device_assignment, other._device_assignment
        except (AttributeError, ValueError):
            return False
        if tuple(mine) != tuple(theirs):
            return False
        shape = (len(mine) or 1,) * ndim      # divisible by every split of a dimension

        def blocks(sharding):
            return {d: tuple(s.indices(n) for s, n in zip(index, shape))
                    for d, index in sharding.devices_indices_map(shape).items()}
        try:
            return blocks(self) == blocks(other)
        except ValueError:
            return False

    def with_memory_kind(self, kind):
        return self


#: The memory kinds a sharding may name (JAX's on CPU). Every kiln array lives in host
#: memory: a sharding records the kind it was given, nothing moves.
MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")


def _check_memory_kind(kind) -> None:
    if kind is not None and kind not in MEMORY_KINDS:
        raise ValueError(f"Got invalid memory kind: {kind}. The memory kinds kiln accepts "
                         f"are: {', '.join(MEMORY_KINDS)}.")


@functools.lru_cache(maxsize=4096)
def common_devices_indices_map(sharding: Sharding, global_shape: tuple) -> dict:
    """``sharding.devices_indices_map(global_shape)``, cached (as JAX's, which
    ``jax.clear_caches`` empties)."""
    return sharding._devices_indices_map(global_shape)


class NamedSharding(Sharding):
    """An array split over a :class:`Mesh` as a :class:`PartitionSpec` says.

    Args:
      mesh: the device mesh.
      spec: per array dimension, the mesh axes that split it.
      memory_kind: one of :data:`MEMORY_KINDS` (recorded only: every kiln array lives in
        host memory); default ``"device"`` (``None`` over an ``AbstractMesh``).
    """

    def __init__(self, mesh: Mesh, spec: PartitionSpec | None = None, *,
                 memory_kind=None):
        _check_memory_kind(memory_kind)
        if not isinstance(spec, PartitionSpec):
            if spec is None:
                spec = PartitionSpec()
            elif isinstance(spec, (tuple, list)):
                spec = PartitionSpec(*spec)
            else:
                raise TypeError(f"NamedSharding spec must be a PartitionSpec, got {spec!r}")
        seen: set = set()
        for a in spec.mesh_axes():
            if a in seen:
                raise DuplicateSpecError(
                    "A single NamedSharding spec specification can map every mesh axis to at "
                    f"most one positional dimension, but {spec!r} has duplicate entries for "
                    f"`{a}`")
            seen.add(a)
            if a not in mesh.axis_names:
                raise ValueError(f"Resource axis: {a} of {spec!r} is not found in mesh: "
                                 f"{tuple(mesh.axis_names)}.")
        kinds = dict(zip(mesh.axis_names, mesh.axis_types))
        for name, axes in (("Unreduced", spec.unreduced), ("Reduced", spec.reduced)):
            for a in axes:
                if a not in kinds:
                    raise ValueError(f"{name} axes {a} is not found in mesh.axis_names="
                                     f"{tuple(mesh.axis_names)}. Got pspec={spec!r}")
                if kinds[a] != AxisType.Explicit:
                    raise ValueError(f"{name} axes can only refer to mesh axes that is of "
                                     f"type `Explicit`. Got {name.lower()} axes: "
                                     f"{set(axes)} and mesh: {mesh}")
        self.mesh = mesh
        self.spec = spec
        self._memory_kind = memory_kind

    @property
    def memory_kind(self):
        if self._memory_kind is None and not isinstance(self.mesh, AbstractMesh):
            return "device"
        return self._memory_kind

    def with_memory_kind(self, kind) -> NamedSharding:
        return self.update(memory_kind=kind)

    def __reduce__(self):
        return (_make_named_sharding, (self.mesh, self.spec, self._memory_kind))

    def check_compatible_aval(self, aval_shape) -> None:
        """Raise ``ValueError`` when the spec names more dimensions than ``aval_shape``
        has (JAX's check)."""
        if len(aval_shape) < len(self.spec):
            extra = " For scalars the PartitionSpec should be P()" if not aval_shape else ""
            raise ValueError(f"Sharding {self} is only valid for values of rank at least "
                             f"{len(self.spec)}, but was applied to a value of rank "
                             f"{len(aval_shape)}.{extra}")

    def update(self, **kwargs) -> NamedSharding:
        """This sharding with ``mesh``, ``spec`` and/or ``memory_kind`` replaced."""
        unknown = set(kwargs) - {"mesh", "spec", "memory_kind"}
        if unknown:
            raise TypeError(f"NamedSharding.update got unexpected arguments {sorted(unknown)}")
        return NamedSharding(kwargs.get("mesh", self.mesh), kwargs.get("spec", self.spec),
                             memory_kind=kwargs.get("memory_kind", self._memory_kind))

    @property
    def device_set(self) -> set:
        return set(self.mesh.devices.flat)

    @property
    def _device_assignment(self) -> tuple:
        """The mesh's devices in its order (JAX's private attribute, read by its tests)."""
        return tuple(self.mesh.devices.flat)

    @property
    def is_fully_replicated(self) -> bool:
        return all(self.mesh.shape[a] == 1 for a in self.spec.mesh_axes())

    def __eq__(self, other):
        return (isinstance(other, NamedSharding) and self.mesh == other.mesh
                and self.spec == other.spec and self.memory_kind == other.memory_kind)

    def __hash__(self):
        return hash((self.mesh, self.spec, self.memory_kind))

    def __repr__(self):
        if isinstance(self.mesh, AbstractMesh):    # a type's sharding: no memory kind
            return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"
        return (f"NamedSharding(mesh={self.mesh}, spec={self.spec!r}, "
                f"memory_kind={self.memory_kind})")

    def check_shape(self, global_shape, what: str = "array") -> None:
        """Raise ``ValueError`` unless every split dimension divides evenly."""
        if len(self.spec) > len(global_shape):
            raise ValueError(f"Sharding {self!r} is only valid for values of rank at least "
                             f"{len(self.spec)}, but was applied to a value of rank "
                             f"{len(global_shape)}")
        for d, n in enumerate(global_shape):
            k = math.prod(self.mesh.shape[a] for a in self.spec.axes_of(d))
            if n % k:
                tiling = [math.prod(self.mesh.shape[a] for a in self.spec.axes_of(i))
                          for i in range(len(global_shape))]
                raise IndivisibleError(
                    f"Sharding {self!r} implies that {what} axis {d} is partitioned {k} "
                    f"times, but the dimension size is {n} (full shape: {tuple(global_shape)}"
                    f", per-dimension tiling factors: {tiling} should evenly divide the "
                    "shape)")

    def block_index(self, coords: dict, global_shape) -> tuple:
        """The slices of the block the device at mesh ``coords`` owns."""
        out = []
        for d, n in enumerate(global_shape):
            axes = self.spec.axes_of(d)
            if not axes:
                out.append(slice(None))
                continue
            k, pos = 1, 0
            for a in axes:
                pos = pos * self.mesh.shape[a] + coords[a]
                k *= self.mesh.shape[a]
            b = n // k
            out.append(slice(pos * b, (pos + 1) * b))
        return tuple(out)

    def replica_id(self, coords: dict) -> int:
        used = set(self.spec.mesh_axes())
        rid = 0
        for a in self.mesh.axis_names:
            if a not in used:
                rid = rid * self.mesh.shape[a] + coords[a]
        return rid

    def _devices_indices_map(self, global_shape) -> dict:
        self.check_shape(global_shape)
        return {dev: self.block_index(c, global_shape) for dev, c in self.mesh.coords()}

    def _shards(self, array, partials=None) -> list:
        shape, here = array.shape, _process_index()
        if self.spec.unreduced:
            return [_UnreducedShard(dev, self.block_index(c, shape), self.replica_id(c),
                                    array, c, self.spec.unreduced, partials)
                    for dev, c in self.mesh.coords() if dev.process_index == here]
        return [Shard(dev, self.block_index(c, shape), self.replica_id(c), array)
                for dev, c in self.mesh.coords() if dev.process_index == here]


class SingleDeviceSharding(Sharding):
    """An array held whole by one device (every unsharded kiln array)."""

    is_fully_replicated = True

    def __init__(self, device, *, memory_kind=None):
        _check_memory_kind(memory_kind)
        self.device = device
        self._memory_kind = memory_kind

    @property
    def _device(self):
        return self.device

    def with_memory_kind(self, kind) -> SingleDeviceSharding:
        return SingleDeviceSharding(self.device, memory_kind=kind)

    def __reduce__(self):
        return (_make_single_device_sharding, (self.device, self._memory_kind))

    @property
    def memory_kind(self):
        return self._memory_kind or "device"

    @property
    def device_set(self) -> set:
        return {self.device}

    @property
    def _device_assignment(self) -> tuple:
        return (self.device,)

    def _devices_indices_map(self, global_shape) -> dict:
        return {self.device: tuple(slice(None) for _ in global_shape)}

    def _shards(self, array) -> list:
        return [Shard(self.device, tuple(slice(None) for _ in array.shape), 0, array)]

    def __eq__(self, other):
        return (isinstance(other, SingleDeviceSharding) and other.device == self.device
                and other.memory_kind == self.memory_kind)

    def __hash__(self):
        return hash(("single", self.device, self.memory_kind))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self.device!r}, memory_kind={self.memory_kind})"


def set_mesh(mesh: Mesh | None):
    """Set the mesh used by ``shard_map``/``jit`` when none is given (as ``jax.set_mesh``);
    usable as a context manager."""
    return _MeshContext(mesh)


use_mesh = set_mesh


class _MeshContext:
    """``set_mesh``/``use_mesh`` (``kind="set"``: replaces the mesh context) and
    ``use_abstract_mesh`` (``kind="abstract"``: sets only the abstract mesh)."""

    def __init__(self, mesh, kind: str = "set"):
        self.mesh = mesh
        self.kind = kind
        self.prev: list | None = None
        if kind == "set":            # ``set_mesh(m)`` takes effect when called, as JAX's
            self._push()

    def _push(self):
        self.prev = list(_mesh_stack)
        if self.kind == "set":
            _mesh_stack.clear()
        if self.mesh is not None:
            _mesh_stack.append((self.mesh, self.kind))

    def __enter__(self):
        if self.prev is None:
            self._push()
        return self.mesh

    def __exit__(self, *exc):
        _mesh_stack.clear()
        _mesh_stack.extend(self.prev or ())
        self.prev = None
        return False


def use_abstract_mesh(mesh: AbstractMesh) -> _MeshContext:
    """Set the abstract mesh (``get_abstract_mesh()``) for a ``with`` block, leaving the
    concrete mesh context as it is (as ``jax.sharding.use_abstract_mesh``).

    Raises:
      ValueError: if ``mesh`` is not an ``AbstractMesh``, or if it changes the size of a
        non-empty abstract mesh already set.
    """
    if not isinstance(mesh, AbstractMesh):
        raise ValueError("Expected mesh of type `jax.sharding.AbstractMesh`. Got type: "
                         f"{type(mesh)}")
    prev = get_abstract_mesh()
    if not prev.empty and not mesh.empty and prev.size != mesh.size:
        raise ValueError(f"use_abstract_mesh cannot change the size of the mesh. Got new mesh: "
                         f"{mesh} with size={mesh.size} and prev mesh: {prev} with "
                         f"size={prev.size}")
    return _MeshContext(mesh, "abstract")


def get_abstract_mesh() -> AbstractMesh:
    """The abstract mesh of the ``set_mesh``/``use_abstract_mesh`` context: the empty
    ``AbstractMesh((), ())`` outside one (a legacy ``with mesh:`` sets none, as in JAX)."""
    for mesh, kind in reversed(_mesh_stack):
        if kind != "legacy":
            return mesh.abstract_mesh
    return EMPTY_ABSTRACT_MESH


def get_mesh() -> Mesh:
    """The concrete mesh set by ``set_mesh``: an empty ``Mesh`` outside one."""
    for mesh, kind in reversed(_mesh_stack):
        if kind == "set":
            return mesh
    return _EMPTY_CONCRETE_MESH


def context_mesh() -> Mesh | None:
    """The concrete mesh of the innermost ``set_mesh``/``with mesh:`` context (``None``
    outside): the mesh ``shard_map``, ``device_put`` and sharding constraints default to."""
    for mesh, kind in reversed(_mesh_stack):
        if kind != "abstract":
            return mesh
    return None


def concrete_named_sharding(sharding: Any, what: str) -> Any:
    """``sharding``, with an ``AbstractMesh`` replaced by the context's concrete mesh of the
    same axis names and sizes (JAX resolves abstract meshes against the mesh context)."""
    if not (isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh)):
        return sharding
    am = sharding.mesh
    mesh = context_mesh()
    if mesh is None or mesh.axis_names != am.axis_names or mesh.axis_sizes != am.axis_sizes:
        raise ValueError(f"{what}: the sharding {sharding!r} is over an AbstractMesh, and no "
                         "mesh context with the same axes is set; use "
                         "kiln.sharding.set_mesh(mesh) or a NamedSharding over a Mesh.")
    if mesh.axis_types != am.axis_types:
        mesh = Mesh(mesh.devices, mesh.axis_names, axis_types=am.axis_types)
    return NamedSharding(mesh, sharding.spec, memory_kind=sharding._memory_kind)


def modify_spec_for_auto_manual(spec: PartitionSpec, mesh) -> PartitionSpec:
    """``spec`` with only the mesh axes of type ``Explicit`` (JAX's rule for the spec in
    a type: ``Auto`` and ``Manual`` axes are not part of it), in its partitions and in
    its unreduced and reduced axes."""
    kinds = dict(zip(mesh.axis_names, mesh.axis_types))

    def keep(a) -> bool:
        return kinds.get(a) == AxisType.Explicit
    parts = []
    for p in spec:
        if p is None or p is PartitionSpec.UNCONSTRAINED:
            parts.append(p)
        elif isinstance(p, tuple):
            parts.append(tuple(a for a in p if keep(a)))
        else:
            parts.append(p if keep(p) else None)
    return PartitionSpec(*parts, unreduced={a for a in spec.unreduced if keep(a)},
                         reduced={a for a in spec.reduced if keep(a)})


def make_single_device_sharding(device, *, memory_kind=None) -> SingleDeviceSharding:
    """``SingleDeviceSharding(device, memory_kind=memory_kind)``."""
    return SingleDeviceSharding(device, memory_kind=memory_kind)


def _make_single_device_sharding(device, memory_kind) -> SingleDeviceSharding:
    return SingleDeviceSharding(device, memory_kind=memory_kind)


def _make_named_sharding(mesh, spec, memory_kind) -> NamedSharding:
    return NamedSharding(mesh, spec, memory_kind=memory_kind)


# ``reshard`` runs in the SPMD runtime, which installs it here when imported
# (``kiln.parallel.placement``; this module holds only data types).
_reshard = None


def set_reshard(fn) -> None:
    """Install ``reshard(x, out_shardings)`` (``kiln.parallel.placement``'s)."""
    global _reshard
    _reshard = fn


def reshard(x, out_shardings):
    """``x`` laid out as ``out_shardings`` (values unchanged); see ``kiln.reshard``."""
    if _reshard is None:
        raise RuntimeError("kiln.sharding.reshard needs kiln.parallel: import kiln")
    return _reshard(x, out_shardings)


# ``auto_axes``/``explicit_axes`` (``kiln.parallel.axis_types``, which installs them).
_axis_type_fns: dict = {}


def set_axis_type_fns(auto, explicit) -> None:
    """Install ``auto_axes``/``explicit_axes`` (``kiln.parallel.axis_types``')."""
    _axis_type_fns.update(auto=auto, explicit=explicit)


def auto_axes(f=None, /, *, axes=None, out_sharding=None):
    """``f`` run with mesh ``axes`` switched to ``Auto``, its results laid out as
    ``out_sharding``; see ``kiln.parallel.axis_types``."""
    return _axis_type_fns["auto"](f, axes=axes, out_sharding=out_sharding)


def explicit_axes(f=None, /, *, axes=None, in_sharding=None):
    """``f`` run with mesh ``axes`` switched to ``Explicit``, its arguments laid out as
    ``in_sharding``; see ``kiln.parallel.axis_types``."""
    return _axis_type_fns["explicit"](f, axes=axes, in_sharding=in_sharding)


class UnspecifiedValue:
    """``jit``'s "no sharding given" (JAX's ``UNSPECIFIED``): in ``in_shardings`` and
    ``out_shardings`` it means what ``None`` does."""

    __slots__ = ()

    def __repr__(self):
        return "UnspecifiedValue"

    def __reduce__(self):
        return "UNSPECIFIED"


UNSPECIFIED = UnspecifiedValue()
