"""A recurrent network written with ``lax.scan``, reading each digit image row by row.

Each 8x8 image of scikit-learn's bundled digits (``sklearn.datasets.load_digits``,
offline) is a sequence of 8 rows of 8 pixels. An Elman RNN,
``h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h)``, runs over the rows with ``lax.scan`` (one
traced step, whatever the sequence length); a dense layer classifies the last hidden
state. ``jit(value_and_grad(...))`` differentiates through the scan (backpropagation
through time) and ``optimizers.adam`` updates the parameters. Install the ``examples``
extra, ``pip install -e ".[examples]"``.
Run: ``python examples/rnn_scan.py`` (prints loss and accuracy as it trains; reaches about
98% test accuracy).
"""
from __future__ import annotations

import time

import numpy as np

import kiln as jax
import kiln.numpy as jnp
from kiln import lax, random
from kiln.example_libraries import optimizers


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """The 8x8 digits as ``(n, 8, 8)`` float32 row sequences in [0, 1], split train/test.

    Returns ``(train_images, train_labels, test_images, test_labels)`` as NumPy arrays;
    labels are ``(n,)`` int32.
    """
    from sklearn.datasets import load_digits as _load

    digits = _load()
    images = (digits.images / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int32)
    perm = np.random.RandomState(seed).permutation(len(images))
    n_test = int(round(len(images) * test_fraction))
    test, train = perm[:n_test], perm[n_test:]
    return images[train], labels[train], images[test], labels[test]


def init_params(key, n_in: int = 8, n_hidden: int = 64, n_out: int = 10) -> dict:
    """Glorot-style input and output weights, an orthogonal-ish scaled recurrent matrix."""
    k1, k2, k3 = random.split(key, 3)
    return {
        "W_xh": random.normal(k1, (n_in, n_hidden)) / jnp.sqrt(n_in),
        "W_hh": random.orthogonal(k2, n_hidden) * 0.9,
        "b_h": jnp.zeros((n_hidden,)),
        "W_hy": random.normal(k3, (n_hidden, n_out)) / jnp.sqrt(n_hidden),
        "b_y": jnp.zeros((n_out,)),
    }


def rnn_final_state(params, sequences):
    """Runs the RNN over ``sequences`` of shape ``(batch, time, features)``.

    Returns the last hidden state, ``(batch, hidden)``.
    """
    def cell(h, x_t):
        h = jnp.tanh(x_t @ params["W_xh"] + h @ params["W_hh"] + params["b_h"])
        return h, None

    h0 = jnp.zeros((sequences.shape[0], params["W_hh"].shape[0]), sequences.dtype)
    # scan runs over the leading axis: put time first.
    h_last, _ = lax.scan(cell, h0, jnp.swapaxes(sequences, 0, 1))
    return h_last


def predict(params, sequences):
    """Class logits ``(batch, 10)`` from the last hidden state."""
    return rnn_final_state(params, sequences) @ params["W_hy"] + params["b_y"]


def loss(params, sequences, labels):
    """Mean cross-entropy against integer ``labels``."""
    logp = jax.nn.log_softmax(predict(params, sequences))
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


@jax.jit
def accuracy(params, sequences, labels):
    """The fraction of ``sequences`` whose arg-max logit is the integer label."""
    return jnp.mean(jnp.argmax(predict(params, sequences), axis=-1) == labels)


def main(steps: int = 1000, batch_size: int = 64, step_size: float = 3e-3, seed: int = 0,
         verbose: bool = True) -> dict:
    """Trains for ``steps`` Adam steps on minibatches; returns the final metrics.

    Returns:
      ``{"train_accuracy", "test_accuracy", "train_loss", "test_loss", "seconds"}``
      (floats), where ``train_loss`` is the last minibatch's loss and ``seconds`` the wall
      time of the whole run, compilation included.
    """
    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load_digits()
    opt_init, opt_update, get_params = optimizers.adam(step_size)

    @jax.jit
    def update(i, opt_state, sequences, labels):
        value, grads = jax.value_and_grad(loss)(get_params(opt_state), sequences, labels)
        return value, opt_update(i, grads, opt_state)

    opt_state = opt_init(init_params(random.PRNGKey(seed)))
    rng = np.random.RandomState(seed)
    steps_per_epoch = len(x_train) // batch_size
    perm = rng.permutation(len(x_train))
    value = float("nan")
    for i in range(steps):
        j = i % steps_per_epoch
        if j == 0 and i > 0:
            perm = rng.permutation(len(x_train))
        idx = perm[j * batch_size:(j + 1) * batch_size]
        value, opt_state = update(i, opt_state, x_train[idx], y_train[idx])
        if verbose and ((i + 1) % 100 == 0 or i == steps - 1):
            params = get_params(opt_state)
            print(f"step {i + 1:5d}  loss {float(value):.4f}  test acc "
                  f"{float(accuracy(params, x_test, y_test)):.4f}")
    params = get_params(opt_state)
    metrics = {
        "train_accuracy": float(accuracy(params, x_train, y_train)),
        "test_accuracy": float(accuracy(params, x_test, y_test)),
        "train_loss": float(value),
        "test_loss": float(loss(params, x_test, y_test)),
        "seconds": time.perf_counter() - start,
    }
    if verbose:
        print(f"final: train acc {metrics['train_accuracy']:.4f}  test acc "
              f"{metrics['test_accuracy']:.4f}  test loss {metrics['test_loss']:.4f}  "
              f"({metrics['seconds']:.1f} s)")
    return metrics


if __name__ == "__main__":
    main()
