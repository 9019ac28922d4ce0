"""``vmap`` of ``dynamic_slice`` with batched start indices is a gather of each example's
window (JAX's rule: clamped starts), not a whole-operand select-and-sum; values under
``jit``/``grad`` match the example-by-example loop."""
import collections

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def _loop(f, *args):
    return np.stack([np.asarray(f(*[a[b] for a in args])) for b in range(args[0].shape[0])])


@pytest.mark.parametrize("starts", [[0, 3], [5, -1], [9, 2], [-7, 1]])
def test_batched_start_values(starts):
    x = np.arange(60.0, dtype=np.float32).reshape(2, 5, 6)
    i = np.array(starts, np.int32)
    j = np.array([1, 7], np.int32)

    def f(x, i, j):
        return lax.dynamic_slice(x, (i, j), (2, 3))
    want = _loop(f, x, i, j)
    np.testing.assert_array_equal(np.asarray(kiln.vmap(f)(x, i, j)), want)
    np.testing.assert_array_equal(np.asarray(kiln.jit(kiln.vmap(f))(x, i, j)), want)
    # unbatched operand, one batched index, one unbatched
    g = kiln.vmap(f, in_axes=(None, 0, None))
    np.testing.assert_array_equal(np.asarray(g(x[0], i, j[0])),
                                  _loop(lambda i: f(x[0], i, j[0]), i))
    # batch axis of the operand not in front
    h = kiln.vmap(f, in_axes=(2, 0, 0))
    xt = np.moveaxis(np.arange(120.0, dtype=np.float32).reshape(2, 5, 12), 0, 2)
    np.testing.assert_array_equal(np.asarray(h(xt, i, j)),
                                  _loop(f, np.moveaxis(xt, 2, 0), i, j))


def test_batched_start_is_a_gather():
    jaxpr = kiln.make_jaxpr(kiln.vmap(lambda x, i: lax.dynamic_index_in_dim(
        x, i, 0, keepdims=False)))(jnp.zeros((2, 100)), jnp.array([3, 4]))
    prims = collections.Counter(str(e.primitive) for e in jaxpr.jaxpr.eqns)
    assert prims["gather"] == 1
    assert prims["reduce_sum"] == 0 and prims["select_n"] <= 1


def test_batched_start_grad():
    x = np.arange(12.0, dtype=np.float32).reshape(2, 6)
    i = np.array([1, 5], np.int32)

    def loss(x):
        y = kiln.vmap(lambda x, i: lax.dynamic_slice(x, (i,), (3,)))(x, i)
        return jnp.sum(y * jnp.arange(3.0) ** 2)
    gx = np.asarray(kiln.jit(kiln.grad(loss))(x))
    want = np.zeros((2, 6), np.float32)
    want[0, 1:4] = [0, 1, 4]
    want[1, 3:6] = [0, 1, 4]          # start 5 clamps to 3
    np.testing.assert_array_equal(gx, want)
