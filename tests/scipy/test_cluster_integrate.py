"""``kiln.scipy.cluster.vq.vq`` and ``kiln.scipy.integrate.trapezoid`` (as JAX's), and the
``jax._src.scipy`` aliases JAX's lax_scipy_test imports."""
import importlib

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.scipy import integrate
from kiln.scipy.cluster import vq


def _nearest(obs, cb):
    d = np.sqrt(((obs[:, None, :].astype(np.float64) - cb[None]) ** 2).sum(-1))
    return d.argmin(-1), d.min(-1)


@pytest.mark.parametrize("jit", [False, True])
def test_vq_assigns_the_nearest_code(jit):
    r = np.random.default_rng(3)
    obs = r.standard_normal((30, 4)).astype(np.float32)
    cb = r.standard_normal((6, 4)).astype(np.float32)
    f = kiln.jit(vq.vq) if jit else vq.vq
    code, dist = f(obs, cb)
    want_code, want_dist = _nearest(obs, cb)
    assert code.dtype == np.int32 and dist.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(code), want_code)
    np.testing.assert_allclose(np.asarray(dist), want_dist, rtol=1e-6)
    # one-dimensional: each entry is a length-1 observation; ties take the first code
    code1, dist1 = f(np.array([0.0, 2.4, 5.0]), np.array([1.0, 3.0, 3.0]))
    assert np.asarray(code1).tolist() == [0, 1, 1]
    np.testing.assert_allclose(np.asarray(dist1), [1.0, 0.6, 2.0], rtol=1e-6)


def test_vq_integer_inputs_and_errors():
    code, dist = vq.vq(np.array([[0, 0], [5, 5]]), np.array([[1, 1], [4, 4]]))
    assert np.asarray(code).tolist() == [0, 1] and dist.dtype == jnp.float32
    with pytest.raises(ValueError, match="same rank"):
        vq.vq(np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="ndim different than 1 or 2"):
        vq.vq(np.zeros((2, 2, 2)), np.zeros((2, 2, 2)))
    with pytest.raises(TypeError):
        vq.vq([[1.0]], [[1.0]])                     # lists: JAX's arraylike check


def test_vq_gradient_of_the_distance():
    obs = np.array([[0.0, 3.0]], np.float32)
    cb = np.array([[0.0, 0.0], [10.0, 10.0]], np.float32)
    g = kiln.grad(lambda o: vq.vq(o, cb)[1].sum())(obs)
    np.testing.assert_allclose(np.asarray(g), [[0.0, 1.0]], atol=1e-6)


def test_trapezoid_as_numpy():
    y = np.array([1.0, 2.0, 3.0, 2.0, 3.0, 2.0, 1.0])
    x = np.array([0.0, 2.0, 5.0, 7.0, 10.0, 15.0, 20.0])
    np.testing.assert_allclose(float(integrate.trapezoid(y, x)), np.trapezoid(y, x))
    np.testing.assert_allclose(float(integrate.trapezoid(y, dx=0.5)), np.trapezoid(y, dx=0.5))
    m = np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(np.asarray(integrate.trapezoid(m, axis=0)),
                               np.trapezoid(m, axis=0))


def test_src_scipy_aliases():
    src = importlib.import_module("kiln._src.scipy")
    assert src.special is importlib.import_module("kiln.scipy.special")
    assert src.cluster.vq.vq is vq.vq
    assert kiln.scipy.cluster is importlib.import_module("kiln.scipy.cluster")
    assert kiln.scipy.integrate is integrate
