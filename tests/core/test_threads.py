"""Transformations in several threads at once: the current trace is per thread (as in
JAX), so concurrent jit/grad/vmap never see each other's tracers."""
from __future__ import annotations

import threading

import numpy as np

import kiln
import kiln.numpy as jnp


def _work(i, out, errors):
    try:
        f = kiln.jit(lambda x: jnp.sin(x) * i)
        g = kiln.grad(lambda x: (jnp.tanh(x) ** 2).sum())
        h = kiln.vmap(lambda x: jnp.dot(x, x))
        x = np.full(3, 0.1 * (i + 1), np.float32)
        for _ in range(100):
            a, b, c = f(x), g(x), h(np.stack([x, x]))
        out[i] = (np.asarray(a), np.asarray(b), np.asarray(c))
    except Exception as e:  # noqa: BLE001  (reported to the main thread below)
        errors.append(e)


def test_concurrent_transformations_match_sequential():
    out, errors = {}, []
    threads = [threading.Thread(target=_work, args=(i, out, errors)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    seq, seq_err = {}, []
    for i in range(4):
        _work(i, seq, seq_err)
    for i in range(4):
        for a, b in zip(out[i], seq[i]):
            np.testing.assert_array_equal(a, b)


def test_new_thread_starts_eagerly_even_inside_a_trace():
    seen = []

    def f(x):
        t = threading.Thread(target=lambda: seen.append(type(jnp.ones(2) + 1).__name__))
        t.start()
        t.join()
        return x * 2

    kiln.jit(f)(1.0)
    assert seen == ["ArrayImpl"]
