"""``custom_vjp.defvjp(..., optimize_remat=True)`` and
``custom_derivatives.optimize_remat_of_custom_vjp_fwd``: the forward rule is one
``remat_opt`` equation that dead-code elimination replaces by the function where its
residuals are unused (JAX's ``test_optimize_remat*``; expected values computed here);
also the ``nondiff_argnums`` tracer error, ``jax_disable_bwd_checks`` and staged custom
calls batched only for a collective inside them."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import custom_derivatives
from kiln.config import config_context
from kiln.interpreters.partial_eval import dce_jaxpr


def _opt_fwd():
    def fun(x):
        return x                       # the function: identity
    def fwd(x):
        return x * x, (2 * x,)          # the rule's primal output differs on purpose
    return custom_derivatives.optimize_remat_of_custom_vjp_fwd(fun, None, fwd, None)


def test_eager_and_jit_run_the_forward_rule_when_residuals_are_used():
    fwd = _opt_fwd()
    x = jnp.arange(4.)
    out, (res,) = fwd(x)
    np.testing.assert_allclose(out, np.arange(4.) ** 2)
    np.testing.assert_allclose(res, 2 * np.arange(4.))
    out, (res,) = kiln.jit(fwd)(x)
    np.testing.assert_allclose(out, np.arange(4.) ** 2)


def test_jit_without_residuals_runs_the_function():
    fwd = _opt_fwd()
    x = jnp.arange(4.)
    np.testing.assert_allclose(kiln.jit(lambda x: fwd(x)[0])(x), np.arange(4.))
    # inside a cond branch too (the cond's DCE rule prunes its branches)
    g = lambda x: kiln.lax.cond(True, fwd, lambda x: (2. * x, (x,)), x)  # noqa: E731
    np.testing.assert_allclose(kiln.jit(lambda x: g(x)[0])(x), np.arange(4.))
    np.testing.assert_allclose(kiln.jit(g)(x)[0], np.arange(4.) ** 2)


def test_vmap_and_jvp_keep_the_substitution():
    fwd = _opt_fwd()
    x = jnp.arange(4.)
    np.testing.assert_allclose(kiln.jit(lambda x: kiln.vmap(fwd)(x)[0])(x), np.arange(4.))
    np.testing.assert_allclose(kiln.jit(kiln.vmap(fwd))(x)[0], np.arange(4.) ** 2)
    (y, _), (y_dot, _) = kiln.jvp(fwd, (3.,), (1.,))
    assert (float(y), float(y_dot)) == (9., 6.)

    @kiln.jit
    def primal_and_tangent(x, t):
        (y, _), (y_dot, _) = kiln.jvp(fwd, (x,), (t,))
        return y, y_dot

    jy, jdot = primal_and_tangent(3., 1.)
    assert (float(jy), float(jdot)) == (3., 1.)    # the function's JVP: identity


def test_dce_rule_and_forwarded_residuals():
    fwd = _opt_fwd()
    jaxpr = kiln.make_jaxpr(fwd)(jnp.arange(3.)).jaxpr
    (eqn,) = jaxpr.eqns
    assert eqn.primitive.name == "remat_opt" and eqn.params["num_res"] == 1
    pruned, _ = dce_jaxpr(jaxpr, [True, False], instantiate=True)
    assert [e.primitive.name for e in pruned.eqns] == ["closed_call"]
    kept, _ = dce_jaxpr(jaxpr, [False, True], instantiate=True)
    assert [e.primitive.name for e in kept.eqns] == ["remat_opt"]

    # A residual that is an argument of fwd is passed through, not an output.
    def fwd2(x):
        return jnp.sin(x), (x,)
    f2 = custom_derivatives.optimize_remat_of_custom_vjp_fwd(jnp.tan, None, fwd2, None)
    (eqn,) = kiln.make_jaxpr(f2)(1.).jaxpr.eqns
    assert eqn.params["num_res"] == 0


def test_defvjp_optimize_remat_under_checkpoint_uses_the_function():
    @kiln.custom_vjp
    def f(x):
        return jnp.tan(x)

    def f_fwd(x):
        return jnp.sin(x), (x,)

    def f_bwd(res, g):
        return (jnp.cos(res[0]) * g,)

    f.defvjp(f_fwd, f_bwd, optimize_remat=True)
    v, g = kiln.value_and_grad(lambda x: kiln.remat(f)(x) ** 2)(3.2)
    np.testing.assert_allclose(v, np.tan(np.float32(3.2)) ** 2, rtol=1e-5)
    np.testing.assert_allclose(g, 2 * np.tan(3.2) * np.cos(3.2), rtol=1e-4)


def test_grad_multiple_args_and_errors():
    @kiln.custom_vjp
    def f(x, y):
        return jnp.sin(x) * y

    def f_fwd(x, y, *, keyword=False):
        return f(x, y), (jnp.cos(x), jnp.sin(x), y)

    def f_bwd(res, g):
        cos_x, sin_x, y = res
        return (cos_x * g * y, sin_x * g)

    f.defvjp(f_fwd, f_bwd, optimize_remat=True)
    np.testing.assert_allclose(kiln.grad(f)(3.2, 1.), np.cos(3.2), rtol=1e-5)
    with pytest.raises(NotImplementedError, match="symbolic zeros"):
        f.defvjp(f_fwd, f_bwd, symbolic_zeros=True, optimize_remat=True)
    f.defvjp(lambda x, y: (f(x, y), (jnp.cos(x), jnp.sin(x), y)), f_bwd,
             optimize_remat=True)
    with pytest.raises(ValueError, match="Linearization failed"):   # as JAX
        kiln.grad(kiln.grad(lambda x: f(x, 1.)))(1.)


def test_nondiff_argnums_tracer_is_an_error():
    f = kiln.custom_vjp(lambda x, y: x * y, nondiff_argnums=(0,))
    f.defvjp(lambda x, y: (x * y, y), lambda x, r, g: (x * g,))
    with pytest.raises(kiln.errors.UnexpectedTracerError, match="custom_vjp"):
        kiln.jit(f)(2., 3.)
    assert float(f(2., 3.)) == 6.


def test_disable_bwd_checks_lets_a_wrong_shape_through():
    @kiln.custom_vjp
    def foo(x, y):
        return x
    foo.defvjp(lambda x, y: (x, None), lambda _, g: (jnp.zeros(3), jnp.zeros(3)))
    grad = kiln.grad(lambda x, y: foo(x, y).sum(), 1)
    with pytest.raises(ValueError, match="Custom VJP bwd rule must produce"):
        grad(jnp.ones(3), jnp.ones(4))
    with config_context(jax_disable_bwd_checks=True):
        assert grad(jnp.ones(3), jnp.ones(4)).shape == (3,)


@pytest.mark.parametrize("kind", ["jvp", "vjp"])
def test_staged_custom_call_with_a_collective_over_an_unbatched_operand(kind):
    if kind == "jvp":
        f = kiln.custom_jvp(lambda x: kiln.lax.psum(x, "foo"))
        f.defjvp(lambda p, t: (kiln.lax.psum(p[0], "foo"), t[0]))
    else:
        f = kiln.custom_vjp(lambda x: kiln.lax.psum(x, "foo"))
        f.defvjp(lambda x: (kiln.lax.psum(x, "foo"), None), lambda r, g: (g,))

    def g(x):
        closed = kiln.make_jaxpr(f)(x)
        return kiln.core.eval_jaxpr(closed.jaxpr, [], x)[0]

    out = kiln.vmap(lambda _, x: g(x), axis_name="foo", in_axes=(0, None),
                    out_axes=None)(jnp.arange(4.), 2.)
    assert float(out) == 8.


def test_custom_jvp_rule_type_errors_are_jaxs():
    @kiln.custom_jvp
    def f(x):
        return x ** 2

    f.defjvp(lambda p, t: (f(p[0]), jnp.reshape(t[0], (1,))))
    with pytest.raises(TypeError, match=r"Expected float32\[\] \(tangent type of "
                                        r"float32\[\]\) but got float32\[1\]\."):
        kiln.jvp(f, (jnp.float32(2.),), (jnp.float32(1.),))

    @kiln.custom_jvp
    def g(x):
        return x

    g.defjvp(lambda p, t: ((p[0], p[0]), (t[0], t[0])))
    scan_g = lambda x: kiln.lax.scan(lambda c, _: (g(c), None), x, None, length=1)[0]  # noqa
    with pytest.raises(TypeError, match=r"structure:\n    \(float32\[\], float32\[\]\)\n"):
        kiln.jvp(scan_g, (jnp.float32(1.),), (jnp.float32(1.),))
    assert custom_derivatives._maybe_perturbed(1.) is False
