"""Eager kiln gives JAX's bits for float32/float64 math, reductions and linspace.

Sweeps every exponent of each dtype (``m * 2**e`` for several mantissas ``m`` and every
``e`` from the smallest subnormal to the largest finite, both signs) plus the special
values, for ``exp``, ``expm1``, ``log``, ``log1p``, ``sin``, ``cos``, ``tan``, ``tanh``,
``logistic``, ``erf``, ``exp2``, ``cbrt``, ``arcsin``, ``arccos``, ``arctan``, ``sinh``,
``cosh``, ``arcsinh``, ``arccosh``, ``arctanh`` and ``pow``, and compares the eager kiln result with JAX's eager
result bit for bit (NaNs compare equal whatever their payload). Also: ``mean`` of integer
matrices, ``linspace`` cases of issue 25, small/0-d/strided/large (threaded) inputs, and the
reference backend (which shares the impls).
"""
import contextlib

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
import kiln.scipy.special as kspecial
from kiln import lax as klax
from kiln import nn as knn

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jspecial = pytest.importorskip("jax.scipy.special")

if kiln.random._native.lib() is None:  # pragma: no cover
    pytest.skip("no native library (C compiler): eager math falls back to NumPy",
                allow_module_level=True)

def _has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


_AVX512 = _has_avx512()
# Known (issue 25): on AVX-512 machines XLA's CPU code computes some float32 linspace
# samples near the end of its vector loop without contracting the inner multiply-add
# (1 ulp, e.g. sample 994 of linspace(-5, 3, 1001)); kiln's eager linspace reproduces the
# AVX2 loop only.
_AVX512_LINSPACE = "XLA's AVX-512 linspace tail rounding is not reproduced (1 ulp)"


UNARY = {
    "exp": (knp.exp, lambda: jnp.exp),
    "expm1": (knp.expm1, lambda: jnp.expm1),
    "log": (knp.log, lambda: jnp.log),
    "log1p": (knp.log1p, lambda: jnp.log1p),
    "sin": (knp.sin, lambda: jnp.sin),
    "cos": (knp.cos, lambda: jnp.cos),
    "tan": (knp.tan, lambda: jnp.tan),
    "tanh": (knp.tanh, lambda: jnp.tanh),
    "logistic": (knn.sigmoid, lambda: jax.nn.sigmoid),
    "erf": (kspecial.erf, lambda: jspecial.erf),
    "exp2": (knp.exp2, lambda: jnp.exp2),
    "cbrt": (knp.cbrt, lambda: jnp.cbrt),
    "rsqrt": (klax.rsqrt, lambda: jax.lax.rsqrt),
    "log2": (knp.log2, lambda: jnp.log2),
    "log10": (knp.log10, lambda: jnp.log10),
    # XLA's expansions of the CHLO ops (kiln/compiler/csrc/xla_math.h)
    "arcsin": (knp.arcsin, lambda: jnp.arcsin),
    "arccos": (knp.arccos, lambda: jnp.arccos),
    "arctan": (knp.arctan, lambda: jnp.arctan),
    "sinh": (knp.sinh, lambda: jnp.sinh),
    "cosh": (knp.cosh, lambda: jnp.cosh),
    "arcsinh": (knp.arcsinh, lambda: jnp.arcsinh),
    "arccosh": (knp.arccosh, lambda: jnp.arccosh),
    "arctanh": (knp.arctanh, lambda: jnp.arctanh),
}
TRIG = ("arcsin", "arccos", "arctan", "sinh", "cosh", "arcsinh", "arccosh", "arctanh")


@contextlib.contextmanager
def x64(on):
    old_k, old_j = kiln.config.jax_enable_x64, jax.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", on)
    jax.config.update("jax_enable_x64", on)
    try:
        yield
    finally:
        kiln.config.update("jax_enable_x64", old_k)
        jax.config.update("jax_enable_x64", old_j)


def sweep(dtype, per_exponent=12, seed=0):
    """``m * 2**e`` for every exponent ``e`` of ``dtype`` (subnormals included), both
    signs, and the special values."""
    fi = np.finfo(dtype)
    lo = fi.minexp - fi.nmant        # the smallest subnormal's exponent
    es = np.arange(lo, fi.maxexp)
    rng = np.random.default_rng(seed)
    m = np.concatenate([np.ones((len(es), 1)), rng.uniform(1, 2, (len(es), per_exponent - 1))],
                       axis=1)
    with np.errstate(over="ignore"):
        x = (m * np.ldexp(1.0, es)[:, None]).astype(dtype).ravel()
    x = x[np.isfinite(x)]
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5,
                        fi.max, -fi.max, fi.tiny, -fi.tiny, fi.eps], dtype)
    return np.concatenate([x, -x, special])


def assert_same_bits(got, want, x=None, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    u = {4: np.uint32, 8: np.uint64, 2: np.uint16}[got.dtype.itemsize]
    same = (got.view(u) == want.view(u)) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        bad = ~same
        where = x[bad][:5] if x is not None else np.flatnonzero(bad)[:5]
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} differ from JAX, at "
                             f"{where}: kiln {got[bad][:5]} jax {want[bad][:5]}")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_every_exponent(name, wide):
    kf, jf = UNARY[name]
    dtype = np.float64 if wide else np.float32
    with x64(wide):
        x = sweep(dtype, per_exponent=4 if wide else 12)
        want = np.asarray(jf()(x))
        assert_same_bits(kf(x), want, x, f"{name} {dtype.__name__}")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_atan2_every_exponent(wide):
    dtype = np.float64 if wide else np.float32
    with x64(wide):
        x = sweep(dtype, per_exponent=3)
        y = np.random.default_rng(2).permutation(x)
        for a, b in ((x, y), (x, dtype(2.5)), (dtype(-1.5), y)):
            want = np.asarray(jnp.arctan2(a, b))
            assert_same_bits(knp.arctan2(a, b), want, None, f"atan2 {dtype.__name__}")
        # Compiled kernels do not flush denormals (docs/compatibility.md): normal operands
        # with normal (or zero) results only.
        tiny = np.finfo(dtype).tiny
        a, b = np.broadcast_arrays(x, y)
        want = np.asarray(jnp.arctan2(a, b))
        ok = ((np.abs(a) >= tiny) & (np.abs(b) >= tiny)
              & ((np.abs(want) >= tiny) | np.isnan(want)))
        assert_same_bits(kiln.jit(knp.arctan2)(a[ok], b[ok]), want[ok], None, "atan2 jit")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_pow_every_exponent(wide):
    dtype = np.float64 if wide else np.float32
    rng = np.random.default_rng(1)
    with x64(wide):
        x = sweep(dtype, per_exponent=3)
        y = np.concatenate([rng.uniform(-4, 4, x.size // 2),
                            rng.integers(-6, 7, x.size - x.size // 2)]).astype(dtype)
        rng.shuffle(y)
        y[:12] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1, -1, 2, 0.5, -0.5, 3, 1e-3]
        for base in (np.abs(x), x):
            want = np.asarray(jnp.power(base, y))
            assert_same_bits(knp.power(base, y), want, base, f"pow {dtype.__name__}")
        # An integer exponent array and a scalar exponent.
        xs = np.abs(x[: x.size // 4])
        for k in (2, 3, -2, 5, -7):   # integer_pow: XLA's binary exponentiation
            assert_same_bits(knp.power(x, np.int32(k)), np.asarray(jnp.power(x, np.int32(k))),
                             x, f"pow int {k}")
            assert_same_bits(knp.asarray(x) ** k, np.asarray(jnp.asarray(x) ** k), x,
                             f"x ** {k}")
        assert_same_bits(knp.power(xs, dtype(0.37)), np.asarray(jnp.power(xs, dtype(0.37))),
                         xs, "pow scalar")


def _near_one(dtype):
    """The domain edges of asin/acos/atanh/acosh and where asinh/sinh switch formulas."""
    eps = np.finfo(dtype).eps
    k = np.concatenate([np.arange(0, 40), 2.0 ** np.arange(6, 50, 3)])
    base = np.array([1.0, 0.5, 0.41421356, 2.0, 1e-3, 1e-9, 20.0, 88.5, 709.0], dtype)
    x = (base[:, None] * (1 + np.concatenate([k, -k]) * eps)[None, :]).astype(dtype).ravel()
    fi = np.finfo(dtype)
    big = np.array([fi.max / 2, fi.max / 3, np.sqrt(fi.max), np.sqrt(fi.max) * 0.999],
                   dtype)
    x = np.concatenate([x, big, np.nextafter(big, dtype(0))])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
@pytest.mark.parametrize("name", TRIG)
def test_trig_edges_and_lengths(name, wide):
    """Domain edges, formula switches and special values, in arrays of several lengths:
    JAX's loop computes a scalar, a short array and a vector loop's remainder with other
    machine code than the vector body (atan even with another formula)."""
    kf, jf = UNARY[name]
    dtype = np.float64 if wide else np.float32
    fi = np.finfo(dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, fi.smallest_subnormal,
                        -fi.smallest_subnormal, fi.tiny / 3, fi.tiny, fi.max, -fi.max],
                       dtype)
    # float32 asinh/acosh: XLA's scalar code (0-d, short arrays, a loop's remainder)
    # contracts another product than its vector loop; these inputs tell the two apart.
    special = np.concatenate([special, np.array([0.54855776, -4.9722238, 2.938416,
                                                 1.5861391, 88.11073], dtype)])
    with x64(wide):
        x = _near_one(dtype)
        assert_same_bits(kf(x[:x.size // 4 * 4]), np.asarray(jf()(x[:x.size // 4 * 4])), x,
                         f"{name} {dtype.__name__} edges")
        vals = np.concatenate([special, x[::41]])
        for v in np.concatenate([special, x[::163]]):   # 0-d: XLA's scalar code
            assert_same_bits(kf(v), np.asarray(jf()(v)), v, f"{name} {dtype.__name__} 0-d")
        for n in (2, 7, 17, 53):          # every value at every place of short arrays
            a = np.resize(vals, (-(-vals.size // n) + 1) * n).reshape(-1, n)
            for row in np.concatenate([a, np.roll(a, n // 2, axis=1)]):
                assert_same_bits(kf(row), np.asarray(jf()(row)), row,
                                 f"{name} {dtype.__name__} n={n}")


def test_issue_examples():
    assert_same_bits(knp.exp(1e-6) - 1, np.asarray(jnp.exp(1e-6) - 1), what="exp(1e-6) - 1")
    assert_same_bits(knp.sin(1.0), np.asarray(jnp.sin(1.0)), what="sin(1.0)")
    a = np.arange(63).reshape(7, 9) * 3
    assert_same_bits(knp.mean(a), np.asarray(jnp.mean(a)), what="mean int")
    assert float(knp.mean(a)) != 93.0       # JAX's 93.00001 (5859 * float32(1/63))
    assert_same_bits(knp.linspace(-20, 20, 200001), np.asarray(jnp.linspace(-20, 20, 200001)),
                     what="linspace(-20, 20, 200001)")


@pytest.mark.parametrize("name", ["exp", "sin", "tanh", "expm1"])
def test_shapes_and_layouts(name):
    """0-d values, Python scalars, strided views, and inputs large enough for threads."""
    kf, jf = UNARY[name]
    rng = np.random.default_rng(2)
    big = (rng.standard_normal(300_001) * 10).astype(np.float32)   # > the threaded size
    m = rng.standard_normal((40, 30)).astype(np.float32)
    for x in (np.float32(0.3), np.array(-1.25, np.float32), big, m.T, m[::3, 1::2], 0.7):
        assert_same_bits(kf(x), np.asarray(jf()(x)), what=f"{name} {np.shape(x)}")


def test_lax_level_and_reference_backend():
    """``lax`` calls use the same impls, and so does the reference backend (jit's first
    tier and ``kiln_backend='reference'``)."""
    x = sweep(np.float32, per_exponent=2)
    want = np.asarray(jax.lax.expm1(x))
    assert_same_bits(klax.expm1(x), want, x, "lax.expm1")
    old = kiln.config.kiln_backend
    kiln.config.update("kiln_backend", "reference")
    try:
        f = kiln.jit(lambda v: (knp.sin(v), knp.log1p(v), knn.sigmoid(v)))
        got = f(x)
    finally:
        kiln.config.update("kiln_backend", old)
    for g, jf in zip(got, (jnp.sin, jnp.log1p, jax.nn.sigmoid)):
        assert_same_bits(g, np.asarray(jf(x)), x, "reference backend")


@pytest.mark.parametrize("wide", [False, True], ids=["x32", "x64"])
def test_mean_of_int_matrices(wide):
    """Integer means: JAX sums in the float dtype and multiplies by the reciprocal of the
    count (XLA's rewrite of a division by a constant). Bit-exact whenever the float sum is
    exact (partial sums below 2**24 in float32), whatever the summation order."""
    rng = np.random.default_rng(3)
    mats = [np.arange(12).reshape(3, 4), np.arange(63).reshape(7, 9) * 3,
            rng.integers(-1000, 1000, (300, 70)), rng.integers(0, 100, (5, 6, 7)),
            np.arange(1000).reshape(10, 100)]
    dts = (np.int32, np.uint8, np.int64, np.bool_, np.int16)
    axes = (None, 0, -1, (0, 1))
    with x64(wide):
        for i, a in enumerate(mats):
            for j, dt in enumerate(dts):
                v = a.astype(dt)
                axis = axes[(i + j) % len(axes)]      # a rotating sample keeps this quick
                keepdims = (i + j) % 3 == 0
                want = np.asarray(jnp.mean(v, axis=axis, keepdims=keepdims))
                got = knp.mean(v, axis=axis, keepdims=keepdims)
                assert_same_bits(got, want, what=f"mean {a.shape} {dt} {axis}")


def test_mean_of_floats_uses_the_reciprocal():
    """Float means: the scale is JAX's (a multiplication by 1/n). Sums whose order does not
    matter (exact ones) give JAX's bits; XLA's own summation order is not reproduced."""
    v = (np.arange(60, dtype=np.float32) * 3).reshape(6, 10)   # exact sums
    for axis in (None, 0, 1):
        assert_same_bits(knp.mean(v, axis=axis), np.asarray(jnp.mean(v, axis=axis)),
                         what=f"mean float {axis}")
    with x64(True):
        w = v.astype(np.float64) / 7
        assert_same_bits(knp.mean(w[:, :1], axis=0), np.asarray(jnp.mean(w[:, :1], axis=0)))


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
@pytest.mark.parametrize("args,kw", [
    ((-20, 20, 200001), {}), ((0, 1, 7), {}), ((-5, 3, 1001), {}), ((1e-3, 1e3, 999), {}),
    ((0, 10, 50), {}), ((-1.7, 2.3, 1235), {}), ((0, 1, 10), {"endpoint": False}),
    ((2.5, -7.25, 64), {"endpoint": False}), ((0, 100, 33), {"dtype": np.int32}),
    ((1, 2, 5), {"dtype": np.float16}), ((0, 1, 1), {}), ((0, 1, 0), {}), ((3, 3, 4), {}),
])
def test_linspace(args, kw, wide):
    if _AVX512 and not wide and args[2] > 32 and (args[2] - 1) % 32:
        pytest.xfail(_AVX512_LINSPACE)
    with x64(wide):
        want = np.asarray(jnp.linspace(*args, **kw))
        assert_same_bits(knp.linspace(*args, **kw), want, what=f"linspace{args}{kw}")


def test_linspace_retstep_and_vector_bounds():
    if _AVX512:
        pytest.xfail(_AVX512_LINSPACE)
    got, step = knp.linspace(-20, 20, 2001, retstep=True)
    want, wstep = jnp.linspace(-20, 20, 2001, retstep=True)
    assert_same_bits(got, np.asarray(want), what="linspace retstep")
    assert_same_bits(step, np.asarray(wstep), what="linspace step")
    a = np.array([0.0, 1.0, -2.5], np.float32)
    b = np.array([1.0, 5.0, 3.25], np.float32)
    assert_same_bits(knp.linspace(a, b, 9), np.asarray(jnp.linspace(a, b, 9)),
                     what="linspace vector bounds")
    # Mixed broadcasts: XLA may contract another multiply-add: one rounding of the
    # largest term apart (many ulps only where samples cross zero).
    got = np.asarray(knp.linspace(a, 7.5, 100, axis=1))
    want = np.asarray(jnp.linspace(a, 7.5, 100, axis=1))
    np.testing.assert_allclose(got, want, rtol=0, atol=2 * 7.5 * np.finfo(np.float32).eps)


def test_jit_matches_eager():
    """Compiled code uses the same formulas: jit and eager agree (sync compile)."""
    x = sweep(np.float32, per_exponent=2)
    f = kiln.jit(lambda v: (knp.expm1(v), knp.exp(v), knp.sin(v), knp.tanh(v)))
    old = kiln.config.kiln_compile
    kiln.config.update("kiln_compile", "sync")
    try:
        got = f(x)
    finally:
        kiln.config.update("kiln_compile", old)
    for g, kf in zip(got, (knp.expm1, knp.exp, knp.sin, knp.tanh)):
        assert_same_bits(g, np.asarray(kf(x)), x, "jit vs eager")
