"""``mask_selected_scatters``: ``select_n(broadcast(pred), old, scatter(old, ...))`` batched
at axis 0 (a vmapped loop body selecting its carry with a batched predicate, as Equinox's
checkpointed ``while_loop`` does) becomes one scatter whose false lanes are dropped. The
rewritten jaxpr has no whole-array select and gives the reference backend's values."""
from __future__ import annotations

import time

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends.reference import run_jaxpr
from kiln.compiler.passes import passes as P
from kiln.core.jaxpr import check_jaxpr


def run(closed, *args):
    return run_jaxpr(closed.jaxpr, closed.consts, [np.asarray(a) for a in args])


def names(closed):
    return [e.primitive.name for e in closed.eqns]


def _rewrite(closed):
    out = P.dce(P.mask_selected_scatters(closed))
    check_jaxpr(out.jaxpr)
    return out


P_ = np.array([True, False, True, False])
X = np.arange(24.0, dtype=np.float32).reshape(4, 6)
I = np.array([0, 5, 9, -3], np.int32)          # 9 and -3: out of range (clip / drop)
V = np.array([10.0, 20.0, 30.0, 40.0], np.float32)


@pytest.mark.parametrize("mode", ["clip", "drop", None])
@pytest.mark.parametrize("op", ["set", "add", "max"])
@pytest.mark.parametrize("negate", [False, True])
def test_select_of_scatter_values(mode, op, negate):
    def f(p, x, i, v):
        new = getattr(x.at[i], op)(v, mode=mode)
        return lax.select(p, x, new) if negate else lax.select(p, new, x)
    closed = kiln.make_jaxpr(kiln.vmap(f))(P_, X, I, V)
    assert "select_n" in names(closed)
    out = _rewrite(closed)
    assert not [e for e in out.eqns
                if e.primitive.name == "select_n" and e.outvars[0].aval.shape == X.shape]
    scatters = [e for e in out.eqns if e.primitive.name.startswith("scatter")]
    assert len(scatters) == 1
    assert str(scatters[0].params["mode"]).endswith("FILL_OR_DROP")
    want = run(closed, P_, X, I, V)
    got = run(out, P_, X, I, V)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    # and compiled (the pass runs in the pipeline)
    np.testing.assert_array_equal(np.asarray(kiln.jit(kiln.vmap(f))(P_, X, I, V)),
                                  np.asarray(want[0]))


def test_scatter_with_another_use_is_kept():
    def f(p, x, i, v):
        new = x.at[i].set(v)
        return lax.select(p, new, x), new
    closed = kiln.make_jaxpr(kiln.vmap(f))(P_, X, I, V)
    assert P.mask_selected_scatters(closed) is closed


def test_select_of_another_operand_is_kept():
    def f(p, x, y, i, v):
        return lax.select(p, x.at[i].set(v), y)     # not a select against the operand
    closed = kiln.make_jaxpr(kiln.vmap(f))(P_, X, X + 1, I, V)
    assert P.mask_selected_scatters(closed) is closed


def test_unbatched_scatter_is_kept():
    def f(p, i, v):
        x = jnp.zeros(6)
        return lax.select(p, x.at[i].set(v), x)
    closed = kiln.make_jaxpr(kiln.vmap(f, in_axes=(0, None, None)))(P_, 1, 2.0)
    assert P.mask_selected_scatters(closed) is closed


def _select_loop(n):
    """A vmapped loop whose body selects its own carry with the lane's predicate."""
    @kiln.jit
    @kiln.vmap
    def f(step, xs):
        def body(c):
            step, xs = c
            live = step < n
            return lax.select(live, step + 1, step), lax.select(
                live, xs.at[step].set(1.0 + step), xs)
        return lax.while_loop(lambda c: c[0] < xs.size, body, (step, xs))
    return f


def test_loop_with_selected_scatter_values_and_cost():
    f = _select_loop(40_000)
    step = jnp.array([0, 39_990])
    xs = jnp.zeros((2, 40_000))
    f(step, xs)
    t = time.perf_counter()
    out = f(step, xs)
    elapsed = time.perf_counter() - t
    got = np.asarray(out[1])
    want = np.zeros((2, 40_000), np.float32)
    want[0] = 1.0 + np.arange(40_000)
    want[1, 39_990:] = 1.0 + np.arange(39_990, 40_000)
    np.testing.assert_array_equal(got, want)
    assert elapsed < 1.0       # a whole-carry select per step: seconds
