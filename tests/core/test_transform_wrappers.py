"""The functions that transformations return describe the function they wrap as JAX's do:
``__wrapped__`` is the user's function (Equinox follows it to warn about transformed
modules stored as attributes), ``__name__``/``__qualname__``/``__module__`` are its own."""
import pytest

import kiln as jax


def f(x):
    """Doc of f."""
    return x


TRANSFORMS = ["jit", "grad", "value_and_grad", "jacfwd", "jacrev", "hessian", "vmap",
              "checkpoint", "remat", "pmap"]


@pytest.mark.parametrize("name", TRANSFORMS)
def test_wrapper_points_at_user_function(name):
    t = getattr(jax, name)(f)
    assert t.__name__ == "f" and t.__qualname__ == "f" and t.__module__ == __name__
    inner = t.__wrapped__
    if name == "hessian":          # jacfwd(jacrev(f)), as in JAX
        assert inner.__name__ == "f"
        inner = inner.__wrapped__
    assert inner is f


def test_wrapped_chain_reaches_a_callable_pytree():
    class Linear:
        def __init__(self):
            self.w = jax.numpy.ones(2)

        def __call__(self, x):
            return (self.w * x).sum()

    lin = Linear()
    for name in ["grad", "jacfwd", "jacrev", "hessian", "vmap"]:
        x = getattr(jax, name)(lin)
        while hasattr(x, "__wrapped__"):
            x = x.__wrapped__
        assert x is lin, name


def test_make_jaxpr_names_itself_after_the_function():
    t = jax.make_jaxpr(f)
    assert t.__name__ == "make_jaxpr(f)" and t.__qualname__ == "make_jaxpr(f)"
    assert t.__wrapped__ is f


def test_transformed_functions_still_compute():
    x = jax.numpy.arange(3.0)
    assert float(jax.grad(lambda y: (y ** 2).sum())(x)[2]) == 4.0
    assert jax.jacfwd(jax.numpy.sin)(x).shape == (3, 3)
    assert jax.hessian(lambda y: (y ** 3).sum())(x).shape == (3, 3)


@pytest.mark.parametrize("name", ["grad", "vmap", "jacfwd", "jacrev", "checkpoint",
                                  "make_jaxpr"])
def test_callable_with_a_non_string_name_is_wrapped(name):
    """As JAX's ``wraps``, copying the description never fails: a callable object whose
    ``__name__`` is not a string (an Equinox module with such a field) is still
    transformed."""
    class Odd:
        __name__ = 42

        def __call__(self, x):
            return (x * 2.0).sum()

    odd = Odd()
    t = getattr(jax, name)(odd)
    assert t.__wrapped__ is odd
    out = t(jax.numpy.ones(3)) if name != "vmap" else t(jax.numpy.ones((2, 3)))
    assert out is not None
