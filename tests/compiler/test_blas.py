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
        # (enough code to be split: each step's sum is one fma; the scales differ, so
        # no two layers' kernels are the same C, which the renderer would compile once)
        for i, w in enumerate(ws):
            x = jnp.tanh(x @ w) * (0.5 + i / 1024) + jnp.sin(x)
        return x

    text = kiln.jit(f).lower(x, ws).compile().as_text()
    assert "KILN_GEMM_BODY" not in text and "omp parallel for num_threads" not in text
    units = text.split(build.UNIT_MARK)
    if CRenderer.build_units > 1:
        assert len(units) == CRenderer.build_units + 1
        assert sum("kiln_gemm_f32(" in u for u in units[1:]) >= 2, "GEMMs in one unit only"
        assert sum("void kiln_blas_init" in u for u in units) == 1
    want = x.astype(np.float64)
    for i, w in enumerate(ws):
        want = np.tanh(want @ w) * (0.5 + i / 1024) + np.sin(want)
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


def test_a_batch_of_small_products_runs_its_products_in_parallel():
    """Attention's per-head products (each below the glue's split size, so one
    single-threaded BLAS call each) run side by side over the batch, shared by work
    stealing; large single
    products stay a serial loop (the glue splits each over the threads), and the bits
    are those of each product computed alone."""
    from kiln.compiler.render.render_c import CRenderer
    assert CRenderer.gemm_split_min_macs == blas.PARALLEL_MIN_MACS
    q = R.standard_normal((16, 128, 64)).astype(np.float32)
    k = R.standard_normal((16, 128, 64)).astype(np.float32)

    def f(q, k):
        return jnp.einsum("bqd,bkd->bqk", q, k)

    text = kiln.jit(f).lower(q, k).compile().as_text()
    # Shared by work stealing (csrc/steal.h): a late thread holds up none of them.
    assert "kiln_steal_init(kiln_rg, kiln_nt, 16);" in text
    call = next(ln for ln in text.splitlines() if "kiln_gemm_f32(" in ln)
    assert "(bt = kiln_steal_next(kiln_rg, kiln_t, kiln_nt)) >= 0" in call
    got = np.asarray(kiln.jit(f)(q, k))
    for b in range(16):
        one = np.asarray(kiln.jit(lambda q, k: q @ k.T)(q[b], k[b]))
        np.testing.assert_array_equal(got[b], one)
    big = R.standard_normal((2, 256, 256)).astype(np.float32)
    text = kiln.jit(lambda a: a @ a).lower(big).compile().as_text()
    lines = text.splitlines()
    i = next(j for j, ln in enumerate(lines) if "bt < 2" in ln)
    assert "omp parallel for" not in lines[i - 1]


def test_packed_operands_keep_their_source_layout_and_are_written_once():
    """Attention's keys, [b, t, h, d] slices of a computed qkv viewed as [b, h, t, d] and
    contracted over d, are packed as [b, h, t, d] (the packing kernel reads d
    contiguously) and passed with the transpose flag; queries and keys are packed once
    for the forward and backward products that share them."""
    from kiln.compiler.lower.program import Kernel
    B, T, H, D = 2, 32, 2, 16
    x = R.standard_normal((B, T, H * D)).astype(np.float32)
    w = R.standard_normal((H * D, 2 * H * D)).astype(np.float32)

    def f(x, w):
        qk = x @ w + 1.0
        q, k = (a.reshape(B, T, H, D).transpose(0, 2, 1, 3) for a in jnp.split(qk, 2, -1))
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        return s, jnp.einsum("bhqk,bhkd->bhqd", s, k)

    exe = cpu.executable_for(kiln.make_jaxpr(f)(x, w))
    gemms = [s for s in exe.prog.steps if isinstance(s, Gemm)]
    kernels = [s for s in exe.prog.steps if isinstance(s, Kernel)]
    assert len(gemms) == 3
    scores = next(g for g in gemms if g.k == D and g.n == T)
    assert scores.trans_b and not scores.trans_a
    assert gemms[2].b is scores.b          # the keys' pack, read by both products
    assert sum(k.shape == (B, H, T, D) for k in kernels) <= 2
    s, o = kiln.jit(f)(x, w)
    qk = x.astype(np.float64) @ w + 1.0
    q, k = (a.reshape(B, T, H, D).transpose(0, 2, 1, 3) for a in np.split(qk, 2, -1))
    s64 = q @ k.transpose(0, 1, 3, 2)
    np.testing.assert_allclose(np.asarray(s), s64, rtol=1e-4, atol=1e-4)
    o64 = s64 @ k
    np.testing.assert_allclose(np.asarray(o), o64, rtol=1e-4, atol=1e-5 * np.abs(o64).max())


def test_heads_of_stored_arrays_are_read_in_place():
    """Products batched over (b, h) of stored [b, t, h, d] arrays (``dot_product_attention``'s
    layout) read each head's matrix in place (``Gemm.a_view``/``b_view``: leading
    dimension h*d, batch offsets) instead of packing a transposed copy; each head's result
    has the bits of that head's product computed from contiguous copies."""
    from kiln.compiler.lower.program import Kernel
    B, T, H, D = 2, 48, 3, 32
    q, k, v = (R.standard_normal((B, T, H, D)).astype(np.float32) for _ in range(3))

    def f(q, k, v):
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k)          # NT, both strided
        o = jnp.einsum("bhqk,bkhd->bhqd", s, v)          # strided right operand
        g = jnp.einsum("bqhd,bqhe->bhde", q, v)          # TN: left operand transposed
        return s, o, g

    exe = cpu.executable_for(kiln.make_jaxpr(f)(q, k, v))
    gemms = [s for s in exe.prog.steps if isinstance(s, Gemm)]
    assert len(gemms) == 3 and not [s for s in exe.prog.steps if isinstance(s, Kernel)]
    assert gemms[0].a_view == (H * D, ((B, T * H * D), (H, D))) and not gemms[0].trans_a
    assert gemms[0].b_view == gemms[0].a_view and gemms[0].trans_b
    assert gemms[2].trans_a and gemms[2].a_view == gemms[0].a_view
    s, o, g = (np.asarray(x) for x in kiln.jit(f)(q, k, v))
    mm = kiln.jit(lambda a, b: a @ b)
    for b in range(B):
        for h in range(H):
            qh, kh, vh = (np.ascontiguousarray(x[b, :, h]) for x in (q, k, v))
            np.testing.assert_array_equal(s[b, h], np.asarray(mm(qh, np.ascontiguousarray(kh.T))))
            np.testing.assert_array_equal(o[b, h], np.asarray(mm(np.ascontiguousarray(s[b, h]), vh)))
            np.testing.assert_array_equal(g[b, h], np.asarray(mm(np.ascontiguousarray(qh.T), vh)))
