"""The glue's two-thread GEMM split (kiln/compiler/csrc/gemm_split.h): the calling thread
and one helper thread take blocks of a product (finer blocks on kiln's own kernel, the
OpenMP halves on the BLAS: float64, and float32 products the own kernel leaves); same
bits as the OpenMP halves, safe with concurrent callers and after fork; with
KILN_GEMM_SPLIT=2 the kernels' OpenMP worker claims the blocks instead of the helper."""
import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from kiln.compiler.build import blas

R = np.random.default_rng(11)


def _glue():
    info = blas.blas_info()
    glue = blas.glue_library(info)
    glue.kiln_gemm_f32.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_int64] * 3 + [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
        ctypes.c_int64, ctypes.c_float]
    glue.kiln_gemm_f64.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_int64] * 3 + [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
        ctypes.c_int64, ctypes.c_double]
    glue.kiln_blas_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return info, glue


@pytest.fixture
def glue():
    """(glue, set_split); the glue's settings are put back afterwards."""
    info, lib = _glue()
    own = int(blas.own_sgemm_active())

    def set_split(on, threads=2):
        lib.kiln_blas_init(info.sgemm, info.dgemm, info.set_threads_local or None,
                           threads, own, int(on))

    yield lib, set_split
    set_split(blas.split_mode(), info.max_threads)


def _split_runs(lib):
    fn = getattr(lib, "kiln_blas_split_stats", None)
    if fn is None:                           # not built here (no own kernel / not Linux)
        return 0
    runs, helped = ctypes.c_long(), ctypes.c_long()
    fn(ctypes.byref(runs), ctypes.byref(helped))
    return runs.value


def _call(lib, dtype, ta, tb, a, b, m, n, k, c=None, beta=0.0):
    c = np.empty((m, n), dtype) if c is None else c
    fn = lib.kiln_gemm_f32 if dtype == np.float32 else lib.kiln_gemm_f64
    fn(ta, tb, m, n, k, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], c.ctypes.data,
       c.shape[1], beta)
    return c


# Large enough to split (>= 2^22 multiply-adds): column blocks (M < N, with N not a
# multiple of the 32-column panels), row blocks (M >= N; two of them at >= 2^27), transposed
# operands, and f64.
CASES = [(128, 500, 784, 0, 0, np.float32), (784, 512, 128, 1, 0, np.float32),
         (96, 1000, 300, 0, 1, np.float32), (700, 90, 400, 1, 1, np.float32),
         (1024, 512, 300, 0, 0, np.float32), (300, 260, 200, 0, 0, np.float64),
         (40, 1000, 2000, 0, 1, np.float32)]       # K > 800 transposed: BLAS halves


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="one CPU: nothing is split")
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + c[5].__name__)
def test_split_matches_the_openmp_halves_bit_for_bit(glue, case):
    lib, set_split = glue
    m, n, k, ta, tb, dt = case
    a = R.standard_normal((k, m) if ta else (m, k)).astype(dt)
    b = R.standard_normal((n, k) if tb else (k, n)).astype(dt)
    c0 = R.standard_normal((m, n)).astype(dt)
    outs = []
    runs0 = _split_runs(lib)
    for split in (0, 1, 1, 2):               # the second split call reuses the helper
        set_split(split)
        outs.append((_call(lib, dt, ta, tb, a, b, m, n, k),
                     _call(lib, dt, ta, tb, a, b, m, n, k, c0.copy(), 1.0)))
    if blas.own_sgemm_active() and sys.platform.startswith("linux"):
        assert _split_runs(lib) == runs0 + 6     # two calls per split setting
    else:                                        # not built here: the OpenMP halves
        assert _split_runs(lib) == runs0
    for got in outs[1:]:
        for x, y in zip(got, outs[0]):
            assert np.array_equal(x.view(np.uint8), y.view(np.uint8))
    ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b)
    np.testing.assert_allclose(outs[1][0], ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(outs[1][1], ref + c0, rtol=1e-4, atol=1e-3)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="one CPU: nothing is split")
def test_split_on_the_openmp_worker(glue):
    """KILN_GEMM_SPLIT=2: the blocks are claimed by the caller and the kernels' OpenMP
    worker (not the helper thread), with the same bits."""
    lib, set_split = glue
    if not (blas.own_sgemm_active() and sys.platform.startswith("linux")):
        pytest.skip("no claimed split here (no own kernel / not Linux)")
    lib.kiln_blas_split_omp_blocks.restype = ctypes.c_long
    m, n, k = 1024, 512, 200
    a = R.standard_normal((m, k), dtype=np.float32)
    b = R.standard_normal((k, n), dtype=np.float32)
    set_split(1)
    want = _call(lib, np.float32, 0, 0, a, b, m, n, k)
    omp0 = lib.kiln_blas_split_omp_blocks()
    assert lib.kiln_blas_split_omp_blocks() == omp0      # the helper's blocks not counted
    set_split(2)
    for _ in range(30):
        assert np.array_equal(_call(lib, np.float32, 0, 0, a, b, m, n, k), want)
    assert lib.kiln_blas_split_omp_blocks() > omp0


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="one CPU: nothing is split")
@pytest.mark.parametrize("case", [(784, 512, 128, 1, 0), (700, 90, 400, 1, 1),
                                  (1024, 600, 200, 0, 0), (520, 300, 640, 0, 1)],
                         ids=lambda c: "x".join(map(str, c)))
def test_row_blocks_share_one_packing_of_b(glue, case):
    """Row blocks on kiln's kernel pack op(B) once for the product (both threads take
    packing units, then row blocks) instead of once per block: same bits, on the helper
    and on the OpenMP worker."""
    lib, set_split = glue
    if not (blas.own_sgemm_active() and sys.platform.startswith("linux")):
        pytest.skip("no claimed split here (no own kernel / not Linux)")
    lib.kiln_blas_split_shared_b_runs.restype = ctypes.c_long
    m, n, k, ta, tb = case
    a = R.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = R.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c0 = R.standard_normal((m, n)).astype(np.float32)
    set_split(0)
    want = _call(lib, np.float32, ta, tb, a, b, m, n, k, c0.copy(), 0.5)
    try:
        for share, split in ((0, 1), (1, 1), (1, 2)):
            lib.kiln_blas_split_share_b(share)
            set_split(split)
            runs0 = lib.kiln_blas_split_shared_b_runs()
            got = _call(lib, np.float32, ta, tb, a, b, m, n, k, c0.copy(), 0.5)
            assert lib.kiln_blas_split_shared_b_runs() == runs0 + share
            assert np.array_equal(got.view(np.int32), want.view(np.int32))
    finally:
        lib.kiln_blas_split_share_b(1)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="one CPU: nothing is split")
def test_products_wait_for_a_late_helper(glue):
    """The helper thread, woken for one product but given a core only after the caller
    finished it alone, may claim a block of the next product, which then waits for it
    too, also when that product's second thread is the OpenMP worker
    (KILN_GEMM_SPLIT=2: the region's end alone returned while the helper still wrote
    rows). Products in both modes in turn while another process holds a core."""
    lib, set_split = glue
    if not (blas.own_sgemm_active() and sys.platform.startswith("linux")):
        pytest.skip("no claimed split here (no own kernel / not Linux)")
    m, n, k = 1024, 600, 200
    a = R.standard_normal((m, k)).astype(np.float32)
    b = R.standard_normal((k, n)).astype(np.float32)
    set_split(0)
    want = _call(lib, np.float32, 0, 0, a, b, m, n, k)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    bad = []
    try:
        for i in range(400):
            for share, split in ((0, 1), (1, 1), (1, 2)):
                lib.kiln_blas_split_share_b(share)
                set_split(split)
                got = _call(lib, np.float32, 0, 0, a, b, m, n, k)
                if not np.array_equal(got.view(np.int32), want.view(np.int32)):
                    bad.append((i, share, split))
    finally:
        lib.kiln_blas_split_share_b(1)
        hog.kill()
        hog.wait()
    assert not bad


def test_split_mode_setting(monkeypatch):
    """KILN_GEMM_SPLIT is 0, 1 (default) or 2; anything else is an error."""
    for value, want in (("0", 0), ("1", 1), ("2", 2), ("", 1)):
        monkeypatch.setenv("KILN_GEMM_SPLIT", value)
        assert blas.split_mode() == want
    monkeypatch.delenv("KILN_GEMM_SPLIT")
    assert blas.split_mode() == 1
    monkeypatch.setenv("KILN_GEMM_SPLIT", "3")
    with pytest.raises(ValueError, match="KILN_GEMM_SPLIT"):
        blas.split_mode()


def test_concurrent_callers_get_their_own_products(glue):
    """Products from several threads at once: one holds the helper, the others split
    with OpenMP; each gets its own result."""
    lib, set_split = glue
    set_split(1)
    m, n, k = 128, 512, 256
    a = [R.standard_normal((m, k), dtype=np.float32) for _ in range(4)]
    b = R.standard_normal((k, n), dtype=np.float32)
    want = [_call(lib, np.float32, 0, 0, x, b, m, n, k) for x in a]
    errors = []

    def work(i):
        for _ in range(20):
            got = _call(lib, np.float32, 0, 0, a[i], b, m, n, k)
            if not np.array_equal(got, want[i]):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_split_products_after_fork():
    """The helper thread does not survive fork; a forked child starts its own."""
    code = (
        "import os, numpy as np, kiln, kiln.numpy as jnp\n"
        "f = kiln.jit(lambda a, b: a @ b)\n"
        "a = np.random.default_rng(0).standard_normal((128, 784), dtype=np.float32)\n"
        "b = np.random.default_rng(1).standard_normal((784, 512), dtype=np.float32)\n"
        "want = np.asarray(f(a, b))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    ok = all(np.array_equal(np.asarray(f(a, b)), want) for _ in range(5))\n"
        "    os._exit(0 if ok else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, KILN_GEMM_SPLIT="1"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0"
