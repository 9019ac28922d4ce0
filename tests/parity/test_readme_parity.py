"""JAX's README examples run with kiln give JAX's values and dtypes (parity with jax)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def _tanh(np_mod):
    def tanh(x):
        y = np_mod.exp(-2.0 * x)
        return (1.0 - y) / (1.0 + y)
    return tanh


def _close(a, b, rtol=1e-6, atol=1e-6):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def test_grad_tanh_values_and_dtypes():
    k = kiln.grad(_tanh(knp))(1.0)
    j = jax.grad(_tanh(jnp))(1.0)
    _close(k, j)
    assert k.weak_type == j.weak_type
    k3 = kiln.grad(kiln.grad(kiln.grad(_tanh(knp))))(1.0)
    j3 = jax.grad(jax.grad(jax.grad(_tanh(jnp))))(1.0)
    assert np.asarray(k3) == np.asarray(j3)  # bit-identical third derivative
    assert np.isclose(float(k3), 0.62162673, rtol=1e-6)


def test_hessian_jit_jacfwd_jacrev():
    def make(lib, np_mod):
        def f(x):
            return np_mod.sum(np_mod.sin(x) * x ** 2)
        return lib.jit(lib.jacfwd(lib.jacrev(f)))
    x = np.array([0.5, 1.0, 2.0], np.float32)
    _close(make(kiln, knp)(x), make(jax, jnp)(x), rtol=1e-5, atol=1e-5)


def test_abs_val_python_control_flow():
    def abs_val(x):
        if x > 0:
            return x
        else:
            return -x
    for v in (1.0, -1.0):
        _close(kiln.grad(abs_val)(v), jax.grad(abs_val)(v))


def _mlp(np_mod):
    def predict(params, inputs):
        for W, b in params:
            outputs = np_mod.dot(inputs, W) + b
            inputs = np_mod.tanh(outputs)
        return outputs

    def loss(params, inputs, targets):
        preds = predict(params, inputs)
        return np_mod.sum((preds - targets) ** 2)
    return predict, loss


def _mlp_data():
    rng = np.random.default_rng(0)
    sizes = [20, 16, 16, 4]
    params = [(rng.normal(size=(m, n)).astype(np.float32) / np.sqrt(m),
               rng.normal(size=n).astype(np.float32)) for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.normal(size=(6, 20)).astype(np.float32)
    y = rng.normal(size=(6, 4)).astype(np.float32)
    return params, x, y


def test_mlp_jit_grad_and_per_example_grads():
    params, x, y = _mlp_data()
    kp, kl = _mlp(knp)
    jp, jl = _mlp(jnp)
    kg = kiln.jit(kiln.grad(kl))(params, x, y)
    jg = jax.jit(jax.grad(jl))(params, x, y)
    for (a, b), (c, d) in zip(kg, jg):
        _close(a, c, rtol=2e-5, atol=2e-5)
        _close(b, d, rtol=2e-5, atol=2e-5)
    kpe = kiln.jit(kiln.vmap(kiln.grad(kl), in_axes=(None, 0, 0)))(params, x, y)
    jpe = jax.jit(jax.vmap(jax.grad(jl), in_axes=(None, 0, 0)))(params, x, y)
    for (a, b), (c, d) in zip(kpe, jpe):
        _close(a, c, rtol=2e-5, atol=2e-5)
        _close(b, d, rtol=2e-5, atol=2e-5)
    batch = np.stack([x, x * 2])
    _close(kiln.vmap(kp, in_axes=(None, 0))(params, batch),
           jax.vmap(jp, in_axes=(None, 0))(params, batch), rtol=2e-5, atol=2e-5)


def test_slow_f_jit_matches():
    def slow_f(x):
        return x * x + x * 2.0
    x = np.ones((50, 50), np.float32) * 1.5
    _close(kiln.jit(slow_f)(x), jax.jit(slow_f)(x))
    assert str(kiln.make_jaxpr(slow_f)(x)) == str(jax.make_jaxpr(slow_f)(x))
