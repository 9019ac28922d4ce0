"""``jax.typing``: static type annotations for array-like values and dtypes.

- :obj:`ArrayLike`: any value that converts implicitly to an array: a :class:`kiln.Array`
  (or tracer), a NumPy array, a NumPy scalar, or a Python ``bool``/``int``/``float``/
  ``complex``. Sequences and strings are not array-like.
- :obj:`DTypeLike`: any value naming a dtype: a string (``"float32"``), a scalar type
  (``np.float32``, ``float``), a ``np.dtype``, or an object with a ``dtype`` attribute
  (``jnp.float32``).

Both are ``typing.Union`` objects, so (Python >= 3.10) ``isinstance(x, ArrayLike)`` works.
"""
from __future__ import annotations

import typing
from typing import Any, Protocol, Union

import numpy as np

from kiln.array import PublicArray as Array

__all__ = ["ArrayLike", "DTypeLike"]

DType = np.dtype


@typing.runtime_checkable
class SupportsDType(Protocol):
    """Anything with a ``dtype`` attribute (``jnp.float32``, arrays)."""

    @property
    def dtype(self, /) -> DType: ...


#: Scalars that convert to arrays and may be static arguments.
StaticScalar = Union[np.bool_, np.number, bool, int, float, complex]

#: Values that convert implicitly to a kiln array.
ArrayLike = Union[Array, np.ndarray, StaticScalar]

#: Values that name a dtype.
DTypeLike = Union[str, type[Any], np.dtype, SupportsDType]
