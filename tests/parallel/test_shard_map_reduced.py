"""shard_map's reduced/unreduced manual-axis types (JAX's): ``P(reduced=...)``,
``P(unreduced=...)``, ``lax.pcast(to='reduced'|'unreduced')``,
``all_gather(to='reduced')``, psum/psum_scatter of an unreduced value; an unreduced array
holds one partial per device and its value is their sum."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.sharding import AxisType, NamedSharding
from kiln.sharding import PartitionSpec as P


@pytest.fixture
def mesh():
    m = kiln.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
    with kiln.set_mesh(m):
        yield m


def test_spec_equality_includes_reduced_and_unreduced():
    assert P(reduced={"x"}) != P()
    assert P(None, unreduced={"x"}) == P(unreduced={"x"})
    assert P("x", reduced={"y"}).to_ct_spec() == P("x", unreduced={"y"})


def test_eager_unreduced_out_partials_and_sum(mesh):
    arr = kiln.device_put(np.arange(8.), P("x"))

    @kiln.shard_map(out_specs=P(unreduced={"x"}))
    def f(x):
        out = lax.pcast(x, "x", to="unreduced")
        assert out.aval.mat.unreduced == {"x"} and not out.aval.mat.varying
        return out
    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(unreduced={"x"}))
    np.testing.assert_array_equal([np.asarray(s.data) for s in out.addressable_shards],
                                  [np.arange(4.), np.arange(4., 8.)])
    np.testing.assert_array_equal(kiln.reshard(out, P()), np.arange(4.) + np.arange(4., 8.))
    g = kiln.grad(lambda x: f(x).sum())(arr)
    np.testing.assert_array_equal(g, np.ones(8))
    gj = kiln.jit(kiln.grad(lambda x: kiln.jit(f)(x).sum()))(arr)
    np.testing.assert_array_equal(gj, np.ones(8))


def test_sin_of_unreduced_raises(mesh):
    arr = kiln.device_put(np.arange(8.), P("x"))

    @kiln.shard_map(out_specs=P(unreduced={"x"}))
    def g(x):
        return jnp.sin(lax.pcast(x, "x", to="unreduced"))
    with pytest.raises(NotImplementedError, match="unreduced rule for sin is not implemented"):
        g(arr)


def test_all_gather_reduced_and_its_grad(mesh):
    arr = kiln.device_put(np.arange(8.), P("x"))

    @kiln.shard_map(out_specs=P(reduced={"x"}))
    def f(x):
        out = lax.all_gather(x, "x", tiled=True, to="reduced")
        assert out.aval.mat.reduced == {"x"} and not out.aval.mat.varying
        return out
    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P(reduced={"x"}))
    np.testing.assert_array_equal(out, np.arange(8.))
    np.testing.assert_array_equal(kiln.grad(lambda x: (f(x) * x).sum())(arr),
                                  2 * np.arange(8.))


def test_unreduced_in_psum_scatter(mesh):
    arr = kiln.reshard(jnp.arange(8.), P(unreduced={"x"}))

    @kiln.shard_map(out_specs=P("x"))
    def f(x):
        assert x.aval.mat.unreduced == {"x"}
        out = lax.psum_scatter(x, "x", tiled=True)
        assert out.aval.mat.varying == {"x"} and not out.aval.mat.unreduced
        return out
    np.testing.assert_array_equal(f(arr), np.arange(8.))
    np.testing.assert_array_equal(kiln.jit(f)(arr), np.arange(8.))
    np.testing.assert_array_equal(kiln.grad(lambda x: (f(x) ** 2).sum())(arr),
                                  2 * np.arange(8.))


def test_jit_grad_of_reduced_input_is_unreduced(mesh):
    np1 = np.arange(8.)
    arr = kiln.device_put(np1, P(None, reduced={"x"}))

    @kiln.jit
    @kiln.shard_map(out_specs=P("x"))
    def f(x):
        assert x.aval.mat.reduced == {"x"}
        return lax.pcast(x, "x", to="varying")
    out = f(arr)
    assert out.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(out, np.concatenate([np1, np1]))
    g = kiln.jit(kiln.grad(lambda x: (f(x) * np.arange(16.)).sum()))(arr)
    assert g.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    np.testing.assert_array_equal(kiln.reshard(g, P()), np1 + np.arange(8., 16.))


def test_psum_of_unreduced_and_preduced(mesh):
    @kiln.jit
    @kiln.shard_map(in_specs=P(), out_specs=P(reduced={"x"}))
    def pr(x):
        out = lax.pcast(x, "x", to="reduced")
        assert out.aval.mat.reduced == {"x"}
        return out
    x = jnp.arange(4.)
    np.testing.assert_array_equal(pr(x), np.arange(4.))
    arr = kiln.device_put(np.arange(8.), P("x"))

    @kiln.shard_map(out_specs=P())
    def s(x):
        u = lax.pcast(x, "x", to="unreduced")
        out = lax.psum(u, "x")
        assert not out.aval.mat.unreduced and not out.aval.mat.varying
        return out
    np.testing.assert_array_equal(s(arr), np.arange(4.) + np.arange(4., 8.))
    np.testing.assert_array_equal(kiln.jit(s)(arr), np.arange(4.) + np.arange(4., 8.))


def test_spec_errors(mesh):
    arr = kiln.device_put(np.arange(8.), P(None))
    with pytest.raises(ValueError, match="vary_unreduced_cast is a Varying->Unreduced"):
        kiln.shard_map(lambda x: x, in_specs=P(), out_specs=P(unreduced={"x"}))(arr)
    with pytest.raises(ValueError, match="should be equal to the reduced"):
        kiln.shard_map(lambda x: x, in_specs=P(), out_specs=P(reduced={"x"}))(arr)
    auto = kiln.make_mesh((2, 1), ("a", "b"), axis_types=(AxisType.Auto,) * 2)
    with pytest.raises(ValueError, match="context mesh .* should match the mesh passed"):
        kiln.shard_map(lambda x: x, mesh=auto, in_specs=P(), out_specs=P())(np.arange(8))


def test_reduced_spec_errors_need_explicit_full_manual():
    auto = kiln.make_mesh((2, 1), ("a", "b"), axis_types=(AxisType.Auto,) * 2)
    with pytest.raises(ValueError, match="can only be used when the mesh passed"):
        kiln.shard_map(lambda x: x, mesh=auto, in_specs=P(unreduced={"a"}),
                       out_specs=P())(np.arange(8))
    with pytest.raises(NotImplementedError, match="full manual mode"):
        kiln.shard_map(lambda x: x, mesh=auto, in_specs=P(unreduced={"a"}),
                       out_specs=P(), axis_names={"a"})(np.arange(8))


def test_jit_argument_infers_in_specs_and_scalar_layout(mesh):
    arr = kiln.device_put(np.arange(8.), P("x"))
    seen = {}

    @kiln.jit
    def f(x):
        def body(b):
            seen["shape"] = b.shape
            return lax.psum(b.sum(), "x")
        return kiln.shard_map(body, out_specs=P())(x)
    out = f(arr)
    assert seen["shape"] == (4,)        # split as the argument's sharding says
    assert float(out) == 28.
    assert out.sharding == NamedSharding(mesh, P())


def test_zero_cotangent_of_reduced_input_is_laid_out_unreduced(mesh):
    @kiln.custom_vjp
    def inner(x):
        return x
    inner.defvjp(lambda x: (x, None), lambda _, g: (None,))

    @kiln.shard_map(out_specs=P(reduced={"x"}))
    def f(x):
        return inner(x)
    arr = kiln.device_put(jnp.arange(8.), P(reduced={"x"}))
    g = kiln.jit(kiln.grad(lambda x: f(x).sum()))(arr)
    assert g.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
    np.testing.assert_array_equal(g, np.zeros(8))


def test_mul_unreduced_by_reduced(mesh):
    arr = kiln.reshard(jnp.arange(8.), P(unreduced={"x"}))
    arr2 = kiln.device_put(jnp.arange(8.), P(reduced={"x"}))

    @kiln.shard_map(out_specs=P(unreduced={"x"}))
    def f(x, y):
        out = (x * y).sum()
        assert out.aval.mat.unreduced == {"x"} and not out.aval.mat.reduced
        return out
    np.testing.assert_allclose(kiln.reshard(f(arr, arr2), P()), (np.arange(8.) ** 2).sum())
    np.testing.assert_allclose(kiln.reshard(kiln.jit(f)(arr, arr2), P()),
                               (np.arange(8.) ** 2).sum())


def test_creation_out_sharding(mesh):
    z = jnp.zeros(4, "float32", out_sharding=P("x"))
    assert z.sharding == NamedSharding(mesh, P("x"))
    np.testing.assert_array_equal(z, np.zeros(4))
    o = kiln.jit(lambda: jnp.ones((2, 4), out_sharding=P(None, "x")))()
    assert o.sharding == NamedSharding(mesh, P(None, "x"))


def test_in_spec_must_match_argument_type(mesh):
    arr = kiln.device_put(np.arange(8.), P())
    with pytest.raises(ValueError, match="should be equal to the unreduced present"):
        kiln.shard_map(lambda x: x, in_specs=P(unreduced={"x"}), out_specs=P())(arr)
    with pytest.raises(ValueError, match="should be equal to the reduced present"):
        kiln.jit(kiln.shard_map(lambda x: x, in_specs=P(reduced={"x"}),
                                out_specs=P(reduced={"x"})))(arr)


def test_shape_dtype_struct_like_keeps_manual_axis_type(mesh):
    seen = {}

    @kiln.shard_map(in_specs=P("x"), out_specs=P("x"))
    def f(x):
        spec = kiln.ShapeDtypeStruct.like(x)
        seen["mat"] = spec.manual_axis_type
        seen["aval"] = spec.aval.mat.varying
        return x
    f(kiln.device_put(np.arange(8.), P("x")))
    assert seen["mat"].varying == {"x"} and seen["aval"] == {"x"}
    assert kiln.ShapeDtypeStruct.like(jnp.ones(3)).manual_axis_type is None


def test_einsum_out_sharding_unreduced_type_inside_jit(mesh):
    a = kiln.device_put(np.arange(8.).reshape(2, 4), P(None, "x"))
    b = kiln.device_put(np.arange(12.).reshape(4, 3), P("x", None))
    seen = {}

    @kiln.jit
    def f(x, y):
        z = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))
        seen["spec"] = z.aval.sharding.spec
        # in_specs inferred from z's type: unreduced along x, so sin is JAX's error
        return kiln.shard_map(lambda v: lax.psum(v, "x"), out_specs=P())(z)
    np.testing.assert_allclose(f(a, b), np.arange(8.).reshape(2, 4) @ np.arange(12.).reshape(4, 3))
    assert seen["spec"].unreduced == {"x"}

    @kiln.jit
    def g(x, y):
        z = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))
        return kiln.shard_map(jnp.sin, out_specs=P())(z)
    with pytest.raises(NotImplementedError, match="unreduced rule for sin"):
        g(a, b)


def test_remove_size_one_mesh_axis_from_type():
    m = kiln.make_mesh((2, 1), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    np_inp = np.arange(16.).reshape(8, 2)
    seen = {}

    @kiln.jit
    @kiln.shard_map(mesh=m, in_specs=P("x", "y"), out_specs=P())
    def f(x):
        seen["in"] = x.aval.mat.varying
        return lax.psum(x, "x")
    with kiln.set_mesh(m):
        arr = kiln.device_put(np_inp, P("x", "y"))
        with pytest.raises(ValueError, match="replication"):
            f(arr)          # by default 'y' (size 1) is in the types
        kiln.config.update("jax_remove_size_one_mesh_axis_from_type", True)
        try:
            np.testing.assert_array_equal(f(arr), np_inp[:4] + np_inp[4:])
            assert seen["in"] == {"x"}
            # a pcast over size-1 axes is a no-op, even outside shard_map
            assert "pvary" not in str(kiln.make_jaxpr(
                lambda v: lax.pcast(v, "y", to="varying"))(np_inp))
        finally:
            kiln.config.update("jax_remove_size_one_mesh_axis_from_type", False)


@pytest.mark.parametrize("jit", [False, True])
def test_auto_pcast_off_requires_matching_varying_axes(mesh, jit):
    @kiln.smap(in_axes=(0, None), out_axes=0, axis_name="x")
    def f(x, y):
        return x * y
    g = kiln.jit(f) if jit else f
    x = kiln.device_put(jnp.zeros((2, 2)), P("x", None))
    y = kiln.device_put(jnp.ones((2,)), P())
    np.testing.assert_array_equal(g(x, y), np.zeros((2, 2)))     # on: y is pvary-ed
    kiln.config.update("jax_auto_pcast", False)
    try:
        with pytest.raises(ValueError, match="requires varying manual axes to match"):
            g(x, y)
    finally:
        kiln.config.update("jax_auto_pcast", True)
    np.testing.assert_array_equal(g(x, y), np.zeros((2, 2)))


def test_vmap_over_explicit_axis_keeps_its_layout():
    m = kiln.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    with kiln.set_mesh(m):
        arr = kiln.device_put(jnp.arange(16.).reshape(2, 8), P("x", "y"))
        seen = {}

        @kiln.shard_map(in_specs=P("y"), out_specs=P(None))
        def f(x):
            return lax.psum(x, axis_name="y")

        def g(x):
            out = f(x)
            seen["type"] = out.aval.sharding
            return out
        for h in (kiln.vmap(g), kiln.jit(kiln.vmap(g))):
            out = h(arr)
            assert out.sharding == NamedSharding(m, P("x", None))
            np.testing.assert_array_equal(
                out, np.arange(16.).reshape(2, 2, 4).sum(1))
        # under jit the output's type is its out_specs' layout, the mapped entry dropped
        assert tuple(seen["type"].mesh.axis_names) == ("x", "y")
        assert seen["type"].spec == P(None)
        with pytest.raises(ValueError, match="Only one of spmd_axis_name"):
            kiln.vmap(g, spmd_axis_name="y")(arr)


def test_constraint_on_a_manual_axis_inside_shard_map_raises():
    m = kiln.make_mesh((2, 2), ("i", "j"), axis_types=(AxisType.Auto,) * 2)

    def g(x):
        return lax.with_sharding_constraint(x, NamedSharding(m, P("i", "j"))) * 2

    def ok(x):
        return lax.with_sharding_constraint(x, NamedSharding(m, P(None, "j"))) * 2
    v = jnp.arange(32.).reshape(4, 8)
    sm = lambda f: kiln.jit(kiln.shard_map(f, mesh=m, in_specs=P("i", None),  # noqa: E731
                                           out_specs=P("i", None), axis_names={"i"}))
    with pytest.raises(ValueError, match="contains a manual axes"):
        sm(g)(v)
    np.testing.assert_array_equal(sm(ok)(v), v * 2)
