"""Reductions over rows into columns (``plan_reduce.ColumnPlan``, printed by
``CRenderer._column_reduce``): a bias gradient, ``sum(x, axis=0)`` of a [batch, features]
array, runs over column tiles in parallel, each column folded in row order as a serial
loop would: same bits, any thread count."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler.render.render_c import CRenderer

R = np.random.default_rng(3)


def _source(f, *args):
    return kiln.jit(f).lower(*args).compile().as_text()


@pytest.mark.parametrize("shape", [(1024, 512), (700, 515), (3000, 64), (300, 1000)])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_column_reduce_matches_the_serial_bits(monkeypatch, shape, op):
    x = R.standard_normal(shape).astype(np.float32)
    if op == "prod":
        x = 1 + x * 1e-3
    x[5, 7] = np.nan if op in ("max", "min") else x[5, 7]
    f = getattr(jnp, op)
    tiled = _source(lambda x: f(x, axis=0), x)
    assert "acc[" in tiled and "j0 = jt *" in tiled
    got = np.asarray(kiln.jit(lambda x: f(x, axis=0))(x))
    # the serial loop: no parallel tiles below the work threshold
    monkeypatch.setattr(CRenderer, "parallel_threshold", 1 << 62)
    assert "j0 = jt *" not in _source(lambda x: f(x, axis=0) + 0, x)
    serial = np.asarray(kiln.jit(lambda x: f(x, axis=0) + 0)(x))
    np.testing.assert_array_equal(got, serial)
    want = getattr(np, op)(x.astype(np.float64), axis=0)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-3)
    if op in ("max", "min"):
        assert np.isnan(got[7]) and not np.isnan(got[8])


def test_fused_bias_gradient_and_dtypes():
    g = R.standard_normal((2048, 300)).astype(np.float32)
    t = R.standard_normal((2048, 300)).astype(np.float32)
    got = np.asarray(kiln.jit(lambda g, t: jnp.sum(g * (1 - t * t), axis=0))(g, t))
    want = (g.astype(np.float64) * (1 - t.astype(np.float64) ** 2)).sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    i = R.integers(-1000, 1000, (4000, 200)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda i: jnp.sum(i, axis=0))(i)),
                                  i.sum(0, dtype=np.int32))
    b = R.random((3000, 100)) > 0.999
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda b: jnp.any(b, axis=0))(b)),
                                  b.any(0))
