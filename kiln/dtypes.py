"""Dtypes: canonicalization, weak types, and JAX's type-promotion lattice.

What this module holds:

* the dtype objects kiln adds to NumPy's (``bfloat16``, the ``float8_*``,
  ``float6_*`` and ``float4_*`` types, ``int4``/``uint4`` and the other
  sub-byte integers, all from ``ml_dtypes``) and ``float0``, the dtype of
  tangents of integer and boolean values;
* canonicalization: with ``config.jax_enable_x64`` off, the 64-bit types map
  to their 32-bit versions (``canonicalize_dtype``, ``coerce_to_array``);
* ``dtype(x)``, ``result_type(*args)``, ``promote_types(a, b)`` and the
  dtype predicates (``issubdtype``, ``isdtype``, ``can_cast``, ``finfo``,
  ``iinfo``).

It must not import the rest of kiln (only ``kiln.config``): everything imports
it.

Type promotion
--------------
JAX does not use NumPy's promotion table. Its rules come from a lattice (a
partial order in which any set of types has a least upper bound, the "join");
the result type of an operation is the join of its inputs' types. The nodes are
the strong dtypes plus three *weak* nodes, written ``i*``, ``f*`` and ``c*``
here, for Python ``int``, ``float`` and ``complex`` scalars (and for arrays that
carry ``weak_type=True``, such as the result of ``x * 2`` where ``x`` is itself
weak). The edges point from a type to the types just above it::

    bool -> i* -> u8 -> u16 -> u32 -> u64 -> f* -> c* -> c64 -> c128
            i* -> i8 -> i16 -> i32 -> i64 -> f*       f32 -> c64
                  u8 -> i16, u16 -> i32, u32 -> i64
            f* -> bf16, f16 -> f32 -> f64 -> c128
            f* -> float8_*, float6_*, float4_*   (dead ends)
            i* -> int4, uint4, int2, uint2, ...  (dead ends)

Consequences, all deliberate in JAX: a weak scalar never widens a strong array
(``int8 + 1 -> int8``, ``float16 + 1.0 -> float16``, ``bfloat16 + 1j ->
complex64``); ``uint64 + int64`` jumps to the weak float node and so gives
the default float; the narrow floats and sub-byte integers join nothing but
themselves and weak scalars (anything else raises ``TypePromotionError``).
With x64 disabled the edge ``u32 -> i64`` is replaced by ``u32 -> i32`` so that
32-bit inputs never produce a 64-bit result. Under
``jax_numpy_dtype_promotion='strict'`` every strong type is its own island;
weak scalars still join strong types of the same or a higher kind.

A result is weak when the join is a weak node, or when all inputs are weak (then
the join of their strong counterparts gives the kind). A weak result takes the
default dtype of its kind (int32/float32/complex64, or the 64-bit ones under
x64). ``bool`` is never weak.
"""

from __future__ import annotations

import functools
import threading
import warnings
from typing import Any

import ml_dtypes
import numpy as np

from kiln.config import config

__all__ = [
    "ExtendedDType",
    "TypePromotionError",
    "bfloat16",
    "can_cast",
    "canonicalize_dtype",
    "check_and_canonicalize_user_dtype",
    "coerce_to_array",
    "default_complex_dtype",
    "default_float_dtype",
    "default_int_dtype",
    "default_uint_dtype",
    "dtype",
    "extended",
    "finfo",
    "float0",
    "iinfo",
    "int4",
    "is_float0",
    "is_python_scalar",
    "is_weakly_typed",
    "isdtype",
    "issubdtype",
    "prng_key",
    "promote_types",
    "result_type",
    "scalar_type_of",
    "uint4",
    "weak_type_scalar_dtype",
]


class TypePromotionError(ValueError):
    """Raised when there is no implicit promotion path between the inputs' dtypes."""


# ---------------------------------------------------------------------------
# dtype objects
# ---------------------------------------------------------------------------

bfloat16: type[np.generic] = ml_dtypes.bfloat16
float8_e4m3fn: type[np.generic] = ml_dtypes.float8_e4m3fn
float8_e5m2: type[np.generic] = ml_dtypes.float8_e5m2
float8_e4m3b11fnuz: type[np.generic] = ml_dtypes.float8_e4m3b11fnuz
float8_e4m3fnuz: type[np.generic] = ml_dtypes.float8_e4m3fnuz
float8_e5m2fnuz: type[np.generic] = ml_dtypes.float8_e5m2fnuz
int4: type[np.generic] = ml_dtypes.int4
uint4: type[np.generic] = ml_dtypes.uint4
# Newer ml_dtypes releases add more narrow types; JAX exposes each that exists.
float8_e3m4 = getattr(ml_dtypes, "float8_e3m4", None)
float8_e4m3 = getattr(ml_dtypes, "float8_e4m3", None)
float8_e8m0fnu = getattr(ml_dtypes, "float8_e8m0fnu", None)
float6_e2m3fn = getattr(ml_dtypes, "float6_e2m3fn", None)
float6_e3m2fn = getattr(ml_dtypes, "float6_e3m2fn", None)
float4_e2m1fn = getattr(ml_dtypes, "float4_e2m1fn", None)
int2 = getattr(ml_dtypes, "int2", None)
uint2 = getattr(ml_dtypes, "uint2", None)
int1 = getattr(ml_dtypes, "int1", None)
uint1 = getattr(ml_dtypes, "uint1", None)

# NumPy scalar types under JAX's default-type names.
bool_ = np.bool_
int_ = np.int64
uint = np.uint64
float_ = np.float64
complex_ = np.complex128

#: The dtype of tangents (and cotangents) of integer and boolean values: a
#: zero-size record, so such "arrays" occupy no memory.
float0: np.dtype = np.dtype([("float0", np.void, 0)])


def _present(*types: Any) -> list[np.dtype]:
    return [np.dtype(t) for t in types if t is not None]


_float8_dtypes = _present(
    float8_e3m4, float8_e4m3, float8_e8m0fnu, float8_e4m3b11fnuz,
    float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
)
_float6_dtypes = _present(float6_e2m3fn, float6_e3m2fn)
_float4_dtypes = _present(float4_e2m1fn)
_bfloat16_dtype = np.dtype(bfloat16)
#: Floats NumPy does not know as floats (their ``kind`` is 'V').
_custom_float_dtypes = frozenset([*_float4_dtypes, *_float6_dtypes, *_float8_dtypes, _bfloat16_dtype])
_custom_float_scalar_types = frozenset(d.type for d in _custom_float_dtypes)
_narrow_float_dtypes = [*_float4_dtypes, *_float6_dtypes, *_float8_dtypes]  # lattice dead ends
_intn_signed_dtypes = _present(int1, int2, int4)
_intn_unsigned_dtypes = _present(uint1, uint2, uint4)
_intn_dtypes = frozenset([*_intn_signed_dtypes, *_intn_unsigned_dtypes])
_intn_signed_scalar_types = frozenset(d.type for d in _intn_signed_dtypes)
_intn_unsigned_scalar_types = frozenset(d.type for d in _intn_unsigned_dtypes)

_bool_dtype = np.dtype(bool)
_unsigned_dtypes = [*_intn_unsigned_dtypes, *map(np.dtype, ["uint8", "uint16", "uint32", "uint64"])]
_signed_dtypes = [*_intn_signed_dtypes, *map(np.dtype, ["int8", "int16", "int32", "int64"])]
_float_dtypes = [*_custom_float_dtypes, *map(np.dtype, ["float16", "float32", "float64"])]
_complex_dtypes = [np.dtype("complex64"), np.dtype("complex128")]
_numeric_dtypes = [*_unsigned_dtypes, *_signed_dtypes, *_float_dtypes, *_complex_dtypes]

#: Every dtype a kiln array may have.
_valid_dtypes = frozenset([_bool_dtype, *_numeric_dtypes, float0, np.dtypes.StringDType()])


class extended(np.generic):
    """Abstract scalar type of extended dtypes (e.g. PRNG keys), for ``issubdtype``."""


class prng_key(extended):
    """Abstract scalar type of PRNG key dtypes, for ``issubdtype``."""


class ExtendedDType:
    """Base class for dtypes that are not NumPy dtypes (PRNG key dtypes).

    Subclasses set ``type`` to a subclass of :class:`extended` and ``name``.
    """

    type: type = extended
    name: str = "extended"


# ---------------------------------------------------------------------------
# canonicalization and defaults
# ---------------------------------------------------------------------------

_to_32bit: dict[np.dtype, np.dtype] = {
    np.dtype("int64"): np.dtype("int32"),
    np.dtype("uint64"): np.dtype("uint32"),
    np.dtype("float64"): np.dtype("float32"),
    np.dtype("complex128"): np.dtype("complex64"),
}

_python_scalar_types = (bool, int, float, complex)
#: Uncanonicalized dtypes of Python scalars (JAX's ``python_scalar_dtypes``).
python_scalar_dtypes: dict[type, np.dtype] = {
    bool: np.dtype("bool"),
    int: np.dtype("int64"),
    float: np.dtype("float64"),
    complex: np.dtype("complex128"),
}

# Per-x64-mode tables (read on every eager op): this thread's, in ``_st``. Their class
# attributes are the tables of the flags' global values; a thread with a context value
# for ``jax_enable_x64``/``jax_explicit_x64_dtypes`` (``with enable_x64():``, thread-local
# as in JAX) has its own in its instance dict. Tables are built once per mode and never
# modified, so a reader sees a whole table.
_TABLES: dict[tuple, dict[str, Any]] = {}
# The classes of the valid dtypes (np.dtypes.Float32DType, ...). `type(x) in
# _dtype_classes` is a much cheaper test than `isinstance(x, np.dtype)`, whose
# metaclass check costs about 0.2us.
_dtype_classes = frozenset(type(d) for d in _valid_dtypes)
# result_type memo: (x64, mode, dtype0, weak0, dtype1, weak1, ...) -> (dtype, weak).
# The key holds both flags, so the memo never goes stale.
_result_memo: dict[tuple, tuple[Any, bool]] = {}


def _tables(x64: bool, explicit: str) -> dict[str, Any]:
    key = (bool(x64), explicit)
    hit = _TABLES.get(key)
    if hit is not None:
        return hit

    def canon(d: np.dtype) -> np.dtype:
        return d if x64 else _to_32bit.get(d, d)

    canonical = {d: canon(d) for d in _valid_dtypes}
    # Type promotion's view of its operands' dtypes: canonical, except that with x64 off
    # and ``jax_explicit_x64_dtypes='allow'`` a 64-bit array keeps its width (as JAX,
    # whose promotion canonicalizes its result as an explicitly requested dtype).
    allow = not x64 and explicit == "allow"
    out = _TABLES[key] = dict(
        defaults={"b": _bool_dtype, "i": canon(np.dtype("int64")),
                  "u": canon(np.dtype("uint64")), "f": canon(np.dtype("float64")),
                  "c": canon(np.dtype("complex128"))},
        py_scalar_canonical={t: canon(d) for t, d in python_scalar_dtypes.items()},
        canonical=canonical,
        promo_canonical={d: d for d in _valid_dtypes} if allow else canonical,
        promo_state="allow" if allow else bool(x64))
    return out


class _DtypeState(threading.local):
    """This thread's tables (see above); class attributes: the global flags' tables."""


class _GlobalTables:
    """The global flags' tables, as plain attributes (read while no thread has a context
    value for the two flags: cheaper than a thread-local lookup)."""


_local = _DtypeState()
_plain = _GlobalTables()
#: What the readers use: ``_plain``, or ``_local`` while some thread has a context value.
_st: Any = _plain
_st_lock = threading.Lock()
_X64_FLAGS = ("jax_enable_x64", "jax_explicit_x64_dtypes")


def _on_x64_change(_new_value: Any = None) -> None:
    """``jax_enable_x64`` or ``jax_explicit_x64_dtypes`` changed, globally or for this
    thread: the global tables, and this thread's own while it has a context value."""
    global _py_scalar_canonical, _st
    glob = _tables(config.global_value("jax_enable_x64"),
                   config.global_value("jax_explicit_x64_dtypes"))
    with _st_lock:
        for k, v in glob.items():
            setattr(_DtypeState, k, v)
            setattr(_plain, k, v)
        _py_scalar_canonical = glob["py_scalar_canonical"]   # its keys: the scalar types
        mine = _local.__dict__
        mine.clear()
        if any(config.has_override(n) for n in _X64_FLAGS):
            mine.update(_tables(config.jax_enable_x64, config.jax_explicit_x64_dtypes))
        # Decided under the lock from the live count (context values are counted before
        # their callbacks run), so the last decision holds whatever the threads' order.
        busy = any(len(config.values_in_use(n)) > 1 for n in _X64_FLAGS)
        _st = _local if busy else _plain


_on_explicit_x64_change = _on_x64_change


def explicit_x64_allowed() -> bool:
    """True while x64 is off and ``jax_explicit_x64_dtypes`` is ``'allow'`` (64-bit dtypes
    that were asked for, or that arrays already have, are kept)."""
    return _st.promo_state == "allow"


_py_scalar_canonical: dict[type, np.dtype] = {}
_on_x64_change()
config.on_change("jax_enable_x64", _on_x64_change)
config.on_change("jax_explicit_x64_dtypes", _on_explicit_x64_change)
for _name in _X64_FLAGS:
    config.keep_per_thread(_name)


def default_int_dtype() -> np.dtype:
    return _st.defaults["i"]


def default_uint_dtype() -> np.dtype:
    return _st.defaults["u"]


def default_float_dtype() -> np.dtype:
    return _st.defaults["f"]


def default_complex_dtype() -> np.dtype:
    return _st.defaults["c"]


# Python-type dtype-likes and their JAX default dtypes (a function: x64-dependent).
default_types = {
    "b": lambda: _bool_dtype,
    "i": default_int_dtype,
    "u": default_uint_dtype,
    "f": default_float_dtype,
    "c": default_complex_dtype,
}


def _kind(dt: np.dtype) -> str:
    """``dt.kind``, except that the ml_dtypes floats/ints report 'f'/'i'/'u' (not 'V')."""
    if dt in _custom_float_dtypes:
        return "f"
    if dt in _intn_dtypes:
        return "i" if dt.type in _intn_signed_scalar_types else "u"
    return dt.kind


# Conversions of hashable dtype-likes (strings, scalar types) to np.dtype. The
# mapping does not depend on x64, so the cache never needs clearing.
_np_dtype_cache: dict[Any, np.dtype] = {}


def _np_dtype(x: Any) -> Any:
    """``np.dtype(x)`` that also takes objects with a ``.dtype`` (arrays, scalar types).

    Extended dtypes are returned unchanged.
    """
    if isinstance(x, np.dtype):
        return x
    # Only strings and types are cached: other objects may have an elementwise __eq__.
    cacheable = type(x) is str or isinstance(x, type)
    if cacheable:
        dt = _np_dtype_cache.get(x)
        if dt is not None:
            return dt
    if isinstance(x, ExtendedDType):
        return x
    attr = getattr(x, "dtype", None)
    if isinstance(attr, (np.dtype, ExtendedDType)):
        return attr
    try:
        dt = np.dtype(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"dtype {x!r} not understood") from e
    if cacheable and len(_np_dtype_cache) < 4096:
        _np_dtype_cache[x] = dt
    return dt


def canonicalize_dtype(dtype: Any, allow_extended_dtype: bool = False) -> Any:
    """The dtype kiln uses for ``dtype``: 64-bit types become 32-bit unless x64 is on.

    Accepts anything dtype-like: ``np.dtype``, NumPy scalar types, strings,
    Python ``bool``/``int``/``float``/``complex`` (giving the default dtypes),
    kiln scalar types and arrays (anything with a ``.dtype``).
    """
    if type(dtype) in _dtype_classes:
        out = _st.canonical.get(dtype)
        if out is not None:
            return out
    dt = _np_dtype(dtype)
    if isinstance(dt, ExtendedDType):
        if not allow_extended_dtype:
            raise ValueError(
                f"canonicalize_dtype called on extended dtype {dt} with allow_extended_dtype=False"
            )
        return dt
    if config.jax_enable_x64:
        return dt
    return _to_32bit.get(dt, dt)


def is_python_scalar(x: Any) -> bool:
    """True for Python ``bool``, ``int``, ``float``, ``complex`` (not NumPy scalars)."""
    return type(x) in _python_scalar_types


def scalar_type_to_dtype(typ: type, value: Any = None) -> np.dtype:
    """The canonical dtype of Python scalar type ``typ``; checks that an int ``value`` fits."""
    dt = _st.py_scalar_canonical[typ]
    if typ is int and value is not None:
        info = np.iinfo(dt)
        if value < info.min or value > info.max:
            raise OverflowError(f"Python int {value} too large to convert to {dt}")
    return dt


def weak_type_scalar_dtype(x: Any) -> np.dtype:
    """The dtype a Python scalar (or Python scalar type) takes: the default of its kind.

    ``1 -> int32``, ``1.0 -> float32``, ``1j -> complex64`` (64-bit types
    under x64), ``True -> bool``.
    """
    typ = x if isinstance(x, type) else type(x)
    try:
        return _st.py_scalar_canonical[typ]
    except KeyError:
        raise TypeError(f"{x!r} is not a Python scalar or Python scalar type") from None


def is_weakly_typed(x: Any) -> bool:
    """True for Python int/float/complex scalars and for values with ``weak_type=True``."""
    t = type(x)
    if t is int or t is float or t is complex:
        return True
    if t is bool or t is np.ndarray:
        return False
    weak = getattr(x, "weak_type", None)
    if weak is None:
        weak = getattr(getattr(x, "aval", None), "weak_type", False)
    return bool(weak)


def _invalid_dtype_error(x: Any, dt: Any) -> TypeError:
    return TypeError(
        f"Value '{x}' with dtype {dt} is not a valid JAX array type. "
        "Only arrays of numeric types are supported by JAX."
    )


def dtype(x: Any, *, canonicalize: bool = False) -> Any:
    """The dtype of a value or dtype-like.

    Python scalars and Python scalar types give the default dtype of their
    kind (always canonical: ``dtype(1.0)`` is float32 unless x64 is on). Other
    inputs (NumPy arrays and scalars, NumPy scalar types, strings, dtypes, kiln
    arrays, tracers, avals: anything with a ``.dtype``) give their dtype,
    canonicalized only when ``canonicalize=True``.
    """
    typ = type(x)
    dt = _st.py_scalar_canonical.get(typ)
    if dt is not None:
        return dt
    # Fast path: arrays, tracers and avals with a valid NumPy dtype.
    attr = getattr(x, "dtype", None)
    if type(attr) in _dtype_classes:
        out = _st.canonical.get(attr)
        if out is not None:
            return out if canonicalize else attr
    if x is None:
        raise ValueError(f"Invalid argument to dtype: {x}.")
    if isinstance(x, np.dtype):
        dt = x
    elif isinstance(x, type):
        if x is bool or x is int or x is float or x is complex:
            return _st.py_scalar_canonical[x]
        if issubclass(x, np.generic):
            dt = np.dtype(x)
        else:
            dt = getattr(x, "dtype", None)  # kiln scalar types
            if not isinstance(dt, (np.dtype, ExtendedDType)):
                raise TypeError(f"Cannot determine dtype of {x}")
    elif isinstance(x, ExtendedDType):
        return x
    else:
        dt = getattr(x, "dtype", None)
        if not isinstance(dt, (np.dtype, ExtendedDType)):
            try:
                dt = np.dtype(x) if isinstance(x, str) else np.result_type(x)
            except Exception as err:
                raise TypeError(f"Cannot determine dtype of {x}") from err
    if isinstance(dt, ExtendedDType):
        return dt
    if dt not in _valid_dtypes:
        raise _invalid_dtype_error(x, dt)
    if canonicalize and not config.jax_enable_x64:
        return _to_32bit.get(dt, dt)
    return dt


def check_valid_dtype(dt: Any) -> None:
    if dt not in _valid_dtypes and not isinstance(dt, ExtendedDType):
        raise TypeError(
            f"Dtype {dt} is not a valid JAX array type. Only arrays of numeric types "
            "are supported by JAX."
        )


def canonicalize_explicit_dtype(dt: np.dtype, fun_name: str = "", stacklevel: int = 3) -> Any:
    """A dtype the user asked for explicitly, under ``jax_explicit_x64_dtypes`` (JAX's
    ``_maybe_canonicalize_explicit_dtype``): with x64 on, or in ``'allow'`` mode, ``dt``
    itself; otherwise a 64-bit ``dt`` is truncated to 32 bits with a warning (``'warn'``,
    the default) or refused with ValueError (``'error'``)."""
    if config.jax_enable_x64:
        return dt
    mode = config.jax_explicit_x64_dtypes
    if mode == "allow":
        return dt
    out = _to_32bit.get(dt, dt)
    if out == dt:
        return dt
    where = f" requested in {fun_name}" if fun_name else ""
    if mode == "error":
        raise ValueError(
            f"Explicitly requested dtype {dt}{where} is not available. To enable more "
            "dtypes, set the jax_enable_x64 or allow_explicit_x64_dtypes configuration "
            "options.See https://github.com/jax-ml/jax#current-gotchas for more.")
    warnings.warn(
        f"Explicitly requested dtype {dt}{where} is not available, and will be truncated "
        f"to dtype {out.name}. To enable more dtypes, set the jax_enable_x64 configuration "
        "option or the JAX_ENABLE_X64 shell environment variable. See "
        "https://github.com/jax-ml/jax#current-gotchas for more.", stacklevel=stacklevel)
    return out


def check_and_canonicalize_user_dtype(dt: Any, fun_name: str | None = None) -> Any:
    """Validate a user's ``dtype=`` argument and return its canonical form."""
    if dt is None:
        raise ValueError("dtype must be specified.")
    if isinstance(dt, ExtendedDType):
        return dt
    if hasattr(dt, "shape") and not isinstance(dt, (type, np.dtype)):
        raise ValueError(
            "Passing an array as a dtype argument is no longer supported; "
            "instead of dtype=arr use dtype=arr.dtype."
        )
    np_dt = _np_dtype(dt)
    if np_dt not in _valid_dtypes:
        where = f" in {fun_name}" if fun_name else ""
        raise TypeError(f"JAX only supports number, bool, and string dtypes, got dtype {dt}{where}")
    if isinstance(dt, type) and dt in _st.py_scalar_canonical:
        return _st.py_scalar_canonical[dt]
    return canonicalize_explicit_dtype(np_dt, fun_name or "", stacklevel=4)


def _canonicalize_ndarray(x):
    return coerce_to_array(np.asarray(x))


#: ``jax.interpreters.xla.canonicalize_dtype_handlers``: for a Python type, how a value of it
#: becomes an array of a canonical dtype. Libraries register their own array-like types here
#: (TensorFlow Probability registers its variables with the ``np.ndarray`` handler); kiln
#: converts values of a registered type with their handler.
canonicalize_value_handlers: dict = {np.ndarray: _canonicalize_ndarray}


def coerce_to_array(x: Any, dtype: Any = None) -> np.ndarray:
    """``np.asarray(x, dtype)`` under JAX's rules, canonicalized.

    Python scalars get their default dtype (not NumPy's int64/float64); the
    result's dtype is canonical; an explicit ``dtype`` is canonicalized first.
    A NumPy array that is already canonical is returned as is (no copy).
    """
    if dtype is None:
        if type(x) is np.ndarray:
            dt = x.dtype
            if config.jax_enable_x64 or dt not in _to_32bit:
                return x
            return x.astype(_to_32bit[dt])
        typ = type(x)
        if typ in _python_scalar_types:
            return np.asarray(x, scalar_type_to_dtype(typ, x))
        handler = canonicalize_value_handlers.get(typ)
        if handler is not None:     # a type a library registered (JAX's protocol)
            x = handler(x)
            if type(x) is not np.ndarray:
                x = getattr(x, "_value", x)
        arr = np.asarray(x)
        dt = arr.dtype
        if config.jax_enable_x64 or dt not in _to_32bit:
            return arr
        return arr.astype(_to_32bit[dt])
    if config.jax_explicit_x64_dtypes == "allow" and not config.jax_enable_x64 and \
            not (isinstance(dtype, type) and dtype in _st.py_scalar_canonical):
        dt = _np_dtype(dtype)       # an explicit 64-bit dtype is respected
    else:
        dt = canonicalize_dtype(dtype)
    if type(x) is np.ndarray and x.dtype == dt:
        return x
    return np.asarray(x, dt)


def scalar_type_of(x: Any) -> type:
    """The Python scalar type (bool, int, float, complex) matching ``x``'s dtype."""
    dt = dtype(x)
    kind = _kind(dt)
    if kind == "b":
        return bool
    if kind in "iu":
        return int
    if kind == "f":
        return float
    if kind == "c":
        return complex
    raise TypeError(f"Invalid scalar value {x}")


# ---------------------------------------------------------------------------
# the promotion lattice
# ---------------------------------------------------------------------------

# Lattice nodes are strings, so that a weak node can never compare equal to a
# dtype (np.dtype('int64') == int is True in NumPy). Strong nodes are dtype names.
_WEAK_INT, _WEAK_FLOAT, _WEAK_COMPLEX = "i*", "f*", "c*"
_weak_node_types = {_WEAK_INT: int, _WEAK_FLOAT: float, _WEAK_COMPLEX: complex}
_lattice_dtypes = [_bool_dtype, *_numeric_dtypes]
_node_to_dtype = {d.name: d for d in _lattice_dtypes}


def _lattice_edges(strict: bool, x64: bool) -> dict[str, list[str]]:
    """Each node's immediate successors (the types just above it)."""
    strong = [d.name for d in _lattice_dtypes]
    if strict:
        edges: dict[str, list[str]] = {n: [] for n in strong}
        edges[_WEAK_INT] = [_WEAK_FLOAT, *(d.name for d in _unsigned_dtypes + _signed_dtypes)]
        edges[_WEAK_FLOAT] = [_WEAK_COMPLEX, *(d.name for d in _float_dtypes)]
        edges[_WEAK_COMPLEX] = [d.name for d in _complex_dtypes]
        return edges
    edges = {
        "bool": [_WEAK_INT],
        _WEAK_INT: ["uint8", "int8", *(d.name for d in _intn_dtypes)],
        "uint8": ["uint16", "int16"],
        "uint16": ["uint32", "int32"],
        # Without x64, u32 joins i32 at i32, so 32-bit inputs never give 64 bits.
        "uint32": ["uint64", "int64" if x64 else "int32"],
        "uint64": [_WEAK_FLOAT],
        "int8": ["int16"],
        "int16": ["int32"],
        "int32": ["int64"],
        "int64": [_WEAK_FLOAT],
        _WEAK_FLOAT: [*(d.name for d in _narrow_float_dtypes), "bfloat16", "float16", _WEAK_COMPLEX],
        "bfloat16": ["float32"],
        "float16": ["float32"],
        "float32": ["float64", "complex64"],
        "float64": ["complex128"],
        _WEAK_COMPLEX: ["complex64"],
        "complex64": ["complex128"],
        "complex128": [],
    }
    for d in [*_intn_dtypes, *_narrow_float_dtypes]:
        edges[d.name] = []
    return edges


def _upper_bounds(edges: dict[str, list[str]]) -> dict[str, frozenset[str]]:
    """For each node, the set of nodes at or above it (reflexive-transitive closure)."""
    out: dict[str, frozenset[str]] = {}

    def visit(n: str, path: tuple[str, ...]) -> frozenset[str]:
        if n in out:
            return out[n]
        if n in path:
            raise AssertionError(f"cycle in the type promotion lattice at {n}")
        ub = {n}
        for m in edges[n]:
            ub |= visit(m, (*path, n))
        out[n] = frozenset(ub)
        return out[n]

    for n in edges:
        visit(n, ())
    return out


_UPPER_BOUNDS = {
    ("standard", True): _upper_bounds(_lattice_edges(strict=False, x64=True)),
    ("standard", False): _upper_bounds(_lattice_edges(strict=False, x64=False)),
    ("strict", True): _upper_bounds(_lattice_edges(strict=True, x64=True)),
    ("strict", False): _upper_bounds(_lattice_edges(strict=True, x64=True)),
}


def _node_str(n: str) -> str:
    weak = _weak_node_types.get(n)
    return str(weak) if weak is not None else n


def _join(mode: str, x64: bool, nodes: frozenset[str]) -> str:
    """The least upper bound of ``nodes`` on the lattice, or TypePromotionError."""
    ubs = _UPPER_BOUNDS[mode, x64]
    common = frozenset.intersection(*(ubs[n] for n in nodes))
    # If an input is above all the others, it is the join; else the join is the
    # common upper bound that every other common upper bound is above.
    least = (common & nodes) or {c for c in common if common <= ubs[c]}
    if len(least) == 1:
        return next(iter(least))
    names = tuple(sorted(_node_str(n) for n in nodes))
    if least:
        raise TypePromotionError(
            f"Internal type promotion error: {names} have no unique least upper bound; "
            f"options are {sorted(least)}."
        )
    if mode == "strict":
        msg = (
            f"Input dtypes {names} have no available implicit dtype promotion path when "
            "jax_numpy_dtype_promotion=strict. Try explicitly casting inputs to the desired "
            "output type, or set jax_numpy_dtype_promotion=standard."
        )
    elif any(_node_to_dtype.get(n) in _float8_dtypes for n in nodes):
        msg = _narrow_msg(names, "8-bit floats", "float32")
    elif any(_node_to_dtype.get(n) in _float6_dtypes for n in nodes):
        msg = _narrow_msg(names, "6-bit floats", "float32")
    elif any(_node_to_dtype.get(n) in _float4_dtypes for n in nodes):
        msg = _narrow_msg(names, "4-bit floats", "float32")
    elif any(_node_to_dtype.get(n) in _intn_dtypes for n in nodes):
        msg = _narrow_msg(names, "1-bit, 2-bit and 4-bit integers", "int32")
    else:
        msg = (
            f"Input dtypes {names} have no available implicit dtype promotion path. "
            "Try explicitly casting inputs to the desired output type."
        )
    raise TypePromotionError(msg)


def _narrow_msg(names: tuple[str, ...], what: str, example: str) -> str:
    return (
        f"Input dtypes {names} have no available implicit dtype promotion path. To avoid "
        f"unintended promotion, {what} do not support implicit promotion. If you'd like "
        f"your inputs to be promoted to another type, you can do so explicitly using e.g. "
        f"x.astype('{example}')"
    )


def _node(dt: np.dtype, weak: bool) -> str:
    """The lattice node of a (dtype, weak_type) pair."""
    if weak and dt != _bool_dtype:
        kind = _kind(dt)
        if kind in "iu":
            return _WEAK_INT
        if kind == "f":
            return _WEAK_FLOAT
        if kind == "c":
            return _WEAK_COMPLEX
    if dt in _valid_dtypes and dt.name in _node_to_dtype:
        return dt.name
    raise ValueError(f"dtype={dt!r} is not a valid dtype for JAX type promotion.")


def _node_dtype(n: str, keep64: bool = False) -> np.dtype:
    weak = _weak_node_types.get(n)
    if weak is not None:
        return _st.py_scalar_canonical[weak]
    if keep64:      # jax_explicit_x64_dtypes='allow': a 64-bit join is respected
        return np.dtype(_node_to_dtype[n])
    return canonicalize_dtype(_node_to_dtype[n])


def _dtype_and_weak(x: Any) -> tuple[Any, bool]:
    """(canonical dtype, weak_type) of one argument of ``result_type``."""
    typ = type(x)
    dt = _st.py_scalar_canonical.get(typ)
    if dt is not None:  # a Python scalar value
        return dt, typ is not bool
    attr = getattr(x, "dtype", None)
    if type(attr) in _dtype_classes:  # fast path: arrays, tracers, avals
        dt = _st.promo_canonical.get(attr)
        if dt is not None:
            return dt, is_weakly_typed(x)
    if x is int or x is float or x is complex:  # Python scalar types are weak too
        return _st.py_scalar_canonical[x], True
    if x is bool:
        return _bool_dtype, False
    return dtype(x, canonicalize=True), is_weakly_typed(x)


@functools.lru_cache(maxsize=4096)
def _lattice_cached(
    dts: tuple[Any, ...], weaks: tuple[bool, ...], x64: Any, mode: str
) -> tuple[Any, bool]:
    # ``x64``: the x64 flag, or ``"allow"`` (x64 off, jax_explicit_x64_dtypes='allow':
    # 64-bit operands keep their width)
    keep64 = x64 == "allow"
    x64 = x64 is True
    if len(dts) == 1:
        out, weak = dts[0], weaks[0]
    elif all(d == dts[0] for d in dts) and not all(weaks):
        # One dtype, some strong: nothing to promote (lets extended dtypes through).
        out, weak = dts[0], False
    elif all(weaks) and mode != "strict":
        # All weak: join the strong counterparts, then mark weak. (Joining the weak
        # nodes would lose the distinction between e.g. weak int16 and weak int32.)
        out = _node_dtype(_join(mode, x64, frozenset(_node(d, False) for d in dts)), keep64)
        weak = True
    else:
        n = _join(mode, x64, frozenset(_node(d, w) for d, w in zip(dts, weaks)))
        out, weak = _node_dtype(n, keep64), n in _weak_node_types
    return out, bool(weak) and out != _bool_dtype


def _lattice_result_type(*args: Any) -> tuple[Any, bool]:
    """(dtype, weak_type) of the join of ``args`` on the lattice (before defaulting)."""
    pairs = [_dtype_and_weak(a) for a in args]
    dts = tuple(p[0] for p in pairs)
    weaks = tuple(p[1] for p in pairs)
    return _lattice_cached(dts, weaks, _st.promo_state, config.jax_numpy_dtype_promotion)


def result_type(*args: Any, return_weak_type_flag: bool = False) -> Any:
    """The dtype JAX gives the result of an operation on ``args``.

    Arguments may be values (Python scalars are weak; anything with
    ``weak_type=True`` is weak), dtype-likes (strong; the Python types
    ``int``/``float``/``complex`` are weak), or ``None`` (the default float).
    A weak result takes the default dtype of its kind. With
    ``return_weak_type_flag=True`` returns ``(dtype, weak_type)``.
    """
    if not args:
        raise ValueError("at least one array or dtype is required")
    # Called on every eager op: one memo lookup keyed by the inputs' (dtype, weak)
    # pairs and the two flags the answer depends on.
    key = [_st.promo_state, config.jax_numpy_dtype_promotion]
    append = key.append
    for a in args:
        # Inlined fast paths of _dtype_and_weak: Python scalars, then arrays.
        typ = type(a)
        dt = _st.py_scalar_canonical.get(typ)
        if dt is not None:
            append(dt)
            append(typ is not bool)
            continue
        attr = getattr(a, "dtype", None)
        if type(attr) in _dtype_classes:
            dt = _st.promo_canonical.get(attr)
            if dt is not None:
                append(dt)
                append(is_weakly_typed(a))
                continue
        key.extend(_dtype_and_weak(_st.defaults["f"] if a is None else a))
    key = tuple(key)
    res = _result_memo.get(key)
    if res is None:
        dts, weaks = key[2::2], key[3::2]
        dt, weak = _lattice_cached(dts, weaks, key[0], key[1])
        if weak:
            dt = _st.defaults.get(_kind(dt), dt)
        res = (dt, weak)
        if len(_result_memo) > 8192:
            _result_memo.clear()
        _result_memo[key] = res
    return res if return_weak_type_flag else res[0]


def promote_types(a: Any, b: Any) -> np.dtype:
    """The join of two dtypes on JAX's lattice (``jnp.promote_types``).

    The Python types ``int``, ``float`` and ``complex`` are weak. As in JAX the
    result is not canonicalized: ``promote_types(int, int)`` is int64 and
    ``promote_types('float64', 'int8')`` is float64 even with x64 off.
    """
    mode, x64 = config.jax_numpy_dtype_promotion, config.jax_enable_x64
    nodes = []
    for t in (a, b):
        if t is int or t is float or t is complex:
            nodes.append({int: _WEAK_INT, float: _WEAK_FLOAT, complex: _WEAK_COMPLEX}[t])
        else:
            nodes.append(_node(_np_dtype(t), False))
    n = _join(mode, x64, frozenset(nodes))
    weak = _weak_node_types.get(n)
    return np.dtype(weak) if weak is not None else _node_to_dtype[n]


def safe_to_cast(from_: Any, to: Any) -> bool:
    """True when promoting ``from_`` with the (strong) dtype of ``to`` gives that dtype."""
    out = dtype(to, canonicalize=True)
    if dtype(from_, canonicalize=True) == out:
        return True
    return result_type(from_, out) == out


# ---------------------------------------------------------------------------
# predicates and type information
# ---------------------------------------------------------------------------


def _scalar_type(x: Any) -> Any:
    """The scalar type (a np.generic subclass) or extended dtype that ``x`` names."""
    if isinstance(x, type) and issubclass(x, np.generic):
        return x
    if isinstance(x, ExtendedDType):
        return x
    dt = _np_dtype(x)
    return dt if isinstance(dt, ExtendedDType) else dt.type


@functools.lru_cache(maxsize=1024)
def _issubdtype_cached(a: Any, b: Any) -> bool:
    if isinstance(b, type) and issubclass(b, extended):
        a_type = a.type if isinstance(a, ExtendedDType) else a
        return issubclass(a_type, b)
    if isinstance(b, ExtendedDType):
        return isinstance(a, ExtendedDType) and a == b
    if isinstance(a, ExtendedDType):
        a = a.type
    # ml_dtypes' scalar types derive from np.generic directly; place them in
    # NumPy's abstract hierarchy by hand.
    if a in _custom_float_scalar_types:
        return b in (a, np.floating, np.inexact, np.number, np.generic)
    if a in _intn_signed_scalar_types:
        return b in (a, np.signedinteger, np.integer, np.number, np.generic)
    if a in _intn_unsigned_scalar_types:
        return b in (a, np.unsignedinteger, np.integer, np.number, np.generic)
    return bool(np.issubdtype(a, b))


def issubdtype(a: Any, b: Any) -> bool:
    """``np.issubdtype`` that knows bfloat16/float8 are floating and int4 is an integer.

    Accepts dtypes, scalar types (NumPy's and kiln's), strings and extended dtypes.
    """
    return _issubdtype_cached(_scalar_type(a), _scalar_type(b))


_dtype_kinds: dict[str, frozenset[np.dtype]] = {
    "bool": frozenset([_bool_dtype]),
    "signed integer": frozenset(_signed_dtypes),
    "unsigned integer": frozenset(_unsigned_dtypes),
    "integral": frozenset(_signed_dtypes + _unsigned_dtypes),
    "real floating": frozenset(_float_dtypes),
    "complex floating": frozenset(_complex_dtypes),
    "numeric": frozenset(_numeric_dtypes),
}


def isdtype(dtype: Any, kind: Any) -> bool:
    """Array-API ``isdtype``: is ``dtype`` of ``kind`` (a kind name, a dtype, or a tuple)?"""
    dt = _np_dtype(dtype)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if isinstance(k, str) and k in _dtype_kinds:
            if dt in _dtype_kinds[k]:
                return True
            continue
        try:
            kdt = _np_dtype(k)
        except TypeError as e:
            if isinstance(k, str):
                raise ValueError(
                    f"Unrecognized kind={k!r}; expected one of {list(_dtype_kinds)}, "
                    "or a compatible input for jnp.dtype()"
                ) from None
            raise TypeError(f"Expected kind to be a dtype, string, or tuple; got kind={k!r}") from e
        if dt == kdt:
            return True
    return False


def is_float0(x: Any) -> bool:
    """True when ``x`` is the float0 dtype or a value of that dtype."""
    try:
        dt = _np_dtype(x)
    except TypeError:
        return False
    return isinstance(dt, np.dtype) and dt == float0


def supports_inf(dt: Any) -> bool:
    """Whether the dtype can represent infinity."""
    d = _np_dtype(dt)
    if d.type in (float8_e4m3b11fnuz, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2fnuz):
        return False
    if float8_e8m0fnu is not None and d.type is float8_e8m0fnu:
        return False
    if d in _float6_dtypes or d in _float4_dtypes:
        return False
    return issubdtype(d, np.inexact)


def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    """``np.can_cast`` on dtypes, accepting kiln scalar types and arrays (by dtype)."""
    return bool(np.can_cast(_np_dtype(from_), _np_dtype(to), casting=casting))


def finfo(dt: Any) -> Any:
    """Machine limits of a floating (or complex) dtype, including bfloat16 and float8."""
    return ml_dtypes.finfo(_np_dtype(dt))


def iinfo(dt: Any) -> Any:
    """Machine limits of an integer dtype, including int4 and uint4."""
    return ml_dtypes.iinfo(_np_dtype(dt))


def itemsize_bits(dt: Any) -> int:
    """Bits per element (sub-byte types report their logical width; bool is 8)."""
    if dt is None:
        raise ValueError("dtype cannot be None.")
    d = _np_dtype(dt)
    if d == _bool_dtype:
        return 8
    kind = _kind(d)
    if kind in "iu":
        return iinfo(d).bits
    if kind == "f":
        return finfo(d).bits
    if kind == "c":
        return 2 * finfo(d).bits
    raise ValueError(f"unexpected input: dtype={d}")


def to_numeric_dtype(dt: Any) -> np.dtype:
    """bool -> int32; any other dtype unchanged."""
    d = _np_dtype(dt)
    return np.dtype("int32") if d == _bool_dtype else d


_to_inexact = {
    np.dtype(k): np.dtype(v)
    for k, v in [
        ("bool", "float32"), ("uint8", "float32"), ("int8", "float32"),
        ("uint16", "float32"), ("int16", "float32"), ("uint32", "float32"),
        ("int32", "float32"), ("uint64", "float64"), ("int64", "float64"),
    ]
}
_to_inexact.update({d: np.dtype("float32") for d in _intn_dtypes})


def to_inexact_dtype(dt: Any) -> np.dtype:
    """Integer and bool dtypes -> a float (float32, or float64 for 64-bit ints)."""
    d = _np_dtype(dt)
    return _to_inexact.get(d, d)


def to_floating_dtype(dt: Any) -> np.dtype:
    """Like ``to_inexact_dtype``, but complex dtypes give their real component's dtype."""
    return finfo(to_inexact_dtype(dt)).dtype


def to_complex_dtype(dt: Any) -> np.dtype:
    """The complex dtype matching ``dt``'s precision (complex128 for 64-bit, else complex64)."""
    f = to_inexact_dtype(dt)
    if f in (np.dtype("float64"), np.dtype("complex128")):
        return np.dtype("complex128")
    return np.dtype("complex64")


@functools.lru_cache(maxsize=256)
def short_dtype_name(dt: Any) -> str:
    """'f32', 'i8', 'u4', 'c64', 'bf16', 'bool', ... (used by the jaxpr printer)."""
    if isinstance(dt, ExtendedDType):
        return str(dt)
    name = np.dtype(dt).name
    if name == "bfloat16":
        return "bf16"
    return (
        name.replace("float", "f").replace("uint", "u").replace("int", "i").replace("complex", "c")
    )


class primal_tangent_dtype_scalar(extended):
    """Abstract scalar type of the dtypes :func:`primal_tangent_dtype` makes."""


class PrimalTangentDType(ExtendedDType):
    """An extended dtype stored as ``primal_dtype`` whose tangents have ``tangent_dtype``
    (:func:`primal_tangent_dtype`)."""

    type = primal_tangent_dtype_scalar
    __slots__ = ("primal_dtype", "tangent_dtype", "name")

    def __init__(self, primal_dtype, tangent_dtype, name: str):
        self.primal_dtype, self.tangent_dtype, self.name = primal_dtype, tangent_dtype, name

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __eq__(self, other):
        return (isinstance(other, PrimalTangentDType) and
                (self.primal_dtype, self.tangent_dtype, self.name) ==
                (other.primal_dtype, other.tangent_dtype, other.name))

    def __hash__(self):
        return hash((PrimalTangentDType, self.primal_dtype, self.tangent_dtype, self.name))

    @property
    def _rules(self):
        import types
        primal, tangent = self.primal_dtype, self.tangent_dtype
        return types.SimpleNamespace(
            physical_element_aval=lambda dt: types.SimpleNamespace(shape=(), dtype=primal),
            tangent_dtype=lambda dt: tangent,
            allow_conversion=True)


def primal_tangent_dtype(primal_dtype, tangent_dtype, name: str | None = None):
    """An extended dtype whose values are stored as ``primal_dtype`` and whose tangents
    (under ``jvp``/``grad``) have ``tangent_dtype`` (``jax.experimental``'s): e.g. ``int8``
    values differentiated in ``bfloat16``. It converts to and from other dtypes with
    ``lax.convert_element_type``."""
    primal_dtype, tangent_dtype = dtype(primal_dtype), dtype(tangent_dtype)
    name = name or (f"PrimalTangentDType{{{short_dtype_name(primal_dtype)}"
                    f"/{short_dtype_name(tangent_dtype)}}}")
    return PrimalTangentDType(primal_dtype, tangent_dtype, name)
