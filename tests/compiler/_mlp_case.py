"""Shared by compiler tests: a small tanh MLP's softmax cross-entropy and its data (the
MLP gradient's shape: two tanh layers, a 10-class softmax)."""
import numpy as np

import kiln
import kiln.numpy as jnp

SIZES, BATCH = (40, 48, 48, 10), 32


def mlp_loss(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return -jnp.mean(jnp.sum(y * kiln.nn.log_softmax(h @ w + b), axis=-1))


def mlp_data(rng):
    """``(params, x, y)`` for :func:`mlp_loss` at ``SIZES``, ``BATCH``."""
    params = [(rng.standard_normal((m, k)).astype(np.float32) / 6,
               rng.standard_normal(k).astype(np.float32)) for m, k in zip(SIZES[:-1], SIZES[1:])]
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)]
    return params, x, y
