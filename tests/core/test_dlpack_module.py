"""``kiln.dlpack`` (``jax.dlpack``): from_dlpack's sharing/copy rules, devices, errors."""
import gc
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import dlpack


def _at_offset(x: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``x`` whose data starts ``offset`` bytes past a 128-byte boundary."""
    raw = np.zeros(x.nbytes + 256, np.uint8)
    start = (-raw.ctypes.data) % 128 + offset
    out = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    out[...] = x
    return out


def test_shares_an_aligned_buffer():
    src = _at_offset(np.arange(6, dtype=np.float32), 0)
    y = dlpack.from_dlpack(src)
    assert isinstance(y, kiln.Array) and y.dtype == np.float32
    src[0] = 42.0                       # the note in the docstring: memory is shared
    assert float(y[0]) == 42.0
    z = dlpack.from_dlpack(src, copy=True)
    src[1] = -1.0
    assert float(z[1]) == 1.0


@pytest.mark.parametrize("offset", [4, 16, 32])
def test_unaligned_buffer_copies_or_refuses(offset):
    src = _at_offset(np.arange(6, dtype=np.float32), offset)
    y = dlpack.from_dlpack(src)          # copy=None: copied
    src[0] = 42.0
    assert float(y[0]) == 0.0
    with pytest.raises(ValueError, match="not aligned to 64 bytes.  However copy=False"):
        dlpack.from_dlpack(src, copy=False)


def test_jnp_from_dlpack_is_the_same_function():
    src = _at_offset(np.arange(4, dtype=np.int32), 0)
    np.testing.assert_array_equal(jnp.from_dlpack(src), np.arange(4))
    with pytest.raises(ValueError, match="requires a copy"):
        jnp.from_dlpack(_at_offset(np.arange(4, dtype=np.int32), 8), copy=False)


def test_round_trip_and_devices():
    x = jnp.arange(10.0).reshape(2, 5)
    y = dlpack.from_dlpack(x, device=kiln.devices()[0])
    np.testing.assert_array_equal(y, x)
    sh = kiln.sharding.SingleDeviceSharding(kiln.devices()[0])
    np.testing.assert_array_equal(dlpack.from_dlpack(np.asarray(x), device=sh), x)
    np.testing.assert_array_equal(np.from_dlpack(x), np.asarray(x))


def test_refusals():
    with pytest.raises(TypeError, match="must have __dlpack__ and __dlpack_device__"):
        dlpack.from_dlpack([1, 2, 3])

    class OnGpu:
        def __dlpack__(self, **kw):
            raise AssertionError("not to be read")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(TypeError, match="unsupported device type.*kDLCUDA"):
        dlpack.from_dlpack(OnGpu())


def test_is_supported_dtype():
    assert dlpack.is_supported_dtype(np.float32)
    assert dlpack.is_supported_dtype("complex128")
    assert dlpack.is_supported_dtype(jnp.bfloat16)
    assert not dlpack.is_supported_dtype(jnp.float8_e4m3fn)
    with pytest.raises(TypeError, match="dtype-like"):
        dlpack.is_supported_dtype(None)
    assert np.dtype(np.int8) in dlpack.SUPPORTED_DTYPES_SET


def test_array_protocol_attributes():
    x = jnp.arange(3)
    assert not hasattr(x, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="only defined for NVidia GPU buffers"):
        _ = x.__cuda_array_interface__
    with pytest.raises(BufferError, match="cannot export float8_e4m3fn"):
        x.astype(jnp.float8_e4m3fn).__dlpack__()


def test_bfloat16_round_trip_shares_memory():
    from kiln import _dlpack_capsules as caps
    a = np.arange(6, dtype=np.float32).astype(jnp.bfloat16)
    refs = sys.getrefcount(a)
    cap = caps.export_capsule(a, versioned=True)
    assert "dltensor_versioned" in repr(cap) and sys.getrefcount(a) == refs + 1
    b = caps.import_capsule(cap)
    assert "used_dltensor_versioned" in repr(cap)
    assert b.ctypes.data == a.ctypes.data and not b.flags.writeable   # read-only export
    view = b[::2]
    del b
    gc.collect()
    assert view.tolist() == [0.0, 2.0, 4.0] and sys.getrefcount(a) == refs + 1
    del view
    gc.collect()
    assert sys.getrefcount(a) == refs                  # the producer's deleter ran
    with pytest.raises(BufferError, match="not been consumed"):
        caps.import_capsule(cap)                          # a capsule is read once
    del cap
    unused = caps.export_capsule(a, versioned=False)     # never consumed: freed with it
    del unused
    gc.collect()
    assert sys.getrefcount(a) == refs


def test_bfloat16_from_kiln_and_from_a_foreign_producer():
    from kiln import _dlpack_capsules as caps
    x = jnp.arange(12.0).reshape(3, 4).astype(jnp.bfloat16)
    for v in (x, x.T, x[:, ::2], jnp.zeros((0, 3), jnp.bfloat16)):
        y = dlpack.from_dlpack(v)
        assert y.dtype == jnp.bfloat16 and y.shape == v.shape
        np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(v, np.float32))
    src = np.arange(4, dtype=np.float32).astype(jnp.bfloat16)

    class Foreign:                  # a producer kiln knows nothing about (e.g. torch)
        def __dlpack__(self, stream=None, max_version=None):
            return caps.export_capsule(src, versioned=max_version is not None)

        def __dlpack_device__(self):
            return (1, 0)

    got = dlpack.from_dlpack(Foreign())
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32), [0, 1, 2, 3])
    with pytest.raises(RuntimeError, match="Unsupported dtype"):   # NumPy's own refusal
        np.from_dlpack(x)
