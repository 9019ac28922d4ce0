"""Equinox on kiln: a module with array fields, trained with ``jit(grad)`` over ``vmap``.

Run with kiln as JAX: ``python -m kiln.as_jax examples/ecosystem/equinox_regression.py``
(or with JAX itself: ``python examples/ecosystem/equinox_regression.py``). Prints the
losses and final weights as JSON on its last line.
"""
import json

import equinox as eqx
import jax
import jax.numpy as jnp


class Affine(eqx.Module):
    w: jax.Array
    b: jax.Array

    def __init__(self, n_in: int, n_out: int, key):
        kw, kb = jax.random.split(key)
        self.w = jax.random.normal(kw, (n_out, n_in)) * 0.5
        self.b = jax.random.normal(kb, (n_out,)) * 0.1

    def __call__(self, x):
        return jnp.tanh(self.w @ x + self.b)


def loss(model, xs, ys):
    return jnp.mean((jax.vmap(model)(xs) - ys) ** 2)


@eqx.filter_jit
def step(model, xs, ys):
    value, grads = eqx.filter_value_and_grad(loss)(model, xs, ys)
    model = jax.tree.map(lambda p, g: p - 0.2 * g, model, grads)
    return model, value


kx, km = jax.random.split(jax.random.PRNGKey(3))
xs = jax.random.uniform(kx, (64, 3), minval=-1.0, maxval=1.0)
ys = jnp.stack([jnp.sin(xs[:, 0]), xs[:, 1] * xs[:, 2]], axis=1)
model = Affine(3, 2, km)
losses = []
for _ in range(30):
    model, value = step(model, xs, ys)
    losses.append(float(value))
print(json.dumps({"losses": losses, "w": model.w.ravel().tolist(), "b": model.b.tolist()}))
