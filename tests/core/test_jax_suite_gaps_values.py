"""Values JAX's own test suite checks that kiln got wrong (issue 26): ``ldexp`` at float32
extremes, ``jnp.array`` copies under ``jvp``, ``grad`` of a batched ``cond``."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

_XS = np.array([1e-30, 3.4e38, 1.0, -2.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 1.2e-38, 7.0,
                1e30, -3e-20], np.float32)
_ES = np.array([200, -10, 127, 128, -149, -150, 5, -5, 3, 149, 250, -300, -200, -120, 60],
               np.int32)


def test_ldexp_extremes_match_numpy():
    out = np.asarray(jnp.ldexp(_XS[:, None], _ES[None, :]))
    with np.errstate(over="ignore"):
        ref = np.ldexp(_XS[:, None], _ES[None, :])
    normal = (np.abs(ref) >= np.finfo(np.float32).tiny) | (ref == 0) | ~np.isfinite(ref)
    np.testing.assert_array_equal(out[normal], ref[normal])
    assert np.isfinite(jnp.ldexp(np.float32(1e-30), np.int32(200)))
    assert jnp.ldexp(np.float32(3.4e38), np.int32(-10)) == np.ldexp(np.float32(3.4e38), -10)
    assert jnp.ldexp(np.float32(1e30), np.int32(-200)) == np.ldexp(np.float32(1e30), -200)
    np.testing.assert_array_equal(kiln.jit(jnp.ldexp)(_XS, _ES[:13]), jnp.ldexp(_XS, _ES[:13]))
    np.testing.assert_array_equal(kiln.vmap(jnp.ldexp)(_XS, _ES[:13]), jnp.ldexp(_XS, _ES[:13]))
    assert kiln.grad(lambda x: jnp.ldexp(x, 3))(2.0) == 8.0
    with pytest.raises(ValueError, match="ldexp not supported"):
        jnp.ldexp(1.0, 2.0)


def test_ldexp_matches_jax():
    jax = pytest.importorskip("jax")
    ref = np.asarray(jax.numpy.ldexp(_XS[:, None], _ES[None, :]))
    out = np.asarray(jnp.ldexp(_XS[:, None], _ES[None, :]))
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


def _cond_sqrt(x):
    return lax.cond(x > 0, jnp.sqrt, lambda v: v, x)


def test_grad_of_batched_cond_ignores_untaken_branch():
    xs = jnp.array([0.0, 1.0, 4.0])
    g = kiln.grad(lambda v: kiln.vmap(_cond_sqrt)(v).sum())
    np.testing.assert_allclose(g(xs), [1.0, 0.5, 0.25])
    np.testing.assert_allclose(kiln.jit(g)(xs), [1.0, 0.5, 0.25])
    np.testing.assert_allclose(kiln.vmap(_cond_sqrt)(xs), [0.0, 1.0, 2.0])
    # an unbatched operand next to a batched predicate
    h = kiln.grad(lambda y: kiln.vmap(lambda p: lax.cond(p > 0, jnp.sqrt, lambda v: v * 2, y))(
        jnp.array([-1.0, 1.0])).sum())
    assert h(0.0) == np.inf          # the taken sqrt lane's derivative at 0, as in JAX
    assert h(4.0) == pytest.approx(2.25)


def test_grad_of_batched_cond_matches_jax():
    jax = pytest.importorskip("jax")

    def jcond(x):
        return jax.lax.cond(x > 0, jax.numpy.sqrt, lambda v: v, x)

    xs = np.array([0.0, 1.0, 4.0, -2.0], np.float32)
    ref = jax.grad(lambda v: jax.vmap(jcond)(v).sum())(xs)
    np.testing.assert_allclose(kiln.grad(lambda v: kiln.vmap(_cond_sqrt)(v).sum())(xs), ref)


@pytest.mark.parametrize("conv", [lambda x: jnp.array(x, copy=True), jnp.array,
                                  lambda x: jnp.asarray(x, copy=True)])
def test_jvp_of_array_copy_gives_new_objects(conv):
    x, t = jnp.ones(3), jnp.ones(3)
    y, ydot = kiln.jvp(conv, (x,), (t,))
    assert y is not x and ydot is not t and y is not ydot
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(ydot, t)
    assert "copy" in str(kiln.make_jaxpr(conv)(x))
    np.testing.assert_array_equal(kiln.grad(lambda v: conv(v).sum())(x), np.ones(3))
    np.testing.assert_array_equal(kiln.jit(conv)(x), x)
    np.testing.assert_array_equal(kiln.vmap(conv)(jnp.ones((2, 3))), np.ones((2, 3)))


def test_asarray_without_copy_is_identity_on_tracers():
    assert "copy" not in str(kiln.make_jaxpr(jnp.asarray)(jnp.ones(3)))


def test_custom_jvp_applied_to_a_tangent_is_transposed_as_its_function():
    @kiln.custom_jvp
    def f(x):
        return -x

    @f.defjvp
    def f_jvp(primals, tangents):
        return f(primals[0]), f(tangents[0])      # linear in the tangent

    def foo(x):
        return lax.scan(lambda c, _: (f(c), None), x, None, length=1)[0]

    assert float(kiln.grad(foo)(3.)) == -1.
    assert float(kiln.grad(kiln.jit(foo))(3.)) == -1.
    assert float(kiln.grad(lambda x: f(f(x)) * 2)(3.)) == 2.


def test_vjp_function_is_a_pytree_over_its_residuals():
    def f(x):
        return x ** 2

    z = kiln.jit(lambda x: kiln.vjp(f, x)[1])       # returned from jit
    assert float(z(1.0)(3.0)[0]) == 6.

    @kiln.custom_vjp
    def g(x):
        return f(x)

    def g_fwd(x):
        y, f_vjp = kiln.vjp(f, x)
        return y, f_vjp                               # stored as a residual

    g.defvjp(g_fwd, lambda f_vjp, y_bar: f_vjp(y_bar))
    assert float(kiln.vjp(g, 1.0)[1](1.0)[0]) == 2.
    assert float(kiln.jit(lambda x: kiln.vjp(g, x)[1])(1.0)(3.0)[0]) == 6.
    _, fv = kiln.vjp(lambda x: jnp.sin(x) * 2, jnp.ones(3))
    assert len(kiln.tree.leaves(fv)) == 1


def test_dce_of_a_custom_jvp_call_prunes_its_function_and_rule():
    from kiln._src import core as kcore
    from kiln.interpreters import partial_eval as pe

    @kiln.custom_jvp
    def f(x, y):
        return jnp.sin(x), x + jnp.cos(y)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x, y), (dx, dy) = primals, tangents
        return f(x, y), (2.0 * jnp.cos(x) * dx, 1.5 * dx - 0.5 * jnp.sin(y) * dy)

    jaxpr = kiln.make_jaxpr(f)(0.1, -1.3).jaxpr
    for used, keep, drop in [([True, False], lax.sin_p, lax.cos_p),
                             ([False, True], lax.cos_p, lax.sin_p)]:
        pruned, used_in = pe.dce_jaxpr(jaxpr, used)
        body = pruned.eqns[0].params["call_jaxpr"].jaxpr
        assert any(e.primitive is keep for e in body.eqns)
        assert all(e.primitive is not drop for e in body.eqns)
        assert used_in == [True, True]
    assert not pe.dce_jaxpr(jaxpr, [False, False])[0].eqns
    f1 = lambda *a: kcore.jaxpr_as_fun(pe.close_jaxpr(pe.dce_jaxpr(jaxpr, [False, True])[0]))(*a)[0]  # noqa: E731
    np.testing.assert_allclose(kiln.jvp(f1, (0.1, -1.3), (1.0, 0.0))[1], 1.5)
    np.testing.assert_allclose(kiln.jvp(f1, (0.1, -1.3), (0.0, 1.0))[1], -0.5 * np.sin(-1.3),
                               rtol=1e-6)


def test_jacobians_keep_the_weak_type_of_what_they_are_taken_against():
    for transform in (kiln.grad, kiln.jacfwd, kiln.jacrev):
        assert transform(lambda x: x)(1.0).weak_type
    assert not kiln.jacrev(lambda x: x * 2)(jnp.ones(2)).weak_type
    np.testing.assert_allclose(kiln.jacfwd(jnp.sin)(jnp.arange(3.)),
                               np.diag(np.cos(np.arange(3.))), rtol=1e-6)
    j = kiln.jacrev(lambda x: jnp.sum(x.astype(jnp.complex64)).real)(jnp.ones(2))
    assert j.dtype == np.float32
