"""Steps whose C is the same but for the buffers it names are compiled once
(``CRenderer._share_kernels``): one ``kiln_sharedN`` function, called from each step. The
results are bit for bit those of the inlined steps; reductions whose order of additions
depends on vectorization (``omp simd reduction``) are never shared."""
from __future__ import annotations

import numpy as np
import pytest
from _mlp_case import mlp_data, mlp_loss  # tests/compiler/_mlp_case.py

import kiln
import kiln.numpy as jnp
from kiln.compiler.render.render_c import CRenderer

R = np.random.default_rng(7)


def _two_layers(x, w1, w2):
    h = jnp.tanh(x @ w1)
    return jnp.tanh(h @ w2)


def _args(n=256):
    return (R.standard_normal((n, 64)).astype(np.float32),
            R.standard_normal((64, 64)).astype(np.float32) / 8,
            R.standard_normal((64, 64)).astype(np.float32) / 8)


def _source(f, *args):
    return kiln.jit(f).lower(*args).compile().as_text()


def test_identical_kernels_are_one_function():
    args = _args()
    text = _source(_two_layers, *args)
    assert text.count("void kiln_shared0(float") in (1, 2)    # definition (and a prototype)
    assert text.count("kiln_shared0(b") == 2              # one call per tanh step
    assert "kiln_shared1(" not in text


def test_shared_function_gives_the_same_bits(monkeypatch):
    args = _args(512)
    shared = np.asarray(kiln.jit(_two_layers)(*args))
    monkeypatch.setattr(CRenderer, "share_kernels", False)
    g = lambda *a: _two_layers(*a)      # noqa: E731 - a new function: compiled again
    text = _source(g, *args)
    assert "kiln_shared0" not in text
    inlined = np.asarray(kiln.jit(g)(*args))
    assert shared.tobytes() == inlined.tobytes()
    want = np.tanh(np.tanh(args[0] @ args[1]) @ args[2])
    np.testing.assert_allclose(shared, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1])
def test_reductions_with_a_simd_order_are_not_shared(axis):
    a = R.standard_normal((96, 40)).astype(np.float32)
    b = R.standard_normal((96, 40)).astype(np.float32)

    def f(a, b):
        return jnp.sum(a * a, axis=axis), jnp.sum(b * b, axis=axis)

    text = _source(f, a, b)
    simd_sums = text.count("reduction(+:")
    if simd_sums:
        assert "kiln_shared" not in text
    got = kiln.jit(f)(a, b)
    want = (a.astype(np.float64) ** 2).sum(axis)
    np.testing.assert_allclose(np.asarray(got[0]), want, rtol=1e-5, atol=1e-5)


def test_kernels_differing_only_in_aliasing_are_shared(monkeypatch):
    """The MLP gradient's two tanh layers (and its two ``g * (1 - t*t)`` kernels and
    column sums) differ only in which buffers share memory (plan_buffers: no
    ``restrict`` there): one function each, ``restrict`` only on the parameters that are
    ``restrict`` at every call, and the bits of the unshared build."""
    from kiln.compiler.lower import plan_buffers
    monkeypatch.setattr(plan_buffers, "MIN_SHARED_BYTES", 1024)   # share memory at this size
    params, x, y = mlp_data(R)
    f = kiln.grad(mlp_loss)
    text = _source(f, params, x, y)
    heads = [ln for ln in text.splitlines() if ln.endswith("{") and " kiln_shared" in ln]
    assert len(heads) >= 3
    assert any("float *b" in h for h in heads)        # a parameter without restrict
    shared = [np.asarray(a) for a in kiln.tree_util.tree_leaves(kiln.jit(f)(params, x, y))]
    monkeypatch.setattr(CRenderer, "share_kernels", False)
    g = kiln.grad(lambda *a: mlp_loss(*a))
    assert "kiln_shared" not in _source(g, params, x, y)
    inlined = [np.asarray(a) for a in kiln.tree_util.tree_leaves(kiln.jit(g)(params, x, y))]
    assert [a.tobytes() for a in shared] == [a.tobytes() for a in inlined]
