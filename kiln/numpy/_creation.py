"""Array creation: ``array``, ``asarray``, ``zeros``/``ones``/``full``/``empty`` (and
``*_like``), ``eye``, ``identity``, ``arange``, ``linspace``, ``logspace``, ``tri``,
``tril``, ``triu``, ``diag``, ``meshgrid``.

Dtype rules follow JAX: Python scalars give weak types, lists never do, results are
canonical (64-bit types become 32-bit unless x64 is enabled). Shapes must be static.
Anything built from a traced value is built with ``lax`` functions only.
"""
from __future__ import annotations

import sys

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array, PublicArray, make_array
from kiln.core.trace import Tracer, get_aval, masked_array_error
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util
from kiln.numpy._util import as_operand, canonicalize_shape, user_dtype

__all__ = ["array", "asarray", "zeros", "ones", "full", "empty", "zeros_like", "ones_like",
           "full_like", "empty_like", "eye", "identity", "arange", "linspace", "logspace",
           "tri", "tril", "triu", "diag", "diagflat", "meshgrid", "copy"]


# ----------------------------------------------------------------------------------------------
# array / asarray


def _flatten_leaves(obj, out):
    if isinstance(obj, (list, tuple)):
        for o in obj:
            _flatten_leaves(o, out)
    else:
        out.append(obj)
    return out


def _nested_shape(obj):
    """The shape of a nested list/tuple whose leaves may be arrays; ValueError if ragged."""
    if isinstance(obj, (list, tuple)):
        if not obj:
            return (0,)
        subs = [_nested_shape(o) for o in obj]
        if any(s != subs[0] for s in subs[1:]):
            raise ValueError("setting an array element with a sequence. The requested array "
                             "has an inhomogeneous shape")
        return (len(obj),) + subs[0]
    return tuple(get_aval(obj).shape) if isinstance(obj, (Array, Tracer)) else np.shape(obj)


def _stack_nested(obj, dtype):
    """Build a nested list of (possibly traced) values with lax ops: convert, then concatenate."""
    if isinstance(obj, (list, tuple)):
        parts = [_stack_nested(o, dtype) for o in obj]
        parts = [lax.reshape(p, (1,) + tuple(get_aval(p).shape)) for p in parts]
        return parts[0] if len(parts) == 1 else lax.concatenate(parts, 0)
    x = as_operand(obj)
    return lax._convert_element_type(x, dtype, False)


def _map_nested(obj, fn):
    if isinstance(obj, (list, tuple)):
        return [_map_nested(o, fn) for o in obj]
    return fn(obj)


def _leaf_for_dtype(x):
    m = getattr(x, "__jax_array__", None)
    if m is not None:
        return m()
    if isinstance(x, (Array, Tracer, np.ndarray, np.generic, bool, int, float, complex)) or \
            _is_key_array(x):
        return x
    return np.asarray(x)


def _has_buffer(obj) -> bool:
    if isinstance(obj, (bytes, str)):      # (a bytearray is read as uint8, as in JAX)
        return False
    try:
        memoryview(obj)
    except TypeError:
        return False
    return True


def array(object, dtype=None, copy=True, order="K", ndmin=0, *, device=None):  # noqa: A002
    """Create an array (``jnp.array``). Nested lists may hold arrays and tracers."""
    if order not in (None, "K", "A", "C"):
        raise NotImplementedError("Only implemented for order='K'")
    dtype = user_dtype(dtype, "array")
    m = getattr(object, "__jax_array__", None)
    if m is not None:
        object = m()
    if isinstance(dtype, dtypes.ExtendedDType) and not isinstance(object, (Array, Tracer)) \
            and not _is_key_array(object) and not isinstance(object, (list, tuple)):
        raise TypeError(f"Cannot interpret '{dtype}' as a data type")    # NumPy's, as JAX
    if _is_key_array(object):
        out = _key_array_copy(object, dtype)
    elif isinstance(object, (Array, Tracer)):
        out = object if dtype is None else lax._convert_element_type(object, dtype, False)
        if type(out) is Array and out is object:
            # A new array; with copy=True over a new buffer. It keeps the layout (a
            # sharded array's copy is laid out alike, as in JAX).
            sh, committed = out._sharding_or_none(), out._committed
            out = make_array(np.array(out._value, copy=True) if copy else out._value,
                             out.weak_type)
            if committed:
                out._sharding = sh
        elif out is object and copy:    # a traced copy (JAX's ``copy`` primitive)
            from kiln.lax.copying import array_copy
            out = array_copy(out)
    elif isinstance(object, (list, tuple)):
        raw = _flatten_leaves(object, [])
        if any(x is None for x in raw):
            raise ValueError("None is not a valid value for jnp.array")
        leaves = [_leaf_for_dtype(x) for x in raw]
        if dtype is None:
            dtype = (dtypes.result_type(*leaves) if leaves else dtypes.default_float_dtype())
        if any(isinstance(x, Tracer) or _is_key_array(x) for x in leaves):
            _nested_shape(object)
            out = _stack_nested(object, dtype)
        elif any(isinstance(x, Array) for x in leaves):
            # Concrete arrays in a list: assemble with NumPy (their values are constants).
            shape = _nested_shape(object)
            vals = _map_nested(object, lambda x: x._value if type(x) is Array else x)
            out = make_array(dtypes.coerce_to_array(
                np.array(vals, dtype=dtype).reshape(shape), dtype))
        else:
            shape = _nested_shape(object)
            _util._guard_host_value(object)
            out = make_array(dtypes.coerce_to_array(
                np.array(object, dtype=dtype).reshape(shape), dtype))
    elif type(object) in (bool, int, float, complex):
        _util._guard_host_value(object)
        out = make_array(dtypes.coerce_to_array(object, dtype), dtype is None
                         and type(object) is not bool)
    elif isinstance(object, (np.ndarray, np.generic)):
        if isinstance(object, np.ma.MaskedArray):
            object = object.data             # as JAX's jnp.array: the mask is dropped
        if object.dtype == object_dtype:
            raise TypeError("JAX only supports number and bool dtypes, got dtype object in array")
        _util._guard_host_value(object)
        # Always copy: the caller may later mutate its NumPy array, ours must not change.
        out = make_array(np.array(dtypes.coerce_to_array(object, dtype), copy=True))
    elif hasattr(object, "__array__"):
        out = make_array(dtypes.coerce_to_array(np.asarray(object), dtype))
    elif isinstance(object, range):
        # As a list of Python ints (JAX: int32, or int64 under x64).
        return array(list(object), dtype=dtype, copy=copy, order=order, ndmin=ndmin)
    elif _has_buffer(object):
        # array.array, memoryview, ...: the buffer protocol, as NumPy reads it.
        out = make_array(dtypes.coerce_to_array(np.array(memoryview(object)), dtype))
    elif object is None:
        raise ValueError("None is not a valid value for jnp.array")
    elif isinstance(object, (int, float, complex)):
        # a subclass of a Python scalar type (an IntEnum member): as that scalar
        base = next(t for t in (int, float, complex) if isinstance(object, t))
        return array(base(object), dtype=dtype, copy=copy, order=order, ndmin=ndmin,
                     device=device)
    else:
        raise TypeError(f"Unexpected input type for array: {type(object)}")
    nd = get_aval(out).ndim
    if ndmin > nd:
        out = lax.reshape(out, (1,) * (ndmin - nd) + tuple(get_aval(out).shape))
    if device is not None and type(out) is Array:
        out = out.to_device(device)
    return out


object_dtype = np.dtype(object)


def _is_key_array(x) -> bool:
    keys = sys.modules.get("kiln.random._keys")
    return keys is not None and isinstance(x, keys.PRNGKeyArray)


def _key_array_copy(keys, dtype):
    """``jnp.array`` of a typed key array: a new key array over the same key data (its
    dtype may only be the key dtype, as in JAX)."""
    if dtype is not None and dtype != keys.dtype:
        raise ValueError(f"Cannot convert_element_type from {keys.dtype} to "
                         f"{getattr(dtype, 'name', dtype)}")
    return type(keys)(keys._impl, keys._base_array)


def asarray(a, dtype=None, order=None, *, copy=None, device=None):
    """Convert to an array without copying when possible (``jnp.asarray``)."""
    if dtype is None and not copy and (isinstance(a, (Array, Tracer)) or _is_key_array(a)):
        return a if device is None or type(a) is not Array else a.to_device(device)
    if isinstance(a, np.ma.MaskedArray):     # as JAX (jnp.array takes the data)
        masked_array_error()
    if copy is False and dtype is not None and isinstance(a, (Array, Tracer)) \
            and get_aval(a).dtype != dtypes.canonicalize_dtype(dtype):
        raise ValueError("jnp.asarray: cannot avoid a copy when converting the dtype and "
                         "copy=False was given")
    return array(a, dtype=dtype, copy=bool(copy), order=order, device=device)


def copy(a, order=None):
    """A copy of ``a`` (arrays are immutable, so this is ``array(a, copy=True)``)."""
    _util.check_arraylike("copy", a)
    return array(a, copy=True, order=order)


# ----------------------------------------------------------------------------------------------
# filled arrays


def _fill(shape, fill_value, dtype, weak):
    """Broadcast a scalar operand to ``shape`` as ``dtype``."""
    if any(d < 0 for d in shape):
        raise TypeError(f"Shapes must have every element be nonnegative, got {tuple(shape)}.")
    if isinstance(dtype, dtypes.ExtendedDType):     # typed keys (``zeros((2,), key<fry>)``)
        return dtype._rules.full(tuple(shape), fill_value, dtype)
    if dtype == dtypes.float0:      # as JAX: a NumPy array of float0 (no data to hold)
        return np.zeros(tuple(shape), dtypes.float0)
    if isinstance(fill_value, Tracer) or isinstance(fill_value, Array):
        v = lax._convert_element_type(fill_value, dtype, weak)
    else:
        v = make_array(np.asarray(fill_value, dtype=dtype), weak)
    if get_aval(v).shape == tuple(shape):
        return v
    return _util.broadcast_to(v, shape)


@_util.placed
def full(shape, fill_value, dtype=None, *, device=None, out_sharding=None):
    """An array of ``shape`` filled with ``fill_value`` (which may be an array to broadcast)."""
    shape = canonicalize_shape(shape, "The shape argument of jnp.full must be static.")
    _util.check_arraylike("full", fill_value)
    dtype = user_dtype(dtype, "full")
    if dtype is None:
        dt, weak = dtypes.result_type(fill_value, return_weak_type_flag=True)
    else:
        dt, weak = dtype, False
    if isinstance(dt, dtypes.ExtendedDType):
        return _util.laid_out(dt._rules.full(shape, fill_value, dt), out_sharding)
    if np.ndim(fill_value) if not isinstance(fill_value, (Array, Tracer)) \
            else get_aval(fill_value).ndim:
        v = lax._convert_element_type(as_operand(fill_value), dt, weak)
        return _util.laid_out(_util.broadcast_to(v, shape), out_sharding)
    return _util.laid_out(_fill(shape, fill_value, dt, weak), out_sharding)


@_util.placed
def zeros(shape, dtype=None, *, device=None, out_sharding=None):
    """An array of zeros (default dtype: the default float), laid out as
    ``out_sharding`` when given."""
    shape = canonicalize_shape(shape, "The shape argument of jnp.zeros must be static.")
    dt = user_dtype(dtype, "zeros") or dtypes.default_float_dtype()
    return _util.laid_out(_fill(shape, 0, dt, False), out_sharding)


@_util.placed
def ones(shape, dtype=None, *, device=None, out_sharding=None):
    """An array of ones (default dtype: the default float), laid out as
    ``out_sharding`` when given."""
    shape = canonicalize_shape(shape, "The shape argument of jnp.ones must be static.")
    dt = user_dtype(dtype, "ones") or dtypes.default_float_dtype()
    return _util.laid_out(_fill(shape, 1, dt, False), out_sharding)


@_util.placed
def empty(shape, dtype=None, *, device=None, out_sharding=None):
    """Like ``zeros`` (kiln arrays are always initialized)."""
    return _util.laid_out(zeros(shape, dtype), out_sharding)


def _prototype(a, name, *others):
    """``(shape, dtype, weak_type)`` of the prototype of a ``*_like`` function.

    As in JAX, anything with ``shape`` and ``dtype`` attributes is accepted (duck typing:
    ``ShapeDtypeStruct``, e.g. from ``eval_shape``, or a user's array-like object); such an
    object is never weakly typed and its dtype is canonicalized. Other prototypes must be
    arrays or scalars (``__jax_array__`` objects are converted first).
    """
    if isinstance(a, (Array, Tracer)):
        _util.check_arraylike(name, a, *others)
        aval = get_aval(a)
        return aval.shape, aval.dtype, aval.weak_type
    if (not isinstance(a, (np.ndarray, np.generic, PublicArray)) and hasattr(a, "dtype")
            and hasattr(a, "shape")):
        _util.check_arraylike(name, 0, *others)      # the fill value keeps its position
        shape = canonicalize_shape(a.shape)
        dt = a.dtype
        if not isinstance(dt, np.dtype):
            raise ValueError(f"Could not convert {a} to a NumPy dtype (via `.dtype` value "
                             f"{dt}).")
        if dt != dtypes.float0:
            dt = dtypes.check_and_canonicalize_user_dtype(dt, name)
        return shape, np.dtype(dt), False
    m = getattr(a, "__jax_array__", None)
    if m is not None:
        a = m()
    _util.check_arraylike(name, a, *others)
    aval = get_aval(as_operand(a))
    return aval.shape, aval.dtype, aval.weak_type


def _full_like(name, a, fill_value, dtype, shape):
    proto_shape, proto_dt, proto_weak = _prototype(a, name, fill_value)
    dtype = user_dtype(dtype, name)
    dt, weak = (proto_dt, proto_weak) if dtype is None else (dtype, False)
    shape = proto_shape if shape is None else canonicalize_shape(shape)
    if isinstance(dt, dtypes.ExtendedDType):
        return dt._rules.full(shape, fill_value, dt)
    if not isinstance(fill_value, (Array, Tracer)) and np.ndim(fill_value) == 0:
        out = _fill(shape, fill_value, dt, weak)
    else:
        v = lax._convert_element_type(as_operand(fill_value), dt, weak)
        out = _util.broadcast_to(v, shape)
    return _like_layout(out, a)


def _like_layout(out, a):
    """JAX's ``full_like`` rule: the result of a committed, not weakly typed prototype
    of the same shape (or a fully replicated one) has the prototype's sharding."""
    if (type(out) is Array and type(a) is Array and a._committed and not a.weak_type
            and (out.shape == a.shape or a.is_fully_replicated)):
        return out.to_device(a.sharding)
    return out


@_util.placed
def full_like(a, fill_value, dtype=None, shape=None, *, device=None, out_sharding=None):
    """Create an array full of ``fill_value`` with the same shape and dtype as ``a``.

    JAX implementation of :func:`numpy.full_like`.

    Args:
      a: an array, a scalar, or any object with ``shape`` and ``dtype`` attributes (such
        as a :class:`kiln.ShapeDtypeStruct`); its shape and dtype (and, for arrays, its
        weak type) are those of the result unless overridden.
      fill_value: a scalar, or an array broadcast to the result's shape.
      dtype: optionally override the dtype of the result.
      shape: optionally override the shape of the result.
      device, out_sharding: accepted for compatibility (kiln has one CPU device).

    Returns:
      The filled array.
    """
    return _full_like("full_like", a, fill_value, dtype, shape)


@_util.placed
def zeros_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    """Create an array full of zeros with the same shape and dtype as ``a``.

    JAX implementation of :func:`numpy.zeros_like`. ``a`` may be an array, a scalar or any
    object with ``shape`` and ``dtype`` attributes (e.g. a :class:`kiln.ShapeDtypeStruct`);
    ``dtype``/``shape`` override the prototype's. ``device``/``out_sharding`` are accepted
    for compatibility.
    """
    return _full_like("zeros_like", a, 0, dtype, shape)


@_util.placed
def ones_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    """Create an array full of ones with the same shape and dtype as ``a``.

    JAX implementation of :func:`numpy.ones_like`; ``a`` may be an array, a scalar or any
    object with ``shape`` and ``dtype`` attributes (e.g. a :class:`kiln.ShapeDtypeStruct`).
    """
    return _full_like("ones_like", a, 1, dtype, shape)


@_util.placed
def empty_like(prototype, dtype=None, shape=None, *, device=None):
    """Create an empty array with the same shape and dtype as ``prototype``.

    JAX implementation of :func:`numpy.empty_like`: as in JAX the result is filled with
    zeros. ``prototype`` may be an array, a scalar or any object with ``shape`` and
    ``dtype`` attributes (e.g. a :class:`kiln.ShapeDtypeStruct`).
    """
    return _full_like("empty_like", prototype, 0, dtype, shape)


# ----------------------------------------------------------------------------------------------
# index-pattern arrays: built from iota so that jit sees a small program, not a big constant


def _iota_2d(n, m):
    """Row and column index grids of shape (n, m), as int32."""
    rows = lax.broadcast_in_dim(lax.iota(np.int32, n), (n, m), (0,))
    cols = lax.broadcast_in_dim(lax.iota(np.int32, m), (n, m), (1,))
    return rows, cols


def _static_int(x, name):
    x = _util.concretize(x)
    if isinstance(x, Tracer):
        raise ConcretizationTypeError(x, f"The {name} argument must be static.")
    return int(x)


def _tri_k(k, n, m):
    """The diagonal offset of a ``tri`` mask. JAX builds the mask from ``k`` as an int of
    the default width: without x64 a ``k`` outside int32 raises OverflowError and ``rows + k``
    may wrap (kept here); with x64 nothing wraps, so ``k`` is clamped to fit int32 grids."""
    from kiln import config
    if not config.jax_enable_x64:
        if not -2**31 <= k < 2**31:
            raise OverflowError(f"Python int {k} too large to convert to int32")
        return k
    return _clamp_diagonal(k, n, m)


def _clamp_diagonal(k, n, m):
    """``k`` moved into ``[-n - 1, m]``: the same diagonal mask for an (n, m) grid, and it
    fits the int32 index grids (JAX accepts any Python int ``k``)."""
    return min(max(k, -n - 1), m)


@_util.placed
def eye(N, M=None, k=0, dtype=None, *, device=None):
    """A 2-D array with ones on the ``k``-th diagonal."""
    n = _static_int(N, "N")
    m = n if M is None else _static_int(M, "M")
    k = _static_int(k, "k")
    if n < 0 or m < 0:
        raise ValueError(f"negative dimensions are not allowed, got {n} and {m}")
    dt = user_dtype(dtype, "eye") or dtypes.default_float_dtype()
    k = _clamp_diagonal(k, n, m)
    rows, cols = _iota_2d(n, m)
    mask = lax.eq(lax.sub(cols, rows), k)
    return lax.convert_element_type(mask, dt)


def identity(n, dtype=None):
    """The ``n`` x ``n`` identity matrix."""
    return eye(n, dtype=dtype)


def tri(N, M=None, k=0, dtype=None):
    """Ones at and below the ``k``-th diagonal."""
    n = _static_int(N, "N")
    m = n if M is None else _static_int(M, "M")
    # JAX's default here is float32 even with jax_enable_x64 (``dtype or float32``).
    dt = user_dtype(dtype, "tri") or np.dtype(np.float32)
    rows, cols = _iota_2d(n, m)
    k = _util.concretize(k)
    if isinstance(k, Tracer):       # a traced offset (as JAX): compared at run time
        k = lax.convert_element_type(k, get_aval(rows).dtype)
        return lax.convert_element_type(lax.le(cols, rows + k), dt)
    k = _tri_k(_static_int(k, "k"), n, m)
    return lax.convert_element_type(lax.le(cols, lax.add(rows, k)), dt)


def _tri_mask_select(m, k, lower):
    m = _util.ensure_arraylike("tril" if lower else "triu", m)
    shape = get_aval(m).shape
    if len(shape) < 2:
        raise ValueError(f"{'tril' if lower else 'triu'} requires an array of at least two "
                         "dimensions")
    n, c = shape[-2:]
    # As JAX: triu keeps what tri(k - 1) drops.
    k = _tri_k(k if lower else k - 1, n, c)
    rows, cols = _iota_2d(n, c)
    mask = lax.le(cols, lax.add(rows, k))
    if not lower:
        mask = lax.bitwise_not(mask)
    mask = lax.broadcast_in_dim(mask, shape, (len(shape) - 2, len(shape) - 1))
    zero = _util.full_const(shape, 0, get_aval(m).dtype)
    return lax.select(mask, m, zero) if lower else lax.select(mask, m, zero)


def tril(m, k=0):
    """Zero the entries above the ``k``-th diagonal (of the last two axes)."""
    return _tri_mask_select(m, _static_int(k, "k"), True)


def triu(m, k=0):
    """Zero the entries below the ``k``-th diagonal (of the last two axes)."""
    return _tri_mask_select(m, _static_int(k, "k"), False)


def diag(v, k=0):
    """Extract a diagonal (2-D input) or build a diagonal matrix (1-D input)."""
    v = _util.ensure_arraylike("diag", v)
    k = _static_int(k, "k")
    shape = get_aval(v).shape
    if len(shape) == 1:
        n = shape[0] + abs(k)
        weak = get_aval(v).weak_type     # the result is weakly typed as ``v`` is (JAX)
        zero = make_array(np.zeros((), get_aval(v).dtype), weak)
        vp = lax.pad(v, zero, [(0, abs(k), 0)])
        rows, cols = _iota_2d(n, n)
        # row i holds v[i] when k >= 0 (column i + k), column j holds v[j] when k < 0.
        vb = lax.broadcast_in_dim(vp, (n, n), (0,) if k >= 0 else (1,))
        mask = lax.eq(lax.sub(cols, rows), k)
        zeros = make_array(np.broadcast_to(np.zeros((), get_aval(v).dtype), (n, n)), weak)
        return lax.select(mask, vb, zeros)
    if len(shape) == 2:
        from kiln.numpy._shape import diagonal
        return diagonal(v, offset=k)
    raise ValueError("diag input must be 1d or 2d")


def diagflat(v, k=0):
    """A 2-D array with the flattened input on its ``k``-th diagonal."""
    v = _util.ensure_arraylike("diagflat", v)
    return diag(lax.reshape(v, (get_aval(v).size,)), k)


# ----------------------------------------------------------------------------------------------
# ranges


def _concrete_scalar(x, name):
    x = _util.concretize(x)
    if isinstance(x, Tracer):
        raise ConcretizationTypeError(
            x, f"It arose in the jnp.arange argument '{name}'. jnp.arange needs static "
               "(concrete) start/stop/step; use lax.iota for shape-static ranges.")
    if isinstance(x, Array):
        return x._value
    return x


@_util.placed
def arange(start, stop=None, step=None, dtype=None, *, device=None, out_sharding=None):
    """Evenly spaced values in ``[start, stop)`` (arguments must be concrete), laid out
    as ``out_sharding`` when given."""
    return _util.laid_out(_arange(start, stop, step, dtype), out_sharding)


def _arange(start, stop, step, dtype):
    _util.check_arraylike_or_none("arange", start, stop, step)
    dtype = user_dtype(dtype, "arange")
    args = [a for a in (start, stop, step) if a is not None]
    # A lone argument is the range's end: JAX names it 'stop' in the error.
    names = ("stop" if stop is None and step is None else "start", "stop", "step")
    vals = [_concrete_scalar(a, n) for a, n in zip((start, stop, step), names)
            if a is not None]
    for v in vals:
        if np.ndim(v) != 0:
            raise ValueError("jax.numpy.arange: arguments must be scalars; got array of shape "
                             f"{np.shape(v)}")
    if dtype is None:
        dtype = dtypes.canonicalize_dtype(dtypes.result_type(*args))
    if any(np.iscomplexobj(v) for v in vals):
        raise ValueError("Passing complex start/stop/step to jnp.arange is no longer "
                         "supported starting in JAX v0.10.0.")
    pyvals = [v.item() if isinstance(v, (np.ndarray, np.generic)) else v for v in vals]
    if stop is None and step is None:
        if dtypes.issubdtype(dtype, np.integer) or dtype == np.bool_:
            n = int(np.ceil(pyvals[0])) if pyvals[0] > 0 else 0
            return lax.iota(dtype, n) if dtype != np.bool_ else make_array(
                np.arange(n).astype(dtype))
        out = np.arange(pyvals[0])
    else:
        s0 = pyvals[0]
        s1 = pyvals[1] if stop is not None else None
        st = pyvals[-1] if step is not None else None
        out = np.arange(s0, s1, st) if s1 is not None else np.arange(s0, step=st)
    return make_array(out.astype(dtype))


@_util.placed
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (differentiable in both)."""
    num = _static_int(num, "num")
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    start, stop = _util.ensure_arraylike("linspace", start, stop)
    dtype = user_dtype(dtype, "linspace")
    if dtype is None:
        dtype = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(dtypes.result_type(start, stop)))
    cdt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(dtype))
    start = lax.convert_element_type(start, cdt)
    stop = lax.convert_element_type(stop, cdt)
    bshape = _util.broadcast_shapes(get_aval(start).shape, get_aval(stop).shape)
    start = _util.broadcast_to(start, bshape)
    stop = _util.broadcast_to(stop, bshape)
    nd = len(bshape)
    axis = axis + nd + 1 if axis < 0 else axis
    out_shape = list(bshape)
    out_shape.insert(axis, num)
    out_shape = tuple(out_shape)
    bdims = tuple(i for i in range(nd + 1) if i != axis)
    div = (num - 1) if endpoint else num
    eager = _linspace_eager(start, stop, num, endpoint, axis, cdt) if num > 1 else None
    if eager is not None:
        out = make_array(eager)
        # JAX's delta divides by a constant too: XLA multiplies by its reciprocal.
        step = lax.mul(lax.sub(stop, start), _util.full_const(
            bshape, np.asarray(1, cdt) / np.asarray(div, cdt), cdt))
    elif num > 1:
        real = dtypes.finfo(cdt).dtype
        it = lax.convert_element_type(lax.iota(np.int32, num), real)
        t = lax.div(it, make_array(np.asarray(div, real)))
        t = lax.convert_element_type(t, cdt)
        tb = lax.broadcast_in_dim(t, out_shape, (axis,))
        sb = lax.broadcast_in_dim(start, out_shape, bdims)
        eb = lax.broadcast_in_dim(stop, out_shape, bdims)
        one = make_array(np.ones((), cdt))
        out = lax.add(lax.mul(sb, lax.sub(_util.broadcast_to(one, out_shape), tb)),
                      lax.mul(eb, tb))
        if endpoint:
            # Make the last sample exactly ``stop``.
            last = lax.eq(lax.broadcast_in_dim(lax.iota(np.int32, num), out_shape, (axis,)),
                          num - 1)
            out = lax.select(last, eb, out)
        step = lax.div(lax.sub(stop, start), make_array(np.asarray(div, cdt)))
    elif num == 1:
        out = lax.broadcast_in_dim(start, out_shape, bdims)
        step = (make_array(np.full(bshape, np.nan, cdt)) if endpoint else lax.sub(stop, start))
    else:
        out = make_array(np.zeros(out_shape, cdt))
        step = make_array(np.full(bshape, np.nan, cdt))
    if dtypes.issubdtype(dtype, np.integer) and not dtypes.issubdtype(cdt, np.integer):
        out = lax.floor(out)
    out = lax.convert_element_type(out, dtype)
    return (out, step) if retstep else out


def _linspace_eager(start, stop, num, endpoint, axis, cdt):
    """Eager float32/float64 ``linspace`` samples with JAX's bits, or None (traced bounds,
    another dtype, no native FMA).

    JAX computes ``start * (1 - iota / div) + stop * (iota / div)`` in one jitted program,
    and XLA rewrites it before it runs: the division by the constant ``div`` becomes a
    multiplication by its reciprocal ``r``, ``stop * (iota * r)`` is reassociated to
    ``iota * (stop * r)``, and the CPU code contracts both multiply-adds, so each sample is
    ``fma(iota, stop * r, start * fma(-iota, r, 1))`` and the endpoint is ``stop``.

    Exact for scalar bounds (checked against JAX in tests/parity/test_eager_jax_bits.py). With
    array bounds XLA's fusion can contract a different multiply-add (it depends on how
    the bounds broadcast), so some samples may differ by 1 ulp; in float64 a few of the
    last samples (those of XLA's scalar remainder loop after its vector loop, seen at up
    to 2 in 12,345) can differ by 1 ulp too."""
    from kiln.core import trace as core
    if (core._state.trace is not core.eval_trace or type(start) is not Array
            or type(stop) is not Array or np.dtype(cdt) not in (np.dtype(np.float32),
                                                                 np.dtype(np.float64))):
        return None
    from kiln.random import _native
    if _native.lib() is None:
        return None
    dt = np.dtype(cdt)
    t = dt.type
    s0, e0 = np.asarray(start._value, dt), np.asarray(stop._value, dt)
    nd = s0.ndim
    div = num - 1 if endpoint else num
    shape = [1] * (nd + 1)
    shape[axis] = div
    it = np.arange(div, dtype=dt).reshape(shape)
    s1, e1 = np.expand_dims(s0, axis), np.expand_dims(e0, axis)
    r = t(1) / t(div)
    with np.errstate(all="ignore"):
        one_minus = _native.fma(-it, r, t(1), dt)
        out = _native.fma(it, e1 * r, s1 * one_minus, dt)
    if endpoint:
        out = np.concatenate([out, e1], axis=axis)
    return out


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop, num)``."""
    start, stop = _util.ensure_arraylike("logspace", start, stop)
    dtype = user_dtype(dtype, "logspace")
    cdt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(
        dtypes.result_type(start, stop) if dtype is None else dtype))
    lin = linspace(start, stop, num, endpoint=endpoint, dtype=cdt, axis=axis)
    from kiln.numpy._ufuncs import power
    out = power(lax.convert_element_type(as_operand(base), cdt), lin)
    return lax.convert_element_type(out, dtype if dtype is not None else cdt)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate matrices from coordinate vectors."""
    _util.check_arraylike("meshgrid", *xi)
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing}")
    args = [as_operand(x) for x in xi]
    args = [lax.reshape(a, (get_aval(a).size,)) if get_aval(a).ndim != 1 else a for a in args]
    shapes = [get_aval(a).shape[0] for a in args]
    if indexing == "xy" and len(args) >= 2:
        shapes[0], shapes[1] = shapes[1], shapes[0]
    nd = len(args)
    out = []
    for i, a in enumerate(args):
        pos = i
        if indexing == "xy" and nd >= 2 and i < 2:
            pos = 1 - i
        if sparse:
            s = [1] * nd
            s[pos] = get_aval(a).shape[0]
            out.append(lax.reshape(a, tuple(s)))
        else:
            out.append(lax.broadcast_in_dim(a, tuple(shapes), (pos,)))
    return out
