"""``jax.scipy.linalg.funm``, ``rsf2csf``, ``qr_multiply`` and ``lax.linalg.ormqr``
against SciPy / a dense ``Q`` (eager and jit)."""
import numpy as np
import pytest
import scipy.linalg as osp

import kiln
import kiln.numpy as jnp
import kiln.scipy.linalg as ksp
from kiln.lax import linalg as L


def _rand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.normal(size=shape)
    return x.astype(dtype)


@pytest.mark.parametrize("n,dtype", [(1, np.float32), (5, np.float32), (6, np.complex64)])
def test_rsf2csf_matches_scipy(n, dtype):
    t, z = _rand((n, n), dtype), _rand((n, n), dtype, 1)
    want = osp.rsf2csf(t, z)
    for f in (ksp.rsf2csf, kiln.jit(ksp.rsf2csf)):
        got = f(t, z)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=3e-4, atol=3e-4)
    tb, zb = ksp.rsf2csf(np.stack([t, t]), z)        # batch broadcast
    np.testing.assert_allclose(tb[1], want[0], rtol=3e-4, atol=3e-4)


def test_rsf2csf_of_real_schur_is_triangular():
    a = _rand((5, 5), np.float32, 2)
    tc, zc = ksp.rsf2csf(*ksp.schur(a))
    np.testing.assert_allclose(np.tril(np.asarray(tc), -1), 0, atol=1e-6)
    np.testing.assert_allclose(zc @ tc @ np.conj(np.asarray(zc)).T, a, atol=1e-4)


@pytest.mark.parametrize("disp", [True, False])
def test_funm_matches_scipy(disp):
    a = _rand((5, 5), np.float64, 3).astype(np.float32) + 5 * np.eye(5, dtype=np.float32)
    want = osp.funm(a.astype(np.float64), np.exp, disp=disp)
    got = ksp.funm(a, jnp.exp, disp=disp)
    if not disp:
        got, want = got[0], want[0]
    np.testing.assert_allclose(got, want, rtol=2e-4)
    np.testing.assert_allclose(got, osp.expm(a.astype(np.float64)), rtol=2e-4)
    np.testing.assert_allclose(kiln.jit(lambda x: ksp.funm(x, jnp.exp))(a), want, rtol=2e-4)


@pytest.mark.parametrize("shape,mode,pivoting", [((4, 3), "right", False),
                                                 ((4, 3), "left", True),
                                                 ((3, 5), "left", False),
                                                 ((2, 6, 4), "right", False)])
def test_qr_multiply(shape, mode, pivoting):
    m, n = shape[-2:]
    k = min(m, n)
    a = _rand(shape, np.float32)
    c = _rand(shape[:-2] + ((k, 2) if mode == "left" else (2, m)), np.float32, 1)
    out = ksp.qr_multiply(a, c, mode=mode, pivoting=pivoting)
    q, r, *p = ksp.qr(a, mode="economic", pivoting=pivoting)
    want = q @ c if mode == "left" else c @ q
    np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[1], r, rtol=1e-5, atol=1e-6)
    if not pivoting and len(shape) == 2:
        ref = osp.qr_multiply(a.astype(np.float64), c.astype(np.float64), mode=mode)
        np.testing.assert_allclose(np.abs(out[0]), np.abs(ref[0]), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="not compatible"):
        ksp.qr_multiply(a, c[..., :1, :1], mode=mode)


@pytest.mark.parametrize("a_shape,c_shape,left,dtype", [
    ((4, 3), (4, 2), True, np.float32), ((4, 3), (2, 4), False, np.complex64),
    ((3, 5), (3, 2), True, np.float32), ((2, 5, 4), (2, 5, 3), True, np.float32)])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr_matches_dense_q(a_shape, c_shape, left, dtype, transpose):
    a, c = _rand(a_shape, dtype), _rand(c_shape, dtype, 1)
    h, taus = L.geqrf(a)
    m, n = a_shape[-2:]
    hp = jnp.pad(h, [(0, 0)] * (h.ndim - 1) + [(0, m - n)]) if m > n else h[..., :m, :m]
    q = np.asarray(L.householder_product(hp, taus))
    if transpose:
        q = np.conj(np.swapaxes(q, -1, -2))
    want = q @ c if left else c @ q
    f = lambda h, t, c: L.ormqr(h, t, c, left=left, transpose=transpose)  # noqa: E731
    np.testing.assert_allclose(f(h, taus, c), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(kiln.jit(f)(h, taus, c), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="ormqr with left="):
        L.ormqr(h, taus, c[..., :1, :1], left=left)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_lapack_factorizations_refuse_half_precision(dtype):
    """As JAX on CPU (LAPACK has no half-precision routines); det and triangular_solve work."""
    a = (np.eye(3) + 0.1).astype(jnp.dtype(dtype))
    for f in (jnp.linalg.qr, jnp.linalg.cholesky, jnp.linalg.svd, jnp.linalg.eigh,
              jnp.linalg.inv, ksp.lu, ksp.schur):
        with pytest.raises(NotImplementedError, match="Unsupported dtype"):
            f(a)
    assert jnp.linalg.det(a).dtype == a.dtype
    assert L.triangular_solve(a, a).dtype == a.dtype


@pytest.mark.parametrize("symmetrize", [False, True])
def test_symmetric_product(symmetrize):
    a = _rand((3, 4, 5), np.float32)
    c = _rand((3, 4, 4), np.float32, 1)
    c = c + np.swapaxes(c, -1, -2)
    want = 2.0 * a @ np.swapaxes(a, -1, -2) + 0.5 * c
    f = lambda a, c: L.symmetric_product(a, c, alpha=2.0, beta=0.5,  # noqa: E731
                                         symmetrize_output=symmetrize)
    for g in (f, kiln.jit(f), kiln.vmap(f)):
        np.testing.assert_allclose(g(a, c), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="symmetric_update expects"):
        L.symmetric_product(a, c[..., :3, :3])
