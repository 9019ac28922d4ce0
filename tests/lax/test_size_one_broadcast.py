"""``jnp`` shape promotion as JAX's: operands of equal rank go to the lax op as they are
(its primitives broadcast size-1 dimensions and rank-0 operands), only a rank difference
adds leading unit axes; values under ``jit``/``grad``/``vmap`` match NumPy."""
import collections

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def _prims(f, *args):
    return collections.Counter(e.primitive.name for e in kiln.make_jaxpr(f)(*args).jaxpr.eqns)


def test_outer_product_jaxpr():
    x = jnp.array([1.0, 2.0])
    assert _prims(lambda x: x[None] * x[:, None], x) == {"broadcast_in_dim": 2, "mul": 1}


def test_equal_rank_add_has_no_broadcast():
    with kiln.numpy_dtype_promotion("standard"):
        prims = _prims(lambda x, y: x + y, jnp.array([1.0, 2.0]), jnp.array([1]))
    assert prims == {"convert_element_type": 1, "add": 1}


def test_rank_difference_adds_leading_axes():
    jaxpr = kiln.make_jaxpr(lambda x, y: x + y)(jnp.ones((2, 3)), jnp.ones(3))
    (b, a) = jaxpr.jaxpr.eqns
    assert b.primitive.name == "broadcast_in_dim" and b.outvars[0].aval.shape == (1, 3)
    assert a.primitive.name == "add" and a.outvars[0].aval.shape == (2, 3)


def test_lax_primitive_broadcasts_size_one():
    assert lax.mul(jnp.ones((1, 2)), jnp.ones((3, 1))).shape == (3, 2)
    with pytest.raises(TypeError, match="incompatible shapes"):
        lax.add(jnp.ones(2), jnp.ones(3))
    with pytest.raises(TypeError):
        lax.add(jnp.ones((1, 2)), jnp.ones(2))


OPS = {
    "add": (jnp.add, np.add), "sub": (jnp.subtract, np.subtract),
    "mul": (jnp.multiply, np.multiply), "div": (jnp.divide, np.divide),
    "max": (jnp.maximum, np.maximum), "pow": (jnp.power, np.power),
    "atan2": (jnp.arctan2, np.arctan2),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_values_jit_grad_vmap(name):
    jf, nf = OPS[name]
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, (3, 1, 4)).astype(np.float32)
    b = rng.uniform(0.5, 2.0, (1, 5, 4)).astype(np.float32)
    want = nf(a, b)
    eager = np.asarray(jf(a, b))
    np.testing.assert_allclose(eager, want, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(kiln.jit(jf)(a, b)), eager)
    # vmap over each operand's leading axis, and over one operand only
    np.testing.assert_allclose(np.asarray(kiln.vmap(jf)(a, np.broadcast_to(b, (3, 5, 4)))),
                               want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(jf, (0, None))(a, b[0])),
                               nf(a, b[0]), rtol=1e-6)
    # gradients reduce over the broadcast dimensions; finite differences check them
    loss = lambda x, y: jnp.sum(jf(x, y) * jnp.arange(20.0).reshape(5, 4))  # noqa: E731
    ga, gb = kiln.grad(loss, (0, 1))(a, b)
    gaj, gbj = kiln.jit(kiln.grad(loss, (0, 1)))(a, b)
    assert ga.shape == a.shape and gb.shape == b.shape
    np.testing.assert_allclose(np.asarray(gaj), np.asarray(ga), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gbj), np.asarray(gb), rtol=1e-5)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    w = np.arange(20.0).reshape(5, 4)
    eps = 1e-4
    d = np.zeros_like(a64)
    d[1, 0, 2] = eps
    fd = (np.sum(nf(a64 + d, b64) * w) - np.sum(nf(a64 - d, b64) * w)) / (2 * eps)
    np.testing.assert_allclose(float(ga[1, 0, 2]), fd, rtol=2e-3)
    d = np.zeros_like(b64)
    d[0, 3, 1] = eps
    fd = (np.sum(nf(a64, b64 + d) * w) - np.sum(nf(a64, b64 - d) * w)) / (2 * eps)
    np.testing.assert_allclose(float(gb[0, 3, 1]), fd, rtol=2e-3)


def test_jvp_of_size_one_operand():
    x, y = jnp.ones((1, 3)), jnp.ones((2, 3))
    _, t = kiln.jvp(lambda x: x + y, (x,), (jnp.ones((1, 3)),))
    assert t.shape == (2, 3)


def test_matches_jax_jaxpr():
    jax = pytest.importorskip("jax")
    jjnp = pytest.importorskip("jax.numpy")

    def f(np_):
        return lambda x, y: (x[None] * x[:, None], x * y, x - y, x ** y)
    x = np.array([1.0, 2.0], np.float32)
    y = np.array([3.0], np.float32)
    want = collections.Counter(e.primitive.name for e in jax.make_jaxpr(f(jjnp))(x, y).eqns)
    assert _prims(f(jnp), x, y) == want
