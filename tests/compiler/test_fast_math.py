"""``fexp32`` (``kiln.compiler.render.fast_math``), the exp used inside float sum reductions.

Its accuracy in ulps against the correctly rounded exp (float64, rounded), its special
values against XLA's (``xexp32``), and where the renderer uses it: sums only, so
elementwise exp (softmax's output) keeps JAX's bits.
"""
import ctypes
import os

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
import kiln.scipy.special
from kiln import nn as knn
from kiln.compiler.build import build
from kiln.compiler.render.fast_math import FAST_EXP_C, FIN_MAX, FIN_MIN
from kiln.random._native import XLA_MATH_C

pytestmark = pytest.mark.skipif(build.find_compiler() is None, reason="no C compiler")

_SRC = ("#include <stdint.h>\n#include <math.h>\n#include <float.h>\n#include <string.h>\n"
        + XLA_MATH_C + FAST_EXP_C + r"""
void fast(const float *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = fexp32(x[i]); }
void xla(const float *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = xexp32(x[i]); }
void fin(const float *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = fexp32_fin(x[i]); }
void xfin(const float *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = xexp32_fin(x[i]); }
void inside(const float *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = fexp32_in(x[i]); }
""")


@pytest.fixture(scope="module")
def lib():
    return build.load_library(_SRC)


def _call(fn, x):
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    p = ctypes.c_void_p
    fn.argtypes = [p, p, ctypes.c_int64]
    fn(x.ctypes.data, y.ctypes.data, x.size)
    return y


def _ulps(y, x):
    """|y - exp(x)| in ulps of the exact result; results XLA flushes (below FLT_MIN)
    must be 0."""
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64))
    tiny = ref < np.finfo(np.float32).tiny
    big = ref > np.finfo(np.float32).max
    ok = np.isfinite(ref) & ~tiny & ~big
    _, e = np.frexp(ref[ok])
    err = np.abs(y[ok].astype(np.float64) - ref[ok]) / np.ldexp(1.0, e - 24)
    assert np.all(y[tiny] == 0)
    assert np.all(y[big] == np.inf)
    return np.concatenate([err, [0.0]])


def _all_floats(step):
    """Every ``step``-th float32 bit pattern, NaNs and infinities included."""
    return np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32).view(np.float32)


# Part 0 (every exponent, 4M patterns) in the default tier, parts 1-3 in the full tier.
@pytest.mark.parametrize("part", [0] + [pytest.param(p, marks=pytest.mark.slow) for p in (1, 2, 3)])
def test_fexp32_within_1_06_ulp(lib, part):
    x = _all_floats(67)[part::4]               # 16M patterns in all, every exponent
    x = x[~np.isnan(x)]
    err = _ulps(_call(lib.fast, x), x)
    assert err.max() <= 1.06


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("KILN_EXHAUSTIVE"),
                    reason="all 2^32 inputs take ~3 minutes: set KILN_EXHAUSTIVE=1")
def test_fexp32_exhaustive(lib):
    worst = 0.0
    for start in range(0, 2**32, 2**26):
        x = np.arange(start, start + 2**26, dtype=np.uint64).astype(np.uint32).view(np.float32)
        x = x[~np.isnan(x)]
        worst = max(worst, _ulps(_call(lib.fast, x), x).max())
    assert worst <= 1.06


def test_fexp32_dense_near_one_and_edges(lib):
    x = np.concatenate([np.linspace(-1, 1, 400001), np.linspace(88.0, 88.8, 100001),
                        np.linspace(-88.0, -87.0, 100001), np.linspace(-104, -87, 20001)])
    x = x.astype(np.float32)
    err = _ulps(_call(lib.fast, x), x)
    assert err.max() <= 1.06
    # more than nine in ten results are the correctly rounded float
    assert np.mean(err < 0.5) > 0.9


def test_fexp32_special_values_as_xla(lib):
    f32 = np.float32
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 88.72284, 88.7229,
                  -87.33655, -87.34, -103.9, 1e30, -1e30, 3.4e38, -3.4e38,
                  np.float32(np.finfo(f32).tiny), 1e-45, -1e-45], f32)
    nan_payload = np.array([0x7F800001, 0xFFC00123, 0x7FBFFFFF], np.uint32).view(f32)
    x = np.concatenate([x, nan_payload])
    got, want = _call(lib.fast, x), _call(lib.xla, x)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    both = ~np.isnan(want)
    np.testing.assert_array_equal(got[both], want[both])
    # the largest finite result and the smallest normal one
    edge = np.array([88.72283, -87.33654], f32)
    np.testing.assert_allclose(_call(lib.fast, edge), _call(lib.xla, edge), rtol=3e-7)
    assert np.all(np.isfinite(_call(lib.fast, edge))) and np.all(_call(lib.fast, edge) > 0)


def test_fin_variants_are_the_same_up_to_their_bound(lib):
    # The variants without the overflow/NaN selects, for arguments known to be at most
    # FIN_MAX (exp(x - max(x))): the same bits wherever they may be used.
    bound = np.float32(FIN_MAX.rstrip("f"))
    x = _all_floats(251)
    x = x[~np.isnan(x) & (x <= bound)]
    x = np.concatenate([x, [bound, np.nextafter(bound, np.float32(0)), 0.0, -0.0,
                            -np.inf, -87.33654, -87.33655, -200.0]]).astype(np.float32)
    np.testing.assert_array_equal(_call(lib.fin, x).view(np.uint32),
                                  _call(lib.fast, x).view(np.uint32))
    np.testing.assert_array_equal(_call(lib.xfin, x).view(np.uint32),
                                  _call(lib.xla, x).view(np.uint32))
    # and the bound is where fexp32 starts to overflow
    assert np.isfinite(_call(lib.fast, np.array([bound], np.float32))[0])
    assert _call(lib.fast, np.array([np.nextafter(bound, np.float32(np.inf))],
                                    np.float32))[0] == np.inf


def test_in_variant_is_the_same_within_its_range(lib):
    # fexp32_in (no select at all), for arguments known to lie in [FIN_MIN, FIN_MAX]
    # (exp(x - max(x)) on a row whose min is checked too): a sweep of that range, every
    # float32 next to its ends.
    lo, hi = np.float32(FIN_MIN.rstrip("f")), np.float32(FIN_MAX.rstrip("f"))
    x = _all_floats(97)
    x = x[(x >= lo) & (x <= hi)]
    edges = [np.arange(b - 20000, b + 1, dtype=np.uint32).view(np.float32)
             for b in (int(lo.view(np.uint32)), int(hi.view(np.uint32)))]
    x = np.concatenate([x, *edges, np.float32([0.0, -0.0, 1e-45, -1e-45])])
    np.testing.assert_array_equal(_call(lib.inside, x).view(np.uint32),
                                  _call(lib.fast, x).view(np.uint32))
    # FIN_MIN is where fexp32 starts to flush: its result there is normal, below it 0
    assert _call(lib.fast, np.array([lo], np.float32))[0] >= np.finfo(np.float32).tiny
    assert _call(lib.fast, np.array([np.nextafter(lo, np.float32(-np.inf))],
                                    np.float32))[0] == 0.0


def _source(fn, *args):
    return kiln.jit(fn).lower(*args).compile().as_text()


def test_renderer_uses_fexp32_in_float_sums_only():
    x = np.random.default_rng(0).standard_normal((64, 3000)).astype(np.float32)
    src = _source(lambda x: kiln.scipy.special.logsumexp(x, axis=1), x)
    assert "fexp32(" in src
    # softmax's output is elementwise: XLA's exp, JAX's bits
    src = _source(lambda x: knn.softmax(x, axis=1), x)
    assert "xexp32(" in src
    # a max of exps is not a sum: XLA's exp
    src = _source(lambda x: knp.max(knp.exp(x), axis=1), x)
    assert "xexp32(" in src and "fexp32(" not in src


def test_sum_of_exp_accuracy():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((50, 4000)) * 5).astype(np.float32)
    got = np.asarray(kiln.jit(lambda x: knp.sum(knp.exp(x), axis=1))(x))
    ref = np.exp(x.astype(np.float64)).sum(axis=1)
    np.testing.assert_allclose(got, ref, rtol=2e-6)
    lse = np.asarray(kiln.jit(lambda x: kiln.scipy.special.logsumexp(x, axis=1))(x))
    np.testing.assert_allclose(lse, np.log(ref), rtol=1e-6)
    # NaN and inf inside a summed exp
    x[3, 7], x[4, 9] = np.nan, np.inf
    got = np.asarray(kiln.jit(lambda x: knp.sum(knp.exp(x), axis=1))(x))
    assert np.isnan(got[3]) and got[4] == np.inf and np.all(np.isfinite(got[5:]))


def test_fast_paths_under_grad_and_vmap():
    # jit(grad) and jit(vmap) of logsumexp over long rows: the sum uses fexp32 (and a
    # skewed row loop); the gradient is softmax, elementwise, with XLA's exp.
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 40, 2000)) * 3).astype(np.float32)
    lse = lambda x: kiln.scipy.special.logsumexp(x, axis=-1)     # noqa: E731
    f = kiln.jit(kiln.vmap(lse))
    assert "fexp32(" in kiln.jit(kiln.vmap(lse)).lower(x).compile().as_text()
    x64 = x.astype(np.float64)
    m = x64.max(-1, keepdims=True)
    ref = (np.log(np.exp(x64 - m).sum(-1)) + m[..., 0])
    np.testing.assert_allclose(np.asarray(f(x)), ref, rtol=1e-6, atol=1e-6)
    # both take the guarded rows (exp without overflow/NaN select; same bits)
    assert "exp32_fin(t" in kiln.jit(kiln.vmap(lse)).lower(x).compile().as_text()
    grad_fn = kiln.jit(kiln.grad(lambda x: lse(x).sum()))
    assert "exp32_fin(t" in grad_fn.lower(x[0]).compile().as_text()
    g = np.asarray(grad_fn(x[0]))
    soft = np.exp(x64[0] - ref[0][:, None])
    np.testing.assert_allclose(g, soft, rtol=2e-5, atol=1e-9)
    want = np.asarray(kiln.jit(lambda x: knn.softmax(x, axis=-1))(x[0]))
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-12)
