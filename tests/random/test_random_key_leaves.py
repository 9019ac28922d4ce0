"""Typed PRNG keys are pytree leaves and ``kiln.Array``s, and cross every transformation
as keys (checked against JAX where it is installed)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.random as random
from kiln import dtypes, lax

jax = pytest.importorskip("jax")
jrandom = jax.random


def _data(k):
    return np.asarray(random.key_data(k))


def _jdata(k):
    return np.asarray(jrandom.key_data(k))


def test_keys_are_tree_leaves():
    k = random.key(0)
    jk = jrandom.key(0)
    tree = {"k": k, "x": 1.0, "ks": random.split(k, 3)}
    jtree = {"k": jk, "x": 1.0, "ks": jrandom.split(jk, 3)}
    leaves = kiln.tree.leaves(tree)
    assert len(leaves) == len(jax.tree.leaves(jtree)) == 3
    assert leaves[0] is k
    assert str(kiln.tree.structure(tree)) == str(jax.tree.structure(jtree))
    assert str(kiln.tree_util.tree_structure(k)) == str(jax.tree_util.tree_structure(jk)) \
        == "PyTreeDef(*)"
    dts = kiln.tree.map(lambda t: t.dtype, {n: v for n, v in tree.items() if n != "x"})
    jdts = jax.tree.map(lambda t: t.dtype, {n: v for n, v in jtree.items() if n != "x"})
    assert {n: str(d) for n, d in dts.items()} == {n: str(d) for n, d in jdts.items()}
    assert kiln.tree_util.tree_flatten(k)[0] == [k]
    shapes = kiln.tree.map(np.shape, tree)
    assert shapes == jax.tree.map(np.shape, jtree)


def test_key_is_array_and_typeof():
    k = random.key(0)
    ks = random.split(k, 3)
    assert isinstance(k, kiln.Array)
    assert str(kiln.typeof(k)) == str(jax.typeof(jrandom.key(0))) == "key<fry>[]"
    assert repr(kiln.typeof(ks)) == repr(jax.typeof(jrandom.split(jrandom.key(0), 3)))
    seen = []

    def f(k):
        seen.append((str(kiln.typeof(k)), isinstance(k, kiln.Array)))
        return random.normal(k)
    kiln.jit(f)(k)
    kiln.vmap(f)(ks)
    assert seen == [("key<fry>[]", True), ("key<fry>[]", True)]


def test_jit_vmap_outputs_are_keys():
    k, jk = random.key(1), jrandom.key(1)
    out = kiln.jit(lambda k: random.split(k, 4))(k)
    assert out.dtype == random.key(0).dtype and out.shape == (4,)
    np.testing.assert_array_equal(_data(out), _jdata(jrandom.split(jk, 4)))
    ks, jks = random.split(k, 3), jrandom.split(jk, 3)
    v = kiln.vmap(lambda k: random.split(k))(ks)
    assert v.shape == (3, 2)
    np.testing.assert_array_equal(_data(v), _jdata(jax.vmap(lambda k: jrandom.split(k))(jks)))
    v1 = kiln.vmap(lambda k: random.split(k), out_axes=1)(ks)
    assert v1.shape == (2, 3)
    np.testing.assert_array_equal(
        _data(v1), _jdata(jax.vmap(lambda k: jrandom.split(k), out_axes=1)(jks)))


def test_vmap_in_axes_over_keys():
    ks, jks = random.split(random.key(2), 3), jrandom.split(jrandom.key(2), 3)
    got = kiln.vmap(lambda d: random.normal(d["k"]), in_axes=({"k": 0},))({"k": ks})
    want = jax.vmap(lambda d: jrandom.normal(d["k"]), in_axes=({"k": 0},))({"k": jks})
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    k2 = ks.reshape((1, 3))
    got = kiln.vmap(lambda k, x: random.normal(k[0]) * x, in_axes=(1, None))(k2, 2.0)
    want = jax.vmap(lambda k, x: jrandom.normal(k[0]) * x, in_axes=(1, None))(
        jks.reshape((1, 3)), 2.0)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_control_flow_carries():
    k, jk = random.key(3), jrandom.key(3)

    def body(c, _):
        return random.split(c)[0], random.normal(c)

    def jbody(c, _):
        return jrandom.split(c)[0], jrandom.normal(c)
    (c, ys), (jc, jys) = lax.scan(body, k, None, length=3), jax.lax.scan(jbody, jk, None,
                                                                          length=3)
    np.testing.assert_array_equal(_data(c), _jdata(jc))
    np.testing.assert_array_equal(np.asarray(ys), np.asarray(jys))
    _, ys = lax.scan(lambda c, kk: (c, random.normal(kk)), 0.0, random.split(k, 3))
    _, jys = jax.lax.scan(lambda c, kk: (c, jrandom.normal(kk)), 0.0, jrandom.split(jk, 3))
    np.testing.assert_array_equal(np.asarray(ys), np.asarray(jys))
    f = lax.fori_loop(0, 3, lambda i, c: random.split(c)[0], k)
    jf = jax.lax.fori_loop(0, 3, lambda i, c: jrandom.split(c)[0], jk)
    np.testing.assert_array_equal(_data(f), _jdata(jf))
    w, n = lax.while_loop(lambda c: c[1] < 3, lambda c: (random.split(c[0])[0], c[1] + 1),
                          (k, 0))
    jw, _ = jax.lax.while_loop(lambda c: c[1] < 3,
                               lambda c: (jrandom.split(c[0])[0], c[1] + 1), (jk, 0))
    np.testing.assert_array_equal(_data(w), _jdata(jw))
    for pred in (True, False):
        c = lax.cond(pred, lambda k: random.split(k)[0], lambda k: k, k)
        jc = jax.lax.cond(pred, lambda k: jrandom.split(k)[0], lambda k: k, jk)
        assert c.dtype == k.dtype
        np.testing.assert_array_equal(_data(c), _jdata(jc))


def test_grad_with_keys():
    k, jk = random.key(4), jrandom.key(4)
    g = kiln.grad(lambda k, x: x * random.normal(k), argnums=1)(k, 2.0)
    jg = jax.grad(lambda k, x: x * jrandom.normal(k), argnums=1)(jk, 2.0)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(jg))
    with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs .* but "
                       "got key<fry>"):
        kiln.grad(lambda k, x: x)(k, 1.0)
    with pytest.raises(TypeError, match="jacrev requires real- or complex-valued inputs .* "
                       "but got key<fry>"):
        kiln.jacrev(lambda k, x: x)(k, 1.0)
    with pytest.raises(TypeError, match="jacfwd with input element type key<fry>"):
        kiln.jacfwd(lambda k, x: x)(k, 1.0)
    gk = kiln.grad(lambda k, x: x, allow_int=True)(k, 1.0)
    jgk = jax.grad(lambda k, x: x, allow_int=True)(jk, 1.0)
    assert gk.dtype == jgk.dtype == dtypes.float0 and gk.shape == jgk.shape == ()
    ks = random.split(k, 3)
    gks = kiln.grad(lambda k, x: x, allow_int=True)(ks, 1.0)
    assert gks.dtype == dtypes.float0 and gks.shape == (3,)


def test_vjp_jvp_linearize_with_keys():
    k, jk = random.key(5), jrandom.key(5)

    def f(k, x):
        return x * random.normal(k)

    def jf(k, x):
        return x * jrandom.normal(k)
    out, vjp_fun = kiln.vjp(f, k, 1.0)
    jout, jvjp_fun = jax.vjp(jf, jk, 1.0)
    ck, cx = vjp_fun(1.0)
    jck, jcx = jvjp_fun(1.0)
    assert ck.dtype == jck.dtype == dtypes.float0 and ck.shape == jck.shape == ()
    np.testing.assert_array_equal(np.asarray(cx), np.asarray(jcx))
    f0 = np.zeros((), dtypes.float0)
    p, t = kiln.jvp(f, (k, 1.0), (f0, 1.0))
    jp, jt = jax.jvp(jf, (jk, 1.0), (f0, 1.0))
    np.testing.assert_array_equal(np.asarray(t), np.asarray(jt))
    with pytest.raises(TypeError, match="primal dtype key<fry> and so expected tangent dtype "
                       "float0, but got tangent dtype float32"):
        kiln.jvp(f, (k, 1.0), (1.0, 1.0))
    _, f_jvp = kiln.linearize(f, k, 1.0)
    np.testing.assert_array_equal(np.asarray(f_jvp(f0, 1.0)), np.asarray(jt))
    # A function returning a key: its tangent is float0 of the key's shape.
    _, tk = kiln.jvp(lambda k, x: (random.split(k), x), (k, 1.0), (f0, 1.0))
    assert tk[0].dtype == dtypes.float0 and tk[0].shape == (2,)


def test_custom_derivatives_checkpoint_with_keys():
    k, jk = random.key(6), jrandom.key(6)
    seen = []

    @kiln.custom_jvp
    def cj(k, x):
        return x * random.normal(k)

    @cj.defjvp
    def cj_jvp(p, t):
        seen.append((t[0].dtype, t[0].shape))
        return cj(*p), t[1] * 3.0
    assert float(kiln.grad(cj, argnums=1)(k, 2.0)) == 3.0
    assert seen == [(dtypes.float0, ())]

    @kiln.custom_vjp
    def cv(k, x):
        return x * random.normal(k)

    def cv_fwd(k, x):
        return cv(k, x), (k,)

    def cv_bwd(r, g):
        return None, g * random.normal(r[0])
    cv.defvjp(cv_fwd, cv_bwd)

    @jax.custom_vjp
    def jcv(k, x):
        return x * jrandom.normal(k)
    jcv.defvjp(lambda k, x: (jcv(k, x), (k,)), lambda r, g: (None, g * jrandom.normal(r[0])))
    np.testing.assert_array_equal(np.asarray(kiln.grad(cv, argnums=1)(k, 2.0)),
                                  np.asarray(jax.grad(jcv, argnums=1)(jk, 2.0)))
    got = kiln.grad(kiln.checkpoint(lambda k, x: x * random.normal(k)), argnums=1)(k, 2.0)
    want = jax.grad(jax.checkpoint(lambda k, x: x * jrandom.normal(k)), argnums=1)(jk, 2.0)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_eval_shape_and_device_put():
    k = random.key(7)
    out = kiln.eval_shape(lambda k: random.split(k), k)
    jout = jax.eval_shape(lambda k: jrandom.split(k), jrandom.key(7))
    assert isinstance(out, kiln.ShapeDtypeStruct)
    assert (out.shape, str(out.dtype)) == (jout.shape, str(jout.dtype)) == ((2,), "key<fry>")
    spec = kiln.ShapeDtypeStruct((3,), k.dtype)
    out = kiln.eval_shape(lambda ks: (ks[0], random.normal(ks[1])), spec)
    assert (out[0].shape, out[0].dtype, out[1].dtype) == ((), k.dtype, np.float32)
    assert repr(spec) == "ShapeDtypeStruct(shape=(3,), dtype=key<fry>)"
    put = kiln.device_put({"k": k})
    assert put["k"].dtype == k.dtype
    np.testing.assert_array_equal(_data(put["k"]), _data(k))


def test_pmap_and_shard_map_with_keys():
    from kiln.sharding import Mesh
    from kiln.sharding import PartitionSpec as P
    n = kiln.device_count()
    ks, jks = random.split(random.key(8), n), jrandom.split(jrandom.key(8), n)
    got = kiln.pmap(lambda k: random.normal(k))(ks)
    want = jax.vmap(lambda k: jrandom.normal(k))(jks)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    mesh = Mesh(np.array(kiln.devices()), ("i",))
    sm = kiln.shard_map(lambda k: jax_like_normal(k), mesh=mesh, in_specs=P("i"),
                        out_specs=P("i"))
    got = sm(ks)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def jax_like_normal(k):
    return kiln.vmap(random.normal)(k)


def test_arithmetic_on_keys_raises_jax_errors():
    k = random.key(0)
    cases = {
        "k + 1": (lambda: k + 1, lambda j: j + 1),
        "1 + k": (lambda: 1 + k, lambda j: 1 + j),
        "k + k": (lambda: k + k, lambda j: j + j),
        "k * 2": (lambda: k * 2, lambda j: j * 2),
        "-k": (lambda: -k, lambda j: -j),
        "k < k": (lambda: k < k, lambda j: j < j),
        "k & 1": (lambda: k & 1, lambda j: j & 1),
    }
    jk = jrandom.key(0)
    for name, (f, jf) in cases.items():
        with pytest.raises(TypeError) as want:
            jf(jk)
        with pytest.raises(TypeError) as got:
            f()
        assert str(got.value) == str(want.value), name


def test_stack_and_concatenate_keys():
    k, jk = random.key(9), jrandom.key(9)
    ks, jks = random.split(k, 3), jrandom.split(jk, 3)
    for got, want in [
        (jnp.stack([k, k]), jax.numpy.stack([jk, jk])),
        (jnp.stack([ks, ks], axis=1), jax.numpy.stack([jks, jks], axis=1)),
        (jnp.concatenate([ks, ks[:1]]), jax.numpy.concatenate([jks, jks[:1]])),
        (jnp.stack(kiln.tree.leaves({"a": ks[0], "b": ks[2]})),
         jax.numpy.stack(jax.tree.leaves({"a": jks[0], "b": jks[2]}))),
    ]:
        assert got.dtype == k.dtype and got.shape == want.shape
        np.testing.assert_array_equal(_data(got), _jdata(want))


def test_where_over_keys():
    ks, jks = random.split(random.key(3), 4), jrandom.split(jrandom.key(3), 4)
    ko, jko = random.split(random.key(4), 4), jrandom.split(jrandom.key(4), 4)
    cond = np.array([True, False, False, True])
    want = jax.numpy.where(cond, jks, jko)
    for fn in (jnp.where, kiln.jit(jnp.where)):
        got = fn(cond, ks, ko)
        assert got.dtype == ks.dtype and got.shape == (4,)
        np.testing.assert_array_equal(_data(got), _jdata(want))
    got = kiln.vmap(jnp.where)(cond, ks, ko)
    np.testing.assert_array_equal(_data(got), _jdata(want))
    # a scalar condition broadcast over keys; the tree.map pattern Optax uses
    got = kiln.tree.map(lambda a, b: jnp.where(False, a, b), {"k": ks}, {"k": ko})
    np.testing.assert_array_equal(_data(got["k"]), _data(ko))
    with pytest.raises(ValueError, match="not a valid dtype for JAX type promotion"):
        jnp.where(True, ks[0], 1)


def test_astype_of_keys():
    k = random.key(5)
    assert jnp.astype(k, k.dtype) is k
    assert kiln.jit(lambda k: jnp.astype(k, k.dtype))(k).dtype == k.dtype
    for dt in (jnp.float32, None):
        with pytest.raises(ValueError, match="Cannot convert_element_type from key<fry> to "
                                             "float32"):
            jnp.astype(k, dt)
        with pytest.raises(ValueError, match="Cannot convert_element_type from key<fry> to "
                                             "float32"):
            jax.numpy.astype(jrandom.key(5), dt)


def test_key_array_buffer_attributes_are_its_datas():
    """``on_device_size_in_bytes`` (one block's bytes times the devices, as JAX's) and
    ``unsafe_buffer_pointer`` of a key array are those of its key data."""
    import kiln
    import kiln.numpy as jnp
    from kiln.sharding import Mesh, NamedSharding, PartitionSpec
    keys = kiln.random.split(kiln.random.key(0), 10)
    base = keys._base_array
    assert keys.on_device_size_in_bytes() == base.on_device_size_in_bytes() == base.nbytes
    assert keys.unsafe_buffer_pointer() == base.unsafe_buffer_pointer()
    m = Mesh(np.array(kiln.devices()[:4]).reshape(2, 2), ("a", "b"))
    x = kiln.device_put(np.ones((4, 6), np.float32), NamedSharding(m, PartitionSpec("a")))
    assert x.on_device_size_in_bytes() == 2 * 6 * 4 * 4
    assert jnp.ones(5).on_device_size_in_bytes() == 20
