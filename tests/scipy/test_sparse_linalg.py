"""``kiln.scipy.sparse.linalg`` (``cg``, ``bicgstab``, ``gmres``): solutions against NumPy,
truncated iterates against JAX (same iteration, step for step), operators given as arrays,
functions or ``@`` objects, pytree right-hand sides, preconditioners, starting guesses,
``jit``/``vmap``/``grad`` (implicit differentiation through ``lax.custom_linear_solve``) and
the argument errors."""
from __future__ import annotations

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.numpy as knp
from kiln.config import config_context
from kiln.scipy.sparse import linalg as ksp

_rng = np.random.default_rng(7)
N = 5


def _spd(n, dtype):
    a = _rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * _rng.standard_normal((n, n))
    return (a @ a.conj().T + n * np.eye(n)).astype(dtype)


def _general(n, dtype):
    a = _rng.standard_normal((n, n)) + 3 * np.eye(n)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * _rng.standard_normal((n, n))
    return a.astype(dtype)


def _vec(n, dtype):
    v = _rng.standard_normal(n)
    if np.issubdtype(dtype, np.complexfloating):
        v = v + 1j * _rng.standard_normal(n)
    return v.astype(dtype)


DTYPES = [np.float32, np.complex64, np.float64, np.complex128]
MATS = {dt: (_spd(N, dt), _general(N, dt), _vec(N, dt)) for dt in DTYPES}
SPD, GEN, B = MATS[np.float32]


def _is64(dtype):
    return np.dtype(dtype) in (np.float64, np.complex128)


def _x64(dtype):
    return config_context(jax_enable_x64=_is64(dtype))


def _tol(dtype):
    return 1e-9 if _is64(dtype) else 1e-4


SOLVERS = {
    "cg": lambda A, b, **kw: ksp.cg(A, b, **kw),
    "bicgstab": lambda A, b, **kw: ksp.bicgstab(A, b, **kw),
    "gmres_batched": lambda A, b, **kw: ksp.gmres(A, b, solve_method="batched", **kw),
    "gmres_incremental": lambda A, b, **kw: ksp.gmres(A, b, solve_method="incremental", **kw),
}


def _matrix_for(name, dtype):
    spd, gen, _ = MATS[dtype]
    return spd if name == "cg" else gen


# ------------------------------------------------------------------------------------------
# converged solutions

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(SOLVERS))
def test_solves_against_numpy(name, dtype):
    a, b = _matrix_for(name, dtype), MATS[dtype][2]
    with _x64(dtype):
        x, _ = SOLVERS[name](a, b, tol=_tol(dtype) / 100)
        assert x.dtype == np.dtype(dtype)
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=_tol(dtype),
                                   atol=_tol(dtype))


@pytest.mark.parametrize("name", list(SOLVERS))
def test_operator_forms_agree(name):
    a = _matrix_for(name, np.float32)
    want = np.asarray(SOLVERS[name](a, B)[0])

    class Op:
        shape = a.shape

        def __matmul__(self, x):
            return knp.asarray(a) @ x

    class ShapelessOp:
        def __matmul__(self, x):
            return knp.asarray(a) @ x

    for op in (knp.asarray(a), lambda x: knp.dot(a, x), Op(), ShapelessOp()):
        np.testing.assert_allclose(np.asarray(SOLVERS[name](op, B)[0]), want, rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("name", list(SOLVERS))
def test_pytree_rhs(name):
    # block diagonal: {"u": P u, "v": Q v} solved as one system
    p, q = _matrix_for(name, np.float32), _matrix_for(name, np.float32)[:3, :3]

    def op(t):
        return {"u": knp.dot(p, t["u"]), "v": knp.dot(q, t["v"])}
    b = {"u": B, "v": B[:3] * 2}
    x, _ = SOLVERS[name](op, b, tol=1e-7)
    assert set(x) == {"u", "v"}
    np.testing.assert_allclose(np.asarray(x["u"]), np.linalg.solve(p, b["u"]), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(x["v"]), np.linalg.solve(q, b["v"]), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("name", list(SOLVERS))
def test_weak_scalar_rhs(name):
    x, _ = SOLVERS[name](lambda v: 2 * v, 1.0)
    assert x.weak_type and x.dtype == np.float32
    assert float(x) == pytest.approx(0.5)


def test_cg_with_exact_preconditioner_takes_one_step():
    inv = np.linalg.inv(SPD).astype(np.float32)
    x, _ = ksp.cg(SPD, B, M=inv, maxiter=1)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(SPD, B), rtol=1e-4, atol=1e-5)
    x, _ = ksp.cg(SPD, B, maxiter=1)        # without it one step is far off
    assert np.abs(np.asarray(x) - np.linalg.solve(SPD, B)).max() > 1e-2


@pytest.mark.parametrize("name", list(SOLVERS))
def test_x0_at_solution_is_returned(name):
    a = _matrix_for(name, np.float32)
    sol = np.linalg.solve(a, B).astype(np.float32)
    x, _ = SOLVERS[name](a, B, x0=sol, maxiter=0)
    np.testing.assert_array_equal(np.asarray(x), sol)


def test_default_maxiter_and_restart_clamp():
    # tol = 0 never stops early: the default maxiter (10 * size) is what bounds the loop
    a = SPD[:3, :3]
    for f in (ksp.cg, ksp.bicgstab):
        np.testing.assert_array_equal(np.asarray(f(a, B[:3], tol=0.0)[0]),
                                      np.asarray(f(a, B[:3], tol=0.0, maxiter=30)[0]))
    g = GEN[:3, :3]
    for m in ("batched", "incremental"):
        np.testing.assert_array_equal(
            np.asarray(ksp.gmres(g, B[:3], restart=50, maxiter=1, solve_method=m)[0]),
            np.asarray(ksp.gmres(g, B[:3], restart=3, maxiter=1, solve_method=m)[0]))


def test_gmres_info():
    _, info = ksp.gmres(GEN, B)
    assert int(info) == 0
    # a NaN start: the residual's norm is NaN, so no restart runs and x0 comes back
    x0 = np.where(np.arange(N) == 1, np.nan, 0).astype(np.float32)
    x, info = ksp.gmres(GEN, B, x0=x0)
    assert int(info) == -1 and np.isnan(np.asarray(x)[1])
    assert ksp.cg(SPD, B)[1] is None and ksp.bicgstab(GEN, B)[1] is None


def test_arnoldi_step_builds_hessenberg():
    from kiln.scipy.sparse.linalg import _kth_arnoldi_iteration
    with config_context(jax_enable_x64=True):
        a = MATS[np.complex128][1]
        q = np.zeros((N, N + 1), np.complex128)
        b = MATS[np.complex128][2]
        q[:, 0] = b / np.linalg.norm(b)
        q, h = knp.asarray(q), knp.eye(N, N + 1, dtype=np.complex128)
        for k in range(N):
            q, h, _ = _kth_arnoldi_iteration(k, lambda v: knp.dot(a, v), lambda v: v, q, h)
        qn = np.asarray(q)[:, :N]
        np.testing.assert_allclose(qn.conj().T @ qn, np.eye(N), atol=1e-12)
        np.testing.assert_allclose(qn.conj().T @ a @ qn, np.asarray(h).T[:N], atol=1e-12)


# ------------------------------------------------------------------------------------------
# truncated iterates against JAX (the same iteration, so the same point after k steps)

def _iterates(sp, a_spd, a_gen, b, m, x0):
    """Iterates after a few steps of every solver (``sp``: kiln's or JAX's module)."""
    out = []
    for k in (1, 3):
        out.append(sp.cg(a_spd, b, maxiter=k)[0])
        out.append(sp.bicgstab(a_gen, b, maxiter=k, M=m, x0=x0)[0])
    for method in ("batched", "incremental"):
        for k in (1, 2):
            out.append(sp.gmres(a_gen, b, restart=2, maxiter=k, M=m, x0=x0,
                                solve_method=method)[0])
    out.append(sp.cg(a_spd, b, maxiter=2, M=m @ m.conj().T, x0=x0)[0])
    return out


def _jax_iterates(dtype, *args):
    import jax
    import jax.scipy.sparse.linalg as jsp
    with jax.enable_x64(_is64(dtype)):
        # one jitted program: a single compilation for all the solves
        return [np.asarray(x) for x in jax.jit(lambda *a: _iterates(jsp, *a))(*args)]


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=lambda d: np.dtype(d).name)
def test_truncated_iterates_match_jax(dtype):
    a_spd, a_gen, b = MATS[dtype]
    m = (np.eye(N) + 0.1 * _general(N, np.float64)).astype(dtype)
    x0 = (0.5 * b[::-1]).astype(dtype)
    want = jax_result(f"iterates.{np.dtype(dtype).name}",
                      lambda: _jax_iterates(dtype, a_spd, a_gen, b, m, x0),
                      inputs=(a_spd, a_gen, b, m, x0))
    with _x64(dtype):
        got = _iterates(ksp, a_spd, a_gen, b, m, x0)
    tol = 2e-5 if dtype == np.float32 else 1e-11
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol,
                                   err_msg=f"iterate {i}")


# ------------------------------------------------------------------------------------------
# transformations

def test_jit_matches_eager():
    for name in ("cg", "gmres_incremental"):
        a = _matrix_for(name, np.float32)
        solve = SOLVERS[name]
        got = kiln.jit(lambda a, b, s=solve: s(a, b, maxiter=2)[0])(a, B)
        np.testing.assert_allclose(np.asarray(got), np.asarray(solve(a, B, maxiter=2)[0]),
                                   rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", list(SOLVERS))
def test_vmap_over_rhs_and_matrix(name):
    a = _matrix_for(name, np.float32)
    bs = np.stack([B, B[::-1], 2 * B]).astype(np.float32)
    got = kiln.vmap(lambda b: SOLVERS[name](a, b, tol=1e-7)[0])(bs)
    np.testing.assert_allclose(np.asarray(got), np.linalg.solve(a, bs.T).T, rtol=1e-4,
                               atol=1e-5)
    As = np.stack([a, a + a.T, 2 * a]).astype(np.float32)
    got = kiln.vmap(lambda m: SOLVERS[name](m, B, tol=1e-7)[0])(As)
    want = np.stack([np.linalg.solve(m, B) for m in As])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(SOLVERS))
def test_grad_matches_dense_solve(name, dtype):
    a, b = _matrix_for(name, dtype), MATS[dtype][2]
    w = np.arange(1.0, N + 1, dtype=np.float32)

    def loss(solve):
        return lambda a, b: knp.real(knp.sum(w * solve(a, b)))
    iterative = loss(lambda a, b: SOLVERS[name](a, b, tol=1e-7)[0])
    dense = loss(knp.linalg.solve)
    got = kiln.grad(iterative, argnums=(0, 1))(a, b)
    want = kiln.grad(dense, argnums=(0, 1))(a, b)
    for g, v in zip(got, want):
        assert g.dtype == v.dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(v), rtol=1e-3, atol=1e-5)


def test_symmetric_flag(monkeypatch):
    # cg tells custom_linear_solve that A is symmetric exactly when b is real (a Hermitian
    # operator on real vectors); bicgstab and gmres never do; every solver is also its
    # own transpose solve
    seen = []
    real = kiln.lax.custom_linear_solve

    def spy(matvec, b, solve, transpose_solve=None, symmetric=False, has_aux=False):
        seen.append((symmetric, transpose_solve is not None))
        return real(matvec, b, solve, transpose_solve=transpose_solve, symmetric=symmetric,
                    has_aux=has_aux)
    monkeypatch.setattr(kiln.lax, "custom_linear_solve", spy)
    c = MATS[np.complex64][2]
    ksp.cg(SPD, B)
    ksp.cg(MATS[np.complex64][0], c)
    ksp.cg(lambda t: t, {"u": B, "v": 2 * B})
    ksp.bicgstab(GEN, B)
    ksp.gmres(GEN, B)
    assert seen == [(True, True), (False, True), (True, True), (False, True), (False, True)]


def test_grad_cg_against_finite_differences_x64():
    with config_context(jax_enable_x64=True):
        a, _, b = MATS[np.float64]

        def f(b):
            return knp.sum(ksp.cg(lambda x: knp.dot(a, x), b, tol=1e-12)[0] ** 2)
        g = np.asarray(kiln.grad(f)(b))
        e = np.eye(N)
        fd = np.array([(float(f(b + 1e-6 * e[i])) - float(f(b - 1e-6 * e[i]))) / 2e-6
                       for i in range(N)])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_jacrev_with_tuple_rhs():
    # reverse mode of a solve whose right-hand side is a tuple (JAX issue 14249)
    def f(b):
        return ksp.cg(lambda x: (knp.dot(SPD, x[0]), knp.dot(SPD, x[1])), (b, b),
                      tol=1e-7)[0]
    jac = kiln.jacrev(f)(B)
    inv = np.linalg.inv(SPD)
    for j in jac:
        np.testing.assert_allclose(np.asarray(j), inv, rtol=1e-3, atol=1e-5)


# ------------------------------------------------------------------------------------------
# errors

@pytest.mark.parametrize("f", [ksp.cg, ksp.bicgstab, ksp.gmres])
def test_operator_errors(f):
    with pytest.raises(ValueError, match="must be a square matrix"):
        f(knp.zeros((3, 2)), knp.zeros(2))
    with pytest.raises(ValueError, match="must be a square matrix"):
        f(np.zeros(3), np.zeros(3))
    with pytest.raises(TypeError, match="must be either a function or ndarray"):
        f([[1.0]], knp.zeros(1))


@pytest.mark.parametrize("f", [ksp.cg, ksp.bicgstab, ksp.gmres])
def test_x0_structure_error(f):
    b = knp.zeros(2)
    with pytest.raises(ValueError, match="x0 and b must have matching tree structure"):
        f(lambda x: x, {"x": b}, {"y": b})


@pytest.mark.parametrize("f", [ksp.cg, ksp.bicgstab])
def test_x0_shape_error(f):
    b = knp.zeros(2)
    with pytest.raises(ValueError, match="x0 and b must have matching shapes"):
        f(lambda x: x, b, b[:, None])


def test_bad_solve_method():
    with pytest.raises(ValueError, match="invalid solve_method"):
        ksp.gmres(GEN, B, solve_method="qr")


def test_module_surface():
    import kiln.scipy as ks
    assert ks.sparse.linalg is ksp
    assert sorted(ksp.__all__) == ["bicgstab", "cg", "gmres"]
