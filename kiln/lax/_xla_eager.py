"""Eager float math with JAX's bits: the impls of ``exp``, ``expm1``, ``log``, ``log1p``,
``sin``, ``cos``, ``tan``, ``tanh``, ``logistic``, ``erf``, ``cbrt``, ``rsqrt``, ``asin``,
``acos``, ``atan``, ``sinh``, ``cosh``, ``asinh``, ``acosh``, ``atanh``, ``pow`` and
``atan2`` for float32/float64, and of the special functions ``erfc``, ``erf_inv``,
``lgamma``, ``digamma``, ``bessel_i0e``/``i1e``, ``zeta``, ``polygamma``, ``igamma``/``igammac``
(and their derivatives in ``a``), ``betainc`` and float ``rem`` (XLA's expansions of the
CHLO ops or JAX's own algorithms, ``xla_math.h``/``kiln_random.c``); and the complex64/
complex128 ``div``, ``mul``, ``integer_pow``, ``abs``, ``sign``, ``exp``, ``log``, ``sqrt``,
``expm1``, ``log1p``, ``tanh``, ``tan``, ``sin``, ``cos``, ``sinh``, ``cosh``, ``logistic`` and
inverse functions (XLA's complex formulas, ``xla_complex.h``: ``complex_unary``,
``complex_binary``, ``complex_integer_pow``, kernels over the interleaved parts).

Why: NumPy's ``np.exp``/``np.sin``/... are accurate but not XLA's, so an eager kiln call
differed from JAX's (eager or jit) in the last bit of a few percent of values, and a
program's bits depended on whether a step ran eagerly, on the reference backend or
compiled. These impls run the C kernels of ``kiln.random._native`` (one cached shared
library, loaded with ``ctypes``): XLA's own formulas (``kiln/compiler/csrc/xla_math.h``:
the compiled code uses the same functions) for exp/expm1/log/log1p/tanh/logistic/float32
erf, XLA's expansions of the CHLO ops for asin/acos/atan/sinh/cosh/asinh/acosh/atanh
(built from those and the C library's atan2; atan's formula depends on the array's
length, as in XLA's loop), and the C library for sin/cos/tan/pow/float64 erf, which is
what XLA's CPU code calls. Each loop runs with denormals flushed (MXCSR DAZ+FTZ on x86, as XLA's CPU
runtime does), which decides what ``powf``/``erf``/``tanh``/... return for subnormal
operands. Checked bit for bit against JAX over every float32 exponent by ``tests/parity/test_eager_jax_bits.py``.

The impls serve the eager ``EvalTrace`` and the reference backend alike (one impl per
primitive), so a jitted program's reference tier gives the compiled tier's bits too.
With no native library (no C compiler, ``KILN_DISABLE_NATIVE=1``, a non-x86 machine
without the flush bits) ``unary``/``power`` return None and callers keep NumPy.

Cost: one ``ctypes`` call (~1-2 us) per op, below the rest of an eager op's dispatch;
inputs of 128k elements or more are split across kiln.random's worker threads.

What this module must not hold: rules of primitives (they live with the primitives).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

_WIDTH = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_UNSET = object()
_fns: dict = {}
_PARALLEL_MIN = 1 << 17


# The native kernels are kiln.random's (``kiln.random._native``: one shared library, built
# on first use, and its worker threads); that module installs itself here when imported,
# as kiln.random sits above lax.
_native = None


def set_native(module) -> None:
    """Install ``kiln.random._native`` (``lib()`` and ``_parallel(fn, n)``)."""
    global _native
    _native = module


_no_waits = threading.local()


@contextlib.contextmanager
def no_build_waits():
    """In this thread, an eager kernel whose library is not loaded yet is not waited for:
    its op uses the NumPy implementation (not JAX's last bits) while the library builds
    in the background. For the reference tier of a tiered ``jit`` (``KILN_COMPILE=async``)
    while its program builds: its first call must not wait for ``cc`` (documented:
    results of that mode depend on build timing)."""
    prev = getattr(_no_waits, "on", False)
    _no_waits.on = True
    try:
        yield
    finally:
        _no_waits.on = prev


def _library(op, width):
    """The native library holding ``op``'s kernel for ``width`` (built on first use), or
    None; ``_native.PENDING`` under :func:`no_build_waits` while it builds."""
    if _native is None:
        raise RuntimeError("lax's eager XLA math needs kiln.random._native: import kiln")
    if getattr(_no_waits, "on", False):
        return _native.eager_lib_later(op, width)
    return _native.eager_lib(op, width)


def _fn(op, width):
    """``op``'s kernel for ``width``, None when unavailable, ``_native.PENDING`` (not
    remembered) while its library builds (:func:`no_build_waits`)."""
    key = (op, width)
    fn = _fns.get(key, _UNSET)
    if fn is _UNSET:
        lib = _library(op, width)
        if lib is _native.PENDING:
            return lib
        fn = _fns[key] = None if lib is None else getattr(lib, f"kiln_eager_{op}_{width}")
    return fn


def _by_address_ok(lib) -> bool:
    """Whether the ``*_obj`` entry points read an ndarray's data pointer correctly here
    (CPython's ``id`` is the object's address; NumPy's data pointer follows the header)."""
    import sys
    if sys.implementation.name != "cpython":
        return False
    for off in (16, 24, 32):
        lib.kiln_set_data_offset(off)
        probes = [np.empty(3, np.float32), np.zeros((2, 2)), np.empty((), np.float64)]
        if all(lib.kiln_array_data(id(a)) == a.ctypes.data for a in probes):
            return True
    return False


def _obj_fn(op, width):
    """The by-address entry point of ``op`` (None when unusable here)."""
    key = (op, width, "obj")
    fn = _fns.get(key, _UNSET)
    if fn is _UNSET:
        lib = _library(op, width)
        ok = _fns.get(("obj-ok", id(lib)), _UNSET)     # per library: its own offset
        if ok is _UNSET and lib is not None:
            ok = _fns[("obj-ok", id(lib))] = _by_address_ok(lib)
        fn = _fns[key] = getattr(lib, f"kiln_eager_{op}_{width}_obj") if lib and ok else None
    return fn


def _entry(op, dt):
    """``(fn, by_address_fn or None)`` for ``op`` on dtype ``dt``, or None."""
    key = (op, dt)
    e = _entries.get(key, _UNSET)
    if e is _UNSET:
        width = _WIDTH.get(dt)
        fn = None if width is None else _fn(op, width)
        if fn is _native.PENDING:
            return None             # NumPy this time; not remembered
        e = _entries[key] = None if fn is None else (fn, _obj_fn(op, width))
    return e


_entries: dict = {}


def unary(op: str, x):
    """JAX's ``op(x)`` for a float32/float64 array ``x``; None for another dtype or when
    the native library is unavailable."""
    e = _entries.get((op, x.dtype), _UNSET)
    if e is _UNSET:
        e = _entry(op, x.dtype)
    if e is None:
        return None
    if type(x) is not np.ndarray or not x.flags.c_contiguous:
        x = np.array(x, order="C")
    y = np.empty_like(x)
    n = x.size
    # atan's kernel picks the C library's or XLA's formula by place in the whole array
    # (kiln_eager_atan_*), so it is not split across threads.
    if n < _PARALLEL_MIN or op == "atan":
        if e[1] is not None:
            e[1](id(x), id(y), n)     # x and y stay referenced during the call
        else:
            e[0](x.ctypes.data, y.ctypes.data, n)
        return y
    fn = e[0]
    xa, ya, isz = x.ctypes.data, y.ctypes.data, x.itemsize
    _native._parallel(lambda s, e: fn(xa + s * isz, ya + s * isz, e - s), n)
    return y


def integer_pow(x, k: int):
    """JAX's ``integer_pow(x, k)`` (``k != 0``) for a float32/float64 array ``x``: XLA's
    binary exponentiation with flushed subnormals; None where not applicable."""
    e = _entries.get(("ipow", x.dtype), _UNSET)
    if e is _UNSET:
        e = _entry("ipow", x.dtype)
    if e is None:
        return None
    k = int(k)          # a NumPy integer from a jaxpr's params: ctypes wants an int
    if type(x) is not np.ndarray or not x.flags.c_contiguous:
        x = np.array(x, order="C")
    y = np.empty_like(x)
    n = x.size
    if n < _PARALLEL_MIN:
        if e[1] is not None:
            e[1](id(x), id(y), n, k)
        else:
            e[0](x.ctypes.data, y.ctypes.data, n, k)
        return y
    fn = e[0]
    xa, ya, isz = x.ctypes.data, y.ctypes.data, x.itemsize
    _native._parallel(lambda s, e: fn(xa + s * isz, ya + s * isz, e - s, k), n)
    return y


def power(x, y):
    """JAX's ``pow(x, y)`` for float32/float64 ``x`` (``y`` converted to its dtype), the
    operands of one shape or one of them a single element; None where not applicable."""
    return binary("pow", x, y)


def binary(op: str, x, y):
    """JAX's ``op(x, y)`` (``pow``, ``atan2``) for float32/float64 ``x`` (``y`` converted to
    its dtype), the operands of one shape or one of them a single element; None where not
    applicable (another dtype, other shapes, no native library)."""
    if type(x) is not np.ndarray:
        x = np.asarray(x)
    e = _entries.get((op, x.dtype), _UNSET)
    if e is _UNSET:
        e = _entry(op, x.dtype)
    if e is None:
        return None
    y = np.asarray(y, x.dtype)
    # The result's shape is the broadcast one: a single-element x of shape (1,) with a
    # scalar y stays (1,) (it was y's (): ``jnp.ones(1) ** 0.5`` lost its axis).
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        return None
    ops = []
    for v in (x, y):
        if v.shape == shape:
            ops.append((v if v.flags.c_contiguous else v.copy(), 1))
        elif v.size == 1:
            ops.append((v.reshape(1), 0))
        else:
            return None
    out = np.empty(shape, x.dtype)
    n = out.size
    (a, sa), (b, sb) = ops
    if n < _PARALLEL_MIN and e[1] is not None:
        e[1](id(a), sa, id(b), sb, id(out), n)     # a, b, out stay referenced
        return out
    fn = e[0]
    isz = out.itemsize
    pa, pb, po = a.ctypes.data, b.ctypes.data, out.ctypes.data
    if n < _PARALLEL_MIN:
        fn(pa, sa, pb, sb, po, n)
        return out
    _native._parallel(lambda s, e: fn(pa + s * isz * sa, sa, pb + s * isz * sb, sb,
                                      po + s * isz, e - s), n)
    return out


_CWIDTH = {np.dtype(np.complex64): "f32", np.dtype(np.complex128): "f64"}
# complex64/complex128 parts of a kernel over interleaved (re, im) values.
_CPART = {np.dtype(np.complex64): np.dtype(np.float32),
          np.dtype(np.complex128): np.dtype(np.float64)}
# A complex element costs a few real ones (two or three C library calls for most ops): the
# kernels go to the worker threads from fewer elements.
_CPARALLEL_MIN = 1 << 15


def _centry(op, dt):
    """``(fn, by_address_fn or None)`` of complex ``op`` (``kiln_eager_c<op>``) on complex
    dtype ``dt``, or None."""
    key = ("c" + op, dt)
    e = _entries.get(key, _UNSET)
    if e is _UNSET:
        width = _CWIDTH.get(dt)
        fn = None if width is None else _fn("c" + op, width)
        if fn is _native.PENDING:
            return None             # NumPy this time; not remembered
        e = _entries[key] = None if fn is None else (fn, _obj_fn("c" + op, width))
    return e


def complex_unary(op: str, z):
    """JAX's ``op(z)`` (XLA's complex formula, ``xla_complex.h``) for a complex64/complex128
    array ``z``; ``op`` one of ``exp``, ``log``, ``sqrt``, ``expm1``, ``log1p``, ``tanh``,
    ``tan``, ``sin``, ``cos``, ``sinh``, ``cosh``, ``logistic``, ``sign``, ``asin``, ``acos``,
    ``atan``, ``asinh``, ``acosh``, ``atanh`` and ``abs`` (a real result). None for another
    dtype or when the native library is unavailable."""
    e = _entries.get(("c" + op, z.dtype), _UNSET)
    if e is _UNSET:
        e = _centry(op, z.dtype)
    if e is None:
        return None
    if type(z) is not np.ndarray or not z.flags.c_contiguous:
        z = np.array(z, order="C")
    w = np.empty(z.shape, _CPART[z.dtype]) if op == "abs" else np.empty_like(z)
    n = z.size
    if n < _CPARALLEL_MIN:
        if e[1] is not None:
            e[1](id(z), id(w), n)     # z and w stay referenced during the call
        else:
            e[0](z.ctypes.data, w.ctypes.data, n)
        return w
    fn = e[0]
    za, wa, zs, ws = z.ctypes.data, w.ctypes.data, z.itemsize, w.itemsize
    _native._parallel(lambda s, e: fn(za + s * zs, wa + s * ws, e - s), n)
    return w


def complex_binary(op: str, a, b):
    """JAX's ``a * b`` (``op`` ``mul``) or ``a / b`` (``div``) for complex64/complex128
    operands of one dtype, of one shape or one of them a single element (other broadcasts
    are materialized); None for another dtype or without the native library."""
    e = _entries.get(("c" + op, a.dtype), _UNSET)
    if e is _UNSET:
        e = _centry(op, a.dtype)
    if e is None or b.dtype != a.dtype:
        return None
    if (a.shape == b.shape and type(a) is np.ndarray and type(b) is np.ndarray
            and a.flags.c_contiguous and b.flags.c_contiguous and e[1] is not None
            and a.size < _CPARALLEL_MIN):       # the common small case, in one call
        out = np.empty(a.shape, a.dtype)
        e[1](id(a), 1, id(b), 1, id(out), out.size)
        return out
    shape = a.shape if a.shape == b.shape else np.broadcast_shapes(a.shape, b.shape)
    if op == "mul" and b.size == 1 and a.size != 1:
        # XLA contracts the other product of the imaginary part when b is the broadcast
        # value: the same as the operands swapped.
        a, b = b, a
    ops = []
    for v in (a, b):
        if v.shape == shape:
            ops.append((v if type(v) is np.ndarray and v.flags.c_contiguous else
                        np.array(v, order="C"), 1))
        elif v.size == 1:
            ops.append((np.array(v, order="C").reshape(1), 0))
        else:
            ops.append((np.ascontiguousarray(np.broadcast_to(v, shape)), 1))
    out = np.empty(shape, a.dtype)
    n = out.size
    (x, sx), (y, sy) = ops
    if n < _CPARALLEL_MIN and e[1] is not None:
        e[1](id(x), sx, id(y), sy, id(out), n)     # x, y, out stay referenced
        return out
    fn = e[0]
    isz = out.itemsize
    px, py, po = x.ctypes.data, y.ctypes.data, out.ctypes.data
    if n < _CPARALLEL_MIN:
        fn(px, sx, py, sy, po, n)
        return out
    _native._parallel(lambda s, e: fn(px + s * isz * sx, sx, py + s * isz * sy, sy,
                                      po + s * isz, e - s), n)
    return out


def complex_integer_pow(z, k: int):
    """JAX's ``integer_pow(z, k)`` (``k != 0``) for a complex64/complex128 array: its chain
    of XLA complex products and, for ``k < 0``, one division; None where not applicable."""
    e = _entries.get(("cipow", z.dtype), _UNSET)
    if e is _UNSET:
        e = _centry("ipow", z.dtype)
    if e is None:
        return None
    k = int(k)
    if type(z) is not np.ndarray or not z.flags.c_contiguous:
        z = np.array(z, order="C")
    w = np.empty_like(z)
    n = z.size
    if n < _CPARALLEL_MIN:
        if e[1] is not None:
            e[1](id(z), id(w), n, k)
        else:
            e[0](z.ctypes.data, w.ctypes.data, n, k)
        return w
    fn = e[0]
    za, wa, isz = z.ctypes.data, w.ctypes.data, z.itemsize
    _native._parallel(lambda s, e: fn(za + s * isz, wa + s * isz, e - s, k), n)
    return w


def betainc(a, b, x):
    """JAX's ``regularized_incomplete_beta(a, b, x)`` for float32/float64 operands of one
    dtype (broadcast to one shape): the lockstep continued fraction of kiln_random.c,
    whose bits depend on the whole array as JAX's do (so it is never split across
    threads); None where not applicable."""
    x = np.asarray(x)
    width = _WIDTH.get(x.dtype)
    if width is None:
        return None
    lib = _library("betainc", width)
    if lib is None or lib is _native.PENDING:
        return None
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), x.shape)
    a, b, x = (np.ascontiguousarray(v, x.dtype) for v in np.broadcast_arrays(a, b, x))
    y = np.empty(shape, x.dtype)
    getattr(lib, f"kiln_eager_betainc_{width}")(a.ctypes.data, b.ctypes.data, x.ctypes.data,
                                                 y.ctypes.data, y.size)
    return y
