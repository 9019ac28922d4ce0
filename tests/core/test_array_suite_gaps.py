"""``jax.Array`` and sharding behaviour JAX's ``array_test`` checks that kiln got wrong
(issue 26): committed arrays, layouts of eager results, the JAX form of ``ArrayImpl``
and ``make_array_from_*``'s checks, mesh and partition-spec rules."""
import pickle

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.array import ArrayImpl
from kiln.core.avals import ManualAxisType, ShapedArray
from kiln.errors import UnexpectedTracerError
from kiln.sharding import (
    AbstractMesh,
    AxisType,
    IndivisibleError,
    Mesh,
    NamedSharding,
    SingleDeviceSharding,
    common_devices_indices_map,
    make_single_device_sharding,
    modify_spec_for_auto_manual,
)
from kiln.sharding import PartitionSpec as P


def _mesh(shape, names):
    return Mesh(np.array(kiln.devices()[:int(np.prod(shape))]).reshape(shape), names)


def _put(shape, spec, mesh):
    data = np.arange(int(np.prod(shape))).reshape(shape)
    return kiln.device_put(data, NamedSharding(mesh, spec)), data


def test_committed_arrays():
    x = jnp.array([1, 2, 3])
    assert not x._committed and not x.addressable_shards[0].data._committed
    y = kiln.device_put(x, kiln.devices()[1])
    assert y._committed and y.addressable_shards[0].data._committed
    assert y.addressable_shards[0].data.devices() == {kiln.devices()[1]}
    z = kiln.device_put(np.array([1, 2]), kiln.devices()[0])     # the default device too
    assert z._committed and z.sharding == make_single_device_sharding(kiln.devices()[0])
    assert kiln.device_put(x) is x and not x._committed


def test_private_array_api():
    a, data = _put((8, 2), P("x", "y"), _mesh((4, 2), ("x", "y")))
    np.testing.assert_array_equal(a._npy_value, data)
    assert len(a._arrays) == 8 and a._arrays[3].devices() == {kiln.devices()[3]}
    a.delete()
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=int32\[8,2\]"):
        a._check_if_deleted()
    assert a._npy_value is None and a._arrays is None
    r, data = _put((8, 2), P(), _mesh((4, 2), ("x", "y")))
    fs = r._fully_replicated_shard()
    assert fs.shape == (8, 2) and fs.sharding.num_devices == 1
    np.testing.assert_array_equal(fs, data)


def test_shard_data_is_kept():
    a, _ = _put((8, 2), P("x"), _mesh((4, 2), ("x", "y")))
    c = jnp.array(a, copy=True)
    assert c._committed and c.sharding == a.sharding
    for s, t in zip(a.addressable_shards, c.addressable_shards):
        assert s.data is s.data
        assert s.data.unsafe_buffer_pointer() != t.data.unsafe_buffer_pointer()


def test_device_and_to_device_of_sharded_array():
    s = NamedSharding(_mesh((2,), ("x",)), P("x"))
    x = jnp.ones((2, 10))
    assert x.device == list(x.devices())[0]
    assert kiln.device_put(x, s).device == s
    assert x.to_device(s).device == s
    assert x.to_device(kiln.devices()[-1]).device == kiln.devices()[-1]


def test_eager_results_keep_layout():
    mesh = _mesh((2, 2, 2), ("x", "y", "z"))
    a, data = _put((4, 4, 2), P("x", "y", "z"), mesh)
    b, _ = _put((4, 4, 2), P("x"), mesh)
    assert (a + b).sharding.spec == P("x", "y", "z")
    assert (a * 2).astype(jnp.float32).sharding.spec == P("x", "y", "z")
    z = jnp.zeros_like(a)
    assert z.sharding == a.sharding
    np.testing.assert_array_equal(z.addressable_shards[5].data, 0)
    for idx, shard_shape in [((slice(None), -1, slice(None)), (2, 1)), ((0, 0, 0), ()),
                             ((slice(None), slice(1, None, 2)), (2, 2, 1)),
                             ((slice(None, None, -1),), (2, 2, 1)), ((1,), (2, 1)),
                             ((jnp.array(0), slice(None)), (2, 1))]:
        out = a[idx]
        np.testing.assert_array_equal(out, data[tuple(np.asarray(i) if hasattr(i, "dtype")
                                                      else i for i in idx)])
        assert out.sharding.shard_shape(out.shape) == shard_shape
        assert len(out.sharding.device_set) == 8
    rows = list(a)
    assert rows[1].sharding.spec == P("y", "z")
    np.testing.assert_array_equal(rows[1], data[1])


def test_eager_results_stay_on_device():
    d = kiln.devices()[1]
    x = kiln.device_put(jnp.arange(3.0), d)
    assert (x * 2).devices() == {d} and (x + x).devices() == {d}
    assert x[1].devices() == {d} and [r.devices() for r in x] == [{d}] * 3
    one = Mesh(np.array([d]), ("x",))
    y, _ = _put((8, 2), P("x"), one)
    assert all(r.devices() == {d} for r in y)
    u = jnp.arange(3.0)         # uncommitted: results stay uncommitted
    assert not (u + u)._committed and not u[1:]._committed


def test_arrayimpl_jax_constructor_checks():
    mesh = _mesh((1, 2), ("x", "y"))
    s = NamedSharding(mesh, P("x", "y"))
    data = np.arange(16, dtype=np.float32).reshape(8, 2)
    idx = s.devices_indices_map((8, 2))
    bufs = [kiln.device_put(data[idx[d]], d) for d in mesh.devices.flat]
    a = ArrayImpl(ShapedArray((8, 2), np.float32), s, bufs[::-1], committed=True)
    np.testing.assert_array_equal(a, data)
    assert a.sharding == s and a._committed
    with pytest.raises(ValueError, match=r"Expected 2 per-device arrays .* but got 1"):
        ArrayImpl(ShapedArray((8, 2), np.float32), s, bufs[:1], committed=True)
    with pytest.raises(ValueError, match="must be from distinct devices"):
        ArrayImpl(ShapedArray((8, 2), np.float32), NamedSharding(mesh, P("x")),
                  [kiln.device_put(data, kiln.devices()[0])] * 2, committed=True)
    with pytest.raises(ValueError, match=r"Sharding contains devices \{1\} .* Per-device "
                                         r"arrays contain devices \{2\}"):
        ArrayImpl(ShapedArray((8, 2), np.float32), s,
                  [bufs[0], kiln.device_put(bufs[1], kiln.devices()[2])], committed=True)
    with pytest.raises(ValueError, match="must have matching dtypes. Got int32, expected"):
        ArrayImpl(ShapedArray((8, 2), np.float32), s,
                  [b.astype(jnp.int32) for b in bufs], committed=True)


def test_make_array_from_callback_checks():
    mesh = _mesh((4, 2), ("x", "y"))
    with pytest.raises(ValueError, match=r"Expected shard shape \(2, 2\) doesn't match the "
                                         r"single device array shape \(5,\)"):
        kiln.make_array_from_callback((8, 4), NamedSharding(mesh, P("x", "y")),
                                      lambda idx: np.arange(5))
    s = NamedSharding(mesh, P("x"))
    g = jnp.arange(8.0)
    with pytest.raises(UnexpectedTracerError, match="cannot be called within a traced"):
        kiln.jit(lambda x: kiln.make_array_from_callback((8,), s, lambda i: x[i]))(g)


def test_make_array_from_single_device_arrays_checks():
    mesh = _mesh((2,), ("x",))
    s = NamedSharding(mesh, P("x"))
    with pytest.raises(ValueError, match="If the Array has no addressable shards, `dtype`"):
        kiln.make_array_from_single_device_arrays((8,), s, [])
    x = kiln.device_put(jnp.arange(8), s)
    with pytest.raises(ValueError, match=r"must have one shard each. An argument array had "
                                         r"2 shard\(s\)"):
        kiln.make_array_from_single_device_arrays(x.shape, s, [x, x])
    one = make_single_device_sharding(kiln.devices()[0])
    with pytest.raises(ValueError, match="it must match the dtype of the addressable"):
        kiln.make_array_from_single_device_arrays((3,), one, [jnp.arange(3)],
                                                  dtype=jnp.float32)
    y = jnp.arange(10)
    with pytest.raises(ValueError, match="requires a list of concrete arrays"):
        kiln.jit(lambda v: kiln.make_array_from_single_device_arrays(
            v.shape, y.sharding, [v]))(y)
    with pytest.raises(TypeError, match="`arrays` argument must be a list or tuple"):
        kiln.make_array_from_single_device_arrays(y.shape, y.sharding, y)
    blocks = tuple(kiln.device_put(np.arange(8)[i], d)
                   for d, i in s.addressable_devices_indices_map((8,)).items())
    np.testing.assert_array_equal(
        kiln.make_array_from_single_device_arrays((8,), s, blocks), np.arange(8))


def test_sds_like_sharding_of_committed_only():
    assert kiln.ShapeDtypeStruct.like(jnp.arange(8)).sharding is None
    one = SingleDeviceSharding(kiln.devices()[0])
    assert kiln.ShapeDtypeStruct.like(kiln.device_put(jnp.arange(8), one)).sharding == one
    s = NamedSharding(_mesh((2,), ("x",)), P("x"))
    assert kiln.ShapeDtypeStruct.like(kiln.device_put(jnp.arange(8), s)).sharding == s


def test_donated_argument_laid_out_by_in_shardings_is_deleted():
    s = NamedSharding(_mesh((4, 2), ("x", "y")), P())
    arr = jnp.arange(16)
    out = kiln.jit(lambda x: x * 2, in_shardings=s, donate_argnums=0)(arr)
    assert out.sharding.is_fully_replicated and arr.is_deleted()


def test_numpy_dtype_of_array_is_deprecated():
    if not hasattr(np, "__version__") or tuple(map(int, np.__version__.split(".")[:2])) < (2, 4):
        pytest.skip("__numpy_dtype__ needs NumPy 2.4")
    with pytest.warns(DeprecationWarning, match="Implicit conversion of an array to a dtype"):
        np.dtype(jnp.arange(4))


def test_mesh_rules():
    devs = kiln.devices()
    assert Mesh(devs, "x") is Mesh(devs, "x")
    m = _mesh((1, 1), ("x", "y"))
    assert repr(m) == "Mesh(axis_sizes=(1, 1), axis_names=('x', 'y'), axis_types=(Auto, Auto))"
    assert str(m) == "Mesh('x': 1, 'y': 1, axis_types=(Auto, Auto))"
    with pytest.raises(ValueError, match="Mesh axis names cannot be None"):
        Mesh(devs, (None, "x"))
    with pytest.raises(ValueError, match="Number of axis names should match the number of"):
        Mesh(np.array(devs[:2]).reshape(2, 1), ("x", "y"), axis_types=AxisType.Auto)
    with pytest.raises(TypeError, match="axis_types.*must be of type"):
        AbstractMesh((2,), ("x",), axis_types=("explicit",))
    e, a = AxisType.Explicit, AxisType.Auto
    mm = kiln.make_mesh((1, 1, 1), ("x", "y", "z"), axis_types=(e, a, AxisType.Manual))
    assert (mm.explicit_axes, mm.auto_axes, mm.manual_axes) == (("x",), ("y",), ("z",))
    assert mm._flat_devices_tuple == (devs[0],)
    empty = Mesh(devices=np.empty((), dtype=object), axis_names=[])
    assert empty.empty and empty.size == 0 and empty.abstract_mesh.empty
    assert pickle.loads(pickle.dumps(m)) is m


def test_partition_spec_rules():
    assert P(None, "x", "y") is P((), "x", "y")
    assert P("x", unreduced={"z"}) + P("a", unreduced={"b"}) == P("x", "a",
                                                                   unreduced={"z", "b"})
    with pytest.raises(TypeError, match="unreduced in `__add__` of PartitionSpec"):
        P("x", unreduced={"z"}) + (None,)
    with pytest.raises(TypeError, match="unreduced in `__radd__` of PartitionSpec"):
        (None,) + P("x", unreduced={"y"})
    with pytest.raises(ValueError, match="partitions cannot overlap with unreduced"):
        P("x", "y", unreduced={"x"})
    with pytest.raises(ValueError, match="cannot contain a nested tuple"):
        P("x", ("z", ("a",)))
    with pytest.raises(TypeError, match="Subclassing `jax.P` is prohibited"):
        type("MyP", (P,), {})
    assert pickle.loads(pickle.dumps(P("x", None))) is P("x", None)


def test_named_sharding_rules():
    mesh = _mesh((1, 1, 1), ("x", "y", "z"))
    with pytest.raises(ValueError, match="Unreduced axes.*not found in mesh"):
        NamedSharding(mesh, P("x", unreduced={"a"}))
    with pytest.raises(ValueError, match="Unreduced axes can only refer to mesh axes.*Explicit"):
        NamedSharding(mesh, P("x", unreduced={"y"}))
    with pytest.raises(ValueError, match=r"For scalars the PartitionSpec should be P\(\)"):
        NamedSharding(_mesh((1,), ("x",)), P("x")).check_compatible_aval(())
    am = AbstractMesh((2,), ("x",))
    assert NamedSharding(am, P(), memory_kind="pinned_host").memory_kind == "pinned_host"
    assert NamedSharding(am, P()).memory_kind is None
    with pytest.raises(ValueError, match="Got invalid memory kind"):
        NamedSharding(am, P(), memory_kind="weird_device")
    one = _mesh((1,), ("x",))
    single = make_single_device_sharding(kiln.devices()[0])
    assert NamedSharding(one, P("x")).is_equivalent_to(single, 2)
    assert not NamedSharding(_mesh((2,), ("x",)), P("x")).is_equivalent_to(single, 2)
    assert single != single.with_memory_kind("pinned_host")


def test_devices_indices_map_cache_and_divisibility():
    s = NamedSharding(_mesh((1,), ("x",)), P())
    s.devices_indices_map((8,))
    kiln.clear_caches()
    s.devices_indices_map((8,))
    assert common_devices_indices_map.cache_info().currsize == 1
    with pytest.raises(IndivisibleError):
        NamedSharding(_mesh((4, 2), ("x", "y")), P("x", "y")).devices_indices_map((8, 3))


def test_device_memories():
    d = kiln.devices()[0]
    assert [m.kind for m in d.addressable_memories()] == ["device"]
    assert d.default_memory().kind == "device" and pickle.loads(pickle.dumps(d)) is d


def test_manual_axis_type_and_spec_for_auto_manual():
    mt = ManualAxisType(varying={"x"})
    with pytest.raises(AttributeError):
        mt.varying = {"y"}
    assert pickle.loads(pickle.dumps(mt)) == mt
    mesh = AbstractMesh((2, 2, 2), ("a", "b", "c"),
                        axis_types=(AxisType.Explicit, AxisType.Explicit, AxisType.Auto))
    assert modify_spec_for_auto_manual(P(unreduced={"a", "c"}, reduced={"b"}), mesh) == \
        P(unreduced={"a"}, reduced={"b"})
    assert modify_spec_for_auto_manual(P(("a", "c"), "c"), mesh) == P(("a",), None)


def test_lax_full_like_keeps_a_committed_prototypes_device():
    from kiln import lax
    x = jnp.array((1, 2, 3), dtype=np.int32)
    assert not lax.full_like(x, 1.1)._committed
    dev = kiln.devices()[-1]
    x = kiln.device_put(x, dev)
    y = lax.full_like(x, 1.1)
    assert y._committed and y.sharding == x.sharding
    np.testing.assert_array_equal(np.asarray(y), [1, 1, 1])
    z = lax.full_like(x, 3, sharding=kiln.sharding.SingleDeviceSharding(kiln.devices()[0]))
    assert z.sharding.device_set == {kiln.devices()[0]}
