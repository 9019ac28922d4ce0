"""``ksin32``/``kcos32`` (``kiln/compiler/csrc/libm_trig.h``, ``render/trig_math.py``):
float32 sin/cos with the host C library's bits in vectorizable C.

Their bits against this process's ``sinf``/``cosf`` on a sample of every float32
exponent by default, on all 2^32 inputs with ``KILN_EXHAUSTIVE=1`` (the C driver of
``trig_probe.c``, loops vectorized as in kernels), with denormals flushed and not; the
loops really vectorize; the renderer uses them only when the probe passed and keeps
``sinf``/``cosf`` otherwise; jit and eager agree bit for bit.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.compiler.build import build
from kiln.compiler.render import trig_math

pytestmark = pytest.mark.skipif(build.find_compiler() is None, reason="no C compiler")


@pytest.fixture(scope="module")
def variant():
    v = trig_math.chosen_variant()
    if v is None:
        pytest.skip("this C library's sinf/cosf are not glibc's: the renderer calls them")
    return v


def _bits(a):
    return np.asarray(a).view(np.uint32)


@pytest.mark.parametrize("flush", [True, False])
@pytest.mark.parametrize("first", [0, 1, 2])
def test_sampled_patterns_equal_the_library(variant, flush, first):
    # every 257th pattern from three offsets: ~50M results, every exponent and sign
    assert trig_math.probe_mismatches(variant, flush, step=257 * 3, first=first,
                                      dense=512) == 0


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("KILN_EXHAUSTIVE"),
                    reason="all 2^32 inputs take ~4 minutes: set KILN_EXHAUSTIVE=1")
@pytest.mark.parametrize("flush", [True, False])
def test_all_patterns_equal_the_library(variant, flush):
    assert trig_math.probe_mismatches(variant, flush, step=1, dense=0) == 0


def test_variants_differ_only_where_rounding_twice_shows():
    """The fused and the plain variant are both exercised: they agree on the probe's
    sample except on inputs whose double result lies next to a float rounding
    boundary, so the probe must include such inputs to tell them apart."""
    assert set(trig_math.VARIANTS) == {"fma", "plain"}
    assert all(0x3F400000 <= e or e in (0x00800000, 0x39800000) for e in trig_math.EDGES)
    for name in trig_math.DISCRIMINATING:
        assert 0 <= name < 2**32


def test_loops_vectorize(tmp_path):
    """gcc vectorizes a loop calling ksin32 (the reason they exist): no call of sinf, and
    packed double arithmetic in the loop."""
    cc = build.find_compiler()
    src = tmp_path / "t.c"
    src.write_text("#include <stdint.h>\n#include <math.h>\n#include <float.h>\n"
                   + trig_math.csrc.text("xla_math.h") + trig_math.csrc.text("libm_trig.h")
                   + "void f(const float *x, float *y, long n) {\n"
                     "  for (long i = 0; i < n; i++) y[i] = ksin32(x[i]) + kcos32(x[i]); }\n")
    flags = [f for f in build.default_flags() if f not in ("-shared", "-fPIC")]
    out = subprocess.run([cc, *flags, "-S", "-o", "-", str(src)], capture_output=True,
                         text=True, check=True).stdout
    assert "sinf" not in out and "cosf" not in out
    if "-march=native" in flags and build.cpu_features() and "avx" in build.cpu_features():
        assert "pd\t" in out and ("ymm" in out or "zmm" in out)


def test_renderer_uses_them_after_the_probe(variant):
    x = np.linspace(-200, 200, 4001, dtype=np.float32)
    f = kiln.jit(lambda x: knp.sin(x) * knp.cos(x))
    src = f.lower(x).compile().as_text()
    assert "ksin32(" in src and "kcos32(" in src and "sinf(" not in src
    assert trig_math.VARIANTS[variant] in src
    # float64 keeps the library
    src64 = kiln.jit(knp.sin).lower(x.astype(np.float64)).compile().as_text() \
        if kiln.config.jax_enable_x64 else ""
    assert "ksin32(" not in src64


def test_forced_library_calls_in_a_fresh_process():
    code = ("import numpy as np, kiln, kiln.numpy as knp\n"
            "x = np.linspace(-9, 9, 999, dtype=np.float32)\n"
            "f = kiln.jit(knp.sin)\n"
            "src = f.lower(x).compile().as_text()\n"
            "assert 'sinf(' in src and 'ksin32' not in src, src[-2000:]\n"
            "assert np.array_equal(np.asarray(f(x)), np.asarray(knp.sin(x)))\n"
            "from kiln.compiler.render import trig_math\n"
            "assert trig_math.chosen_variant() is None\n")
    env = dict(os.environ, KILN_LIBM_TRIG="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def _sweep():
    """Every float32 exponent, 64 mantissas each, both signs, and the special values."""
    rng = np.random.default_rng(7)
    e = np.repeat(np.arange(256, dtype=np.uint32), 64)
    m = rng.integers(0, 1 << 23, e.size, dtype=np.uint32)
    pos = (e << 23) | m
    return np.concatenate([pos, pos | 0x80000000]).view(np.float32)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_jit_equals_eager_bits_over_every_exponent(name):
    x = _sweep()
    fn = getattr(knp, name)
    got = kiln.jit(lambda v: fn(v) + 0.0)(x)     # fused into a kernel
    want = fn(x)                                 # eager: the C library's sinf/cosf
    g, w = np.asarray(got), np.asarray(want)
    assert np.array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(_bits(g[ok]), _bits(w[ok]))
    # and near the libm values, as a sanity check of the library itself
    np.testing.assert_allclose(g[ok & (np.abs(x) < 1e4)],
                               getattr(np, name)(x.astype(np.float64))[ok & (np.abs(x) < 1e4)],
                               rtol=0, atol=2e-7)
