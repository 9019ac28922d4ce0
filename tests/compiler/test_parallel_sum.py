"""Parallel chunked float sums (``reductions.sum_blocks``, ``csrc/steal.h``): blocks of
chunks shared by work stealing, block sums added in order, so a long sum has the same bits
on any number of threads (the static split's two halves gave other bits than one
thread)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler.render.reductions import sum_blocks

CHILD = r"""
import json, numpy as np, kiln, kiln.numpy as jnp
x = np.random.default_rng(3).standard_normal(1_000_003).astype(np.float32)
d = np.random.default_rng(4).standard_normal(300_001)
f = kiln.jit(lambda x, d: (jnp.sum(x * x), jnp.sum(x), jnp.sum(jnp.exp(x * 0.1)), jnp.sum(d)))
print(json.dumps([np.asarray(o).tobytes().hex() for o in f(x, d)]))
"""


def test_sum_blocks_depend_on_the_length_only():
    assert sum_blocks(25_000_000, 1024) == (64, 382)
    assert sum_blocks(131_072, 1024) == (4, 32)
    assert sum_blocks(1_000_003, 1024) == (30, 33)
    assert sum_blocks(20_000, 1024) == (1, 20)
    per, n = sum_blocks(1 << 33, 1024)             # capped at 4096 blocks
    assert n <= 4096 and per * n * 1024 >= 1 << 33
    for size in (2049, 70_000, 1 << 20, 10**8 + 7):
        per, n = sum_blocks(size, 1024)
        assert per >= 1 and (n - 1) * per * 1024 < size <= n * per * 1024


def test_parallel_sum_is_blocked_and_stolen():
    x = np.ones(1 << 20, np.float32)
    text = kiln.jit(lambda x: jnp.sum(x * x)).lower(x).compile().as_text()
    assert "kiln_steal_init(kiln_rg, kiln_nt, 32);" in text
    assert "(blk = kiln_steal_next(kiln_rg, kiln_t, kiln_nt)) >= 0" in text
    assert "static inline int64_t kiln_steal_next(" in text      # steal.h, once
    assert "kiln_steal_next(" not in kiln.jit(lambda x: jnp.sum(x)).lower(
        np.ones(1000, np.float32)).compile().as_text()             # not for short sums
    assert "float kiln_bs[32];" in text and "acc += kiln_bs[blk];" in text
    assert "reduction(+:acc)" not in text
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda x: jnp.sum(x * x))(x)),
                                  np.float32(1 << 20))


def test_same_bits_on_one_two_and_three_threads(tmp_path):
    from kiln.compiler.build.build import find_compiler, openmp_available
    if find_compiler() is None or not openmp_available():
        pytest.skip("no C compiler with OpenMP")
    outs = []
    for threads in ("1", "2", "3"):
        env = dict(os.environ, OMP_NUM_THREADS=threads, KILN_CACHE_DIR=str(tmp_path),
                   JAX_ENABLE_X64="1")
        p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1] == outs[2]
    # and the sums are close to the exact ones (float64 for the float32 inputs)
    x = np.random.default_rng(3).standard_normal(1_000_003).astype(np.float32)
    got = np.frombuffer(bytes.fromhex(outs[0][0]), np.float32)[0]
    exact = (x.astype(np.float64) ** 2).sum()
    assert abs(got - exact) <= 1e-6 * exact
