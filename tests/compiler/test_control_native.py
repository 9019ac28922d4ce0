"""Control flow compiled natively (``lower_control.py``, ``render_control.py``): loops
and branches against the reference backend, and what stays a host island."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference
from kiln.compiler.lower.program import Branch, Island, Loop, Scatter, walk_steps

R = np.random.default_rng(0)
V = np.linspace(-1, 1, 16).astype(np.float32)
M = R.standard_normal((4, 5)).astype(np.float32)


def _run(f, *args, rtol=2e-6, atol=2e-6):
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    assert exe is not None
    flat = [np.asarray(a) for a in kiln.tree_util.tree_leaves(args)]
    got = exe(flat)
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
    return exe


def _kinds(exe):
    return {type(s).__name__ for s in walk_steps(exe.prog.steps)}


def _native(exe, kind=Loop):
    top = exe.prog.steps
    assert any(isinstance(s, kind) for s in top), [type(s).__name__ for s in top]
    assert not any(isinstance(s, Island) for s in walk_steps(top))


@pytest.mark.parametrize("n", [0, 1, 7])
def test_fori_loop_static_trip_count(n):
    f = lambda x: lax.fori_loop(0, n, lambda i, c: c * 0.5 + jnp.tanh(c) + i, x)  # noqa: E731
    _native(_run(f, V))


@pytest.mark.parametrize("n", [-3, 0, 5])
def test_fori_loop_traced_trip_count(n):
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, c: c * 0.5 + i.astype(jnp.float32), x)
    _native(_run(f, V, np.int32(n)))


def test_while_with_reduction_in_condition():
    def f(x):
        return lax.while_loop(lambda c: jnp.sum(c * c) < 1e4, lambda c: c * 1.7 + 0.1, x)
    _native(_run(f, V, rtol=1e-5))


def test_while_pytree_carry_of_mixed_dtypes():
    def f(x):
        def body(c):
            v, k, done = c
            return v * 1.1 + k.astype(jnp.float32), k + 1, (k + 1) >= 5
        return lax.while_loop(lambda c: ~c[2], body, (x, jnp.int32(0), False))
    _native(_run(f, V))


def test_carries_swapped_and_passed_through():
    def f(a, b, c):
        return lax.fori_loop(0, 5, lambda i, s: (s[1], s[0] + s[2], s[2]), (a, b, c))
    _native(_run(f, V, V * 2, V * 3))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_with_consts_xs_and_several_ys(reverse):
    xs = R.standard_normal((6, 4, 5)).astype(np.float32)

    def f(m, xs):
        def body(c, x):
            c = jnp.tanh(c * 0.9 + x * m)
            return c, (c.sum(axis=1), c * 2.0)
        return lax.scan(body, jnp.zeros((4, 5), jnp.float32), xs, reverse=reverse)
    _native(_run(f, M, xs, rtol=1e-5, atol=1e-5))


def test_scan_of_length_zero():
    xs = np.zeros((0, 3), np.float32)
    f = lambda xs: lax.scan(lambda c, x: (c + x, c * x), jnp.ones(3), xs)  # noqa: E731
    _run(f, xs)


def test_scan_rnn_with_matrix_products_and_its_gradient():
    W = (R.standard_normal((32, 32)) / 6).astype(np.float32)
    xs = R.standard_normal((10, 8, 32)).astype(np.float32)

    def loss(W, xs):
        def step(h, x):
            h = jnp.tanh(h @ W + x)
            return h, h.sum()
        h, ys = lax.scan(step, jnp.zeros((8, 32), jnp.float32), xs)
        return jnp.sum(h * h) + ys.sum()
    exe = _run(lambda W, xs: kiln.value_and_grad(loss)(W, xs), W, xs, rtol=2e-5, atol=2e-5)
    assert "Loop" in _kinds(exe) and "Gemm" in _kinds(exe)


@pytest.mark.parametrize("pred", [True, False])
def test_cond_on_a_boolean(pred):
    f = lambda p, x: lax.cond(p, lambda x: jnp.exp(x) + 1, lambda x: x * 2, x)  # noqa: E731
    _native(_run(f, np.bool_(pred), V), Branch)


@pytest.mark.parametrize("i", [-5, 0, 1, 2, 9])
def test_switch_index_is_clamped(i):
    branches = [lambda x: x + 1, lambda x: x * 2, lambda x: jnp.sin(x).sum() + x]
    f = lambda i, x: lax.switch(i, branches, x)  # noqa: E731
    _native(_run(f, np.int32(i), V), Branch)


def test_nested_loops_and_branches():
    def f(x):
        def outer(c, xi):
            c = lax.fori_loop(0, 3, lambda j, d: d * 0.9 + xi, c)
            c = lax.cond(c.sum() > 0, lambda d: d - 1.0, lambda d: d + 1.0, c)
            return c, c.max()
        return lax.scan(outer, jnp.zeros(16, jnp.float32), x)
    xs = R.standard_normal((5, 16)).astype(np.float32)
    exe = _run(f, xs, rtol=1e-5, atol=1e-5)
    assert {"Loop", "Branch"} <= _kinds(exe)


def test_a_body_with_an_island_calls_back_from_the_native_loop():
    # (tests/compiler/test_host_calls_in_loops.py has the rest of host calls)
    f = lambda x: lax.fori_loop(0, 3, lambda i, c: jnp.sort(c * -1.0), x)  # noqa: E731
    exe = _run(f, V)
    loops = [s for s in walk_steps(exe.prog.steps) if isinstance(s, Loop)]
    assert loops and any(isinstance(s, Island) and s.host_id is not None
                         for s in walk_steps(loops[0].body))
    assert not any(isinstance(s, Island) for s in exe.prog.steps)
    np.testing.assert_array_equal(np.asarray(kiln.jit(f)(V)), np.asarray(f(V)))


def test_vmap_of_while_with_per_lane_trip_counts():
    def f(x):
        return lax.while_loop(lambda c: c < 10.0, lambda c: c * 2.0 + 0.5, x)
    _run(kiln.vmap(f), np.array([0.1, 3.0, 20.0, -0.2], np.float32))


def test_float64_and_integer_carries():
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    try:
        def f(x, k):
            return lax.fori_loop(0, 9, lambda i, c: (c[0] * 1.0000001 + 1e-9,
                                                    c[1] * 3 + i), (x, k))
        _native(_run(f, V.astype(np.float64), np.arange(16, dtype=np.int64)))
    finally:
        kiln.config.update("jax_enable_x64", old)


def test_code_size_does_not_depend_on_trip_count():
    def src(n):
        f = kiln.jit(lambda x: lax.fori_loop(0, n, lambda i, c: c * 0.5 + 1.0, x))
        return f.lower(V).compile().as_text()
    a, b = src(10), src(10**6)
    assert abs(len(a) - len(b)) < 10
    assert "for (int64_t L" in a


def test_jit_results_match_eager():
    f = lambda x: lax.fori_loop(0, 100, lambda i, c: c * 0.99 + 0.01, x)  # noqa: E731
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(V)), np.asarray(f(V)), rtol=1e-6)


def _loop_body(exe):
    (loop,) = [s for s in walk_steps(exe.prog.steps) if isinstance(s, Loop)]
    return loop.body


def test_at_set_in_a_loop_updates_the_carry_in_place():
    f = lambda x: lax.fori_loop(0, 50, lambda i, c: c.at[i].set(i * 2.0), x)  # noqa: E731
    exe = _run(f, np.zeros(50, np.float32))
    body = _loop_body(exe)
    # No kernel copies the 50-element array each iteration: one scatter, one counter.
    assert not any(type(s).__name__ == "Kernel" and s.shape != (1,) for s in body), body


def test_dynamic_update_slice_native_and_in_place():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    _native(_run(lambda x, i: lax.dynamic_update_slice(x, -x[:2, :3], (i, -5)), x,
                 np.int32(3)), kind=Scatter)

    def f(x):
        return lax.fori_loop(0, 10, lambda i, c: lax.dynamic_update_slice(
            c, jnp.ones((1, 6), jnp.float32) * i, (i % 4, 0)), x)
    exe = _run(f, x)
    assert not any(type(s).__name__ == "Kernel" and s.shape in ((24,), (4, 6))
                   for s in _loop_body(exe))


def test_scatter_reading_its_own_carry_keeps_the_copy():
    x = np.arange(8, dtype=np.float32)
    f = lambda x: lax.fori_loop(0, 10, lambda i, c: c.at[i % 8].add(c[(i + 1) % 8]), x)  # noqa: E731
    _run(f, x)
    g = lambda x: lax.fori_loop(0, 6, lambda i, c: c.at[:].add(c[::-1]), x)  # noqa: E731
    _run(g, x)


def test_in_place_updates_that_read_each_other():
    # Each new carry reads the other's old value: at most one can be in place.
    def f(a, b):
        return lax.fori_loop(0, 7, lambda i, s: (s[0] * 0.5 + s[1], s[1] * 0.25 - s[0]),
                             (a, b))
    _run(f, V, V * 3)

    def g(a, k):
        return lax.fori_loop(0, 5, lambda i, s: (s[0].at[s[1] % 16].set(s[1] * 1.0),
                                                 s[1] + 3), (a, k))
    _run(g, V, np.int32(2))


def test_loop_invariant_scan_residuals_are_stored_once():
    W = (R.standard_normal((16, 16)) / 4).astype(np.float32)
    xs = R.standard_normal((12, 4, 16)).astype(np.float32)

    def loss(W, xs):
        def step(h, x):
            h = jnp.tanh(h @ W + x)
            return h, h.sum()
        h, ys = lax.scan(step, jnp.zeros((4, 16), jnp.float32), xs)
        return jnp.sum(h * h) + ys.sum()
    exe = _run(lambda W, xs: kiln.grad(loss)(W, xs), W, xs, rtol=2e-5, atol=2e-5)
    # The forward scan's residuals include W (transposed) at every step in the jaxpr;
    # nothing of shape (12, 16, 16) is stored.
    assert not any(b.shape == (12, 16, 16) for b in exe.prog.buffers), \
        [b.shape for b in exe.prog.buffers]

    def f(xs, c):       # an invariant stacked output, also a program output
        return lax.scan(lambda h, x: (h + x, c * 2.0), jnp.zeros(16, jnp.float32), xs)
    _run(f, xs[:, 0], V)
    _run(f, xs[:0, 0], V)
