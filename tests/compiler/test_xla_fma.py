"""XLA's FMA contraction (kiln/compiler/passes/xla_fma.py): which products the pass fuses
into an ``fma``, the exact NumPy ``fma`` of the reference backend (kiln/lax/_fma.py)
against the C library's, and compiled programs against the reference backend running
the passes' output, bit for bit (JAX's bits: tests/parity/test_fma_parity.py)."""
import ctypes
import ctypes.util

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln import lax as klax
from kiln.backends import cpu, reference
from kiln.compiler.passes.passes import optimize
from kiln.lax._fma import fma32, fma64

_RNG = np.random.default_rng(25)
A, B, C, D = (_RNG.standard_normal(1024).astype(np.float32) for _ in range(4))
A64, B64, C64, D64 = (_RNG.standard_normal(256) for _ in range(4))

_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_libm.fmaf.restype, _libm.fmaf.argtypes = ctypes.c_float, [ctypes.c_float] * 3
_libm.fma.restype, _libm.fma.argtypes = ctypes.c_double, [ctypes.c_double] * 3


def _c_fma(a, b, c):
    """The C library's fma, element by element (the oracle)."""
    a, b, c = np.broadcast_arrays(a, b, c)
    f = _libm.fmaf if a.dtype == np.float32 else _libm.fma
    return np.array([f(float(x), float(y), float(z)) for x, y, z in
                     zip(a.ravel(), b.ravel(), c.ravel())], a.dtype).reshape(a.shape)


def _prims(f, *args):
    return sorted(e.primitive.name for e in optimize(kiln.make_jaxpr(f)(*args)).jaxpr.eqns)


@pytest.mark.parametrize("f,want", [
    (lambda a, b, c: a * b + c, ["fma"]),
    (lambda a, b, c: c + a * b, ["fma"]),
    (lambda a, b, c: a * b - c, ["fma", "neg"]),
    (lambda a, b, c: c - a * b, ["fma", "neg"]),
    (lambda a, b, c: -(a * b) + c, ["fma", "neg"]),
    (lambda a, b, c: a * b + c * a, ["fma", "mul"]),
    (lambda a, b, c: (a * b + c) * a + b, ["fma", "fma"]),
    (lambda a, b, c: a * 0.3 + 1.0, ["fma"]),
    (lambda a, b, c: a / 3.0 + c, ["fma"]),                 # XLA's x * fl(1/3) first
    (lambda a, b, c: a ** 2 + c, ["fma"]),
    (lambda a, b, c: a ** 3 + c, ["fma", "mul"]),
    (lambda a, b, c: a ** 4 + c, ["fma", "mul"]),
    (lambda a, b, c: (a * b + c) * (a * b + a), ["add", "add", "mul", "mul"]),  # 2 uses
    (lambda a, b, c: (a * b + c, a * b), ["add", "mul"]),      # the product is an output
    (lambda a, b, c: (a[0] * b[0]) + c, ["add", "mul", "slice", "slice", "squeeze",
                                          "squeeze"]),       # a broadcast between
    (lambda a, b, c: knp.where(a > 0, a * b, 0.0) + c, ["add", "broadcast_in_dim", "gt",
                                                          "mul", "select_n"]),
    (lambda a, b, c: (a * b).sum() + c, ["add", "mul", "reduce_sum"]),
    (lambda a, b, c: a ** -2 + c, ["add", "integer_pow"]),
])
def test_pass_contracts_like_xla(f, want):
    assert _prims(f, A, B, C) == sorted(want)


def test_other_dtypes_are_left_alone():
    for dt in (np.float16, knp.bfloat16, np.int32, np.complex64):
        x = A[:8].astype(dt)
        assert _prims(lambda a: a * a + a, x) == ["add", "mul"]
    assert _prims(lambda a, b: a.astype(np.float16) * b.astype(np.float16) + 1.0,
                  A, B) == ["add", "convert_element_type", "convert_element_type", "mul"]


def test_contraction_is_optional_and_hlo_text_has_none():
    closed = kiln.make_jaxpr(lambda a, b, c: a * b + c)(A, B, C)
    assert [e.primitive.name for e in optimize(closed, contract=False).jaxpr.eqns] == \
        ["mul", "add"]
    text = kiln.jit(lambda a, b, c: a * b + c).lower(A, B, C).compiler_ir("hlo").as_hlo_text()
    assert "multiply" in text and "fma" not in text


def test_numpy_fma_is_exact():
    n = 4000
    a, b, c = (_RNG.standard_normal(n).astype(np.float32) for _ in range(3))
    e = _RNG.integers(-140, 120, (3, n // 2))
    a[: n // 2] *= np.exp2(e[0]).astype(np.float32)
    b[: n // 2] *= np.exp2(e[1]).astype(np.float32)
    c[: n // 2] *= np.exp2(e[2]).astype(np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(fma32(a, b, c), _c_fma(a, b, c))
    # A double rounding through float64 would be wrong here: the exact sum lies just
    # above the float32 halfway point 1 + 2**-23 + 2**-24.
    x, y, z = np.float32(1 + 2 ** -23), np.float32(2 ** -24 * (1 - 2 ** -23)), \
        np.float32(1 + 2 ** -23)
    assert fma32(x, y, z) == _c_fma(x, y, z) == np.float32(1 + 2 ** -23)
    assert np.float32(np.float64(x) * np.float64(y) + np.float64(z)) != fma32(x, y, z)
    a, b, c = (_RNG.standard_normal(n) for _ in range(3))
    e = _RNG.integers(-1100, 1100, (3, n // 2))
    with np.errstate(all="ignore"):
        a[: n // 2] *= np.exp2(e[0] / 2)
        b[: n // 2] *= np.exp2(e[1] / 2)
        c[: n // 2] *= np.exp2(e[2])
    specials = [(np.inf, 0, 1), (0, 5, -0.0), (-0.0, 3, -0.0), (np.nan, 1, 1),
                (1e308, 10, -np.inf), (1e300, 1e10, -1e308), (0, -1, -0.0),
                (5e-324, 5e-324, 0), (2.0 ** 1023, 2, -(2.0 ** 1023) * 1.5), (1, -1, 1),
                (1e-300, 1e-300, 5e-324), (3e-160, -3e-160, 1e-319)]
    a = np.concatenate([a, [s[0] for s in specials]])
    b = np.concatenate([b, [s[1] for s in specials]])
    c = np.concatenate([c, [s[2] for s in specials]])
    got, want = fma64(a, b, c), _c_fma(a, b, c)
    np.testing.assert_array_equal(got.view(np.int64)[~np.isnan(want)],
                                  want.view(np.int64)[~np.isnan(want)])
    assert np.isnan(got[np.isnan(want)]).all()


def _compiled_and_reference(f, *args, top=True):
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    assert exe is not None
    flat = [np.asarray(a) for a in args]
    got = [np.asarray(o) for o in exe(flat)]
    ref = cpu._reference_form(closed)
    assert not top or any("fma" in e.primitive.name for e in ref.jaxpr.eqns)
    want = [np.asarray(o) for o in reference.run_jaxpr(ref.jaxpr, ref.consts, flat)]
    return got, want


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name,f,model", [
    ("a*b+c", lambda a, b, c, d: a * b + c, lambda a, b, c, d: _c_fma(a, b, c)),
    ("c-a*b", lambda a, b, c, d: c - a * b, lambda a, b, c, d: _c_fma(-a, b, c)),
    ("a*b-c", lambda a, b, c, d: a * b - c, lambda a, b, c, d: _c_fma(a, b, -c)),
    ("a*b+c*d", lambda a, b, c, d: a * b + c * d, lambda a, b, c, d: _c_fma(a, b, c * d)),
    ("(a*b+c)*d+a", lambda a, b, c, d: (a * b + c) * d + a,
     lambda a, b, c, d: _c_fma(_c_fma(a, b, c), d, a)),
    ("a**3+c", lambda a, b, c, d: a ** 3 + c, lambda a, b, c, d: _c_fma(a * a, a, c)),
    ("(a*b+c)*d+a*c", lambda a, b, c, d: (a * b + c) * d + a * c,
     lambda a, b, c, d: _c_fma(a, c, _c_fma(a, b, c) * d)),
    ("(a*b+c)*d-a*c", lambda a, b, c, d: (a * b + c) * d - a * c,
     lambda a, b, c, d: _c_fma(_c_fma(a, b, c), d, -(a * c))),
    ("a*0.3+1", lambda a, b, c, d: a * 0.3 + 1.0,
     lambda a, b, c, d: _c_fma(a, a.dtype.type(0.3), a.dtype.type(1))),
])
def test_compiled_equals_reference_and_fma(dt, name, f, model):
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", dt == np.float64)
    try:
        args = (A[:256], B[:256], C[:256], D[:256]) if dt == np.float32 else \
            (A64, B64, C64, D64)
        got, want = _compiled_and_reference(f, *args)
    finally:
        kiln.config.update("jax_enable_x64", old)
    assert got[0].dtype == dt
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], model(*args))
    with np.errstate(all="ignore"):
        separate = f(*args)                 # NumPy: every operation rounded
    assert (got[0] != separate).sum() > 10     # the contraction changes bits


def test_contraction_in_loop_bodies_and_rank0():
    x = A[:64]

    def body(i, acc):
        return acc * 0.5 + x
    got, want = _compiled_and_reference(lambda x: klax.fori_loop(0, 5, body, x), x, top=False)
    acc = x
    for _ in range(5):
        acc = _c_fma(acc, np.float32(0.5), x)
    np.testing.assert_array_equal(got[0], acc)
    s = [np.float32(v) for v in (A[0], B[0], C[0])]
    out = kiln.jit(lambda a, b, c: a * b + c)(*s)
    assert np.asarray(out) == _c_fma(*s)


def test_eager_ops_do_not_contract():
    got = np.asarray(knp.add(knp.multiply(A, B), C))
    np.testing.assert_array_equal(got, A * B + C)
    assert (got != _c_fma(A, B, C)).sum() > 10


def _in_order_fma_sum(a, b, axis):
    a, b = np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1)
    acc = np.zeros(a.shape[:-1], a.dtype)
    for i in range(a.shape[-1]):
        acc = _c_fma(a[..., i], b[..., i], acc)
    return acc


@pytest.mark.parametrize("shape,axis,contracted", [
    ((16, 32), 1, True), ((64, 9), 1, True), ((32, 64), 0, True), ((7, 5, 9), 1, True),
    ((20,), 0, True), ((2000, 2), 1, True),
    ((64, 33), 1, False),       # longer than 32
    ((64, 6), 1, False),        # minor rows of 5-8: XLA folds the rounded products
    ((3000, 3), 1, False),      # over 4000 elements
])
def test_short_sums_of_products(shape, axis, contracted):
    a, b = (_RNG.standard_normal(shape).astype(np.float32) for _ in range(2))
    f = lambda a, b: (a * b).sum(axis)      # noqa: E731
    assert ("reduce_sum_fma" in _prims(f, a, b)) == contracted
    if contracted:
        got, want = _compiled_and_reference(f, a, b)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[0], _in_order_fma_sum(a, b, axis))


@pytest.mark.parametrize("f", [
    lambda a, b: (a * a).sum(1),                # a square
    lambda a, b: (a * 0.3).sum(1),              # a rank-0 factor
    lambda a, b: (a * b).sum((0, 1)),           # two axes
    lambda a, b: ((a * b).sum(1), a * b),       # the product used twice
    lambda a, b: (a * b).max(1),
])
def test_sums_left_alone(f):
    a, b = (_RNG.standard_normal((16, 12)).astype(np.float32) for _ in range(2))
    assert "reduce_sum_fma" not in _prims(f, a, b)


def test_reduce_sum_fma_float64_and_middle_axis():
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    try:
        a, b = (_RNG.standard_normal((6, 17, 5)) for _ in range(2))
        got, want = _compiled_and_reference(lambda a, b: (a * b).sum(1), a, b)
    finally:
        kiln.config.update("jax_enable_x64", old)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], _in_order_fma_sum(a, b, 1))
    assert (got[0] != (a * b).sum(1)).sum() > 3


@pytest.mark.parametrize("abc", [
    (0.0, 5.0, 1.5),                    # a zero product: the exact slow path
    (1e300, 1e10, -1e300),              # overflow
    (2.0 ** -540, 2.0 ** -540, 0.0),    # a subnormal product
    (0.1, 3.0, -0.3),
])
def test_numpy_fma64_rank0_slow_path(abc):
    # 0-d operands whose element needs the exact element-by-element path (it indexed
    # them with np.nonzero, which 0-d arrays refuse: Diffrax's grad of a clipped step
    # size controller on the reference backend).
    a, b, c = (np.float64(v) for v in abc)
    got = fma64(a, b, c)
    assert np.shape(got) == ()
    np.testing.assert_array_equal(got, _c_fma(a, b, c))
