"""Eager float math with JAX's bits: the impls of ``exp``, ``expm1``, ``log``, ``log1p``,
``sin``, ``cos``, ``tan``, ``tanh``, ``logistic``, ``erf`` and ``pow`` for float32/float64.

Why: NumPy's ``np.exp``/``np.sin``/... are accurate but not XLA's, so an eager kiln call
differed from JAX's (eager or jit) in the last bit of a few percent of values, and a
program's bits depended on whether a step ran eagerly, on the reference backend or
compiled. These impls run the C kernels of ``kiln.random._native`` (one cached shared
library, loaded with ``ctypes``): XLA's own formulas (``XLA_MATH_C``: the compiled code
uses the same functions) for exp/expm1/log/log1p/tanh/logistic/float32 erf, and the C
library for sin/cos/tan/pow/float64 erf, which is what XLA's CPU code calls. Each loop
runs with denormals flushed (MXCSR DAZ+FTZ on x86, as XLA's CPU runtime does), which
decides what ``powf``/``erf``/``tanh``/... return for subnormal operands. Checked bit for
bit against JAX over every float32 exponent by ``tests/test_eager_jax_bits.py``.

The impls serve the eager ``EvalTrace`` and the reference backend alike (one impl per
primitive), so a jitted program's reference tier gives the compiled tier's bits too.
With no native library (no C compiler, ``KILN_DISABLE_NATIVE=1``, a non-x86 machine
without the flush bits) ``unary``/``power`` return None and callers keep NumPy.

Cost: one ``ctypes`` call (~1-2 us) per op, below the rest of an eager op's dispatch;
inputs of 128k elements or more are split across kiln.random's worker threads.

What this module must not hold: rules of primitives (they live with the primitives).
"""
from __future__ import annotations

import numpy as np

_WIDTH = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_UNSET = object()
_lib = [_UNSET]
_fns: dict = {}
_PARALLEL_MIN = 1 << 17


def _library():
    lib = _lib[0]
    if lib is _UNSET:
        # kiln.random._native imports nothing of kiln: a leaf, loaded on the first call.
        from kiln.random import _native
        lib = _lib[0] = _native.lib()
    return lib


def _fn(op, width):
    key = (op, width)
    fn = _fns.get(key, _UNSET)
    if fn is _UNSET:
        lib = _library()
        fn = _fns[key] = None if lib is None else getattr(lib, f"kiln_eager_{op}_{width}")
    return fn


def unary(op: str, x):
    """JAX's ``op(x)`` for a float32/float64 array ``x``; None for another dtype or when
    the native library is unavailable."""
    width = _WIDTH.get(x.dtype)
    if width is None:
        return None
    fn = _fn(op, width)
    if fn is None:
        return None
    if type(x) is not np.ndarray:
        x = np.asarray(x)
    if not x.flags.c_contiguous:
        x = x.copy()
    y = np.empty(x.shape, x.dtype)
    n = x.size
    if n < _PARALLEL_MIN:
        fn(x.ctypes.data, y.ctypes.data, n)
        return y
    xa, ya, isz = x.ctypes.data, y.ctypes.data, x.itemsize
    from kiln.random._native import _parallel
    _parallel(lambda s, e: fn(xa + s * isz, ya + s * isz, e - s), n)
    return y


def power(x, y):
    """JAX's ``pow(x, y)`` for float32/float64 ``x`` (``y`` converted to its dtype), the
    operands of one shape or one of them a single element; None where not applicable."""
    x = np.asarray(x)
    width = _WIDTH.get(x.dtype)
    if width is None:
        return None
    fn = _fn("pow", width)
    if fn is None:
        return None
    y = np.asarray(y, x.dtype)
    shape = x.shape if x.size != 1 else y.shape
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
    isz = out.itemsize
    (a, sa), (b, sb) = ops
    pa, pb, po = a.ctypes.data, b.ctypes.data, out.ctypes.data
    if n < _PARALLEL_MIN:
        fn(pa, sa, pb, sb, po, n)
        return out
    from kiln.random._native import _parallel
    _parallel(lambda s, e: fn(pa + s * isz * sa, sa, pb + s * isz * sb, sb, po + s * isz,
                              e - s), n)
    return out
