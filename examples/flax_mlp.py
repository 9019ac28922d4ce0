"""Train a Flax ``linen`` MLP with Optax's Adam and ``flax.training.train_state``.

Unchanged JAX code: run it plainly to train on JAX, or on kiln with::

    python -m kiln.as_jax examples/flax_mlp.py

A 200-step full-batch training loop under ``jit`` on generated data (a noisy nonlinear
regression target). Prints the loss every 20 steps and the final loss; both backends print
the same numbers (they agree to about 6 digits at every step).

The hidden layers use ``tanh``: with ReLU the run is just as close until some unit's
pre-activation on some sample is within rounding of 0, after which the two backends (or
JAX on two different CPUs) take a slightly different path and agree to 3-4 digits.
"""
from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state


class MLP(nn.Module):
    """Two ``tanh`` hidden layers, one linear output."""

    features: tuple[int, ...] = (64, 64)
    out: int = 1

    @nn.compact
    def __call__(self, x):
        for f in self.features:
            x = nn.tanh(nn.Dense(f)(x))
        return nn.Dense(self.out)(x)


def make_data(n: int = 512, d: int = 8, seed: int = 0):
    """Inputs ``x ~ N(0, 1)`` and targets ``sin(x @ w) + 0.1 * noise``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((d, 1)).astype(np.float32) / np.sqrt(d)
    y = np.sin(3.0 * x @ w) + 0.1 * rng.standard_normal((n, 1)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y.astype(np.float32))


def create_state(key, x, learning_rate: float = 1e-3) -> train_state.TrainState:
    model = MLP()
    params = model.init(key, x[:1])["params"]
    return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                         tx=optax.adam(learning_rate))


@jax.jit
def train_step(state: train_state.TrainState, x, y):
    def loss_fn(params):
        pred = state.apply_fn({"params": params}, x)
        return jnp.mean((pred - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def train(steps: int = 200, seed: int = 0) -> list[float]:
    """Train for ``steps`` full-batch steps; returns every step's loss."""
    x, y = make_data(seed=seed)
    state = create_state(jax.random.key(seed), x)
    losses = []
    for _ in range(steps):
        state, loss = train_step(state, x, y)
        losses.append(float(loss))
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    losses = train(args.steps, args.seed)
    for i in range(0, len(losses), 20):
        print(f"step {i:4d} loss {losses[i]:.6f}")
    print(f"final loss {losses[-1]:.6f} ({jax.__name__} {jax.__version__}, "
          f"{type(jnp.zeros(())).__module__})")


if __name__ == "__main__":
    main()
