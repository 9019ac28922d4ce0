"""Consecutive elementwise kernels over one loop become one multi-output kernel
(kiln.compiler.lower.merge_kernels): Adam's three updates read and write memory once."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu
from kiln.compiler.lower.program import Kernel
from kiln.config import config
from kiln.lax._fma import fma32

pytestmark = pytest.mark.skipif(config.kiln_backend == "reference",
                                reason="a compiled-backend pass")

R = np.random.default_rng(11)
F = np.float32


def adam_like(p, m, v, g):
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g * g
    p2 = p - 0.001 * m2 / (jnp.sqrt(v2) + 1e-8)
    return p2, m2, v2


def _numpy_adam(p, m, v, g):
    # XLA's CPU code (so JAX's jit and kiln's compiler) contracts the left product of
    # each sum into an FMA (kiln/compiler/passes/xla_fma.py).
    m2 = fma32(F(0.9), m, F(0.1) * g)
    v2 = fma32(F(0.999), v, F(0.001) * g * g)
    p2 = p - F(0.001) * m2 / (np.sqrt(v2) + F(1e-8))
    return p2, m2, v2


def _args(n=5000):
    return [R.standard_normal(n).astype(F), R.standard_normal(n).astype(F),
            np.abs(R.standard_normal(n)).astype(F), R.standard_normal(n).astype(F)]


def _kernels(f, *args):
    exe = cpu.executable_for(kiln.make_jaxpr(f)(*args))
    return [s for s in exe.prog.steps if isinstance(s, Kernel)]


def test_adam_update_is_one_kernel_with_three_outputs():
    args = _args()
    ks = _kernels(adam_like, *args)
    assert len(ks) == 1 and len(ks[0].outs) == 3
    got = kiln.jit(adam_like)(*args)
    for g, w in zip(got, _numpy_adam(*args)):
        # The same IEEE operations in the same order: the same bits.
        np.testing.assert_array_equal(np.asarray(g), w)


def test_a_read_of_another_element_keeps_the_kernels_apart():
    def f(a, b):
        s = a * 2.0 + b
        return s, (s[::-1] + 1.0) * a       # reads s at the mirrored element

    a, b = R.standard_normal(4096).astype(F), R.standard_normal(4096).astype(F)
    assert len(_kernels(f, a, b)) == 2
    s, t = kiln.jit(f)(a, b)
    want_s = a * F(2) + b
    np.testing.assert_array_equal(np.asarray(s), want_s)
    np.testing.assert_array_equal(np.asarray(t), (want_s[::-1] + F(1)) * a)


def test_different_loops_are_not_merged():
    def f(a, b):
        return a * 2.0, b + 1.0

    a, b = np.ones(300, F), np.ones(200, F)
    assert len(_kernels(f, a, b)) == 2


def test_merged_update_still_writes_into_donated_memory():
    step = kiln.jit(adam_like, donate_argnums=(0, 1, 2))

    def fresh():
        return [jnp.asarray(x) * 1.0 for x in _args()]

    step(*fresh())                          # compile
    args = fresh()
    want = _numpy_adam(*[np.asarray(a) for a in args])
    ptrs = [a._value.ctypes.data for a in args[:3]]
    out = step(*args)
    assert [o._value.ctypes.data for o in out] == ptrs
    for o, w in zip(out, want):
        np.testing.assert_array_equal(np.asarray(o), w)


def test_merged_kernels_under_grad_and_vmap():
    args = _args(64)

    def loss(p, m, v, g):
        p2, m2, v2 = adam_like(p, m, v, g)
        return jnp.sum(p2 * p2) + jnp.sum(m2) + jnp.sum(v2)

    gp = kiln.jit(kiln.grad(loss))(*args)
    eps = 1e-3
    e0 = np.zeros(64, F)
    e0[3] = eps
    p = args[0].astype(np.float64)
    fd = (loss(*[jnp.asarray(p + e0)] + args[1:]) - loss(*[jnp.asarray(p - e0)] + args[1:]))
    np.testing.assert_allclose(float(np.asarray(gp)[3]), float(fd) / (2 * eps), rtol=2e-2)
    batched = kiln.jit(kiln.vmap(adam_like))(*[np.stack([a, a * 2]) for a in args])
    for b, w in zip(batched, _numpy_adam(*[a * F(2) for a in args])):
        np.testing.assert_allclose(np.asarray(b)[1], w, rtol=1e-6, atol=1e-7)


def test_leaf_by_leaf_updates_merge_across_other_leaves():
    """Optax updates a pytree one tree_map at a time (all m, then all v, then all p): one
    parameter's kernels are steps apart, and still become one kernel per shape."""
    ws = [_args(3000), _args(700)]

    def update(ps, ms, vs, gs):
        ms2 = [0.9 * m + 0.1 * g for m, g in zip(ms, gs)]
        vs2 = [0.999 * v + 0.001 * g * g for v, g in zip(vs, gs)]
        ps2 = [p - 0.001 * m / (jnp.sqrt(v) + 1e-8) for p, m, v in zip(ps, ms2, vs2)]
        return ps2, ms2, vs2

    cols = [list(c) for c in zip(*ws)]      # ps, ms, vs, gs: one entry per leaf
    ks = _kernels(update, *cols)
    assert len(ks) == 2 and sorted(len(k.outs) for k in ks) == [3, 3]
    got = kiln.jit(update)(*cols)
    for leaf, w in enumerate(ws):
        want = _numpy_adam(*w)
        for out, wv in zip(got, want):
            np.testing.assert_array_equal(np.asarray(out[leaf]), wv)


def test_a_step_in_between_that_b_needs_keeps_it_in_place():
    def f(x):
        e = jnp.exp(x)
        s = jnp.sum(e)                      # a reduction between the two kernels
        return e, e / s

    x = R.standard_normal(5000).astype(F)
    exe = cpu.executable_for(kiln.make_jaxpr(f)(x))
    names = [s.name for s in exe.prog.steps]
    assert len([s for s in exe.prog.steps if isinstance(s, Kernel)]) == 2, names
    e, p = kiln.jit(f)(x)
    np.testing.assert_allclose(np.asarray(p), np.exp(x) / np.exp(x.astype(np.float64)).sum(),
                               rtol=1e-5)


def test_a_stored_value_whose_readers_all_merged_is_not_written():
    """``t`` is stored (an expensive value with two readers); both readers merge into
    its kernel and compute it in place, so its buffer is no longer written at all (the
    GELU gradient's 8x128x1024 term of a transformer block was a dead 4 MB store)."""
    x = R.standard_normal((64, 512)).astype(F)

    def f(x):
        t = jnp.tanh(x * 2.0)
        return t * 3.0 + 1.0, t * t - 2.0

    kernels = _kernels(f, x)
    assert len(kernels) == 1
    assert [b.kind for b, _ in kernels[0].outs] == ["out", "out"]
    a, b = kiln.jit(f)(x)
    t = np.tanh(x * F(2.0))
    np.testing.assert_allclose(np.asarray(a), t * F(3) + F(1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(b), t * t - F(2), rtol=1e-6, atol=1e-6)


def _loop_kernels(exe):
    from kiln.compiler.lower.program import Loop, walk_steps
    loops = [s for s in walk_steps(exe.prog.steps) if isinstance(s, Loop)]
    return [s for lp in loops for s in lp.body if isinstance(s, Kernel)]


def test_momentum_update_in_a_loop_body_is_one_kernel():
    # optimizers.momentum inside fori_loop: x' = x - lr*(mass*v + g) reads v, then
    # v' = mass*v + g overwrites it. Merged, one pass reads x, v, g and writes x', v'.
    def run(x, v, g):
        def body(i, c):
            x, v = c
            v = 0.9 * v + g
            return x - 0.001 * v, v
        return kiln.lax.fori_loop(0, 3, body, (x, v))

    x, v, g = (R.standard_normal(4096).astype(F) for _ in range(3))
    exe = cpu.executable_for(kiln.make_jaxpr(run)(x, v, g))
    ks = _loop_kernels(exe)
    assert any(len(k.outs) == 2 for k in ks), [k.name for k in ks]
    got = kiln.jit(run)(x, v, g)
    wx, wv = x, v
    for _ in range(3):
        wv = fma32(F(0.9), wv, g)
        wx = fma32(F(-0.001), wv, wx)
    np.testing.assert_array_equal(np.asarray(got[0]), wx)
    np.testing.assert_array_equal(np.asarray(got[1]), wv)


def test_an_in_place_write_read_elsewhere_by_the_earlier_kernel_keeps_them_apart():
    # A reads v at the mirrored element; B overwrites v: merged, A would read new values.
    def run(x, v):
        def body(i, c):
            x, v = c
            return x + v[::-1], v * 2.0
        return kiln.lax.fori_loop(0, 2, body, (x, v))

    x, v = (R.standard_normal(1000).astype(F) for _ in range(2))
    got = kiln.jit(run)(x, v)
    wx, wv = x, v
    for _ in range(2):
        wx, wv = wx + wv[::-1], wv * F(2)
    np.testing.assert_array_equal(np.asarray(got[0]), wx)
    np.testing.assert_array_equal(np.asarray(got[1]), wv)
