"""The transpose of a ``jit`` call is a ``jit`` call of the inner backward pass (as in
JAX), traced once per linearity/zero pattern and cached with the jaxpr: ``grad(jit(f))``
runs compiled code and a ``custom_vjp``'s backward rule inside ``f`` is traced once, not
at every call."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def _counting_f():
    count = {"bwd": 0}

    @kiln.custom_vjp
    def f(x):
        return x

    def bwd(r, g):
        count["bwd"] += 1
        return (g + 2.0,)

    f.defvjp(lambda x: (x, None), bwd)
    return f, count


def test_backward_rule_traced_once_across_calls():
    f, count = _counting_f()
    jf = kiln.jit(f)
    x = jnp.array(1.0)
    assert float(kiln.grad(jf)(x)) == 3.0
    assert float(kiln.grad(jf)(x)) == 3.0
    assert float(kiln.grad(jf)(jnp.array(5.0))) == 3.0
    assert count["bwd"] == 1


def test_transpose_is_a_jit_call():
    f = kiln.jit(lambda x, y: jnp.sin(x) * y)
    jaxpr = kiln.make_jaxpr(kiln.grad(f))(1.0, 2.0)
    prims = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert prims == ["jit", "jit"]


def _g(x, y, z):
    return jnp.sum(jnp.sin(x) * y) + jnp.tanh(z[0]) * 2.0, x * 3.0


@pytest.mark.parametrize("how", ["grad", "jit_grad", "vmap_grad", "grad_grad"])
@pytest.mark.parametrize("argnums", [0, 1, (0, 2), (1, 2)])
def test_grad_of_jit_matches_plain_grad(how, argnums):
    jg = kiln.jit(_g)

    def loss(g):
        return lambda x, y, z: g(x, y, z)[0] + g(x, y, z)[1].sum() * 0.0

    x = jnp.linspace(0.1, 0.7, 4)
    y = jnp.linspace(1.0, 2.0, 4)
    z = jnp.array([0.3, 0.4])
    if how == "grad_grad":
        def h(g):
            return kiln.grad(lambda x: kiln.grad(lambda s: loss(g)(x * s, y, z))(1.0))
        got, want = h(jg)(x), h(_g)(x)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        return
    got_f = kiln.grad(loss(jg), argnums=argnums)
    want_f = kiln.grad(loss(_g), argnums=argnums)
    if how == "jit_grad":
        got_f = kiln.jit(got_f)
    if how == "vmap_grad":
        xs = jnp.stack([x, x * 2])
        got = kiln.vmap(got_f, in_axes=(0, None, None))(xs, y, z)
        want = kiln.vmap(want_f, in_axes=(0, None, None))(xs, y, z)
    else:
        got, want = got_f(x, y, z), want_f(x, y, z)
    for a, b in zip(kiln.tree_util.tree_leaves(got), kiln.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_unused_output_cotangent_and_unused_input():
    f = kiln.jit(lambda x, y: (x * 2.0, y * 0 + 1.0))
    gx, gy = kiln.grad(lambda x, y: f(x, y)[0], argnums=(0, 1))(1.5, 2.5)
    assert float(gx) == 2.0 and float(gy) == 0.0
    jax = pytest.importorskip("jax")
    jf = jax.jit(lambda x, y: (x * 2.0, y * 0 + 1.0))
    jx, jy = jax.grad(lambda x, y: jf(x, y)[0], argnums=(0, 1))(1.5, 2.5)
    assert (float(jx), float(jy)) == (float(gx), float(gy))
