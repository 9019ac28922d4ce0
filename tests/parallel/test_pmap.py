"""pmap: SPMD over 8 virtual devices, against vmap, NumPy and JAX's documented values."""
import functools
import threading

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def test_devices_are_eight():
    assert kiln.device_count() == 8 == len(kiln.devices()) == kiln.local_device_count()
    assert [d.id for d in kiln.devices()] == list(range(8))
    assert str(kiln.devices()[3]) == "cpu:3" and repr(kiln.devices()[3]) == "CpuDevice(id=3)"
    assert kiln.process_index() == 0 and kiln.process_count() == 1


def test_device_count_fixed_after_first_use():
    with pytest.raises(RuntimeError, match="before backends are"):
        kiln.config.update("jax_num_cpu_devices", 3)
    assert kiln.config.jax_num_cpu_devices == 8
    kiln.config.update("jax_num_cpu_devices", 8)      # the same value is fine


def test_normalize_seed_example():
    @functools.partial(kiln.pmap, axis_name="i")
    def normalize(x):
        return x / lax.psum(x, "i")
    y = normalize(jnp.arange(4.))
    np.testing.assert_array_equal(np.asarray(y),
                                  np.array([0., 1 / 6, 1 / 3, 0.5], np.float32))
    assert y.dtype == np.float32


def test_outputs_are_sharded_arrays():
    y = kiln.pmap(lambda x: x * 2, axis_name="i")(jnp.arange(8.).reshape(4, 2))
    s = y.sharding
    assert type(s).__name__ == "NamedSharding"
    assert repr(s) == ("NamedSharding(mesh=Mesh('i': 4, axis_types=(Auto,)), spec=P('i',), "
                       "memory_kind=device)")
    assert not y.is_fully_replicated
    shards = y.addressable_shards
    assert [sh.device.id for sh in shards] == [0, 1, 2, 3]
    assert shards[2].index == (slice(2, 3), slice(None))
    np.testing.assert_array_equal(np.asarray(shards[2].data), [[8., 10.]])
    assert y.devices() == set(kiln.devices()[:4])
    # and they act as ordinary arrays
    np.testing.assert_array_equal(np.asarray(y + 1), np.arange(8.).reshape(4, 2) * 2 + 1)


def test_runs_on_distinct_device_threads():
    seen = []

    def record(x):
        seen.append(threading.current_thread().name)
        return x
    f = kiln.pmap(lambda x: kiln.pure_callback(record, jax_shape(x), x))
    f(jnp.arange(4.))
    assert sorted(seen) == [f"kiln-device-{i}" for i in range(4)]


def jax_shape(x):
    return kiln.ShapeDtypeStruct(x.shape, x.dtype)


@pytest.mark.parametrize("in_axes,out_axes", [(0, 0), (1, 0), (0, 1), (-1, -1), (1, None)])
def test_pmap_equals_vmap_without_collectives(in_axes, out_axes):
    x = np.random.default_rng(0).standard_normal((3, 4, 3)).astype(np.float32)

    def f(v):
        return jnp.tanh(v) @ jnp.ones((v.shape[-1], 2), jnp.float32) + v.sum()
    if out_axes is None:
        def f(v):  # noqa: F811 - an output equal on every device
            return jnp.zeros(2) + 1.5
    got = kiln.pmap(f, in_axes=in_axes, out_axes=out_axes)(x)
    want = kiln.vmap(f, in_axes=in_axes, out_axes=out_axes)(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert got.shape == want.shape


def test_pytrees_kwargs_static_and_broadcast():
    def f(p, scale, *, b):
        return {"y": p["w"] * scale + b, "n": p["n"] + 1}
    g = kiln.pmap(f, in_axes=({"w": 0, "n": None}, None), static_broadcasted_argnums=())
    out = g({"w": jnp.arange(6.).reshape(3, 2), "n": jnp.int32(4)}, 2.0,
            b=jnp.ones((3, 2)))
    np.testing.assert_array_equal(np.asarray(out["y"]), np.arange(6.).reshape(3, 2) * 2 + 1)
    np.testing.assert_array_equal(np.asarray(out["n"]), [5, 5, 5])

    h = kiln.pmap(lambda x, n: x * n, static_broadcasted_argnums=1)
    np.testing.assert_array_equal(np.asarray(h(jnp.arange(3.), 3)), [0., 3., 6.])
    with pytest.raises(ValueError, match="Non-hashable static"):
        h(jnp.arange(3.), [3])


def test_collectives_against_numpy():
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    pm = functools.partial(kiln.pmap, axis_name="i")
    np.testing.assert_array_equal(np.asarray(pm(lambda v: lax.psum(v, "i"))(x)),
                                  np.broadcast_to(x.sum(0), x.shape))
    np.testing.assert_allclose(np.asarray(pm(lambda v: lax.pmean(v, "i"))(x)),
                               np.broadcast_to(x.mean(0), x.shape))
    np.testing.assert_array_equal(np.asarray(pm(lambda v: lax.pmax(v, "i"))(x)),
                                  np.broadcast_to(x.max(0), x.shape))
    np.testing.assert_array_equal(np.asarray(pm(lambda v: lax.pmin(v, "i"))(x)),
                                  np.broadcast_to(x.min(0), x.shape))
    np.testing.assert_array_equal(np.asarray(pm(lambda v: lax.axis_index("i"))(x)),
                                  [0, 1, 2, 3])
    g = np.asarray(pm(lambda v: lax.all_gather(v, "i"))(x))
    assert g.shape == (4, 4, 3) and all((g[k] == x).all() for k in range(4))
    gt = np.asarray(pm(lambda v: lax.all_gather(v, "i", tiled=True))(x))
    assert gt.shape == (4, 12) and (gt[1] == x.reshape(-1)).all()
    perm = [(0, 1), (1, 2), (2, 3)]
    pp = np.asarray(pm(lambda v: lax.ppermute(v, "i", perm))(x))
    np.testing.assert_array_equal(pp, np.stack([np.zeros(3), x[0], x[1], x[2]]))
    ints = np.arange(8, dtype=np.int32).reshape(4, 2)
    s = pm(lambda v: lax.psum(v, "i"))(ints)
    assert s.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(s), np.broadcast_to(ints.sum(0), ints.shape))


def test_collectives_inside_loops_and_jit():
    def f(v):
        def body(i, c):
            return lax.psum(c, "i") * 0.25 + i
        return kiln.jit(lambda c: lax.fori_loop(0, 3, body, c))(v)
    x = np.arange(4, dtype=np.float32)
    want = x.copy()
    for i in range(3):
        want = np.full(4, want.sum() * 0.25 + i, np.float32)
    np.testing.assert_allclose(np.asarray(kiln.pmap(f, axis_name="i")(x)), want)


def test_nested_pmap_and_transformations():
    x = jnp.arange(8.).reshape(2, 4)

    @kiln.pmap
    def f(v):
        return kiln.pmap(lambda y: jnp.sin(y) * 2.)(v)
    np.testing.assert_allclose(np.asarray(f(x)), np.sin(np.asarray(x)) * 2, rtol=1e-6)
    g = kiln.grad(lambda v: kiln.pmap(kiln.pmap(jnp.sin))(v).sum())(x)
    np.testing.assert_allclose(np.asarray(g), np.cos(np.asarray(x)), rtol=1e-6)
    # collectives of both axes in a nested pmap
    h = kiln.pmap(kiln.pmap(lambda y: lax.psum(y, ("i", "j")), axis_name="j"), axis_name="i")
    np.testing.assert_array_equal(np.asarray(h(x)), np.full((2, 4), 28.))
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.pmap(jnp.cos))(x)),
                               np.cos(np.asarray(x)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.vmap(kiln.pmap(jnp.cos))(x)),
                               np.cos(np.asarray(x)), rtol=1e-6)
    pg = kiln.pmap(kiln.grad(lambda v: (v ** 3).sum()))(x)
    np.testing.assert_allclose(np.asarray(pg), 3 * np.asarray(x) ** 2, rtol=1e-6)


def test_seed_nested_pmap_gradient_equals_vmap():
    x = jnp.arange(8.).reshape(4, 2) / 8

    def make(mapper):
        @mapper
        def f(x):
            y = jnp.sin(x)

            @mapper
            def g(z):
                return jnp.cos(z) * jnp.tan(y.sum()) * jnp.tan(x)
            return kiln.grad(lambda w: jnp.sum(g(w)))(x)
        return f
    fp, fv = make(kiln.pmap), make(kiln.vmap)
    np.testing.assert_allclose(np.asarray(fp(x)), np.asarray(fv(x)), rtol=1e-5)
    gp = kiln.grad(lambda x: jnp.sum(fp(x)))(x)
    gv = kiln.grad(lambda x: jnp.sum(fv(x)))(x)
    np.testing.assert_allclose(np.asarray(gp), np.asarray(gv), rtol=1e-5)


def test_grad_of_collectives_matches_finite_differences():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3)).astype(np.float64)

    def loss(v):
        y = kiln.pmap(lambda a: jnp.sin(a) * lax.psum(a * a, "i") - lax.pmax(a, "i"),
                      axis_name="i")(v)
        return (y * jnp.arange(1., 4.)).sum()
    with kiln.enable_x64():
        g = np.asarray(kiln.grad(loss)(x))
        eps = 1e-6
        fd = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            d = np.zeros_like(x)
            d[idx] = eps
            fd[idx] = (float(loss(x + d)) - float(loss(x - d))) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


def test_data_parallel_sgd_equals_single_device():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 5)).astype(np.float32)
    Y = rng.standard_normal((8,)).astype(np.float32)
    w0 = np.zeros(5, np.float32)

    def loss(w, x, y):
        return jnp.mean((x @ w - y) ** 2)

    @functools.partial(kiln.pmap, axis_name="d", in_axes=(None, 0, 0))
    def step(w, x, y):
        g = kiln.grad(loss)(w, x, y)
        return w - 0.1 * lax.pmean(g, "d")

    w_par, w_one = jnp.asarray(w0), jnp.asarray(w0)
    for _ in range(5):
        w_par = step(w_par, X.reshape(4, 2, 5), Y.reshape(4, 2))[0]
        w_one = w_one - 0.1 * kiln.grad(loss)(w_one, X, Y)
        np.testing.assert_allclose(np.asarray(w_par), np.asarray(w_one), rtol=2e-6, atol=1e-7)


def test_random_matrices_seed_example_small(jax8):
    keys = kiln.random.split(kiln.random.key(0), 8)
    mats = kiln.pmap(lambda key: kiln.random.normal(key, (50, 60)))(keys)
    result = kiln.pmap(lambda x: jnp.dot(x, x.T))(mats)
    means = kiln.pmap(jnp.mean)(result)
    assert mats.shape == (8, 50, 60) and result.shape == (8, 50, 50) and means.shape == (8,)
    for i in range(8):
        np.testing.assert_array_equal(np.asarray(mats[i]),
                                      np.asarray(kiln.random.normal(keys[i], (50, 60))))
    jax = jax8
    jkeys = jax.random.split(jax.random.key(0), 8)
    jm = np.stack([np.asarray(jax.random.normal(k, (50, 60))) for k in jkeys])
    np.testing.assert_array_equal(np.asarray(mats), jm)
    np.testing.assert_allclose(np.asarray(means), (jm @ jm.transpose(0, 2, 1)).mean((1, 2)),
                               rtol=1e-5)


def test_bad_input_errors():
    with pytest.raises(ValueError, match="requires 9 logical devices, but only 8"):
        kiln.pmap(lambda x: x)(jnp.ones(9))
    with pytest.raises(ValueError, match="inconsistent sizes"):
        kiln.pmap(lambda x, y: x + y)(jnp.ones(2), jnp.ones(3))
    with pytest.raises(NameError, match="unbound axis name: j"):
        kiln.pmap(lambda x: lax.psum(x, "j"), axis_name="i")(jnp.ones(2))
    with pytest.raises(ValueError, match="along axis 2"):
        kiln.pmap(lambda x: x, in_axes=2)(jnp.ones(2))
    with pytest.raises(ValueError, match="len\\(in_axes\\)=2"):
        kiln.pmap(lambda x: x, in_axes=(0, 0))(jnp.ones(2))
    with pytest.raises(ValueError, match="at least one argument with a mapped axis"):
        kiln.pmap(lambda x: x, in_axes=None)(jnp.ones(2))
    with pytest.raises(ValueError, match="static_broadcasted_argnums"):
        kiln.pmap(lambda x: x, static_broadcasted_argnums=3)(jnp.ones(2))
    with pytest.raises(TypeError):
        kiln.pmap(3)


def test_error_on_one_device_stops_the_others():
    def boom(v):
        if float(v) == 2.0:
            raise ZeroDivisionError("device 2 failed")
        return v

    def f(x):
        y = kiln.pure_callback(boom, jax_shape(x), x)
        return lax.psum(y, "i")
    # As JAX: a callback's exception reaches the caller as a JaxRuntimeError whose
    # message carries the callback's traceback.
    with pytest.raises(kiln.errors.JaxRuntimeError, match="device 2 failed"):
        kiln.pmap(f, axis_name="i")(jnp.arange(4.))
    # the devices are usable afterwards
    np.testing.assert_array_equal(
        np.asarray(kiln.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(jnp.arange(4.))),
        [6., 6., 6., 6.])


def test_axis_size_and_devices_argument():
    f = kiln.pmap(lambda: lax.axis_index("i") * 1.0, axis_name="i", axis_size=3)
    np.testing.assert_array_equal(np.asarray(f()), [0., 1., 2.])
    devs = kiln.devices()[4:6]
    y = kiln.pmap(lambda v: v + 1, devices=devs)(jnp.zeros(2))
    assert {d.id for d in y.devices()} == {4, 5}


def test_donate_argnums_deletes_input():
    x = jnp.arange(4.)
    y = kiln.pmap(lambda v: v * 2, donate_argnums=0)(x)
    np.testing.assert_array_equal(np.asarray(y), [0., 2., 4., 6.])
    assert x.is_deleted()
    with pytest.raises(RuntimeError):
        np.asarray(x + 1)


def test_pmap_lower_and_compile():
    """``pmap(f).lower(*args)`` is a ``jax.stages.Lowered`` (as JAX's): ``as_text()``,
    ``compile()`` (compiler option names checked), and the compiled executable computes
    what ``pmap(f)`` does and rejects other argument types."""
    from kiln.errors import JaxRuntimeError
    from kiln.stages import Compiled, Lowered

    def f(x, y):
        return 2 * x + y

    x = jnp.arange(2.0)
    pf = kiln.pmap(f, axis_name="i", in_axes=(0, None))
    lowered = pf.lower(x, 4.0)
    assert isinstance(lowered, Lowered) and "mul" in lowered.as_text()
    compiled = lowered.compile()
    assert isinstance(compiled, Compiled)
    np.testing.assert_allclose(compiled(x, 4.0), [4.0, 6.0])
    np.testing.assert_allclose(compiled(x, 4.0), pf(x, 4.0))
    with pytest.raises(TypeError, match="Argument types differ"):
        compiled(jnp.arange(3.0), 4.0)
    with pytest.raises(JaxRuntimeError, match="No such compile option"):
        lowered.compile(compiler_options={"not an option": 1})


def test_nested_pmap_needs_the_product_of_devices():
    """A pmap nested in another stands for devices too: 8 x 2 positions need 16 devices
    (JAX's "requires 16 logical devices"); vmap around pmap takes none."""
    n = kiln.device_count()
    f = kiln.pmap(lambda x: kiln.pmap(lambda y: 2 * y)(x))
    with pytest.raises(ValueError, match=f"requires {2 * n} logical devices"):
        f(np.ones((n, 2, 3)))
    np.testing.assert_array_equal(f(np.ones((n // 2, 2, 3))), np.full((n // 2, 2, 3), 2.))
    with pytest.raises(ValueError, match=f"requires {n + 1} logical devices"):
        kiln.jit(kiln.pmap(lambda y: 2 * y))(np.ones((n + 1,)))
    out = kiln.vmap(kiln.pmap(lambda y: 2 * y))(np.ones((2 * n, 2)))
    assert out.shape == (2 * n, 2)


def test_pmap_compiled_stages_api():
    """``lower`` of abstract arguments (``core.ShapedArray``); ``runtime_executable``;
    JAX's text for a pytree mismatch and for compile option values XLA refuses."""
    from kiln.core import ShapedArray
    from kiln.errors import JaxRuntimeError
    f = kiln.pmap(lambda x: x - lax.pmean(x, "i"), axis_name="i")
    x = np.arange(8., dtype=np.float32).reshape(2, 4)
    compiled = f.lower(ShapedArray(x.shape, x.dtype)).compile()
    np.testing.assert_allclose(compiled(x), f(x))
    assert compiled.runtime_executable() is not None
    with pytest.raises(TypeError, match=r"Function compiled with input pytree does not match"
                       r"[^\n]*\n    \* at args\[0\], seen pytree leaf but now given "
                       r"<class 'list'>, so their Python types differ"):
        compiled([x])
    lowered = f.lower(x)
    with pytest.raises(JaxRuntimeError, match="xla_embed_ir_in_executable, 'nope' is not "
                       "a valid bool value"):
        lowered.compile(compiler_options={"xla_embed_ir_in_executable": "nope"})
    with pytest.raises(JaxRuntimeError, match="'1.5' is not a valid int32 value"):
        lowered.compile(compiler_options={"xla_gpu_autotune_level": 1.5})
    lowered.compile(compiler_options={"xla_embed_ir_in_executable": True,
                                      "xla_gpu_autotune_level": "0"})
    jc = kiln.jit(lambda v: v + 1).lower(1.).compile()
    assert jc.runtime_executable() is not None
    with pytest.raises(TypeError, match="Function compiled with input pytree"):
        jc([1.])


def test_copy_of_sharded_array_keeps_its_layout():
    from kiln.sharding import Mesh, NamedSharding, PartitionSpec
    s = NamedSharding(Mesh(np.array(kiln.devices()), "x"), PartitionSpec("x"))
    out = kiln.device_put(jnp.arange(float(kiln.device_count())), s)
    cp = jnp.copy(out)
    assert cp.sharding == out.sharding
    np.testing.assert_array_equal(cp, out)
    assert cp.unsafe_buffer_pointer() != out.unsafe_buffer_pointer()


def test_ordered_effects_refused_over_several_devices(capsys):
    """JAX refuses ordered callbacks in a pmap over more than one device (their order
    across devices is undefined); unordered ones print once per device."""
    f = kiln.pmap(lambda x: kiln.debug.print("{}", x, ordered=True))
    with pytest.raises(ValueError, match="ordered effects are not supported for more "
                       "than 1 device"):
        f(jnp.arange(2))
    g = kiln.pmap(lambda x: lax.cond(x > 0, lambda: kiln.debug.print("c", ordered=True),
                                     lambda: None))
    with pytest.raises(ValueError, match="ordered debug_print"):
        g(jnp.arange(2))
    f(jnp.arange(1))        # one device: allowed
    kiln.pmap(lambda x: kiln.debug.print("u{}", x))(jnp.arange(2))
    assert sorted(capsys.readouterr().out.split()) == ["0", "u0", "u1"]
