"""kiln's own float32 GEMM (kiln/compiler/csrc/kiln_sgemm.h: AVX-512, or kiln_sgemm_avx2.h
where the glue is built for AVX2 only) against the BLAS.

The glue library (``blas.glue_library``) runs float32 products of the shapes the kernel
takes on it; ``kiln_blas_init``'s last argument switches it, so one process calls the
same wrapper both ways. Where the BLAS is the ``scipy-openblas32`` wheel with its
SkylakeX kernels (the K blocking the kernel copies) the results must be the same bits;
elsewhere, equal within float32 rounding.
"""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler.build import blas
from kiln.compiler.build.build import _has_avx512

R = np.random.default_rng(7)
_ARGS = [ctypes.c_int, ctypes.c_int] + [ctypes.c_int64] * 3 + [
    ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
    ctypes.c_int64, ctypes.c_float]


def _glue():
    info = blas.blas_info()
    glue = blas.glue_library(info)
    glue.kiln_gemm_f32.argtypes = _ARGS
    glue.kiln_gemm_f32.restype = None
    glue.kiln_blas_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_int, ctypes.c_int]
    return info, glue


@pytest.fixture
def gemm():
    """``run(own, ta, tb, a, b, c, beta, M, N, K)`` through the glue, own kernel on or off;
    the glue's setting is put back afterwards."""
    info, glue = _glue()
    before = blas.own_sgemm_active()
    # The AVX2 kernel has the bits of one BLAS call on the whole product, on any number
    # of threads (the BLAS's own bits on two threads are those of its two halves).
    whole = blas.own_sgemm_kind() == 256

    def set_own(on, threads=None):
        if threads is None:
            threads = 1 if whole and not on else info.max_threads
        glue.kiln_blas_init(info.sgemm, info.dgemm, info.set_threads_local or None,
                            threads, int(on), 0)

    def run(own, ta, tb, a, b, c, beta, m, n, k):
        set_own(own)
        p = lambda x: x.ctypes.data_as(ctypes.c_void_p)   # noqa: E731
        glue.kiln_gemm_f32(ta, tb, m, n, k, p(a), a.strides[0] // 4, p(b),
                           b.strides[0] // 4, p(c), c.strides[0] // 4, beta)
        return c

    yield run
    set_own(before, info.max_threads)


def _exact_bits_expected():
    """The wheel's OpenBLAS with SkylakeX kernels and the AVX-512 kernel (the blocking
    kiln_sgemm.h copies), or with Haswell kernels and the AVX2 one (kiln_sgemm_avx2.h;
    tests/compiler/test_own_sgemm_avx2.py forces that pair on any AVX2 processor)."""
    corename, kind = blas.wheel_corename(), blas.own_sgemm_kind()
    return (corename, kind) in (("skylakex", 512), ("haswell", 256))


def _same(x, y, exact):
    assert np.array_equal(np.isnan(x), np.isnan(y))
    if exact:
        ok = ~np.isnan(x)
        bad = int((x[ok].view(np.int32) != y[ok].view(np.int32)).sum())
        assert bad == 0, f"{bad} of {x.size} elements differ from the BLAS's bits"
    else:
        np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-5)


# (M, N, K, transA, transB): row tails of 1, 8 and 9 rows past the 12-row blocks, column
# tails inside the first and the second half of a 32-column panel, K in one block, in two
# OpenBLAS-sized blocks (777 -> 400 + 377), in four (1500 -> 448 + 448 + 304 + 300) and odd.
SHAPES = [(128, 256, 784, 0, 0), (13, 256, 512, 0, 0), (20, 100, 777, 0, 1),
          (21, 80, 700, 1, 0), (392, 512, 128, 1, 0), (128, 256, 512, 0, 1),
          (100, 130, 333, 1, 1), (64, 64, 256, 0, 0), (500, 96, 800, 1, 1),
          (40, 128, 1500, 0, 0)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_own_kernel_matches_the_blas(gemm, shape):
    m, n, k, ta, tb = shape
    exact = _exact_bits_expected()
    # Operands inside larger arrays: leading dimensions past the used columns.
    a = R.standard_normal((k, m + 3) if ta else (m, k + 5), dtype=np.float32)
    b = R.standard_normal((n, k + 2) if tb else (k, n + 7), dtype=np.float32)
    outs = []
    for own in (0, 1):
        c = np.full((m, n + 4), np.nan, np.float32)     # beta 0 never reads C
        gemm(own, ta, tb, a, b, c, 0.0, m, n, k)
        assert np.isnan(c[:, n:]).all()                 # columns past N untouched
        outs.append(c[:, :n].copy())
    _same(outs[1], outs[0], exact)
    ref = (a[:, :m].T if ta else a[:, :k]) @ (b[:, :k].T if tb else b[:, :n])
    np.testing.assert_allclose(outs[1], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_own_kernel_beta_matches_the_blas(gemm, beta):
    m, n, k = 40, 96, 777                                # two K blocks: 400 + 377
    a = R.standard_normal((m, k), dtype=np.float32)
    b = R.standard_normal((k, n), dtype=np.float32)
    c0 = R.standard_normal((m, n), dtype=np.float32)
    outs = [gemm(own, 0, 0, a, b, c0.copy(), beta, m, n, k) for own in (0, 1)]
    _same(outs[1], outs[0], _exact_bits_expected())
    np.testing.assert_allclose(outs[1], beta * c0 + a @ b, rtol=1e-4, atol=1e-3)


def test_own_kernel_special_values(gemm):
    m, n, k = 24, 64, 700
    a = R.standard_normal((m, k), dtype=np.float32)
    b = R.standard_normal((k, n), dtype=np.float32)
    a[3, 5] = np.inf
    a[7, 100] = np.nan
    b[600, 9] = -np.inf
    a[10] = 0.0
    b[:, 20] = -0.0                                      # +0 sums: 0 * -0 never gives -0
    outs = [gemm(own, 0, 0, a, b, np.empty((m, n), np.float32), 0.0, m, n, k)
            for own in (0, 1)]
    _same(outs[1], outs[0], _exact_bits_expected())
    assert np.isnan(outs[1][7]).all() and np.isinf(outs[1][3, 0])
    row = outs[1][10]                                    # 0 * -inf (column 9): NaN
    assert np.isnan(row[9]) and (np.delete(row, 9).view(np.int32) == 0).all()  # +0.0
    assert (outs[1][:, 20].view(np.int32)[np.isfinite(outs[1][:, 20])] == 0).all()


def test_split_products_match_the_blas(gemm):
    """Products the glue splits over its threads, each block on the own kernel."""
    for m, n, k, ta, tb in [(128, 512, 784, 0, 0), (784, 512, 128, 1, 0),
                            (128, 512, 512, 0, 1)]:
        a = R.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
        b = R.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
        outs = [gemm(own, ta, tb, a, b, np.empty((m, n), np.float32), 0.0, m, n, k)
                for own in (0, 1)]
        _same(outs[1], outs[0], _exact_bits_expected())


def test_jit_products_on_the_own_kernel():
    """A jitted MLP-layer product and its gradient (forward, X^T dY, dY W^T shapes)."""
    x = R.standard_normal((128, 784), dtype=np.float32)
    w = (R.standard_normal((784, 512), dtype=np.float32) / 28).astype(np.float32)

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) @ w.T)

    out = kiln.jit(kiln.value_and_grad(loss))(w, x)
    h = np.tanh(x.astype(np.float64) @ w)
    ref = (h @ w.T).sum()
    np.testing.assert_allclose(float(out[0]), ref, rtol=1e-4)
    ones = np.ones((128, 784))
    dh = ones @ w
    gw = x.T.astype(np.float64) @ ((1 - h * h) * dh) + (ones.T @ h)
    np.testing.assert_allclose(np.asarray(out[1]), gw, rtol=2e-3, atol=2e-3)


def test_own_kernel_is_on_where_built_and_off_by_env(monkeypatch):
    from kiln.compiler.build.build import intel_avx512
    env_flags = os.environ.get("KILN_CFLAGS")
    if os.environ.get("KILN_OWN_SGEMM") is None:
        kind = blas.own_sgemm_kind()
        assert blas.own_sgemm_enabled() == (
            (kind == 512 and intel_avx512())
            or (kind == 256 and blas.wheel_corename() == "haswell"))
    if _has_avx512() and env_flags is None and blas.own_sgemm_enabled():
        assert blas.own_sgemm_active()
    code = ("from kiln.compiler.build import blas\n"
            "print(blas.own_sgemm_active())\n")
    env = dict(os.environ, KILN_OWN_SGEMM="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    monkeypatch.setenv("KILN_OWN_SGEMM", "maybe")
    with pytest.raises(ValueError, match="KILN_OWN_SGEMM"):
        blas.own_sgemm_enabled()
