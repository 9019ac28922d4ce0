"""Row groups: reductions over trailing axes and their per-row consumers share one loop
over rows (``kiln/compiler/render/row_groups.py``). Each program is checked against the
reference backend, and for whether it was grouped."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu, reference
from kiln.compiler.lower.program import Island
from kiln.compiler.render.row_groups import row_groups

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


# Skewed row loops (planned by render/plan_reduce.py, printed by render/rows.py): the
# first reduction of row g + 1 runs in the inner loop of the second reduction of row g. Rows of >= 256 elements; row counts
# around the thread split (each thread's last row recomputes its own first step).
def _rows(n, length, dtype=np.float32, seed=1):
    x = np.random.default_rng(seed).standard_normal((n, length)) * 4
    return x.astype(dtype)


def _skewed(f, x):
    return "gn = g + 1 < g_hi" in kiln.jit(f).lower(x).compile().as_text()


@pytest.mark.parametrize("n", [8, 9, 64, 301])
@pytest.mark.parametrize("length", [256, 3000])
def test_skewed_logsumexp_and_softmax(n, length):
    x = _rows(n, length)
    for f in (lambda x: kiln.nn.logsumexp(x, axis=1), lambda x: kiln.nn.softmax(x, axis=-1)):
        _run(f, x)
        assert _skewed(f, x)


def test_skewed_rows_with_nan_and_infinities():
    x = _rows(40, 2500)
    x[3, 17] = np.nan             # the first step's NaN flag, row after row
    x[4, :] = -np.inf             # max -inf: logsumexp's guard
    x[5, 100] = np.inf
    x[39, 0] = np.nan             # the last row of the last thread
    f = lambda x: kiln.nn.logsumexp(x, axis=1)     # noqa: E731
    got = np.asarray(kiln.jit(f)(x))
    assert np.isnan(got[3]) and np.isnan(got[39])
    assert got[4] == -np.inf and got[5] == np.inf
    ref = np.log(np.exp(x[6:39].astype(np.float64)).sum(axis=1))
    np.testing.assert_allclose(got[6:39], ref, rtol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_skewed_layernorm_sum_then_sum(dtype):
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", dtype == np.float64)
    try:
        x = _rows(33, 2100, dtype)
        _run(_layernorm, x)
        assert _skewed(_layernorm, x)
    finally:
        kiln.config.update("jax_enable_x64", old)


def test_skew_needs_long_rows_and_a_float_reduction_first():
    assert not _skewed(lambda x: kiln.nn.logsumexp(x, axis=1), _rows(64, 100))
    ints = np.arange(64 * 3000, dtype=np.int32).reshape(64, 3000)
    assert not _skewed(lambda x: x - x.max(axis=1, keepdims=True), ints)
    assert _skewed(lambda x: x / x.max(axis=1, keepdims=True), _rows(64, 3000))


def test_skewed_softmax_into_its_donated_input():
    # The elementwise step may write over the input row in place; the next row's max
    # must not be read from, nor the last row's max stored after, that write.
    x = _rows(37, 2600)
    want = np.asarray(kiln.jit(lambda x: kiln.nn.softmax(x, axis=-1))(x))
    f = kiln.jit(lambda x: kiln.nn.softmax(x, axis=-1), donate_argnums=0)
    for _ in range(2):
        got = np.asarray(f(kiln.numpy.asarray(x.copy())))
        np.testing.assert_array_equal(got, want)
    g = kiln.jit(lambda x: kiln.nn.log_softmax(x, axis=-1), donate_argnums=0)
    got = np.asarray(g(kiln.numpy.asarray(x.copy())))
    np.testing.assert_allclose(got, np.asarray(kiln.jit(
        lambda x: kiln.nn.log_softmax(x, axis=-1))(x)), rtol=0, atol=0)


def test_skewed_rows_match_the_unskewed_bits(monkeypatch):
    # Each reduction folds in the same order as alone: the skew changes no bits.
    from kiln.compiler.render import plan_reduce
    x = _rows(50, 3000)
    x[7, 5] = np.nan
    fns = [lambda x: kiln.nn.logsumexp(x, axis=1), lambda x: kiln.nn.softmax(x, axis=-1),
           _layernorm]
    skewed = [np.asarray(kiln.jit(f)(x)) for f in fns]
    assert all(_skewed(f, x) for f in fns)
    monkeypatch.setattr(plan_reduce, "skewable", lambda parts: False)
    fresh = [lambda x, f=f: f(x) for f in fns]     # new functions: new traces and builds
    assert not any(_skewed(f, x) for f in fresh)
    for f, want in zip(fresh, skewed):
        np.testing.assert_array_equal(np.asarray(kiln.jit(f)(x)), want)


@pytest.mark.parametrize("op", ["max", "min"])
def test_skewed_next_row_nan_check_with_infinities(op):
    # The next row's NaN check is x * 0 summed: an infinity also trips it, and then the
    # row is looked at again for a real NaN.
    x = _rows(20, 600)
    x[2, 5] = np.inf
    x[3, 9] = -np.inf
    x[4, :] = np.inf if op == "min" else -np.inf
    x[6, 1], x[6, 2] = np.inf, np.nan
    x[9, 599] = np.nan
    f = lambda x: x - getattr(x, op)(axis=1, keepdims=True)    # noqa: E731
    assert _skewed(f, x)
    got = np.asarray(kiln.jit(f)(x))
    with np.errstate(invalid="ignore"):
        want = x - getattr(np, op)(x, axis=1, keepdims=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


def test_exp_of_x_minus_its_row_max_takes_the_short_loop(monkeypatch):
    # sum(exp(x - c)) with c >= max(x) - FIN_MAX, known from the group's first step: the
    # row runs fexp32_fin / xexp32_fin (no overflow/NaN select; softmax's elementwise exp
    # too) when its guard holds, the general
    # loop otherwise (an infinity or NaN in the row, or a shift that may overflow).
    from kiln.compiler.render import plan_reduce
    x = _rows(30, 2000)
    x[2, 7] = np.nan
    x[3, 11] = np.inf
    x[4, :] = -np.inf
    x[5, 9] = -np.inf
    x[6, 100] = 1e30
    fns = [lambda x: kiln.nn.logsumexp(x, axis=1),
           lambda x: kiln.nn.softmax(x, axis=-1),
           # arguments up to 100 and 50: the guard fails (inf) and holds
           lambda x: jnp.sum(jnp.exp(x - (x.max(axis=1, keepdims=True) - 100.0)), axis=1),
           lambda x: jnp.sum(jnp.exp(x - (x.max(axis=1, keepdims=True) - 50.0)), axis=1)]
    texts = [kiln.jit(f).lower(x).compile().as_text() for f in fns]
    assert all("exp32_fin(t" in t and "gn = g + 1 < g_hi" in t for t in texts)
    assert "xexp32_fin(t" in texts[1]
    fast = [np.asarray(kiln.jit(f)(x)) for f in fns]
    assert np.isinf(fast[2][7:]).all() and np.isfinite(fast[3][7:]).all()
    for f in fns:
        _run(f, x)
    monkeypatch.setattr(plan_reduce, "bounded_exps", lambda *a: [])
    fresh = [lambda x, f=f: f(x) for f in fns]
    assert not any("exp32_fin(t" in kiln.jit(f).lower(x).compile().as_text() for f in fresh)
    for f, want in zip(fresh, fast):
        np.testing.assert_array_equal(np.asarray(kiln.jit(f)(x)), want)


def test_rows_within_the_exp_range_take_the_loop_without_selects(monkeypatch):
    # A summed exp of x - max(x) whose row min is also known (folded beside the next
    # row's max, and for each block's first row on its own): rows whose arguments all
    # lie in [FIN_MIN, FIN_MAX] call fexp32_in; a row spanning more (an argument that
    # flushes to 0) the _fin loop; an infinity or a NaN the general loop. Same bits as
    # without the shortcuts, for rows anywhere in a block (the first ones included).
    from kiln.compiler.render import plan_reduce, rows
    x = _rows(700, 1500)
    x[0, 3] = -200.0                    # a block's first row spanning more than 87
    x[5, 7] = -95.0
    x[6, 2] = x[6, 1] - 87.0            # within: argument about -87 - spread
    x[8, :] = -1e30
    x[9, 4], x[10, 8], x[11, 0] = np.nan, np.inf, -np.inf
    x[699, 1499] = -300.0               # the last row
    fns = [lambda x: kiln.nn.logsumexp(x, axis=1),
           lambda x: jnp.sum(jnp.exp(x - x.max(axis=1, keepdims=True)), axis=1)]
    for f in fns:
        text = kiln.jit(f).lower(x).compile().as_text()
        assert "fexp32_in(t" in text and "fexp32_fin(t" in text and "kiln_mn" in text
    got = [np.asarray(kiln.jit(f)(x)) for f in fns]
    for f in fns:
        _run(f, x)
    # softmax's exp is XLA's (not summed): no min is folded for it
    assert "kiln_mn" not in kiln.jit(lambda x: kiln.nn.softmax(x, axis=-1)).lower(
        x).compile().as_text()
    monkeypatch.setattr(rows, "_range_guards", lambda *a: {})
    fresh = [lambda x, f=f: f(x) for f in fns]
    for f, want in zip(fresh, got):
        text = kiln.jit(f).lower(x).compile().as_text()
        assert "fexp32_in(t" not in text and "fexp32_fin(t" in text
        np.testing.assert_array_equal(np.asarray(kiln.jit(f)(x)), want)
    monkeypatch.setattr(plan_reduce, "bounded_exps", lambda *a: [])
    fresh = [lambda x, f=f: f(x) for f in fns]
    for f, want in zip(fresh, got):
        assert "exp32_fin(t" not in kiln.jit(f).lower(x).compile().as_text()
        np.testing.assert_array_equal(np.asarray(kiln.jit(f)(x)), want)


def test_short_loop_only_for_a_max_and_a_row_constant():
    x = _rows(20, 1000)
    for f in (lambda x: jnp.sum(jnp.exp(x - x.min(axis=1, keepdims=True)), axis=1),
              lambda x: jnp.sum(jnp.exp(x - x.max(axis=1, keepdims=True) + x[0]), axis=1),
              lambda x: jnp.sum(jnp.exp(2 * x - x.max(axis=1, keepdims=True)), axis=1)):
        assert "exp32_fin(t" not in kiln.jit(f).lower(x).compile().as_text()
        _run(f, x)


def test_short_loop_under_vmap(monkeypatch):
    # vmap(logsumexp) over [3, 40, n]: the max may see the rows as [120, n] and the
    # exp-sum as [3, 40, n]; both read x at each row-major position, so the guard holds.
    from kiln.compiler.render import plan_reduce
    x = _rows(120, 700).reshape(3, 40, 700)
    x[0, 5, 9], x[1, 7, 3], x[2, 39, :] = np.nan, np.inf, -np.inf
    f = kiln.jit(kiln.vmap(lambda x: kiln.nn.logsumexp(x, axis=-1)))
    assert "exp32_fin(t" in f.lower(x).compile().as_text()
    got = np.asarray(f(x))
    assert np.isnan(got[0, 5]) and got[1, 7] == np.inf and got[2, 39] == -np.inf
    monkeypatch.setattr(plan_reduce, "bounded_exps", lambda *a: [])
    g = kiln.jit(kiln.vmap(lambda x: kiln.nn.logsumexp(x, axis=-1)))
    assert "exp32_fin(t" not in g.lower(x).compile().as_text()
    np.testing.assert_array_equal(np.asarray(g(x)), got)
    x64 = x.astype(np.float64)
    ok = np.isfinite(x64).all(axis=-1)
    ref = np.log(np.exp(x64[ok]).sum(axis=-1))
    np.testing.assert_allclose(got[ok], ref, rtol=2e-6)


def test_skew_prefetch_of_the_row_after_next(monkeypatch):
    # CRenderer.skew_prefetch: each chunk of a chunked skewed loop prefetches its lines of
    # the row after the next one (one row further than the next row's loads); same bits
    # with and without; "auto" only on Intel processors with AVX-512.
    from kiln.compiler.build import build
    from kiln.compiler.render import render_c
    from kiln.compiler.render.render_c import CRenderer
    x = _rows(45, 3000)
    x[9, 4] = np.nan
    hint = "__builtin_prefetch({addr}, 0, 1)"
    fns = [lambda x: kiln.nn.logsumexp(x, axis=1), _layernorm]
    monkeypatch.setattr(CRenderer, "skew_prefetch", hint)
    texts = [kiln.jit(f).lower(x).compile().as_text() for f in fns]
    for t in texts:
        # one row further on, stopping at the buffer's end (no clamp per address)
        assert "i1_n + (135000 - (((3000*i0_n + i1_n)) + 3000)) < c1 ?" in t
        assert "i1_n < i1_n_pe; i1_n += 16) __builtin_prefetch(&b" in t
        assert "[((3000*i0_n + i1_n)) + 3000], 0, 1);" in t
    got = [np.asarray(kiln.jit(f)(x)) for f in fns]
    monkeypatch.setattr(CRenderer, "skew_prefetch", None)
    fresh = [lambda x, f=f: f(x) for f in fns]
    assert not any("i1_n)) + 3000" in kiln.jit(f).lower(x).compile().as_text()
                   for f in fresh)
    for f, want in zip(fresh, got):
        np.testing.assert_array_equal(np.asarray(kiln.jit(f)(x)), want)
    # Not for rows short enough to go unchunked (a skewed softmax is not chunked either).
    monkeypatch.setattr(CRenderer, "skew_prefetch", hint)
    short = kiln.jit(lambda x: kiln.nn.logsumexp(x, axis=1) + 1.0).lower(
        _rows(45, 1500)).compile().as_text()
    assert "gn = g + 1 < g_hi" in short and "i1_n)) + 1500" not in short
    monkeypatch.setattr(CRenderer, "skew_prefetch", "auto")
    for intel in (True, False):
        monkeypatch.setattr(render_c, "intel_avx512", lambda intel=intel: intel)
        g = lambda x, intel=intel: kiln.nn.logsumexp(x, axis=1) - float(intel)  # noqa: E731
        assert ("i1_n)) + 3000" in kiln.jit(g).lower(x).compile().as_text()) == intel
    assert isinstance(build.intel_avx512(), bool)
