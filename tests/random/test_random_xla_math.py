"""kiln.random's XLA-exact math (log, log1p, exp, erf, erf_inv, fma, rsqrt) against
``jax.lax`` bit for bit, and its native kernels against its NumPy derivations."""
import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.random import _native
from kiln.random import _xla_math as xm

try:
    import jax
    import jax.numpy as jnp
except ImportError:  # pragma: no cover
    jax = None

_SPECIAL = np.array([0, -0.0, 1e-45, -1e-45, 1e-39, 1, -1, 2, -2, np.inf, -np.inf, np.nan, 0.5,
                     -0.5, 1e-8, -1e-8, 3e38], np.float64)


def _inputs(kind, n=200_000, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "pos":
        x = np.concatenate([rng.uniform(0, 5, n), np.exp(rng.uniform(-80, 80, n // 10))])
    elif kind == "unit":
        x = np.concatenate([rng.uniform(-1, 1, n), 1 - np.exp(rng.uniform(-40, 0, n // 10)),
                            rng.uniform(-1e-3, 1e-3, n // 10)])
    elif kind == "negunit":
        x = -np.abs(_inputs("unit", n, seed))
    else:
        x = np.concatenate([rng.uniform(-100, 100, n), rng.uniform(-5, 5, n)])
    return np.concatenate([x, _SPECIAL])


def _same(a, b):
    a = np.asarray(a).astype(np.float64)
    b = np.asarray(b).astype(np.float64)
    return (a == b) | (np.isnan(a) & np.isnan(b))


_FUNCS = [("log", "pos"), ("log1p", "negunit"), ("log1p", "pos"), ("exp", "wide"),
          ("erf_inv", "unit"), ("erf", "wide")]
_DTYPES = ["float32", "float64", "float16", "bfloat16"]


@pytest.mark.parametrize("fname,kind", _FUNCS, ids=[f"{f}-{k}" for f, k in _FUNCS])
@pytest.mark.parametrize("dtype", _DTYPES)
def test_native_matches_numpy(fname, kind, dtype):
    if _native.lib() is None:
        pytest.skip("no native kernels")
    if fname == "erf" and dtype == "float64":
        pytest.skip("float64 erf is SciPy's on both paths")
    with np.errstate(over="ignore"):
        x = _inputs(kind, 20_000).astype(dtype)
    fn = getattr(xm, fname)
    x32 = x.astype(np.float32) if dtype != "float64" else x
    ref = (fn.numpy64 if dtype == "float64" else fn.numpy32)(x32)
    got = fn(x)
    with np.errstate(over="ignore"):
        if dtype == "float64" and fname in ("log", "log1p", "erf_inv"):
            # float64 log is the C library's natively (as XLA's) and NumPy's in the
            # fallback; they may differ in the last bit.
            np.testing.assert_allclose(got, np.asarray(ref), rtol=4e-16, atol=0)
        else:
            assert _same(got, np.asarray(ref).astype(x.dtype)).all()


_JAX_FUNCS = {"log": lambda: jnp.log, "log1p": lambda: jnp.log1p, "exp": lambda: jnp.exp,
              "erf_inv": lambda: jax.lax.erf_inv, "erf": lambda: jax.lax.erf}


def _has_fma():
    try:
        with open("/proc/cpuinfo") as f:
            return " fma " in f.read()
    except OSError:
        return False


@pytest.mark.parity
@pytest.mark.skipif(jax is None, reason="jax is not installed")
@pytest.mark.skipif(not _has_fma(), reason="XLA's bits on processors without FMA differ")
@pytest.mark.parametrize("fname,kind", _FUNCS, ids=[f"{f}-{k}" for f, k in _FUNCS])
@pytest.mark.parametrize("dtype", _DTYPES)
def test_matches_jax(fname, kind, dtype):
    if fname == "erf" and dtype == "float64":
        pytest.skip("XLA's float64 erf is not reproduced")
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        with np.errstate(over="ignore"):
            x = _inputs(kind).astype(dtype)
        want = np.asarray(jax.jit(_JAX_FUNCS[fname]())(x))
    finally:
        jax.config.update("jax_enable_x64", old)
    got = getattr(xm, fname)(x)
    same = _same(got, want)
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parity
@pytest.mark.skipif(jax is None, reason="jax is not installed")
def _intel() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return "GenuineIntel" in f.read(4096)
    except OSError:
        return False


def _assert_rsqrt_equal(got, want):
    # XLA's rsqrt refinement (two fused Newton steps) was verified on Intel Sapphire
    # Rapids with jax 0.10.2; the AMD machine of earlier sessions agreed with one step.
    # Elsewhere a difference is reported as an expected failure, not hidden.
    same = np.array_equal(got, want, equal_nan=True)
    if not same and not _intel():
        pytest.xfail("XLA's rsqrt on this (non-Intel) processor is not the two-step "
                     "refinement kiln reproduces; gamma-family samples agree to an ulp")
    np.testing.assert_array_equal(got, want)


def test_rsqrt_matches_jax():
    if not _native.has_rsqrt_estimate():
        pytest.skip("no native rsqrt estimate on this machine")
    x = np.random.default_rng(1).uniform(0.01, 100, 100_000).astype(np.float32)
    want = np.asarray(jax.jit(jax.lax.rsqrt)(x))
    _assert_rsqrt_equal(_native.rsqrt_f32(x), want)


def test_rsqrt_f64_matches_jax():
    if not _native.has_rsqrt14():
        pytest.skip("no AVX-512 rsqrt14 estimate on this machine")
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        x = np.concatenate([np.random.default_rng(2).uniform(1e-30, 1e30, 50_000),
                            [0.0, -0.0, np.inf, -1.0, 1e-310, 1e300]])
        want = np.asarray(jax.jit(jax.lax.rsqrt)(x))
    finally:
        jax.config.update("jax_enable_x64", old)
    _assert_rsqrt_equal(_native.rsqrt_f64(x), want)


def test_fma_is_fused():
    a = np.float32(1 + 2 ** -12)
    b = np.float32(1 - 2 ** -12)
    c = np.float32(-1)
    # a*b = 1 - 2**-24 exactly; rounded to float32 first it would be 1 and the sum 0.
    assert float(xm._fma_impl(np.array(a), np.array(b), np.array(c))) == -(2.0 ** -24)
    big = np.full(100, a)
    np.testing.assert_array_equal(xm._fma_impl(big, big * 0 + b, np.full(100, c)),
                                  np.full(100, -(2.0 ** -24), np.float32))
    a64, b64 = 1 + 2.0 ** -30, 1 - 2.0 ** -30
    assert float(xm._fma64(np.array(a64), np.array(b64), np.array(-1.0))) == -(2.0 ** -60)


def test_primitives_jit_vmap_grad():
    x = np.linspace(-0.9, 0.9, 7, dtype=np.float32)
    for p, fn in [(xm.xla_erf_inv_p, xm.erf_inv), (xm.xla_log1p_p, xm.log1p),
                  (xm.xla_exp_p, xm.exp), (xm.xla_erf_p, xm.erf)]:
        np.testing.assert_array_equal(np.asarray(kiln.jit(p.bind)(x)), fn(x))
        np.testing.assert_array_equal(np.asarray(kiln.vmap(p.bind)(x)), fn(x))
    g = kiln.grad(lambda v: xm.xla_erf_inv_p.bind(v))(np.float32(0.3))
    from scipy import special
    np.testing.assert_allclose(float(g), np.sqrt(np.pi) / 2 * np.exp(special.erfinv(0.3) ** 2),
                               rtol=1e-5)
    g = kiln.grad(lambda v: xm.xla_log_p.bind(v))(np.float32(2.0))
    np.testing.assert_allclose(float(g), 0.5)
    bf = np.linspace(0.1, 2, 5).astype(ml_dtypes.bfloat16)
    assert np.asarray(kiln.jit(xm.xla_log_p.bind)(bf)).dtype == ml_dtypes.bfloat16
