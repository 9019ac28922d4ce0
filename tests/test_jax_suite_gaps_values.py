"""Values JAX's own test suite checks that kiln got wrong (issue 26): ``ldexp`` at float32
extremes, ``jnp.array`` copies under ``jvp``, ``grad`` of a batched ``cond``."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp

_XS = np.array([1e-30, 3.4e38, 1.0, -2.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 1.2e-38, 7.0,
                1e30, -3e-20], np.float32)
_ES = np.array([200, -10, 127, 128, -149, -150, 5, -5, 3, 149, 250, -300, -200, -120, 60],
               np.int32)


def test_ldexp_extremes_match_numpy():
    out = np.asarray(jnp.ldexp(_XS[:, None], _ES[None, :]))
    with np.errstate(over="ignore"):
        ref = np.ldexp(_XS[:, None], _ES[None, :])
    normal = (np.abs(ref) >= np.finfo(np.float32).tiny) | (ref == 0) | ~np.isfinite(ref)
    np.testing.assert_array_equal(out[normal], ref[normal])
    assert np.isfinite(jnp.ldexp(np.float32(1e-30), np.int32(200)))
    assert jnp.ldexp(np.float32(3.4e38), np.int32(-10)) == np.ldexp(np.float32(3.4e38), -10)
    assert jnp.ldexp(np.float32(1e30), np.int32(-200)) == np.ldexp(np.float32(1e30), -200)
    np.testing.assert_array_equal(kiln.jit(jnp.ldexp)(_XS, _ES[:13]), jnp.ldexp(_XS, _ES[:13]))
    np.testing.assert_array_equal(kiln.vmap(jnp.ldexp)(_XS, _ES[:13]), jnp.ldexp(_XS, _ES[:13]))
    assert kiln.grad(lambda x: jnp.ldexp(x, 3))(2.0) == 8.0
    with pytest.raises(ValueError, match="ldexp not supported"):
        jnp.ldexp(1.0, 2.0)


def test_ldexp_matches_jax():
    jax = pytest.importorskip("jax")
    ref = np.asarray(jax.numpy.ldexp(_XS[:, None], _ES[None, :]))
    out = np.asarray(jnp.ldexp(_XS[:, None], _ES[None, :]))
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))
