"""Small functions with no SIMD-ordered reduction are built at -Og with every call inlined
(``KILN_SMALL_O1``, named when it was -O1; a third to a half of -O3's compile time): same
bits as the ``KILN_SMALL`` (-O3) build, and functions holding an ``omp simd reduction``
keep ``KILN_SMALL``."""
from __future__ import annotations

import numpy as np
from _mlp_case import mlp_data, mlp_loss  # tests/compiler/_mlp_case.py

import kiln
import kiln.numpy as jnp
from kiln.compiler.render import render_c

R = np.random.default_rng(11)


def _elementwise(x, y, z):
    # small elementwise work, with a sum of products that folds in order (fmaf chain)
    e = jnp.exp(x * y + z) * 0.5 - jnp.tanh(z)
    return e, jnp.sum(e * y, axis=1)


def _with_sum(x, y, z):
    return jnp.sum(jnp.exp(x) + y, axis=1) + z[:, 0]


def _args(rows=16):
    # 16x24: under render_c.SMALL_MATH_ELEMENTS (small steps calling XLA's math from that
    # size are built at full optimization)
    return tuple(R.standard_normal((rows, 24)).astype(np.float32) for _ in range(3))


def _source(f, args):
    return kiln.jit(f).lower(*args).compile().as_text()


def test_marks():
    args = _args()
    text = _source(_elementwise, args)
    assert "KILN_SMALL_O1 void seg0(" in text
    text = _source(_with_sum, args)
    assert "reduction(+:" in text
    # Each step's function by its own class (render_c._render_units): the sum in a
    # KILN_SMALL function, the order-free steps in a KILN_SMALL_O1 one, even in a
    # program too small to split into units (a step's bits must not depend on it).
    sums = [f for f in text.split("\nKILN_SMALL") if "reduction(+:" in f]
    assert sums and all(f.startswith(" void seg0_p") for f in sums)
    assert "KILN_SMALL_O1 void seg0_p" in text


def test_same_bits_as_small_o3(monkeypatch):
    args = _args()
    o1 = [np.asarray(a) for a in kiln.jit(_elementwise)(*args)]
    monkeypatch.setattr(render_c, "_size_class",
                        lambda step, text: render_c.is_small(step))
    g = lambda *a: _elementwise(*a)     # noqa: E731 - a new function: compiled again
    text = _source(g, args)
    assert "KILN_SMALL_O1 void" not in text and "KILN_SMALL void seg0(" in text
    o3 = [np.asarray(a) for a in kiln.jit(g)(*args)]
    for a, b in zip(o1, o3):
        assert a.tobytes() == b.tobytes()
    x, y, z = (a.astype(np.float64) for a in args)
    want = np.exp(x * y + z) * 0.5 - np.tanh(z)
    np.testing.assert_allclose(o1[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o1[1], (want * y).sum(1), rtol=1e-4, atol=1e-5)


def test_small_math_from_a_size_is_fully_optimized(monkeypatch):
    # 64x24 elements of exp/tanh: vectorized at -O3 (scalar at -Og they ran ~15x slower),
    # with the bits of the -Og build
    args = _args(64)
    text = _source(_elementwise, args)
    assert "KILN_SMALL_O1 void seg0(" not in text and "KILN_SMALL void seg0(" not in text
    fast = [np.asarray(a) for a in kiln.jit(_elementwise)(*args)]
    monkeypatch.setattr(render_c, "SMALL_MATH_ELEMENTS", 1 << 30)
    g = lambda *a: _elementwise(*a)     # noqa: E731 - a new function: compiled again
    assert "KILN_SMALL_O1 void seg0(" in _source(g, args)
    slow = [np.asarray(a) for a in kiln.jit(g)(*args)]
    for a, b in zip(fast, slow):
        assert a.tobytes() == b.tobytes()


def test_bits_do_not_depend_on_splitting_into_units(monkeypatch):
    """A small MLP gradient (its 10-class softmax rows summed by ``omp simd``
    reductions) built as one unit and as several: the same bits. Before, a program under
    ``split_min_chars`` was one -O3 function and its small reductions summed in another
    order than in their own ``KILN_SMALL`` functions."""
    params, x, y = mlp_data(R)
    outs = []
    for chars in (10 ** 9, 0):
        monkeypatch.setattr(render_c.CRenderer, "split_min_chars", chars)
        g = kiln.grad(lambda *a: mlp_loss(*a))      # a new function: compiled again
        outs.append([np.asarray(a) for a in kiln.tree_util.tree_leaves(kiln.jit(g)(params, x, y))])
    for a, b in zip(*outs):
        assert a.tobytes() == b.tobytes()
