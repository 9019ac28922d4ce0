"""``lax.linalg.tridiagonal_solve`` (issue 26): LAPACK gtsv's pivoting, batches, singular
systems (NaN), endpoints ignored, errors; ``jit``/``vmap``/``grad``; compared with a dense
solve and with JAX (values and gradients) when it is installed."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.lax import linalg as L

try:
    import jax
except ImportError:  # pragma: no cover
    jax = None


def _dense(dl, d, du):
    m = d.shape[-1]
    a = np.zeros(d.shape + (m,), d.dtype)
    idx = np.arange(m)
    a[..., idx, idx] = d
    a[..., idx[1:], idx[:-1]] = dl[..., 1:]
    a[..., idx[:-1], idx[1:]] = du[..., :-1]
    return a


def _case(shape, k, dtype, seed=0):
    rng = np.random.RandomState(seed)
    mk = (lambda s: rng.randn(*s) + 1j * rng.randn(*s)) if np.dtype(dtype).kind == "c" \
        else (lambda s: rng.randn(*s))
    d = (1.0 + np.abs(mk(shape))).astype(dtype)
    return mk(shape).astype(dtype), d, mk(shape).astype(dtype), mk(shape + (k,)).astype(dtype)


@pytest.mark.parametrize("shape,k,dtype", [((4,), 1, np.float32), ((3, 5), 2, np.float32),
                                           ((2, 3, 6), 3, np.complex64), ((2,), 1, np.float32)])
def test_against_dense_solve_and_jax(shape, k, dtype):
    dl, d, du, b = _case(shape, k, dtype)
    x = L.tridiagonal_solve(dl, d, du, b)
    assert x.shape == b.shape and x.dtype == b.dtype
    tol = 1e-4 if np.dtype(dtype).itemsize <= 8 else 1e-10
    np.testing.assert_allclose(_dense(dl, d, du) @ np.asarray(x), b, atol=tol * 10, rtol=tol)
    np.testing.assert_allclose(kiln.jit(L.tridiagonal_solve)(dl, d, du, b), x, rtol=tol,
                               atol=tol)
    if jax is not None:
        with jax.default_matmul_precision("float32"):
            ref = jax.lax.linalg.tridiagonal_solve(dl, d, du, b)
        np.testing.assert_allclose(x, np.asarray(ref), rtol=tol * 10, atol=tol * 10)


def test_pivoting_singular_and_endpoints():
    f = np.float32
    x = L.tridiagonal_solve(np.array([0, 2, -2, 3], f), np.array([1, 4, 1, -1], f),
                            np.array([2, -1, 1, 0], f), np.array([[1], [2], [3], [4]], f))
    np.testing.assert_allclose(x.ravel(), [8, -3.5, 0, -4], atol=1e-6)
    z = np.zeros(3, f)
    assert np.isnan(np.asarray(L.tridiagonal_solve(z, z, z, np.ones((3, 1), f)))).all()
    dl = np.linspace(-1, 1, 10, dtype=f)
    d = np.linspace(1, 2, 10, dtype=f)
    du = np.linspace(1, -1, 10, dtype=f)
    b = np.linspace(0.1, -0.1, 10, dtype=f)[:, None]
    dlz, duz = dl.copy(), du.copy()
    dlz[0] = duz[-1] = 0
    np.testing.assert_allclose(L.tridiagonal_solve(dl, d, du, b),
                               L.tridiagonal_solve(dlz, d, duz, b))


def test_errors():
    f = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="same shape"):
        L.tridiagonal_solve(f, f, np.ones(4, np.float32), np.ones((3, 1), np.float32))
    with pytest.raises(TypeError, match="leading ndim-1"):
        L.tridiagonal_solve(f, f, f, np.ones((4, 1), np.float32))


def test_vmap_and_grad():
    dl, d, du, b = _case((3, 5), 2, np.float32, seed=3)
    out = kiln.vmap(L.tridiagonal_solve)(dl, d, du, b)
    np.testing.assert_allclose(out, L.tridiagonal_solve(dl, d, du, b), rtol=1e-5)
    out_b = kiln.vmap(L.tridiagonal_solve, in_axes=(None, None, None, 0))(dl[0], d[0], du[0], b)
    for i in range(3):
        np.testing.assert_allclose(out_b[i], L.tridiagonal_solve(dl[0], d[0], du[0], b[i]),
                                   rtol=1e-5, atol=1e-6)

    def loss(dl, d, du, b):
        return (L.tridiagonal_solve(dl, d, du, b) ** 2).sum()
    g = kiln.grad(loss, argnums=(0, 1, 2, 3))(dl[0], d[0], du[0], b[0])
    eps = 1e-3
    e = np.zeros_like(d[0])
    e[2] = eps
    fd = (loss(dl[0], d[0] + e, du[0], b[0]) - loss(dl[0], d[0] - e, du[0], b[0])) / (2 * eps)
    np.testing.assert_allclose(g[1][2], fd, rtol=2e-2)
    if jax is not None:
        def jloss(dl, d, du, b):
            return (jax.lax.linalg.tridiagonal_solve(dl, d, du, b) ** 2).sum()
        jg = jax.grad(jloss, argnums=(0, 1, 2, 3))(dl[0], d[0], du[0], b[0])
        for mine, ref, name in zip(g, jg, "dl d du b".split()):
            ref = np.asarray(ref)
            if name == "dl":
                mine, ref = np.asarray(mine)[1:], ref[1:]
            if name == "du":
                mine, ref = np.asarray(mine)[:-1], ref[:-1]
            np.testing.assert_allclose(mine, ref, rtol=1e-3, atol=1e-4, err_msg=name)
    assert jnp.isfinite(g[3]).all()


# -- perturb_singular=True (LAPACK xLAGTF/xLAGTS-style pivoting and pivot perturbation) ----

_f32 = np.float32
_PERTURBED_CASES = [
    # singular (zero matrix; a 2x2 with equal rows): large finite solutions, JAX's values
    (np.zeros(3, _f32), np.zeros(3, _f32), np.zeros(3, _f32), np.ones((3, 1), _f32),
     np.full((3, 1), 8.507059e37, _f32)),
    (np.array([0, 1.], _f32), np.array([1, 3.], _f32), np.array([3, 0.], _f32),
     np.array([[1], [4.]], _f32), np.array([[-25165824.], [8388608.]], _f32)),
    # regular, needing row swaps
    (np.array([0, 2, -2, 3], _f32), np.array([1, 4, 1, -1], _f32),
     np.array([2, -1, 1, 0], _f32), np.array([[1], [2], [3], [4]], _f32),
     np.array([[8], [-3.5], [0], [-4]], _f32)),
    # tiny nonzero pivots: scaled, not perturbed
    (np.zeros(3, _f32), np.full(3, 1e-30, _f32), np.zeros(3, _f32), np.ones((3, 2), _f32),
     np.full((3, 2), 1e30, _f32)),
]


@pytest.mark.parametrize("case", range(len(_PERTURBED_CASES)))
def test_perturb_singular_values(case):
    dl, d, du, b, want = _PERTURBED_CASES[case]
    x = np.asarray(L.tridiagonal_solve(dl, d, du, b, perturb_singular=True))
    assert np.isfinite(x).all()
    np.testing.assert_allclose(x, want, rtol=1e-5)
    xj = kiln.jit(lambda *a: L.tridiagonal_solve(*a, perturb_singular=True))(dl, d, du, b)
    np.testing.assert_allclose(xj, want, rtol=1e-5)


@pytest.mark.parametrize("shape,k,dtype", [((1,), 1, np.float32), ((3, 5), 2, np.float32),
                                           ((2, 4), 2, np.complex64)])
def test_perturb_singular_regular_matches_dense_vmap_grad(shape, k, dtype):
    dl, d, du, b = _case(shape, k, dtype, seed=3)
    solve = lambda *a: L.tridiagonal_solve(*a, perturb_singular=True)  # noqa: E731
    x = solve(dl, d, du, b)
    np.testing.assert_allclose(x, np.linalg.solve(_dense(dl, d, du), b), rtol=1e-4,
                               atol=1e-5)
    if len(shape) == 2:
        np.testing.assert_allclose(kiln.vmap(solve)(dl, d, du, b), x, rtol=1e-5, atol=1e-6)
    g = kiln.grad(lambda d, b: (jnp.abs(solve(dl, d, du, b)) ** 2).sum(),
                  argnums=(0, 1))(d, b)
    g0 = kiln.grad(lambda d, b: (jnp.abs(L.tridiagonal_solve(dl, d, du, b)) ** 2).sum(),
                   argnums=(0, 1))(d, b)
    for a, r in zip(g, g0):
        np.testing.assert_allclose(a, r, rtol=1e-3, atol=1e-4)
