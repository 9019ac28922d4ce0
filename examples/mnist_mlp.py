"""An MNIST-style classifier from scratch, trained on scikit-learn's 8x8 digits.

The model is the README's ``predict`` (a tanh multi-layer perceptron written as a loop
over ``(W, b)`` pairs); the gradient is ``jit(grad(loss))`` and the update is plain
minibatch SGD over the parameter pytree. Only the imports differ from a JAX program.

The data is ``sklearn.datasets.load_digits`` (1797 images bundled with scikit-learn, no
download): install the ``examples`` extra, ``pip install -e ".[examples]"``.
Run: ``python examples/mnist_mlp.py`` (prints train/test accuracy per epoch; reaches about
97-98% test accuracy).
"""
from __future__ import annotations

import time

import numpy as np

import kiln as jax
import kiln.numpy as jnp
from kiln import grad, jit, random


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """The 8x8 digits as flat float32 vectors in [0, 1], split into train and test.

    Returns ``(train_images, train_labels, test_images, test_labels)`` as NumPy arrays:
    images ``(n, 64)`` float32, labels ``(n,)`` int32.
    """
    from sklearn.datasets import load_digits as _load

    digits = _load()
    images = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int32)
    perm = np.random.RandomState(seed).permutation(len(images))
    n_test = int(round(len(images) * test_fraction))
    test, train = perm[:n_test], perm[n_test:]
    return images[train], labels[train], images[test], labels[test]


def init_params(key, layer_sizes: list[int], scale: float = 1.0) -> list:
    """``[(W, b), ...]`` with ``W ~ N(0, scale / fan_in)`` and zero biases."""
    params = []
    keys = random.split(key, len(layer_sizes) - 1)
    for k, m, n in zip(keys, layer_sizes[:-1], layer_sizes[1:]):
        W = random.normal(k, (m, n)) * jnp.sqrt(scale / m)
        params.append((W, jnp.zeros((n,))))
    return params


def predict(params, inputs):
    """The README's ``predict``: tanh hidden layers; returns the last layer's logits."""
    for W, b in params:
        outputs = jnp.dot(inputs, W) + b
        inputs = jnp.tanh(outputs)
    return outputs


def loss(params, inputs, targets):
    """Mean cross-entropy; ``targets`` are one-hot rows."""
    logits = predict(params, inputs)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * targets, axis=-1))


grad_loss = jit(grad(loss))


@jit
def sgd_step(params, inputs, targets, lr):
    """One SGD step: ``params - lr * grad_loss(params, inputs, targets)``, leaf by leaf."""
    grads = grad_loss(params, inputs, targets)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


@jit
def accuracy(params, inputs, labels):
    """The fraction of ``inputs`` whose arg-max logit is the integer label."""
    return jnp.mean(jnp.argmax(predict(params, inputs), axis=-1) == labels)


def main(steps: int = 1200, batch_size: int = 64, lr: float = 0.2,
         layer_sizes=(64, 128, 128, 10), seed: int = 0, verbose: bool = True) -> dict:
    """Trains for ``steps`` minibatch SGD steps; returns the final metrics.

    Returns:
      ``{"train_accuracy", "test_accuracy", "test_loss", "seconds"}`` (floats), where
      ``seconds`` is the wall time of the whole run, compilation included.
    """
    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load_digits()
    t_train = np.eye(10, dtype=np.float32)[y_train]
    t_test = np.eye(10, dtype=np.float32)[y_test]
    params = init_params(random.PRNGKey(seed), list(layer_sizes))
    rng = np.random.RandomState(seed)
    steps_per_epoch = len(x_train) // batch_size
    perm = rng.permutation(len(x_train))
    for i in range(steps):
        j = i % steps_per_epoch
        if j == 0 and i > 0:
            perm = rng.permutation(len(x_train))
        idx = perm[j * batch_size:(j + 1) * batch_size]
        params = sgd_step(params, x_train[idx], t_train[idx], lr)
        if verbose and ((i + 1) % 200 == 0 or i == steps - 1):
            print(f"step {i + 1:5d}  train acc {float(accuracy(params, x_train, y_train)):.4f}"
                  f"  test acc {float(accuracy(params, x_test, y_test)):.4f}")
    metrics = {
        "train_accuracy": float(accuracy(params, x_train, y_train)),
        "test_accuracy": float(accuracy(params, x_test, y_test)),
        "test_loss": float(loss(params, x_test, t_test)),
        "seconds": time.perf_counter() - start,
    }
    if verbose:
        print(f"final: train acc {metrics['train_accuracy']:.4f}  test acc "
              f"{metrics['test_accuracy']:.4f}  test loss {metrics['test_loss']:.4f}  "
              f"({metrics['seconds']:.1f} s)")
    return metrics


if __name__ == "__main__":
    main()
