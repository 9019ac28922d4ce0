"""Outputs written into donated inputs' memory: when the compiled program and the
ownership of the argument allow it, and never when it would change a result."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.config import config
from kiln.lax._fma import fma32

pytestmark = pytest.mark.skipif(config.kiln_backend == "reference",
                                reason="in-place outputs are the compiled backend's")


def _fresh(n=1000, start=0.0):
    """An Array owning its buffer (computed, not a broadcast constant)."""
    return jnp.arange(n, dtype=jnp.float32) * 0.5 + start


def _ptr(a):
    return a._value.ctypes.data


def test_elementwise_update_reuses_the_donated_buffer():
    f = kiln.jit(lambda p, g: p - 0.1 * g, donate_argnums=0)
    p, g = _fresh(), _fresh(start=1.0)
    expect = np.asarray(p) - np.float32(0.1) * np.asarray(g)
    f(_fresh(), g)                          # compile
    ptr = _ptr(p)
    q = f(p, g)
    assert p.is_deleted()
    assert _ptr(q) == ptr
    np.testing.assert_array_equal(np.asarray(q), expect)
    r = f(q, g)                             # the result is donated in turn
    assert _ptr(r) == ptr
    np.testing.assert_allclose(np.asarray(r), expect - np.float32(0.1) * np.asarray(g),
                               rtol=1e-6)


def test_pytree_of_params_all_updated_in_place():
    @kiln.jit
    def _unused(x):
        return x
    step = kiln.jit(lambda ps, gs: kiln.tree.map(lambda p, g: p * 0.9 - g, ps, gs),
                    donate_argnums=0)
    gs = {"w": _fresh(64), "b": _fresh(8)}
    step({"w": _fresh(64), "b": _fresh(8)}, gs)
    ps = {"w": _fresh(64, 1.0), "b": _fresh(8, 2.0)}
    # p * 0.9 - g is fma(p, 0.9, -g), as XLA contracts it (passes/xla_fma.py)
    want = {k: fma32(np.asarray(v), np.float32(0.9), -np.asarray(gs[k]))
            for k, v in ps.items()}
    ptrs = {k: _ptr(v) for k, v in ps.items()}
    out = step(ps, gs)
    for k in ps:
        assert _ptr(out[k]) == ptrs[k]
        np.testing.assert_array_equal(np.asarray(out[k]), want[k])


def test_a_buffer_someone_else_holds_is_not_written():
    f = kiln.jit(lambda x: x * 3.0, donate_argnums=0)
    f(_fresh())
    x = _fresh()
    view = np.asarray(x)                    # the caller still sees the memory
    before = view.copy()
    y = f(x)
    assert x.is_deleted()
    np.testing.assert_array_equal(view, before)
    np.testing.assert_array_equal(np.asarray(y), before * 3)
    assert _ptr(y) != view.ctypes.data


def test_reading_other_elements_prevents_reuse_and_keeps_values():
    f = kiln.jit(lambda x: x.T + 1.0, donate_argnums=0)
    g = kiln.jit(lambda x: x[::-1] * 2.0, donate_argnums=0)
    for fn, ref in ((f, lambda a: a.T + 1), (g, lambda a: a[::-1] * 2)):
        a = np.asarray(_fresh(64)).reshape(8, 8)
        fn(jnp.asarray(a) * 1.0)
        x = jnp.asarray(a) * 1.0
        ptr = _ptr(x)
        y = fn(x)
        np.testing.assert_array_equal(np.asarray(y), ref(a))
        assert _ptr(y) != ptr


def test_input_read_after_the_output_is_written():
    f = kiln.jit(lambda x: (x + 1.0, jnp.cumsum(x)), donate_argnums=0)
    a = np.asarray(_fresh(100))
    f(jnp.asarray(a) * 1.0)
    y, c = f(jnp.asarray(a) * 1.0)
    np.testing.assert_array_equal(np.asarray(y), a + 1)
    np.testing.assert_allclose(np.asarray(c), np.cumsum(a), rtol=1e-6)


def test_multi_output_kernels_and_argument_passed_twice():
    f = kiln.jit(lambda p, m: (p - m, m * 2.0 + p), donate_argnums=(0, 1))
    a, b = np.asarray(_fresh(50)), np.asarray(_fresh(50, 3.0))
    f(jnp.asarray(a) * 1.0, jnp.asarray(b) * 1.0)
    u, v = f(jnp.asarray(a) * 1.0, jnp.asarray(b) * 1.0)
    np.testing.assert_array_equal(np.asarray(u), a - b)
    np.testing.assert_array_equal(np.asarray(v), b * 2 + a)
    x = jnp.asarray(a) * 1.0
    g = kiln.jit(lambda p, q: (p + q, p * q), donate_argnums=0)
    u, v = g(x, x)
    np.testing.assert_array_equal(np.asarray(u), a + a)
    np.testing.assert_array_equal(np.asarray(v), a * a)


def test_scatter_into_a_donated_array():
    f = kiln.jit(lambda x, i, v: x.at[i].set(v), donate_argnums=0)
    a = np.asarray(_fresh(100))
    f(jnp.asarray(a) * 1.0, 3, 7.0)
    x = jnp.asarray(a) * 1.0
    ptr = _ptr(x)
    y = f(x, 5, -1.0)
    want = a.copy()
    want[5] = -1
    np.testing.assert_array_equal(np.asarray(y), want)
    assert _ptr(y) == ptr


def test_debug_nans_keeps_donated_inputs_intact_for_the_rerun():
    f = kiln.jit(lambda x: jnp.log(x - 2.0), donate_argnums=0)
    f(jnp.ones(10) * 5.0)
    with kiln.debug_nans(True):
        with pytest.raises(FloatingPointError, match="log"):
            f(jnp.ones(10) * 1.0)


def test_random_programs_match_the_undonated_results():
    rng = np.random.default_rng(0)
    ops = [lambda x, y: x * y + 1.0, lambda x, y: jnp.tanh(x) - y,
           lambda x, y: jnp.where(x > y, x, y * 2.0), lambda x, y: (x + y)[::-1],
           lambda x, y: x - jnp.sum(y), lambda x, y: jnp.exp(x * 0.1) / (1.0 + y * y),
           lambda x, y: jnp.roll(x, 1) + y]
    for _ in range(20):
        chain = [ops[i] for i in rng.integers(0, len(ops), 3)]

        def fn(x, y, chain=chain):
            for op in chain:
                x = op(x, y)
            return x, y * 2.0
        a = rng.standard_normal(200).astype(np.float32)
        b = rng.standard_normal(200).astype(np.float32)
        want = kiln.jit(fn)(jnp.asarray(a), jnp.asarray(b))
        don = kiln.jit(fn, donate_argnums=(0, 1))
        don(jnp.asarray(a) * 1.0, jnp.asarray(b) * 1.0)
        got = don(jnp.asarray(a) * 1.0, jnp.asarray(b) * 1.0)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_copy_before_a_scatter_is_skipped_when_writing_in_place():
    f = kiln.jit(lambda x, i, v: x.at[i].set(v), donate_argnums=0)
    text = f.lower(_fresh(10), 1, 2.0).compile().as_text()
    assert "if ((void *)b" in text          # the copy runs only into fresh memory
    x = _fresh(10)
    for i in range(10):
        x = f(x, i, float(i))
    np.testing.assert_array_equal(np.asarray(x), np.arange(10, dtype=np.float32))


def test_no_in_place_write_under_other_transformations():
    f = kiln.jit(lambda p: p * 2.0, donate_argnums=0)
    x = _fresh(16)
    before = np.asarray(x).copy()
    y = kiln.vmap(f)(x.reshape(4, 4))
    g = kiln.jit(lambda p: f(p) + 1.0)(x)
    dx = kiln.grad(lambda p: f(p).sum())(x)
    assert not x.is_deleted()
    np.testing.assert_array_equal(np.asarray(x), before)
    np.testing.assert_array_equal(np.asarray(y).ravel(), before * 2)
    np.testing.assert_array_equal(np.asarray(g), before * 2 + 1)
    np.testing.assert_array_equal(np.asarray(dx), np.full(16, 2.0, np.float32))
