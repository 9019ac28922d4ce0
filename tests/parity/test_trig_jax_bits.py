"""Compiled float32 ``sin``/``cos``/``tan`` give JAX's bits (``ksin32``/``kcos32``/
``ktan32``, ``kiln/compiler/render/trig_math.py``; the C library's functions where its
probe fails).

Sweeps every float32 exponent (``m * 2**e`` for random mantissas, subnormals to the
largest finite, both signs) plus the special values, dense runs around the algorithm's
thresholds (2^-13, 2^-12, 0.6744, pi/4, 0.75, 120) and near multiples of pi/2 up to 1e5, through ``jax.jit``
and ``kiln.jit`` alone and inside fused expressions and a ``fori_loop``; bits compared
exactly (NaNs compare equal whatever their payload).
"""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln import lax as klax
from kiln.compiler.render import trig_math

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def _sweep():
    rng = np.random.default_rng(11)
    e = np.repeat(np.arange(256, dtype=np.uint32), 128)
    m = rng.integers(0, 1 << 23, e.size, dtype=np.uint32)
    pos = ((e << 23) | m).view(np.float32)
    edges = np.array([2.0**-13, 2.0**-12, 0.6744, np.pi / 4, 0.75, 120.0, 2.0**-126, 3.4e38],
                     np.float32).view(np.uint32)
    near = (edges[:, None] + np.arange(-300, 300, dtype=np.int64)[None, :]).ravel()
    near = near.astype(np.uint32).view(np.float32)
    k = np.arange(1, 60000, 7, dtype=np.float64)
    halfpi = (k * (np.pi / 2)).astype(np.float32)
    special = np.array([0.0, np.inf, np.nan, 1e-45, np.float32(np.finfo(np.float32).tiny)],
                       np.float32)
    x = np.concatenate([pos, near, halfpi, np.nextafter(halfpi, np.float32(np.inf)), special])
    return np.concatenate([x, -x])


def _same(got, want):
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype == np.float32
    assert np.array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    bad = np.flatnonzero(g[ok].view(np.uint32) != w[ok].view(np.uint32))
    assert bad.size == 0, f"{bad.size} differ, e.g. {g[ok][bad[:5]]} vs {w[ok][bad[:5]]}"


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_jit_bits_over_every_exponent(name):
    x = _sweep()
    f = kiln.jit(getattr(knp, name))
    if trig_math.usable(name):                       # not vacuous: the vector code ran
        assert trig_math.FUNCTIONS[name] + "(" in f.lower(x).compile().as_text()
    _same(f(x), jax.jit(getattr(jnp, name))(x))


def test_fused_expression_bits():
    x = _sweep()

    def f(np_):
        return lambda v: np_.sin(v) * np_.cos(v * 0.5) + np_.tan(v + 1.0)
    _same(kiln.jit(f(knp))(x), jax.jit(f(jnp))(x))


def test_fori_loop_with_sin_bits():
    x = np.linspace(-30, 30, 16, dtype=np.float32)

    def run(lax, np_):
        return lambda v: lax.fori_loop(0, 200, lambda i, c: c * 0.99 + np_.sin(c) * 0.5, v)
    _same(kiln.jit(run(klax, knp))(x), jax.jit(run(jax.lax, jnp))(x))
