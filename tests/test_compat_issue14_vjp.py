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
    with pytest.raises(ValueError, match="shape"):
        kiln.grad(_f(lambda r, g: (g, jnp.ones(3))))(1., 2.)


def test_against_jax():
    jax = pytest.importorskip("jax")

    @jax.custom_vjp
    def f(x, y):
        return x * y
    f.defvjp(lambda x, y: (x * y, (x, y)), lambda r, g: (g,))
    with pytest.raises(TypeError):
        jax.grad(f)(1., 2.)
