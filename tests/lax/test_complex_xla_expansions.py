"""Complex functions computed with XLA's expansions rather than NumPy's: ``log1p``
accurate near zero (``kiln/lax/_complex_log1p.py``; NumPy's is ``log(1 + z)``: complex64
``log1p(1e-5)`` came out 1.0014e-05) and ``square`` (``(x - y) * (x + y)``, JAX's
``lax.square``, which ``jnp.square`` binds); JAX's bits over exponent sweeps, eager and
under ``jit`` and ``grad``."""
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
             complex(0, np.inf), 3e-20 + 1e-20j, 1e-40 + 1e-40j, -2e-39 + 1e-5j,
             0.5 + 1e-40j, 1e-45 + 2e-45j]
    # (the last five: subnormal results and operands, flushed as XLA's CPU backend does;
    # atan2 keeps a subnormal imaginary part it reads unflushed)
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


@pytest.mark.parametrize("name", ["log1p", "square"])
def test_bits_match_jax_over_an_exponent_sweep(name):
    z = _sweep()
    jax = pytest.importorskip("jax")
    want = np.asarray(jax_result(f"{name}.sweep", lambda: getattr(jax.lax, name)(z), z))
    f = getattr(lax, name)
    for got in (f(z), kiln.jit(f)(z), getattr(jnp, name)(z), kiln.vmap(f)(z)):
        got = np.asarray(got)
        assert got.dtype == np.complex64
        np.testing.assert_array_equal(got.view(np.float32), want.view(np.float32))


def test_grad_is_one_over_one_plus_z():
    """JAX's convention for a real function of a complex argument: ``grad(real(f))`` of a
    holomorphic ``f`` is ``f'(z)`` itself (checked against JAX: 0.6897 + 0.2759j)."""
    z = np.complex64(0.25 - 0.5j)
    g = kiln.grad(lambda z: jnp.real(lax.log1p(z)))(z)
    np.testing.assert_allclose(np.asarray(g), 1 / (1 + z), rtol=1e-6)


def test_jnp_square_binds_lax_square_as_jax():
    assert "square" in str(kiln.make_jaxpr(jnp.square)(np.float32(1)))
    assert "integer_pow" not in str(kiln.make_jaxpr(jnp.square)(np.int32(1)))
    # (0.001 + 1j)**2: x*x - y*y rounds to -0.999999, XLA's (x - y)*(x + y) to -0.99999905
    got = np.asarray(jnp.square(np.complex64(0.001 + 1j)))
    assert got.real == np.float32(-0.99999905) and got.imag == np.float32(0.002)
    # |x| == |y| with x finite: exactly 0 (NaN and inf keep the product's value)
    assert np.asarray(jnp.square(np.complex64(3 - 3j))).real == 0
    assert np.isnan(np.asarray(jnp.square(np.complex64(complex(np.inf, np.inf)))).real)


def test_square_real_and_integer_values_and_derivatives():
    x = np.arange(-4, 5, dtype=np.int32)
    assert np.array_equal(np.asarray(jnp.square(x)), x * x)
    xf = np.linspace(-3, 3, 7, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(kiln.jit(jnp.square)(xf)), xf * xf)
    assert float(kiln.grad(jnp.square)(3.0)) == 6.0
    np.testing.assert_array_equal(np.asarray(kiln.vmap(jnp.square)(xf)), xf * xf)
