"""kiln.random against JAX's bits: stored references (always) and live jax (when installed).

Every case of ``tests/data/random_reference_cases.py`` runs in x32 and x64 and in both
settings of ``jax_threefry_partitionable``. ``"exact"`` cases must equal JAX's output
bit for bit; ``"hw"`` cases (gamma family) are bit-exact where the processor's
reciprocal-square-root estimate is the one the reference was made with and agree to
a few ulps elsewhere.
"""
import os
import sys

import numpy as np
import pytest

import kiln
import kiln.random as kr
from kiln.random import _native

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data"))
from random_reference_cases import CASES, CONFIGS, SEED, config_name  # noqa: E402

_REF_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "random_reference.npz")
_REF = np.load(_REF_PATH) if os.path.exists(_REF_PATH) else None


def _cpu_id():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _has_fma():
    try:
        with open("/proc/cpuinfo") as f:
            return " fma " in f.read()
    except OSError:
        return False


@pytest.fixture(params=CONFIGS, ids=[config_name(*c) for c in CONFIGS])
def config(request):
    x64, part = request.param
    old = (kiln.config.jax_enable_x64, kiln.config.jax_threefry_partitionable)
    kiln.config.update("jax_enable_x64", x64)
    kiln.config.update("jax_threefry_partitionable", part)
    try:
        yield request.param
    finally:
        kiln.config.update("jax_enable_x64", old[0])
        kiln.config.update("jax_threefry_partitionable", old[1])


def _kiln_out(fn):
    out = fn(kr, kr.PRNGKey(SEED))
    if isinstance(out, kr.PRNGKeyArray):
        out = kr.key_data(out)
    return np.asarray(out)


def _same_bits(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc" or a.dtype.name == "bfloat16":
        af, bf = a.astype(np.complex128), b.astype(np.complex128)
        return bool(np.all((af == bf) | (np.isnan(af) & np.isnan(bf))))
    return bool(np.array_equal(a, b))


def _check(name, kind, got, want, exact_hw):
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    # float64 "hw" samples need AVX-512's rsqrt14 estimate, as XLA uses it.
    if kind == "hw" and got.dtype == np.float64 and not _native.has_rsqrt14():
        exact_hw = False
    if kind == "exact" or (kind == "hw" and exact_hw):
        if not _same_bits(got, want):
            bad = np.nonzero(np.asarray(got != want).ravel())[0]
            raise AssertionError(f"{name}: {bad.size} of {got.size} elements differ; first at "
                                 f"{bad[:5]}: {got.ravel()[bad[:5]]} vs {want.ravel()[bad[:5]]}")
        return
    # Close: at least 95% of the elements within 1e-5 (float32) relative error; an
    # accept/reject decision that flips can change a few samples entirely.
    tol = 1e-5 if got.dtype.itemsize <= 4 else 1e-12
    g, w = got.astype(np.float64), want.astype(np.float64)
    ok = np.isclose(g, w, rtol=tol, atol=tol) | (np.isnan(g) & np.isnan(w))
    assert ok.mean() >= 0.95, (name, ok.mean())


@pytest.mark.skipif(_REF is None, reason="tests/data/random_reference.npz is missing")
@pytest.mark.parametrize("name,fn,kind", CASES, ids=[c[0] for c in CASES])
def test_stored_reference(config, name, fn, kind):
    want = _REF[f"{config_name(*config)}/{name}"]
    if want.dtype.kind == "V" and want.dtype.itemsize == 2:
        want = want.view(kiln.dtypes.bfloat16)  # npz stores bfloat16 as raw 2-byte records
    exact_hw = (_native.has_rsqrt_estimate() and
                str(_REF["__cpu__"]) == _cpu_id())
    _check(name, kind, _kiln_out(fn), want, exact_hw)


try:
    import jax
    import jax.random as jr
except ImportError:  # pragma: no cover
    jax = None

_LIVE_CONFIGS = [(False, True), (True, True)]


@pytest.fixture(params=_LIVE_CONFIGS, ids=[config_name(*c) for c in _LIVE_CONFIGS])
def live_config(request):
    x64, part = request.param
    old = (kiln.config.jax_enable_x64, kiln.config.jax_threefry_partitionable)
    jold = (jax.config.jax_enable_x64, jax.config.jax_threefry_partitionable)
    kiln.config.update("jax_enable_x64", x64)
    kiln.config.update("jax_threefry_partitionable", part)
    jax.config.update("jax_enable_x64", x64)
    jax.config.update("jax_threefry_partitionable", part)
    try:
        yield request.param
    finally:
        kiln.config.update("jax_enable_x64", old[0])
        kiln.config.update("jax_threefry_partitionable", old[1])
        jax.config.update("jax_enable_x64", jold[0])
        jax.config.update("jax_threefry_partitionable", jold[1])


# The stored reference covers every case in every tier; live JAX re-checks a few of each
# kind by default (one per sampler family whose bits depend on the processor: gamma's
# rsqrt estimate, bfloat16 rounding), the whole table (one XLA compile per case) in the
# full tier or with ``-m slow``.
_QUICK = {"split_5", "bits_u8", "uniform_bf16", "normal", "categorical", "gamma",
          "binomial_large"}
_LIVE_CASES = [pytest.param(*c, id=c[0], marks=() if c[0] in _QUICK else pytest.mark.slow)
               for c in CASES]


_RSQRT_REPRODUCED: list = []


def _xla_rsqrt_reproduced() -> bool:
    """Whether kiln's emulation of XLA's rsqrt (the processor's estimate plus two Newton
    steps; tests/random/test_random_xla_math.py) gives this machine's jax bits. Verified on
    Intel Sapphire Rapids; where it does not hold, the "hw" cases are held to "close"
    (the rsqrt test itself reports the difference)."""
    if not _RSQRT_REPRODUCED:
        x = np.random.default_rng(3).uniform(0.01, 100, 20_000).astype(np.float32)
        ok = np.array_equal(_native.rsqrt_f32(x), np.asarray(jax.jit(jax.lax.rsqrt)(x)))
        _RSQRT_REPRODUCED.append(bool(ok))
    return _RSQRT_REPRODUCED[0]


@pytest.mark.parity
@pytest.mark.skipif(jax is None, reason="jax is not installed")
@pytest.mark.skipif(not _has_fma(), reason="XLA's bits on processors without FMA differ")
@pytest.mark.parametrize("name,fn,kind", _LIVE_CASES)
def test_live_jax(live_config, name, fn, kind):
    want = fn(jr, jr.PRNGKey(SEED))
    if hasattr(want, "dtype") and jax.dtypes.issubdtype(want.dtype, jax.dtypes.prng_key):
        want = jr.key_data(want)
    _check(name, kind, _kiln_out(fn), np.asarray(want),
           _native.has_rsqrt_estimate() and _xla_rsqrt_reproduced())
