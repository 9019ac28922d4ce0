"""kiln's own AVX2+FMA float32 GEMM (kiln/compiler/csrc/kiln_sgemm_avx2.h) against the
``scipy-openblas32`` wheel's Haswell sgemm, bit for bit.

Run in a child process built for AVX2 (``KILN_CFLAGS=-O3 -march=haswell``) with the
wheel forced onto its Haswell kernels (``OPENBLAS_CORETYPE=Haswell``), so it runs on any
AVX2 processor, AVX-512 ones included. The shapes cover the blocking the kernel copies:
K in one, two (777 -> 320 + 232 + 225) and more K blocks, column blocks (N > 320 -> two
halves rounded to 8; N > 640 -> 320 first), the first column block's 12- and 4-row calls
against the others' 12/8/4/2/1 rows, the two-accumulator 8-column chunks (row tails of
4 and 8, odd and even numbers of chunks), column tails, both transposes and beta; and
the glue's two-thread split, whose blocks are sub-blocks of the whole call (its bits on
any number of threads).
"""
import json
import os
import subprocess
import sys

import pytest


def _avx2_fma() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return {"avx2", "fma"} <= set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return False


def _wheel() -> bool:
    import importlib.util
    return (importlib.util.find_spec("scipy_openblas32") is not None
            and os.environ.get("KILN_BLAS", "").strip().lower() != "scipy")


_CHILD = r'''
import ctypes, json, sys
import numpy as np
from kiln.compiler.build import blas
info = blas.blas_info()
glue = blas.glue_library(info)
glue.kiln_gemm_f32.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_int64] * 3 + [
    ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
    ctypes.c_int64, ctypes.c_float]
glue.kiln_blas_init.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3
R = np.random.default_rng(3)
out = {"kind": blas.own_sgemm_kind(), "corename": blas.wheel_corename(),
       "active": blas.own_sgemm_active(), "single": {}, "split": {}, "shared": {}}
glue.kiln_blas_split_shared_b_runs.restype = ctypes.c_long

def run(own, threads, split, ta, tb, a, b, c, beta, m, n, k):
    glue.kiln_blas_init(info.sgemm, info.dgemm, None, threads, own, split)
    glue.kiln_gemm_f32(ta, tb, m, n, k, a.ctypes.data, a.strides[0] // 4, b.ctypes.data,
                       b.strides[0] // 4, c.ctypes.data, c.strides[0] // 4, beta)
    return c

def case(m, n, k, ta, tb, beta):
    a = R.standard_normal((k, m + 3) if ta else (m, k + 5), dtype=np.float32)
    b = R.standard_normal((n, k + 2) if tb else (k, n + 7), dtype=np.float32)
    c0 = R.standard_normal((m, n + 4), dtype=np.float32)
    return a, b, c0

def differ(x, y):
    return int((x.view(np.int32) != y.view(np.int32)).sum())

for shape in json.loads(sys.argv[1]):
    m, n, k, ta, tb, beta = shape
    a, b, c0 = case(*shape)
    x = run(0, 1, 0, ta, tb, a, b, c0.copy(), beta, m, n, k)
    y = run(1, 1, 0, ta, tb, a, b, c0.copy(), beta, m, n, k)
    ref = (a[:, :m].T if ta else a[:, :k]).astype(np.float64) @ (b[:, :k].T if tb else b[:, :n])
    ref = ref + beta * c0[:, :n]
    ok = bool(np.allclose(y[:, :n], ref, rtol=1e-4, atol=1e-3)
              and np.array_equal(y[:, n:].view(np.int32), c0[:, n:].view(np.int32)))
    out["single"][str(shape)] = [differ(x, y), ok]
for shape in json.loads(sys.argv[2]):
    m, n, k, ta, tb, beta = shape
    a, b, c0 = case(*shape)
    x = run(0, 1, 0, ta, tb, a, b, c0.copy(), beta, m, n, k)     # one BLAS call
    shared0 = glue.kiln_blas_split_shared_b_runs()
    y = run(1, 2, 1, ta, tb, a, b, c0.copy(), beta, m, n, k)     # own, claimed blocks
    shared = glue.kiln_blas_split_shared_b_runs() - shared0
    z = run(1, 2, 0, ta, tb, a, b, c0.copy(), beta, m, n, k)     # own, OpenMP blocks
    glue.kiln_blas_split_share_b(0)                              # each row block packs B
    u = run(1, 2, 1, ta, tb, a, b, c0.copy(), beta, m, n, k)
    glue.kiln_blas_split_share_b(1)
    v = run(1, 2, 2, ta, tb, a, b, c0.copy(), beta, m, n, k)     # on the OpenMP worker
    out["split"][str(shape)] = [differ(x, y), differ(x, z), differ(x, u), differ(x, v)]
    out["shared"][str(shape)] = shared
runs, helped = ctypes.c_long(), ctypes.c_long()
glue.kiln_blas_split_stats(ctypes.byref(runs), ctypes.byref(helped))
out["split_runs"] = runs.value
print(json.dumps(out))
'''

# (M, N, K, transA, transB, beta)
SINGLE = [(128, 256, 784, 0, 0, 0.0), (128, 512, 784, 0, 0, 0.0), (392, 512, 128, 1, 0, 0.0),
          (128, 256, 512, 0, 1, 0.5), (20, 100, 777, 0, 1, 1.0), (21, 80, 700, 1, 0, 0.0),
          (100, 130, 333, 1, 1, 0.0), (40, 136, 1500, 0, 0, 1.0), (29, 333, 650, 0, 0, 0.0),
          (23, 700, 333, 0, 0, 0.5), (59, 200, 90, 1, 1, 0.0), (1030, 72, 400, 0, 0, 0.0)]
SPLIT = [(128, 512, 784, 0, 0, 0.0), (784, 512, 128, 1, 0, 0.0), (128, 512, 512, 0, 1, 1.0),
         (333, 130, 700, 1, 1, 0.0), (700, 650, 200, 0, 0, 0.5), (400, 333, 700, 1, 1, 1.0)]
# Row blocks (M >= N) share one packing of op(B): column blocks of 320 and the rest, K
# blocks, 64-column packing units and column tails.
ROWS = {(784, 512, 128, 1, 0, 0.0), (333, 130, 700, 1, 1, 0.0), (700, 650, 200, 0, 0, 0.5),
        (400, 333, 700, 1, 1, 1.0)}


@pytest.fixture(scope="module")
def child():
    if not _avx2_fma():
        pytest.skip("no AVX2+FMA")
    if not _wheel():
        pytest.skip("the scipy-openblas32 wheel is not the BLAS")
    env = dict(os.environ, KILN_CFLAGS="-O3 -march=haswell", OPENBLAS_CORETYPE="Haswell",
               KILN_OWN_SGEMM="1")
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(SINGLE), json.dumps(SPLIT)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_child_runs_the_avx2_kernel_against_haswell(child):
    assert child["kind"] == 256 and child["corename"] == "haswell" and child["active"]


@pytest.mark.parametrize("shape", SINGLE, ids=lambda s: "x".join(map(str, s)))
def test_avx2_kernel_has_the_wheels_haswell_bits(child, shape):
    bad, close = child["single"][str(list(shape))]
    assert bad == 0, f"{bad} elements differ from the wheel's Haswell sgemm"
    assert close                          # and it is the product, C's padding untouched


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="one CPU: nothing is split")
@pytest.mark.parametrize("shape", SPLIT, ids=lambda s: "x".join(map(str, s)))
def test_avx2_split_has_the_bits_of_one_call(child, shape):
    """On two threads (the claimed blocks with one packing of B shared by the row
    blocks or one per block, on the helper or the OpenMP worker, or OpenMP's blocks with
    KILN_GEMM_SPLIT=0) the product has the bits of one call on all of it: those of one
    thread."""
    assert child["split"][str(list(shape))] == [0, 0, 0, 0]
    assert child["split_runs"] == 3 * len(SPLIT)       # each one split, not OpenMP
    assert child["shared"][str(list(shape))] == (1 if tuple(shape) in ROWS else 0)


def test_auto_enables_the_avx2_kernel_only_on_haswell_bits(monkeypatch):
    """Unset KILN_OWN_SGEMM: on with an AVX2 glue where the wheel runs Haswell kernels,
    off where it runs others (its SkylakeX kernels have other bits)."""
    from kiln.compiler.build import blas
    monkeypatch.delenv("KILN_OWN_SGEMM", raising=False)
    corename = blas.wheel_corename()
    assert blas.own_sgemm_enabled(256) == (corename == "haswell")
    assert blas.own_sgemm_enabled(0) is False
