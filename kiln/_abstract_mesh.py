"""``AbstractMesh`` (``jax.sharding.AbstractMesh``): a mesh's axis names, sizes and types,
without devices.

It is what ``get_abstract_mesh()`` returns (the empty ``AbstractMesh((), ())`` outside a
``set_mesh`` context), what ``Mesh.abstract_mesh`` gives, and the mesh in the type of a
value (``typeof(x).sharding.mesh``). Asking it for devices raises ``ValueError``, as JAX.
"""
from __future__ import annotations

import enum
import math
from collections import OrderedDict
from typing import Any

__all__ = ["AbstractMesh", "AxisType", "CPU_ABSTRACT_DEVICE", "EMPTY_ABSTRACT_MESH"]


class AxisType(enum.Enum):
    """How a mesh axis is partitioned: by the compiler (``Auto``), in the array's type
    (``Explicit``) or by hand inside ``shard_map`` (``Manual``)."""
    Auto = enum.auto()
    Explicit = enum.auto()
    Manual = enum.auto()

    def __repr__(self):
        return self.name


class _AbstractDevice:
    """The kind of device a mesh's devices are (printed in an abstract mesh's repr)."""

    __slots__ = ("device_kind", "num_cores", "platform")

    def __init__(self, device_kind: str, num_cores: int | None, platform: str):
        self.device_kind, self.num_cores, self.platform = device_kind, num_cores, platform

    def _repr(self) -> str:
        return (f"device_kind={self.device_kind}, num_cores={self.num_cores}, "
                f"platform={self.platform}")

    def __repr__(self) -> str:
        return f"AbstractDevice({self._repr()})"

    def __eq__(self, other) -> bool:
        return isinstance(other, _AbstractDevice) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple:
        return (self.device_kind, self.num_cores, self.platform)


#: kiln's devices are CPU devices.
CPU_ABSTRACT_DEVICE = _AbstractDevice("cpu", None, "cpu")


def _normalize_axis_types(axis_names: tuple, axis_types: Any,
                          what: str = "AbstractMesh") -> tuple:
    """JAX's checks of a mesh's ``axis_types``: one ``AxisType`` per axis name (a single
    one stands for a one-axis mesh only); ``what`` names the constructor in errors."""
    if axis_types is None:
        return (AxisType.Auto,) * len(axis_names)
    if not isinstance(axis_types, tuple):
        axis_types = (axis_types,)
    if not all(isinstance(a, AxisType) for a in axis_types):
        raise TypeError(f"axis_types passed to {what} must be of type "
                        f"`jax.sharding.AxisType`. Got {axis_types} of type "
                        f"{tuple(type(a) for a in axis_types)}")
    if len(axis_names) != len(axis_types):
        raise ValueError("Number of axis names should match the number of axis_types. Got "
                         f"axis_names={axis_names} and axis_types={axis_types}")
    return axis_types


class AbstractMesh:
    """Axis sizes, names and types of a mesh, without devices.

    Args:
      axis_sizes: the size of each axis.
      axis_names: the name of each axis.
      axis_types: an ``AxisType`` per axis (or one for all; default ``Auto``).
      abstract_device: the kind of device (``Mesh.abstract_mesh`` sets it).
    """

    __slots__ = ("axis_sizes", "axis_names", "axis_types", "abstract_device", "size")

    def __init__(self, axis_sizes: tuple, axis_names: tuple, axis_types: Any = None, *,
                 abstract_device: Any = None):
        axis_sizes, axis_names = tuple(axis_sizes), tuple(axis_names)
        self.axis_sizes = axis_sizes
        self.axis_names = axis_names
        self.axis_types = _normalize_axis_types(axis_names, axis_types)
        self.abstract_device = abstract_device
        self.size = math.prod(axis_sizes) if axis_sizes else 0

    @property
    def shape_tuple(self) -> tuple:
        return tuple(zip(self.axis_names, self.axis_sizes))

    @property
    def shape(self) -> OrderedDict:
        return OrderedDict(self.shape_tuple)

    @property
    def empty(self) -> bool:
        return self.size == 0

    @property
    def abstract_mesh(self) -> AbstractMesh:
        return self

    def _axes_of(self, kind: str) -> tuple:
            return tuple(n for n, t in zip(self.axis_names, self.axis_types)
                     if t == AxisType[kind])

    @property
    def explicit_axes(self) -> tuple:
        return self._axes_of("Explicit")

    @property
    def auto_axes(self) -> tuple:
        return self._axes_of("Auto")

    @property
    def manual_axes(self) -> tuple:
        return self._axes_of("Manual")

    @property
    def are_all_axes_explicit(self) -> bool:
        return bool(self.axis_names) and len(self.explicit_axes) == len(self.axis_names)

    @property
    def are_all_axes_auto(self) -> bool:
        return bool(self.axis_names) and len(self.auto_axes) == len(self.axis_names)

    @property
    def are_all_axes_manual(self) -> bool:
        return bool(self.axis_names) and len(self.manual_axes) == len(self.axis_names)

    @property
    def _any_axis_explicit(self) -> bool:
        return bool(self.explicit_axes)

    @property
    def _any_axis_auto(self) -> bool:
        return bool(self.auto_axes)

    @property
    def _any_axis_manual(self) -> bool:
        return bool(self.manual_axes)

    @property
    def _name_to_type(self) -> dict:
        return dict(zip(self.axis_names, self.axis_types))

    def update(self, axis_sizes=None, axis_names=None, axis_types=None,
               **kwargs) -> AbstractMesh:
        """This mesh with the given fields replaced."""
        kwargs.setdefault("abstract_device", self.abstract_device)
        return AbstractMesh(self.axis_sizes if axis_sizes is None else axis_sizes,
                            self.axis_names if axis_names is None else axis_names,
                            self.axis_types if axis_types is None else axis_types, **kwargs)

    def update_axis_types(self, name_to_type: dict) -> AbstractMesh:
        """This mesh with the axes named in ``name_to_type`` given those types."""
        return self.update(axis_types=tuple(name_to_type.get(n, t) for n, t in
                                            zip(self.axis_names, self.axis_types)))

    def _key(self) -> tuple:
        return (self.axis_sizes, self.axis_names, self.axis_types, self.abstract_device)

    def __eq__(self, other) -> bool:
        return type(other) is AbstractMesh and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        sizes = ", ".join(f"'{n}': {s}" for n, s in self.shape_tuple) or "()"
        dev = "" if self.abstract_device is None else f", {self.abstract_device._repr()}"
        return f"AbstractMesh({sizes}, axis_types={self.axis_types}{dev})"

    def __reduce__(self):
        return (_rebuild, (self.axis_sizes, self.axis_names, self.axis_types,
                           self.abstract_device))

    def _no(name):          # noqa: N805 - a helper building the device-level properties
        def get(self):
            raise ValueError(f"AbstractMesh does not implement {name}")
        return property(get)

    devices = _no("devices")
    device_ids = _no("device_ids")
    is_multi_process = _no("is_multi_process")
    local_devices = _no("local_devices")
    local_mesh = _no("local_mesh")
    del _no

    def __enter__(self):
        raise ValueError("AbstractMesh does not implement __enter__")

    def __exit__(self, *exc):
        raise ValueError("AbstractMesh does not implement __exit__")


def _rebuild(sizes, names, types, device):
    return AbstractMesh(sizes, names, types, abstract_device=device)


EMPTY_ABSTRACT_MESH = AbstractMesh((), ())
