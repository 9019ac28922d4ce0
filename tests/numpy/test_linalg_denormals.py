"""Linear-algebra impls see denormals flushed, as JAX's LAPACK calls under XLA's CPU
runtime (DAZ/FTZ): a float32 matrix whose last row was scaled by 1e-40 is singular to
them (JAX's ``x64_context_test.test_near_singular_inverse``)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.lax.linalg import _flush_denormals


@pytest.mark.parametrize("seed", [8, 9, 14])   # seeds that failed unflushed
@pytest.mark.parametrize("jit", [False, True])
def test_near_singular_float32_inverse_is_all_nonfinite(seed, jit):
    x = 3 * np.random.RandomState(seed).randn(5, 5)

    def inv(x=x):
        a = jnp.asarray(x).at[-1].mul(1e-40)
        return jnp.linalg.inv(a)

    f = kiln.jit(inv) if jit else inv
    with kiln.enable_x64(False):
        assert not np.isfinite(np.asarray(f())).any()
    with kiln.enable_x64(True):
        assert np.isfinite(np.asarray(f())).all()


def test_flush_denormals_keeps_sign_normals_and_other_dtypes():
    out = _flush_denormals(np.array([1e-40, -1e-40, 1e-30, 0.], np.float32))
    assert out.tolist() == [0., 0., np.float32(1e-30), 0.]
    assert np.signbit(out[1])
    c = _flush_denormals(np.array([1e-40 + 1j, 2 - 1e-40j], np.complex64))
    assert c.tolist() == [1j, 2 + 0j]
    assert _flush_denormals(np.array([1e-310]))[0] == 0.
    ints = np.array([1, 2], np.int32)
    assert _flush_denormals(ints) is ints
