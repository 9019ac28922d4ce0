"""``kiln.ops`` (``jax.ops``) segment reductions: results against a NumPy loop and against
JAX (float32/int32, given/inferred ``num_segments``, out-of-range ids, empty segments,
``bucket_size``, sorted/unique promises, ``mode``), under ``jit``/``grad``/``vmap``, and
JAX's errors."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import ops

FUNCS = {"sum": (ops.segment_sum, np.add, 0), "prod": (ops.segment_prod, np.multiply, 1),
         "max": (ops.segment_max, np.maximum, -np.inf),
         "min": (ops.segment_min, np.minimum, np.inf)}

# Rows 0..7 of data; ids with repeats, a negative id (dropped, not wrapped), an id past the
# end (dropped when num_segments=4 is given) and segment 1 left empty.
IDS = np.array([0, 3, 0, -1, 2, 3, 6, 2], np.int32)


def _data(dtype, shape=(8, 2)):
    vals = (np.arange(np.prod(shape)) % 5 - 2).reshape(shape)
    return vals.astype(dtype)


def _reference(name, data, ids, num_segments):
    _, op, ident = FUNCS[name]
    n = int(ids.max()) + 1 if num_segments is None else num_segments
    if np.issubdtype(data.dtype, np.integer) and np.isinf(ident):
        info = np.iinfo(data.dtype)
        ident = info.max if ident > 0 else info.min
    out = np.full((n,) + data.shape[1:], ident, data.dtype)
    for i, row in zip(ids, data):
        if 0 <= i < n:
            out[i] = op(out[i], row)
    return out


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("num_segments", [None, 4, 9])
@pytest.mark.parametrize("bucket_size", [None, 3])
def test_against_numpy(name, dtype, num_segments, bucket_size):
    fn = FUNCS[name][0]
    data = _data(dtype)
    out = fn(jnp.asarray(data), jnp.asarray(IDS), num_segments, bucket_size=bucket_size)
    want = _reference(name, data, IDS, num_segments)
    assert out.dtype == dtype and out.shape == want.shape
    np.testing.assert_array_equal(np.asarray(out), want)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_empty_segment_identities(name):
    fn = FUNCS[name][0]
    ids = np.array([2, 2], np.int32)
    f = np.asarray(fn(jnp.ones(2, jnp.float32), ids, 3))
    i = np.asarray(fn(jnp.ones(2, jnp.int8), ids, 3))
    b_ok = name in ("max", "min")
    want_f = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}[name]
    want_i = {"sum": 0, "prod": 1, "max": -128, "min": 127}[name]
    assert f[0] == want_f and f[1] == want_f and i[0] == want_i and i.dtype == np.int8
    if b_ok:
        b = np.asarray(fn(jnp.array([True, False]), np.array([2, 2]), 3))
        assert list(b[:2]) == [name == "min"] * 2


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_sorted_unique_promises(name):
    fn = FUNCS[name][0]
    data = _data(np.float32, (4, 3))
    ids = np.array([0, 1, 3, 4], np.int32)
    out = fn(data, ids, 5, indices_are_sorted=True, unique_indices=True)
    np.testing.assert_array_equal(np.asarray(out), _reference(name, data, ids, 5))


def test_mode_clip_and_scalar_data():
    d = jnp.arange(5.0)
    ids = jnp.array([0, -1, 1, 5, 2])
    np.testing.assert_array_equal(np.asarray(ops.segment_sum(d, ids, 3, mode="clip")),
                                  [1.0, 2.0, 7.0])
    np.testing.assert_array_equal(np.asarray(ops.segment_sum(d, ids, 3)), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(np.asarray(ops.segment_sum(3.0, np.array(0), 2)), [3, 0])


def test_bucket_keeps_narrow_dtypes():
    ids = np.array([0, 0, 1, 1, 2])
    out = ops.segment_sum(jnp.ones(5, jnp.uint8) * 200, ids, 3, bucket_size=1)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(np.asarray(out), [144, 144, 200])   # 400 mod 256
    assert ops.segment_prod(jnp.ones(5, jnp.bfloat16), ids, 3, bucket_size=2).dtype == \
        jnp.bfloat16


def test_errors():
    d, ids = jnp.arange(5.0), jnp.array([0, 0, 1, 1, 2])
    with pytest.raises(ValueError, match="non-negative"):
        ops.segment_sum(d, ids, -1)
    with pytest.raises(TypeError, match="segment_max requires ndarray"):
        ops.segment_max([1.0, 2.0], ids[:2])
    with pytest.raises(TypeError):
        ops.segment_sum(d, ids, 3.0)
    with pytest.raises(TypeError):
        ops.segment_sum(jnp.array([True, False]), np.array([0, 1]), 2)
    with pytest.raises(kiln.errors.ConcretizationTypeError, match="num_segments"):
        kiln.jit(ops.segment_sum)(d, ids)
    with pytest.raises(NotImplementedError):
        ops.segment_sum(d, ids, 3, bucket_size=2, out_sharding=kiln.sharding.PartitionSpec())


def test_jit_vmap():
    data = jnp.asarray(_data(np.float32))
    for name, (fn, _, _) in FUNCS.items():
        out = kiln.jit(fn, static_argnums=2)(data, IDS, 4)
        np.testing.assert_array_equal(np.asarray(out), _reference(name, _data(np.float32),
                                                                   IDS, 4))
    batch = jnp.stack([data, -data])
    ids_b = np.stack([IDS, IDS[::-1]])
    out = kiln.vmap(lambda d, i: ops.segment_max(d, i, 4))(batch, ids_b)
    for k in range(2):
        np.testing.assert_array_equal(
            np.asarray(out[k]), _reference("max", np.asarray(batch[k]), ids_b[k], 4))


def _grads(mod, jnp_mod):
    ids = np.array([0, 0, 1, 3, 2, 9], np.int32)
    x = np.array([1.0, 1.0, 2.0, 3.0, -4.0, 5.0], np.float32)
    res = []
    for name in ("segment_sum", "segment_max", "segment_min"):
        f = getattr(mod.ops, name)
        res.append(mod.grad(lambda d, f=f: (f(d, ids, 5) * (jnp_mod.arange(5.0) + 1)).sum())(x))
    uids = np.array([4, 0, 1, 3, 2, 9], np.int32)
    res.append(mod.grad(lambda d: mod.ops.segment_prod(d, uids, 5, unique_indices=True)
                        .sum())(x))
    res.append(mod.jit(mod.grad(lambda d: mod.ops.segment_sum(d, ids, 4, bucket_size=4)
                                .sum()))(x))
    return [np.asarray(r) for r in res]


def test_grads_against_numpy():
    g_sum, g_max, g_min, g_prod, g_bucket = _grads(kiln, jnp)
    np.testing.assert_array_equal(g_sum, [1, 1, 2, 4, 3, 0])
    np.testing.assert_array_equal(g_max, [0.5, 0.5, 2, 4, 3, 0])    # ties share it
    np.testing.assert_array_equal(g_min, [0.5, 0.5, 2, 4, 3, 0])
    np.testing.assert_array_equal(g_prod, [1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(g_bucket, [1, 1, 1, 1, 1, 0])
    with pytest.raises(NotImplementedError):
        kiln.grad(lambda d: ops.segment_prod(d, np.array([0, 0]), 1).sum())(jnp.ones(2))


def test_against_jax():
    jax = pytest.importorskip("jax")
    import jax.numpy as jjnp
    cases = [(n, *c) for n in FUNCS for c in ((np.float32, 4, 3), (np.int32, None, None))]
    for name, dtype, ns, bs in cases:
        data = _data(dtype)
        got = getattr(ops, f"segment_{name}")(data, IDS, ns, bucket_size=bs)
        want = getattr(jax.ops, f"segment_{name}")(data, IDS, ns, bucket_size=bs)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for g, w in zip(_grads(kiln, jnp), _grads(jax, jjnp)):
        np.testing.assert_allclose(g, w, rtol=0, atol=0)
