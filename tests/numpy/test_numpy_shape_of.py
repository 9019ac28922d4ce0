"""``jnp.shape``/``ndim``/``size`` as JAX 0.10.2's (anything with a ``shape``/``ndim``/
``size`` attribute answers for itself: key arrays, ``ShapeDtypeStruct``s; other non-arrays
warn ``DeprecationWarning`` and get NumPy's answer), and ``jnp.broadcast_to`` of key
arrays, eagerly and under ``jit``/``vmap``."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
jnp = jax.numpy


def _inputs(m):
    return {
        "array": m.numpy.ones((2, 3)), "numpy": np.ones((4,)), "scalar": 3.0,
        "sds": m.ShapeDtypeStruct((2, 5), np.float32), "key": m.random.key(0),
        "keys": m.random.split(m.random.key(0), 3), "list": [1, 2], "tuple": ((1, 2),),
        "np_scalar": np.float32(2.0),
    }


def _call(fn, x):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn(x)
    return out, [(x.category, str(x.message).split("got")[0]) for x in w]


@pytest.mark.parametrize("fname", ["shape", "ndim", "size"])
@pytest.mark.parametrize("name", ["array", "numpy", "scalar", "sds", "key", "keys", "list",
                                  "tuple", "np_scalar"])
def test_matches_jax(fname, name):
    k = _call(getattr(knp, fname), _inputs(kiln)[name])
    j = _call(getattr(jnp, fname), _inputs(jax)[name])
    assert k == j


def test_size_with_axis():
    for axis in (0, 1, (0, 1), -1):
        assert knp.size(np.ones((2, 3)), axis) == jnp.size(np.ones((2, 3)), axis)


def test_broadcast_keys():
    k = kiln.random.split(kiln.random.key(1), 2)
    jk = jax.random.split(jax.random.key(1), 2)
    for shape in [(2,), (3, 2), (1, 4, 2)]:
        b, jb = knp.broadcast_to(k, shape), jnp.broadcast_to(jk, shape)
        assert b.shape == jb.shape and str(b.dtype) == str(jb.dtype)
        np.testing.assert_array_equal(np.asarray(kiln.random.key_data(b)),
                                      np.asarray(jax.random.key_data(jb)))
    with pytest.raises(ValueError) as e1:
        knp.broadcast_to(k, (3,))
    with pytest.raises(ValueError) as e2:
        jnp.broadcast_to(jk, (3,))
    assert str(e1.value) == str(e2.value)
    # under jit and vmap the same keys come out
    out = kiln.jit(lambda k: knp.broadcast_to(k, (3, 2)))(k)
    np.testing.assert_array_equal(np.asarray(kiln.random.key_data(out)),
                                  np.asarray(kiln.random.key_data(knp.broadcast_to(k, (3, 2)))))
    v = kiln.vmap(lambda one: knp.broadcast_to(one, (4,)))(k)
    jv = jax.vmap(lambda one: jnp.broadcast_to(one, (4,)))(jk)
    np.testing.assert_array_equal(np.asarray(kiln.random.key_data(v)),
                                  np.asarray(jax.random.key_data(jv)))
