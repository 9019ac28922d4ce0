"""Conversions from and to outside data: ``frombuffer``, ``fromstring``, ``from_dlpack``,
``load`` (and NumPy's ``save``/``savez``/``array_repr``/``array_str``, re-exported as JAX
does), the deliberately unimplemented ``fromfile``/``fromiter``, the ``int1``/``uint1``
scalar types and ``ComplexWarning``.

These run on concrete data only: reading files or buffers is not traceable.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln.numpy._scalar_types import _make_scalar_type

__all__ = ["frombuffer", "fromstring", "fromfile", "fromiter", "from_dlpack", "load", "save",
           "savez", "array_repr", "array_str", "int1", "uint1", "ComplexWarning"]

save = np.save
savez = np.savez
array_repr = np.array_repr
array_str = np.array_str
ComplexWarning = np.exceptions.ComplexWarning

int1 = _make_scalar_type(dtypes.int1)
uint1 = _make_scalar_type(dtypes.uint1)


def _asarray(x):
    import kiln.numpy as jnp
    return jnp.asarray(x)


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """A 1-D array of the bytes of ``buffer`` interpreted as ``dtype``."""
    return _asarray(np.frombuffer(buffer=buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    """A 1-D array of the numbers in text ``string`` separated by ``sep``."""
    return _asarray(np.fromstring(string, dtype=dtype, count=count, sep=sep))


def fromfile(*args, **kwargs):
    """Not implemented: reading a file is impure (use ``jnp.asarray(np.fromfile(...))``)."""
    raise NotImplementedError(
        "jnp.fromfile() is not implemented because it may be non-pure and thus unsafe for use "
        "with JIT and other JAX transformations. Consider using jnp.asarray(np.fromfile(...)) "
        "instead.")


def fromiter(*args, **kwargs):
    """Not implemented: consuming an iterator is impure (use ``jnp.asarray(np.fromiter(...))``).
    """
    raise NotImplementedError(
        "jnp.fromiter() is not implemented because it may be non-pure and thus unsafe for use "
        "with JIT and other JAX transformations. Consider using jnp.asarray(np.fromiter(...)) "
        "instead.")


def from_dlpack(x, /, *, device=None, copy=None):
    """An array from any object implementing the DLPack protocol (``__dlpack__``);
    :func:`kiln.dlpack.from_dlpack`."""
    from kiln.dlpack import from_dlpack as _from_dlpack
    return _from_dlpack(x, device=device, copy=copy)


def load(file, *args, **kwargs):
    """``np.load``, with arrays converted to kiln arrays (bfloat16 stored as 'V2' restored)."""
    out = np.load(file, *args, **kwargs)
    if isinstance(out, np.ndarray):
        if out.dtype == "V2":
            out = out.view(dtypes.bfloat16)
        try:
            out = _asarray(out)
        except (TypeError, AssertionError):
            pass
    return out
