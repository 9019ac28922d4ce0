"""Small ``cholesky``/``triangular_solve`` in loop and branch bodies compile natively
(``kiln/compiler/lower/linalg.py``) instead of keeping the loop on the host: checked
against the reference backend (LAPACK) over every parameter, with batch dimensions,
failed factorizations (all NaN) and singular triangles, and under jit/grad/vmap."""
import itertools

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference
from kiln.compiler.lower import linalg as lower_linalg
from kiln.compiler.lower.program import Island, Loop, walk_steps
from kiln.lax import linalg

R = np.random.default_rng(0)


def _spd(n, batch=(), dtype=np.float32):
    a = R.standard_normal(batch + (n, n + 2)).astype(dtype)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=dtype)).astype(dtype)


def _compiled_vs_reference(f, *args, rtol=2e-5, atol=2e-5):
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    assert exe is not None
    steps = list(walk_steps(exe.prog.steps))
    assert any(isinstance(s, Loop) for s in steps)
    assert not any(isinstance(s, Island) for s in steps)
    flat = [np.asarray(a) for a in args]
    got = exe(flat)
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("n,batch", [(1, ()), (3, ()), (4, (2,)), (7, (2, 3))])
def test_cholesky_in_scan(n, batch):
    a = _spd(n, batch)

    def f(a):
        return lax.scan(lambda c, _: (c, linalg.cholesky_p.bind(c * 1.0)), a, None, length=3)[1]
    _compiled_vs_reference(f, a)


def test_triangular_solve_in_scan_every_parameter():
    # Each flag both ways, in one program (one C build); the expansion itself is checked
    # against LAPACK over all 16 combinations in test_expansion_matches_lapack.
    n = 4
    a = _spd(n, (2,))
    bl = R.standard_normal((2, n, 3)).astype(np.float32)
    br = R.standard_normal((2, 3, n)).astype(np.float32)
    combos = [(True, True, False, False), (True, False, True, True),
              (False, True, True, False), (False, False, False, True)]

    def f(a, bl, br):
        def body(c, _):
            outs = []
            for left, lower, trans, unit in combos:
                outs.append(linalg.triangular_solve_p.bind(
                    a, bl if left else br, left_side=left, lower=lower, transpose_a=trans,
                    conjugate_a=False, unit_diagonal=unit))
            return c, outs
        return lax.scan(body, 0.0, None, length=2)[1]
    _compiled_vs_reference(f, a, bl, br, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("left,lower,trans,unit", list(itertools.product([True, False],
                                                                          repeat=4)))
def test_expansion_matches_lapack(left, lower, trans, unit):
    # The traced expansion, run eagerly (no C build), against the primitive's LAPACK impl.
    a = _spd(3, (2,))
    b = R.standard_normal((2, 3, 2) if left else (2, 2, 3)).astype(np.float32)
    kw = dict(left_side=left, lower=lower, transpose_a=trans, conjugate_a=False,
              unit_diagonal=unit)
    want = linalg.triangular_solve_p.bind(jnp.asarray(a), jnp.asarray(b), **kw)
    got = lower_linalg._triangular_solve(jnp.asarray(a), jnp.asarray(b), **kw)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(lower_linalg._cholesky(jnp.asarray(a))),
                               np.linalg.cholesky(a), rtol=1e-5, atol=1e-6)


def test_only_the_referenced_triangle_is_read():
    a = _spd(4)
    junk = a + np.triu(np.full((4, 4), np.nan, np.float32), 1)      # NaN above the diagonal
    b = R.standard_normal((4, 2)).astype(np.float32)

    def f(a, b):
        return lax.fori_loop(0, 2, lambda i, c: linalg.triangular_solve(
            linalg.cholesky_p.bind(a), c, left_side=True, lower=True), b)
    got = _compiled_vs_reference(f, junk, b)
    assert np.isfinite(np.asarray(got[0])).all()


def test_failed_factorization_is_all_nan_and_singular_solve_matches():
    bad = np.diag(np.array([1.0, -1.0, 2.0], np.float32))

    def f(a):
        return lax.fori_loop(0, 1, lambda i, c: linalg.cholesky_p.bind(c), a)
    got = _compiled_vs_reference(f, bad)
    assert np.isnan(np.asarray(got[0])).all()
    sing = np.tril(_spd(3))
    sing[1, 1] = 0.0
    b = np.ones((3, 1), np.float32)

    def g(a, b):
        return lax.fori_loop(0, 1, lambda i, c: linalg.triangular_solve(
            a, c, left_side=True, lower=True), b)
    closed = kiln.make_jaxpr(g)(sing, b)
    got = cpu.executable_for(closed)([sing, b])[0]
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, [sing, b])[0]
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))


def test_mvn_logpdf_chain_is_native_and_matches_under_transformations():
    # The BlackJAX/NumPyro pattern: a multivariate-normal log-density in a scan body.
    cov = _spd(4)
    mean = R.standard_normal(4).astype(np.float32)

    def chain(x0):
        def body(x, _):
            lp = kiln.scipy.stats.multivariate_normal.logpdf(x, mean, cov)
            return x * 0.9 + 0.01, lp
        return lax.scan(body, x0, None, length=5)[1]
    x0 = R.standard_normal(4).astype(np.float32)
    _compiled_vs_reference(chain, x0, rtol=1e-4, atol=1e-4)
    eager = chain(x0)
    np.testing.assert_allclose(np.asarray(kiln.jit(chain)(x0)), np.asarray(eager), rtol=1e-4)
    g = kiln.jit(kiln.grad(lambda x: chain(x).sum()))(x0)
    np.testing.assert_allclose(np.asarray(g), np.asarray(kiln.grad(lambda x: chain(x).sum())(
        x0)), rtol=1e-3, atol=1e-4)
    v = kiln.jit(kiln.vmap(chain))(np.stack([x0, x0 + 1]))
    np.testing.assert_allclose(np.asarray(v[0]), np.asarray(eager), rtol=1e-4)


def test_what_is_not_expanded():
    big = kiln.make_jaxpr(lambda a: linalg.cholesky_p.bind(a))(np.eye(lower_linalg.MAX_N + 1,
                                                                      dtype=np.float32))
    assert not lower_linalg.expandable(big.jaxpr.eqns[0])
    c = kiln.make_jaxpr(lambda a: linalg.cholesky_p.bind(a))(np.eye(3, dtype=np.complex64))
    assert not lower_linalg.expandable(c.jaxpr.eqns[0])
    ok = kiln.make_jaxpr(lambda a: linalg.cholesky_p.bind(a))(np.eye(3, dtype=np.float32))
    assert lower_linalg.expandable(ok.jaxpr.eqns[0])
    # At the top level of a program the LAPACK island stays.
    exe = cpu.executable_for(kiln.make_jaxpr(lambda a: linalg.cholesky_p.bind(a) * 2.0)(
        np.eye(3, dtype=np.float32)))
    assert exe is None or any(isinstance(s, Island) for s in walk_steps(exe.prog.steps))
