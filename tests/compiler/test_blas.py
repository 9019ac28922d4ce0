"""kiln/compiler/build/blas.py: finding SciPy's BLAS, the thread rule, and GEMMs from generated C."""
import ctypes
import os

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu
from kiln.compiler.build import blas
from kiln.compiler.lower import blas_support
from kiln.compiler.lower.program import Gemm

pytestmark = pytest.mark.skipif(not blas_support.available(), reason="no BLAS found")

R = np.random.default_rng(7)


def _gemm_steps(f, *args):
    exe = cpu.executable_for(kiln.make_jaxpr(f)(*args))
    return [s for s in exe.prog.steps if isinstance(s, Gemm)]


def test_blas_info_addresses_and_library():
    info = blas.blas_info()
    assert info.sgemm and info.dgemm and info.sgemm != info.dgemm
    assert info.max_threads >= 1
    if info.set_threads_local:
        # The setter lives in the BLAS SciPy links, not in NumPy's ILP64 copy.
        lib = blas._library_of(info.set_threads_local)
        assert lib and "64_" not in lib.rsplit("/", 1)[-1]


def test_the_openblas32_wheel_is_preferred(monkeypatch):
    import importlib.util
    if importlib.util.find_spec("scipy_openblas32") is None:
        pytest.skip("scipy-openblas32 not installed")
    monkeypatch.delenv("KILN_BLAS", raising=False)
    sgemm, dgemm, path = blas._wheel_blas()
    assert sgemm and dgemm and "scipy_openblas" in path
    assert blas._library_of(sgemm) == path
    # loaded with one thread (no spinning worker), the user's setting put back
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
    assert blas._wheel_blas() is not None
    assert os.environ["OPENBLAS_NUM_THREADS"] == "7"
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    blas._wheel_blas()
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    monkeypatch.setenv("KILN_BLAS", "scipy")
    assert blas._wheel_blas() is None
    monkeypatch.setenv("KILN_BLAS", "mkl")
    with pytest.raises(ValueError, match="KILN_BLAS"):
        blas._wheel_blas()


def test_scipy_blas_fallback_multiplies(monkeypatch):
    # KILN_BLAS=scipy in a fresh process: the capsules' sgemm, same products.
    import subprocess
    import sys
    code = ("import numpy as np, kiln, kiln.numpy as jnp\n"
            "from kiln.compiler.build import blas\n"
            "assert 'scipy_openblas32' not in blas.blas_info().library\n"
            "a = np.arange(600 * 500, dtype=np.float32).reshape(600, 500) % 7\n"
            "b = np.arange(500 * 300, dtype=np.float32).reshape(500, 300) % 5\n"
            "np.testing.assert_array_equal(np.asarray(kiln.jit(jnp.dot)(a, b)), a @ b)\n")
    env = dict(os.environ, KILN_BLAS="scipy", KILN_COMPILE="sync")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_thread_rule():
    assert blas.threads_for(128, 1024, 1024, max_threads=2) == 2  # 2**27 MACs: parallel
    assert blas.threads_for(128, 512, 256, max_threads=2) == 2    # 2**24: parallel
    assert blas.threads_for(1024, 512, 10, max_threads=2) == 2    # 2**22.3: parallel
    assert blas.threads_for(64, 256, 128, max_threads=2) == 1     # 2**21
    assert blas.threads_for(10, 10, 10, max_threads=8) == 1
    assert blas.threads_for(4096, 4096, 4096, max_threads=1) == 1


def test_kiln_blas_threads_env(monkeypatch):
    monkeypatch.setenv("KILN_BLAS_THREADS", "3")
    assert blas._max_threads() == 3
    monkeypatch.setenv("KILN_BLAS_THREADS", "x")
    with pytest.raises(ValueError, match="KILN_BLAS_THREADS"):
        blas._max_threads()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(64, 48, 32), (1, 300, 50), (100, 2, 100), (17, 65, 5)])
@pytest.mark.parametrize("form", ["ab", "aTb", "abT", "aTbT"])
def test_jit_matmul_matches_numpy(dtype, shape, form):
    m, k, n = shape
    a = R.standard_normal((m, k)).astype(dtype)
    b = R.standard_normal((k, n)).astype(dtype)
    args = (a.T.copy() if "aT" in form else a, b.T.copy() if "bT" in form else b)

    def f(x, y):
        return (x.T if "aT" in form else x) @ (y.T if "bT" in form else y)

    with kiln.enable_x64(dtype == np.float64):
        got = np.asarray(kiln.jit(f)(*args))
        assert got.dtype == dtype
        assert len(_gemm_steps(f, *args)) == 1
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=tol, atol=tol * np.sqrt(k))


def test_batched_and_epilogue():
    a = R.standard_normal((4, 30, 40)).astype(np.float32)
    b = R.standard_normal((4, 40, 20)).astype(np.float32)
    bias = R.standard_normal(20).astype(np.float32)

    def f(a, b, bias):
        return jnp.tanh(jnp.einsum("bij,bjk->bik", a, b) + bias)

    got = np.asarray(kiln.jit(f)(a, b, bias))
    np.testing.assert_allclose(got, np.tanh(a @ b + bias), rtol=2e-5, atol=2e-5)
    assert len(_gemm_steps(f, a, b, bias)) == 1


def test_gradient_of_matmul_uses_blas():
    a = R.standard_normal((40, 50)).astype(np.float32)
    b = R.standard_normal((50, 30)).astype(np.float32)

    def loss(a, b):
        return jnp.sum(jnp.tanh(a @ b))

    ga, gb = kiln.jit(kiln.grad(loss, argnums=(0, 1)))(a, b)
    t = 1 - np.tanh(a @ b) ** 2
    np.testing.assert_allclose(np.asarray(ga), t @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(gb), a.T @ t, rtol=1e-4, atol=1e-4)
    assert len(_gemm_steps(kiln.grad(loss, argnums=(0, 1)), a, b)) == 3


def test_disable_blas_falls_back_to_reductions(monkeypatch):
    monkeypatch.setenv("KILN_DISABLE_BLAS", "1")
    a = R.standard_normal((64, 48)).astype(np.float32)
    b = R.standard_normal((48, 32)).astype(np.float32)
    assert not _gemm_steps(lambda a, b: a @ b, a, b)
    exe = cpu.executable_for(kiln.make_jaxpr(lambda a, b: a @ b)(a, b))
    np.testing.assert_allclose(np.asarray(exe([a, b])[0]), a @ b, rtol=1e-5, atol=1e-4)


def _driver():
    from kiln.compiler.build.build import load_library
    src = ("#include <stdint.h>\n" + blas.c_declarations(blas.blas_info()) +
           "void run(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,"
           " int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, float beta)"
           " { kiln_gemm_f32(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta); }\n")
    lib = load_library(src, name="blas_test")
    blas.init_library(lib, blas.blas_info())
    lib.run.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_int64] * 3 + [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
        ctypes.c_int64, ctypes.c_float]
    return lib


def _p(x):
    return x.ctypes.data_as(ctypes.c_void_p)


def test_c_wrapper_edge_cases():
    lib = _driver()
    a = R.standard_normal((5, 3)).astype(np.float32)
    b = R.standard_normal((3, 4)).astype(np.float32)
    c = np.full((5, 4), 7.0, np.float32)
    lib.run(0, 0, 5, 4, 3, _p(a), 3, _p(b), 4, _p(c), 4, 0.0)
    np.testing.assert_allclose(c, a @ b, rtol=1e-6, atol=1e-6)
    lib.run(0, 0, 5, 4, 3, _p(a), 3, _p(b), 4, _p(c), 4, 1.0)  # beta accumulates
    np.testing.assert_allclose(c, 2 * (a @ b), rtol=1e-6, atol=1e-6)
    c[:] = np.nan                                      # K == 0 with beta 0: zeros, NaN or not
    lib.run(0, 0, 5, 4, 0, _p(a), 1, _p(b), 4, _p(c), 4, 0.0)
    assert (c == 0).all()
    c[:] = 3.0
    lib.run(0, 0, 0, 4, 3, _p(a), 3, _p(b), 4, _p(c), 4, 0.0)  # M == 0: untouched
    assert (c == 3).all()
    # A sub-block of a larger matrix: leading dimensions are honoured.
    big = R.standard_normal((6, 10)).astype(np.float32)
    out = np.zeros((6, 8), np.float32)
    lib.run(0, 1, 6, 4, 5, _p(big), 10, _p(big[:4]), 10, _p(out), 8, 0.0)
    np.testing.assert_allclose(out[:, :4], big[:, :5] @ big[:4, :5].T, rtol=1e-5, atol=1e-5)
    assert (out[:, 4:] == 0).all()


def test_programs_call_the_glue_library_from_every_unit():
    """The GEMM wrappers are compiled once, in the ``kiln_blas`` glue library: a program
    holds only two pointers to them, and any of its translation units may call a GEMM."""
    from kiln.compiler.build import build
    from kiln.compiler.render.render_c import CRenderer
    ws = [R.standard_normal((48, 48)).astype(np.float32) for _ in range(16)]
    x = R.standard_normal((32, 48)).astype(np.float32)

    def f(x, ws):
        for w in ws:        # (enough code to be split: each step's sum is one fma)
            x = jnp.tanh(x @ w) * 0.5 + jnp.sin(x)
        return x

    text = kiln.jit(f).lower(x, ws).compile().as_text()
    assert "KILN_GEMM_BODY" not in text and "omp parallel for num_threads" not in text
    units = text.split(build.UNIT_MARK)
    if CRenderer.build_units > 1:
        assert len(units) == CRenderer.build_units + 1
        assert sum("kiln_gemm_f32(" in u for u in units[1:]) >= 2, "GEMMs in one unit only"
        assert sum("void kiln_blas_init" in u for u in units) == 1
    want = x.astype(np.float64)
    for w in ws:
        want = np.tanh(want @ w) * 0.5 + np.sin(want)
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x, ws)), want, rtol=2e-4, atol=2e-4)
    glue = blas.glue_library(blas.blas_info())
    assert glue is blas.glue_library(blas.blas_info())   # loaded once per process


def test_a_value_feeding_two_gemms_is_written_once():
    """An MLP's output cotangent feeds the weight gradient and the input gradient: one
    kernel writes it, both GEMMs read that buffer."""
    from kiln.compiler.lower.program import Kernel
    a = R.standard_normal((64, 48)).astype(np.float32)
    w1 = R.standard_normal((48, 40)).astype(np.float32)
    w2 = R.standard_normal((64, 40)).astype(np.float32)

    def f(a, w1, w2):
        h = a * 2.0 - 1.0          # cheap: stays lazy until a GEMM needs it stored
        return h @ w1, h.T @ w2

    exe = cpu.executable_for(kiln.make_jaxpr(f)(a, w1, w2))
    gemms = [s for s in exe.prog.steps if isinstance(s, Gemm)]
    kernels = [s for s in exe.prog.steps if isinstance(s, Kernel)]
    assert len(gemms) == 2 and len(kernels) == 1
    assert gemms[0].a is gemms[1].a is kernels[0].outs[0][0]
    p, q = kiln.jit(f)(a, w1, w2)
    h = a.astype(np.float64) * 2 - 1
    np.testing.assert_allclose(np.asarray(p), h @ w1, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(q), h.T @ w2, rtol=1e-4, atol=1e-4)
