"""A convolutional network built with ``stax`` and trained with ``optimizers.adam``.

The network and the training loop are written with ``kiln.example_libraries`` exactly as
with ``jax.example_libraries``: ``stax.serial`` of ``Conv``/``Relu``/``MaxPool``/``Dense``
layers, an ``(init, update, get_params)`` Adam optimizer, and a jitted step. The data is
scikit-learn's bundled 8x8 digits (``sklearn.datasets.load_digits``, offline) as
``(n, 8, 8, 1)`` NHWC images: install the ``examples`` extra,
``pip install -e ".[examples]"``.
Run: ``python examples/stax_convnet.py`` (prints accuracy as it trains; reaches about
98% test accuracy).
"""
from __future__ import annotations

import time

import numpy as np

import kiln as jax
import kiln.numpy as jnp
from kiln import random
from kiln.example_libraries import optimizers, stax
from kiln.example_libraries.stax import (
    Conv,
    Dense,
    Flatten,
    LogSoftmax,
    MaxPool,
    Relu,
)


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """The 8x8 digits as ``(n, 8, 8, 1)`` float32 images in [0, 1], split train/test.

    Returns ``(train_images, train_labels, test_images, test_labels)`` as NumPy arrays;
    labels are ``(n,)`` int32.
    """
    from sklearn.datasets import load_digits as _load

    digits = _load()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    perm = np.random.RandomState(seed).permutation(len(images))
    n_test = int(round(len(images) * test_fraction))
    test, train = perm[:n_test], perm[n_test:]
    return images[train], labels[train], images[test], labels[test]


# 8x8x1 -> 8x8x16 -> 8x8x32 -> 4x4x32 -> 512 -> 64 -> 10 log-probabilities.
init_random_params, predict = stax.serial(
    Conv(16, (3, 3), padding="SAME"), Relu,
    Conv(32, (3, 3), padding="SAME"), Relu,
    MaxPool((2, 2), strides=(2, 2)),
    Flatten,
    Dense(64), Relu,
    Dense(10), LogSoftmax,
)


def loss(params, batch):
    """Mean cross-entropy of the log-probabilities ``predict`` returns."""
    inputs, targets = batch
    return -jnp.mean(jnp.sum(predict(params, inputs) * targets, axis=-1))


@jax.jit
def accuracy(params, inputs, labels):
    """The fraction of ``inputs`` whose most probable class is the integer label."""
    return jnp.mean(jnp.argmax(predict(params, inputs), axis=-1) == labels)


def main(steps: int = 600, batch_size: int = 64, step_size: float = 1e-3, seed: int = 0,
         verbose: bool = True) -> dict:
    """Trains for ``steps`` Adam steps on minibatches; returns the final metrics.

    Returns:
      ``{"train_accuracy", "test_accuracy", "test_loss", "seconds"}`` (floats), where
      ``seconds`` is the wall time of the whole run, compilation included.
    """
    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load_digits()
    t_train = np.eye(10, dtype=np.float32)[y_train]
    t_test = np.eye(10, dtype=np.float32)[y_test]

    opt_init, opt_update, get_params = optimizers.adam(step_size)

    @jax.jit
    def update(i, opt_state, batch):
        params = get_params(opt_state)
        return opt_update(i, jax.grad(loss)(params, batch), opt_state)

    _, init_params = init_random_params(random.PRNGKey(seed), (-1, 8, 8, 1))
    opt_state = opt_init(init_params)
    rng = np.random.RandomState(seed)
    steps_per_epoch = len(x_train) // batch_size
    perm = rng.permutation(len(x_train))
    for i in range(steps):
        j = i % steps_per_epoch
        if j == 0 and i > 0:
            perm = rng.permutation(len(x_train))
        idx = perm[j * batch_size:(j + 1) * batch_size]
        opt_state = update(i, opt_state, (x_train[idx], t_train[idx]))
        if verbose and ((i + 1) % 100 == 0 or i == steps - 1):
            params = get_params(opt_state)
            print(f"step {i + 1:5d}  train acc {float(accuracy(params, x_train, y_train)):.4f}"
                  f"  test acc {float(accuracy(params, x_test, y_test)):.4f}")
    params = get_params(opt_state)
    metrics = {
        "train_accuracy": float(accuracy(params, x_train, y_train)),
        "test_accuracy": float(accuracy(params, x_test, y_test)),
        "test_loss": float(loss(params, (x_test, t_test))),
        "seconds": time.perf_counter() - start,
    }
    if verbose:
        print(f"final: train acc {metrics['train_accuracy']:.4f}  test acc "
              f"{metrics['test_accuracy']:.4f}  test loss {metrics['test_loss']:.4f}  "
              f"({metrics['seconds']:.1f} s)")
    return metrics


if __name__ == "__main__":
    main()
