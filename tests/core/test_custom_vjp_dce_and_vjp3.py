"""``custom_vjp_call``'s dead-code-elimination rule, ``custom_lin``'s printed form and the
``jax_custom_vjp3`` closure error, as JAX (its ``CustomVJPTest.test_dce``,
``test_custom_lin_pretty_print``, ``CustomVJP3Test.test_closed_over_*``)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln._src import config as src_config
from kiln.core.jaxpr import eval_jaxpr
from kiln.errors import UnexpectedTracerError
from kiln.interpreters.partial_eval import dce_jaxpr


def _f():
    @kiln.custom_vjp
    def f(x, y):
        return jnp.sin(x), x + jnp.cos(y)

    def f_fwd(x, y):
        return f(x, y), (jnp.cos(x), jnp.sin(y))

    def f_bwd(res, cts):
        cos_x, sin_y = res
        ct_a, ct_b = cts
        return 2.0 * cos_x * ct_a + 1.5 * ct_b, -0.5 * sin_y * ct_b

    f.defvjp(f_fwd, f_bwd)
    return f


@pytest.mark.parametrize("used,has,lacks", [([True, False], "sin", "cos"),
                                            ([False, True], "cos", "sin")])
def test_dce_prunes_the_function_and_keeps_the_rule(used, has, lacks):
    x, y = 0.1, -1.3
    jaxpr = kiln.make_jaxpr(_f())(x, y).jaxpr
    pruned, _ = dce_jaxpr(jaxpr, used)
    names = [e.primitive.name for e in pruned.eqns[0].params["call_jaxpr"].jaxpr.eqns]
    assert has in names and lacks not in names
    fun = lambda *a: eval_jaxpr(pruned, [], *a)[0]  # noqa: E731
    g = kiln.grad(fun, argnums=(0, 1))(x, y)
    want = (2 * np.cos(x), 0.) if used[0] else (1.5, -0.5 * np.sin(y))
    np.testing.assert_allclose(np.array(g), np.array(want), rtol=1e-6)
    assert not dce_jaxpr(jaxpr, [False, False])[0].eqns


def test_custom_lin_prints_as_jax():
    @kiln.custom_vjp
    def f(x):
        return x + 1

    def f_bwd(_, g):
        return g

    f.defvjp(lambda x: (f(x), ()), f_bwd)
    x = jnp.array([4.2], dtype=jnp.float32)
    jaxpr = kiln.make_jaxpr(lambda x: kiln.jvp(f, (x,), (x,)))(x)
    jaxpr, _ = dce_jaxpr(jaxpr.jaxpr, [False, True])
    text = str(jaxpr)
    assert "bwd=f_bwd" in text and "in_zeros=[False]" in text and "out_avals" not in text


def test_custom_vjp3_rejects_closed_over_tracers():
    def outer(x):
        @kiln.custom_vjp
        def f(y):
            return x * y
        f.defvjp(lambda y: (f(y), jnp.cos(y)), lambda c, g: (c * g,))
        return f

    g = kiln.vmap(lambda x: outer(x)(3.))
    np.testing.assert_allclose(g(np.arange(3.)), 3. * np.arange(3.))   # JAX's default
    with src_config.custom_vjp3(True):
        with pytest.raises(UnexpectedTracerError, match="can't close over"):
            g(np.arange(3.))
    # without a closure it still works under the flag
    with src_config.custom_vjp3(True):
        f = kiln.custom_vjp(lambda y: lax.sin(y))
        f.defvjp(lambda y: (f(y), jnp.cos(y)), lambda c, g: (c * g,))
        np.testing.assert_allclose(kiln.vmap(kiln.grad(f))(np.arange(3.)),
                                   np.cos(np.arange(3.)), rtol=1e-6)


def test_custom_vjp3_context_is_thread_local():
    import threading
    seen = {}
    with src_config.custom_vjp3(True):
        t = threading.Thread(target=lambda: seen.setdefault("v", src_config.custom_vjp3.value))
        t.start()
        t.join()
        assert src_config.custom_vjp3.value is True
    assert seen["v"] is False and src_config.custom_vjp3.value is False
