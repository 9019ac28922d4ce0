"""``kiln.numpy.linalg`` and ``kiln.lax.linalg`` against JAX: values and dtypes (for
decompositions, quantities that do not depend on sign/phase conventions), ``jit``,
gradients (``kiln.grad`` vs ``jax.grad``), ``vmap`` vs a Python loop, plus errors and edge
cases (singular matrices, failed factorizations, broadcasting, x64).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from _oracle import jax_result
from _sampling import sample_cases

import kiln
import kiln.numpy as knp
from kiln.config import config_context
from kiln.lax import linalg as klax_linalg

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jlax_linalg = pytest.importorskip("jax.lax.linalg")

# ----------------------------------------------------------------------------------------------
# inputs

_rng = np.random.default_rng(1234)


def _f32(*shape, shift=0.0):
    x = _rng.standard_normal(shape)
    if shift and len(shape) >= 2:
        x = x + shift * np.eye(shape[-2], shape[-1])
    return x.astype(np.float32)


def _c64(*shape, shift=0.0):
    x = _rng.standard_normal(shape) + 1j * _rng.standard_normal(shape)
    if shift:
        x = x + shift * np.eye(shape[-2], shape[-1])
    return x.astype(np.complex64)


def _spd(n, cplx=False, batch=()):
    mats = []
    for _ in range(int(np.prod(batch, dtype=int))):
        a = _rng.standard_normal((n, n)) + (1j * _rng.standard_normal((n, n)) if cplx else 0)
        q = np.linalg.qr(a)[0]
        mats.append((q * (1.0 + np.arange(n))) @ q.conj().T)
    return np.stack(mats).reshape(batch + (n, n)).astype(np.complex64 if cplx else np.float32)


A = _f32(4, 4, shift=2.0)
A3 = _f32(3, 3, shift=2.0)
A5 = _f32(5, 5, shift=2.0)
B = _f32(4, 3)
BV = _f32(4)
TALL = _f32(5, 3)
WIDE = _f32(3, 5)
SPD = _spd(4)
HPD = _spd(3, cplx=True)
C = _c64(4, 4, shift=2.0)
BATCH = _f32(2, 4, 4, shift=2.0)
BATCH_SPD = _spd(3, batch=(2,))
# rank 3, with the zero pivot of its LU last (the case where the adjugate is recovered)
SING = np.array([[2, 1, 0, 1], [1, 3, 1, 0], [0, 1, 4, 1], [3, 4, 1, 1]], np.float32)
INT = (np.arange(16).reshape(4, 4) % 5 + np.eye(4, dtype=int) * 3).astype(np.int32)


def _recon_svd(m, x, **kw):
    u, s, vh = m.linalg.svd(x, full_matrices=False, **kw)
    return s, m.matmul(u * s[..., None, :].astype(u.dtype), vh)


def _recon_eigh(m, x, **kw):
    w, v = m.linalg.eigh(x, **kw)
    return w, m.matmul(v * m.exp(w / 4)[..., None, :].astype(v.dtype), m.conj(v.mT))


def _recon_eig(m, x):
    w, v = m.linalg.eig(x)
    return w, m.matmul(v * w[..., None, :], m.linalg.inv(v))


# (name, f(m, *args), args, check_grad)
CASES = [
    ("inv", lambda m, x: m.linalg.inv(x), (A,), True),
    ("inv_c64", lambda m, x: m.linalg.inv(x), (C,), True),
    ("inv_batched", lambda m, x: m.linalg.inv(x), (BATCH,), True),
    ("solve", lambda m, a, b: m.linalg.solve(a, b), (A, B), True),
    ("solve_vector", lambda m, a, b: m.linalg.solve(a, b), (A, BV), True),
    ("solve_broadcast", lambda m, a, b: m.linalg.solve(a, b), (BATCH, B), True),
    ("solve_int", lambda m, a, b: m.linalg.solve(a, b), (INT, B), False),
    ("det", lambda m, x: m.linalg.det(x), (A,), True),
    ("det_2x2", lambda m, x: m.linalg.det(x), (A[:2, :2],), True),
    ("det_3x3", lambda m, x: m.linalg.det(x), (A3,), True),
    ("det_5x5", lambda m, x: m.linalg.det(x), (A5,), True),
    ("det_singular", lambda m, x: m.linalg.det(x), (SING,), True),
    ("det_c64", lambda m, x: m.linalg.det(x), (C,), True),
    ("det_batched", lambda m, x: m.linalg.det(x), (BATCH,), True),
    ("det_int", lambda m, x: m.linalg.det(x), (INT,), False),
    ("slogdet", lambda m, x: m.linalg.slogdet(x), (A,), True),
    ("slogdet_qr", lambda m, x: m.linalg.slogdet(x, method="qr"), (A,), True),
    ("slogdet_c64", lambda m, x: m.linalg.slogdet(x), (C,), True),
    ("slogdet_singular", lambda m, x: m.linalg.slogdet(x), (SING,), False),
    ("cholesky", lambda m, x: m.linalg.cholesky(x), (SPD,), True),
    ("cholesky_upper", lambda m, x: m.linalg.cholesky(x, upper=True), (SPD,), True),
    ("cholesky_c64", lambda m, x: m.linalg.cholesky(x), (HPD,), True),
    ("cholesky_batched", lambda m, x: m.linalg.cholesky(x), (BATCH_SPD,), True),
    ("cholesky_not_pd", lambda m, x: m.linalg.cholesky(x), (-SPD,), False),
    ("qr_reduced", lambda m, x: m.linalg.qr(x), (TALL,), True),
    ("qr_complete", lambda m, x: m.linalg.qr(x, mode="complete"), (TALL,), True),
    ("qr_wide", lambda m, x: m.linalg.qr(x), (WIDE,), True),
    ("qr_r", lambda m, x: m.linalg.qr(x, mode="r"), (TALL,), True),
    ("qr_raw", lambda m, x: m.linalg.qr(x, mode="raw"), (TALL,), False),
    ("qr_c64", lambda m, x: m.linalg.qr(x), (C,), True),
    ("svd_recon_tall", lambda m, x: _recon_svd(m, x), (TALL,), True),
    ("svd_recon_wide", lambda m, x: _recon_svd(m, x), (WIDE,), True),
    ("svd_recon_c64", lambda m, x: _recon_svd(m, x), (C,), True),
    ("svd_values", lambda m, x: m.linalg.svd(x, compute_uv=False), (TALL,), True),
    ("svd_full_values", lambda m, x: m.linalg.svd(x)[1], (TALL,), False),
    ("svd_hermitian_values", lambda m, x: m.linalg.svd(x, hermitian=True, compute_uv=False),
     (SPD - 2.5 * np.eye(4, dtype=np.float32),), True),
    ("svd_hermitian_recon", lambda m, x: _recon_svd(m, x, hermitian=True),
     (SPD - 2.5 * np.eye(4, dtype=np.float32),), True),
    ("svdvals", lambda m, x: m.linalg.svdvals(x), (WIDE,), True),
    ("eigh", lambda m, x: _recon_eigh(m, x), (SPD,), True),
    ("eigh_upper", lambda m, x: _recon_eigh(m, x, UPLO="U"), (SPD,), True),
    ("eigh_c64", lambda m, x: _recon_eigh(m, x), (HPD,), True),
    ("eigh_batched", lambda m, x: _recon_eigh(m, x), (BATCH_SPD,), True),
    ("eigvalsh", lambda m, x: m.linalg.eigvalsh(x), (SPD,), True),
    ("eig_recon", lambda m, x: _recon_eig(m, x), (A,), False),
    ("eigvals", lambda m, x: m.linalg.eigvals(x), (SPD,), True),
    ("pinv", lambda m, x: m.linalg.pinv(x), (TALL,), True),
    ("pinv_wide", lambda m, x: m.linalg.pinv(x), (WIDE,), True),
    ("pinv_hermitian", lambda m, x: m.linalg.pinv(x, hermitian=True), (SPD,), True),
    ("pinv_rtol", lambda m, x: m.linalg.pinv(x, rtol=0.5), (TALL,), True),
    ("lstsq", lambda m, a, b: m.linalg.lstsq(a, b), (TALL, _f32(5, 2)), True),
    ("lstsq_vector", lambda m, a, b: m.linalg.lstsq(a, b)[0], (TALL, _f32(5)), True),
    ("matrix_rank", lambda m, x: m.linalg.matrix_rank(x), (SING,), False),
    ("matrix_rank_tol", lambda m, x: m.linalg.matrix_rank(x, rtol=0.3), (TALL,), False),
    ("matrix_rank_1d", lambda m, x: m.linalg.matrix_rank(x), (BV,), False),
    ("matrix_power_5", lambda m, x: m.linalg.matrix_power(x, 5), (A / 3,), True),
    ("matrix_power_0", lambda m, x: m.linalg.matrix_power(x, 0), (A,), False),
    ("matrix_power_neg", lambda m, x: m.linalg.matrix_power(x, -3), (A,), True),
    ("matrix_power_int", lambda m, x: m.linalg.matrix_power(x, 3), (INT,), False),
    ("norm_default", lambda m, x: m.linalg.norm(x), (B,), True),
    ("norm_complex", lambda m, x: m.linalg.norm(x), (C,), True),
    ("norm_keepdims", lambda m, x: m.linalg.norm(x, keepdims=True), (B,), True),
    ("norm_int", lambda m, x: m.linalg.norm(x), (INT,), False),
    ("cond", lambda m, x: m.linalg.cond(x), (A,), True),
    ("cond_fro", lambda m, x: m.linalg.cond(x, "fro"), (A,), True),
    ("cond_-2", lambda m, x: m.linalg.cond(x, -2), (A,), True),
    ("cond_singular", lambda m, x: m.linalg.cond(x, 1), (SING,), False),
    ("multi_dot", lambda m, a, b, c: m.linalg.multi_dot([a, b, c]),
     (TALL, WIDE, _f32(5, 2)), True),
    ("multi_dot_vectors", lambda m, a, b, c: m.linalg.multi_dot([a, b, c]),
     (_f32(5), TALL, _f32(3)), True),
    ("tensorinv", lambda m, x: m.linalg.tensorinv(x.reshape(4, 2, 2), ind=1), (A,), True),
    ("tensorsolve", lambda m, a, b: m.linalg.tensorsolve(a.reshape(2, 2, 2, 2), b),
     (A, _f32(2, 2)), True),
    ("vector_norm", lambda m, x: m.linalg.vector_norm(x), (B,), True),
    ("vector_norm_axis_ord1", lambda m, x: m.linalg.vector_norm(x, axis=0, ord=1), (B,), True),
    ("vector_norm_inf_keep", lambda m, x: m.linalg.vector_norm(x, ord=np.inf, axis=(0, 1),
                                                               keepdims=True), (B,), True),
    ("matrix_norm", lambda m, x: m.linalg.matrix_norm(x), (BATCH,), True),
    ("matrix_norm_nuc", lambda m, x: m.linalg.matrix_norm(x, ord="nuc"), (BATCH,), True),
    ("vecdot", lambda m, a, b: m.linalg.vecdot(a, b), (B, _f32(4, 3)), True),
    ("vecdot_c64", lambda m, a, b: m.linalg.vecdot(a, b, axis=0), (C, C * 2), True),
    ("matmul", lambda m, a, b: m.linalg.matmul(a, b), (A, B), True),
    ("tensordot", lambda m, a, b: m.linalg.tensordot(a, b, axes=1), (A, B), True),
    ("outer", lambda m, a, b: m.linalg.outer(a, b), (BV, _f32(3)), True),
    ("cross", lambda m, a, b: m.linalg.cross(a, b), (B, _f32(4, 3)), True),
    ("cross_axis0", lambda m, a, b: m.linalg.cross(a, b, axis=0), (_f32(3, 2), _f32(3, 2)),
     True),
    ("diagonal", lambda m, x: m.linalg.diagonal(x, offset=1), (BATCH,), True),
    ("trace", lambda m, x: m.linalg.trace(x, offset=-1), (BATCH,), True),
    ("trace_dtype", lambda m, x: m.linalg.trace(x, dtype=np.float32), (INT,), False),
    ("matrix_transpose", lambda m, x: m.linalg.matrix_transpose(x), (BATCH,), True),
]
for _o in [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]:
    CASES.append((f"norm_matrix_{_o}", lambda m, x, o=_o: m.linalg.norm(x, ord=o, axis=(0, 1)),
                  (TALL,), True))
    CASES.append((f"norm_matrix_{_o}_axes10_keep",
                  lambda m, x, o=_o: m.linalg.norm(x, ord=o, axis=(1, 0), keepdims=True),
                  (_f32(2, 3, 4),), False))
for _o in [None, 1, 2, np.inf, -np.inf, 0, 3, 0.5, -2]:
    CASES.append((f"norm_vector_{_o}", lambda m, x, o=_o: m.linalg.norm(x, ord=o, axis=1),
                  (B,), _o != 0))

# lax.linalg through both libraries (the primitives' public wrappers)
LAX_CASES = [
    ("lax_cholesky", lambda L, x: L.cholesky(x), (SPD,), True),
    ("lax_cholesky_no_sym", lambda L, x: L.cholesky(x, symmetrize_input=False), (SPD,), False),
    ("lax_lu", lambda L, x: L.lu(x), (A,), True),
    ("lax_lu_tall", lambda L, x: L.lu(x), (TALL,), True),
    ("lax_lu_wide", lambda L, x: L.lu(x), (WIDE,), True),
    ("lax_lu_batched", lambda L, x: L.lu(x), (BATCH,), True),
    ("lax_lu_pivots_to_permutation",
     lambda L, p: L.lu_pivots_to_permutation(p, 6), (np.array([[3, 1, 4], [5, 5, 2]],
                                                              np.int32),), False),
    ("lax_qr_full", lambda L, x: L.qr(x), (TALL,), True),
    ("lax_qr_thin", lambda L, x: L.qr(x, full_matrices=False), (TALL,), True),
    ("lax_qr_pivoting", lambda L, x: L.qr(x, full_matrices=False, pivoting=True), (TALL,),
     True),
    ("lax_qr_wide_full", lambda L, x: L.qr(x), (WIDE,), True),
    ("lax_svd_values", lambda L, x: L.svd(x, compute_uv=False), (TALL,), True),
    ("lax_svd_square_full", lambda L, x: (lambda u, s, v: (s, (u * s) @ v))(*L.svd(x)), (A,),
     True),
    ("lax_eigh_values", lambda L, x: L.eigh(x)[1], (SPD,), True),
    ("lax_eig_values_only",
     lambda L, x: L.eig(x, compute_left_eigenvectors=False, compute_right_eigenvectors=False),
     (A,), True),
    ("lax_eig_vectors", lambda L, x: L.eig(x, enable_eigvec_derivs=True), (A,), True),
    ("lax_triangular_solve", lambda L, a, b: L.triangular_solve(a, b, left_side=True,
                                                                lower=True), (A, B), True),
    ("lax_triangular_solve_right_T_unit",
     lambda L, a, b: L.triangular_solve(a, b, transpose_a=True, unit_diagonal=True),
     (A3, B), True),
    ("lax_triangular_solve_vector",
     lambda L, a, b: L.triangular_solve(a, b, left_side=True), (A, BV), True),
    ("lax_triangular_solve_c64",
     lambda L, a, b: L.triangular_solve(a, b, left_side=True, transpose_a=True,
                                        conjugate_a=True), (C, C[:, :2]), True),
    ("lax_schur", lambda L, x: L.schur(x), (A,), False),
    ("lax_schur_values_only", lambda L, x: L.schur(x, compute_schur_vectors=False), (A,),
     False),
    ("lax_hessenberg", lambda L, x: L.hessenberg(x), (A,), False),
    ("lax_householder_product", lambda L, x: L.householder_product(*L.hessenberg(x)[:1],
                                                                   L.hessenberg(x)[1]),
     (A,), False),
]


# ----------------------------------------------------------------------------------------------
# helpers


def _leaves(x):
    return jax.tree_util.tree_leaves(x)


def _assert_same(k, j, name, rtol=1e-4, atol=1e-4):
    kl, jl = _leaves(k), _leaves(j)
    assert len(kl) == len(jl), f"{name}: {len(kl)} outputs vs JAX {len(jl)}"
    for i, (a, b) in enumerate(zip(kl, jl)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"{name} output {i}: dtype {a.dtype} vs JAX {b.dtype}"
        assert a.shape == b.shape, f"{name} output {i}: shape {a.shape} vs JAX {b.shape}"
        if a.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b, err_msg=f"{name} output {i}")
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"{name} output {i}")


def _weights(x, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(np.shape(x))
    return w.astype(np.float32)


def _scalarize(m, f, name):
    """A real scalar of all inexact outputs (fixed random weights on real/imag parts)."""
    def g(*xs):
        total = 0.0
        for i, leaf in enumerate(_leaves(f(m, *xs))):
            if not m.issubdtype(leaf.dtype, m.inexact):
                continue
            seed = zlib.crc32(f"{name}/{i}".encode())
            total = total + m.sum(m.real(leaf) * _weights(leaf, seed))
            if m.iscomplexobj(leaf):
                total = total + m.sum(m.imag(leaf) * _weights(leaf, seed + 1))
        return total
    return g


def _inexact_argnums(args):
    return tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind in "fc")


def _grads(module, grad, f, args, name, argnums):
    return grad(_scalarize(module, f, name), argnums=argnums)(*args)


def _jax_jit(f):
    """JAX compiles every eager op separately; one jit per test is several times faster."""
    return jax.jit(f)


def _ids(cases):
    return [c[0] for c in cases]


# ----------------------------------------------------------------------------------------------
# jnp.linalg parity


@pytest.mark.parametrize("name,f,args,check_grad", CASES, ids=_ids(CASES))
def test_value_parity(name, f, args, check_grad):
    _assert_same(f(knp, *args), jax_result(
        f"value.{name}", lambda: _jax_jit(lambda *xs: f(jnp, *xs))(*args), args), name)


@pytest.mark.parametrize("name,f,args,check_grad", CASES, ids=_ids(CASES))
def test_jit_matches_eager(name, f, args, check_grad):
    if name.startswith("lstsq"):
        pytest.skip("lstsq is traceable; covered by test_lstsq_jit")
    eager = f(knp, *args)
    jitted = kiln.jit(lambda *xs: f(knp, *xs))(*args)
    _assert_same(jitted, eager, name, rtol=1e-5, atol=1e-5)


# One case per function in the default tier (the names the case's lambda uses, e.g.
# linalg.inv; tests/_sampling.py), every case in the full tier; values cover every case.
@pytest.mark.parametrize("name,f,args,check_grad", sample_cases(
    [pytest.param(*c, id=c[0]) for c in CASES if c[3]],
    lambda p: ".".join(p.values[1].__code__.co_names), salt="linalg.grad_parity"))
def test_grad_parity(name, f, args, check_grad):
    argnums = _inexact_argnums(args)
    gk = _grads(knp, kiln.grad, f, args, name, argnums)
    gj = jax_result(f"grad.{name}", lambda: _jax_jit(
        lambda *xs: _grads(jnp, jax.grad, f, xs, name, argnums))(*args), args)
    _assert_same(gk, gj, name, rtol=2e-3, atol=2e-3)


_VMAP_CASES = [c for c in CASES if c[3] and not c[0].startswith(("multi_dot", "tensor", "outer",
                                                                 "norm_vector_0"))]


@pytest.mark.parametrize("name,f,args,check_grad", _VMAP_CASES, ids=_ids(_VMAP_CASES))
def test_vmap_matches_loop(name, f, args, check_grad):
    scales = (1.0, 0.8, 1.2)
    stacked = [np.stack([(a * s).astype(a.dtype) for s in scales]) for a in args]
    got = kiln.vmap(lambda *xs: f(knp, *xs))(*stacked)
    loop = [f(knp, *[(a * s).astype(a.dtype) for a in args]) for s in scales]
    for i, g in enumerate(_leaves(got)):
        want = np.stack([np.asarray(_leaves(r)[i]) for r in loop])
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-4, equal_nan=True,
                                   err_msg=f"{name} output {i}")


# ----------------------------------------------------------------------------------------------
# lax.linalg parity


@pytest.mark.parametrize("name,f,args,check_grad", LAX_CASES, ids=_ids(LAX_CASES))
def test_lax_value_parity(name, f, args, check_grad):
    _assert_same(f(klax_linalg, *args), jax_result(
        f"lax_value.{name}", lambda: _jax_jit(lambda *xs: f(jlax_linalg, *xs))(*args), args),
        name)


@pytest.mark.parametrize("name,f,args,check_grad", LAX_CASES, ids=_ids(LAX_CASES))
def test_lax_jit_and_vmap(name, f, args, check_grad):
    eager = f(klax_linalg, *args)
    _assert_same(kiln.jit(lambda *xs: f(klax_linalg, *xs))(*args), eager, name, 1e-6, 1e-6)
    stacked = [np.stack([a, a]) for a in args]
    got = kiln.vmap(lambda *xs: f(klax_linalg, *xs))(*stacked)
    for g, e in zip(_leaves(got), _leaves(eager)):
        np.testing.assert_allclose(np.asarray(g)[1], np.asarray(e), rtol=1e-5, atol=1e-5)


_LAX_GRAD = [c for c in LAX_CASES if c[3]]


@pytest.mark.parametrize("name,f,args,check_grad", _LAX_GRAD, ids=_ids(_LAX_GRAD))
def test_lax_jvp_parity(name, f, args, check_grad):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    tangents = tuple((rng.standard_normal(np.shape(a)) +
                      (1j * rng.standard_normal(np.shape(a)) if np.iscomplexobj(a) else 0)
                      ).astype(np.asarray(a).dtype) for a in args)
    if name.startswith("lax_cholesky") or name.startswith("lax_eigh"):
        tangents = tuple((t + np.conj(t.T)) / 2 for t in tangents)
    pk, tk = kiln.jvp(lambda *xs: f(klax_linalg, *xs), args, tangents)
    def ref():
        pj, tj = _jax_jit(lambda p, t: jax.jvp(lambda *xs: f(jlax_linalg, *xs), p, t))(
            args, tangents)
        return pj, [t for t in _leaves(tj) if np.asarray(t).dtype.kind in "fc"]
    pj, tj = jax_result(f"lax_jvp.{name}", ref, (args, tangents))
    _assert_same(pk, pj, name)
    tk = [t for t in _leaves(tk) if np.asarray(t).dtype.kind in "fc"]
    _assert_same(tk, tj, name, rtol=2e-3, atol=2e-3)


# ----------------------------------------------------------------------------------------------
# specific behaviour


def test_det_grad_of_singular_matrix_is_adjugate():
    g = kiln.grad(knp.linalg.det)(SING)
    gj = jax_result("det_grad_singular", lambda: jax.grad(jnp.linalg.det)(SING), SING)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gj), atol=1e-4)
    # rank n - 1: the adjugate is a nonzero rank-one matrix
    assert np.linalg.matrix_rank(np.asarray(g)) == 1
    # rank < n - 1: zero
    low = np.zeros((4, 4), np.float32)
    low[0, 0] = 1.0
    np.testing.assert_array_equal(np.asarray(kiln.grad(knp.linalg.det)(low)), 0.0)


def test_second_derivatives():
    for i, f in enumerate((lambda m, x: m.linalg.slogdet(x)[1], lambda m, x: m.linalg.det(x),
                           lambda m, x: m.sum(m.linalg.inv(x)), lambda m, x: m.linalg.norm(x, 2),
                           lambda m, x: m.sum(m.linalg.eigvalsh(x) ** 3))):
        hk = kiln.hessian(lambda x: f(knp, x))(A)
        hj = jax_result(f"hessian.{i}",
                        lambda f=f: _jax_jit(jax.hessian(lambda x: f(jnp, x)))(A), A)
        np.testing.assert_allclose(np.asarray(hk), np.asarray(hj), rtol=2e-3, atol=2e-3)


def test_jit_of_grad_and_grad_of_jit():
    f = lambda x: knp.linalg.slogdet(x)[1] + knp.sum(knp.linalg.solve(x, B))  # noqa: E731
    g1 = kiln.jit(kiln.grad(f))(A)
    g2 = kiln.grad(kiln.jit(f))(A)
    gj = jax_result("grad_slogdet_solve", lambda: jax.grad(
        lambda x: jnp.linalg.slogdet(x)[1] + jnp.sum(jnp.linalg.solve(x, B)))(A), (A, B))
    np.testing.assert_allclose(np.asarray(g1), np.asarray(gj), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(g2), np.asarray(gj), rtol=1e-4, atol=1e-4)


def test_vmap_of_grad_solve_batched_rhs():
    def loss(a, b):
        return knp.sum(knp.linalg.solve(a, b) ** 2)
    bs = np.stack([B, 2 * B, -B])
    got = kiln.vmap(kiln.grad(loss), in_axes=(None, 0))(A, bs)
    want = jax_result("vmap_grad_solve", lambda: jax.vmap(
        jax.grad(lambda a, b: jnp.sum(jnp.linalg.solve(a, b) ** 2)), in_axes=(None, 0))(A, bs),
        (A, bs))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_lstsq_jit():
    f = lambda a, b: knp.linalg.lstsq(a, b)  # noqa: E731
    _assert_same(kiln.jit(f)(TALL, B[:, :2].repeat(2, 0)[:5]), f(TALL, B[:, :2].repeat(2, 0)[:5]),
                 "lstsq", 1e-6, 1e-6)


def test_lstsq_numpy_resid():
    b = _f32(3, 2)
    out = knp.linalg.lstsq(WIDE, b, numpy_resid=True)
    ref = np.linalg.lstsq(WIDE, b, rcond=None)
    assert np.asarray(out[1]).shape == ref[1].shape == (0,)
    np.testing.assert_allclose(np.asarray(out[0]), ref[0], rtol=1e-4, atol=1e-4)
    assert int(out[2]) == ref[2]


def test_cholesky_failure_gives_nans():
    out = np.asarray(knp.linalg.cholesky(-SPD))
    assert np.isnan(out).any()
    batched = np.asarray(knp.linalg.cholesky(np.stack([SPD, -SPD])))
    assert np.isfinite(batched[0]).all() and np.isnan(batched[1]).any()


def test_singular_solve_and_inv_give_nonfinite():
    out = np.asarray(knp.linalg.inv(np.zeros((3, 3), np.float32)))
    assert not np.isfinite(out).all()


def test_result_types():
    assert type(knp.linalg.eigh(SPD)).__name__ == "EighResult"
    assert type(knp.linalg.svd(A)).__name__ == "SVDResult"
    assert type(knp.linalg.qr(A)).__name__ == "QRResult"
    assert type(knp.linalg.slogdet(A)).__name__ == "SlogdetResult"
    assert type(knp.linalg.eig(A)).__name__ == "EigResult"
    w, v = knp.linalg.eigh(SPD)
    assert knp.linalg.eigh(SPD).eigenvalues is not None and w.shape == (4,)
    u, s, vh = knp.linalg.svd(TALL)
    assert (u.shape, s.shape, vh.shape) == ((5, 5), (3,), (3, 3))


def test_x64_dtypes():
    with config_context(jax_enable_x64=True):
        a = A.astype(np.float64)
        assert knp.linalg.inv(a).dtype == np.float64
        assert knp.linalg.eigvalsh(SPD.astype(np.complex128)).dtype == np.float64
        assert knp.linalg.svd(a, compute_uv=False).dtype == np.float64
        assert knp.linalg.eigvals(a).dtype == np.complex128
        assert knp.linalg.det(INT.astype(np.int64)).dtype == np.float64
        np.testing.assert_allclose(np.asarray(knp.linalg.det(a)), np.linalg.det(a), rtol=1e-12)


@pytest.mark.parametrize("call,exc", [
    (lambda m: m.linalg.inv(np.ones((2, 3), np.float32)), ValueError),
    (lambda m: m.linalg.det(np.ones((2, 3), np.float32)), ValueError),
    (lambda m: m.linalg.slogdet(np.ones(3, np.float32)), ValueError),
    (lambda m: m.linalg.solve(np.ones(3, np.float32), np.ones(3, np.float32)), ValueError),
    (lambda m: m.linalg.solve(np.ones((2, 3, 3), np.float32), np.ones((2, 3), np.float32)),
     ValueError),
    (lambda m: m.linalg.qr(A, mode="bogus"), ValueError),
    (lambda m: m.linalg.eigh(SPD, UPLO="X"), ValueError),
    (lambda m: m.linalg.norm(B, ord="bogus", axis=(0, 1)), ValueError),
    (lambda m: m.linalg.norm(B, ord="inf", axis=0), ValueError),
    (lambda m: m.linalg.norm(np.ones((2, 2, 2)), axis=(0, 1, 2)), ValueError),
    (lambda m: m.linalg.matrix_power(np.ones(3), 2), TypeError),
    (lambda m: m.linalg.matrix_power(A, 1.5), TypeError),
    (lambda m: m.linalg.multi_dot([A]), ValueError),
    (lambda m: m.linalg.outer(A, BV), ValueError),
    (lambda m: m.linalg.cross(A, A), ValueError),
    (lambda m: m.linalg.matrix_transpose(BV), ValueError),
    (lambda m: m.linalg.pinv(A, rtol=0.1, rcond=0.1), ValueError),
    (lambda m: m.linalg.cond(BV), ValueError),
    (lambda m: m.linalg.tensorinv(A, ind=0), ValueError),
    (lambda m: m.linalg.slogdet(A, method="bogus"), ValueError),
])
def test_errors_match_jax(call, exc):
    with pytest.raises(exc):
        call(jnp)
    with pytest.raises(exc):
        call(knp)


def test_lax_linalg_type_errors():
    with pytest.raises(TypeError):
        klax_linalg.cholesky(np.eye(3, dtype=np.int32))
    with pytest.raises(ValueError):
        klax_linalg.lu(np.ones(3, np.float32))
    with pytest.raises(ValueError):
        klax_linalg.triangular_solve(A, np.ones((3, 3), np.float32), left_side=True)


def test_eigh_subset_by_index():
    # JAX supports subset_by_index only on TPU; kiln slices LAPACK's full result.
    v, w = klax_linalg.eigh(SPD, subset_by_index=(1, 3))
    wr, vr = np.linalg.eigh(SPD)
    np.testing.assert_allclose(np.asarray(w), wr[1:3], rtol=1e-5)
    assert v.shape == (4, 2)
    np.testing.assert_allclose(np.abs(np.sum(np.asarray(v) * vr[:, 1:3], 0)), 1, rtol=1e-5)


def test_eig_eigenvector_grad_requires_opt_in():
    with pytest.raises(NotImplementedError, match="enable_eigvec_derivs"):
        kiln.grad(lambda x: knp.sum(knp.abs(knp.linalg.eig(x)[1])))(A)


def test_eig_under_jit_and_vmap():
    w = kiln.jit(knp.linalg.eigvals)(A)
    np.testing.assert_allclose(np.sort_complex(np.asarray(w)),
                               np.sort_complex(np.linalg.eigvals(A.astype(np.float64))),
                               rtol=1e-4, atol=1e-4)
    wb = kiln.vmap(knp.linalg.eigvals)(BATCH)
    for i in range(2):
        np.testing.assert_allclose(np.asarray(wb[i]), np.asarray(knp.linalg.eigvals(BATCH[i])),
                                   rtol=1e-6)


def test_qr_pivoting_wide_jvp_matches_finite_differences():
    # JAX differentiates the pivoted wide case with the unpivoted trailing block; kiln uses
    # the pivoted one, which agrees with finite differences.
    with config_context(jax_enable_x64=True):
        rng = np.random.default_rng(3)
        x, t = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))

        def f(y):
            return klax_linalg.qr(y, full_matrices=False, pivoting=True)[1]
        eps = 1e-6
        fd = (np.asarray(f(x + eps * t)) - np.asarray(f(x - eps * t))) / (2 * eps)
        np.testing.assert_allclose(np.asarray(kiln.jvp(f, (x,), (t,))[1]), fd, atol=1e-6)


def test_linalg_is_a_module_of_kiln_numpy():
    import kiln.numpy.linalg as mod
    assert knp.linalg is mod
    assert set(mod.__all__) >= {"cholesky", "det", "eig", "eigh", "inv", "lstsq", "norm",
                                "pinv", "qr", "slogdet", "solve", "svd", "tensorsolve"}
    import jax.numpy.linalg as jmod
    public = {n for n in dir(jmod) if not n.startswith("_")}
    assert public <= set(dir(mod)), public - set(dir(mod))


@pytest.mark.parametrize("axes", [(0, 2), (2, 0)])
def test_tensorsolve_several_axes(axes):
    """Each axis of ``axes`` goes to the end in order, as NumPy (JAX's testTensorsolveAxes)."""
    rng = np.random.default_rng(0)
    a = rng.random((2, 1, 3, 6)).astype(np.float32) + 2 * np.eye(6, dtype=np.float32)[
        None, None, :3, :]
    b = rng.random((1, 6)).astype(np.float32)
    np.testing.assert_allclose(knp.linalg.tensorsolve(a, b, axes=axes),
                               np.linalg.tensorsolve(a, b, axes=axes), rtol=2e-3, atol=2e-3)
