"""A ``custom_vjp`` whose output cotangent is a symbolic zero still has its ``bwd`` rule
called, with zeros, as in JAX (Flax's fp8 layers return state through ``bwd`` rules):
eagerly, under ``jit``, ``vmap``, inside ``scan`` (whose transpose instantiates zeros), and
where JAX prunes instead (``jit``/``cond``/``checkpoint``-wrapped calls, unused outputs)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln

jax = pytest.importorskip("jax")


def _build(m):
    calls = []

    @m.custom_vjp
    def f(x, h):
        return x * 2.0

    def f_bwd(h, g):
        calls.append(1)
        return (None, h + 1)
    f.defvjp(lambda x, h: (x * 2.0, h), f_bwd)

    @m.custom_vjp
    def block(y):
        return y
    block.defvjp(lambda y: (y, None), lambda r, g: (None,))

    def scanned(x, h):
        c, _ = m.lax.scan(lambda c, _: (f(c, h), None), x, None, length=2)
        return block(c)

    cases = {
        "plain": lambda x, h: block(f(x, h)),
        "scan": scanned,
        "jit_wrapped": lambda x, h: block(m.jit(f)(x, h)),
        "cond": lambda x, h: block(m.lax.cond(True, f, lambda a, b: a, x, h)),
        "checkpoint": lambda x, h: block(m.checkpoint(f)(x, h)),
        "unused": lambda x, h: h * 0.0 + 0.0 * x + 0.0 * (f(x, h) * 0.0),
        "times_zero": lambda x, h: 0.0 * f(x, h) + x,
        "stop_gradient": lambda x, h: m.lax.stop_gradient(f(x, h)) + h,
        "two_outputs": lambda x, h: block(f(x, h)) + block(f(x, 2.0 * h)),
    }
    return cases, calls


@pytest.mark.parametrize("case", ["plain", "scan", "jit_wrapped", "cond", "checkpoint",
                                  "unused", "times_zero", "stop_gradient", "two_outputs"])
def test_grad_matches_jax(case):
    kcases, _ = _build(kiln)
    jcases, _ = _build(jax)
    kf, jf = kcases[case], jcases[case]
    for transform in (lambda m, f: m.grad(f, 1), lambda m, f: m.jit(m.grad(f, 1))):
        got = float(transform(kiln, kf)(1.0, 2.0))
        want = float(transform(jax, jf)(1.0, 2.0))
        assert got == want, (case, got, want)


def test_issue_minimal_form_and_bwd_called():
    cases, calls = _build(kiln)
    assert float(kiln.grad(cases["plain"], 1)(1.0, 2.0)) == 3.0
    assert len(calls) == 1
    xs, hs = np.ones(3, np.float32), np.arange(3.0, dtype=np.float32)
    np.testing.assert_array_equal(
        np.asarray(kiln.vmap(kiln.grad(cases["plain"], 1))(xs, hs)), hs + 1)
    np.testing.assert_array_equal(
        np.asarray(kiln.jit(kiln.vmap(kiln.grad(cases["scan"], 1)))(xs, hs)), 2 * (hs + 1))


def test_value_and_grad_and_vjp():
    cases, _ = _build(kiln)
    v, g = kiln.value_and_grad(cases["plain"], (0, 1))(1.0, 2.0)
    assert float(v) == 2.0 and float(g[0]) == 0.0 and float(g[1]) == 3.0
    out, pullback = kiln.vjp(cases["plain"], 1.0, 2.0)
    gx, gh = pullback(kiln.numpy.float32(1.0))
    assert float(gx) == 0.0 and float(gh) == 3.0
