"""``lax.dtype`` against JAX: values, types and names, the truncation warning, errors, and
use on tracers under jit/grad/vmap."""
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

jax = pytest.importorskip("jax")

CASES = [1.0, 1, True, 1j, np.float16(1), np.ones(2, np.int8), np.ones(2), np.int64(3),
         "float32", "bfloat16", np.dtype("uint8"), float, int, bool, complex, np.float32]


@pytest.mark.parametrize("x", CASES, ids=repr)
def test_matches_jax(x):
    assert lax.dtype(x) == jax.lax.dtype(x)


@pytest.mark.parametrize("x", [np.float64, "int64", np.dtype("complex128")], ids=repr)
def test_explicit_64_bit_types_warn_as_jax(x):
    with pytest.warns(UserWarning, match="Explicitly requested dtype .* truncated") as k:
        got = lax.dtype(x)
    with warnings.catch_warnings(record=True) as j:
        warnings.simplefilter("always")
        want = jax.lax.dtype(x)
    assert got == want and str(k[0].message) == str(j[0].message)


def test_arrays_keep_their_dtype_and_errors():
    assert lax.dtype(jnp.ones(2, jnp.bfloat16)) == jnp.bfloat16
    assert lax.dtype(kiln.random.key(0)) == kiln.random.key(0).dtype
    with pytest.raises(ValueError, match="Invalid argument to dtype: None"):
        lax.dtype(None)
    with pytest.raises(TypeError, match="not a valid JAX array type"):
        lax.dtype("U5")
    with pytest.raises(TypeError, match="not a valid JAX array type"):
        jax.lax.dtype("U5")


def test_under_transformations():
    def eps(x):
        return x * jnp.finfo(lax.dtype(x)).eps
    assert float(kiln.jit(eps)(2.0)) == float(jax.jit(lambda x: x * jax.numpy.finfo(
        jax.lax.dtype(x)).eps)(2.0))
    assert float(kiln.grad(eps)(1.0)) == np.finfo(np.float32).eps
    assert kiln.vmap(lambda x: jnp.zeros((), lax.dtype(x)))(jnp.ones(3, jnp.int8)).dtype \
        == np.int8
