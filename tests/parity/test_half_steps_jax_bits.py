"""float16/bfloat16 logistic, expm1, tan and the inverse trigonometric/hyperbolic functions
give JAX's bits, eager and jit.

XLA expands logistic, asin, acos, asinh, acosh, atanh and float16 expm1 in the half type
and its CPU backend rounds every step of the expansion to half
(``kiln/lax/_half_steps.py``); bfloat16 expm1, tan and atan run XLA's float32 formula,
rounded once.
Pinned values (where the correctly rounded result is not JAX's) run without JAX; every
value of both types is compared with live JAX when it is importable.
"""
import numpy as np
import pytest

import kiln
from kiln import lax as klax

ml_dtypes = pytest.importorskip("ml_dtypes")

if kiln.random._native.lib() is None:  # pragma: no cover
    pytest.skip("no native library (C compiler): eager math falls back to NumPy",
                allow_module_level=True)

OPS = ["logistic", "expm1", "asin", "acos", "atan", "tan", "asinh", "acosh", "atanh"]
DTYPES = ["float16", "bfloat16"]


def _dtype(name):
    return np.dtype(np.float16) if name == "float16" else np.dtype(ml_dtypes.bfloat16)


def _mismatch(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    return (got.view(np.uint16) != want.view(np.uint16)) & ~nan


# (op, dtype, input bits, JAX 0.10.2's result bits): values where rounding the exact
# result once is not what XLA's step-by-step expansion gives.
PINNED = [
    ("logistic", "float16", [0x1201, 0x9ccd, 0xcc55], [0x3801, 0x37fc, 0x0]),
    ("expm1", "float16", [0x3, 0x33e5, 0xc57c], [0x4, 0x347b, 0xbbf8]),
    ("asin", "float16", [0x1, 0x3bfb, 0xbbfb], [0x0, 0x3e00, 0xbe00]),
    ("acos", "float16", [0x2a1f, 0x3a87, 0xbbf1], [0x3e17, 0x38ee, 0x420b]),
    ("asinh", "float16", [0xe55, 0x7bff, 0xfbff], [0xe56, 0x49e5, 0xc9e5]),
    ("acosh", "float16", [0x3c02, 0x4dad, 0x7bff], [0x2bff, 0x43a2, 0x49e5]),
    ("atanh", "float16", [0x16ed, 0x3bfe, 0xbbfe], [0x16ee, 0x439f, 0xc39f]),
    ("logistic", "bfloat16", [0x3bc1, 0xbcbc, 0xc2b9], [0x3f01, 0x3efc, 0x0]),
    ("asin", "bfloat16", [0x1, 0x3f7c, 0xbf7c], [0x0, 0x3fb3, 0xbfb3]),
    ("acos", "bfloat16", [0x3ce4, 0x3f43, 0xbf4c], [0x3fc6, 0x3f35, 0x401f]),
    ("asinh", "bfloat16", [0x1, 0x7f7f, 0xff7f], [0x0, 0x42b2, 0xc2b2]),
    ("acosh", "bfloat16", [0x3f81, 0x472f, 0x7f7f], [0x3dff, 0x4137, 0x42b2]),
    ("atanh", "bfloat16", [0x1, 0x3f7f, 0xbf7f], [0x0, 0x4047, 0xc047]),
    # tan: XLA's float32 kernel, rounded once (not the C library's tanf).
    ("tan", "float16", [0x2a9a, 0xaa9a], [0x2a9c, 0xaa9c]),
]


@pytest.mark.parametrize("op,dtype,xs,want", PINNED,
                         ids=[f"{p[0]}-{p[1]}" for p in PINNED])
def test_pinned_values(op, dtype, xs, want):
    dt = _dtype(dtype)
    x = np.array(xs, np.uint16).view(dt)
    want = np.array(want, np.uint16).view(dt)
    f = getattr(klax, op)
    for what, got in (("eager", f(x)), ("jit", kiln.jit(f)(x)),
                      ("scalar", np.stack([f(v) for v in x]))):
        bad = _mismatch(got, want)
        assert not bad.any(), (what, x[bad], np.asarray(got)[bad], want[bad])


def test_atan_half_takes_the_float32_kernel_by_length():
    """float16 atan rounds XLA's float32 atan, whose formula depends on the array's length
    (``xla_math.h``): 9.36 alone gives 0x3ddb, in a 3-element array 0x3ddc (JAX's bits)."""
    x = np.array([0x48ae, 0xc8ae, 0x1], np.uint16).view(np.float16)
    for got in (klax.atan(x), kiln.jit(klax.atan)(x)):
        assert np.asarray(got).view(np.uint16).tolist() == [0x3ddc, 0xbddc, 0x1]
    for v, want in zip(x, [0x3ddb, 0xbddb, 0x1]):
        assert int(np.asarray(klax.atan(v)).view(np.uint16)) == want


def test_scalars_and_strides_keep_dtype_and_shape():
    x = np.arange(0, 1 << 16, 7, dtype=np.uint16).view(np.float16)
    y = klax.logistic(x[::2].reshape(-1, 1))
    assert y.shape == (x[::2].size, 1) and y.dtype == np.float16
    bad = _mismatch(np.asarray(y).ravel(), np.asarray(klax.logistic(np.ascontiguousarray(
        x[::2]))))
    assert not bad.any()
    s = klax.asinh(np.float16(-0.0))
    assert s.shape == () and np.signbit(np.asarray(s))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_every_value_against_jax(op, dtype):
    jax = pytest.importorskip("jax")
    dt = _dtype(dtype)
    x = np.arange(1 << 16, dtype=np.uint16).view(dt)
    want = np.asarray(getattr(jax.lax, op)(x))
    want_jit = np.asarray(jax.jit(getattr(jax.lax, op))(x))
    kf = getattr(klax, op)
    for what, got, ref in (("eager", kf(x), want), ("jit", kiln.jit(kf)(x), want_jit)):
        bad = _mismatch(got, ref)
        assert not bad.any(), (op, dtype, what, int(bad.sum()), x[bad][:5],
                               np.asarray(got)[bad][:5], ref[bad][:5])


@pytest.mark.parametrize("dtype", DTYPES)
def test_nn_sigmoid_against_jax(dtype):
    jax = pytest.importorskip("jax")
    x = np.arange(1 << 16, dtype=np.uint16).view(_dtype(dtype))
    bad = _mismatch(kiln.nn.sigmoid(x), jax.nn.sigmoid(x))
    assert not bad.any(), x[bad][:5]
