"""shard_map as JAX 0.10's: varying manual axes (``aval.mat``), ``lax.pcast``, inferred and
``None`` in_specs, ``axis_names``, ``smap``, error texts, output layouts."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.sharding import AxisType, Mesh, NamedSharding
from kiln.sharding import PartitionSpec as P


@pytest.fixture
def mesh():
    return Mesh(np.array(kiln.devices()[:4]).reshape(2, 2), ("x", "y"))


@pytest.fixture
def emesh():
    return kiln.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)


def test_mat_varying_under_jit(mesh):
    seen = {}

    def f(a, b):
        seen["a"] = a.aval.mat.varying
        seen["b"] = kiln.typeof(b).mat.varying
        s = lax.psum(a, "x")
        seen["psum"] = s.aval.mat.varying
        seen["sin"] = jnp.sin(a).aval.mat.varying
        seen["const"] = lax.pcast(jnp.float32(1), ("x", "y"), to="varying").aval.mat.varying
        return a + s
    kiln.jit(kiln.shard_map(f, mesh=mesh, in_specs=(P(("x", "y")), P()),
                            out_specs=P(("x", "y"))))(jnp.arange(8.), jnp.ones(2))
    assert seen == {"a": {"x", "y"}, "b": frozenset(), "psum": {"y"}, "sin": {"x", "y"},
                    "const": {"x", "y"}}
    assert kiln.ShapeDtypeStruct((2,), np.float32) is not None
    assert kiln.typeof(jnp.ones(2)).mat.varying == frozenset()


def test_pcast_varying_values_and_grad(mesh):
    def f(x):
        return x * lax.pcast(x.sum(), "x", to="varying")
    g = kiln.shard_map(f, mesh=mesh, in_specs=P(), out_specs=P("x"))
    x = jnp.arange(3.)
    np.testing.assert_allclose(g(x), np.tile(np.arange(3.) * 3, 2))
    np.testing.assert_allclose(kiln.jit(g)(x), np.tile(np.arange(3.) * 3, 2))
    # d/dx of sum_devices(x * sum(x)) = 2 * (sum(x) + x * 1 ... ) summed over devices:
    # pcast transposes to a psum over the axis
    expect = 2 * (np.full(3, 3.) + np.arange(3.).sum())
    np.testing.assert_allclose(kiln.grad(lambda v: g(v).sum())(x), expect)
    # a reduced output needs an out_spec that says so (JAX's check)
    with pytest.raises(ValueError, match="should be equal to the reduced"):
        kiln.shard_map(lambda v: lax.pcast(v, "x", to="reduced"), mesh=mesh, in_specs=P(),
                       out_specs=P())(x)
    with pytest.raises(ValueError, match="Allowed `to` values"):
        lax.pcast(x, "x", to="nope")
    with pytest.raises(ValueError, match="Unsupported pcast from=varying"):
        kiln.jit(kiln.shard_map(lambda v: lax.pcast(v, "x", to="varying"), mesh=mesh,
                                in_specs=P("x"), out_specs=P("x")))(jnp.arange(4.))
    with pytest.raises(ValueError, match="pvary should be called under jax.shard_map"):
        lax.pcast(x, "x", to="varying")
    with pytest.raises(ValueError, match="pvary should be called under jax.shard_map"):
        kiln.jit(lambda v: lax.pcast(v, "x", to="varying"))(x)


def test_in_specs_inferred_from_explicit_shardings(emesh):
    with kiln.sharding.set_mesh(emesh):
        a = kiln.device_put(np.arange(8.), P("x"))
        shapes = []

        @kiln.shard_map(out_specs=P("x"))
        def f(v, w):
            shapes.append((v.shape, w.shape))
            return v * 2 + w.sum()
        out = f(a, np.ones(3))
        assert shapes[0] == ((4,), (3,))
        np.testing.assert_allclose(out, np.arange(8.) * 2 + 3)
        assert out.sharding == NamedSharding(emesh, P("x"))
    auto = kiln.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    with pytest.raises(TypeError, match="but it was `None` when axis_names"):
        kiln.shard_map(lambda v: v, mesh=auto, out_specs=P())(np.ones(2))


def test_none_in_specs_pass_objects_through(mesh):
    obj = object()

    def f(o, x, d):
        assert o is obj and d["k"] is obj
        return jnp.sin(x)
    x = jnp.arange(8.)
    y = kiln.shard_map(f, mesh=mesh, in_specs=(None, P("x"), {"k": None}),
                       out_specs=P("x"))(obj, x, {"k": obj})
    np.testing.assert_allclose(y, np.sin(np.arange(8.)), rtol=1e-6)
    # in_specs=None: every argument passed as is
    assert kiln.shard_map(lambda v: v, mesh=mesh, in_specs=None, out_specs=P())(3.) == 3.


def test_axis_names_binds_only_manual_axes(mesh):
    @kiln.jit
    def f(x):
        return kiln.shard_map(lambda v: lax.psum(v, "x"), mesh=mesh, in_specs=P("x"),
                              out_specs=P(), axis_names={"x"})(x)
    np.testing.assert_allclose(f(jnp.arange(8.)), np.arange(4.) + np.arange(4., 8.))
    with pytest.raises(ValueError, match="in_specs refers to 'y'"):
        kiln.shard_map(lambda v: v, mesh=mesh, in_specs=P("y"), out_specs=P("y"),
                       axis_names={"x"})(jnp.arange(8.))
    with pytest.raises(NameError, match="Found an unbound axis name: y"):
        kiln.jit(kiln.shard_map(lambda v: lax.pcast(v, "y", to="varying"), mesh=mesh,
                                in_specs=P(), out_specs=P("x"), axis_names={"x"},
                                check_vma=False))(jnp.arange(8.))
    # eagerly: outputs laid out over the whole mesh
    out = kiln.shard_map(lambda v: v * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                         axis_names={"x"})(jnp.arange(8.))
    assert out.sharding == NamedSharding(mesh, P("x"))


def test_replication_error_and_check_vma_false_under_jit(mesh):
    f = kiln.shard_map(lambda v: 2 * v, mesh=mesh, in_specs=P("x", "y"), out_specs=P(None, "y"))
    with pytest.raises(ValueError, match="require replication which can't be statically "
                                         "inferred"):
        f(np.arange(16.).reshape(4, 4))
    g = kiln.jit(kiln.shard_map(lambda v: v, mesh=mesh, in_specs=P("x"), out_specs=P(),
                                check_vma=False))
    np.testing.assert_allclose(g(jnp.arange(4.)), [0., 1.])


def test_eager_python_control_flow_on_invariant_value(mesh):
    def f(x):
        if lax.psum(x, ("x", "y")).sum() < 0:
            return x
        return -x
    x = jnp.arange(4.).reshape(2, 2)
    out = kiln.shard_map(f, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))(x)
    np.testing.assert_allclose(out, -np.arange(4.).reshape(2, 2))


def test_smap(emesh):
    with kiln.sharding.set_mesh(emesh):
        @kiln.smap(in_axes=(None, 0), out_axes=(None, 0), axis_name="x")
        def f(a, b):
            assert b.shape == (4,) and a.shape == (8,)
            return a * 2, b * 2
        o1, o2 = f(np.arange(8.), np.arange(8.))
        np.testing.assert_allclose(o1, np.arange(8.) * 2)
        np.testing.assert_allclose(o2, np.arange(8.) * 2)
        assert o2.sharding == NamedSharding(emesh, P("x"))

        seen = []

        @kiln.smap(axis_name="y", in_axes=0, out_axes=None)
        def inner(v):
            seen.append(kiln.typeof(v).mat.varying)
            return lax.psum(v, "y")

        @kiln.jit
        @kiln.smap(axis_name="x", in_axes=0, out_axes=0)
        def outer(v):
            return inner(jnp.sin(v))
        outer(jnp.arange(4.))
        assert seen == [{"x", "y"}]
    auto = kiln.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    with kiln.sharding.set_mesh(auto), pytest.raises(TypeError, match="in_axes was not "
                                                                      "specified"):
        kiln.smap(lambda v: v, out_axes=0, axis_name="x")(np.arange(4))


def test_mesh_errors():
    from kiln._src.mesh import empty_concrete_mesh
    with pytest.raises(ValueError, match="requires a non-empty mesh"):
        kiln.shard_map(lambda v: v, mesh=empty_concrete_mesh, in_specs=P("x"),
                       out_specs=P("x"))(jnp.arange(8))
    with pytest.raises(ValueError, match="context mesh cannot be empty"):
        kiln.shard_map(lambda v: v, in_specs=P(), out_specs=P())(jnp.arange(8))


def test_abstract_mesh_under_jit(mesh):
    f = kiln.jit(lambda v: kiln.shard_map(lambda b: b + lax.axis_index("x"),
                                          mesh=mesh.abstract_mesh, in_specs=P("x"),
                                          out_specs=P("x"))(v))
    np.testing.assert_allclose(f(jnp.zeros(4)), [0., 0., 1., 1.])
    # the output's layout: the abstract mesh resolved against the argument's mesh
    a = kiln.device_put(jnp.zeros(4), NamedSharding(mesh, P()))
    for _ in range(2):
        assert f(a).sharding == NamedSharding(mesh, P("x"))


def test_zero_size_block_under_jit(mesh):
    f = kiln.jit(kiln.shard_map(lambda v: v[:, 100:116], mesh=mesh, in_specs=P(None, "x"),
                                out_specs=P(None, "x")))
    assert f(jnp.ones((4, 8))).shape == (4, 0)


def test_jit_output_laid_out_as_constrained(mesh):
    f = kiln.jit(kiln.shard_map(lambda v: lax.all_gather(v, "y", axis=0, tiled=True),
                                mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y")))
    a = jnp.arange(16.).reshape(4, 4)
    for _ in range(2):      # the first call and the cached one
        out = f(a)
        assert out.sharding == NamedSharding(mesh, P("x", "y"))
        assert out.addressable_data(0).shape == (4, 2)
    s = NamedSharding(mesh, P("y"))
    g = kiln.jit(lambda v: lax.with_sharding_constraint(v * 2, s))
    for _ in range(2):
        assert g(jnp.arange(4.)).sharding == s


def test_device_put_with_device_inside_eager_shard_map(mesh):
    f = kiln.shard_map(lambda v: v + kiln.device_put(1), mesh=mesh, in_specs=P("x"),
                       out_specs=P("x"))
    np.testing.assert_allclose(f(jnp.arange(4.)), np.arange(4.) + 1)
    g = kiln.shard_map(lambda v: v + kiln.device_put(1, kiln.devices()[0]), mesh=mesh,
                       in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(ValueError, match="explicit device not allowed within shard_map"):
        g(jnp.arange(4.))
    np.testing.assert_allclose(kiln.jit(g)(jnp.arange(4.)), np.arange(4.) + 1)
    assert kiln.device_put(1, kiln.devices()[1]) == 1     # outside: fine


def test_remat_integer_output_has_zero_tangent(mesh):
    # remat's JVP gives integer outputs symbolic-zero tangents (was a float0 array that
    # the following sum could not take)
    f = kiln.shard_map(lambda v: lax.scan(lambda c, _: (c, lax.axis_index("x")), None, None,
                                          length=1)[1],
                       mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    g = kiln.grad(lambda v: kiln.remat(f)(v).sum().astype("float32"))
    np.testing.assert_allclose(g(jnp.arange(4.)), np.zeros(4))
    assert kiln.eval_shape(g, jnp.arange(4.)).shape == (4,)
    h = kiln.grad(lambda v: kiln.remat(lambda u: (u * 2).astype("int32"))(v).sum()
                  .astype("float32"))
    assert float(h(1.5)) == 0.0


def test_abstract_mesh_inside_body_has_manual_axes():
    mesh = kiln.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AxisType.Auto,) * 3)
    seen = {}

    def g(v):
        am = kiln.sharding.get_abstract_mesh()
        seen["inner"] = (am.manual_axes, am.auto_axes, v.aval.mat.varying)
        return v * v

    def h(v):
        am = kiln.sharding.get_abstract_mesh()
        seen["outer"] = (am.manual_axes, am.auto_axes)
        return kiln.shard_map(g, in_specs=P(None, "y"), out_specs=P(None, "y"),
                              axis_names={"y"})(v)

    with kiln.sharding.set_mesh(mesh):
        out = kiln.jit(lambda v: kiln.shard_map(h, in_specs=P("x"), out_specs=P("x"),
                                                axis_names={"x"})(v))(jnp.arange(32.)
                                                                      .reshape(4, 8))
    np.testing.assert_allclose(out, np.arange(32.).reshape(4, 8) ** 2)
    assert seen["outer"] == (("x",), ("y", "z"))
    assert seen["inner"] == (("x", "y"), ("z",), {"x", "y"})
    assert kiln.sharding.get_abstract_mesh().empty


def test_static_replication_check_eager(mesh):
    # JAX's check is on types, not values: x * 0 still varies along 'x'
    f = kiln.shard_map(lambda v: v * 0, mesh=mesh, in_specs=P("x"), out_specs=P())
    with pytest.raises(ValueError, match="require replication"):
        f(jnp.arange(4.))
    np.testing.assert_allclose(
        kiln.shard_map(lambda v: v * 0, mesh=mesh, in_specs=P("x"), out_specs=P(),
                       check_vma=False)(jnp.arange(4.)), [0., 0.])
    # collectives: psum/pmax make the value invariant; all_gather's result is varying
    # (JAX's types), axis_index varies along its axis
    g = kiln.shard_map(lambda v: (lax.psum(v, "x"), lax.pmax(v, "x")),
                       mesh=mesh, in_specs=P("x"), out_specs=(P(), P()))
    g(jnp.arange(4.))
    with pytest.raises(ValueError, match="require replication"):
        kiln.shard_map(lambda v: lax.all_gather(v, "x", tiled=True), mesh=mesh,
                       in_specs=P("x"), out_specs=P())(jnp.arange(4.))
    with pytest.raises(ValueError, match="replicated across mesh axis 'y'"):
        kiln.shard_map(lambda v: v + lax.axis_index("y"), mesh=mesh, in_specs=P("x"),
                       out_specs=P("x"))(jnp.arange(4))
    # cond joins its branches (as JAX, not its predicate); pcast inside a branch counts
    def h(a, b):
        return lax.cond(True, lambda a, b: lax.pcast(a, "y", to="varying"),
                        lambda a, b: lax.pcast(b, "x", to="varying"), a, b)
    kiln.shard_map(h, mesh=mesh, in_specs=(P("x"), P("y")), out_specs=P(("x", "y")))(
        jnp.arange(4), jnp.arange(4))
    with pytest.raises(ValueError, match="require replication"):
        kiln.shard_map(h, mesh=mesh, in_specs=(P("x"), P("y")), out_specs=P("x"))(
            jnp.arange(4), jnp.arange(4))
    k = kiln.shard_map(lambda a, b: lax.cond(jnp.any(b > 0), lambda a: a, lambda a: a + 1, a),
                       mesh=mesh, in_specs=(P("x"), P("y")), out_specs=P("x"))
    k(jnp.arange(4), jnp.arange(4))


def test_loop_carry_vma_error(mesh):
    def f(x, y):
        (a, b), _ = lax.scan(lambda c, _: ((c[1], c[0]), None), (x, y), None, length=2)
        return a, b
    sm = kiln.shard_map(f, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))
    with pytest.raises(TypeError, match=r"This might be fixed by applying `jax.lax.pcast\("
                                        r"\.\.\., \('x',\).*to the initial carry"):
        sm(jnp.arange(4.), jnp.arange(2.))

    def g(x, y):
        return f(x, lax.pcast(y, "x", to="varying"))
    kiln.shard_map(g, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))(
        jnp.arange(4.), jnp.arange(2.))

    def w(x, y):
        return lax.while_loop(lambda c: c[2] < 3, lambda c: (c[1], c[0], c[2] + 1), (x, y, 0))
    with pytest.raises(TypeError, match="body_fun function carry input"):
        kiln.shard_map(w, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))(
            jnp.arange(4.), jnp.arange(2.))


def test_partition_spec_repr_shows_reduced_axes():
    assert repr(P(None, reduced={"x"})) == "P(None, reduced={'x'})"
    assert repr(P("x", unreduced={"z", "y"}, reduced={"w"})) == \
        "P('x', unreduced={'y', 'z'}, reduced={'w'})"
    assert repr(P("x")) == "P('x',)" and repr(P()) == "P()"


def test_custom_vjp_fwd_of_vmap_traced_later_inside_scan():
    # the batched fwd runs when the scan is differentiated, after the vmap returned; it
    # returns a vjp function (closing over its inputs) as residuals
    @kiln.custom_vjp
    def g(x, y):
        return x, y
    g.defvjp(lambda x, y: kiln.vjp(lambda x, y: (x, y), x, y), lambda f, ct: f(ct))

    def f(x, y):
        x, y = lax.map(lambda xs: kiln.vmap(g)(xs[0], xs[1]), (x, y))
        return x.sum()
    dx, dy = kiln.grad(f, allow_int=True, argnums=(0, 1))(np.zeros((2, 4, 4), np.float32),
                                                          np.zeros((2, 4, 4), np.int32))
    np.testing.assert_allclose(dx, np.ones((2, 4, 4)))
    assert dy.dtype == kiln.dtypes.float0


def test_mat_varying_while_tracing_eager_body(mesh):
    seen = {}

    def f(a, b):
        seen["a"], seen["b"] = a.aval.mat.varying, kiln.typeof(b).mat.varying
        seen["psum"] = lax.psum(a, "x").aval.mat.varying
        seen["add"] = (a + b).aval.mat.varying
        seen["idx"] = lax.axis_index("y").aval.mat.varying
        seen["cond"] = lax.cond(True, lambda v: v + lax.axis_index("y"),
                                lambda v: v * lax.axis_index("y"), a).aval.mat.varying
        return a
    kiln.shard_map(f, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"),
                   check_vma=False)(jnp.arange(4), jnp.arange(2))
    assert seen == {"a": {"x"}, "b": frozenset(), "psum": frozenset(), "add": {"x"},
                    "idx": {"y"}, "cond": {"x", "y"}}


def test_error_texts_name_key_paths(mesh):
    def foo():
        return {"hi": [3.]}
    with pytest.raises(ValueError, match=r"out_specs\['hi'\] is P\('x',\) which has length "
                                         r"1, but foo\(\*args\)\['hi'\]\[0\] has shape "
                                         r"float32\[\], which has rank 0"):
        kiln.shard_map(foo, mesh=mesh, in_specs=(), out_specs={"hi": P("x")})()
    with pytest.raises(ValueError, match="which has length 1"):
        kiln.jit(lambda: kiln.shard_map(foo, mesh=mesh, in_specs=(),
                                        out_specs={"hi": P("x")})())()

    def bar(a):
        return a
    with pytest.raises(ValueError, match=r"in_specs\[0\]\['hi'\] is P\('x',\) .* the passed "
                                         r"args\[0\]\['hi'\]\[0\], where args\[0\] is bound to "
                                         r"bar's parameter 'a', has shape float32\[\]"):
        kiln.shard_map(bar, mesh=mesh, in_specs=({"hi": P("x")},), out_specs=P())(
            {"hi": [jnp.array(3.)]})
    with pytest.raises(ValueError, match=r"consider using an in_specs entry of `P\(\)`"):
        kiln.shard_map(bar, mesh=mesh, in_specs=P(None), out_specs=P())(3.)
    with pytest.raises(ValueError, match=r"different lengths of list at key path\n    "
                                         r"shard_map in_specs\[0\]"):
        kiln.shard_map(bar, mesh=mesh, in_specs=([P("x")],), out_specs=P("x"))(
            [jnp.ones(4), jnp.ones(4)])
    with pytest.raises(ValueError, match=r"out_specs is P\('x',\) which implies that the "
                                         r"corresponding output value is replicated across "
                                         r"mesh axis 'y'"):
        kiln.shard_map(lambda a: a, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x"))(
            jnp.ones((4, 4)))


def test_collective_outside_shard_map_message():
    with pytest.raises(NameError, match="Found an unbound axis name: x. To fix this, please "
                                        "call psum under `jax.shard_map`"):
        kiln.jit(lambda v: lax.psum(v, "x"))(jnp.arange(4.))


def test_cond_branches_must_vary_alike_eagerly(mesh):
    def f(a, b):
        return lax.cond(True, lambda a, b: a, lambda a, b: b, a, b)
    with pytest.raises(TypeError, match=r"applying `jax.lax.pcast\(\.\.\., \('y',\), "
                                        r"to='varying'\)` to the output of true_fun"):
        kiln.shard_map(f, mesh=mesh, in_specs=(P("x"), P("y")), out_specs=P(("x", "y")))(
            jnp.arange(4.), jnp.arange(4.))

    def g(a, b):
        return lax.cond(True, lambda a, b: lax.pcast(a, "y", to="varying"),
                        lambda a, b: lax.pcast(b, "x", to="varying"), a, b)
    kiln.shard_map(g, mesh=mesh, in_specs=(P("x"), P("y")), out_specs=P(("x", "y")))(
        jnp.arange(4.), jnp.arange(4.))


def test_mat_invarying_and_vur(mesh):
    seen = []

    def f(a):
        am = kiln.sharding.get_abstract_mesh()
        seen.append((a.aval.mat.invarying(am), lax.psum(a, "x").aval.mat.invarying(am),
                     a.aval.mat.vur))
        return a
    kiln.jit(kiln.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(jnp.ones(4))
    assert seen == [({"y"}, {"x", "y"}, {"x"})]


def test_eager_abstract_mesh_resolved_from_arguments(mesh):
    am = mesh.abstract_mesh
    f = kiln.shard_map(lambda v: v + lax.axis_index("x"), mesh=am, in_specs=P("x"),
                       out_specs=P("x"))
    a = kiln.device_put(jnp.zeros(4), NamedSharding(mesh, P("x")))
    out = f(a)
    np.testing.assert_allclose(out, [0., 0., 1., 1.])
    assert out.sharding == NamedSharding(mesh, P("x"))
    with pytest.raises(ValueError, match="Please pass `jax.Array`s with a `NamedSharding`"):
        f(jnp.zeros(4))
    other = Mesh(np.array(kiln.devices()[:4]), ("x",))
    with pytest.raises(ValueError, match="Mesh shape of the input"):
        f(kiln.device_put(jnp.zeros(4), NamedSharding(other, P("x"))))
    with kiln.sharding.set_mesh(mesh):      # or the mesh context's
        np.testing.assert_allclose(f(jnp.zeros(4)), [0., 0., 1., 1.])


def test_all_gather_to_invarying(mesh):
    g = kiln.shard_map(lambda v: lax.all_gather(v, "x", tiled=True, to="invarying"),
                       mesh=mesh, in_specs=P("x"), out_specs=P())
    x = jnp.arange(4.)
    for fn in (g, kiln.jit(g)):
        np.testing.assert_allclose(fn(x), np.arange(4.))
    # its transpose takes each device's chunk of the (invariant) cotangent
    np.testing.assert_allclose(kiln.grad(lambda v: (g(v) ** 2).sum())(x), 2 * np.arange(4.))
    h = kiln.shard_map(lambda v: kiln.grad(lambda u: (lax.all_gather(
        u, "x", tiled=True, to="invarying") ** 2).sum())(v), mesh=mesh, in_specs=P("x"),
        out_specs=P("x"))
    np.testing.assert_allclose(h(x), 2 * np.arange(4.))
    with pytest.raises(ValueError, match="require replication"):      # plain: varying
        kiln.shard_map(lambda v: lax.all_gather(v, "x", tiled=True), mesh=mesh,
                       in_specs=P("x"), out_specs=P())(x)


def test_vmap_spmd_axis_name_in_specs_error():
    mesh = Mesh(np.array(kiln.devices()).reshape(4, 2), ("i", "j"))
    f = kiln.shard_map(jnp.sin, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    xs = jnp.arange(4 * 16.).reshape(4, 16)
    with pytest.raises(ValueError, match="spmd_axis_name cannot appear in shard_map in_specs"):
        kiln.vmap(f, spmd_axis_name="i")(xs)
    g = kiln.shard_map(jnp.sin, mesh=mesh, in_specs=P("j"), out_specs=P(("i", "j")),
                       check_vma=False)
    with pytest.raises(ValueError, match="spmd_axis_name cannot appear in shard_map "
                                         "out_specs"):
        kiln.vmap(g, spmd_axis_name="i")(xs)
    h = kiln.shard_map(jnp.sin, mesh=mesh, in_specs=P("j"), out_specs=P("j"))
    np.testing.assert_allclose(kiln.vmap(h, spmd_axis_name="i")(xs), np.sin(xs), rtol=1e-6)
