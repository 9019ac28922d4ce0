"""A ``cond`` in a loop body that passes the carry through or scatters into it
(NumPyro's ``fori_collect``: ``cond(i >= 0, lambda c: c.at[i].set(v), lambda c: c, c)``)
updates the carry in place: no copy of the whole carry per step (it was quadratic)."""
import time

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.config import config

N, D = 20, 3


def _loop(body, init):
    return kiln.jit(lambda c: lax.fori_loop(0, N, body, c))(init)


def _ref(body, init):
    with kiln.disable_jit():
        c = init
        for i in range(N):
            c = body(i, c)
    return c


def _c0():
    return (jnp.ones(D), jnp.zeros((N, D)))


def _b4(i, v):          # the collection is read again after the cond: no in-place write
    c = lax.cond(i % 2 == 0, lambda x: x.at[i].set(v[0]), lambda x: x, v[1])
    return (v[0] + c.sum(0) * 0.01 + v[1][0], c)


BODIES = {
    "scatter_or_pass": lambda i, v: (v[0] * 0.5 + 1, lax.cond(
        i % 3 != 0, lambda x: x.at[i].set(v[0]), lambda x: x, v[1])),
    "pass_is_true_branch": lambda i, v: (v[0] + 1, lax.cond(
        i % 2 == 0, lambda x: x, lambda x: x.at[i].set(v[0] * 2), v[1])),
    "switch3": lambda i, v: (v[0] + 1, lax.switch(i % 3, [
        lambda x: x, lambda x: x.at[i].set(v[0]), lambda x: x.at[N - 1 - i].add(1.0)], v[1])),
    "read_after": _b4,
    "scatter_reads_carry": lambda i, v: (v[0], lax.cond(
        i > 0, lambda x: x.at[i].set(x[i - 1] + 1), lambda x: x, v[1])),
    "two_operands": lambda i, v: (v[0] * 1.1, lax.cond(
        i >= 5, lambda xy: xy[0].at[i - 5].set(v[0]), lambda xy: xy[1], (v[1], v[1]))),
    "other_branch_computes": lambda i, v: (v[0] + 1, lax.cond(
        i % 2 == 0, lambda x: x.at[i].set(v[0]), lambda x: x * 2.0, v[1])),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_values_as_unrolled(name):
    got = _loop(BODIES[name], _c0())
    want = _ref(BODIES[name], _c0())
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def test_scan_with_ys_and_while():
    def s(c, i):
        v, coll = c
        coll = lax.cond(i % 2 == 1, lambda x: x.at[i].set(v), lambda x: x, coll)
        return (v + 1, coll), coll[i].sum()
    (v, coll), ys = kiln.jit(lambda c: lax.scan(s, c, jnp.arange(N)))(_c0())
    want = np.zeros((N, D), np.float32)
    wys = []
    for i in range(N):
        if i % 2 == 1:
            want[i] = 1 + i
        wys.append(want[i].sum())
    np.testing.assert_array_equal(np.asarray(coll), want)
    np.testing.assert_array_equal(np.asarray(ys), np.array(wys, np.float32))

    out = kiln.jit(lambda c: lax.while_loop(
        lambda s: s[0] < N,
        lambda s: (s[0] + 1, s[1] + 1, lax.cond(s[0] % 4 == 0, lambda x: x.at[s[0]].set(s[1]),
                                                lambda x: x, s[2])), c))(
        (0, jnp.ones(D), jnp.zeros((N, D))))
    want = np.zeros((N, D), np.float32)
    for i in range(0, N, 4):
        want[i] = 1 + i
    np.testing.assert_array_equal(np.asarray(out[2]), want)


@pytest.mark.skipif(config.kiln_backend == "reference", reason="the compiled backend's")
def test_collect_is_linear_not_quadratic():
    n = 16000

    def body(i, v):
        val, coll = v
        return val * 0.5 + 1.0, lax.cond(i >= 10, lambda x: x.at[i - 10].set(val),
                                         lambda x: x, coll)

    f = kiln.jit(lambda v, c: lax.fori_loop(0, n + 10, body, (v, c)))
    v, c = jnp.ones(8), jnp.zeros((n, 8))
    kiln.block_until_ready(f(v, c))
    t = time.perf_counter()
    out = kiln.block_until_ready(f(v, c))
    dt = time.perf_counter() - t
    np.testing.assert_allclose(np.asarray(out[1][-1]), 2.0)
    assert dt < 1.0, dt     # a copy of the 512 KB collection per step took ~3.5 s
