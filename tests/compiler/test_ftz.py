"""Compiled programs run with denormals flushed, as XLA's CPU runtime (DAZ and FTZ in
MXCSR, set by each segment on the calling thread and by each parallel region on its
threads, the caller's bits given back after): subnormal results are zero, subnormal
operands read as zero. NumPy code around kiln keeps gradual underflow. JAX's bits:
tests/parity/test_ftz_parity.py."""
import platform

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.backends import cpu

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64", "i686"),
                                reason="MXCSR is x86's")


def _compiled(f, *args):
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    assert exe is not None
    return [np.asarray(o) for o in exe([np.asarray(a) for a in args])]


def test_subnormal_results_flush_to_zero():
    x = np.array([1e-38, -1e-38, 3e-38, 1.0], np.float32)
    (got,) = _compiled(lambda x: x * 0.5, x)
    np.testing.assert_array_equal(got, np.array([0, -0.0, 1.5e-38, 0.5], np.float32))
    assert np.signbit(got[1])
    assert np.float32(1e-38) * np.float32(0.5) == np.float32(5e-39)    # NumPy unaffected


def test_subnormal_operands_read_as_zero():
    s = np.array([1e-40, -1e-40, 1e-45], np.float32)
    (a, b, c) = _compiled(lambda x: (x * 1e10, x > 0, knp.exp(x) - 1.0), s)
    np.testing.assert_array_equal(a, np.zeros(3, np.float32))
    assert not b.any()
    np.testing.assert_array_equal(c, np.zeros(3, np.float32))


def test_float64_and_reductions():
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    try:
        x = np.full(1000, 1e-310)
        (m, s) = _compiled(lambda x: (x * 1e300, x.sum()), x)
    finally:
        kiln.config.update("jax_enable_x64", old)
    np.testing.assert_array_equal(m, np.zeros(1000))
    assert s == 0.0 and x.sum() > 0


def test_parallel_loops_flush_on_every_thread():
    x = np.full(1 << 21, 1e-40, np.float32)
    (got,) = _compiled(lambda x: x * 2.0, x)
    assert not got.any()
    assert (x * np.float32(2) > 0).all()                                  # NumPy unaffected


def test_generated_code_sets_and_restores_the_bits():
    text = kiln.jit(lambda x: x * 0.5).lower(np.ones(1 << 21, np.float32)).compile().as_text()
    assert "kiln_ftz_enter()" in text and "kiln_ftz_leave(kiln_csr)" in text
    assert "reduction(kiln_ftz:kiln_ftz_tok)" in text
