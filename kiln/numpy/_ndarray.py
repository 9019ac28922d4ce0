"""``kiln.numpy.ndarray``: the abstract array type of ``isinstance`` checks.

``isinstance(x, jnp.ndarray)`` is True for concrete ``kiln.Array`` values and for every
tracer standing for an array (as ``jax.Array`` is for JAX's tracers).
"""
from __future__ import annotations

from kiln.array import Array
from kiln.core.trace import Tracer


class _ArrayMeta(type):
    def __instancecheck__(cls, instance):
        return isinstance(instance, (Array, Tracer))

    def __subclasscheck__(cls, subclass):
        return isinstance(subclass, type) and issubclass(subclass, (Array, Tracer))


class ndarray(metaclass=_ArrayMeta):  # noqa: N801
    """The type of kiln arrays and tracers, for ``isinstance`` checks only."""

    def __new__(cls, *args, **kwargs):
        raise TypeError("jnp.ndarray cannot be instantiated; use jnp.array or jnp.zeros")


ndarray.__module__ = "kiln.numpy"
