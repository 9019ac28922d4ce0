"""Small functions with no SIMD-ordered reduction are built at -Og with every call inlined
(``KILN_SMALL_O1``, named when it was -O1; a third to a half of -O3's compile time): same
bits as the ``KILN_SMALL`` (-O3) build, and functions holding an ``omp simd reduction``
keep ``KILN_SMALL``."""
from __future__ import annotations

import numpy as np

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


def _args():
    return tuple(R.standard_normal((64, 24)).astype(np.float32) for _ in range(3))


def _source(f, args):
    return kiln.jit(f).lower(*args).compile().as_text()


def test_marks():
    args = _args()
    text = _source(_elementwise, args)
    assert "KILN_SMALL_O1 void seg0(" in text
    text = _source(_with_sum, args)
    assert "reduction(+:" in text
    assert "KILN_SMALL void seg0(" in text and "KILN_SMALL_O1 void" not in text


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
