"""``kpow32``/``katan2_32`` (``kiln/compiler/csrc/libm_pow.h``, ``libm_atan2.h``,
``render/binary_math.py``): float32 pow/atan2 with the host C library's bits in
vectorizable C.

Their bits against this process's ``powf``/``atan2f`` over 2^20 pseudo-random pairs of
each kind the probe draws (every exponent of both arguments, the finite-result band,
integer exponents, x near 1) from two fixed seeds plus every pair of special patterns,
denormals flushed and not; dense grids around the algorithms' edges (pow's overflow and
underflow thresholds, atan2's 2^60 ratio, the kernel's breakpoints) through vectorized
loops of every length 1..40; the loops vectorize; the renderer uses them only when the
probe passed; jit and eager agree bit for bit. A larger check: tools/check_binary_math.py.
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
from kiln.compiler import csrc
from kiln.compiler.build import build
from kiln.compiler.render import binary_math

pytestmark = pytest.mark.skipif(build.find_compiler() is None, reason="no C compiler")


def _variant(name):
    v = binary_math.chosen_variant(name)
    if v is None:
        pytest.skip(f"this C library's {name} is not glibc 2.36's: the renderer calls it")
    return v


def _bits(a):
    return np.asarray(a).view(np.uint32)


@pytest.mark.parametrize("name", ["pow", "atan2"])
@pytest.mark.parametrize("flush", [True, False])
@pytest.mark.parametrize("seed", [1, 0xDEADBEEF])
def test_sampled_pairs_equal_the_library(name, flush, seed):
    v = _variant(name)
    assert binary_math.probe_mismatches(name, v, flush, pairs=1 << 20, seed=seed) == 0


def test_the_probe_tells_atan2_builds_apart():
    """atan2f's kernel fused (the variant not chosen) differs from the library's on the
    probe's sample: the probe can tell the builds apart. (powf's two builds round to the
    same float on every pair tried: there the order only prefers glibc's FMA build.)"""
    v = _variant("atan2")
    other = "fma" if v == "plain" else "plain"
    assert binary_math.probe_mismatches("atan2", other, True) > 0


_LOOPS = r"""
void vpow(const float *x, const float *y, float *o, long n) {
  for (long i = 0; i < n; i++) o[i] = kpow32(x[i], y[i]); }
void lpow(const float *x, const float *y, float *o, long n) {
  for (long i = 0; i < n; i++) o[i] = powf(x[i], y[i]); }
void vatan2(const float *x, const float *y, float *o, long n) {
  for (long i = 0; i < n; i++) o[i] = katan2_32(x[i], y[i]); }
void latan2(const float *x, const float *y, float *o, long n) {
  for (long i = 0; i < n; i++) o[i] = atan2f(x[i], y[i]); }
void flush(int on) {
#if defined(__x86_64__)
  unsigned c = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(on ? (c | 0x8040u) : (c & ~0x8040u));
#endif
}
"""


@pytest.fixture(scope="module", params=["clones", "inline"])
def lib(request):
    """The headers as generated code gets them (on x86-64 gcc: kpow32's SIMD clones, the
    16-lane one reading its tables by permutes), and with KPOW_INLINE: kpow32_any inline,
    select trees (what the 4- and 8-lane clones and other compilers run)."""
    pv, av = _variant("pow"), _variant("atan2")
    inline = "#define KPOW_INLINE 1\n" if request.param == "inline" else ""
    src = (inline + "#include <stdint.h>\n#include <math.h>\n#include <float.h>\n"
           "#include <string.h>\n" + csrc.text("xla_math.h") + binary_math.VARIANTS["pow"][pv]
           + csrc.text("libm_pow.h") + binary_math.VARIANTS["atan2"][av]
           + csrc.text("libm_atan2.h") + _LOOPS)
    return build.load_library(src)


def _call(lib, fn, x, y, flush):
    x = np.ascontiguousarray(x, np.float32)
    y = np.ascontiguousarray(y, np.float32)
    o = np.empty_like(x)
    p = ctypes.c_void_p
    fn.argtypes = [p, p, p, ctypes.c_long]
    lib.flush.argtypes = [ctypes.c_int]
    lib.flush(int(flush))
    try:
        fn(x.ctypes.data, y.ctypes.data, o.ctypes.data, x.size)
    finally:
        lib.flush(0)
    return o


def _pow_edges():
    """x^y around overflow (y log2 x = 128), underflow (-149, -150), the subnormal
    results, x around 1 and the table's interval edges, y integers near 2^24, x < 0."""
    rng = np.random.default_rng(3)
    xs = rng.uniform(0.5, 4.0, 512).astype(np.float32)
    lg = np.log2(xs.astype(np.float64))
    out_x, out_y = [], []
    for t in (128.0, 127.0, -126.0, -149.0, -150.0, -140.0):
        y = (t / lg).astype(np.float32)
        for d in range(-3, 4):
            out_x.append(xs)
            out_y.append((y.view(np.uint32) + np.uint32(d & 0xFFFFFFFF)).view(np.float32))
    edges = np.arange(0x3F330000, 0x3F330000 + (32 << 19), 1 << 19, dtype=np.uint32)
    near1 = (edges[:, None] + np.arange(-4, 5, dtype=np.int64)[None, :]).ravel()
    near1 = near1.astype(np.uint32).view(np.float32)
    out_x += [near1, -near1, near1]
    out_y += [np.full(near1.size, 3.5, np.float32), np.full(near1.size, 3.0, np.float32),
              np.full(near1.size, -1e5, np.float32)]
    ints = np.float32(2.0**24) + np.arange(-40, 40, dtype=np.float32)
    out_x.append(np.full(ints.size, -1.0000001, np.float32))
    out_y.append(ints)
    sub = np.arange(1, 4000, 37, dtype=np.uint32).view(np.float32)
    out_x += [sub, -sub]
    out_y += [np.full(sub.size, 0.25, np.float32), np.full(sub.size, 3.0, np.float32)]
    return np.concatenate(out_x), np.concatenate(out_y)


def _atan2_edges():
    """|y/x| around 2^60 and 2^-60 (x < 0 and > 0), around the kernel's breakpoints
    7/16, 11/16, 19/16, 39/16, 2^-29 and 2^25, x == +-1 and its neighbours, subnormal
    and zero operands of both signs."""
    rng = np.random.default_rng(4)
    xs = rng.uniform(1.0, 2.0, 256).astype(np.float32)
    out_y, out_x = [], []
    for r in (2.0**60, 2.0**61, 2.0**-60, 2.0**-61, 0.4375, 0.6875, 1.1875, 2.4375,
              2.0**-29, 2.0**25, 1.0):
        for s in (1, -1):
            y = (xs * np.float32(r)).astype(np.float32)
            for d in range(-2, 3):
                out_y.append((y.view(np.uint32) + np.uint32(d & 0xFFFFFFFF)).view(np.float32))
                out_x.append(xs * np.float32(s))
    one = np.array([1.0, -1.0, 1.0000001, 0.99999994], np.float32)
    y = rng.standard_normal(512).astype(np.float32) * np.float32(10.0) ** rng.integers(
        -40, 39, 512).astype(np.float32)
    for o in one:
        out_y.append(y)
        out_x.append(np.full(y.size, o, np.float32))
    tiny = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-39, -1e-39, 1.0, -1.0, np.inf, -np.inf,
                     np.nan], np.float32)
    a, b = np.meshgrid(tiny, tiny)
    out_y.append(a.ravel())
    out_x.append(b.ravel())
    return np.concatenate(out_y), np.concatenate(out_x)


def test_random_patterns(lib):
    """Uniform bit patterns and the finite band, 2^16 pairs each mode (the clones' and
    the inline form's lanes alike)."""
    rng = np.random.default_rng(10)
    a = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    b = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    band = (rng.uniform(-8, 8, a.size) * 2.0 ** rng.integers(-10, 4, a.size)).astype(
        np.float32)
    for flush in (True, False):
        for x, y in ((a, b), (np.abs(a), band)):
            np.testing.assert_array_equal(_bits(_call(lib, lib.vpow, x, y, flush)),
                                          _bits(_call(lib, lib.lpow, x, y, flush)))


@pytest.mark.parametrize("flush", [True, False])
@pytest.mark.parametrize("name", ["pow", "atan2"])
def test_edges_and_every_loop_length(lib, name, flush):
    """The edge grids whole, and in pieces of every length 1..40 at offsets that
    misalign the loop (the 16- and 8-lane clones and the scalar remainder)."""
    a, b = _pow_edges() if name == "pow" else _atan2_edges()
    mine, ref = getattr(lib, "v" + name), getattr(lib, "l" + name)
    np.testing.assert_array_equal(_bits(_call(lib, mine, a, b, flush)),
                                  _bits(_call(lib, ref, a, b, flush)))
    for n in range(1, 41):
        for off in (0, 3):
            s = slice(off * 50 + n, off * 50 + 2 * n)
            np.testing.assert_array_equal(_bits(_call(lib, mine, a[s], b[s], flush)),
                                          _bits(_call(lib, ref, a[s], b[s], flush)))


def test_loops_vectorize(tmp_path):
    """gcc vectorizes loops calling kpow32 and katan2_32 (the reason they exist); on
    x86-64 gcc the pow loop calls the SIMD clones."""
    cc = build.find_compiler()
    src = tmp_path / "t.c"
    src.write_text("#include <stdint.h>\n#include <math.h>\n#include <float.h>\n"
                   "#include <string.h>\n" + csrc.text("xla_math.h")
                   + csrc.text("libm_pow.h") + csrc.text("libm_atan2.h")
                   + "void f(const float *x, float *y, long n) {\n"
                     "  for (long i = 0; i < n; i++) y[i] = kpow32(x[i], 1.5f - x[i]); }\n"
                     "void g(const float *x, float *y, long n) {\n"
                     "  for (long i = 0; i < n; i++) y[i] = katan2_32(x[i], 2.0f); }\n")
    flags = [f for f in build.default_flags() if f not in ("-shared", "-fPIC")]
    out = subprocess.run([cc, *flags, "-S", "-o", "-", str(src)], capture_output=True,
                         text=True, check=True).stdout
    g = out.split("\ng:")[1].split(".cfi_endproc")[0]
    assert "divps" in g                                 # packed float division
    if platform.machine() == "x86_64" and "clang" not in build.compiler_identity().lower():
        assert "_ZGVbN4vv_kpow32" in out and "_ZGVeN16vv_kpow32" in out   # the clones
        assert "vpermt2q" in out.split("_ZGVeN16vv_kpow32:")[1].split(".cfi_endproc")[0]
        if "-march=native" in flags:
            loop = out.split("\nf:")[1].split(".cfi_endproc")[0]
            assert "call\t_ZGV" in loop and "vv_kpow32" in loop


def test_renderer_uses_them_after_the_probe():
    pv, av = _variant("pow"), _variant("atan2")
    x = np.linspace(0.01, 30, 4001, dtype=np.float32)
    src = kiln.jit(lambda x: knp.power(x, 1.5 - x) + knp.arctan2(x, 3 - x)).lower(
        x).compile().as_text()
    assert "(kpow32(" in src and "(katan2_32(" in src
    stmts = [ln for ln in src.splitlines() if ln.lstrip().startswith("const float t")]
    assert stmts and not any("powf(" in ln or "atan2f(" in ln for ln in stmts)
    assert binary_math.VARIANTS["pow"][pv] in src and binary_math.VARIANTS["atan2"][av] in src

def test_asin_acos_use_it():
    """XLA's float32 asin/acos formulas call the C library's atan2; with the probe passed
    generated code gives them katan2_32 (vectorizable), same bits as eager (atan2f)."""
    _variant("atan2")
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(-1.1, 1.1, 5000),
                        rng.standard_normal(200) * 1e-30]).astype(np.float32)
    x = np.concatenate([x, np.arange(1, 900, 7, dtype=np.uint32).view(np.float32),
                        np.array([0, -0.0, 1, -1, np.nan, np.inf], np.float32)])
    for fn in (knp.arcsin, knp.arccos):
        f = kiln.jit(lambda v: fn(v) * 1.0)
        src = f.lower(x).compile().as_text()
        assert "#define KILN_ATAN2F katan2_32" in src
        assert src.index("KILN_ATAN2F katan2_32") < src.index("static inline float xasin32")
        np.testing.assert_array_equal(_bits(f(x)), _bits(fn(x)))


def test_forced_library_calls_in_a_fresh_process():
    code = ("import numpy as np, kiln, kiln.numpy as knp\n"
            "x = np.linspace(0.1, 9, 999, dtype=np.float32)\n"
            "f = kiln.jit(lambda x: knp.power(x, x) + knp.arctan2(x, 1 - x))\n"
            "src = f.lower(x).compile().as_text()\n"
            "assert '(powf(' in src and '(atan2f(' in src and 'kpow32' not in src\n"
            "assert 'katan2_32' not in src\n"
            "from kiln.compiler.render import binary_math\n"
            "assert binary_math.chosen_variant('pow') is None\n")
    env = dict(os.environ, KILN_LIBM_TRIG="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def test_program_split_in_units_links(monkeypatch):
    """Every compilation unit pastes the header, so each defines kpow32's clones; weak
    symbols let the library link once (same bits as one unit)."""
    _variant("pow")
    from kiln.compiler.render.render_c import CRenderer

    def f(x):
        a = knp.power(x, 0.75) * 2
        b = knp.power(knp.abs(x @ x) + 1, 0.5 - x)
        return a, b, knp.arctan2(knp.max(b, axis=1), 2.0), knp.sum(knp.power(a, 1.5), axis=0)
    x = np.linspace(0.01, 3, 48 * 48, dtype=np.float32).reshape(48, 48)
    one = kiln.jit(f)
    assert "@kiln-unit" not in one.lower(x).compile().as_text()
    want = one(x)
    monkeypatch.setattr(CRenderer, "split_min_chars", 0)
    monkeypatch.setattr(CRenderer, "build_units", 2)
    kiln.clear_caches()
    two = kiln.jit(f)
    src = two.lower(x).compile().as_text()
    assert src.count("@kiln-unit") == 2 and "kpow32(" in src
    for a, b in zip(two(x), want):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("name", ["power", "arctan2"])
def test_jit_equals_eager_bits_over_every_exponent(name):
    rng = np.random.default_rng(9)
    e = np.repeat(np.arange(256, dtype=np.uint32), 32)
    a = ((e << 23) | rng.integers(0, 1 << 23, e.size, dtype=np.uint32)).view(np.float32)
    b = rng.permutation(a)
    b[::2] = np.float32(rng.standard_normal(b[::2].size) * 4)
    a[1::4] = -a[1::4]
    b[3::8] = np.round(b[3::8])
    fn = getattr(knp, name)
    got = np.asarray(kiln.jit(lambda u, v: fn(u, v) + 0.0)(a, b))   # fused into a kernel
    want = np.asarray(fn(a, b))                                    # eager
    np.testing.assert_array_equal(_bits(got), _bits(want))
