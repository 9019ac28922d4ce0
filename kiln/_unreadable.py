"""``UnreadableValue``: what an Array holds in place of a buffer it cannot read.

A donated (deleted) Array and a global Array of a multi-process run whose value this
process does not hold keep their shape and dtype; anything that would read the data
raises the ``RuntimeError`` of the subclass's ``_error``.

``Deleted`` is what a deleted (donated) Array holds (``Array.delete``, ``kiln.donation``).

What it must not hold: when an Array becomes unreadable (``donation``,
``parallel.global_array``).
"""
from __future__ import annotations

import numpy as np


class UnreadableValue:
    """Shape and dtype of a value that cannot be read; reads raise ``self._error()``."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def _error(self) -> RuntimeError:
        raise NotImplementedError   # each subclass says why the value cannot be read

    def __array__(self, dtype=None, copy=None):
        raise self._error()

    def __getattr__(self, name):
        raise self._error()

    def __len__(self):
        raise self._error()

    def __iter__(self):
        raise self._error()

    def __getitem__(self, item):
        raise self._error()

    def __float__(self):
        raise self._error()

    def __int__(self):
        raise self._error()

    def __bool__(self):
        raise self._error()


class Deleted(UnreadableValue):
    """What a deleted Array holds instead of its buffer: its shape and dtype remain;
    reading the data raises JAX's ``RuntimeError``."""

    __slots__ = ()

    def _error(self):
        return RuntimeError(f"Array has been deleted with shape={_short(self.shape, self.dtype)}.")


def _short(shape, dtype) -> str:
    """JAX's spelling in these messages: ``float32[2,3]``."""
    return f"{np.dtype(dtype).name}[{','.join(str(int(d)) for d in shape)}]"
