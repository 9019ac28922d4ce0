"""``lax.custom_linear_solve`` and ``lax.custom_root``: values, every transformation (the
derivatives come from the equation at the solution, not from the solver), errors."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

RNG = np.random.default_rng(0)
N = 5
_M = RNG.standard_normal((N, N)).astype(np.float32)
A_SPD = (_M @ _M.T + N * np.eye(N)).astype(np.float32)
A_GEN = (RNG.standard_normal((N, N)) + N * np.eye(N)).astype(np.float32)
B = RNG.standard_normal(N).astype(np.float32)


def _cg(matvec, b, iters=60):
    """A conjugate-gradient solver written with while_loop: not differentiable in
    reverse mode by itself, so every gradient below must come from the solve's rules."""
    def body(s):
        x, r, p, rs, k = s
        ap = matvec(p)
        a = rs / jnp.vdot(p, ap)
        x = x + a * p
        r = r - a * ap
        rn = jnp.vdot(r, r)
        return x, r, r + (rn / rs) * p, rn, k + 1

    init = (jnp.zeros_like(b), b, b, jnp.vdot(b, b), 0)
    return lax.while_loop(lambda s: (s[3] > 1e-14) & (s[4] < iters), body, init)[0]


def _solve_with(a):
    return lambda matvec, b: jnp.linalg.solve(a, b)


def linear_solve(a, b):
    return lax.custom_linear_solve(lambda x: jnp.dot(a, x), b, _solve_with(a),
                                   lambda vecmat, b: jnp.linalg.solve(a.T, b))


def spd_solve(a, b):
    return lax.custom_linear_solve(lambda x: jnp.dot(a, x), b, _cg, symmetric=True)


def reference(a, b):
    return jnp.linalg.solve(a, b)


def close(x, y, tol=2e-5):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


# -- custom_linear_solve ---------------------------------------------------------------------

@pytest.mark.parametrize("fn,a", [(linear_solve, A_GEN), (spd_solve, A_SPD)])
def test_value_eager_and_jit(fn, a):
    want = np.linalg.solve(a.astype(np.float64), B)
    close(fn(a, B), want, 1e-4)
    close(kiln.jit(fn)(a, B), want, 1e-4)


@pytest.mark.parametrize("fn,a", [(linear_solve, A_GEN), (spd_solve, A_SPD)])
def test_grad_in_matrix_and_rhs(fn, a):
    loss = lambda f: (lambda a, b: jnp.sum(f(a, b) ** 2))   # noqa: E731
    got = kiln.grad(loss(fn), argnums=(0, 1))(a, B)
    want = kiln.grad(loss(reference), argnums=(0, 1))(a, B)
    close(got[0], want[0], 1e-4)
    close(got[1], want[1], 1e-4)
    got_jit = kiln.jit(kiln.grad(loss(fn), argnums=(0, 1)))(a, B)
    close(got_jit[0], want[0], 1e-4)


def test_jvp_and_jacfwd():
    ta = RNG.standard_normal((N, N)).astype(np.float32)
    tb = RNG.standard_normal(N).astype(np.float32)
    x, dx = kiln.jvp(linear_solve, (A_GEN, B), (ta, tb))
    x_ref, dx_ref = kiln.jvp(reference, (A_GEN, B), (ta, tb))
    close(x, x_ref)
    close(dx, dx_ref, 1e-4)
    close(kiln.jacfwd(spd_solve, argnums=1)(A_SPD, B),
          np.linalg.inv(A_SPD.astype(np.float64)), 1e-4)


def test_tangent_only_in_matrix():
    # b constant: the tangent is solve(-dA x) alone.
    ta = np.eye(N, dtype=np.float32)
    _, dx = kiln.jvp(lambda a: linear_solve(a, B), (A_GEN,), (ta,))
    _, dx_ref = kiln.jvp(lambda a: reference(a, B), (A_GEN,), (ta,))
    close(dx, dx_ref, 1e-4)


def test_second_order():
    h = kiln.hessian(lambda b: jnp.sum(spd_solve(A_SPD, b) ** 2))(B)
    h_ref = kiln.hessian(lambda b: jnp.sum(reference(A_SPD, b) ** 2))(B)
    close(h, h_ref, 1e-4)


@pytest.mark.parametrize("in_axes", [(0, 0), (None, 0), (0, None)])
def test_vmap(in_axes):
    a = np.stack([A_SPD, A_SPD + np.eye(N, dtype=np.float32)])
    b = np.stack([B, 2 * B])
    args = (a if in_axes[0] == 0 else A_SPD, b if in_axes[1] == 0 else B)
    close(kiln.vmap(spd_solve, in_axes=in_axes)(*args),
          kiln.vmap(reference, in_axes=in_axes)(*args), 1e-4)
    close(kiln.vmap(linear_solve, in_axes=in_axes)(*args),
          kiln.vmap(reference, in_axes=in_axes)(*args), 1e-4)


def test_vmap_of_grad_and_grad_of_vmap():
    a = np.stack([A_SPD, A_SPD + np.eye(N, dtype=np.float32)])
    loss = lambda f: (lambda a: jnp.sum(f(a, B)))   # noqa: E731
    close(kiln.vmap(kiln.grad(loss(spd_solve)))(a), kiln.vmap(kiln.grad(loss(reference)))(a),
          1e-4)
    tot = lambda f: (lambda a: jnp.sum(kiln.vmap(f, in_axes=(0, None))(a, B)))  # noqa: E731
    close(kiln.grad(tot(linear_solve))(a), kiln.grad(tot(reference))(a), 1e-4)


def test_pytree_right_hand_side():
    d = np.diag(np.arange(1.0, 5.0, dtype=np.float32))

    def matvec(x):
        return {"u": x["u"] * 2.0, "v": jnp.dot(d, x["v"])}

    def solve(mv, b):
        return {"u": b["u"] / 2.0, "v": b["v"] / jnp.diag(d)}

    b = {"u": np.ones(3, np.float32), "v": np.arange(4.0, dtype=np.float32)}
    x = lax.custom_linear_solve(matvec, b, solve, symmetric=True)
    assert set(x) == {"u", "v"}
    close(x["u"], np.full(3, 0.5))
    close(x["v"], np.arange(4.0) / np.arange(1.0, 5.0))
    g = kiln.grad(lambda b: jnp.sum(lax.custom_linear_solve(matvec, b, solve,
                                                            symmetric=True)["v"]))(b)
    close(g["u"], np.zeros(3))
    close(g["v"], 1 / np.arange(1.0, 5.0))


def test_has_aux():
    def solve(mv, b):
        return jnp.linalg.solve(A_GEN, b), {"iters": jnp.array(3), "res": jnp.sum(b)}

    def f(b):
        return lax.custom_linear_solve(lambda x: jnp.dot(A_GEN, x), b, solve,
                                       lambda vm, b: (jnp.linalg.solve(A_GEN.T, b),
                                                      {"iters": jnp.array(4),
                                                       "res": jnp.sum(b)}),
                                       has_aux=True)

    x, aux = f(B)
    close(x, reference(A_GEN, B))
    assert int(aux["iters"]) == 3
    g = kiln.grad(lambda b: jnp.sum(f(b)[0]))(B)
    close(g, kiln.grad(lambda b: jnp.sum(reference(A_GEN, b)))(B), 1e-4)
    _, (dx, daux) = kiln.jvp(f, (B,), (np.ones_like(B),))
    assert float(daux["res"]) == 0.0          # auxiliary outputs get zero tangents
    close(kiln.jit(f)(B)[0], x)


def test_solver_is_not_differentiated():
    # The forward solve is deliberately wrong in its derivative (stop_gradient): the
    # rules must not look inside it.
    def solve(mv, b):
        return lax.stop_gradient(jnp.linalg.solve(A_GEN, b))

    f = lambda b: jnp.sum(lax.custom_linear_solve(   # noqa: E731
        lambda x: jnp.dot(A_GEN, x), b, solve, lambda vm, c: jnp.linalg.solve(A_GEN.T, c)))
    close(kiln.grad(f)(B), kiln.grad(lambda b: jnp.sum(reference(A_GEN, b)))(B), 1e-4)


def test_jaxpr_has_one_primitive():
    jaxpr = kiln.make_jaxpr(spd_solve)(A_SPD, B)
    assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["custom_linear_solve"]


def test_reverse_mode_needs_transpose_solve():
    f = lambda b: jnp.sum(lax.custom_linear_solve(   # noqa: E731
        lambda x: jnp.dot(A_GEN, x), b, _solve_with(A_GEN)))
    close(f(B), np.sum(np.linalg.solve(A_GEN, B)), 1e-4)
    kiln.jvp(f, (B,), (B,))                               # forward mode is fine
    with pytest.raises(TypeError, match="transpose_solve required"):
        kiln.grad(f)(B)


def test_structure_and_shape_errors():
    mv = lambda x: jnp.dot(A_GEN, x)   # noqa: E731
    with pytest.raises(TypeError, match="solve\\(\\) output pytree structure must match b"):
        lax.custom_linear_solve(mv, B, lambda m, b: [b])     # same leaves, other tree
    with pytest.raises(ValueError, match="solve\\(\\) output shapes must match b"):
        lax.custom_linear_solve(mv, B, lambda m, b: b[:2])
    with pytest.raises(ValueError, match="auxiliary output was expected"):
        lax.custom_linear_solve(mv, B, lambda m, b: [b, b, b], has_aux=True)
    with pytest.raises(ValueError, match="matvec\\(\\) output shapes must match b"):
        lax.custom_linear_solve(lambda x: x[:3], B, lambda m, b: b)


# -- custom_root -----------------------------------------------------------------------------

def _newton(f, x0):
    def body(s):
        x, k = s
        return x - f(x) / kiln.grad(f)(x), k + 1
    return lax.while_loop(lambda s: s[1] < 30, body, (x0, 0))[0]


def sqrt_root(a):
    return lax.custom_root(lambda x: x ** 2 - a, 1.0, _newton, lambda g, y: y / g(1.0))


def test_root_value_and_derivatives():
    close(sqrt_root(2.0), np.sqrt(2.0))
    close(kiln.grad(sqrt_root)(2.0), 0.5 / np.sqrt(2.0))
    close(kiln.jit(kiln.grad(sqrt_root))(3.0), 0.5 / np.sqrt(3.0))
    close(kiln.jacfwd(sqrt_root)(4.0), 0.25)
    close(kiln.hessian(sqrt_root)(4.0), -0.25 * 4.0 ** -1.5)
    a = jnp.array([2.0, 3.0, 5.0])
    close(kiln.vmap(sqrt_root)(a), np.sqrt([2.0, 3.0, 5.0]))
    close(kiln.vmap(kiln.grad(sqrt_root))(a), 0.5 / np.sqrt([2.0, 3.0, 5.0]))


def test_root_vector_pytree_and_aux():
    # Root of x -> A x - c (per leaf): x* = A^-1 c; d x*/d c = A^-1.
    def f_of(c):
        return lambda x: {"p": jnp.dot(A_GEN, x["p"]) - c, "q": x["q"] * 3.0 - 1.0}

    def solve(f, x0):
        return ({"p": jnp.linalg.solve(A_GEN, -f({"p": jnp.zeros(N), "q": x0["q"]})["p"]),
                 "q": jnp.full_like(x0["q"], 1 / 3)}, jnp.array(1))

    def tangent_solve(g, y):
        jac = kiln.jacfwd(lambda v: g({"p": v, "q": jnp.zeros(2)})["p"])(jnp.zeros(N))
        return {"p": jnp.linalg.solve(jac, y["p"]), "q": y["q"] / 3.0}

    def root(c):
        return lax.custom_root(f_of(c), {"p": jnp.zeros(N), "q": jnp.zeros(2)}, solve,
                               tangent_solve, has_aux=True)

    x, aux = root(B)
    close(x["p"], np.linalg.solve(A_GEN, B), 1e-4)
    close(x["q"], np.full(2, 1 / 3))
    assert int(aux) == 1
    jac = kiln.jacrev(lambda c: root(c)[0]["p"])(B)
    close(jac, np.linalg.inv(A_GEN.astype(np.float64)), 1e-4)


def test_root_tree_mismatch_errors():
    with pytest.raises(TypeError, match="f\\(\\) output pytree structure must match "
                                        "initial_guess"):
        lax.custom_root(lambda x: (x, x), 1.0, _newton, lambda g, y: y)
    with pytest.raises(TypeError, match="solve\\(\\) output pytree structure must match"):
        lax.custom_root(lambda x: x - 1.0, 1.0, lambda f, x: (x, x), lambda g, y: y)
