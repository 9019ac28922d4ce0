"""Arrays: the concrete ``ArrayImpl`` and the public abstract type ``kiln.Array``.

``ArrayImpl`` is an immutable array backed by a NumPy buffer on a CPU device (JAX's
concrete class has the same name). Operators and methods are shared with tracers
(``kiln.numpy._array_methods``); ``ArrayImpl`` adds the concrete behaviours (repr, conversion
to NumPy and Python scalars) and fast eager paths for the commonest operators.

Inside the library the module-level name ``Array`` is an alias of ``ArrayImpl``: every
``from kiln.array import Array`` and ``isinstance(x, Array)``/``type(x) is Array`` there
means *a concrete array*, and stays a plain class check (no metaclass hook on hot paths).

The public ``kiln.Array`` (also ``kiln.numpy.ndarray``) is :class:`PublicArray`, exported
under the name ``Array``: as ``jax.Array``, ``isinstance(x, kiln.Array)`` is True for
concrete arrays, PRNG key arrays and every tracer (under ``jit``, ``vmap``, ``grad``, loop
bodies), and False for NumPy arrays and Python scalars; ``issubclass(ArrayImpl,
kiln.Array)`` is True.
"""
from __future__ import annotations

import sys as _sys

import numpy as np

from kiln import dtypes
from kiln import sharding as _sharding
from kiln._async_dispatch import Pending as _Pending
from kiln._extended import EValue as _EValue
from kiln.core import trace as core
from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer

# ``Array.to_device`` places through ``kiln.device_put``, which ``kiln.api`` installs here
# when it is imported (placement sits above the array type, which does not import it).
_device_put = None


def set_device_put(device_put) -> None:
    """Install ``device_put(x, device)``, the placement ``Array.to_device`` uses."""
    global _device_put
    _device_put = device_put


class ArrayImpl:
    """A concrete kiln array. Create with ``kiln.numpy.asarray``/``array``; never mutated."""

    # ``_sharding`` is set only on arrays laid out over several devices (pmap, shard_map,
    # device_put with a sharding); unset means one whole copy on the default device.
    # ``_partials`` (device id -> block) only on an array unreduced along mesh axes that
    # a shard_map made: each device's partial of the sum ``_value`` (unset: the whole
    # value on the first device along those axes, zeros on the others).
    #
    # ``_v`` is the raw value: a NumPy array, an ``UnreadableValue`` (deleted, or another
    # process's), or a ``Pending`` while the program computing it runs asynchronously
    # (``kiln._async_dispatch``); ``_value`` reads it, waiting for a pending one.
    __slots__ = ("_v", "weak_type", "_sharding", "_partials", "__weakref__")
    __array_priority__ = 100

    def __init__(self, value, weak_type: bool = False):
        self._v = value
        self.weak_type = weak_type

    @property
    def _value(self):
        v = self._v
        if type(v) is _Pending:
            v = v.wait()
            self._v = v
        return v

    @_value.setter
    def _value(self, value):
        self._v = value

    # -- metadata -------------------------------------------------------------------------
    @property
    def shape(self):
        return self._v.shape

    @property
    def dtype(self):
        return self._v.dtype

    @property
    def ndim(self):
        return self._v.ndim

    @property
    def size(self):
        return self._v.size

    @property
    def nbytes(self):
        return self._v.nbytes

    @property
    def itemsize(self):
        return self._v.dtype.itemsize

    def on_device_size_in_bytes(self) -> int:
        """The bytes the array takes on all of its devices together (JAX's
        ``on_device_size_in_bytes``): one block's bytes times the number of devices (a
        replicated array counts once per device)."""
        s = self._sharding_or_none()
        if s is None:
            return int(self._value.nbytes)
        block = s.shard_shape(self.shape)
        n = 1
        for d in block:
            n *= d
        return int(n * self._value.dtype.itemsize * len(s.device_set))

    @property
    def aval(self):
        v = self._v
        return ShapedArray(v.shape, v.dtype, self.weak_type)

    # -- conversion -----------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        v = np.asarray(self._value)
        if dtype is not None and v.dtype != dtype:
            return v.astype(dtype)
        if copy:
            return v.copy()
        return v

    def __bool__(self):
        if self._value.size != 1:
            raise ValueError("The truth value of an array with more than one element is "
                             "ambiguous. Use a.any() or a.all()")
        return bool(self._value)

    def __int__(self):
        return int(self._value)

    def __float__(self):
        return float(self._value)

    def __complex__(self):
        return complex(self._value)

    def __index__(self):
        if self._value.dtype.kind not in "biu" or self._value.ndim != 0:
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return int(self._value)

    def __len__(self):
        if self._value.ndim == 0:
            raise TypeError("len() of unsized object")
        return self._value.shape[0]

    def __iter__(self):
        v = self._value
        if v.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        w = self.weak_type
        return (make_array(np.asarray(r), w) for r in v)

    def __hash__(self):
        raise TypeError("unhashable type: 'ArrayImpl'")

    def item(self, *args):
        return np.asarray(self._value).item(*args)

    def tolist(self):
        return np.asarray(self._value).tolist()

    def __reduce__(self):
        return (_reconstruct, (np.asarray(self._value), self.weak_type))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return make_array(np.array(self._value), self.weak_type)

    # -- runtime --------------------------------------------------------------------------
    def block_until_ready(self):
        v = self._v
        if type(v) is _Pending:
            self._v = v.wait()
        return self

    def is_ready(self) -> bool:
        """Whether the array's value has been computed (``jax.Array.is_ready``): False
        while the program making it still runs (asynchronous dispatch)."""
        v = self._v
        return type(v) is not _Pending or v.ready()

    def copy_to_host_async(self):
        return None

    def unsafe_buffer_pointer(self) -> int:
        """The address of the array's buffer (as ``jax.Array.unsafe_buffer_pointer``): equal
        before and after a donation that reused the buffer."""
        if self.is_deleted():
            raise RuntimeError("Array has been deleted.")
        v = self._value
        if type(v) is not np.ndarray or not (v.flags.owndata and v.flags.c_contiguous):
            # A lazily broadcast value (``zeros``), a view or a NumPy scalar: give the
            # Array a buffer of its own first, as a JAX array always has (same values;
            # the address is then stable, and donation can hand this memory on).
            v = np.array(v, order="C")
            self._value = v
        return int(v.__array_interface__["data"][0])

    @property
    def is_fully_addressable(self) -> bool:
        """Whether this process holds every device of the array's sharding (False for a
        global array of a multi-process run, ``kiln.distributed``)."""
        s = self._sharding_or_none()
        return True if s is None else s.is_fully_addressable

    committed = False

    def _sharding_or_none(self):
        try:
            return self._sharding
        except AttributeError:
            return None

    @property
    def is_fully_replicated(self) -> bool:
        s = self._sharding_or_none()
        return True if s is None else s.is_fully_replicated

    def devices(self):
        s = self._sharding_or_none()
        if s is not None:
            return set(s.device_set)
        from kiln.devices import devices
        return {devices()[0]}

    @property
    def device(self):
        s = self._sharding_or_none()
        if s is not None:
            if len(s.device_set) != 1:
                raise ValueError("Length of devices is greater than 1. Please use `.devices()`.")
            return next(iter(s.device_set))
        from kiln.devices import devices
        return devices()[0]

    @property
    def sharding(self):
        s = self._sharding_or_none()
        if s is not None:
            return s
        from kiln.devices import devices
        from kiln.sharding import SingleDeviceSharding
        return SingleDeviceSharding(devices()[0])

    @property
    def addressable_shards(self) -> list:
        """One :class:`kiln.sharding.Shard` per device holding a block of this array."""
        sh = self.sharding
        if getattr(getattr(sh, "spec", None), "unreduced", None):
            return sh._shards(self._value, getattr(self, "_partials", None))
        return sh._shards(self._value)

    @property
    def global_shards(self) -> list:
        return self.addressable_shards

    @property
    def _arrays(self) -> list:
        """The per-device blocks as single-device arrays, in device order (JAX's
        ``Array._arrays``)."""
        return [s.data.to_device(s.device) for s in self.addressable_shards]

    def addressable_data(self, index: int):
        """The block of this array held by its ``index``-th device."""
        return self.addressable_shards[index].data

    def to_device(self, device, *, stream=None):
        """The array on ``device`` (array API); kiln has one memory space, so ``self``."""
        if _device_put is None:
            raise RuntimeError("Array.to_device needs kiln.device_put: import kiln")
        return _device_put(self, device)

    @property
    def __cuda_array_interface__(self):
        # As JAX on a CPU buffer: the attribute exists only for GPU buffers.
        raise AttributeError("__cuda_array_interface__ is only defined for NVidia GPU "
                             "buffers; kiln arrays live in host memory (NumPy reads them "
                             "through __array_interface__ / np.asarray)")

    def __dlpack_device__(self):
        return (1, 0)  # (kDLCPU, device 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export the buffer through DLPack (NumPy's exporter). A consumer of DLPack 1.0
        (``max_version >= (1, 0)``, e.g. ``np.from_dlpack``) is told the buffer is
        read-only, as JAX's exports are. Old consumers cannot be told: a read-only buffer
        reaches them as a private writable copy, or with ``copy=False`` as the buffer
        itself, unflagged, as JAX exports it."""
        v = np.asarray(self._value)
        if v.dtype.kind == "V" or v.dtype.type.__module__.startswith("ml_dtypes"):
            from kiln import _dlpack_capsules
            if _dlpack_capsules.own_dtype_code(v.dtype) is None:
                raise BufferError(
                    f"kiln cannot export {v.dtype.name} arrays through DLPack (DLPack "
                    "describes integer, float, bfloat16, complex and bool types); convert "
                    "first, e.g. x.astype(jnp.float32)")
            if copy is True:
                v = v.copy()
            return _dlpack_capsules.export_capsule(
                v, versioned=max_version is not None and max_version[0] >= 1)
        kw = {"stream": stream, "max_version": max_version, "dl_device": dl_device}
        if copy is not None:
            kw["copy"] = copy
        if max_version is None or max_version[0] < 1:
            if not v.flags.writeable:
                v = _writable_alias(v) if copy is False else v.copy()
        elif v.flags.writeable and copy is not True:
            v = v.view()            # kiln arrays are immutable: the consumer is told
            v.flags.writeable = False
        return v.__dlpack__(**kw)

    def delete(self):
        """Free the buffer (as buffer donation does): later reads raise ``RuntimeError``."""
        from kiln._unreadable import Deleted
        v = self._value
        if type(v) is not Deleted:
            self._value = Deleted(v.shape, v.dtype)

    def is_deleted(self):
        from kiln._unreadable import Deleted
        return type(self._value) is Deleted

    # -- printing -------------------------------------------------------------------------
    def __repr__(self):
        if not self.is_fully_addressable and not self.is_fully_replicated:
            # a global array of several processes: JAX prints no values
            w = ", weak_type=True" if self.weak_type else ""
            return f"Array(shape={self.shape}, dtype={self.dtype.name}{w})"
        ev = self._value
        if type(ev) is _EValue:      # an extended dtype: JAX's EArray repr (its data)
            prefix = "EArray("
            v = ev.data
        else:
            prefix = "Array("
            v = np.asarray(ev)
        suffix = f", dtype={v.dtype.name}" + (", weak_type=True" if self.weak_type else "") + ")"
        if v.size == 0:
            return f"{prefix}[], shape={v.shape}{suffix}"
        body = np.array2string(v, separator=", ", prefix=prefix, suffix=",",
                               max_line_width=np.get_printoptions()["linewidth"])
        return prefix + body + suffix

    def __str__(self):
        if not self.is_fully_addressable and not self.is_fully_replicated:
            return repr(self)
        if type(self._value) is _EValue:
            return repr(self)
        return str(np.asarray(self._value))

    def __format__(self, spec):
        if self._value.ndim == 0:
            return format(self._value.item(), spec)
        return format(str(self), spec)


# The library's internal name for the concrete class (see the module docstring).
Array = ArrayImpl


class _ArrayMeta(type):
    """``isinstance``/``issubclass`` for the public ``kiln.Array`` (as JAX's ``ArrayMeta``)."""

    def __instancecheck__(cls, instance):
        t = type(instance)
        if t is ArrayImpl or isinstance(instance, Tracer):
            return True
        keys = _sys.modules.get("kiln.random._keys")
        return keys is not None and isinstance(instance, keys.PRNGKeyArray)

    def __subclasscheck__(cls, subclass):
        if not isinstance(subclass, type):
            raise TypeError("issubclass() arg 1 must be a class")
        if subclass is cls or issubclass(subclass, ArrayImpl):
            return True
        keys = _sys.modules.get("kiln.random._keys")
        return keys is not None and issubclass(subclass, keys.PRNGKeyArray)


class PublicArray(metaclass=_ArrayMeta):
    """Array base class for kiln (``jax.Array``).

    ``kiln.Array`` is the public interface for instance checks and type annotations of
    kiln arrays and tracers: ``isinstance(x, kiln.Array)`` is True for concrete arrays
    and PRNG key arrays, and for the tracers that stand for arrays inside ``jit``,
    ``vmap``, ``grad`` and other transformations; it is False for NumPy arrays and
    Python scalars. ``kiln.numpy.ndarray`` is the same class.

    It is not used to create arrays: use ``kiln.numpy.array``/``asarray`` (concrete
    arrays are instances of ``ArrayImpl``).
    """

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        raise TypeError("kiln.Array cannot be instantiated directly; create arrays with "
                        "kiln.numpy.array or kiln.numpy.asarray")


PublicArray.__name__ = PublicArray.__qualname__ = "Array"
PublicArray.__module__ = "kiln"


def _reconstruct(value, weak_type):
    return make_array(value, weak_type)


def make_array(value, weak_type: bool = False) -> Array:
    """Wrap a NumPy value without copying or checking (internal fast path)."""
    a = object.__new__(Array)
    a._v = value
    a.weak_type = weak_type
    return a


_scalar_types = (int, float, complex)


def to_array(x, dtype=None) -> Array:
    """Convert any array-like to an Array with a canonical dtype (Python scalars weak)."""
    if type(x) is Array and dtype is None:
        return x
    if isinstance(x, Tracer):
        raise TypeError(f"to_array got a tracer {x}")
    if isinstance(x, np.ma.MaskedArray):
        core.masked_array_error()
    weak = dtype is None and type(x) in _scalar_types
    if type(x) is Array:
        x = x._value
    return make_array(dtypes.coerce_to_array(x, dtype), weak)


core.Array = Array
core.make_array = make_array
core.to_array = to_array


def _writable_alias(v: np.ndarray) -> np.ndarray:
    """A writable view of read-only ``v``'s memory (same address, shape and strides) that
    keeps ``v`` alive: what a legacy DLPack export of an immutable buffer needs."""
    import ctypes
    if v.size == 0:
        return np.empty(v.shape, v.dtype)
    lo = sum(min(0, st * (d - 1)) for d, st in zip(v.shape, v.strides))
    hi = sum(max(0, st * (d - 1)) for d, st in zip(v.shape, v.strides)) + v.itemsize
    raw = (ctypes.c_char * (hi - lo)).from_address(v.ctypes.data + lo)
    raw.keep_alive = v
    first = np.ndarray((1,), v.dtype, buffer=raw, offset=-lo)
    return np.lib.stride_tricks.as_strided(first, v.shape, v.strides, writeable=True)


_sharding.set_array_maker(make_array)       # Shard.data
