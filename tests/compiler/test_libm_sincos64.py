"""``ksin64``/``kcos64`` (``kiln/compiler/csrc/libm_sincos64.h``,
``render/trig_math.py``): float64 sin/cos with the host C library's bits in SIMD clones
(gcc on x86-64; elsewhere the renderer keeps the library's functions).

Their bits against this process's ``sin``/``cos`` on every 2053rd high word (with a
pseudo-random low word: every exponent, both signs, NaNs, infinities) and dense runs
around the algorithm's thresholds and multiples of pi/2, denormals flushed and not; the
variant not chosen fails the probe; loops of every length 1..40 mixing lanes that the
clones compute with lanes they hand to the library (beyond 105414350, non-finite); the
renderer uses them only for float64 after the probe; jit equals eager bit for bit.
"""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.compiler import csrc
from kiln.compiler.build import build
from kiln.compiler.render import trig_math

pytestmark = pytest.mark.skipif(build.find_compiler() is None, reason="no C compiler")


@pytest.fixture(scope="module")
def variant():
    v = trig_math.chosen_variant64()
    if v is None:
        pytest.skip("no SIMD clones here (not gcc on x86-64) or this C library's sin/cos "
                    "are not glibc's: the renderer calls them")
    return v


@pytest.fixture()
def x64():
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        kiln.config.update("jax_enable_x64", old)


def _bits(a):
    return np.asarray(a).view(np.uint64)


@pytest.mark.parametrize("flush", [True, False])
@pytest.mark.parametrize("first", [0, 1000])
def test_sampled_patterns_equal_the_library(variant, flush, first):
    assert trig_math.probe64_mismatches(variant, flush, step=2053, first=first,
                                        dense=400) == 0


def test_the_probe_tells_the_two_builds_apart(variant):
    other = "plain" if variant == "fma" else "fma"
    assert trig_math.probe64_mismatches(other, True) > 0


_LOOPS = r"""
void vsin(const double *x, double *y, long n) { for (long i = 0; i < n; i++) y[i] = ksin64(x[i]); }
void vcos(const double *x, double *y, long n) { for (long i = 0; i < n; i++) y[i] = kcos64(x[i]); }
void lsin(const double *x, double *y, long n) { for (long i = 0; i < n; i++) y[i] = sin(x[i]); }
void lcos(const double *x, double *y, long n) { for (long i = 0; i < n; i++) y[i] = cos(x[i]); }
"""


def _call(fn, x):
    x = np.ascontiguousarray(x, np.float64)
    y = np.empty_like(x)
    p = ctypes.c_void_p
    fn.argtypes = [p, p, ctypes.c_long]
    fn(x.ctypes.data, y.ctypes.data, x.size)
    return y


def test_every_loop_length_and_lane_mix(variant):
    src = ("#include <stdint.h>\n#include <math.h>\n#include <float.h>\n#include <string.h>\n"
           + trig_math.VARIANTS64[variant] + csrc.text("libm_sincos64.h") + _LOOPS)
    lib = build.load_library(src)
    rng = np.random.default_rng(8)
    mags = 10.0 ** rng.integers(-10, 12, 4096)
    x = rng.standard_normal(4096) * mags
    x[::29] = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e300, 5e-324])[
        np.arange(x[::29].size) % 7]
    x[5::31] = (np.arange(x[5::31].size) + 1) * (np.pi / 2)
    for n in range(1, 41):
        for off in (0, 3):
            v = x[off * 90 + n: off * 90 + 2 * n]
            for k, ref in ((lib.vsin, lib.lsin), (lib.vcos, lib.lcos)):
                np.testing.assert_array_equal(_bits(_call(k, v)), _bits(_call(ref, v)))


def test_renderer_uses_them_for_float64_only(variant, x64):
    x = np.linspace(-300, 300, 4001)
    src = kiln.jit(lambda x: knp.sin(x) * knp.cos(x)).lower(x).compile().as_text()
    assert "(ksin64(" in src and "(kcos64(" in src
    assert trig_math.VARIANTS64[variant] in src
    src32 = kiln.jit(knp.sin).lower(x.astype(np.float32)).compile().as_text()
    assert "ksin64(" not in src32


def test_forced_library_calls_in_a_fresh_process():
    code = ("import numpy as np, kiln, kiln.numpy as knp\n"
            "kiln.config.update('jax_enable_x64', True)\n"
            "x = np.linspace(-9, 9, 999)\n"
            "src = kiln.jit(knp.sin).lower(x).compile().as_text()\n"
            "assert '(sin(' in src and 'ksin64' not in src, src[-2000:]\n"
            "from kiln.compiler.render import trig_math\n"
            "assert trig_math.chosen_variant64() is None\n")
    env = dict(os.environ, KILN_LIBM_TRIG="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_jit_equals_eager_bits_over_every_exponent(variant, x64, name):
    rng = np.random.default_rng(12)
    e = np.repeat(np.arange(2048, dtype=np.uint64), 8)
    m = rng.integers(0, 1 << 52, e.size, dtype=np.uint64)
    pos = ((e << np.uint64(52)) | m).view(np.float64)
    x = np.concatenate([pos, -pos])
    fn = getattr(knp, name)
    got = np.asarray(kiln.jit(lambda v: fn(v) + 0.0)(x))
    want = np.asarray(fn(x))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(_bits(got), _bits(want))
