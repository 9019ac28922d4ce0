"""``kiln.numpy.ndarray``: the abstract array type of ``isinstance`` checks.

As ``jax.numpy.ndarray is jax.Array``, this is the very class exported as ``kiln.Array``
(``kiln.array.PublicArray``): ``isinstance(x, jnp.ndarray)`` is True for concrete arrays
and for every tracer standing for an array, False for NumPy arrays and Python scalars.
"""
from __future__ import annotations

from kiln.array import PublicArray

ndarray = PublicArray
