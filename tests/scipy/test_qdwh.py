"""QDWH polar decomposition (``kiln.scipy._qdwh``, ``jax._src.tpu.linalg.qdwh``), the SVD
built on it (``kiln.scipy._qdwh_svd``) and ``kiln.scipy.linalg.polar(method='qdwh')``.

Expected factors were computed once with JAX 0.10.2 (CPU) and stored; kiln runs the same
iteration (same weights, same iteration counts), with products and factorizations whose
last bits may differ, hence the tolerances."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.scipy import linalg as ksl
from kiln.scipy._qdwh import qdwh
from kiln.scipy._qdwh_svd import svd

A = np.array([[1., 2., 3.], [5., 4., 2.], [3., 2., 1.], [0.5, -1., 2.]], np.float32)
# jax._src.tpu.linalg.qdwh.qdwh(A), JAX 0.10.2: 4 iterations, converged
U_JAX = np.array([[-0.34321582, 0.52531034, 0.7651943],
                  [0.7040471, 0.47790927, 0.08522829],
                  [0.5389242, 0.11015165, 0.00897992],
                  [0.30997002, -0.6953549, 0.63806987]], np.float32)
H_JAX = np.array([[4.948777, 2.8976345, 1.5373107],
                  [2.8976345, 3.877916, 1.2511917],
                  [1.5373107, 1.2511917, 3.7511592]], np.float32)


def _rand(shape, dtype, seed=0):
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * r.standard_normal(shape)
    return x.astype(dtype)


def test_qdwh_matches_jax():
    u, h, k, conv = qdwh(A)
    np.testing.assert_allclose(u, U_JAX, atol=3e-7)
    np.testing.assert_allclose(h, H_JAX, rtol=2e-6)
    assert int(k) == 4 and bool(conv)
    assert u.dtype == np.float32 and h.dtype == np.float32


@pytest.mark.parametrize("max_iterations,eps,iters,converged",
                         [(2, None, 2, False), (None, 1e-3, 3, True)])
def test_qdwh_iteration_limits(max_iterations, eps, iters, converged):
    _, _, k, conv = qdwh(A, max_iterations=max_iterations, eps=eps)   # JAX: same counts
    assert int(k) == iters and bool(conv) is converged


_slow = pytest.mark.slow      # each case is another compiled program


@pytest.mark.parametrize("shape,dtype", [
    ((7, 3), np.complex64), pytest.param((6, 4), np.float32, marks=_slow),
    pytest.param((5, 5), np.float64, marks=_slow),
    pytest.param((4, 4), np.complex128, marks=_slow)])
def test_qdwh_factors(shape, dtype):
    with kiln.enable_x64(np.dtype(dtype).itemsize in (8, 16) and dtype != np.complex64):
        x = _rand(shape, dtype)
        u, h, _, conv = qdwh(x)
        assert u.dtype == dtype and h.dtype == dtype and bool(conv)
        u, h = np.asarray(u), np.asarray(h)
        tol = 1e-5 if np.finfo(dtype).eps > 1e-10 else 1e-12
        np.testing.assert_allclose(u.conj().T @ u, np.eye(shape[1]), atol=tol)
        np.testing.assert_allclose(h, h.conj().T, atol=tol)
        assert np.linalg.eigvalsh(h).min() > 0
        np.testing.assert_allclose(u @ h, x, atol=tol * 10)


def test_qdwh_dynamic_shape_masks_the_padding():
    x = _rand((5, 4), np.float32, seed=3)
    padded = np.zeros((8, 6), np.float32)
    padded[:5, :4] = x
    u, h, _, _ = qdwh(padded, dynamic_shape=(5, 4))
    u0, h0, _, _ = qdwh(x)
    np.testing.assert_allclose(np.asarray(u)[:5, :4], u0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(h)[:4, :4], h0, atol=1e-5)
    assert not np.asarray(u)[5:].any() and not np.asarray(u)[:, 4:].any()


def test_qdwh_errors():
    with pytest.raises(ValueError, match="M >= N"):
        qdwh(np.ones((2, 3), np.float32))
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda x, n: qdwh(x, max_iterations=n))(A, 3)


def test_polar_qdwh_both_sides_jit_vmap():
    u, p = ksl.polar(A)
    np.testing.assert_allclose(u, U_JAX, atol=3e-7)
    np.testing.assert_allclose(p, H_JAX, rtol=2e-6)
    ul, pl = ksl.polar(A.T, side="left")
    np.testing.assert_allclose(ul, U_JAX.T, atol=3e-7)
    np.testing.assert_allclose(pl, H_JAX, rtol=2e-6)
    uj, pj = kiln.jit(ksl.polar)(A)
    np.testing.assert_array_equal(uj, u)
    batch = np.stack([A, 2 * A])
    ub, pb = kiln.vmap(ksl.polar)(batch)
    np.testing.assert_allclose(ub[1], U_JAX, atol=3e-7)
    np.testing.assert_allclose(pb[1], 2 * H_JAX, rtol=2e-6)
    ub2, _ = ksl.polar(batch)          # leading dimensions are batch dimensions
    np.testing.assert_array_equal(ub2, ub)
    with pytest.raises(NotImplementedError, match="qdwh"):
        ksl.polar(A.T)


@pytest.mark.parametrize("shape,full_matrices", [
    ((6, 4), False), ((4, 6), True), pytest.param((5, 5), False, marks=_slow),
    pytest.param((12, 3), False, marks=_slow), pytest.param((12, 3), True, marks=_slow),
    pytest.param((6, 4), True, marks=_slow)])
def test_qdwh_svd(shape, full_matrices):
    x = _rand(shape, np.float32, seed=1)
    u, s, vh = svd(x, full_matrices)
    s_ref = np.linalg.svd(x, compute_uv=False)
    np.testing.assert_allclose(s, s_ref, rtol=2e-5, atol=2e-6)
    m, n = shape
    k = min(m, n)
    assert u.shape == ((m, m) if full_matrices else (m, k))
    assert vh.shape == ((n, n) if full_matrices else (k, n))
    u, vh = np.asarray(u), np.asarray(vh)
    np.testing.assert_allclose((u[:, :k] * s) @ vh[:k], x, atol=2e-5)
    np.testing.assert_allclose(u.T @ u, np.eye(u.shape[1]), atol=2e-5)
    np.testing.assert_array_equal(svd(x, full_matrices, compute_uv=False), s)


def test_qdwh_svd_subsets_rank_deficiency_and_nonfinite():
    x = _rand((6, 4), np.float32, seed=2)
    s_all = np.asarray(svd(x, False, compute_uv=False))
    s01 = svd(x, False, compute_uv=False, subset_by_index=(0, 2))
    np.testing.assert_allclose(s01, s_all[:2], rtol=1e-5)
    with pytest.raises(ValueError, match="empty index range"):
        svd(x, False, subset_by_index=(2, 2))
    with pytest.raises(ValueError, match="cannot be both"):
        svd(x, True, subset_by_index=(0, 2))
    low = np.outer(np.arange(1, 7), np.arange(1, 5)).astype(np.float32)     # rank 1
    u, s, vh = svd(low, False)
    np.testing.assert_allclose(np.asarray(u).T @ np.asarray(u), np.eye(4), atol=1e-5)
    np.testing.assert_allclose((np.asarray(u) * s) @ vh, low, atol=1e-4)
    bad = x.copy()
    bad[0, 0] = np.inf
    u, s, vh = svd(bad, False)
    assert np.isnan(np.asarray(s)).all() and np.isnan(np.asarray(u)).all()


def test_diag_keeps_weak_type():
    w = jnp.where(jnp.ones(3) > 0, 1, -1)
    assert w.weak_type and jnp.diag(w).weak_type
    assert not jnp.diag(jnp.ones(2)).weak_type
    assert kiln.jit(lambda x: jnp.diag(jnp.where(x > 0, 1, -1)))(jnp.ones(3)).weak_type


# ---- spectral divide and conquer eigh (jax._src.tpu.linalg.eigh) and its stack ----

def _hermitian(n, dtype, seed=0):
    x = _rand((n, n), dtype, seed)
    return (0.5 * (x + x.conj().T)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.complex64, pytest.param(np.float32, marks=_slow)])
def test_dac_eigh(dtype):
    from kiln.scipy._qdwh_eigh import eigh
    H = _hermitian(16, dtype)
    w, v = eigh(H, termination_size=1)
    assert w.dtype == np.float32 and v.dtype == dtype
    w, v = np.asarray(w), np.asarray(v)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(H), atol=2e-5)    # sorted
    np.testing.assert_allclose(H @ v, v * w, atol=2e-5)
    np.testing.assert_allclose(v.conj().T @ v, np.eye(16), atol=2e-5)
    # a subset by index; unsorted eigenvalues hold the same set
    w2, v2 = eigh(H, termination_size=1, subset_by_index=(14, 16))
    np.testing.assert_allclose(w2, w[14:], atol=2e-5)
    w3, _ = eigh(H, termination_size=1, sort_eigenvalues=False)
    np.testing.assert_allclose(np.sort(np.asarray(w3)), w, atol=2e-5)


def test_dac_eigh_small_and_errors():
    from kiln.scipy._qdwh_eigh import eigh
    H = _hermitian(5, np.float32, seed=4)
    padded = np.zeros((8, 8), np.float32)
    padded[:5, :5] = H
    w, v = eigh(padded, n=5)     # N <= termination_size: a dense eigh of the masked matrix
    np.testing.assert_allclose(w, np.sort(np.r_[np.linalg.eigvalsh(H), np.zeros(3)]),
                               atol=1e-5)
    with pytest.raises(TypeError, match="must be square"):
        eigh(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="greater or equal"):
        eigh(H, n=6)
    with pytest.raises(ValueError, match="empty index range"):
        eigh(H, subset_by_index=(3, 1))
    with pytest.raises(NotImplementedError, match="float16"):
        eigh(_hermitian(4, np.float16), termination_size=1)


def test_bounded_stack():
    from kiln.scipy._bounded_stack import Stack
    s = Stack.create(3, {"a": jnp.zeros((), jnp.int32), "b": jnp.zeros(2)})
    assert bool(s.empty())
    s = s.push({"a": jnp.int32(7), "b": jnp.ones(2)}).push({"a": jnp.int32(8),
                                                           "b": 2 * jnp.ones(2)})
    top, s = s.pop()
    assert int(top["a"]) == 8 and top["b"].tolist() == [2.0, 2.0]
    assert not bool(s.empty())

    def drain(stack):                      # a pytree through while_loop
        def body(c):
            (x, st), total = c
            x, st = st.pop()
            return (x, st), total + x["a"]
        init = (({"a": jnp.int32(0), "b": jnp.zeros(2)}, stack), jnp.int32(0))
        return kiln.lax.while_loop(lambda c: ~c[0][1].empty(), body, init)[1]
    assert int(kiln.jit(drain)(s)) == 7
