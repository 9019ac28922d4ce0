"""Train the ``flax.nnx`` MLP of Flax's README with ``nnx.Optimizer`` over Optax's Adam.

Unchanged JAX code: run it plainly to train on JAX, or on kiln with::

    python -m kiln.as_jax examples/flax_nnx_mlp.py

The model is the README's ``MLP`` (``nnx.Linear`` -> ``nnx.BatchNorm`` -> ``nnx.Dropout`` ->
``nnx.gelu`` -> ``nnx.Linear``), trained for 200 full-batch steps under ``nnx.jit`` with
``nnx.value_and_grad`` and ``optimizer.update(model, grads)`` on generated data (a noisy
nonlinear regression target); dropout draws its masks from the model's ``nnx.Rngs``, so
the run exercises kiln's PRNG bit for bit. Prints the loss every 20 steps, the final loss
and the evaluation loss (``model.eval()``: running batch statistics, no dropout).

Both backends print the same training losses (to about 6 digits). The evaluation loss
agrees to about 4: it uses BatchNorm's running mean, which follows ``linear1``'s bias, and
that bias has a zero gradient (BatchNorm subtracts the mean), so Adam turns its
rounding-level gradient into full-size steps whose signs follow each implementation's
rounding.
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


class MLP(nnx.Module):
    """Flax README's MLP."""

    def __init__(self, din: int, dmid: int, dout: int, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.dropout = nnx.Dropout(rate=0.1, rngs=rngs)
        self.bn = nnx.BatchNorm(dmid, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x: jax.Array):
        x = nnx.gelu(self.dropout(self.bn(self.linear1(x))))
        return self.linear2(x)


def make_data(n: int = 256, d: int = 8, seed: int = 0):
    """Inputs ``x ~ N(0, 1)`` and targets ``sin(3 x @ w) + 0.1 * noise``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((d, 1)).astype(np.float32) / np.sqrt(d)
    y = np.sin(3.0 * x @ w) + 0.1 * rng.standard_normal((n, 1)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y.astype(np.float32))


@nnx.jit
def train_step(model: MLP, optimizer: nnx.Optimizer, x, y):
    def loss_fn(model):
        pred = model(x)
        return jnp.mean((pred - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def eval_loss(model: MLP, x, y):
    return jnp.mean((model(x) - y) ** 2)


def train(steps: int = 200, seed: int = 0) -> tuple[list[float], float]:
    """Train for ``steps`` full-batch steps; returns every step's loss and the final
    evaluation loss."""
    x, y = make_data(seed=seed)
    model = MLP(x.shape[1], 64, 1, rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    model.train()
    losses = [float(train_step(model, optimizer, x, y)) for _ in range(steps)]
    model.eval()
    return losses, float(eval_loss(model, x, y))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    losses, final_eval = train(args.steps, args.seed)
    for i in range(0, len(losses), 20):
        print(f"step {i:4d} loss {losses[i]:.6f}")
    print(f"final loss {losses[-1]:.6f}")
    print(f"eval loss {final_eval:.6f} ({jax.__name__} {jax.__version__}, "
          f"{type(jnp.zeros(())).__module__})")


if __name__ == "__main__":
    main()
