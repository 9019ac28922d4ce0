"""``kiln.scipy.linalg`` against ``jax.scipy.linalg`` (values, dtypes, gradients) and SciPy,
under ``jit`` and ``vmap``; ``expm`` in every Padé branch, batched and differentiated."""
from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
import scipy.linalg as sla
from _oracle import jax_result

import kiln
import kiln.numpy as knp
import kiln.scipy.linalg as ksl
from kiln.config import config_context

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jsl = pytest.importorskip("jax.scipy.linalg")

_rng = np.random.default_rng(11)


def _f32(*shape, shift=0.0):
    x = _rng.standard_normal(shape)
    if shift:
        x = x + shift * np.eye(shape[-2], shape[-1])
    return x.astype(np.float32)


def _spd(n, cplx=False):
    a = _rng.standard_normal((n, n)) + (1j * _rng.standard_normal((n, n)) if cplx else 0)
    q = np.linalg.qr(a)[0]
    return ((q * (1.0 + np.arange(n))) @ q.conj().T).astype(np.complex64 if cplx else
                                                               np.float32)


A = _f32(4, 4, shift=2.0)
B = _f32(4, 3)
BV = _f32(4)
TALL = _f32(5, 3)
SPD = _spd(4)
HPD = _spd(3, cplx=True)
C = (A + 1j * _f32(4, 4)).astype(np.complex64)
BATCH = _f32(2, 4, 4, shift=2.0)

CASES = []


def case(name, f, *args, grad=True, tol=1e-4):
    CASES.append((name, f, args, grad, tol))


for trans in (0, 1, 2, "N", "T", "C"):
    case(f"solve_triangular_trans{trans}",
         lambda s, a, b, t=trans: s.solve_triangular(a, b, trans=t, lower=True), A, B)
case("solve_triangular_upper_unit",
     lambda s, a, b: s.solve_triangular(a, b, unit_diagonal=True), A, B)
case("solve_triangular_vector", lambda s, a, b: s.solve_triangular(a, b), A, BV)
case("solve_triangular_c64", lambda s, a, b: s.solve_triangular(a, b, trans="C"), C, B)
case("solve_triangular_batched_a", lambda s, a, b: s.solve_triangular(a, b, lower=True),
     BATCH, B)
case("cholesky_upper", lambda s, x: s.cholesky(x), SPD)
case("cholesky_lower", lambda s, x: s.cholesky(x, lower=True), SPD)
case("cholesky_c64", lambda s, x: s.cholesky(x), HPD)
case("cho_factor", lambda s, x: s.cho_factor(x)[0], SPD)
case("cho_solve_upper", lambda s, x, b: s.cho_solve(s.cho_factor(x), b), SPD, B)
case("cho_solve_lower_vec", lambda s, x, b: s.cho_solve(s.cho_factor(x, lower=True), b),
     SPD, BV)
case("cho_solve_c64", lambda s, x, b: s.cho_solve(s.cho_factor(x), b), HPD, C[:3, :2])
case("lu", lambda s, x: s.lu(x), A)
case("lu_tall", lambda s, x: s.lu(x), TALL)
case("lu_wide_permute_l", lambda s, x: s.lu(x, permute_l=True), TALL.T)
case("lu_factor", lambda s, x: s.lu_factor(x), A)
for trans in (0, 1, 2):
    case(f"lu_solve_trans{trans}", lambda s, x, b, t=trans: s.lu_solve(s.lu_factor(x), b,
                                                                       trans=t), A, B)
case("lu_solve_vector", lambda s, x, b: s.lu_solve(s.lu_factor(x), b), A, BV)
case("lu_solve_c64", lambda s, x, b: s.lu_solve(s.lu_factor(x), b, trans=2), C, C[:, :2])
case("expm", lambda s, x: s.expm(x), A)
for scale in (0.001, 0.05, 0.3, 1.0, 5.0, 40.0):   # every Padé degree and the squarings
    case(f"expm_scale{scale}", lambda s, x, k=scale: s.expm(x * k), A / 4, tol=2e-4,
         grad=scale in (0.001, 40.0))
case("expm_c64", lambda s, x: s.expm(x), C / 2)
case("expm_batched", lambda s, x: s.expm(x), BATCH / 2)
case("expm_upper_triangular", lambda s, x: s.expm(x, upper_triangular=True),
     np.triu(A) / 2, grad=False)
case("expm_max_squarings_nan", lambda s, x: s.expm(x * 100, max_squarings=2), A, grad=False)
case("expm_frechet", lambda s, x, e: s.expm_frechet(x, e), A / 2, B[:, :1] * B[:, 1])
case("expm_frechet_only", lambda s, x, e: s.expm_frechet(x, e, compute_expm=False), A / 2,
     SPD / 4, grad=False)
case("block_diag", lambda s, a, b, c: s.block_diag(a, b, c), A, B, BV)
case("block_diag_scalars", lambda s, a: s.block_diag(a, 2.0, 3), BV[:2], grad=False)
case("eigh_values", lambda s, x: s.eigh(x, eigvals_only=True), SPD)
case("eigh_upper_recon",
     lambda s, x: (lambda w, v: (v * w) @ v.T)(*s.eigh(x, lower=False)), SPD)
case("svd_values", lambda s, x: s.svd(x, compute_uv=False), TALL)
case("svd_recon", lambda s, x: (lambda u, sv, vh: (u * sv) @ vh)(*s.svd(x, full_matrices=False)),
     TALL)
case("qr_full", lambda s, x: s.qr(x), TALL)
case("qr_economic", lambda s, x: s.qr(x, mode="economic"), TALL)
case("qr_r", lambda s, x: s.qr(x, mode="r"), TALL)
case("qr_pivoting", lambda s, x: s.qr(x, mode="economic", pivoting=True), TALL)
case("qr_r_pivoting", lambda s, x: s.qr(x, mode="r", pivoting=True), TALL)
case("inv", lambda s, x: s.inv(x), A)
case("det", lambda s, x: s.det(x), A)
for assume_a in ("gen", "sym", "her", "pos"):
    case(f"solve_{assume_a}", lambda s, x, b, a=assume_a: s.solve(x, b, assume_a=a), SPD, B)
case("solve_pos_lower_vector", lambda s, x, b: s.solve(x, b, assume_a="pos", lower=True),
     SPD, BV)
case("solve_pos_batched", lambda s, x, b: s.solve(x, b, assume_a="pos"),
     np.stack([SPD, 2 * SPD]), np.stack([B, B]))
case("polar_right", lambda s, x: s.polar(x), TALL, grad=False)
case("polar_left", lambda s, x: s.polar(x, side="left"), TALL.T, grad=False)
case("polar_svd", lambda s, x: s.polar(x, method="svd"), TALL)
case("polar_svd_left", lambda s, x: s.polar(x, side="left", method="svd"), TALL.T)
case("toeplitz", lambda s, c, r: s.toeplitz(c, r), BV, B[:, 0])
case("toeplitz_symmetric", lambda s, c: s.toeplitz(c), BV)
case("toeplitz_complex", lambda s, c: s.toeplitz(c), C[0], grad=False)
case("toeplitz_batched", lambda s, c, r: s.toeplitz(c, r), B.T, BV[:2])
case("hankel", lambda s, c, r: s.hankel(c, r), BV, B[:, 0][:3])
case("hankel_default", lambda s, c: s.hankel(c), BV)
case("circulant", lambda s, c: s.circulant(c), BV)
case("companion", lambda s, c: s.companion(c), BV + 3)
case("fiedler", lambda s, c: s.fiedler(c), BV)
case("hilbert", lambda s: s.hilbert(4), grad=False)
case("dft", lambda s: s.dft(5), grad=False)
case("dft_sqrtn", lambda s: s.dft(4, scale="sqrtn"), grad=False)
case("hessenberg", lambda s, x: s.hessenberg(x), A, grad=False)
case("hessenberg_q", lambda s, x: s.hessenberg(x, calc_q=True), A, grad=False)
case("hessenberg_q_batched", lambda s, x: s.hessenberg(x, calc_q=True), BATCH, grad=False)
case("schur_triangular_eigs",
     lambda s, x: s.schur(x, output="complex")[0][..., np.arange(4), np.arange(4)].real.sum(),
     SPD, grad=False)
case("schur_real_recon", lambda s, x: (lambda t, z: z @ t @ z.T)(*s.schur(x)), A, grad=False)
case("sqrtm_recon", lambda s, x: (lambda r: r @ r)(s.sqrtm(x)), SPD, grad=False)
case("sqrtm", lambda s, x: s.sqrtm(x), SPD, grad=False, tol=2e-4)


def _leaves(x):
    return jax.tree_util.tree_leaves(x)


def _assert_same(k, j, name, tol):
    kl, jl = _leaves(k), _leaves(j)
    assert len(kl) == len(jl), f"{name}: {len(kl)} outputs vs JAX {len(jl)}"
    for i, (a, b) in enumerate(zip(kl, jl)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"{name} output {i}: dtype {a.dtype} vs JAX {b.dtype}"
        assert a.shape == b.shape, f"{name} output {i}: shape {a.shape} vs JAX {b.shape}"
        finite = np.abs(b[np.isfinite(b)]) if b.dtype.kind in "fc" else np.zeros(0)
        scale = max(1.0, float(finite.max(initial=0.0)))
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True,
                                   err_msg=f"{name} output {i}")


def _scalarize(m, f, name, mod):
    def g(*xs):
        total = 0.0
        for i, leaf in enumerate(_leaves(f(mod, *xs))):
            if not m.issubdtype(leaf.dtype, m.inexact):
                continue
            w = np.random.default_rng(zlib.crc32(f"{name}/{i}".encode())).standard_normal(
                np.shape(leaf)).astype(np.float32)
            total = total + m.sum(m.real(leaf) * w)
            if m.iscomplexobj(leaf):
                total = total + m.sum(m.imag(leaf) * w[::-1])
        return total
    return g


def _ids(cases):
    return [c[0] for c in cases]


@pytest.mark.parametrize("name,f,args,grad,tol", CASES, ids=_ids(CASES))
def test_value_parity(name, f, args, grad, tol):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref = jax_result(f"value.{name}", lambda: jax.jit(lambda *xs: f(jsl, *xs))(*args),
                         args)
        _assert_same(f(ksl, *args), ref, name, tol)


@pytest.mark.parametrize("name,f,args,grad,tol", CASES, ids=_ids(CASES))
def test_jit(name, f, args, grad, tol):
    eager = f(ksl, *args)
    jitted = kiln.jit(lambda *xs: f(ksl, *xs))(*args)
    _assert_same(jitted, eager, name, 1e-5)


_GRAD = [c for c in CASES if c[3]]


@pytest.mark.parametrize("name,f,args,grad,tol", _GRAD, ids=_ids(_GRAD))
def test_grad_parity(name, f, args, grad, tol):
    argnums = tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind in "fc")
    gk = kiln.grad(_scalarize(knp, f, name, ksl), argnums=argnums)(*args)
    gj = jax_result(f"grad.{name}", lambda: jax.jit(jax.grad(
        _scalarize(jnp, f, name, jsl), argnums=argnums))(*args), args)
    _assert_same(gk, gj, name, 2e-3)


_VMAP = [c for c in _GRAD if c[2] and np.ndim(c[2][0]) >= 1 and not c[0].startswith(
    ("block_diag", "toeplitz_batched"))]


@pytest.mark.parametrize("name,f,args,grad,tol", _VMAP, ids=_ids(_VMAP))
def test_vmap(name, f, args, grad, tol):
    x0, rest = args[0], args[1:]
    stacked = np.stack([x0, (x0 * 0.9).astype(x0.dtype)])
    got = kiln.vmap(lambda x: f(ksl, x, *rest))(stacked)
    for k in range(2):
        want = f(ksl, stacked[k], *rest)
        for g, w in zip(_leaves(got), _leaves(want)):
            np.testing.assert_allclose(np.asarray(g)[k], np.asarray(w), rtol=1e-5, atol=1e-5,
                                       equal_nan=True, err_msg=name)


def test_against_scipy():
    np.testing.assert_allclose(np.asarray(ksl.expm(A)), sla.expm(A.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)
    with config_context(jax_enable_x64=True):
        a = A.astype(np.float64)
        for k in (1e-3, 0.1, 1.0, 10.0):
            np.testing.assert_allclose(np.asarray(ksl.expm(a * k)), sla.expm(a * k),
                                       rtol=1e-10, atol=1e-11)
        assert ksl.expm(a).dtype == np.float64
    p, l_, u = ksl.lu(TALL)
    np.testing.assert_allclose(np.asarray(p @ l_ @ u), TALL, atol=1e-5)
    for got, want in zip(ksl.lu(A), sla.lu(A)):
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ksl.sqrtm(SPD)), sla.sqrtm(SPD.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ksl.toeplitz(BV, B[:, 0])), sla.toeplitz(BV, B[:, 0]))
    np.testing.assert_allclose(np.asarray(ksl.block_diag(A, B)), sla.block_diag(A, B))
    h, q = ksl.hessenberg(A, calc_q=True)
    np.testing.assert_allclose(np.asarray(q @ h @ q.T), A, atol=1e-5)
    assert np.allclose(np.tril(np.asarray(h), -2), 0)
    t, z = ksl.schur(A)
    np.testing.assert_allclose(np.asarray(z @ t @ z.T), A, atol=1e-5)


def test_expm_grad_matches_frechet_and_hessian():
    e = _f32(4, 4)
    _, fr = ksl.expm_frechet(A / 2, e)
    jv = kiln.jvp(ksl.expm, (A / 2,), (e,))[1]
    np.testing.assert_allclose(np.asarray(fr), np.asarray(jv), rtol=1e-6)
    # second order: the Hessian against central differences of the gradient, in float64
    with config_context(jax_enable_x64=True):
        x0 = (A / 4).astype(np.float64)
        d = _f32(4, 4).astype(np.float64)

        def f(x):
            return knp.sum(ksl.expm(x) * np.arange(16.0).reshape(4, 4))
        h = np.asarray(kiln.hessian(f)(x0))
        g = kiln.grad(f)
        eps = 1e-5
        fd = (np.asarray(g(x0 + eps * d)) - np.asarray(g(x0 - eps * d))) / (2 * eps)
        np.testing.assert_allclose(np.tensordot(h, d, 2), fd, rtol=1e-6, atol=1e-6)


def test_expm_vmap_of_grad():
    xs = np.stack([A / 4, A / 2, A * 2])
    gk = kiln.vmap(kiln.grad(lambda x: knp.sum(ksl.expm(x))))(xs)
    gj = jax_result("expm_vmap_grad",
                    lambda: jax.jit(jax.vmap(jax.grad(lambda x: jnp.sum(jsl.expm(x)))))(xs), xs)
    np.testing.assert_allclose(np.asarray(gk), np.asarray(gj), rtol=2e-3, atol=2e-3)


def test_batched_1d_solve_warns_as_jax():
    with pytest.warns(FutureWarning):
        ksl.solve_triangular(BATCH, np.ones((2, 4), np.float32))
    with pytest.warns(FutureWarning):
        ksl.lu_solve(ksl.lu_factor(BATCH), np.ones((2, 4), np.float32))


@pytest.mark.parametrize("call,exc", [
    (lambda s: s.solve_triangular(A, B, trans=3), ValueError),
    (lambda s: s.solve(A, B, assume_a="bogus"), ValueError),
    (lambda s: s.qr(A, mode="bogus"), ValueError),
    (lambda s: s.schur(A, output="bogus"), ValueError),
    (lambda s: s.expm(B), ValueError),
    (lambda s: s.eigh(A, b=A), NotImplementedError),
    (lambda s: s.eigh(A, type=2), NotImplementedError),
    (lambda s: s.polar(BV), ValueError),
    (lambda s: s.polar(A, side="up"), ValueError),
    (lambda s: s.polar(TALL, side="left"), NotImplementedError),
    (lambda s: s.sqrtm(A, blocksize=2), NotImplementedError),
    (lambda s: s.block_diag(np.ones((2, 2, 2))), ValueError),
    (lambda s: s.expm_frechet(A, B), ValueError),
    (lambda s: s.dft(3, scale="bogus"), ValueError),
])
def test_errors_match_jax(call, exc):
    with pytest.raises(exc):
        call(jsl)
    with pytest.raises(exc):
        call(ksl)


def test_module_surface():
    import kiln.scipy as kscipy
    assert kscipy.linalg is ksl
    required = {"solve_triangular", "cho_factor", "cho_solve", "lu", "lu_factor", "lu_solve",
                "expm", "block_diag", "eigh", "svd", "qr", "inv", "det", "solve", "schur",
                "sqrtm", "cholesky", "polar", "toeplitz", "hessenberg"}
    assert required <= set(dir(ksl))
