"""``vmap`` of ``dynamic_update_slice`` with batched start indices is a scatter of each
example's window (as JAX's rule: clamped starts), not a mask over the whole operand;
values under ``jit``/``grad`` match the example-by-example loop."""
import collections

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def _loop(f, *args):
    return np.stack([np.asarray(f(*[a[b] for a in args])) for b in range(args[0].shape[0])])


@pytest.mark.parametrize("starts", [[0, 3], [5, -1], [9, 2]])
def test_batched_start_values(starts):
    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    u = -np.arange(8.0, dtype=np.float32).reshape(2, 2, 2)
    i = np.array(starts, np.int32)
    j = np.array([1, 7], np.int32)

    def f(x, u, i, j):
        return lax.dynamic_update_slice(x, u, (i, j))
    want = _loop(f, x, u, i, j)
    np.testing.assert_array_equal(np.asarray(kiln.vmap(f)(x, u, i, j)), want)
    np.testing.assert_array_equal(np.asarray(kiln.jit(kiln.vmap(f))(x, u, i, j)), want)
    # unbatched operand, batched index
    g = kiln.vmap(f, in_axes=(None, 0, 0, None))
    np.testing.assert_array_equal(
        np.asarray(g(x[0], u, i, j[0])),
        _loop(lambda u, i: f(x[0], u, i, j[0]), u, i))


def test_batched_start_is_a_scatter():
    jaxpr = kiln.make_jaxpr(kiln.vmap(lambda x, i: lax.dynamic_update_index_in_dim(
        x, 1.0, i, 0)))(jnp.zeros((2, 100)), jnp.array([3, 4]))
    prims = collections.Counter(str(e.primitive) for e in jaxpr.jaxpr.eqns)
    assert prims["scatter"] == 1 and prims["select_n"] <= 1


def test_batched_start_grad():
    x = np.arange(12.0, dtype=np.float32).reshape(2, 6)
    u = np.ones((2, 2), np.float32)
    i = np.array([1, 5], np.int32)

    def loss(x, u):
        y = kiln.vmap(lambda x, u, i: lax.dynamic_update_slice(x, u * x[0], (i,)))(x, u, i)
        return jnp.sum(y * jnp.arange(6.0))
    gx, gu = kiln.jit(kiln.grad(loss, (0, 1)))(x, u)
    eps = 1e-3
    for arr, g, k in ((x, gx, (1, 0)), (u, gu, (0, 1)), (x, gx, (0, 3))):
        d = np.zeros_like(arr)
        d[k] = eps
        a1 = (arr + d, u) if arr is x else (x, arr + d)
        a0 = (arr - d, u) if arr is x else (x, arr - d)
        fd = (float(loss(*a1)) - float(loss(*a0))) / (2 * eps)
        np.testing.assert_allclose(float(g[k]), fd, rtol=1e-2, atol=1e-2)
