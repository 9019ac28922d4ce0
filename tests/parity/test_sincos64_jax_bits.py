"""Compiled float64 ``sin``/``cos`` give JAX's bits (``ksin64``/``kcos64``,
``kiln/compiler/render/trig_math.py``; the C library's functions where their probe
fails or there are no SIMD clones).

With x64 enabled in both: every float64 exponent (``m * 2**e``, random mantissas,
subnormals to the largest finite, both signs), the special values, dense runs around
the algorithm's thresholds (2^-27, 2^-26, 0.126, 0.85546875, 2.426265, 105414350) and
near multiples of pi/2, through ``jax.jit`` and ``kiln.jit``, alone and fused; bits
compared exactly.
"""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.compiler.render import trig_math

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture()
def x64():
    old_k, old_j = kiln.config.jax_enable_x64, jax.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        kiln.config.update("jax_enable_x64", old_k)
        jax.config.update("jax_enable_x64", old_j)


def _sweep():
    rng = np.random.default_rng(13)
    e = np.repeat(np.arange(2048, dtype=np.uint64), 24)
    m = rng.integers(0, 1 << 52, e.size, dtype=np.uint64)
    pos = ((e << np.uint64(52)) | m).view(np.float64)
    edges = np.array([2.0**-27, 2.0**-26, 0.126, 0.85546875, 2.426265, 105414350.0,
                      np.pi / 4, 1.0, 100.0], np.float64).view(np.uint64)
    near = (edges[:, None] + np.arange(-200, 200, dtype=np.int64).astype(np.uint64)[None, :])
    near = near.ravel().view(np.float64)
    k = np.arange(1, 200000, 13, dtype=np.float64)
    halfpi = k * (np.pi / 2)
    special = np.array([0.0, np.inf, np.nan, 5e-324, 2.2250738585072014e-308, 1e300])
    x = np.concatenate([pos, near, halfpi, np.nextafter(halfpi, np.inf), special])
    return np.concatenate([x, -x])


def _same(got, want):
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype == np.float64
    bad = np.flatnonzero(g.view(np.uint64) != w.view(np.uint64))
    assert bad.size == 0, f"{bad.size} differ, e.g. {g[bad[:5]]} vs {w[bad[:5]]}"


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_jit_bits_over_every_exponent(x64, name):
    x = _sweep()
    f = kiln.jit(getattr(knp, name))
    if trig_math.usable64(name):                     # not vacuous: the vector code ran
        assert trig_math.FUNCTIONS64[name] + "(" in f.lower(x).compile().as_text()
    _same(f(x), jax.jit(getattr(jnp, name))(x))


def test_fused_expression_bits(x64):
    x = _sweep()

    def f(np_, v):
        return np_.sin(v) * 0.5 + np_.cos(v * 3.0)
    _same(kiln.jit(lambda v: f(knp, v))(x), jax.jit(lambda v: f(jnp, v))(x))
