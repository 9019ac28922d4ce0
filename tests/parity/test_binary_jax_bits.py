"""Compiled float32 ``pow`` and ``atan2`` give JAX's bits (``kpow32``/``katan2_32``,
``kiln/compiler/render/binary_math.py``; the C library's functions where its probe
fails).

Sweeps every float32 exponent of both arguments (``m * 2**e`` for random mantissas,
subnormals to the largest finite, both signs) paired with random and structured
partners (pow: exponents where the result is finite and not 1, integers and halves;
atan2: ratios near 1, 2^+-60, x == +-1), and the grid of special values (zeros,
infinities, NaNs, +-1, subnormals, huge and tiny), through ``jax.jit`` and ``kiln.jit``
alone and fused; bits compared exactly, NaN payloads included.
"""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.compiler.render import binary_math

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 2.0, -2.0,
                     3.0, -3.0, 0.5, -0.5, 1e-45, -1e-45, 1e-39, 1.17549435e-38, 3.4e38,
                     -3.4e38, 16777217.0, -16777215.0, 1.0000001, 0.99999994, 127.5,
                     -149.5, 1e-30, 1e30], np.float32)


def _every_exponent(rng, per=48):
    e = np.repeat(np.arange(256, dtype=np.uint32), per)
    m = rng.integers(0, 1 << 23, e.size, dtype=np.uint32)
    s = rng.integers(0, 2, e.size, dtype=np.uint32) << 31
    return (s | (e << 23) | m).view(np.float32)


def _pairs(name):
    with np.errstate(all="ignore"):       # the products overflow on purpose
        return _make_pairs(name)


def _make_pairs(name):
    rng = np.random.default_rng(21 if name == "pow" else 22)
    a = _every_exponent(rng)
    n = a.size
    b_uniform = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    if name == "pow":
        band = (rng.uniform(-8, 8, n) * 2.0 ** rng.integers(-10, 4, n)).astype(np.float32)
        ints = (rng.integers(-40, 41, n) * np.where(rng.integers(0, 2, n), 0.5, 1)).astype(
            np.float32)
        b = [b_uniform, band, ints]
        b_of_a = [a, np.abs(a), a]
    else:
        ratio = (a * np.float32(2.0) ** rng.integers(-8, 9, n).astype(np.float32)).astype(
            np.float32)
        far = (a * np.float32(2.0) ** rng.choice([-61, -60, 60, 61], n).astype(
            np.float32)).astype(np.float32)
        ones = rng.choice(np.array([1.0, -1.0, 1.0000001], np.float32), n)
        b = [b_uniform, ratio, far, ones]
        b_of_a = [a, np.abs(a), a, a]
    x = np.concatenate(b_of_a)
    y = np.concatenate(b)
    gx, gy = np.meshgrid(_SPECIAL, _SPECIAL)
    sp = rng.choice(_SPECIAL, n)
    x = np.concatenate([x, gx.ravel(), sp, a])
    y = np.concatenate([y, gy.ravel(), a, sp])
    return x, y


def _same(got, want):
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype == np.float32
    bad = np.flatnonzero(g.view(np.uint32) != w.view(np.uint32))
    assert bad.size == 0, f"{bad.size} differ, e.g. {g[bad[:5]]} vs {w[bad[:5]]}"


@pytest.mark.parametrize("name,kf,jf", [("pow", knp.power, jnp.power),
                                        ("atan2", knp.arctan2, jnp.arctan2)])
def test_jit_bits_over_every_exponent(name, kf, jf):
    x, y = _pairs(name)
    f = kiln.jit(kf)
    if binary_math.usable(name):                     # not vacuous: the vector code ran
        assert binary_math.FUNCTIONS[name] + "(" in f.lower(x, y).compile().as_text()
    _same(f(x, y), jax.jit(jf)(x, y))


def test_fused_expression_bits():
    x, y = _pairs("pow")
    xa = np.abs(x)

    def f(np_, a, b):
        return np_.power(a, b * 0.5) * 2.0 + np_.arctan2(b, a - 1.0)
    _same(kiln.jit(lambda a, b: f(knp, a, b))(xa, y),
          jax.jit(lambda a, b: f(jnp, a, b))(xa, y))


@pytest.mark.parametrize("n", [1, 7, 16, 33])
def test_short_arrays(n):
    """Short arrays: the clones on partial vectors, the scalar remainder, and whatever
    JAX does for few elements."""
    x, y = _pairs("atan2")
    sl = slice(1000, 1000 + n)
    _same(kiln.jit(knp.arctan2)(x[sl], y[sl]), jax.jit(jnp.arctan2)(x[sl], y[sl]))
    _same(kiln.jit(knp.power)(x[sl], y[sl]), jax.jit(jnp.power)(x[sl], y[sl]))
