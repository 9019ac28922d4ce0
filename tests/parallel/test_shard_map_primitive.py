"""The ``shard_map`` primitive: a traced shard_map is one equation (JAX's params), with
its batching, JVP, partial-evaluation, transpose and dce rules; values as before."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.interpreters import partial_eval as pe
from kiln.sharding import AxisType, Mesh, NamedSharding
from kiln.sharding import PartitionSpec as P


@pytest.fixture
def mesh4():
    return Mesh(np.array(kiln.devices()[:4]), ("i",))


@pytest.fixture
def mesh22():
    return Mesh(np.array(kiln.devices()[:4]).reshape(2, 2), ("x", "y"))


def _eqns(closed, name):
    return [e for e in closed.jaxpr.eqns if e.primitive.name == name]


def test_staged_as_one_equation_with_jax_params(mesh4):
    f = kiln.shard_map(lambda x: x * 2., mesh=mesh4, in_specs=P("i"), out_specs=P("i"))
    j = kiln.make_jaxpr(f)(jnp.arange(8.))
    e, = j.jaxpr.eqns
    assert e.primitive.name == "shard_map"
    assert e.params["in_specs"] == (P("i"),) and e.params["out_specs"] == (P("i"),)
    assert e.params["mesh"] is mesh4 and e.params["check_vma"] is True
    assert e.params["newly_manual_axes"] == frozenset({"i"})
    body = e.params["jaxpr"]
    assert [str(a.str_short()) for a in body.in_avals] == ["f32[2]"]
    # the invariant constant is pvary-ed to the varying operand's type (JAX's)
    assert [x.primitive.name for x in body.eqns] == ["pvary", "mul"]
    assert body.eqns[0].params["axes"] == ("i",)
    np.testing.assert_array_equal(kiln.jit(f)(jnp.arange(8.)), np.arange(8.) * 2)


def test_collective_of_invariant_operand_is_pvaried(mesh4):
    f = kiln.jit(kiln.shard_map(lambda x: lax.pmax(x, "i"), mesh=mesh4, in_specs=P(),
                                out_specs=P()))
    s = str(f.trace(jnp.arange(8.)).jaxpr)
    assert "pvary[axes=('i',)" in s
    np.testing.assert_array_equal(f(jnp.arange(8.)), np.arange(8.))
    g = kiln.shard_map(lambda x: lax.psum(x, "i"), mesh=mesh4, in_specs=P(),
                       out_specs=P(), check_vma=False)
    assert "pvary" not in str(kiln.make_jaxpr(g)(jnp.arange(8.)))
    np.testing.assert_array_equal(kiln.jit(g)(jnp.arange(8.)), 4 * np.arange(8.))


def test_closed_over_tracer_is_a_replicated_operand(mesh4):
    def outer(w, x):
        f = kiln.shard_map(lambda x: lax.psum(w * x, "i"), mesh=mesh4, in_specs=P("i"),
                           out_specs=P())
        return f(x)
    j = kiln.make_jaxpr(outer)(jnp.float32(3.), jnp.arange(8.))
    e, = _eqns(j, "shard_map")
    assert e.params["in_specs"] == (P(), P("i"))
    out = kiln.jit(outer)(jnp.float32(3.), jnp.arange(8.))
    np.testing.assert_allclose(out, 3 * np.arange(8.).reshape(4, 2).sum(0))


def test_vmap_with_spmd_axis_name_stages_batched_specs(mesh22):
    f = kiln.shard_map(lambda x: x, mesh=mesh22, in_specs=P(), out_specs=P())
    x = jnp.arange(16).reshape(4, 4)
    j = kiln.make_jaxpr(kiln.vmap(f, spmd_axis_name=("x", "y")))(x)
    e, = j.jaxpr.eqns
    assert e.params["in_specs"] == (P(("x", "y")),)
    assert e.params["out_specs"] == (P(("x", "y")),)
    h = kiln.shard_map(lambda a: a * lax.axis_index("y"), mesh=mesh22, in_specs=P("y"),
                       out_specs=P("y"))
    a = jnp.arange(2 * 8.).reshape(2, 8)
    want = kiln.vmap(h, spmd_axis_name="x")(a)
    np.testing.assert_array_equal(kiln.jit(kiln.vmap(h, spmd_axis_name="x"))(a), want)
    np.testing.assert_array_equal(want, np.asarray(a) * np.repeat(np.arange(2.), 4))


def test_grad_structure_known_and_transposed_shard_maps(mesh4):
    f = kiln.shard_map(lambda x: lax.exp(x), mesh=mesh4, in_specs=P("i"), out_specs=P("i"))
    x = jnp.arange(16.)
    j = kiln.make_jaxpr(kiln.grad(lambda x: f(x).sum()))(x)
    jj, _ = pe.dce_jaxpr(j.jaxpr, [True] * len(j.out_avals))
    e1, *_, e2 = jj.eqns
    assert e1.primitive.name == e2.primitive.name == "shard_map"
    assert len(e1.outvars) == 1           # the residual is the primal result, forwarded
    assert len(e2.invars) == 2 and sum(e1.outvars[0] is v for v in e2.invars) == 1
    np.testing.assert_allclose(kiln.jit(kiln.grad(lambda x: f(x).sum()))(x), np.exp(x),
                               rtol=1e-6)


@pytest.mark.parametrize("case", range(5))
def test_grad_through_rules_matches_eager(mesh22, case):
    cases = [
        (lambda a, b: lax.psum(a * b.sum(), "y"), (P("y"), P()), P()),
        (lambda a, b: jnp.sin(a) * lax.pmax(b, "x").sum(), (P("y"), P()), P("y")),
        (lambda a, b: lax.all_gather(a, "y", tiled=True)[:2] * b.sum(), (P("y"), P("x")),
         P(("x", "y"))),
        (lambda a, b: lax.ppermute(a, "y", [(0, 1), (1, 0)]) * jnp.cos(b).sum(),
         (P("y"), P("x")), P(("x", "y"))),
        (lambda a, b: lax.psum_scatter(a, "y", tiled=True) * b[:1].sum(), (P(), P()),
         P("y")),
    ]
    fn, ins, out = cases[case]
    f = kiln.shard_map(fn, mesh=mesh22, in_specs=ins, out_specs=out)
    a, b = jnp.linspace(0.1, 1.0, 8), jnp.linspace(-1., 2., 8)
    want = kiln.grad(lambda a, b: (f(a, b) ** 2).sum(), argnums=(0, 1))(a, b)
    got = kiln.jit(kiln.grad(lambda a, b: (kiln.jit(f)(a, b) ** 2).sum(),
                             argnums=(0, 1)))(a, b)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    j = kiln.make_jaxpr(kiln.grad(lambda a, b: (f(a, b) ** 2).sum(), argnums=(0, 1)))(a, b)
    assert len(_eqns(j, "shard_map")) == 2       # the known part and the transpose


def test_transpose_sums_cotangent_of_unreduced_operand():
    m = kiln.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
    with kiln.set_mesh(m):
        arr = kiln.device_put(jnp.arange(8, dtype=np.float32), P(unreduced={"x"}))

        @kiln.jit
        @kiln.shard_map(in_specs=P(unreduced={"x"}), out_specs=P("x"), check_vma=False)
        def f(x):
            return lax.psum_scatter(x, "x", tiled=True)

        jf = kiln.jit(kiln.grad(lambda x: f(x).sum()))
        assert "psum" in str(jf.trace(arr).jaxpr)
        out = jf(arr)       # JAX's values and layout
        np.testing.assert_array_equal(out, np.full(8, 2., np.float32))
        assert out.sharding == NamedSharding(m, P(None, reduced={"x"}))
        np.testing.assert_allclose(
            kiln.jit(kiln.grad(lambda x: jnp.sin(f(x)).sum()))(arr),
            [2., 1.0806046, -0.8322937, -1.979985, -1.3072872, 0.5673244, 1.9203405,
             1.5078045], rtol=1e-5)


def test_jit_of_unreduced_shard_map_keeps_partials():
    m = kiln.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
    with kiln.set_mesh(m):
        arr = kiln.device_put(np.arange(4.), P("x"))
        f = kiln.jit(kiln.shard_map(lambda x: x, in_specs=P("x"),
                                    out_specs=P(unreduced={"x"}), check_vma=False))
        out = f(arr)
        assert out.shape == (2,)
        assert out.sharding == NamedSharding(m, P(None, unreduced={"x"}))
        for o, a in zip(out.addressable_shards, arr.addressable_shards):
            np.testing.assert_array_equal(o.data, a.data)
        g = kiln.jit(kiln.shard_map(lambda x: x, in_specs=P(unreduced={"x"}),
                                    out_specs=P("x"), check_vma=False))
        np.testing.assert_array_equal(g(out), np.arange(4.))


def test_partially_manual_body_types():
    m = kiln.make_mesh((2, 2), ("i", "j"), axis_types=(AxisType.Explicit,) * 2)
    seen = {}

    def g(x):
        seen["in"] = x.aval.sharding
        out = x * x
        seen["out"] = out.aval.sharding
        return out

    @kiln.jit
    def f(x):
        y = kiln.shard_map(g, mesh=m, in_specs=P("i", None), out_specs=P("i", None),
                           axis_names=frozenset({"i"}))(x)
        seen["result"] = y.aval.sharding.spec
        return y

    v = kiln.device_put(jnp.arange(32.).reshape(4, 8), NamedSharding(m, P("i", "j")))
    out = f(v)
    assert tuple(seen["in"].mesh.axis_types) == (AxisType.Manual, AxisType.Explicit)
    assert seen["in"].spec == P(None, "j") and seen["out"].spec == P(None, "j")
    assert seen["result"] == P("i", "j")
    assert out.sharding == NamedSharding(m, P("i", "j"))
    np.testing.assert_array_equal(out, np.arange(32.).reshape(4, 8) ** 2)


def test_dce_rule_drops_unused_results(mesh4):
    f = kiln.shard_map(lambda x: (jnp.sin(x), jnp.cos(x)), mesh=mesh4, in_specs=P("i"),
                       out_specs=P("i"))
    j = kiln.make_jaxpr(lambda x: f(x)[1])(jnp.arange(8.))
    jj, _ = pe.dce_jaxpr(j.jaxpr, [True])
    e, = jj.eqns
    assert len(e.outvars) == 1 and e.params["out_specs"] == (P("i"),)
    assert [x.primitive.name for x in e.params["jaxpr"].eqns] == ["cos"]


def test_check_jaxpr_binds_the_body_axes(mesh4):
    from kiln.core.jaxpr import check_jaxpr
    f = kiln.shard_map(lambda x: lax.psum(x, "i"), mesh=mesh4, in_specs=P("i"),
                       out_specs=P())
    check_jaxpr(kiln.make_jaxpr(f)(jnp.arange(8.)).jaxpr)      # no unbound axis


def test_grad_of_jit_of_shard_map_forwards_residuals(mesh4):
    f = kiln.jit(kiln.shard_map(lambda x: (lax.exp(x.sum()) + x, lax.exp(x)), mesh=mesh4,
                                in_specs=P("i"), out_specs=P("i")))
    g = lambda x: sum(f(x)).sum()       # noqa: E731
    x = jnp.arange(16.)
    j = kiln.make_jaxpr(kiln.grad(g))(x)
    jj, _ = pe.dce_jaxpr(j.jaxpr, [True] * len(j.out_avals))
    e1, *_, e2 = jj.eqns
    assert len(e1.outvars) == 2         # one primal result (also a residual), one residual
    assert len(e2.invars) == 4          # two residuals, two cotangents
    assert sum(e1.outvars[-1] is v for v in e2.invars) == 1
    b = np.arange(16.).reshape(4, 4)
    want = (1 + np.exp(b.sum(1, keepdims=True)) * 4 + np.exp(b)).reshape(16)
    np.testing.assert_allclose(kiln.grad(g)(x), want, rtol=1e-5)
