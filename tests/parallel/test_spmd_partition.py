"""``jit(f, in_shardings=, out_shardings=)`` partitioned over a mesh (``kiln.parallel.partition``):
per-device programs on local shapes with collectives, checked against the one-program
``jit`` and JAX; ``typeof`` of explicitly sharded arrays against JAX."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.sharding import AxisType, NamedSharding
from kiln.sharding import PartitionSpec as P


def _mesh(shape, names, **kw):
    return kiln.make_mesh(shape, names, **kw)


def _prims(closed) -> list:
    return [e.primitive.name for e in closed.jaxpr.eqns]


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _mlp_loss(params, x, y):
    w1, b1, w2 = params
    h = jnp.tanh(x @ w1 + b1)
    return jnp.mean((h @ w2 - y) ** 2)


def _step(params, x, y):
    loss, grads = kiln.value_and_grad(_mlp_loss)(params, x, y)
    return loss, [p - 0.1 * g for p, g in zip(params, grads)]


def _mlp_data(rng, b=16, d=8, h=12, o=4):
    f = np.float32
    params = [rng.standard_normal((d, h)).astype(f) * 0.3, rng.standard_normal(h).astype(f),
              rng.standard_normal((h, o)).astype(f) * 0.3]
    return params, rng.standard_normal((b, d)).astype(f), rng.standard_normal((b, o)).astype(f)


def test_data_parallel_mlp_step(rng, jax8):
    mesh = _mesh((4,), ("x",))
    params, x, y = _mlp_data(rng)
    rep, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("x"))
    f = kiln.jit(_step, in_shardings=(rep, batch, batch))
    loss, new = f(params, x, y)
    ref_loss, ref_new = kiln.jit(_step)(params, x, y)
    _close(loss, ref_loss)
    for a, b in zip(new, ref_new):
        _close(a, b)
    # JAX's values for the same step.
    jnp_ = jax8.numpy

    def jloss(ps, x, y):
        w1, b1, w2 = ps
        return jnp_.mean((jnp_.tanh(x @ w1 + b1) @ w2 - y) ** 2)
    jl, jg = jax8.value_and_grad(jloss)(params, x, y)
    _close(loss, jl)
    for a, p, g in zip(new, params, jg):
        _close(a, p - 0.1 * np.asarray(g))
    assert loss.sharding == rep and all(p.sharding == rep for p in new)
    # Each device really ran on its quarter of the batch, with a psum for the mean and
    # for each weight gradient (a contraction over the split batch).
    local = f.spmd_jaxpr(params, x, y)
    assert [tuple(a.shape) for a in local.in_avals] == [(8, 12), (12,), (12, 4), (4, 8), (4, 4)]
    names = _prims(local)
    assert names.count("psum") == 4, names
    assert "all_gather" not in names
    assert f._programs and len(f._programs) == 1
    f(params, x, y)
    assert len(f._programs) == 1        # cached per (jaxpr, shardings)


def test_forward_batch_split_values_and_sharding(rng, jax8):
    mesh = _mesh((8,), ("x",))
    params, x, _ = _mlp_data(rng)

    def fwd(params, x):
        w1, b1, w2 = params
        return jnp.tanh(x @ w1 + b1) @ w2
    f = kiln.jit(fwd, in_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("x"))))
    out = f(params, x)
    _close(out, kiln.jit(fwd)(params, x))
    jmesh = jax8.make_mesh((8,), ("x",))
    jf = jax8.jit(lambda ps, x: jax8.numpy.tanh(x @ ps[0] + ps[1]) @ ps[2],
                  in_shardings=(jax8.NamedSharding(jmesh, jax8.P()),
                                jax8.NamedSharding(jmesh, jax8.P("x"))))
    jout = jf(params, x)
    _close(out, jout)
    assert tuple(out.sharding.spec) == tuple(jout.sharding.spec) == ("x",)
    shards = out.addressable_shards
    assert len(shards) == 8
    for s in shards:
        np.testing.assert_array_equal(np.asarray(s.data), np.asarray(out)[s.index])
        assert s.data.shape == (2, 4)


def test_contracting_dim_split_is_local_dot_plus_psum(rng):
    mesh = _mesh((4,), ("x",))
    a = rng.standard_normal((6, 16)).astype(np.float32)
    b = rng.standard_normal((16, 5)).astype(np.float32)
    f = kiln.jit(lambda a, b: a @ b, in_shardings=(NamedSharding(mesh, P(None, "x")),
                                                   NamedSharding(mesh, P("x", None))))
    out = f(a, b)
    _close(out, a @ b)
    assert out.sharding.spec == P()
    local = f.spmd_jaxpr(a, b)
    assert _prims(local) == ["dot_general", "psum"]
    assert [tuple(v.shape) for v in local.in_avals] == [(6, 4), (4, 5)]


def test_2d_mesh_batch_and_model_split(rng, jax8):
    mesh = _mesh((4, 2), ("x", "y"))
    params, x, _ = _mlp_data(rng)

    def fwd(w1, w2, x):
        return jnp.tanh(x @ w1) @ w2
    f = kiln.jit(fwd, in_shardings=(NamedSharding(mesh, P(None, "y")),
                                    NamedSharding(mesh, P("y", None)),
                                    NamedSharding(mesh, P("x", None))))
    w1, _, w2 = params
    out = f(w1, w2, x)
    _close(out, np.tanh(x @ w1) @ w2, 1e-4)
    assert out.sharding.spec == P("x")
    local = f.spmd_jaxpr(w1, w2, x)
    assert [tuple(v.shape) for v in local.in_avals] == [(8, 6), (6, 4), (4, 8)]
    psums = [e for e in local.jaxpr.eqns if e.primitive.name == "psum"]
    assert len(psums) == 1 and psums[0].params["axes"] == ("y",)
    jmesh = jax8.make_mesh((4, 2), ("x", "y"), axis_types=(jax8.sharding.AxisType.Auto,) * 2)
    js = [jax8.NamedSharding(jmesh, jax8.P(*s)) for s in ((None, "y"), ("y", None), ("x",))]
    jout = jax8.jit(lambda a, b, c: jax8.numpy.tanh(c @ a) @ b, in_shardings=tuple(js))(
        w1, w2, x)
    _close(out, jout, 1e-4)
    assert tuple(jout.sharding.spec) == tuple(out.sharding.spec)
    # the gradient of a loss through both splits
    g = kiln.jit(kiln.grad(lambda w1, w2, x: jnp.sum(fwd(w1, w2, x) ** 2)),
                 in_shardings=f._in)(w1, w2, x)
    _close(g, kiln.grad(lambda w1, w2, x: jnp.sum(fwd(w1, w2, x) ** 2))(w1, w2, x), 1e-4)


def test_out_shardings_differ_from_propagated(rng):
    mesh = _mesh((4, 2), ("x", "y"))
    a = rng.standard_normal((8, 6)).astype(np.float32)

    def f(a):
        return jnp.sin(a), jnp.sum(a, axis=1), a * 2
    outs = (NamedSharding(mesh, P(None, "y")), NamedSharding(mesh, P("y")),
            NamedSharding(mesh, P()))
    g = kiln.jit(f, in_shardings=NamedSharding(mesh, P("x", None)), out_shardings=outs)
    o1, o2, o3 = g(a)
    _close(o1, np.sin(a))
    _close(o2, a.sum(1))
    _close(o3, a * 2)
    assert [o.sharding for o in (o1, o2, o3)] == list(outs)
    for o in (o1, o2, o3):
        for s in o.addressable_shards:
            np.testing.assert_array_equal(np.asarray(s.data), np.asarray(o)[s.index])
    names = _prims(g.spmd_jaxpr(a))
    assert "all_gather" in names and "dynamic_slice" in names
    # An out_sharding alone (replicated inputs) splits the outputs.
    h = kiln.jit(lambda a: a + 1, out_shardings=NamedSharding(mesh, P("x", "y")))
    r = h(a)
    _close(r, a + 1)
    assert r.sharding.spec == P("x", "y")
    assert tuple(h.spmd_jaxpr(a).out_avals[0].shape) == (2, 3)


def test_primitive_without_rule_runs_replicated(rng):
    mesh = _mesh((4,), ("x",))
    a = rng.standard_normal((8, 3)).astype(np.float32)

    def f(a):
        loop = lax.fori_loop(0, 3, lambda i, c: c * 1.5 + 1.0, a)
        return loop, jnp.sort(a, axis=0), a[jnp.array([5, 0, 7])]
    g = kiln.jit(f, in_shardings=NamedSharding(mesh, P("x")))
    outs = g(a)
    for o, r in zip(outs, kiln.jit(f)(a)):
        _close(o, r)
    assert [o.sharding.spec for o in outs] == [P(), P(), P()]
    local = g.spmd_jaxpr(a)
    names = _prims(local)
    assert "scan" in names and "sort" in names and "all_gather" in names
    sort = next(e for e in local.jaxpr.eqns if e.primitive.name == "sort")
    assert tuple(sort.outvars[0].aval.shape) == (8, 3)     # the global shape: replicated


def test_axis_local_ops_keep_other_splits(rng):
    mesh = _mesh((4, 2), ("x", "y"))
    a = rng.standard_normal((8, 6)).astype(np.float32)

    def f(a):
        return (jnp.cumsum(a, axis=1), jnp.argmax(a, axis=0), a.reshape(4, 2, 6).sum(1),
                a.T, jax_softmax(a), jnp.max(a))
    g = kiln.jit(f, in_shardings=NamedSharding(mesh, P("x", "y")))
    outs = g(a)
    for o, r in zip(outs, kiln.jit(f)(a)):
        _close(o, r)
    assert [o.sharding.spec for o in outs] == [P("x"), P("y"), P("x", "y"), P("y", "x"),
                                               P("x", "y"), P()]


def jax_softmax(a):
    return kiln.nn.softmax(a, axis=1)


def test_under_transformations_one_program(rng):
    mesh = _mesh((4,), ("x",))
    a = rng.standard_normal((8, 3)).astype(np.float32)
    f = kiln.jit(lambda a: jnp.sum(jnp.sin(a) ** 2), in_shardings=NamedSharding(mesh, P("x")))
    _close(kiln.grad(f)(a), 2 * np.sin(a) * np.cos(a))
    _close(kiln.vmap(f)(a), (np.sin(a) ** 2).sum(1))
    _close(kiln.jit(lambda a: f(a) * 2)(a), 2 * (np.sin(a) ** 2).sum())
    # one device or nothing split: no partitioning
    one = kiln.jit(lambda a: a + 1, in_shardings=NamedSharding(_mesh((1,), ("x",)), P("x")))
    assert one.spmd_jaxpr(a) is None
    rep = kiln.jit(lambda a: a + 1, in_shardings=NamedSharding(mesh, P()))
    assert rep.spmd_jaxpr(a) is None


def test_dump_prints_per_device_jaxpr(rng, monkeypatch, capfd):
    monkeypatch.setenv("KILN_DUMP", "spmd")
    mesh = _mesh((2,), ("x",))
    f = kiln.jit(lambda a: a.sum(), in_shardings=NamedSharding(mesh, P("x")))
    _close(f(np.ones(6, np.float32)), 6.0)
    err = capfd.readouterr().err
    assert "kiln spmd: <lambda>" in err and "a:f32[3]" in err and "psum[axes=('x',)" in err


def _errors(thunk):
    with pytest.raises(Exception) as e:
        thunk()
    return type(e.value).__name__, str(e.value)


def test_errors_match_jax(jax8):
    mesh = _mesh((4, 2), ("x", "y"))
    jmesh = jax8.make_mesh((4, 2), ("x", "y"))
    a = np.ones((6, 4), np.float32)
    k = _errors(lambda: kiln.jit(lambda v: v * 2, in_shardings=NamedSharding(mesh, P("x")))(a))
    j = _errors(lambda: jax8.jit(lambda v: v * 2,
                                 in_shardings=jax8.NamedSharding(jmesh, jax8.P("x")))(a))
    assert k == j and k[0] == "IndivisibleError"
    k = _errors(lambda: kiln.jit(lambda v: v[:3], out_shardings=NamedSharding(mesh, P("x")))(
        np.ones(8, np.float32)))
    j = _errors(lambda: jax8.jit(lambda v: v[:3],
                                 out_shardings=jax8.NamedSharding(jmesh, jax8.P("x")))(
        np.ones(8, np.float32)))
    assert k == j
    k = _errors(lambda: NamedSharding(mesh, P("x", "x")))
    j = _errors(lambda: jax8.NamedSharding(jmesh, jax8.P("x", "x")))
    assert k == j and k[0] == "DuplicateSpecError"
    k = _errors(lambda: NamedSharding(mesh, P("z")))
    j = _errors(lambda: jax8.NamedSharding(jmesh, jax8.P("z")))
    assert k == j


@pytest.mark.parametrize("spec,types", [
    (("x", None), None), ((("x", "y"), None), None), ((None, "y"), None),
    ((None, None), None), (("x", "y"), ("Auto", "Explicit")), (("x", "y"), ("Auto", "Auto")),
])
def test_typeof_shows_explicit_sharding(jax8, spec, types):
    kw = {} if types is None else {"axis_types": tuple(getattr(AxisType, t) for t in types)}
    jkw = {} if types is None else {
        "axis_types": tuple(getattr(jax8.sharding.AxisType, t) for t in types)}
    x = kiln.device_put(jnp.ones((8, 6)), NamedSharding(_mesh((4, 2), ("x", "y"), **kw),
                                                         P(*spec)))
    jx = jax8.device_put(jax8.numpy.ones((8, 6)),
                         jax8.NamedSharding(jax8.make_mesh((4, 2), ("x", "y"), **jkw),
                                            jax8.P(*spec)))
    t, jt = kiln.typeof(x), jax8.typeof(jx)
    assert str(t) == str(jt)
    assert repr(t) == repr(jt)
    assert repr(t.sharding) == repr(jt.sharding)
    assert t.update(shape=(2, 6)).sharding == t.sharding
    assert (t == kiln.typeof(jnp.ones((8, 6)))) == (jt == jax8.typeof(jax8.numpy.ones((8, 6))))
    assert t == kiln.typeof(x)


def test_typeof_of_partitioned_output(rng):
    mesh = _mesh((4,), ("x",))
    out = kiln.jit(lambda a: a * 2, in_shardings=NamedSharding(mesh, P("x")))(
        np.ones((8, 6), np.float32))
    assert str(kiln.typeof(out)) == "float32[8@x,6]"
    assert kiln.typeof(out).str_short() == "f32[8@x,6]"


def test_with_sharding_constraint_reshards_inside(rng):
    mesh = _mesh((4, 2), ("x", "y"))
    a = rng.standard_normal((8, 4)).astype(np.float32)
    s = NamedSharding(mesh, P(None, "x"))

    def f(a):
        return jnp.sin(lax.with_sharding_constraint(a * 2, s)) + 1
    # A primitive in the jaxpr (as JAX's), the identity when not partitioned.
    jaxpr = kiln.make_jaxpr(f)(a)
    assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["mul", "sharding_constraint",
                                                            "sin", "add"]
    _close(kiln.jit(f)(a), np.sin(2 * a) + 1)
    _close(kiln.grad(lambda a: f(a).sum())(a), 2 * np.cos(2 * a))
    _close(kiln.vmap(f)(a[None])[0], np.sin(2 * a) + 1)
    g = kiln.jit(f, in_shardings=NamedSharding(mesh, P("x")))
    out = g(a)
    _close(out, np.sin(2 * a) + 1)
    assert out.sharding.spec == P(None, "x")
    local = g.spmd_jaxpr(a)
    sin = next(e for e in local.jaxpr.eqns if e.primitive.name == "sin")
    assert tuple(sin.outvars[0].aval.shape) == (8, 1)      # computed on the new split
    with pytest.raises(ValueError, match="partitioned 4 times"):
        kiln.jit(lambda v: lax.with_sharding_constraint(v, s))(np.ones((4, 6), np.float32))


def test_repeated_reshard_calls_read_no_reused_buffers(rng):
    """An ``all_gather`` reads every participant's operand after the barrier; a fast device
    thread must not overwrite its operand's memory (its next call reuses the program's
    buffers) while a slower one still reads it. Before the fix about 4% of these calls
    returned other calls' elements."""
    mesh = _mesh((4, 2), ("x", "y"))
    a = rng.standard_normal((8, 4)).astype(np.float32)
    s = NamedSharding(mesh, P(None, "x"))
    g = kiln.jit(lambda a: jnp.sin(lax.with_sharding_constraint(a * 2, s)) + 1,
                 in_shardings=NamedSharding(mesh, P("x")))
    want = np.sin(2 * a) + 1
    bad = sum(not np.allclose(np.asarray(g(a)), want, atol=1e-5) for _ in range(200))
    assert bad == 0
