"""Conversions to float of bools and of small unsigned integers render as code gcc
vectorizes (``c_expr._convert``): a bool as a select of 1 and 0 (gcc 12 left a loop
storing a compare's result and its float conversion scalar: mnist_vae's 10000x784
Bernoulli sample at 18 ns an element), uint8/uint16 through int32. Same values."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu
from kiln.config import config

pytestmark = pytest.mark.skipif(config.kiln_backend == "reference",
                                reason="compiled-backend rendering")

R = np.random.default_rng(9)


def _compiled(f, *args):
    exe = cpu.compile_closed(kiln.make_jaxpr(f)(*args), "jit")
    return exe, [np.asarray(o) for o in exe([np.asarray(a) for a in args])]


def test_bool_and_its_float_copy():
    x = R.random(5000).astype(np.float32)
    u = R.random(5000).astype(np.float32)

    def f(x, u):
        b = u < x
        return b, b.astype(jnp.float32)

    exe, (b, f32) = _compiled(f, x, u)
    want = u < x
    np.testing.assert_array_equal(b, want)
    np.testing.assert_array_equal(f32, want.astype(np.float32))
    assert f32.dtype == np.float32
    assert "? (0x1.0000000000000p+0f) : (0x0.0p+0f))" in exe.source


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_small_unsigned_to_float(dtype):
    x = np.arange(np.iinfo(dtype).max + 1, dtype=dtype)
    exe, (y,) = _compiled(lambda x: x.astype(jnp.float32) * 0.5, x)
    np.testing.assert_array_equal(y, x.astype(np.float32) * np.float32(0.5))
    assert "(float)((int32_t)(" in exe.source


def test_uint32_to_float_unchanged():
    x = np.array([0, 1, 2**24 + 1, 2**31, 2**32 - 1], np.uint32)
    exe, (y,) = _compiled(lambda x: x.astype(jnp.float32), x)
    np.testing.assert_array_equal(y, x.astype(np.float32))
    assert "(int32_t)(" not in exe.source.split("void seg0")[1]
