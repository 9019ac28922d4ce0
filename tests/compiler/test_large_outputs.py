"""Large outputs: streaming stores (tiles copied out with non-temporal stores) and the
recycled huge-page pool they are allocated from."""
import gc

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.compiler.build import runtime
from kiln.compiler.render.render_c import CRenderer
from kiln.lax._fma import fma32


def _source(f, *args):
    return f.lower(*args).compile().as_text()


def test_large_elementwise_output_is_streamed_and_correct():
    x = np.random.default_rng(0).standard_normal((3, 1_500_001)).astype(np.float32)
    f = kiln.jit(lambda x: x * x + x * 2.0)
    assert x.nbytes >= CRenderer.stream_min_bytes
    assert "kiln_stream(&" in _source(f, x)
    # x * x + x * 2.0 is fma(x, x, x * 2.0), as XLA contracts it (passes/xla_fma.py)
    np.testing.assert_array_equal(np.asarray(f(x)), fma32(x, x, x * np.float32(2)))


def test_streamed_multi_output_and_other_dtypes():
    x = np.random.default_rng(1).integers(-100, 100, 4_200_003).astype(np.int32)

    def f(x):
        return x * 3, (x > 0).astype(jnp.int8), x.astype(jnp.float64) * 0.5
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    try:
        a, b, c = kiln.jit(f)(x)
    finally:
        kiln.config.update("jax_enable_x64", old)
    np.testing.assert_array_equal(np.asarray(a), x * 3)
    np.testing.assert_array_equal(np.asarray(b), (x > 0).astype(np.int8))
    np.testing.assert_array_equal(np.asarray(c), x.astype(np.float64) * 0.5)


def test_short_rows_stream_in_tiles_of_one_row():
    """An outer product with rows of 300 elements (a quarter tile or more; unaligned row
    starts): streamed in tiles of one row; rows of 200 are not streamed."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal(14_000).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    f = kiln.jit(lambda a, b: a[:, None] * b[None, :])
    src = _source(f, a, b)
    assert "kiln_stream(&" in src and "tile0[300]" in src
    np.testing.assert_array_equal(np.asarray(f(a, b)), a[:, None] * b[None, :])
    a2 = np.zeros(21_000, np.float32)
    assert a2.nbytes * 200 >= CRenderer.stream_min_bytes
    assert "kiln_stream(&" not in _source(f, a2, b[:200])


def test_small_outputs_are_not_streamed():
    x = np.ones((100, 100), np.float32)
    assert "kiln_stream(&" not in _source(kiln.jit(lambda x: x * 2.0), x)


def test_pool_recycles_dead_blocks_and_keeps_live_views():
    runtime.get_run()
    if not runtime.pool_stats():
        return      # extension not built here: plain mmap allocations
    shape = (1024, 1024 * 3)        # 12 MiB of float32
    a = runtime.alloc(shape, np.float32)
    a[...] = 7.0
    view = a[5:]
    del a
    gc.collect()
    before = runtime.pool_stats()
    b = runtime.alloc(shape, np.float32)     # `a` lives on through `view`: a new block
    b[...] = 1.0
    assert (view == 7.0).all()
    assert runtime.pool_stats()["maps"] == before["maps"] + 1 or \
        runtime.pool_stats()["hits"] == before["hits"] + 1
    del view
    gc.collect()
    held = runtime.pool_stats()["blocks"]
    assert held >= 1
    hits = runtime.pool_stats()["hits"]
    c = runtime.alloc(shape, np.float32)     # served from the pool
    assert runtime.pool_stats()["hits"] == hits + 1
    assert c.shape == shape and c.dtype == np.float32 and c.flags.c_contiguous
    assert (b == 1.0).all()


def test_runtime_extension_builds_where_headers_exist():
    # A failed build silently falls back to ctypes (2x slower calls): catch it here.
    import os
    import sysconfig
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return
    assert runtime.get_run() is not runtime._ctypes_run
    assert "hits" in runtime.pool_stats()


def test_full_pool_keeps_the_newest_blocks():
    """A block returned to a full pool replaces the oldest: a program whose outputs
    changed size still gets recycled blocks (before, a pool full of other sizes refused
    every new size for good)."""
    runtime.get_run()
    if not runtime.pool_stats():
        return      # extension not built here
    small = [runtime.alloc((1 << 20,), np.float32) for _ in range(10)]    # 4 MiB each
    del small
    gc.collect()
    assert runtime.pool_stats()["blocks"] >= 8
    big = runtime.alloc((3 << 20,), np.float32)                          # 12 MiB
    del big
    gc.collect()
    hits = runtime.pool_stats()["hits"]
    again = runtime.alloc((3 << 20,), np.float32)
    assert runtime.pool_stats()["hits"] == hits + 1
    del again
