"""``kiln.custom_gradient`` (``jax.custom_gradient``) against JAX: values, gradients (with
dtypes and weak types), pytrees, closures over forward-pass values, jit, vmap and errors."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402


def _same(a, b, rtol=1e-6, atol=1e-6):
    la, lb = kiln.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert np.asarray(x).dtype == np.asarray(y).dtype, (x, y)
        assert np.shape(x) == np.shape(y)
        assert getattr(x, "weak_type", False) == getattr(y, "weak_type", False), (x, y)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def _both(build):
    """``build(mod, np_)`` for kiln and for JAX."""
    return build(kiln, knp), build(jax, jnp)


def _square(mod, np_):
    @mod.custom_gradient
    def f(x):
        return x ** 2, lambda g: (g * x,)
    return f


def _product(mod, np_):
    @mod.custom_gradient
    def f(x, y):
        return x * y, lambda g: (g * y, g * x)
    return f


def _sin_scaled(mod, np_):
    @mod.custom_gradient
    def f(x):
        c = np_.cos(x)                    # a forward-pass value closed over by the rule
        return np_.sin(x), lambda g: (3. * g * c,)
    return f


def test_docstring_examples_match_jax():
    fk, fj = _both(_square)
    _same(fk(3.), fj(3.))
    _same(kiln.grad(fk)(3.), jax.grad(fj)(3.))
    fk, fj = _both(_product)
    _same(fk(3., 4.), fj(3., 4.))
    _same(kiln.grad(fk, argnums=(0, 1))(3., 4.), jax.grad(fj, argnums=(0, 1))(3., 4.))


def test_arrays_closures_and_transformations():
    fk, fj = _both(_sin_scaled)
    x = np.linspace(-1., 1., 5).astype(np.float32)
    def lk(x):
        return fk(x).sum()
    def lj(x):
        return fj(x).sum()
    _same(fk(x), fj(x))
    _same(kiln.grad(lk)(x), jax.grad(lj)(x))
    np.testing.assert_allclose(kiln.grad(lk)(x), 3 * np.cos(x), rtol=1e-6)
    _same(kiln.jit(kiln.grad(lk))(x), jax.jit(jax.grad(lj))(x))
    _same(kiln.grad(kiln.jit(lk))(x), jax.grad(jax.jit(lj))(x))
    _same(kiln.vmap(kiln.grad(fk))(x), jax.vmap(jax.grad(fj))(x))
    _same(kiln.grad(lambda x: kiln.vmap(fk)(x).sum())(x),
          jax.grad(lambda x: jax.vmap(fj)(x).sum())(x))
    _same(kiln.jit(kiln.vmap(fk))(x), jax.jit(jax.vmap(fj))(x))
    _same(kiln.vjp(fk, x)[1](knp.ones(5)), jax.vjp(fj, x)[1](jnp.ones(5)))


def test_pytrees_and_multiple_arguments():
    def build(mod, np_):
        @mod.custom_gradient
        def f(d, s):
            out = {"a": d["x"] * s, "b": (np_.tanh(d["y"]),)}

            def rule(g):
                return ({"x": 10. * g["a"], "y": g["b"][0] * 2.}, (g["a"] * d["x"]).sum())
            return out, rule
        return f
    fk, fj = _both(build)
    d = {"x": np.array([1., 2.], np.float32), "y": np.float32(0.5)}

    def loss(f):
        return lambda d, s: f(d, s)["a"].sum() + f(d, s)["b"][0]
    s = np.float32(3.)
    _same(kiln.grad(loss(fk), argnums=(0, 1))(d, s), jax.grad(loss(fj), argnums=(0, 1))(d, s))
    _same(kiln.jit(kiln.grad(loss(fk), argnums=(0, 1)))(d, s),
          jax.jit(jax.grad(loss(fj), argnums=(0, 1)))(d, s))


def test_rule_returning_a_bare_value_or_none():
    def build(mod, np_):
        @mod.custom_gradient
        def bare(x):
            return 2. * x, lambda g: 5. * g      # not a tuple: the one argument's cotangent

        @mod.custom_gradient
        def none(x):
            return 2. * x, lambda g: None        # no gradient
        return bare, none
    (bk, nk), (bj, nj) = _both(build)
    x = np.float32(1.5)
    _same(kiln.grad(bk)(x), jax.grad(bj)(x))
    _same(kiln.grad(nk)(x), jax.grad(nj)(x))
    assert float(kiln.grad(nk)(x)) == 0.0


def test_higher_order_uses_the_rule_once():
    # grad of grad differentiates through the rule, as in JAX.
    def build(mod, np_):
        @mod.custom_gradient
        def f(x):
            return np_.sin(x), lambda g: (g * x ** 3,)
        return f
    fk, fj = _both(build)
    _same(kiln.grad(kiln.grad(fk))(0.7), jax.grad(jax.grad(fj))(0.7), rtol=1e-5)


def test_errors_match_jax():
    fk, fj = _both(_sin_scaled)
    with pytest.raises(TypeError, match="forward-mode"):
        kiln.jvp(fk, (1.,), (1.,))
    with pytest.raises(TypeError):
        jax.jvp(fj, (1.,), (1.,))

    def build(mod, np_):
        @mod.custom_gradient
        def f(x):
            def rule(g):
                if g > 0:                       # Python control flow on the cotangent
                    return (g,)
                return (-g,)
            return 2. * x, rule
        return f
    fk, fj = _both(build)
    with pytest.raises(kiln.errors.TracerBoolConversionError):
        kiln.grad(fk)(1.)
    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.grad(fj)(1.)
    _same(fk(1.), fj(1.))                       # the primal alone never calls the rule


def test_exported():
    from kiln.custom_derivatives import custom_gradient
    assert kiln.custom_gradient is custom_gradient
    assert custom_gradient.__doc__
