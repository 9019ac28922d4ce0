"""Pickling (JAX's ``pickle_test``): arrays (weak type, dtype canonicalized where they are
unpickled), PRNG keys, partition specs, shardings, devices, jitted functions; a traced
value refuses to be pickled."""
import copy
import pickle

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.sharding import Mesh, NamedSharding, make_single_device_sharding
from kiln.sharding import PartitionSpec as P


def test_array_round_trip_keeps_type_and_aval():
    for x in (jnp.arange(10.0), jnp.array(4.0)):
        y = pickle.loads(pickle.dumps(x))
        assert type(y) is type(x) and y.aval == x.aval and y.weak_type == x.weak_type
        np.testing.assert_array_equal(x, y)
    assert copy.deepcopy(jnp.array(4.0)).weak_type


def test_x64_array_unpickled_without_x64_is_canonicalized():
    with kiln.enable_x64(True):
        s = pickle.dumps(jnp.array(4.0, dtype="float64"))
    with kiln.enable_x64(False):
        y = pickle.loads(s)
    assert y.dtype == np.float32 and y.aval.dtype == np.float32 and float(y) == 4.0


def test_tracer_cannot_be_pickled():
    with pytest.raises(kiln.errors.ConcretizationTypeError, match="__reduce__ method"):
        kiln.jit(pickle.dumps)(0)


def test_key_array_round_trip():
    k1 = kiln.random.PRNGKey(72)
    k2 = pickle.loads(pickle.dumps(k1))
    np.testing.assert_array_equal(kiln.random.key_data(k1), kiln.random.key_data(k2))
    t1 = kiln.random.key(3)
    t2 = pickle.loads(pickle.dumps(t1))
    assert t2.dtype == t1.dtype
    np.testing.assert_array_equal(kiln.random.key_data(t1), kiln.random.key_data(t2))


@pytest.mark.parametrize("spec", [P(), P(None), P("x", None), P(("x", "y"),),
                                  P("x", unreduced={"y"})])
def test_partition_spec_round_trip(spec):
    out = pickle.loads(pickle.dumps(spec))
    assert isinstance(out, P) and out == spec


def test_shardings_round_trip_with_memory_kinds():
    d = kiln.devices()[0]
    kinds = [m.kind for m in d.addressable_memories()] + [None]
    mesh = Mesh(np.array(kiln.devices()), "d")
    for kind in kinds:
        s = make_single_device_sharding(d, memory_kind=kind)
        assert pickle.loads(pickle.dumps(s)) == s
        n = NamedSharding(mesh, P("d"), memory_kind=kind)
        assert pickle.loads(pickle.dumps(n)) == n
    host = NamedSharding(mesh, P("d"), memory_kind="pinned_host")
    assert pickle.loads(pickle.dumps(host)) == host != NamedSharding(mesh, P("d"))


def test_devices_unpickle_to_the_same_device():
    for d in kiln.devices():
        assert pickle.loads(pickle.dumps(d)) is d


def test_jitted_function_round_trip():
    cloudpickle = pytest.importorskip("cloudpickle")

    @kiln.jit
    def f(x, y):
        return x * y

    @kiln.jit
    def g(z):
        return f(z, z + 77)  # noqa: F821  (deleted below: the pickle must hold it)

    expected = g(32)
    s = cloudpickle.dumps(g)
    del f, g
    assert pickle.loads(s)(32) == expected


def test_copy_of_a_tracer_is_the_value():
    # copy.copy / deepcopy inside jit work (JAX's tracers forward them), pickling does not
    f = kiln.jit(lambda x: copy.copy(x) + copy.deepcopy(x))
    assert int(f(1)) == 2
