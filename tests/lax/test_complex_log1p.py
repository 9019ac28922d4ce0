"""Complex ``log1p`` accurate near zero (``kiln/lax/_complex_log1p.py``): NumPy's is
``log(1 + z)`` (complex64 ``log1p(1e-5)`` came out 1.0014e-05); kiln's follows XLA's
expansion, JAX's bits over an exponent sweep, eager and under ``jit`` and ``grad``."""
from __future__ import annotations

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.lax as lax
import kiln.numpy as jnp

R = np.random.default_rng(12)


def _sweep(n=400):
    """Real and imaginary parts of every magnitude from 1e-20 to 1e20, both signs, plus
    the awkward ones: near -1, on the axes, huge, inf, nan."""
    re = R.standard_normal(n) * np.exp(R.uniform(-46, 46, n))
    im = R.standard_normal(n) * np.exp(R.uniform(-46, 46, n))
    extra = [1e-5, 1e-5 + 1e-5j, -1e-8 + 1e-4j, -0.9 + 0.05j, -1 + 1e-3j, -2 + 0j, 0j,
             -0.0 + 0j, 3 + 4j, 1e30 + 1e29j, -1e-7 + 0j, np.inf, -np.inf, np.nan,
             complex(0, np.inf)]
    return np.concatenate([re + 1j * im, np.array(extra)]).astype(np.complex64)


def test_small_arguments_are_accurate():
    """JAX's lax_test LazyConstantTest.testLog1pNearOne: within one ulp of the real
    log1p."""
    want = np.log1p(np.float32(1e-5))
    got = np.asarray(lax.log1p(np.complex64(1e-5)))
    np.testing.assert_array_almost_equal_nulp(want.astype(np.complex64), got)
    # 1 + 1e-7j: log|1+z| = y**2 / 2 = 5e-15, far below float32's spacing at 1.
    got = np.asarray(lax.log1p(np.complex64(1e-7j)))
    assert got.real == np.float32(5e-15) and got.imag == np.float32(1e-7)


def test_bits_match_jax_over_an_exponent_sweep():
    z = _sweep()
    jax = pytest.importorskip("jax")
    want = np.asarray(jax_result("log1p.sweep", lambda: jax.lax.log1p(z), z))
    for got in (lax.log1p(z), kiln.jit(lax.log1p)(z), jnp.log1p(z)):
        got = np.asarray(got)
        assert got.dtype == np.complex64
        np.testing.assert_array_equal(got.view(np.float32), want.view(np.float32))


def test_grad_is_one_over_one_plus_z():
    """JAX's convention for a real function of a complex argument: ``grad(real(f))`` of a
    holomorphic ``f`` is ``f'(z)`` itself (checked against JAX: 0.6897 + 0.2759j)."""
    z = np.complex64(0.25 - 0.5j)
    g = kiln.grad(lambda z: jnp.real(lax.log1p(z)))(z)
    np.testing.assert_allclose(np.asarray(g), 1 / (1 + z), rtol=1e-6)
