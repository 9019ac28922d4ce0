"""Row groups: reductions over trailing axes and their per-row consumers share one loop
over rows (``kiln/compiler/row_groups.py``). Each program is checked against the
reference backend, and for whether it was grouped."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu, reference
from kiln.compiler.program import Island
from kiln.compiler.row_groups import row_groups

R = np.random.default_rng(0)
X = R.standard_normal((64, 300)).astype(np.float32)
X3 = R.standard_normal((4, 8, 100)).astype(np.float32)
I = R.integers(-1000, 1000, (40, 200)).astype(np.int32)


def _run(f, *args):
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    got = exe([np.asarray(a) for a in args])
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, [np.asarray(a) for a in args])
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind == "f":
            # Sums fold in another order than NumPy's: ulps of the result's scale.
            scale = max(1.0, float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0)))
            eps = np.finfo(g.dtype).eps
            np.testing.assert_allclose(g, w, rtol=8 * eps, atol=8 * eps * scale,
                                       equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)
    native = [s for s in exe.prog.steps if not isinstance(s, Island)]
    return [len(g) for g in row_groups(exe.prog, native)]


def _layernorm(x):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5)


@pytest.mark.parametrize("f, x", [
    (lambda x: kiln.nn.logsumexp(x, axis=1), X),
    (lambda x: kiln.nn.softmax(x, axis=-1), X),
    (_layernorm, X),
    (lambda x: kiln.nn.log_softmax(x, axis=-1), X3),
    (lambda x: x - x.sum(axis=2, keepdims=True) * x.max(axis=2, keepdims=True), X3),
    (lambda x: (x - x.min(axis=1, keepdims=True)) // (x.max(axis=1, keepdims=True) + 1), I),
])
def test_row_chains_are_one_group_and_correct(f, x):
    sizes = _run(f, x)
    assert max(sizes) >= 3, sizes


def test_group_shows_in_the_c_text():
    text = kiln.jit(lambda x: kiln.nn.logsumexp(x, axis=1)).lower(X).compile().as_text()
    assert "one loop over rows" in text


def test_nan_and_inf_rows():
    x = X.copy()
    x[3, 7] = np.nan
    x[5, :] = -np.inf
    x[6, 2] = np.inf
    _run(lambda x: kiln.nn.logsumexp(x, axis=1), x)
    _run(lambda x: kiln.nn.softmax(x, axis=1), x)


def test_reading_another_row_splits_the_group():
    # The second step reads the max of the *previous* row: it must not run in the same
    # row loop (that row's value is written by another thread, or later).
    def f(x):
        m = x.max(axis=1)
        return jnp.exp(x - jnp.roll(m, 1)[:, None]).sum(axis=1)
    sizes = _run(f, X)
    assert all(s == 1 for s in sizes), sizes


def test_reading_the_whole_reduction_splits_the_group():
    def f(x):
        m = x.max(axis=1)
        return x - m.sum()      # every row needs every row's max
    sizes = _run(f, X)
    assert max(sizes) < 3, sizes


def test_reductions_over_leading_axes_are_not_grouped():
    sizes = _run(lambda x: x - x.max(axis=0, keepdims=True), X)
    assert all(s == 1 for s in sizes), sizes


def test_few_rows_or_short_rows_are_not_grouped():
    assert all(s == 1 for s in _run(lambda x: kiln.nn.softmax(x, axis=1), X[:3]))
    short = R.standard_normal((500, 4)).astype(np.float32)
    assert all(s == 1 for s in _run(lambda x: kiln.nn.softmax(x, axis=1), short))


def test_row_invariant_gather_is_hoisted_and_correct():
    idx = R.integers(0, 300, 64).astype(np.int32)

    def f(x, i):
        pick = jnp.take_along_axis(x, i[:, None], axis=1)
        return jnp.exp(x - x.max(axis=1, keepdims=True) - pick).sum(axis=1)
    _run(f, X, idx)


def test_jit_grad_of_softmax_cross_entropy_with_groups():
    y = R.integers(0, 300, 64)
    onehot = np.eye(300, dtype=np.float32)[y]

    def loss(x):
        return -(kiln.nn.log_softmax(x, axis=1) * onehot).sum()
    got = np.asarray(kiln.jit(kiln.grad(loss))(X))
    p = np.exp(X - X.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(got, p - onehot, rtol=1e-5, atol=1e-6)
