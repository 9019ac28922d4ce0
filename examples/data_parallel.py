"""Data-parallel training with ``pmap``: each device takes a slice of the batch.

Four virtual CPU devices (``jax_num_cpu_devices``, set before any device is used, as in
JAX; each device is a worker thread of its own) train the README's tanh MLP on
scikit-learn's bundled 8x8 digits (``sklearn.datasets.load_digits``, offline). The
parameters are replicated, one copy per device; every step each device computes the
gradient of its quarter of the global batch, ``lax.pmean`` averages the gradients across
devices, and every device applies the same SGD update, so the copies stay equal. The
same run is repeated on one device with the whole batch under ``jit``: the mean of the
per-device mean gradients is the global mean gradient, so both give the same parameters
(up to float32 summation order) and the same accuracy. Install the ``examples`` extra,
``pip install -e ".[examples]"``.
Run: ``python examples/data_parallel.py`` (prints both runs' accuracy and their largest
parameter difference).
"""
from __future__ import annotations

import functools
import time

import kiln as jax

jax.config.update("jax_num_cpu_devices", 4)   # before any device is used

import numpy as np  # noqa: E402

import kiln.numpy as jnp  # noqa: E402
from kiln import lax, random  # noqa: E402

N_DEVICES = 4


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


def init_params(key, layer_sizes: list[int]) -> list:
    """``[(W, b), ...]`` with ``W ~ N(0, 1 / fan_in)`` and zero biases."""
    keys = random.split(key, len(layer_sizes) - 1)
    return [(random.normal(k, (m, n)) / jnp.sqrt(m), jnp.zeros((n,)))
            for k, m, n in zip(keys, layer_sizes[:-1], layer_sizes[1:])]


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


@functools.partial(jax.pmap, axis_name="batch", in_axes=(0, 0, 0, None))
def parallel_step(params, inputs, targets, lr):
    """One SGD step on every device: local gradients, averaged with ``pmean``."""
    value, grads = jax.value_and_grad(loss)(params, inputs, targets)
    grads = lax.pmean(grads, axis_name="batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return lax.pmean(value, axis_name="batch"), new_params


@jax.jit
def single_step(params, inputs, targets, lr):
    """The same SGD step on one device, over the whole batch."""
    value, grads = jax.value_and_grad(loss)(params, inputs, targets)
    return value, jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


@jax.jit
def accuracy(params, inputs, labels):
    """The fraction of ``inputs`` whose arg-max logit is the integer label."""
    return jnp.mean(jnp.argmax(predict(params, inputs), axis=-1) == labels)


def replicate(tree, n):
    """Stacks ``n`` copies of every leaf along a new leading (device) axis."""
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), tree)


def unreplicate(tree):
    """Device 0's copy of every leaf."""
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def main(steps: int = 1200, batch_size: int = 128, lr: float = 0.2,
         layer_sizes=(64, 128, 128, 10), seed: int = 0, verbose: bool = True) -> dict:
    """Trains data-parallel over ``N_DEVICES`` devices and on one; returns the metrics.

    ``batch_size`` is the global batch (a multiple of ``N_DEVICES``); each device takes
    ``batch_size // N_DEVICES`` examples per step.

    Returns:
      ``{"test_accuracy", "single_device_test_accuracy", "train_accuracy", "loss",
      "max_param_diff", "seconds", "single_device_seconds", "matches_single_device"}``:
      the final test accuracy of the data-parallel run and of the one-device run, the
      data-parallel run's train accuracy and last loss, the largest absolute difference
      between the two runs' parameters, each run's wall time (compilation included), and
      whether the two runs agree (parameters within 1e-4, equal accuracy).
    """
    if batch_size % N_DEVICES:
        raise ValueError(f"batch_size={batch_size} is not a multiple of {N_DEVICES}")
    x_train, y_train, x_test, y_test = load_digits()
    t_train = np.eye(10, dtype=np.float32)[y_train]
    init = init_params(random.PRNGKey(seed), list(layer_sizes))
    steps_per_epoch = len(x_train) // batch_size

    def batches():
        rng = np.random.RandomState(seed)
        for i in range(steps):
            j = i % steps_per_epoch
            if j == 0:
                perm = rng.permutation(len(x_train))
            idx = perm[j * batch_size:(j + 1) * batch_size]
            yield i, x_train[idx], t_train[idx]

    if verbose:
        print(f"{jax.device_count()} devices: {jax.devices()}")
    start = time.perf_counter()
    params = replicate(init, N_DEVICES)
    shard = (N_DEVICES, batch_size // N_DEVICES)
    for i, x, t in batches():
        value, params = parallel_step(params, x.reshape(shard + x.shape[1:]),
                                      t.reshape(shard + t.shape[1:]), lr)
        if verbose and ((i + 1) % 200 == 0 or i == steps - 1):
            acc = accuracy(unreplicate(params), x_test, y_test)
            print(f"step {i + 1:5d}  loss {float(value[0]):.4f}  test acc {float(acc):.4f}")
    parallel_params = unreplicate(params)
    test_acc = float(accuracy(parallel_params, x_test, y_test))
    seconds = time.perf_counter() - start

    start = time.perf_counter()
    single_params = init
    for _, x, t in batches():
        _, single_params = single_step(single_params, x, t, lr)
    single_acc = float(accuracy(single_params, x_test, y_test))
    single_seconds = time.perf_counter() - start

    diffs = jax.tree_util.tree_map(lambda a, b: float(jnp.max(jnp.abs(a - b))),
                                   parallel_params, single_params)
    metrics = {
        "test_accuracy": test_acc,
        "single_device_test_accuracy": single_acc,
        "train_accuracy": float(accuracy(parallel_params, x_train, y_train)),
        "loss": float(value[0]),
        "max_param_diff": max(jax.tree_util.tree_leaves(diffs)),
        "seconds": seconds,
        "single_device_seconds": single_seconds,
    }
    # Same data, same initial parameters, same averaged gradient: only float32 summation
    # order differs between the two runs.
    metrics["matches_single_device"] = (metrics["max_param_diff"] < 1e-4
                                        and test_acc == single_acc)
    if verbose:
        print(f"data-parallel ({N_DEVICES} devices): test acc {test_acc:.4f} "
              f"({seconds:.1f} s)")
        print(f"single device:              test acc {single_acc:.4f} "
              f"({single_seconds:.1f} s)")
        print(f"largest parameter difference: {metrics['max_param_diff']:.2e}  "
              f"matches single device: {metrics['matches_single_device']}")
    return metrics


if __name__ == "__main__":
    main()
