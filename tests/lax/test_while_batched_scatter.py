"""``vmap`` of a ``while_loop`` whose body updates a carried array with a scatter: lanes
that have stopped keep their values (their updates are dropped instead of a select of the
whole carry, ``kiln/lax/control/masked_scatter.py``). Values match a lane-by-lane loop,
eagerly, under ``jit``, and with ``jvp``; the loop does per-iteration work independent of
the carry's size."""
import time

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def _body(kind):
    def body(c):
        step, stop, xs = c
        if kind == "set":
            xs = xs.at[step].set(2.0 * jnp.tanh(xs[step // 2]) + 1.0)
        elif kind == "add":
            xs = xs.at[step].add(xs[0] + 1.0)
        elif kind == "dus":   # clamped window of 2: near the end it overlaps earlier ones
            xs = lax.dynamic_update_slice_in_dim(xs, jnp.stack([xs[0], 3.0 + step]), step, 0)
        else:
            xs = xs.at[jnp.array([step, step + 3])].add(1.0, mode="drop")
        return step + 1, stop, xs
    return body


def _loop(kind):
    def f(step, stop, xs):
        return lax.while_loop(lambda c: c[0] < c[1], _body(kind), (step, stop, xs))
    return f


@pytest.mark.parametrize("kind", ["set", "add", "dus", "multi"])
def test_lanes_stop_at_different_times(kind):
    f = _loop(kind)
    step = np.array([0, 3, 2], np.int32)
    stop = np.array([5, 9, 2], np.int32)
    xs = np.arange(30.0, dtype=np.float32).reshape(3, 10) / 10
    want = [f(step[b], stop[b], xs[b]) for b in range(3)]
    for g in (kiln.vmap(f), kiln.jit(kiln.vmap(f))):
        got = g(step, stop, xs)
        for k in range(3):
            np.testing.assert_allclose(np.asarray(got[k]),
                                       np.stack([np.asarray(w[k]) for w in want]), rtol=1e-6)


def test_jvp_through_batched_loop():
    f = _loop("set")
    step = np.array([0, 3], np.int32)
    stop = np.array([6, 8], np.int32)
    xs = np.linspace(0.0, 1.0, 20, dtype=np.float32).reshape(2, 10)
    t = np.ones_like(xs)
    _, tout = kiln.jvp(lambda x: kiln.vmap(f)(step, stop, x)[2], (xs,), (t,))
    eps = 1e-3
    fd = (np.asarray(kiln.vmap(f)(step, stop, xs + eps * t)[2])
          - np.asarray(kiln.vmap(f)(step, stop, xs - eps * t)[2])) / (2 * eps)
    np.testing.assert_allclose(np.asarray(tout), fd, rtol=1e-2, atol=1e-2)


def test_update_cost_does_not_grow_with_the_carry():
    @kiln.jit
    @kiln.vmap
    def f(step, xs):
        return lax.while_loop(lambda c: c[0] < c[1].size,
                              lambda c: (c[0] + 1, c[1].at[c[0]].set(1.0)), (step, xs))
    args = jnp.array([0]), jnp.zeros((1, 50_000))
    f(*args)
    t = time.perf_counter()
    out = f(*args)
    assert float(out[1].sum()) == 50_000.0
    assert time.perf_counter() - t < 1.0       # a whole-carry select per step: ~10 s
