"""Pooling compiled natively (``lower_window.py``): windowed reductions and the max/min
pooling gradient (``select_and_scatter_add``) against the reference backend."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference
from kiln.compiler.lower.program import Island, Reduce, walk_steps

R = np.random.default_rng(0)
X = R.standard_normal((2, 9, 8, 3)).astype(np.float32)
TIES = np.round(X * 2) / 2


def _run(f, *args, tol=1e-5):
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    assert exe is not None
    flat = [np.asarray(a) for a in args]
    got = exe(flat)
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(g, w)
    islands = [s.eqn.primitive.name for s in walk_steps(exe.prog.steps)
               if isinstance(s, Island)]
    assert not islands, islands
    return exe


def _pool(op, init, window, strides, padding, **kw):
    return lambda x: lax.reduce_window(x, init, op, window, strides, padding, **kw)


POOLS = [
    _pool(lax.max, -jnp.inf, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
    _pool(lax.max, -jnp.inf, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
    _pool(lax.add, 0.0, (1, 3, 2, 1), (1, 1, 2, 1), ((0, 0), (1, 2), (0, 1), (0, 0))),
    _pool(lax.min, jnp.inf, (1, 2, 2, 1), (1, 1, 1, 1), "VALID", base_dilation=(1, 2, 1, 1),
          window_dilation=(1, 1, 2, 1)),
]


@pytest.mark.parametrize("k", range(len(POOLS)))
def test_pooling(k):
    _run(POOLS[k], X)


@pytest.mark.parametrize("k", [0, 1])
@pytest.mark.parametrize("x", [X, TIES], ids=["random", "ties"])
def test_max_pool_gradient(k, x):
    _run(lambda x: kiln.grad(lambda x: (POOLS[k](x) ** 2).sum())(x), x)


def test_min_pool_gradient_overlapping():
    f = _pool(lax.min, jnp.inf, (1, 2, 3, 1), (1, 1, 2, 1), "SAME")
    _run(lambda x: kiln.grad(lambda x: (f(x) ** 2).sum())(x), TIES)


def test_large_window_is_a_reduction():
    exe = _run(_pool(lax.add, 0.0, (1, 9, 8, 1), (1, 1, 1, 1), "SAME"), X, tol=1e-4)
    assert any(isinstance(s, Reduce) for s in exe.prog.steps)


def test_integer_sum_pool_and_nan_max():
    xi = R.integers(-50, 50, (2, 9, 8, 3)).astype(np.int32)
    _run(_pool(lax.add, 0, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"), xi)
    xn = X.copy()
    xn[0, 1, 1, 0] = np.nan
    _run(POOLS[0], xn)


def test_pool_fuses_with_relu_and_matches_eager():
    f = lambda x: POOLS[1](jnp.maximum(x, 0.0)) * 2.0  # noqa: E731
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(X)), np.asarray(f(X)), rtol=1e-6)
