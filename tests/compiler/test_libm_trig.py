"""``ksin32``/``kcos32``/``ktan32`` (``kiln/compiler/csrc/libm_trig.h``,
``render/trig_math.py``): float32 sin/cos/tan with the host C library's bits in
vectorizable C.

Their bits against this process's ``sinf``/``cosf``/``tanf`` on a sample of every float32
exponent by default, on all 2^32 inputs with ``KILN_EXHAUSTIVE=1`` (the C driver of
``trig_probe.c``, loops vectorized as in kernels), with denormals flushed and not; the
loops really vectorize; the renderer uses them only when the probe passed and keeps
the library's functions otherwise; jit and eager agree bit for bit.
"""
import ctypes
import os
import platform
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


@pytest.mark.parametrize("tan", [False, True])
@pytest.mark.parametrize("flush", [True, False])
@pytest.mark.parametrize("first", [0, 257, 514])
def test_sampled_patterns_equal_the_library(variant, flush, first, tan):
    # every 257th pattern (in three parts): 16.7M inputs, every exponent and sign
    if tan and not trig_math.usable("tan"):
        pytest.skip("this C library's tanf is not glibc 2.36's")
    assert trig_math.probe_mismatches(variant, flush, step=257 * 3, first=first,
                                      dense=512, tan=tan) == 0


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("KILN_EXHAUSTIVE"),
                    reason="all 2^32 inputs take ~3 minutes: set KILN_EXHAUSTIVE=1")
@pytest.mark.parametrize("tan", [False, True])
@pytest.mark.parametrize("flush", [True, False])
def test_all_patterns_equal_the_library(variant, flush, tan):
    if tan and not trig_math.usable("tan"):
        pytest.skip("this C library's tanf is not glibc 2.36's")
    assert trig_math.probe_mismatches(variant, flush, step=1, dense=0, tan=tan) == 0


def test_the_probe_tells_the_two_builds_apart(variant):
    """The variant not chosen fails the probe: its results differ from the library's on
    the DISCRIMINATING inputs (rounding a * b + c twice or once shows there)."""
    other = "plain" if variant == "fma" else "fma"
    assert trig_math.probe_mismatches(other, True) > 0
    assert trig_math.probe_mismatches(other, True, step=1 << 31, dense=0) > 0


_LOOPS = r"""
void vsin(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = ksin32(x[i]); }
void vcos(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = kcos32(x[i]); }
void lsin(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = sinf(x[i]); }
void lcos(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = cosf(x[i]); }
void vtan(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = ktan32(x[i]); }
void ltan(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = tanf(x[i]); }
"""


@pytest.fixture(scope="module")
def lib(variant):
    src = ("#include <stdint.h>\n#include <math.h>\n#include <float.h>\n#include <string.h>\n"
           + trig_math.csrc.text("xla_math.h") + trig_math.VARIANTS[variant]
           + trig_math.csrc.text("libm_trig.h") + _LOOPS)
    return build.load_library(src)


def _call(fn, x):
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    p = ctypes.c_void_p
    fn.argtypes = [p, p, ctypes.c_long]
    fn(x.ctypes.data, y.ctypes.data, x.size)
    return y


def test_every_loop_length_and_lane_mix(lib):
    """Lengths 1..70 (the 16- and 8-lane clones and the scalar remainder), lanes below
    and above 120 mixed in one vector, offsets that misalign the loop."""
    rng = np.random.default_rng(5)
    mags = np.float32(10.0) ** rng.integers(-6, 39, 4096).astype(np.float32)
    x = (rng.standard_normal(4096).astype(np.float32) * mags).astype(np.float32)
    x[::37] = np.array([np.inf, -np.inf, np.nan, 0.0], np.float32)[np.arange(x[::37].size) % 4]
    for n in range(1, 71):
        for off in (0, 1, 3):
            v = x[off * 100 + off: off * 100 + off + n]
            pairs = [(lib.vsin, lib.lsin), (lib.vcos, lib.lcos)]
            if trig_math.usable("tan"):
                pairs.append((lib.vtan, lib.ltan))
            for k, ref in pairs:
                np.testing.assert_array_equal(_bits(_call(k, v)), _bits(_call(ref, v)))


def test_loops_vectorize(tmp_path):
    """gcc vectorizes a loop calling ksin32 (the reason they exist): packed double
    arithmetic, and on x86-64 gcc the loop calls the SIMD clones."""
    cc = build.find_compiler()
    src = tmp_path / "t.c"
    src.write_text("#include <stdint.h>\n#include <math.h>\n#include <float.h>\n"
                   "#include <string.h>\n"
                   + trig_math.csrc.text("xla_math.h") + trig_math.csrc.text("libm_trig.h")
                   + "void f(const float *x, float *y, long n) {\n"
                     "  for (long i = 0; i < n; i++) y[i] = ksin32(x[i]) + kcos32(x[i]); }\n")
    flags = [f for f in build.default_flags() if f not in ("-shared", "-fPIC")]
    out = subprocess.run([cc, *flags, "-S", "-o", "-", str(src)], capture_output=True,
                         text=True, check=True).stdout
    assert "pd\t" in out or "pd " in out           # packed double arithmetic
    if platform.machine() == "x86_64" and "clang" not in build.compiler_identity().lower():
        assert "_ZGVbN4v_ksin32" in out and "_ZGVeN16v_kcos32" in out   # the clones
        if "-march=native" in flags:
            loop = out.split("\nf:")[1].split(".cfi_endproc")[0]
            assert "call\t_ZGV" in loop and "v_ksin32" in loop   # the loop calls them


def test_renderer_uses_them_after_the_probe(variant):
    x = np.linspace(-200, 200, 4001, dtype=np.float32)
    f = kiln.jit(lambda x: knp.sin(x) * knp.cos(x))
    src = f.lower(x).compile().as_text()
    # The program's own code (the XLA math header before it may call sinf itself: its
    # lgamma's reflection does, as XLA's does).
    body = src[src.index(" seg0("):]
    assert "(ksin32(" in body and "(kcos32(" in body and "(sinf(" not in body
    assert trig_math.VARIANTS[variant] in src
    # float64 keeps the library
    tan = kiln.jit(knp.tan).lower(x).compile().as_text()
    assert ("(ktan32(" in tan) == trig_math.usable("tan") and "(kcos32(" not in tan


def test_forced_library_calls_in_a_fresh_process():
    code = ("import numpy as np, kiln, kiln.numpy as knp\n"
            "x = np.linspace(-9, 9, 999, dtype=np.float32)\n"
            "f = kiln.jit(knp.sin)\n"
            "src = f.lower(x).compile().as_text()\n"
            "assert '(sinf(' in src and 'ksin32' not in src, src[-2000:]\n"
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


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_jit_equals_eager_bits_over_every_exponent(name):
    x = _sweep()
    fn = getattr(knp, name)
    got = kiln.jit(lambda v: fn(v) + 0.0)(x)     # fused into a kernel
    want = fn(x)                                 # eager: the C library's sinf/cosf
    g, w = np.asarray(got), np.asarray(want)
    assert np.array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(_bits(g[ok]), _bits(w[ok]))
    # and near the exact values, as a sanity check of the library itself
    near = ok & (np.abs(x) < 1e4)
    ref = getattr(np, name)(x[near].astype(np.float64))
    np.testing.assert_allclose(g[near], ref, rtol=3e-7, atol=2e-7)


def test_program_split_in_units_links(variant, monkeypatch):
    """Every compilation unit of a program pastes the header, so the clones are defined
    in each; weak symbols let the library link once (same bits as one unit)."""
    from kiln.compiler.render.render_c import CRenderer

    def f(x):
        a = knp.sin(x) * 2
        b = knp.cos(x @ x)
        return a, b, knp.cos(knp.max(b, axis=1)), knp.sum(knp.sin(a), axis=0)
    x = np.linspace(-300, 300, 48 * 48, dtype=np.float32).reshape(48, 48)
    one = kiln.jit(f)
    assert "@kiln-unit" not in one.lower(x).compile().as_text()
    want = one(x)
    monkeypatch.setattr(CRenderer, "split_min_chars", 0)
    monkeypatch.setattr(CRenderer, "build_units", 2)
    kiln.clear_caches()
    two = kiln.jit(f)
    assert two.lower(x).compile().as_text().count("@kiln-unit") == 2
    for a, b in zip(two(x), want):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_verdict_is_cached_per_library_file(variant, monkeypatch, tmp_path):
    """The probe's verdict is stored in the cache directory and read by later processes
    (here: after clearing the in-process memo); a file others could have written is
    ignored, and the probe runs again."""
    if trig_math._libm_identity() is None:
        pytest.skip("no /proc/self/maps naming the math library")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    calls = []

    def fake(v, tan):
        calls.append((v, tan))
        return v == variant

    monkeypatch.setattr(trig_math, "_passes", fake)
    try:
        trig_math._variant.cache_clear()
        assert trig_math.usable("sin") and calls
        files = list((tmp_path / "trig").glob("sincos-*.json"))
        assert len(files) == 1 and files[0].stat().st_mode & 0o077 == 0
        calls.clear()
        trig_math._variant.cache_clear()
        assert trig_math.chosen_variant() == variant and not calls     # read back
        files[0].chmod(0o666)
        files[0].write_text('{"verdict": null}')
        trig_math._variant.cache_clear()
        assert trig_math.chosen_variant() == variant and calls         # probed again
    finally:
        trig_math._variant.cache_clear()
