"""Public JAX names and arguments kiln lacked (issue 26): ``lax.mul(out_dtype=)``,
``jnp.ravel_multi_index(dtype=)``, config flags, ``jax.default_device``,
``jax.transfer_guard``, ``checkpoint_policies``, ``fwd_and_bwd``, ``AccuracyMode``."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def test_mul_out_dtype():
    x = jnp.full(3, 100, jnp.int8)
    y = jnp.full(3, 3, jnp.int8)
    out = lax.mul(x, y, out_dtype=jnp.int32)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [300, 300, 300])
    assert lax.mul(x, jnp.full(3, 3, jnp.int16), out_dtype=jnp.int32).dtype == np.int32
    assert kiln.jit(lambda a, b: lax.mul(a, b, out_dtype=jnp.int32))(x, y).dtype == np.int32
    out = kiln.vmap(lambda a, b: lax.mul(a, b, out_dtype=jnp.int32))(
        jnp.full((2, 3), 100, jnp.int8), jnp.full((2, 3), 3, jnp.int16))
    np.testing.assert_array_equal(out, np.full((2, 3), 300))
    g = kiln.grad(lambda a: lax.mul(a, jnp.float32(2), out_dtype=jnp.float32))(jnp.float16(1))
    assert g.dtype == np.float16 and g == 2
    with pytest.raises(TypeError):
        lax.mul(x, jnp.ones(3, jnp.int16))    # mixed dtypes need out_dtype


def test_mul_out_dtype_matches_jax():
    jax = pytest.importorskip("jax")
    x, y = np.full(3, 100, np.int8), np.full(3, 3, np.int16)
    ref = jax.lax.mul(x, y, out_dtype=np.int32)
    out = lax.mul(x, y, out_dtype=np.int32)
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)


_A, _B = np.array([1, 2, 0], np.int8), np.array([3, 0, 1], np.int8)


def test_ravel_multi_index_dtype():
    assert jnp.ravel_multi_index((_A, _B), (3, 4)).dtype == np.int8
    out = jnp.ravel_multi_index((_A, _B), (3, 4), dtype=jnp.int16)
    assert out.dtype == np.int16
    np.testing.assert_array_equal(out, np.ravel_multi_index((_A, _B), (3, 4)))
    out = jnp.ravel_multi_index((_A, _B), (3, 4), order="F", dtype=np.uint8)
    np.testing.assert_array_equal(out, np.ravel_multi_index((_A, _B), (3, 4), order="F"))
    with pytest.raises(ValueError, match="not large enough"):
        jnp.ravel_multi_index((_A, _B), (300, 4))
    with pytest.raises(ValueError, match="not an integer type"):
        jnp.ravel_multi_index((_A, _B), (3, 4), dtype=float)
    with pytest.raises(ValueError, match="not an integer type"):   # float promotes: as JAX
        jnp.ravel_multi_index((_A.astype(float), _B), (3, 4))
    with pytest.raises(TypeError, match="only int indices"):
        jnp.ravel_multi_index((_A.astype(float), _B), (3, 4), dtype=np.int32)
    f = kiln.jit(lambda a, b: jnp.ravel_multi_index((a, b), (3, 4), mode="wrap",
                                                    dtype=jnp.int16))
    assert f(_A, _B).dtype == np.int16
    g = kiln.vmap(lambda a, b: jnp.ravel_multi_index((a, b), (3, 4), mode="clip",
                                                     dtype=jnp.int16))
    np.testing.assert_array_equal(g(_A, _B), np.ravel_multi_index((_A, _B), (3, 4)))
    np.testing.assert_array_equal(jnp.ravel_multi_index((_A, _B), (3, 4), mode="ignore"),
                                  np.ravel_multi_index((_A, _B), (3, 4)))


def test_ravel_multi_index_matches_jax():
    jax = pytest.importorskip("jax")
    for kw in ({}, {"dtype": np.int16}, {"order": "F"}):
        ref = jax.numpy.ravel_multi_index((_A, _B), (3, 4), **kw)
        out = jnp.ravel_multi_index((_A, _B), (3, 4), **kw)
        assert out.dtype == ref.dtype
        np.testing.assert_array_equal(out, ref)
