"""``kiln.dlpack``: arrays from other libraries through the DLPack protocol (``jax.dlpack``).

kiln's arrays live in host memory, so what kiln can take is a CPU DLPack tensor
(``kDLCPU``, or host memory a GPU library pinned, ``kDLCUDAHost``); the array shares the
producer's buffer unless a copy is asked for. kiln arrays export themselves with
``__dlpack__``/``__dlpack_device__`` (``np.from_dlpack(x)``, ``torch.from_dlpack(x)``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln import dtypes

__all__ = ["SUPPORTED_DTYPES", "SUPPORTED_DTYPES_SET", "from_dlpack", "is_supported_dtype"]

# DLPack device types kiln can read without a transfer (host memory).
_HOST_DEVICE_TYPES = {1: "kDLCPU", 3: "kDLCUDAHost"}
_DEVICE_TYPE_NAMES = {2: "kDLCUDA", 4: "kDLOpenCL", 7: "kDLVulkan", 8: "kDLMetal", 10: "kDLROCM",
                      11: "kDLROCMHost", 13: "kDLCUDAManaged", 14: "kDLOneAPI"}

#: The scalar types DLPack describes (``SUPPORTED_DTYPES_SET``: the same as ``np.dtype``s).
SUPPORTED_DTYPES = frozenset((
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, dtypes.bfloat16, np.float32, np.float64, np.complex64, np.complex128,
    np.bool_))
SUPPORTED_DTYPES_SET = frozenset(np.dtype(t) for t in SUPPORTED_DTYPES)


# Buffers are shared (not copied) when their data is aligned to this many bytes, as in JAX.
_ALIGN = 64


def is_supported_dtype(dtype: Any) -> bool:
    """Whether arrays of ``dtype`` can cross the DLPack boundary.

    Args:
      dtype: a dtype-like object (``None`` is refused, as NumPy would read it as float64).

    Returns:
      ``True`` for the integer, floating (bfloat16 included), complex and boolean types
      DLPack describes.
    """
    if dtype is None:
        raise TypeError(f"Expected a string or dtype-like object; got {dtype=}")
    return np.dtype(dtype) in SUPPORTED_DTYPES_SET


def _device_of(device):
    """The single device ``device`` names (a Device or a one-device Sharding)."""
    from kiln.sharding import Sharding
    if isinstance(device, Sharding):
        devs = device.device_set
        if len(devs) > 1:
            raise ValueError(
                "from_dlpack can only unpack a dlpack tensor onto a singular device, but "
                f"a Sharding with {len(devs)} devices was provided.")
        (device,) = devs
    return device


def _own_dtype(x) -> bool:
    """Whether ``x`` has a NumPy dtype only kiln's capsule reader handles (bfloat16)."""
    from kiln import _dlpack_capsules
    try:
        return _dlpack_capsules.own_dtype_code(np.dtype(x.dtype)) is not None
    except (AttributeError, TypeError):
        return False


def from_dlpack(external_array: Any, device: Any = None, copy: bool | None = None):
    """A kiln array holding the data of a DLPack tensor.

    Args:
      external_array: an object with ``__dlpack__`` and ``__dlpack_device__`` (a NumPy
        array, a PyTorch CPU tensor, another kiln array, ...).
      device: the device (or one-device sharding) to place the result on; kiln's
        devices are host devices, so any of them takes the data without a transfer.
      copy: ``True`` always copies; ``False`` never does (an error where a copy is
        needed); ``None`` shares the buffer when it can.

    Returns:
      A :class:`kiln.Array`. Without a copy it shares memory with ``external_array``
      (when the data is 64-byte aligned, as JAX requires; otherwise ``copy=None`` copies
      and ``copy=False`` raises ``ValueError``): writing to that buffer afterwards
      (outside kiln) changes the array.
    """
    device = _device_of(device)
    if not (hasattr(external_array, "__dlpack__")
            and hasattr(external_array, "__dlpack_device__")):
        raise TypeError("The array passed to from_dlpack must have __dlpack__ and "
                        "__dlpack_device__ methods.")
    dl_type, _ = external_array.__dlpack_device__()
    dl_type = int(dl_type)
    if dl_type not in _HOST_DEVICE_TYPES:
        name = _DEVICE_TYPE_NAMES.get(dl_type, str(dl_type))
        raise TypeError(
            "Array passed to from_dlpack is on unsupported device type (DLDeviceType: "
            f"{name}, array: {external_array}): kiln runs on the host and reads host "
            "memory only; copy the tensor to the CPU first (e.g. `tensor.cpu()`).")
    kw = {} if copy is None else {"copy": bool(copy)}
    from kiln import _dlpack_capsules
    try:
        if _own_dtype(external_array):
            raise BufferError("bfloat16")       # straight to kiln's reader
        data = np.from_dlpack(external_array, **kw)
    except (BufferError, RuntimeError):
        # bfloat16 (NumPy has no DLPack type for it; it refuses with RuntimeError): read
        # the capsule with kiln's own reader
        try:
            capsule = external_array.__dlpack__(max_version=(1, 0))
        except TypeError:                   # a producer older than DLPack 1.0
            capsule = external_array.__dlpack__()
        data = _dlpack_capsules.import_capsule(capsule)
        if copy:
            data = data.copy()
    if copy is None and data.ctypes.data % _ALIGN:
        data = data.copy()
    elif copy is False and data.ctypes.data % _ALIGN:
        # As JAX (XLA's CPU client shares only 64-byte-aligned buffers): a program that
        # passes copy=False here runs on JAX too.
        raise ValueError(
            "Specified input which requires a copy since the source data buffer is not "
            f"aligned to {_ALIGN} bytes.  However copy=False. Set copy=True or copy=None to "
            "perform the requested operation.")
    from kiln.core.trace import to_array
    out = to_array(data)
    if device is not None:
        from kiln import device_put
        out = device_put(out, device)
    return out
