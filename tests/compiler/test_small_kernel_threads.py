"""Elementwise kernels over few elements (``CRenderer.small_kernel_elements``) run on one
thread unless their work reaches ``small_kernel_threshold`` (``plan_loops.plan_kernel``):
mnist_vae's 32x512 ReLU gradient took 3 us on one core and 20 us across two. Larger
kernels keep the plain ``parallel_threshold``; results never depend on it (no reduction)."""
from __future__ import annotations

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu
from kiln.compiler.lower.lower import lower
from kiln.compiler.lower.plan_buffers import plan
from kiln.compiler.lower.program import Kernel
from kiln.compiler.passes.passes import optimize
from kiln.compiler.render.plan_loops import LoopTarget, cost_of
from kiln.compiler.render.plan_steps import plan_steps
from kiln.compiler.render.render_c import CRenderer

R = np.random.default_rng(2)


def _kernel_plans(f, *args):
    prog = lower(optimize(kiln.make_jaxpr(f)(*args)))
    plan(prog)
    t = LoopTarget.of(CRenderer())
    plans = plan_steps(prog, [s for s in prog.steps if hasattr(s, "name")], t)
    return [(s, p) for (s, *rest), p in plans if not rest and isinstance(s, Kernel)]


def _relu_grad(h, g, b):
    return jnp.where(h + b > 0, g * 2.0 + h * 0.5 + 1.0, 0.0)


def _x(*shape):
    return R.standard_normal(shape).astype(np.float32)


def test_small_cheap_kernel_runs_on_one_thread():
    ((k, p),) = _kernel_plans(_relu_grad, _x(32, 512), _x(32, 512), _x(512))
    work = 32 * 512 * cost_of(k.outs)
    assert work >= CRenderer.parallel_threshold           # parallel before the rule
    assert 32 * 512 < CRenderer.small_kernel_elements
    assert not p.nest.parallel


def test_small_expensive_kernel_stays_parallel():
    # softplus and its exp: mnist_vae's 32x784 loss kernel (110 us on one core)
    f = lambda x: jnp.logaddexp(0.0, x) * jnp.exp(x)       # noqa: E731
    ((k, p),) = _kernel_plans(f, _x(32, 784))
    assert 32 * 784 * cost_of(k.outs) >= CRenderer.small_kernel_threshold
    assert p.nest.parallel


def test_large_cheap_kernel_stays_parallel():
    ((k, p),) = _kernel_plans(_relu_grad, _x(256, 512), _x(256, 512), _x(512))
    assert 256 * 512 >= CRenderer.small_kernel_elements
    assert p.nest.parallel


def test_rule_off_restores_the_plain_threshold(monkeypatch):
    monkeypatch.setattr(CRenderer, "small_kernel_elements", 0)
    ((_, p),) = _kernel_plans(_relu_grad, _x(32, 512), _x(32, 512), _x(512))
    assert p.nest.parallel


def test_same_bits_either_way(monkeypatch):
    args = (_x(32, 512), _x(32, 512), _x(512))
    closed = kiln.make_jaxpr(_relu_grad)(*args)
    one = cpu.compile_closed(closed, "jit")
    monkeypatch.setattr(CRenderer, "small_kernel_elements", 0)
    two = cpu.compile_closed(closed, "jit")
    assert "omp parallel" not in one.source and "omp parallel" in two.source
    a, b = (np.asarray(e(list(args))[0]) for e in (one, two))
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    h, g, bias = args
    want = np.where(h + bias > 0, g * np.float32(2) + h * np.float32(0.5) + np.float32(1), 0)
    np.testing.assert_array_equal(a, want.astype(np.float32))
