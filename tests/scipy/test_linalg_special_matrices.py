"""``jax.scipy.linalg`` special-matrix constructors (issue 26): ``pascal``, ``invpascal``,
``invhilbert``, ``helmert``, ``hadamard``, ``leslie``, ``fiedler_companion``,
``convolution_matrix`` against SciPy, against JAX (values and dtypes, when installed),
under ``jit``/``vmap``/``grad``, and their errors."""
import numpy as np
import pytest
import scipy.linalg as osp

import kiln
import kiln.scipy.linalg as L

try:
    import jax
    import jax.scipy.linalg as JL
except ImportError:  # pragma: no cover
    jax = JL = None


def _same_as_jax(name, *args, **kw):
    if JL is None:
        return
    mine = getattr(L, name)(*args, **kw)
    ref = getattr(JL, name)(*args, **kw)
    assert mine.dtype == ref.dtype and mine.shape == ref.shape
    np.testing.assert_allclose(np.asarray(mine), np.asarray(ref), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", [None, "lower", "upper"])
def test_pascal_invpascal(kind):
    np.testing.assert_allclose(L.pascal(6, kind), osp.pascal(6, kind or "symmetric",
                                                             exact=False), rtol=1e-5)
    np.testing.assert_allclose(L.invpascal(5, kind), osp.invpascal(5, kind or "symmetric",
                                                                   exact=False),
                               rtol=1e-4, atol=1e-4)
    _same_as_jax("pascal", 6, kind)
    _same_as_jax("invpascal", 5, kind)
    assert L.pascal(0).shape == (0, 0)
    np.testing.assert_allclose(kiln.jit(L.pascal, static_argnums=(0, 1))(4, kind),
                               L.pascal(4, kind))


def test_invhilbert_helmert_hadamard():
    np.testing.assert_allclose(L.invhilbert(5), osp.invhilbert(5), rtol=1e-3)
    for full in (False, True):
        np.testing.assert_allclose(L.helmert(5, full), osp.helmert(5, full), rtol=1e-6)
        _same_as_jax("helmert", 5, full)
    np.testing.assert_array_equal(L.hadamard(8), osp.hadamard(8))
    assert L.hadamard(4, np.float32).dtype == np.float32
    _same_as_jax("hadamard", 4)
    _same_as_jax("invhilbert", 4)


def test_errors():
    with pytest.raises(ValueError, match="positive power of 2"):
        L.hadamard(3)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        L.helmert(0)
    with pytest.raises(ValueError, match="Expected kind to be one of"):
        L.invpascal(3, kind="bad")
    with pytest.raises(ValueError, match="length of f along the last axis"):
        L.leslie(np.array([1.0]), np.array([]))
    with pytest.raises(ValueError, match="Incorrect lengths for f and s"):
        L.leslie(np.array([1., 2., 3.]), np.array([0.5]))
    with pytest.raises(ValueError, match="nonzero"):
        L.fiedler_companion(np.ones((2, 0)))
    with pytest.raises(ValueError, match="n must be a positive integer"):
        L.convolution_matrix(np.ones(3), 0)
    with pytest.raises(ValueError, match="mode must be one of"):
        L.convolution_matrix(np.ones(3), 3, mode="bad")
    with pytest.raises(ValueError, match="must be at least 1-dimensional"):
        L.convolution_matrix(np.float32(5.0), 3)
    with pytest.raises(ValueError, match=r"len\(a\) must be at least 1"):
        L.convolution_matrix(np.zeros((2, 0)), 3)


def test_leslie_batched_jit_grad():
    rng = np.random.RandomState(0)
    f, s = rng.rand(2, 4).astype(np.float32), rng.rand(2, 3).astype(np.float32)
    out = L.leslie(f, s)
    for b in range(2):
        np.testing.assert_allclose(out[b], osp.leslie(f[b], s[b]), rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(L.leslie)(f, s), out)
    np.testing.assert_allclose(kiln.vmap(L.leslie)(f, s), out)
    g = kiln.grad(lambda f: L.leslie(f, s[0]).sum())(f[0])
    np.testing.assert_allclose(g, np.ones(4))
    _same_as_jax("leslie", f, s)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8])
def test_fiedler_companion(n):
    a = np.random.RandomState(n).rand(n).astype(np.float32) + 0.5
    if n > 1:
        np.testing.assert_allclose(L.fiedler_companion(a), osp.fiedler_companion(a),
                                   rtol=1e-5)
    np.testing.assert_allclose(kiln.jit(L.fiedler_companion)(a), L.fiedler_companion(a))
    _same_as_jax("fiedler_companion", a)
    if n > 2:
        batch = np.stack([a, a + 1])
        np.testing.assert_allclose(kiln.vmap(L.fiedler_companion)(batch),
                                   L.fiedler_companion(batch), rtol=1e-6)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("m,n", [(1, 3), (3, 2), (4, 7), (5, 5)])
def test_convolution_matrix(mode, m, n):
    a = np.random.RandomState(m * 10 + n).rand(m).astype(np.float32)
    A = L.convolution_matrix(a, n, mode)
    np.testing.assert_allclose(A, osp.convolution_matrix(a, n, mode), rtol=1e-6)
    v = np.random.RandomState(1).rand(n).astype(np.float32)
    np.testing.assert_allclose(A @ v, np.convolve(a, v, mode), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.jit(L.convolution_matrix, static_argnums=(1, 2))(a, n,
                                                                                   mode), A)
    g = kiln.grad(lambda a: L.convolution_matrix(a, n, mode).sum())(a)
    assert g.shape == a.shape
    _same_as_jax("convolution_matrix", a, n, mode)
