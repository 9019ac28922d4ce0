"""DLPack capsules for the dtypes NumPy's own DLPack support lacks (bfloat16).

NumPy exports and imports DLPack tensors of integer, float, complex and bool types only;
``bfloat16`` (DLPack type code ``kDLBfloat``) is what users move between PyTorch and JAX.
The capsules are made and read by a small C extension (``kiln/compiler/csrc/dlpack.c``,
built once per machine like kiln's runtime): its deleters run from the consumer's code,
possibly while an exception is pending, which Python callbacks cannot do safely.

- :func:`export_capsule` wraps a host NumPy array in a ``dltensor`` capsule (or, for
  consumers of DLPack 1.0, ``dltensor_versioned``, marked read-only); the array stays
  alive until the consumer's tensor is freed (or the capsule, if no one consumes it).
- :func:`import_capsule` turns a CPU capsule into a NumPy array sharing its memory; the
  producer's deleter runs when that array and every view of it are gone.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

__all__ = ["DL_BFLOAT", "export_capsule", "import_capsule", "own_dtype_code"]

DL_BFLOAT = 4          # kDLBfloat
_KDLCPU, _KDLCUDAHOST = 1, 3


@functools.cache
def _ext():
    from kiln.compiler import csrc
    from kiln.compiler.build.build import build_extension
    return build_extension(csrc.source("dlpack.c"), "kiln_dlpack")


def own_dtype_code(dtype) -> int | None:
    """The DLPack type code this module handles for ``dtype`` (None: NumPy's business)."""
    from kiln import dtypes
    return DL_BFLOAT if np.dtype(dtype) == np.dtype(dtypes.bfloat16) else None


def export_capsule(arr: np.ndarray, versioned: bool, read_only: bool = True):
    """A DLPack capsule for the host array ``arr`` (a dtype of :func:`own_dtype_code`)."""
    code = own_dtype_code(arr.dtype)
    if code is None:
        raise BufferError(f"no DLPack type code for {arr.dtype}")
    if any(s % arr.itemsize for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    strides = [s // arr.itemsize for s in arr.strides]
    return _ext().capsule(arr, arr.ctypes.data, list(arr.shape), strides, code,
                          arr.itemsize * 8, versioned, read_only)


def import_capsule(capsule) -> np.ndarray:
    """A NumPy array sharing the memory of a CPU DLPack capsule of a dtype this module
    handles; the capsule is marked used."""
    from kiln import dtypes
    data, shape, strides, code, bits, lanes, device, read_only, handle = \
        _ext().unpack(capsule)
    if device not in (_KDLCPU, _KDLCUDAHOST):
        raise BufferError(f"only host DLPack tensors can be read here (device type {device})")
    if (code, bits, lanes) != (DL_BFLOAT, 16, 1):
        raise BufferError(f"unsupported DLPack dtype (code {code}, {bits} bits, "
                          f"{lanes} lanes)")
    dtype = np.dtype(dtypes.bfloat16)
    n = int(np.prod(shape)) if shape else 1
    if n == 0:
        return np.zeros(shape, dtype)
    if strides is None:                       # compact row-major
        strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    if any(s < 0 for s in strides):
        raise BufferError("DLPack tensors with negative strides are not supported")
    span = (sum((d - 1) * s for d, s in zip(shape, strides)) + 1) * dtype.itemsize
    buf = (ctypes.c_char * span).from_address(data)
    buf._kiln_handle = handle         # the producer's memory lives as long as the buffer
    flat = np.frombuffer(buf, dtype=dtype)
    arr = np.lib.stride_tricks.as_strided(flat, shape=tuple(shape),
                                          strides=tuple(s * dtype.itemsize for s in strides))
    if read_only:
        arr.flags.writeable = False
    return arr
