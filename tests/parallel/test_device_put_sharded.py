"""``jax._src.api.device_put_sharded``/``device_put_replicated`` (removed from JAX's top
level in 0.10.2 with a deprecation message, kept in ``jax._src.api``) and ``Array._arrays``
(JAX's per-device buffers): JAX's pmap_test cases."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln._src import api as src_api


def _devices():
    devs = kiln.local_devices()
    if len(devs) < 2:
        pytest.skip("needs several devices")
    return devs


def test_device_put_sharded_stacks_one_shard_per_device():
    devices = _devices()
    x = [np.arange(i, i + 4) for i in range(len(devices))]
    y = src_api.device_put_sharded(x, devices)
    assert isinstance(y.sharding, kiln.NamedSharding)
    np.testing.assert_array_equal(y, np.stack(x))
    for s in y.addressable_shards:
        np.testing.assert_array_equal(s.data, y[s.index])
        assert s.replica_id == 0
    assert len(y._arrays) == len(devices)
    assert all(b.devices() == {d} for b, d in zip(y._arrays, devices))
    y1, y2 = src_api.device_put_sharded([(i, np.arange(i, i + 4)) for i in range(len(devices))],
                                        devices)
    np.testing.assert_array_equal(y1, np.arange(len(devices)))
    assert y2.shape == (len(devices), 4)
    with pytest.raises(ValueError, match="must equal len"):
        src_api.device_put_sharded(x[:1], devices)


def test_device_put_replicated_broadcasts_over_devices():
    devices = _devices()
    ys = src_api.device_put_replicated({"a": np.arange(1, 5), "b": np.arange(3)}, devices)
    np.testing.assert_array_equal(ys["a"], np.stack([np.arange(1, 5)] * len(devices)))
    assert all(b.devices() == {d} for b, d in zip(ys["b"]._arrays, devices))
    x = src_api.device_put_replicated(1, devices)
    assert repr(x).startswith("Array")
    x.delete()
    x.delete()


def test_top_level_names_raise_jax_deprecation():
    for name in ("device_put_sharded", "device_put_replicated"):
        with pytest.raises(AttributeError, match=f"jax.{name} is deprecated; use "
                                                 "jax.device_put instead"):
            getattr(kiln, name)
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
        getattr(kiln, "not_a_name")  # noqa: B009
    assert jnp.ones(1).shape == (1,)


def test_pmap_lowered_and_compiled_describe_their_arguments():
    from kiln import lax
    devices = _devices()
    f = kiln.pmap(lambda x: x - lax.pmean(x, "i"), axis_name="i")
    x = np.arange(len(devices) * 4, dtype=np.float32).reshape(len(devices), 4)
    lowered = f.lower(x)
    for obj in (lowered, lowered.compile()):
        assert obj._no_kwargs is False
        assert obj.in_tree == kiln.tree.flatten(((0,), {}))[1]
        ((aval,), kwargs) = obj.in_avals
        assert kwargs == {} and aval.shape == x.shape and aval.dtype == x.dtype
