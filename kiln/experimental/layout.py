"""``jax.experimental.layout``: descriptions of an array's physical memory layout.

kiln stores every array row-major in host memory, so a layout never changes a value:
:class:`Layout` and :class:`Format` are descriptions (checked as JAX checks them) and
:func:`with_layout_constraint` returns its argument's value.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Format", "Layout", "with_layout_constraint"]


class _AutoLayout:
    """``Layout.AUTO``: let the compiler choose."""

    __slots__ = ()

    def __repr__(self):
        return "AUTO"


_AUTO = _AutoLayout()


class Layout:
    """The order of an array's dimensions in memory (``major_to_minor``), with optional
    tiling.

    Args:
      major_to_minor: the dimensions from the slowest to the fastest varying.
      tiling: tile shapes, innermost last.
      sub_byte_element_size_in_bits: element size for sub-byte dtypes (0: the dtype's).
    """

    AUTO = _AUTO
    __slots__ = ("major_to_minor", "tiling", "sub_byte_element_size_in_bits")

    def __init__(self, major_to_minor: tuple[int, ...],
                 tiling: tuple[tuple[int, ...], ...] | None = None,
                 sub_byte_element_size_in_bits: int = 0):
        self.major_to_minor = tuple(major_to_minor)
        self.tiling = None if tiling is None else tuple(map(tuple, tiling))
        self.sub_byte_element_size_in_bits = sub_byte_element_size_in_bits

    def update(self, **kwargs) -> Layout:
        d = {"major_to_minor": self.major_to_minor, "tiling": self.tiling,
             "sub_byte_element_size_in_bits": self.sub_byte_element_size_in_bits}
        d.update(kwargs)
        return Layout(**d)

    def __repr__(self):
        return (f"Layout(major_to_minor={self.major_to_minor}, tiling={self.tiling}, "
                f"sub_byte_element_size_in_bits={self.sub_byte_element_size_in_bits})")

    def __eq__(self, other):
        return (isinstance(other, Layout) and self.major_to_minor == other.major_to_minor
                and self.tiling == other.tiling
                and self.sub_byte_element_size_in_bits == other.sub_byte_element_size_in_bits)

    def __hash__(self):
        return hash((self.major_to_minor, self.tiling, self.sub_byte_element_size_in_bits))


class Format:
    """A layout together with a sharding.

    Args:
      layout: ``None``, ``Layout.AUTO`` or a :class:`Layout` (which needs a sharding).
      sharding: ``None`` or a ``kiln.sharding.Sharding``.
    """

    __slots__ = ("layout", "sharding")

    def __init__(self, layout: Any = None, sharding: Any = None):
        from kiln.sharding import Sharding
        if isinstance(layout, Layout) and sharding is None:
            raise ValueError(
                f"Sharding has to be concrete when layout is of type {type(layout)}. Please "
                "pass a `jax.sharding.NamedSharding` or `jax.sharding.SingleDeviceSharding` "
                f"to the sharding argument. Got sharding {sharding}")
        if not isinstance(layout, (Layout, _AutoLayout, type(None))):
            raise TypeError(
                "Invalid value received for the layout argument. Expected values are "
                f"`None`, `Layout.AUTO` or an instance of `Layout`. Got {layout} of type "
                f"{type(layout)}")
        if not isinstance(sharding, (Sharding, type(None))):
            raise TypeError(
                "Invalid value received for the sharding argument. Expected values are "
                f"`None` or an instance of `jax.Sharding`. Got {sharding} of type "
                f"{type(sharding)}")
        self.layout = layout
        self.sharding = sharding

    def __repr__(self):
        return f"Format(layout={self.layout}, sharding={self.sharding})"

    def __eq__(self, other):
        return (isinstance(other, Format) and self.layout == other.layout
                and self.sharding == other.sharding)

    def __hash__(self):
        return hash((self.layout, self.sharding))


def with_layout_constraint(x, layout: Layout):
    """``x`` (its value), laid out as ``layout`` asks: kiln arrays are row-major and a
    layout does not change values."""
    if not isinstance(layout, (Layout, _AutoLayout)):
        raise TypeError(f"with_layout_constraint expects a Layout, got {layout!r}")
    return x
