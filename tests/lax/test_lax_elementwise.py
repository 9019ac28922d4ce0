"""Tests of ``kiln.lax.elementwise`` beyond the generic op-record driver: dtype errors
(eager and staged), edge values, weak types, printed jaxprs, batching corner cases, the
incomplete-gamma derivatives, and parity with JAX (skipped when jax is absent).

The generic value/jit/jvp/vjp/vmap tests of every elementwise primitive come from
``tests/lax/records/elementwise.py`` via ``tests/lax/test_op_records.py``; here a quick eager
check of each record against its reference keeps this file self-contained.
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys
import warnings

import numpy as np
import pytest

import kiln
from kiln import lax
from kiln.array import make_array
from kiln.interpreters import ad

TESTS = pathlib.Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def _load_records():
    spec = importlib.util.spec_from_file_location("kiln_records_elementwise_local",
                                                  TESTS / "records" / "elementwise.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.RECORDS


RECORDS = _load_records()

try:
    import jax
    import jax.numpy as jnp
    from jax import lax as jlax
except ImportError:  # pragma: no cover
    jax = None

parity = pytest.mark.skipif(jax is None, reason="jax is not installed")


def A(x):
    return make_array(np.asarray(x))


def npv(x):
    return np.asarray(x)


# ----------------------------------------------------------------------------------------------
# every record, eagerly, against its reference

@pytest.mark.parametrize("rec", RECORDS, ids=[r.name for r in RECORDS])
def test_record_value(rec):
    args = rec.args(np.random.default_rng(0))
    out = npv(rec.fun(*args))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = np.asarray(rec.ref(*args))
    assert out.dtype == ref.dtype
    if out.dtype.kind in "biu":
        np.testing.assert_array_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=rec.tol, atol=rec.tol)


# ----------------------------------------------------------------------------------------------
# dtype and shape errors, eager and staged

BAD_DTYPE = [
    (lax.tan, np.arange(3, dtype=np.int32)),
    (lax.sqrt, np.arange(3, dtype=np.int32)),
    (lax.exp2, np.array([True])),
    (lax.floor, np.arange(3, dtype=np.int32)),
    (lax.round, np.ones(2, np.complex64)),
    (lax.is_finite, np.ones(2, np.complex64)),
    (lax.cbrt, np.ones(2, np.complex64)),
    (lax.erf, np.ones(2, np.complex64)),
    (lax.lgamma, np.arange(3, dtype=np.int32)),
    (lax.abs, np.arange(3, dtype=np.uint8)),
    (lax.abs, np.array([True])),
    (lax.sign, np.array([True])),
    (lax.real, np.ones(2, np.float32)),
    (lax.imag, np.ones(2, np.float32)),
    (lax.conj, np.arange(2, dtype=np.int32)),
    (lax.bitwise_not, np.ones(2, np.float32)),
    (lax.population_count, np.array([True])),
    (lax.clz, np.ones(2, np.float32)),
    (lambda x: lax.reduce_precision(x, 5, 10), np.arange(2, dtype=np.int32)),
]


@pytest.mark.parametrize("fun,x", BAD_DTYPE)
def test_bad_dtype_raises_eagerly_and_under_jit(fun, x):
    with pytest.raises(TypeError):
        fun(x)
    with pytest.raises(TypeError):
        kiln.jit(fun)(x)


def test_sin_of_int_raises_under_jit():
    with pytest.raises(TypeError):
        kiln.jit(lax.sin)(np.arange(3, dtype=np.int32))


BAD_BINARY = [
    (lax.atan2, np.ones(2, np.float32), np.ones(2, np.float16)),
    (lax.rem, np.ones(2, np.float32), np.ones(2, np.int32)),
    (lax.pow, np.ones(2, np.int32), np.ones(2, np.int32)),
    (lax.pow, np.ones(2, np.float32), np.ones(2, np.complex64)),
    (lax.complex, np.ones(2, np.float16), np.ones(2, np.float16)),
    (lax.complex, np.ones(2, np.float32), np.ones(2, np.float16)),
    (lax.bitwise_and, np.ones(2, np.float32), np.ones(2, np.float32)),
    (lax.shift_left, np.ones(2, np.int32), np.ones(2, np.int8)),
    (lax.shift_left, np.array([True]), np.array([True])),
    (lax.nextafter, np.ones(2, np.int32), np.ones(2, np.int32)),
    (lax.igamma, np.ones(2, np.float32), np.ones(3, np.float32)),   # shapes
    (lambda a, b: lax.clamp(a, np.ones(3, np.float32), b), np.ones(2, np.float32),
     np.float32(1)),
    (lambda a, b: lax.clamp(a, np.ones(3, np.float32), b), np.float32(0), np.int32(1)),
]


@pytest.mark.parametrize("fun,x,y", BAD_BINARY)
def test_bad_binary_raises(fun, x, y):
    with pytest.raises(TypeError):
        fun(x, y)
    with pytest.raises(TypeError):
        kiln.jit(fun)(x, y)


def test_bitcast_errors():
    with pytest.raises(TypeError):
        lax.bitcast_convert_type(np.ones(4, np.float32), np.bool_)
    with pytest.raises(TypeError):
        lax.bitcast_convert_type(np.ones(4, np.complex64), np.float64)
    with pytest.raises(ValueError):
        lax.bitcast_convert_type(np.ones((2, 3), np.uint8), np.float32)
    with pytest.raises(ValueError):
        kiln.jit(lambda x: lax.bitcast_convert_type(x, np.float32))(np.ones((2, 3), np.uint8))


def test_reduce_precision_param_errors():
    with pytest.raises(ValueError):
        lax.reduce_precision(np.ones(2, np.float32), 0, 3)
    with pytest.raises(ValueError):
        lax.reduce_precision(np.ones(2, np.float32), 5, -1)


# ----------------------------------------------------------------------------------------------
# edge values (independent of jax)

def test_round_methods():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.3], np.float32)
    np.testing.assert_array_equal(npv(lax.round(x)), [-3, -2, -1, 1, 2, 3, 0, -0.0])
    assert np.signbit(npv(lax.round(x))[-1])
    np.testing.assert_array_equal(npv(lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)),
                                  [-2, -2, -0.0, 0, 2, 2, 0, -0.0])
    assert lax.RoundingMethod(1) is lax.RoundingMethod.TO_NEAREST_EVEN


def test_integer_edge_cases():
    i32 = np.int32
    imin = np.iinfo(i32).min
    np.testing.assert_array_equal(npv(lax.abs(np.array([imin, -3], i32))), [imin, 3])
    np.testing.assert_array_equal(
        npv(lax.rem(np.array([5, -5, 5, -5, 3, imin], i32), np.array([3, 3, -3, -3, 0, -1], i32))),
        [2, -2, 2, -2, 3, 0])
    np.testing.assert_array_equal(npv(lax.rem(np.array([3, 0], np.uint32),
                                              np.array([0, 0], np.uint32))), [3, 0])
    x = np.array([1, -1, imin], i32)
    for s, left, arith, logical in [(32, [0, 0, 0], [0, -1, -1], [0, 0, 0]),
                                    (-1, [0, 0, 0], [0, -1, -1], [0, 0, 0]),
                                    (31, [imin, imin, 0], [0, -1, -1], [0, 1, 1])]:
        sh = np.full(3, s, i32)
        np.testing.assert_array_equal(npv(lax.shift_left(x, sh)), left)
        np.testing.assert_array_equal(npv(lax.shift_right_arithmetic(x, sh)), arith)
        np.testing.assert_array_equal(npv(lax.shift_right_logical(x, sh)), logical)
    # arithmetic shift of an unsigned value shifts in its top bit
    np.testing.assert_array_equal(
        npv(lax.shift_right_arithmetic(np.array([255, 128, 1], np.uint8), np.uint8(7))),
        [255, 255, 0])
    np.testing.assert_array_equal(npv(lax.clz(np.array([0, 1, -1], np.int8))), [8, 7, 0])
    np.testing.assert_array_equal(npv(lax.population_count(np.array([-1], np.int16))), [16])
    np.testing.assert_array_equal(npv(lax.bitwise_not(np.array([True, False]))),
                                  [False, True])


def test_float_edge_cases():
    np.testing.assert_array_equal(npv(lax.sign(np.array([-0.0, 0.0, -2.0], np.float32))),
                                  [-0.0, 0.0, -1.0])
    assert np.signbit(npv(lax.sign(np.float32(-0.0))))
    assert np.isnan(npv(lax.sign(np.float32(np.nan))))
    z = npv(lax.sign(np.array([0j, 3j], np.complex64)))
    np.testing.assert_array_equal(z, [0, 1j])
    np.testing.assert_array_equal(
        npv(lax.clamp(np.float32(0), np.array([np.nan, -1, 2], np.float32), np.float32(1))),
        [np.nan, 0, 1])
    assert npv(lax.clamp(np.float32(2), np.float32(0.5), np.float32(1))) == 1.0
    assert np.isnan(npv(lax.digamma(np.float32(0.0))))
    assert npv(lax.lgamma(np.float32(-np.inf))) == np.inf
    assert npv(lax.pow(np.float32(0), np.int32(0))) == 1.0
    assert npv(lax.pow(np.float32(2.0), np.int32(2**31 - 1))) == np.inf
    out = npv(lax.erf_inv(np.array([-1, 1, 2], np.float32)))
    np.testing.assert_array_equal(out, [-np.inf, np.inf, np.nan])


def test_reduce_precision_bits():
    x = np.array([1.0001, 65520.0, 1e-6, 6e-5, np.nan, -np.inf, 3.4e38, -0.0], np.float32)
    out = npv(lax.reduce_precision(x, 5, 10))
    np.testing.assert_array_equal(out, [1.0, np.inf, 0.0, 0.0, np.nan, -np.inf, np.inf, -0.0])
    assert np.signbit(out[-1])
    # reduce_precision to the dtype's own format is the identity, also for float16/bfloat16
    for dt, (e, m) in [(np.float16, (5, 10)), (kiln.dtypes.bfloat16, (8, 7))]:
        v = np.linspace(-3, 3, 11).astype(dt)
        np.testing.assert_array_equal(npv(lax.reduce_precision(v, e, m)), v)
    assert lax.reduce_precision(np.float32(1.5), 5, 10).shape == ()


def test_bitcast_shapes():
    one = np.float32(1.0)
    b = lax.bitcast_convert_type(one, np.uint8)
    assert b.shape == (4,) and b.dtype == np.uint8
    np.testing.assert_array_equal(npv(b), np.array(1.0, np.float32).reshape(1).view(np.uint8))
    back = lax.bitcast_convert_type(b, np.float32)
    assert back.shape == () and npv(back) == 1.0
    assert not lax.bitcast_convert_type(1.0, np.int32).weak_type


def test_half_precision_dtypes():
    for dt in (np.float16, kiln.dtypes.bfloat16):
        x = np.linspace(0.5, 2.0, 5).astype(dt)
        for f in (lax.exp2, lax.log1p, lax.tan, lax.sqrt, lax.erf, lax.lgamma, lax.logistic,
                  lax.cbrt, lax.floor, lax.sign, lax.abs):
            out = f(x)
            assert out.dtype == dt, f
        assert lax.pow(x, x).dtype == dt
        assert lax.rem(x, x).dtype == dt


def test_weak_types():
    assert lax.exp2(1.0).weak_type
    assert lax.abs(1.0 + 1.0j).weak_type and lax.abs(1.0 + 1.0j).dtype == np.float32
    assert lax.is_finite(1.0).weak_type
    assert lax.real(1.0 + 1.0j).weak_type
    assert not lax.exp2(np.float32(1.0)).weak_type
    assert not lax.atan2(np.float32(1.0), 2.0).weak_type
    assert lax.pow(np.float32(2.0), 2).dtype == np.float32


# ----------------------------------------------------------------------------------------------
# derivatives at points where JAX's rules make a choice

def _jvp(f, *xs):
    ts = [make_array(np.ones_like(np.asarray(x))) for x in xs]
    _, (t,) = ad.jvp_flat(lambda *a: [f(*a)], [A(x) for x in xs], ts)
    return npv(t)


def test_special_point_derivatives():
    f32 = np.float32
    # d/dy 0**y = 0 (log(x) replaced by 0 where x == 0); d/dx x**0 = 0 for integer 0
    assert kiln.grad(lambda y: lax.pow(f32(0.0), y))(f32(2.0)) == 0.0
    assert kiln.grad(lambda x: lax.pow(x, np.int32(0)))(f32(0.0)) == 0.0
    assert np.isnan(kiln.grad(lambda x: lax.pow(x, f32(0.0)))(f32(0.0)))
    # abs at 0 takes the derivative +1; complex abs at 0 gives 0
    assert kiln.grad(lax.abs)(f32(0.0)) == 1.0
    assert kiln.grad(lambda z: lax.abs(z))(np.complex64(0)) == 0
    # bessel_i1e near 0 uses the limit 1/2
    assert abs(float(kiln.grad(lax.bessel_i1e)(f32(0.0))) - 0.5) < 1e-6
    # clamp: the operand's derivative vanishes outside (lo, hi)
    g = kiln.grad(lambda x: lax.clamp(f32(0), x, f32(1)))
    assert g(f32(0.5)) == 1.0 and g(f32(2.0)) == 0.0 and g(f32(-1.0)) == 0.0
    # integer/bool outputs have zero tangents
    for f, x in [(lax.sign, f32(0.3)), (lax.floor, f32(1.3)), (lax.round, f32(1.3))]:
        assert _jvp(f, x) == 0.0
    # polygamma has no derivative in m
    with pytest.raises(ValueError):
        kiln.grad(lambda m: lax.polygamma(m, f32(2.0)))(f32(1.0))


def test_linear_transposes():
    x = np.array([1 + 2j, -3 + 0.5j], np.complex64)
    r = np.array([1.0, 2.0], np.float32)
    _, vjp = kiln.vjp(lax.real, x)
    np.testing.assert_array_equal(npv(vjp(r)[0]), r.astype(np.complex64))
    _, vjp = kiln.vjp(lax.imag, x)
    np.testing.assert_array_equal(npv(vjp(r)[0]), -1j * r.astype(np.complex64))
    _, vjp = kiln.vjp(lax.conj, x)
    np.testing.assert_array_equal(npv(vjp(x)[0]), np.conj(x))
    _, vjp = kiln.vjp(lax.conj, r)
    out = vjp(x)[0]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(npv(out), x.real)
    _, vjp = kiln.vjp(lax.complex, np.float32(2.0), r)
    cx, cy = vjp(x)
    assert cx.shape == () and npv(cx) == np.float32(x.real.sum())
    np.testing.assert_array_equal(npv(cy), -x.imag)


def test_jvp_finite_differences():
    rng = np.random.default_rng(1)
    cases = [(lax.tan, rng.uniform(-1, 1, 5)), (lax.atanh, rng.uniform(-0.8, 0.8, 5)),
             (lax.acosh, rng.uniform(1.5, 3, 5)), (lax.logistic, rng.uniform(-4, 4, 5)),
             (lax.erf_inv, rng.uniform(-0.8, 0.8, 5)), (lax.digamma, rng.uniform(0.5, 3, 5)),
             (lax.cbrt, rng.uniform(0.5, 3, 5)), (lax.bessel_i1e, rng.uniform(-3, 3, 5)),
             (lax.rsqrt, rng.uniform(0.5, 3, 5)), (lax.expm1, rng.uniform(-2, 2, 5))]
    for f, x in cases:
        x = x.astype(np.float32)
        t = _jvp(f, x)
        eps = 1e-3
        fd = (npv(f(x.astype(np.float64) + eps)).astype(np.float64) -
              npv(f(x.astype(np.float64) - eps)).astype(np.float64)) / (2 * eps)
        np.testing.assert_allclose(t, fd, rtol=1e-3, atol=1e-3, err_msg=str(f))


# ----------------------------------------------------------------------------------------------
# batching corner cases

def test_vmap_bitcast_batch_axis_last():
    x = np.random.default_rng(0).integers(0, 256, (4, 3)).astype(np.uint8)  # (4 bytes, batch 3)
    out = kiln.vmap(lambda v: lax.bitcast_convert_type(v, np.float32), in_axes=1)(x)
    np.testing.assert_array_equal(npv(out), x.T.copy().view(np.float32).reshape(3))
    y = np.ones((2, 3), np.float32)
    out = kiln.vmap(lambda v: lax.bitcast_convert_type(v, np.uint16), in_axes=1)(y)
    assert out.shape == (3, 2, 2)


def test_vmap_clamp_mixed_bounds():
    lo = np.array([-1.0, 0.0, 0.5], np.float32)     # batched scalar bound
    x = np.random.default_rng(0).uniform(-2, 2, (3, 4)).astype(np.float32)
    out = kiln.vmap(lambda a, v: lax.clamp(a, v, np.float32(1.0)))(lo, x)
    np.testing.assert_array_equal(npv(out), np.clip(x, lo[:, None], 1.0))
    out = kiln.vmap(lambda a: lax.clamp(a, x[0], np.float32(1.0)))(lo)   # unbatched operand
    np.testing.assert_array_equal(npv(out), np.clip(x[0][None], lo[:, None], 1.0))


# ----------------------------------------------------------------------------------------------
# incomplete-gamma derivatives (our own series / continued fraction)

def test_igamma_derivatives_against_mpmath():
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    pts = [(0.5, 3.0), (3.0, 0.5), (1e-20, 0.5), (50.0, 45.0), (7318.2, 7318.2), (2.0, 30.0)]
    a = np.array([p[0] for p in pts] + [1e4])
    x = np.array([p[1] for p in pts] + [5355.67])
    with _x64():
        g = npv(lax.igamma_grad_a(a, x))
        r = npv(lax.random_gamma_grad(a, x))
    # JAX's algorithm (kiln follows it bit for bit) gives up where a log x - x - lgamma(a)
    # is below -log(max): the series is not iterated (ans = 1, dans/da = 0), so
    # igamma_grad_a is -0 and random_gamma_grad -(log x - digamma(a + 1)) x / a (0.334; the
    # true value is 0.720).
    from scipy import special
    assert g[-1] == 0 and np.signbit(g[-1])
    want = -(np.log(x[-1]) - special.digamma(a[-1] + 1)) * x[-1] / a[-1]
    assert abs(r[-1] - want) <= 1e-12 * abs(want)
    for i, (ai, xi) in enumerate(pts):
        ai, xi = mp.mpf(ai), mp.mpf(xi)
        dpda = mp.diff(lambda t: mp.gammainc(t, 0, xi, regularized=True), ai)
        pdf = mp.exp((ai - 1) * mp.log(xi) - xi - mp.loggamma(ai))
        assert abs(g[i] - float(dpda)) <= 1e-9 * abs(float(dpda)) + 1e-300, pts[i]
        want = float(-dpda / pdf)
        assert abs(r[i] - want) <= 1e-9 * abs(want), pts[i]


class _x64:
    def __enter__(self):
        self.prev = kiln.config.jax_enable_x64
        kiln.config.update("jax_enable_x64", True)

    def __exit__(self, *exc):
        kiln.config.update("jax_enable_x64", self.prev)


def test_igamma_domain():
    a = np.array([0.0, -1.0, 1.0, 2.0, np.nan], np.float32)
    x = np.array([1.0, 1.0, -1.0, 0.0, 1.0], np.float32)
    g = npv(lax.igamma_grad_a(a, x))
    assert np.isnan(g[[0, 1, 2, 4]]).all() and g[3] == 0.0
    r = npv(lax.random_gamma_grad(a, x))
    assert np.isnan(r[[0, 1, 2, 4]]).all() and r[3] == 0.0


# ----------------------------------------------------------------------------------------------
# parity with JAX

SPECIAL = np.array([0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, np.inf, -np.inf, np.nan,
                    1e-30, 3.0e38, 0.49999997], np.float32)

UNARY = ["sign", "floor", "ceil", "round", "is_finite", "exp2", "log1p", "expm1", "logistic",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt",
         "rsqrt", "cbrt", "abs", "erf", "erfc", "erf_inv", "lgamma", "digamma", "bessel_i0e",
         "bessel_i1e", "real", "imag", "conj"]

BINARY = ["atan2", "rem", "nextafter", "pow", "complex", "bitwise_and", "bitwise_or",
          "bitwise_xor", "shift_left", "shift_right_arithmetic", "shift_right_logical",
          "polygamma", "zeta", "igammac", "igamma_grad_a", "random_gamma_grad"]


def _inputs():
    rng = np.random.default_rng(0)
    f = rng.uniform(-3, 3, 20).astype(np.float32)
    return {
        "f32": f, "special": SPECIAL, "pos": rng.uniform(0.1, 5, 20).astype(np.float32),
        "c64": (rng.uniform(-2, 2, 10) + 1j * rng.uniform(-2, 2, 10)).astype(np.complex64),
        "i32": np.array([-2**31, -3, 0, 7, 2**31 - 1], np.int32),
        "u8": np.array([0, 3, 128, 255], np.uint8),
    }


def _compare(kout, jout, tol, what):
    k, j = np.asarray(kout), np.asarray(jout)
    assert k.dtype == j.dtype and k.shape == j.shape, (what, k.dtype, j.dtype, k.shape, j.shape)
    if k.dtype.kind in "biu":
        np.testing.assert_array_equal(k, j, err_msg=what)
    else:
        np.testing.assert_allclose(k.astype(np.complex128), j.astype(np.complex128), rtol=tol,
                                   atol=tol, err_msg=what)


def _both(kf, jf, *args):
    """Results of kiln and jax, or the exception types both raised."""
    try:
        k = kf(*args)
    except Exception as e:  # noqa: BLE001
        k = type(e)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            j = jf(*[jnp.asarray(a) for a in args])
    except Exception as e:  # noqa: BLE001
        j = type(e)
    return k, j


@parity
@pytest.mark.parametrize("name", UNARY)
def test_parity_unary(name):
    for key, x in _inputs().items():
        k, j = _both(getattr(lax, name), getattr(jlax, name), x)
        if isinstance(k, type) or isinstance(j, type):
            assert k is j or (issubclass(k, TypeError) and issubclass(j, TypeError)), \
                (name, key, k, j)
            continue
        if name == "lgamma" and key == "special":
            # XLA's lgamma(1) is 4.8e-7, ours (SciPy's) is exact
            _compare(k, j, 1e-5, f"{name}({key})")
        else:
            _compare(k, j, 2e-6 if key != "c64" else 2e-5, f"{name}({key})")


@parity
@pytest.mark.parametrize("name", BINARY)
def test_parity_binary(name):
    ins = _inputs()
    rng = np.random.default_rng(1)
    pairs = {
        "f32": (ins["f32"], rng.permutation(ins["f32"])),
        "special": (ins["special"], ins["special"][::-1].copy()),
        "pos": (ins["pos"], rng.uniform(0.1, 20, 20).astype(np.float32)),
        "c64": (ins["c64"], rng.permutation(ins["c64"])),
        "i32": (ins["i32"], np.array([-1, 31, 32, 0, 3], np.int32)),
        "u8": (ins["u8"], np.array([0, 7, 8, 200], np.uint8)),
        "f32_i32": (ins["f32"][:5], np.array([0, 1, -1, 3, 2**31 - 1], np.int32)),
        "scalar_vec": (np.float32(1.5), ins["pos"]),
    }
    for key, (x, y) in pairs.items():
        if name in ("igammac", "igamma_grad_a", "random_gamma_grad") and key != "pos":
            continue  # (JAX compiles these slowly; XLA's loops differ from ours at the edges)
        if name == "polygamma" and key == "special":
            continue  # the sign of inf at the pole x = -0.0 differs
        k, j = _both(getattr(lax, name), getattr(jlax, name), x, y)
        if isinstance(k, type) or isinstance(j, type):
            assert k is j or (issubclass(k, TypeError) and issubclass(j, TypeError)), \
                (name, key, k, j)
            continue
        tol = 1e-4 if name in ("polygamma", "zeta", "igammac", "igamma_grad_a",
                               "random_gamma_grad", "pow") else 2e-5
        _compare(k, j, tol, f"{name}({key})")


@parity
def test_parity_bit_ops():
    rng = np.random.default_rng(0)
    for dt in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32):
        info = np.iinfo(dt)
        x = rng.integers(info.min, int(info.max) + 1, 64).astype(dt)
        s = rng.integers(-2, info.bits + 3, 64).astype(dt)
        for name in ("shift_left", "shift_right_arithmetic", "shift_right_logical"):
            _compare(getattr(lax, name)(x, s), getattr(jlax, name)(x, s), 0, f"{name} {dt}")
        for name in ("population_count", "clz", "bitwise_not"):
            _compare(getattr(lax, name)(x), getattr(jlax, name)(x), 0, f"{name} {dt}")
        y = rng.integers(info.min, int(info.max) + 1, 64).astype(dt)
        y[::5] = 0
        _compare(lax.rem(x, y), jlax.rem(x, y), 0, f"rem {dt}")


@parity
@pytest.mark.parametrize("e,m", [(5, 10), (8, 7), (2, 0), (4, 3), (5, 2), (8, 23), (1, 1),
                                 (11, 4)])
def test_parity_reduce_precision(e, m):
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 400, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([SPECIAL, bits.view(np.float32)])
    _compare(lax.reduce_precision(x, e, m), jlax.reduce_precision(x, e, m), 0, "f32")
    with np.errstate(over="ignore"):
        x16 = x.astype(np.float16)
    _compare(lax.reduce_precision(x16, e, m), jlax.reduce_precision(x16, e, m), 0, "f16")


@parity
def test_parity_bitcast_and_clamp():
    rng = np.random.default_rng(0)
    for x, dt in [(rng.standard_normal(3).astype(np.float32), np.int16),
                  (np.array([[1, 2], [3, 4]], np.int16), np.int32),
                  (np.float32(1.0), np.uint8), (rng.standard_normal(3).astype(np.float32),
                                                np.uint32)]:
        _compare(lax.bitcast_convert_type(x, dt), jlax.bitcast_convert_type(x, dt), 0,
                 str(dt))
    for lo, x, hi in [(np.float32(0), rng.standard_normal(8).astype(np.float32), np.float32(1)),
                      (np.float32(np.nan), np.float32(0.5), np.float32(1)),
                      (np.int32(-2), np.arange(-4, 4, dtype=np.int32), np.int32(2))]:
        _compare(lax.clamp(lo, x, hi), jlax.clamp(lo, x, hi), 0, "clamp")


@parity
def test_parity_jaxpr_text():
    f32 = np.float32
    funs = [
        (lambda x: lax.round(x), (f32(1),)),
        (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), (f32(1),)),
        (lambda x: lax.conj(x), (f32(1),)),
        (lambda x: lax.pow(x, 2), (f32(1),)),
        (lambda x: lax.pow(x, 2.0), (f32(1),)),
        (lambda x: lax.clamp(0.0, x, 1.0), (np.ones(3, f32),)),
        (lambda x: lax.bitcast_convert_type(x, np.int16), (np.ones(3, f32),)),
        (lambda x: lax.reduce_precision(x, 5, 10), (np.ones(3, f32),)),
        (lambda x: lax.shift_left(x, 3), (np.int32(1),)),
        (lambda x: lax.abs(x), (np.complex64(1),)),
        (lambda x: lax.reciprocal(x), (f32(1),)),
        (lambda x: lax.is_finite(x), (f32(1),)),
        (lambda x: lax.bitwise_not(x), (np.int32(1),)),
        (lambda x, y: lax.atan2(x, y), (f32(1), f32(2))),
    ]
    jfuns = [
        lambda x: jlax.round(x), lambda x: jlax.round(x, jlax.RoundingMethod.TO_NEAREST_EVEN),
        lambda x: jlax.conj(x), lambda x: jlax.pow(x, 2), lambda x: jlax.pow(x, 2.0),
        lambda x: jlax.clamp(0.0, x, 1.0), lambda x: jlax.bitcast_convert_type(x, jnp.int16),
        lambda x: jlax.reduce_precision(x, 5, 10), lambda x: jlax.shift_left(x, 3),
        lambda x: jlax.abs(x), lambda x: jlax.reciprocal(x), lambda x: jlax.is_finite(x),
        lambda x: jlax.bitwise_not(x), lambda x, y: jlax.atan2(x, y),
    ]
    for (kf, args), jf in zip(funs, jfuns):
        assert str(kiln.make_jaxpr(kf)(*args)) == str(jax.make_jaxpr(jf)(*args))


JVP_OPS = ["exp2", "log1p", "expm1", "logistic", "tan", "asin", "acos", "atan", "sinh", "cosh",
           "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "abs", "erf", "erfc", "erf_inv",
           "lgamma", "digamma", "bessel_i0e", "bessel_i1e", "sign", "floor", "round"]


@parity
@pytest.mark.parametrize("name", JVP_OPS)
def test_parity_jvp(name):
    rng = np.random.default_rng(0)
    lo, hi = {"acosh": (1.2, 3.0), "lgamma": (0.2, 4.0), "digamma": (0.2, 4.0),
              "sqrt": (0.1, 3.0), "rsqrt": (0.1, 3.0), "log1p": (-0.9, 3.0)}.get(
                  name, (-0.95, 0.95))
    x = rng.uniform(lo, hi, 12).astype(np.float32)
    t = rng.standard_normal(12).astype(np.float32)
    kp, kt = kiln.jvp(getattr(lax, name), (x,), (t,))
    jp, jt = jax.jvp(getattr(jlax, name), (jnp.asarray(x),), (jnp.asarray(t),))
    _compare(kp, jp, 1e-5, name)
    _compare(kt, jt, 1e-4, name)
    if name not in ("sign", "floor", "round"):
        kg = kiln.grad(lambda v: getattr(lax, name)(v))(x[0])
        jg = jax.grad(lambda v: getattr(jlax, name)(v))(x[0])
        _compare(kg, jg, 1e-4, name)


@parity
def test_parity_jvp_binary_and_complex():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.2, 2, 6).astype(np.float32)
    y = rng.uniform(-2, 2, 6).astype(np.float32)
    c = (rng.uniform(0.2, 2, 6) + 1j * rng.uniform(-2, 2, 6)).astype(np.complex64)
    cases = [
        ("pow", (x, y)), ("atan2", (y, x)), ("rem", (y, x)),
        ("polygamma", (np.ones(6, np.float32), x)),
        ("clamp", (np.float32(-0.5), y, np.float32(0.7))), ("complex", (x, y)),
    ]
    # (JAX's own clamp jvp fails for scalar bounds, so only the operand is differentiated.)
    for name, args in cases:
        tangents = tuple(rng.standard_normal(np.shape(a)).astype(np.float32) for a in args)
        argnums = (1,) if name in ("polygamma", "clamp") else tuple(range(len(args)))

        def kf(*d, name=name, args=args, argnums=argnums):
            full = list(args)
            for i, v in zip(argnums, d):
                full[i] = v
            return getattr(lax, name)(*full)

        def jf(*d, name=name, args=args, argnums=argnums):
            full = [jnp.asarray(a) for a in args]
            for i, v in zip(argnums, d):
                full[i] = v
            return getattr(jlax, name)(*full)

        prim = tuple(args[i] for i in argnums)
        tan = tuple(tangents[i] for i in argnums)
        _, kt = kiln.jvp(kf, prim, tan)
        _, jt = jax.jvp(jf, tuple(jnp.asarray(p) for p in prim), tuple(jnp.asarray(t) for t in tan))
        _compare(kt, jt, 1e-4, name)
    for name in ("sqrt", "log1p", "expm1", "exp2", "logistic", "tan", "atanh", "abs", "rsqrt",
                 "sinh", "asinh", "real", "imag", "conj", "sign"):
        t = (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np.complex64)
        _, kt = kiln.jvp(getattr(lax, name), (c,), (t,))
        _, jt = jax.jvp(getattr(jlax, name), (jnp.asarray(c),), (jnp.asarray(t),))
        _compare(kt, jt, 1e-4, name)
        if name in ("real", "imag", "abs"):
            r = rng.standard_normal(6).astype(np.float32)
            _, kv = kiln.vjp(getattr(lax, name), c)
            _, jv = jax.vjp(getattr(jlax, name), jnp.asarray(c))
            _compare(kv(r)[0], jv(jnp.asarray(r))[0], 1e-5, name + " vjp")


_SIZE_ONE_CASES = [((1,), (2,)), ((3, 1), (1, 4)), ((2, 1), (2, 3)), ((0,), (1,)), ((), (3,)),
                   ((1, 1), (1, 1))]


@pytest.mark.parametrize("sa,sb", _SIZE_ONE_CASES)
def test_binary_ops_broadcast_size_one_dims_as_jax(sa, sb):
    # JAX's lax n-ary ops broadcast dimensions of size 1 between operands of equal rank
    # (BlackJAX's linear_map multiplies a (1,) mass matrix with a (2,) momentum).
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa).astype(np.float32) + 2
    b = rng.standard_normal(sb).astype(np.float32) + 2
    for name in ("add", "sub", "mul", "div", "max", "min", "pow", "atan2", "lt", "rem"):
        want = getattr(jax.lax, name)(a, b)
        got = getattr(lax, name)(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
        jitted = kiln.jit(getattr(lax, name))(a, b)
        np.testing.assert_allclose(np.asarray(jitted), np.asarray(want), rtol=1e-6)


def test_size_one_broadcast_under_transformations():
    a, b = np.array([2.0], np.float32), np.array([1.0, 3.0], np.float32)
    f = lambda a, b: lax.mul(a, b).sum()        # noqa: E731
    ga, gb = kiln.grad(f, (0, 1))(a, b)
    assert ga.shape == (1,) and gb.shape == (2,)
    np.testing.assert_allclose(np.asarray(ga), [4.0])
    np.testing.assert_allclose(np.asarray(gb), [2.0, 2.0])
    out = kiln.vmap(lax.mul, (None, 0))(a, np.ones((3, 2), np.float32))
    assert out.shape == (3, 2)
    out = kiln.vmap(lax.mul)(np.ones((3, 1), np.float32), np.ones((3, 2), np.float32))
    assert out.shape == (3, 2)
    with pytest.raises(TypeError, match=r"add: arrays must have the same number of "
                                        r"dimensions, got \{1, 2\}"):
        lax.add(np.ones(2, np.float32), np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match=r"mul got incompatible shapes for broadcasting: "
                                        r"\(2,\), \(3,\)"):
        lax.mul(np.ones(2, np.float32), np.ones(3, np.float32))
