"""DLPack export of kiln arrays, read-only ones included, as JAX exports its arrays."""
import gc

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


class _Legacy:
    """A pre-1.0 DLPack consumer's view of an exporter: hands NumPy a given capsule."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kw):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


CASES = {
    "broadcast zeros (read-only)": lambda: jnp.zeros((2,), bool),
    "strided reversed view": lambda: jnp.arange(12.0).reshape(3, 4)[::-1, ::2],
    "computed": lambda: jnp.arange(5) * 3,
    "jit output": lambda: kiln.jit(lambda x: x + 1)(jnp.arange(6.0).reshape(2, 3)),
    "empty": lambda: jnp.zeros((0, 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_legacy_export_without_copy(name):
    x = CASES[name]()
    want = np.array(x)
    capsule = x.__dlpack__(copy=False)        # raised BufferError for read-only arrays
    assert "dltensor" in repr(capsule)
    got = np.from_dlpack(_Legacy(capsule))
    if want.size:
        assert got.ctypes.data == np.asarray(x).ctypes.data   # the buffer itself
    del x, capsule
    gc.collect()                               # the export keeps the buffer alive
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_from_dlpack_is_read_only(name):
    x = CASES[name]()
    got = np.from_dlpack(x)
    np.testing.assert_array_equal(got, np.array(x))
    assert not got.flags.writeable            # as for a JAX array
    np.testing.assert_array_equal(np.from_dlpack(x, copy=False), np.array(x))
    assert np.from_dlpack(x, copy=True).flags.writeable


def test_round_trip_and_other_requests():
    x = jnp.zeros((2, 3), jnp.int8)
    assert "dltensor_versioned" in repr(x.__dlpack__(max_version=(1, 0), copy=False))
    assert "dltensor" in repr(x.__dlpack__())
    y = jnp.from_dlpack(x)
    assert y.dtype == jnp.int8 and y.shape == (2, 3)


def test_matches_jax():
    jax = pytest.importorskip("jax")
    a = jax.numpy.zeros((2,), bool)
    k = jnp.zeros((2,), bool)
    for arr in (a, k):
        arr.__dlpack__(copy=False)
        assert not np.from_dlpack(arr).flags.writeable
    np.testing.assert_array_equal(np.from_dlpack(a), np.from_dlpack(k))
