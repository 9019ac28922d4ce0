"""``jnp.matmul`` with a 1-D operand stages one ``dot_general`` contracting the vector
as is (as JAX does), with NumPy's values and shapes, under ``jit``, ``grad`` and
``vmap``."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp

SHAPES = [((3,), (3,)), ((4, 3), (3,)), ((2, 4, 3), (3,)), ((3,), (3, 5)),
          ((3,), (2, 3, 5)), ((2, 1, 4, 3), (3,))]


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_values_and_one_dot_general(sa, sb):
    rng = np.random.default_rng(0)
    a = rng.normal(size=sa).astype(np.float32)
    b = rng.normal(size=sb).astype(np.float32)
    np.testing.assert_allclose(jnp.matmul(a, b), np.matmul(a, b), rtol=1e-5)
    np.testing.assert_allclose(kiln.jit(jnp.matmul)(a, b), np.matmul(a, b), rtol=1e-5)
    eqns = kiln.make_jaxpr(jnp.matmul)(a, b).jaxpr.eqns
    assert [e.primitive.name for e in eqns] == ["dot_general"]
    jax = pytest.importorskip("jax")
    j_eqns = jax.make_jaxpr(jax.numpy.matmul)(a, b).jaxpr.eqns
    assert [e.primitive.name for e in j_eqns] == ["dot_general"]


def test_grad_and_vmap_of_matvec():
    rng = np.random.default_rng(1)
    w = rng.normal(size=(4, 3)).astype(np.float32)
    xs = rng.normal(size=(5, 3)).astype(np.float32)
    out = kiln.vmap(lambda x: w @ x)(xs)
    np.testing.assert_allclose(out, xs @ w.T, rtol=1e-5)
    g = kiln.grad(lambda w, x: jnp.sum(jnp.tanh(w @ x)))(w, xs[0])
    want = (1 - np.tanh(w @ xs[0]) ** 2)[:, None] * xs[0][None, :]
    np.testing.assert_allclose(g, want, rtol=1e-5)
    gx = kiln.grad(lambda x: jnp.sum(x @ w.T))(xs[0])
    np.testing.assert_allclose(gx, w.sum(0), rtol=1e-5)


def test_mismatched_vector_is_a_type_error():
    with pytest.raises(TypeError, match="contracting dimensions"):
        jnp.matmul(jnp.ones(3), jnp.ones(4))
    with pytest.raises(TypeError, match="contracting dimensions"):
        jnp.matmul(jnp.ones((2, 3)), jnp.ones(4))
