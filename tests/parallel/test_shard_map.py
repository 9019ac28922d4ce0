"""shard_map, meshes, shardings and placement over 8 virtual devices."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.sharding import Mesh, NamedSharding
from kiln.sharding import PartitionSpec as P


@pytest.fixture
def mesh():
    return Mesh(np.array(kiln.devices()).reshape(4, 2), ("x", "y"))


def test_mesh_and_spec_basics(mesh):
    assert str(mesh) == "Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto))"
    assert dict(mesh.shape) == {"x": 4, "y": 2} and mesh.size == 8
    assert mesh.axis_names == ("x", "y") and mesh.devices.shape == (4, 2)
    m2 = kiln.make_mesh((4, 2), ("x", "y"))
    assert str(m2) == "Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit))"
    assert repr(P("x", ("x", "y"))) == "P('x', ('x', 'y'))"
    assert repr(P("x")) == "P('x',)" and P() == P(None) and P("x") != P("y")
    s = NamedSharding(mesh, P("x", None))
    assert s.shard_shape((8, 6)) == (2, 6) and s.num_devices == 8
    assert not s.is_fully_replicated and NamedSharding(mesh, P()).is_fully_replicated
    assert s.devices_indices_map((8, 6))[kiln.devices()[3]] == (slice(2, 4), slice(None))
    with pytest.raises(ValueError, match="duplicate entries for `x`"):
        NamedSharding(mesh, P("x", "x"))
    with pytest.raises(ValueError, match="not found in mesh"):
        NamedSharding(mesh, P("z"))
    with pytest.raises(ValueError):
        kiln.make_mesh((4, 4), ("a", "b"))


def test_shard_map_axis_index_and_blocks(mesh):
    f = kiln.shard_map(lambda a: a * lax.axis_index("x"), mesh=mesh, in_specs=P("x"),
                       out_specs=P("x"))
    want = np.repeat(np.arange(4.), 2)[:, None] * np.ones((8, 2))
    y = f(jnp.ones((8, 2)))
    np.testing.assert_array_equal(np.asarray(y), want)
    assert y.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(np.asarray(kiln.jit(f)(jnp.ones((8, 2)))), want)


def test_shard_map_psum_replicated_output(mesh):
    g = kiln.shard_map(lambda a: lax.psum(a, "x"), mesh=mesh, in_specs=P("x"),
                       out_specs=P())
    x = jnp.arange(8.)
    np.testing.assert_array_equal(np.asarray(g(x)), [12., 16.])
    np.testing.assert_array_equal(np.asarray(kiln.jit(g)(x)), [12., 16.])
    np.testing.assert_array_equal(np.asarray(kiln.grad(lambda v: g(v).sum())(x)), np.ones(8))


def test_shard_map_2d_matmul(mesh):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((8, 8)).astype(np.float32)
    B = rng.standard_normal((8, 4)).astype(np.float32)
    h = kiln.shard_map(lambda a, b: lax.psum(a @ b, "y"), mesh=mesh,
                       in_specs=(P("x", "y"), P("y", None)), out_specs=P("x", None))
    np.testing.assert_allclose(np.asarray(h(A, B)), A @ B, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(kiln.jit(h)(A, B)), A @ B, rtol=1e-5, atol=1e-5)
    # both mesh axes splitting one dimension, in either order
    for spec in [P(("x", "y")), P(("y", "x"))]:
        k = kiln.shard_map(lambda a: a * (lax.axis_index("x") * 2 + lax.axis_index("y")),
                           mesh=mesh, in_specs=spec, out_specs=spec)
        eager, jitted = np.asarray(k(jnp.ones(16))), np.asarray(kiln.jit(k)(jnp.ones(16)))
        np.testing.assert_array_equal(eager, jitted)
    np.testing.assert_array_equal(np.asarray(kiln.shard_map(
        lambda a: a * (lax.axis_index("x") * 2 + lax.axis_index("y")), mesh=mesh,
        in_specs=P(("x", "y")), out_specs=P(("x", "y")))(jnp.ones(16))),
        np.repeat(np.arange(8.), 2))


def test_shard_map_errors(mesh):
    with pytest.raises(ValueError, match="refer to an axis marked as manual"):
        kiln.shard_map(lambda a: a, mesh=mesh, in_specs=P("z"), out_specs=P("x"))(jnp.ones(8))
    with pytest.raises(ValueError, match="evenly divisible"):
        kiln.shard_map(lambda a: a, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(jnp.ones(6))
    with pytest.raises(ValueError, match="require replication"):
        kiln.shard_map(lambda a: a, mesh=mesh, in_specs=P("x"), out_specs=P())(jnp.arange(8.))
    with pytest.raises(ValueError, match="require replication"):
        kiln.jit(kiln.shard_map(lambda a: a, mesh=mesh, in_specs=P("x"),
                                out_specs=P()))(jnp.arange(8.))
    with pytest.raises(ValueError, match="twice"):
        kiln.shard_map(lambda a: a, mesh=mesh, in_specs=P("x", "x"),
                       out_specs=P("x"))(jnp.ones((8, 8)))
    same = kiln.shard_map(lambda a: a, mesh=mesh, in_specs=P("x"), out_specs=P(),
                          check_vma=False)(jnp.arange(8.))
    np.testing.assert_array_equal(np.asarray(same), [0., 1.])


def test_set_mesh_and_experimental_import(mesh):
    from kiln.experimental.shard_map import shard_map
    with kiln.sharding.set_mesh(mesh):
        f = shard_map(lambda a: lax.psum(a, ("x", "y")), in_specs=P(("x", "y")),
                      out_specs=P())
        np.testing.assert_array_equal(np.asarray(f(jnp.arange(8.))), [28.])
    with pytest.raises(ValueError, match="context mesh cannot be empty"):
        kiln.shard_map(lambda a: a, in_specs=P(), out_specs=P())(jnp.ones(2))


def test_device_put_and_constraints(mesh):
    s = NamedSharding(mesh, P("x"))
    x = kiln.device_put(jnp.arange(48.).reshape(8, 6), s)
    assert x.sharding == s
    assert [sh.index for sh in x.addressable_shards][:3] == [
        (slice(0, 2), slice(None)), (slice(0, 2), slice(None)), (slice(2, 4), slice(None))]
    assert [sh.replica_id for sh in x.addressable_shards][:2] == [0, 1]
    np.testing.assert_array_equal(np.asarray(x), np.arange(48.).reshape(8, 6))
    y = lax.with_sharding_constraint(x * 2, NamedSharding(mesh, P("y")))
    assert y.sharding.spec == P("y")
    z = kiln.jit(lambda a: a * 2, out_shardings=NamedSharding(mesh, P(None, "y")))(x)
    assert z.sharding.spec == P(None, "y")
    np.testing.assert_array_equal(np.asarray(z), np.asarray(x) * 2)
    w = kiln.jit(lambda a: lax.with_sharding_constraint(a + 1, s))(x)
    np.testing.assert_array_equal(np.asarray(w), np.asarray(x) + 1)
    with kiln.set_mesh(mesh):
        assert kiln.reshard(x, P(None, "y")).sharding.spec == P(None, "y")
    with pytest.raises(ValueError, match="partitioned 4 times"):
        kiln.device_put(jnp.ones(6), s)
    one = kiln.device_put(jnp.ones(3), kiln.devices()[2])
    assert one.sharding.device == kiln.devices()[2] and one.device == kiln.devices()[2]


def test_against_jax(mesh, jax8):
    jax = jax8
    jm = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    x = np.arange(16.).reshape(8, 2).astype(np.float32)

    def body(lx, a):
        return lx.psum(a * lx.axis_index("x"), "y") + lx.psum(lx.pmax(a, "x"), "y")
    jf = jax.shard_map(lambda a: body(jax.lax, a), mesh=jm,
                       in_specs=jax.sharding.PartitionSpec("x", "y"),
                       out_specs=jax.sharding.PartitionSpec("x", None))
    kf = kiln.shard_map(lambda a: body(lax, a), mesh=mesh, in_specs=P("x", "y"),
                        out_specs=P("x", None))
    np.testing.assert_array_equal(np.asarray(kf(x)), np.asarray(jf(x)))


def test_vmap_of_shard_map(mesh):
    g = kiln.shard_map(lambda a: lax.psum(a, "x") * 2, mesh=mesh, in_specs=P("x"),
                       out_specs=P())
    xs = np.arange(24.).reshape(3, 8).astype(np.float32)
    got = np.asarray(kiln.vmap(g)(xs))
    want = np.stack([np.asarray(g(x)) for x in xs])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want[0], xs[0].reshape(4, 2).sum(0) * 2)
