"""``kiln.scipy.linalg.solve_sylvester`` against SciPy and ``jax.scipy.linalg``: both methods,
real and complex inputs, integer promotion, batching, jit, vmap, grad and errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

import kiln
import kiln.scipy.linalg as ksl

jax = pytest.importorskip("jax")
import jax.scipy.linalg as jsl  # noqa: E402

_rs = np.random.RandomState(0)


def _mats(m, n, dtype=np.float32, batch=()):
    a = _rs.randn(*batch, m, m) + 3 * np.eye(m)
    b = _rs.randn(*batch, n, n) + 3 * np.eye(n)
    c = _rs.randn(*batch, m, n)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * _rs.randn(*a.shape)
        c = c + 1j * _rs.randn(*c.shape)
    return a.astype(dtype), b.astype(dtype), c.astype(dtype)


def _same(a, b, rtol=1e-4, atol=1e-5):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("method", ["schur", "eigen"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_matches_scipy_and_jax(method, dtype):
    a, b, c = _mats(4, 3, dtype)
    x = ksl.solve_sylvester(a, b, c, method=method)
    _same(x, jsl.solve_sylvester(a, b, c, method=method))
    wide = np.complex128 if dtype == np.complex64 else np.float64
    ref = sla.solve_sylvester(a.astype(wide), b.astype(wide), c.astype(wide))
    np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(a @ x + x @ b), c, rtol=1e-4, atol=1e-4)


def test_float64_x64():
    jax.config.update("jax_enable_x64", True)
    kiln.config.update("jax_enable_x64", True)
    try:
        a, b, c = _mats(5, 2, np.float64)
        x = ksl.solve_sylvester(a, b, c)
        assert x.dtype == np.float64
        np.testing.assert_allclose(x, sla.solve_sylvester(a, b, c), rtol=1e-11, atol=1e-12)
        _same(x, jsl.solve_sylvester(a, b, c), rtol=1e-11, atol=1e-12)
    finally:
        jax.config.update("jax_enable_x64", False)
        kiln.config.update("jax_enable_x64", False)


def test_integer_inputs_promote_and_docstring_example():
    a = np.array([[1, 2], [3, 4]])
    b = np.array([[5, 6], [7, 8]])
    c = np.array([[6, 8], [10, 12]])
    _same(ksl.solve_sylvester(a, b, c), jsl.solve_sylvester(a, b, c))
    e = np.eye(2, dtype=np.int32)
    _same(ksl.solve_sylvester(e, e, np.ones((2, 2), np.int32)), np.full((2, 2), 0.5, np.float32))


def test_near_singular_gives_nan():
    a, b, c = _mats(3, 2)
    _same(ksl.solve_sylvester(a, b, c, tol=100.), jsl.solve_sylvester(a, b, c, tol=100.))
    assert np.isnan(np.asarray(ksl.solve_sylvester(a, b, c, tol=100.))).all()
    a = np.diag([1., 2.]).astype(np.float32)           # eig(a) + eig(-a) hits 0
    _same(ksl.solve_sylvester(a, -a, np.ones((2, 2), np.float32)),
          jsl.solve_sylvester(a, -a, np.ones((2, 2), np.float32)))


def test_batching_jit_vmap():
    a, b, c = _mats(3, 2, batch=(2,))
    x = ksl.solve_sylvester(a, b, c)
    _same(x, jsl.solve_sylvester(a, b, c))
    _same(ksl.solve_sylvester(a, b[0], c[1]), jsl.solve_sylvester(a, b[0], c[1]))
    _same(kiln.jit(ksl.solve_sylvester)(a, b, c), x, rtol=1e-6, atol=1e-6)
    _same(kiln.vmap(ksl.solve_sylvester, (0, None, 0))(a, b[0], c),
          jax.vmap(jsl.solve_sylvester, (0, None, 0))(a, b[0], c))
    f = kiln.jit(lambda a, b, c: ksl.solve_sylvester(a, b, c, method="eigen", tol=1e-6))
    _same(f(a, b, c), x)
    assert "solve_sylvester" in str(kiln.make_jaxpr(ksl.solve_sylvester)(a[0], b[0], c[0]))


def test_grad_wrt_c_and_undifferentiable_schur():
    a, b, c = _mats(3, 2)
    for method in ("schur", "eigen"):
        gk = kiln.grad(lambda c: ksl.solve_sylvester(a, b, c, method=method).sum())(c)
        gj = jax.grad(lambda c: jsl.solve_sylvester(a, b, c, method=method).sum())(c)
        _same(gk, gj)
    # As in JAX, the Schur decomposition has no derivative rule.
    with pytest.raises(NotImplementedError):
        kiln.grad(lambda a: ksl.solve_sylvester(a, b, c).sum())(a)
    with pytest.raises(NotImplementedError):
        jax.grad(lambda a: jsl.solve_sylvester(a, b, c).sum())(a)


def test_errors_match_jax():
    a, b, c = _mats(3, 2)
    for mod in (ksl, jsl):
        with pytest.raises(ValueError, match="Incompatible shapes for Sylvester equation"):
            mod.solve_sylvester(a, a, c)
        with pytest.raises(ValueError, match="Unrecognized method"):
            mod.solve_sylvester(a, b, c, method="qr")
