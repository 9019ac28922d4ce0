"""Denormal flushing of compiled programs against JAX 0.10.2's jit, bit for bit: XLA's
CPU runtime runs with DAZ/FTZ, and so does compiled kiln code (tests/compiler/test_ftz.py;
docs/compatibility.md, "Denormals")."""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

_CASES = {
    "x*0.5": lambda np_, x, y: x * 0.5,
    "x*1e10": lambda np_, x, y: x * 1e10,
    "x+y": lambda np_, x, y: x + y,
    "x*y": lambda np_, x, y: x * y,
    "exp(x)": lambda np_, x, y: np_.exp(x),
    "tanh(x)": lambda np_, x, y: np_.tanh(x),
    "x>0": lambda np_, x, y: x > 0,
    "max(x,0)": lambda np_, x, y: np_.maximum(x, 0),
    "sqrt(|x|)": lambda np_, x, y: np_.sqrt(np_.abs(x)),
    "sum(x)": lambda np_, x, y: x.sum(),
    "x*y+x": lambda np_, x, y: x * y + x,
}


def _all(np_):
    return lambda x, y: tuple(f(np_, x, y) for f in _CASES.values())


@pytest.fixture
def x64():
    old_k, old_j = kiln.config.jax_enable_x64, jax.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_x64", True)
    yield
    kiln.config.update("jax_enable_x64", old_k)
    jax.config.update("jax_enable_x64", old_j)


@pytest.mark.parametrize("dt,tiny", [(np.float32, 1e-40), (np.float64, 1e-310)])
@pytest.mark.parametrize("n", [7, 1 << 18])      # a short loop; a parallel one
def test_subnormals_match_jax_jit(dt, tiny, n, x64):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * tiny).astype(dt)          # mostly subnormal
    y = rng.standard_normal(n).astype(dt)
    want = jax.jit(_all(jnp))(x, y)
    got = kiln.jit(_all(knp))(x, y)
    for name, g, w in zip(_CASES, got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)
