"""Issue 14: a custom_vjp backward rule with the wrong number of cotangents is JAX's
TypeError (a wrong shape stays a ValueError, as in JAX)."""
import pytest

import kiln
import kiln.numpy as jnp


def _f(bwd):
    @kiln.custom_vjp
    def f(x, y):
        return x * y
    f.defvjp(lambda x, y: (x * y, (x, y)), bwd)
    return f


def test_wrong_number_of_cotangents_is_type_error():
    with pytest.raises(TypeError, match="same container"):
        kiln.grad(_f(lambda r, g: (g,)))(1., 2.)


def test_wrong_shape_is_value_error():
    with pytest.raises(ValueError, match=r"at output\[1\] the bwd rule produced an output of "
                                         r"type float32\[3\] corresponding to an input of "
                                         r"type float32\[\]"):
        kiln.grad(_f(lambda r, g: (g, jnp.ones(3))))(1., 2.)


def test_against_jax():
    jax = pytest.importorskip("jax")

    @jax.custom_vjp
    def f(x, y):
        return x * y
    f.defvjp(lambda x, y: (x * y, (x, y)), lambda r, g: (g,))
    with pytest.raises(TypeError):
        jax.grad(f)(1., 2.)


def test_custom_jvp_and_vjp_outside_transformations_return_the_python_value():
    import numpy as np

    @kiln.custom_jvp
    def h(x):
        return x * 2
    h.defjvp(lambda p, t: (h(*p), t[0] * 2))

    @kiln.custom_vjp
    def f(x):
        return x * 2
    f.defvjp(lambda x: (f(x), None), lambda r, g: (g * 2,))
    for fn in (h, f):
        assert type(fn(3.0)) is float and fn(3.0) == 6.0
        assert type(fn(np.float32(3.0))) is np.float32
        assert type(fn(3)) is int
        assert float(kiln.grad(fn)(3.0)) == 2.0
        assert float(kiln.jit(fn)(2.0)) == 4.0


def test_array_compress_and_vsplit_as_jax():
    import numpy as np
    x = jnp.arange(6.).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(x.compress(jnp.array([True, False]), axis=0)),
                                  [[0., 1., 2.]])
    np.testing.assert_array_equal(np.asarray(jnp.arange(3.).compress(
        jnp.array([True, False, True]))), [0., 2.])
    parts = jnp.vsplit(jnp.arange(4.), 2)
    assert [p.shape for p in parts] == [(2,), (2,)]
    with pytest.raises(IndexError):
        jnp.dsplit(jnp.ones((2, 4)), 2)


def test_broadcast_in_dim_with_dimensions_out_of_order():
    import numpy as np

    from kiln import lax
    x = jnp.arange(6.).reshape(2, 3)
    want = np.broadcast_to(np.asarray(x).T[:, None, :], (3, 4, 2))
    np.testing.assert_array_equal(np.asarray(lax.broadcast_in_dim(x, (3, 4, 2), (2, 0))), want)
    np.testing.assert_array_equal(
        np.asarray(kiln.jit(lambda v: lax.broadcast_in_dim(v, (3, 4, 2), (2, 0)))(x)), want)
    w = jnp.arange(6.).reshape(3, 2)
    g = kiln.grad(lambda v: (lax.broadcast_in_dim(v, (3, 2), (1, 0)) * w).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w).T)   # JAX's grad fails here
    jax = pytest.importorskip("jax")
    np.testing.assert_array_equal(
        np.asarray(jax.lax.broadcast_in_dim(np.asarray(x), (3, 4, 2), (2, 0))), want)
