"""``jax_explicit_x64_dtypes`` (JAX's ``ExplicitX64Mode``): what an explicitly requested
64-bit dtype does while x64 is off — 'warn' (default: truncate with JAX's warning),
'error' (ValueError), 'allow' (respected: 64-bit arrays, kept by promotion and jit)."""
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln._src import config as src_config
from kiln._src import dtypes as src_dtypes


def test_default_warn_truncates_with_jax_warning():
    assert kiln.config.jax_explicit_x64_dtypes == "warn"
    assert src_config.explicit_x64_dtypes.value == src_config.ExplicitX64Mode.WARN
    with pytest.warns(UserWarning, match="Explicitly requested dtype int64 requested in "
                                         "zeros is not available"):
        assert jnp.zeros(2, np.int64).dtype == np.int32
    with pytest.warns(UserWarning, match="requested in dtype"):
        assert lax.dtype(np.float64) == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jnp.zeros(2, float).dtype == np.float32      # Python types: no warning
        assert lax.dtype(np.float32) == np.float32


def test_error_mode():
    with src_config.explicit_x64_dtypes(src_config.ExplicitX64Mode.ERROR):
        assert kiln.config.jax_explicit_x64_dtypes == "error"
        with pytest.raises(ValueError, match="Explicitly requested dtype int64 requested "
                                             "in dtype is not available"):
            src_dtypes.dtype(np.int64)
        with pytest.raises(ValueError, match="requested in array"):
            jnp.array(1, dtype=jnp.float64)
        assert src_dtypes.dtype(np.int16) == np.int16
    assert kiln.config.jax_explicit_x64_dtypes == "warn"


def test_allow_mode_arrays_promotion_jit():
    with src_config.explicit_x64_dtypes("allow"):
        assert src_dtypes.dtype(np.int64) == np.int64
        x = jnp.array(1, dtype=jnp.int64)
        assert x.dtype == np.int64
        assert jnp.array(1j, dtype=jnp.complex128).dtype == np.complex128
        assert jnp.zeros(2, np.float64).dtype == np.float64
        assert (x + 1).dtype == np.int64
        assert (jnp.ones(2, np.float32) + 1).dtype == np.float32
        y = kiln.jit(lambda v: v * 2)(x)
        assert y.dtype == np.int64 and int(y) == 2
        assert lax.convert_element_type(jnp.ones(2), np.float64).dtype == np.float64
        assert jnp.array(1).dtype == np.int32                # defaults stay 32-bit
    assert jnp.array(1.0).dtype == np.float32


def test_searchsorted_index_dtype_follows_mode():
    a = kiln.ShapeDtypeStruct((2 ** 31,), np.float32)
    v = kiln.ShapeDtypeStruct((), np.float32)
    assert kiln.eval_shape(jnp.searchsorted, kiln.ShapeDtypeStruct((5,), np.float32),
                           v).dtype == np.int32
    with pytest.warns(UserWarning, match="int64"), \
            pytest.raises(OverflowError, match="2147483648 out of bounds"):
        kiln.eval_shape(jnp.searchsorted, a, v)
    with src_config.explicit_x64_dtypes("allow"):
        assert kiln.eval_shape(jnp.searchsorted, a, v).dtype == np.int64


def test_python_scalar_types_to_dtypes():
    assert src_dtypes.python_scalar_types_to_dtypes[int] == np.dtype(np.int64)
    assert src_dtypes.python_scalar_types_to_dtypes[float] == np.dtype(np.float64)


def test_intenum_array_itemsize_none_lattice():
    import enum

    class E(enum.IntEnum):
        A = 42
    a = jnp.array(E.A)
    assert int(a) == 42 and a.dtype == np.int32 and a.weak_type
    assert int(jnp.int32(E.A)) == 42
    with pytest.raises(ValueError, match="dtype cannot be None"):
        kiln.dtypes.itemsize_bits(None)
    assert src_dtypes.lattice_result_type(1, 2.0) == (np.dtype(np.float32), True)
    assert src_dtypes.lattice_result_type(jnp.int8(1), 2) == (np.dtype(np.int8), False)
