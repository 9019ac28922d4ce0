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
from kiln._unreadable import UnreadableValue as _UnreadableValue
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
    __slots__ = ("_v", "weak_type", "_sh", "_partials", "__weakref__")
    __array_priority__ = 100

    def __init__(self, value, weak_type=False, arrays=None, committed=None,
                 _skip_checks: bool = False):
        if isinstance(value, ShapedArray):
            # JAX's form ``ArrayImpl(aval, sharding, arrays, committed)``: an array
            # assembled from one single-device array per addressable device.
            v = from_single_device_arrays(value.shape, value.dtype, weak_type, arrays)
            self._v = v
            self.weak_type = value.weak_type
            if committed or not _is_default_single(weak_type):
                self._sharding = None if _is_default_single(weak_type) else weak_type
            return
        self._v = value
        self.weak_type = weak_type

    # ``_sharding`` (set: committed, JAX's term) is stored in the slot ``_sh``; setting it
    # also tells the eager fast paths (``kiln.numpy._array_methods``) that some array is
    # committed, so that they leave committed operands to the primitives, whose eager
    # layout rules lay out the result (``kiln.parallel.eager_layout``).
    @property
    def _sharding(self):
        return self._sh

    @_sharding.setter
    def _sharding(self, sharding):
        self._sh = sharding
        ANY_COMMITTED[0] = True

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
    def __numpy_dtype__(self):
        # NumPy >= 2.4 reads it in ``np.dtype(x)``: deprecated for arrays, as in JAX
        # (``jax-array-numpy-dtype``; an error once accelerated).
        msg = ("Implicit conversion of an array to a dtype is deprecated; rather than "
               "dtype=arr use dtype=arr.dtype. In the future this will result in an error.")
        deps = _sys.modules.get("kiln._src.deprecations")
        if deps is not None and deps.is_accelerated("jax-array-numpy-dtype"):
            raise TypeError(msg)
        import warnings
        warnings.warn(msg, DeprecationWarning, stacklevel=2)
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
        row = self._row_layout()
        if row is False:
            return (make_array(np.asarray(r), w) for r in v)
        return (_laid_out(make_array(np.asarray(r), w), row) for r in v)

    def _row_layout(self):
        """The layout of this committed array's rows (JAX's: the device it is on, or its
        mesh with the first dimension's split dropped); False when uncommitted or when
        rows have no layout kiln can tell."""
        if not self._committed:
            return False
        s = self._sharding
        if s is None or isinstance(s, _sharding.SingleDeviceSharding):
            return s
        if (isinstance(s, _sharding.NamedSharding) and isinstance(s.mesh, _sharding.Mesh)
                and not (s.spec.unreduced or s.spec.reduced)):
            return _sharding.NamedSharding(s.mesh, _sharding.PartitionSpec(*s.spec[1:]),
                                           memory_kind=s._memory_kind)
        return False

    def __hash__(self):
        raise TypeError("unhashable type: 'ArrayImpl'")

    def item(self, *args):
        return np.asarray(self._value).item(*args)

    def tolist(self):
        return np.asarray(self._value).tolist()

    def __reduce__(self):
        # As JAX: the value is put back on the default device, with its dtype
        # canonicalized where it is unpickled (a float64 array unpickled with x64 off
        # is float32).
        return (_reconstruct, (np.asarray(self._value), self.weak_type))

    @property
    def _committed(self) -> bool:
        """Whether the array was placed explicitly (``device_put`` with a device or
        sharding, ``jit`` with shardings, ``pmap``/``shard_map`` outputs, and eager
        results of committed operands): JAX's committed arrays. ``jnp.array(...)`` and
        results of uncommitted operands are not."""
        try:
            _ = self._sh
        except AttributeError:
            return False
        return True

    @property
    def _npy_value(self):
        """The array's value as a NumPy array (kiln keeps it in host memory), or None
        once deleted (JAX's cached host copy)."""
        v = self._value
        if isinstance(v, _UnreadableValue):
            return None
        return np.asarray(v)

    def _check_if_deleted(self) -> None:
        """Raise JAX's ``RuntimeError`` if the array has been deleted."""
        v = self._value
        from kiln._unreadable import Deleted
        if type(v) is Deleted:
            raise v._error()

    def _fully_replicated_shard(self):
        """The single-device array of the first device's block of a fully replicated
        array (the whole value)."""
        if not self.is_fully_replicated:
            raise ValueError("_fully_replicated_shard needs a fully replicated array")
        return self.addressable_shards[0].data

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
        """The array's device; for an array laid out over several devices, its sharding
        (as ``jax.Array.device``)."""
        s = self._sharding_or_none()
        if s is not None:
            if len(s.device_set) != 1:
                return s
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
            shards = sh._shards(self._value, getattr(self, "_partials", None))
        else:
            shards = sh._shards(self._value)
        if self._committed:
            for s in shards:
                s._committed = True
        return shards

    @property
    def global_shards(self) -> list:
        return self.addressable_shards

    @property
    def _arrays(self):
        """The per-device blocks as single-device arrays, in device order (JAX's
        ``Array._arrays``); None once deleted."""
        if self.is_deleted():
            return None
        out = []
        for s in self.addressable_shards:
            s._committed = True
            out.append(s.data)
        return out

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

#: True once some array has been committed (its ``_sharding`` set).
ANY_COMMITTED = [False]


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
    if isinstance(value, np.ndarray):
        dt = dtypes.canonicalize_dtype(value.dtype)
        if dt != value.dtype:
            value = value.astype(dt)
    return make_array(value, weak_type)


def _laid_out(a, sharding):
    a._sharding = sharding
    return a


def _is_default_single(sharding) -> bool:
    from kiln.devices import devices
    return (isinstance(sharding, _sharding.SingleDeviceSharding)
            and sharding.device == devices()[0] and sharding._memory_kind in (None, "device"))


def _device_of(a):
    """The one device holding the single-device array ``a``."""
    devs = a.devices() if type(a) is Array else None
    if devs is None:
        raise TypeError("When making an array from single-device arrays the input arrays "
                        f"must be kiln Arrays, got {type(a).__name__}")
    if len(devs) != 1:
        raise ValueError("When making an array from single-device arrays the input arrays "
                         f"must have one shard each. An argument array had {len(devs)} "
                         "shard(s).")
    return next(iter(devs))


def from_single_device_arrays(shape, dtype, sharding, arrays) -> np.ndarray:
    """The global value of a ``shape``/``dtype`` array laid out as ``sharding`` whose
    blocks are ``arrays``, one single-device Array per addressable device of the
    sharding, in any order (JAX's checks and messages: count, distinct devices, the
    sharding's devices, dtypes, block shapes)."""
    from kiln.core.avals import short_dtype_name
    arrays = list(arrays)
    devs = [_device_of(a) for a in arrays]
    addressable = sharding.addressable_devices
    if len(arrays) != len(addressable):
        raise ValueError(f"Expected {len(addressable)} per-device arrays (this is how many "
                         "devices are addressable by the sharding), but got "
                         f"{len(arrays)}")
    ids = [d.id for d in devs]
    if len(set(ids)) != len(ids):
        raise ValueError("When making an array from single-device arrays, the input arrays "
                         f"must be from distinct devices, but got device IDs {ids}")
    want = {d.id for d in addressable}
    if set(ids) != want:
        msg = "Addressable devices and per-device arrays devices do not match."
        missing, extra = want - set(ids), set(ids) - want
        if missing:
            msg += (f" Sharding contains devices {missing} that are not present in "
                    "per-device arrays.")
        if extra:
            msg += (f" Per-device arrays contain devices {extra} that are not present in "
                    "the sharding.")
        raise ValueError(msg)
    dtype = np.dtype(dtype)
    block_shape = sharding.shard_shape(shape)
    for a in arrays:
        if a.dtype != dtype:
            raise ValueError("Input buffers to `Array` must have matching dtypes. Got "
                             f"{a.dtype}, expected {dtype} for buffer: {a}")
        if tuple(a.shape) != tuple(block_shape):
            dims = ",".join(str(int(d)) for d in shape)
            raise ValueError(f"Expected shard shape {tuple(block_shape)} doesn't match the "
                             f"single device array shape {tuple(a.shape)}. Shape of Array "
                             f"is {short_dtype_name(dtype)}[{dims}] with sharding "
                             f"{sharding}")
    index = sharding.devices_indices_map(tuple(shape))
    out = np.empty(shape, dtype)
    for d, a in zip(devs, arrays):
        out[index[d]] = np.asarray(a._value)
    return out


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
