"""Parallel elementwise nests share their outer iterations by work stealing
(``render/kernels.py`` ``_steal_outer``, ``csrc/steal.h``): a short outer loop shares
its iterations with the next loop's, the inner loop is unchanged, and the results are
the reference backend's bits whatever the threads do."""
import numpy as np
from _bits import compiled_matches_reference  # tests/compiler/_bits.py

import kiln
import kiln.numpy as jnp
from kiln.compiler.render.render_c import CRenderer

R = np.random.default_rng(17)


def _run(f, *args):
    return compiled_matches_reference(f, *args)[0].source


def test_short_outer_loop_shares_two_loops():
    """8 x 128 x 512 (a GELU over a batch of sequences): 1024 rows of 512, stolen in
    blocks of 16 rows (``STEAL_BLOCK_WORK`` elements: one atomic exchange per block)."""
    x = R.standard_normal((8, 128, 512)).astype(np.float32)
    b = R.standard_normal((512,)).astype(np.float32)
    src = _run(lambda x, b: kiln.nn.gelu(x + b) * 3.0, x, b)
    assert "kiln_steal_init(kiln_rg, kiln_nt, 64);" in src
    assert "kiln_hi = kiln_b * 16 + 16 < 1024 ? kiln_b * 16 + 16 : 1024;" in src
    assert "const int64_t i0 = kiln_g / 128;" in src
    assert "const int64_t i1 = kiln_g % 128;" in src
    assert "for (int64_t i2 = 0; i2 < 512; i2++)" in src


def test_long_outer_loop_is_shared_alone():
    """A transposed read keeps its nest (2 loops): the outer loop's 700 iterations of
    600 elements, in blocks of 14 (50 blocks)."""
    x = R.standard_normal((600, 700)).astype(np.float32)
    src = _run(lambda x: jnp.exp(x.T) + 1.0, x)
    assert "kiln_steal_init(kiln_rg, kiln_nt, 50);" in src
    assert "const int64_t i0 = kiln_g;" in src


def test_sequential_nests_do_not_steal():
    x = R.standard_normal((4, 8, 8)).astype(np.float32)
    src = _run(lambda x: jnp.exp(x.transpose(2, 0, 1)) + 1.0, x)
    assert "kiln_steal" not in src
    assert CRenderer.parallel_threshold > x.size


def _src_and_value(f, x):
    g = kiln.jit(f)
    return g.lower(x).compile().as_text(), np.asarray(g(x))


def test_row_groups_and_reductions_steal_and_keep_the_serial_bits(monkeypatch):
    """A softmax's row group (blocks of rows), a sum over the last axis (output
    elements) and a bias gradient's column tiles are stolen; each output is folded by
    one thread in the serial order, so the bits are the serial loops'."""
    x = R.standard_normal((4096, 128)).astype(np.float32)
    fns = [lambda x: kiln.nn.softmax(x, axis=-1),
           lambda x: jnp.sum(jnp.exp(x.reshape(64, 64, 128)), axis=(1, 2)),
           lambda x: jnp.sum(x * x, axis=0)]
    par = [_src_and_value(f, x) for f in fns]
    # 4096 rows of 128 elements, four steps each: blocks of 16 rows (8192 elements).
    assert "kiln_hi = kiln_b * 16 + 16 < 4096 ? kiln_b * 16 + 16 : 4096;" in par[0][0]
    assert all("kiln_steal_next(" in src for src, _ in par)
    monkeypatch.setattr(CRenderer, "parallel_threshold", 1 << 62)
    for f, (_, got) in zip(fns, par):
        src, serial = _src_and_value(lambda x: f(x) + 0.0, x)
        assert "kiln_steal" not in src
        np.testing.assert_array_equal(got.view(np.uint32), serial.view(np.uint32))
