"""kiln.random keys: seeds, typed key arrays, split/fold_in/clone, errors, threefry."""
import numpy as np
import pytest

import kiln
import kiln.random as kr
from kiln import dtypes
from kiln.random import _threefry


@pytest.fixture
def x64():
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        kiln.config.update("jax_enable_x64", old)


@pytest.fixture
def original_mode():
    old = kiln.config.jax_threefry_partitionable
    kiln.config.update("jax_threefry_partitionable", False)
    try:
        yield
    finally:
        kiln.config.update("jax_threefry_partitionable", old)


def data(k):
    return np.asarray(kr.key_data(k))


# JAX 0.10.2's PRNGKey(seed) for these seeds (x32 / x64).
_SEEDS_X32 = [(0, [0, 0]), (1, [0, 1]), (-1, [0, 4294967295]), (42, [0, 42]),
              (2 ** 31, [0, 2147483648]), (2 ** 32 + 5, [0, 5]), (-2 ** 40, [0, 0]),
              (2 ** 63 - 1, [0, 4294967295]), (np.int8(-3), [0, 4294967293]),
              (np.uint32(2 ** 32 - 1), [0, 4294967295]), (np.int64(-5), [0, 4294967291]),
              (True, [0, 1])]
_SEEDS_X64 = [(-1, [4294967295, 4294967295]), (2 ** 32 + 5, [1, 5]),
              (-2 ** 40, [4294967040, 0]), (2 ** 63 - 1, [2147483647, 4294967295]),
              (-2 ** 63, [2147483648, 0]), (np.int8(-3), [0, 4294967293]),
              (np.int64(-5), [4294967295, 4294967291]),
              (np.uint64(2 ** 64 - 1), [4294967295, 4294967295])]


@pytest.mark.parametrize("seed,want", _SEEDS_X32)
def test_prngkey_seeds_x32(seed, want):
    k = kr.PRNGKey(seed)
    assert k.dtype == np.uint32 and k.shape == (2,)
    np.testing.assert_array_equal(np.asarray(k), np.array(want, np.uint32))


@pytest.mark.parametrize("seed,want", _SEEDS_X64)
def test_prngkey_seeds_x64(x64, seed, want):
    np.testing.assert_array_equal(np.asarray(kr.PRNGKey(seed)), np.array(want, np.uint32))


def test_seed_errors():
    with pytest.raises(TypeError, match="integer"):
        kr.PRNGKey(1.0)
    with pytest.raises(TypeError, match="integer"):
        kr.key(np.float32(2))
    with pytest.raises(TypeError, match="scalar seed"):
        kr.PRNGKey(np.array([1, 2]))
    with pytest.raises(TypeError, match="PRNG key"):
        kr.key(kr.key(0))
    with pytest.raises(OverflowError):
        kr.PRNGKey(2 ** 64 + 3)
    with pytest.raises(TypeError):
        kr.key(np.bool_(True))


def test_typed_key_basics():
    k = kr.key(42)
    assert str(k.dtype) == "key<fry>" and repr(k.dtype) == "key<fry>"
    assert k.shape == () and k.ndim == 0 and k.size == 1
    assert k.dtype == kr.key_dtype() == kr.key_dtype("threefry2x32")
    assert dtypes.issubdtype(k.dtype, dtypes.prng_key)
    assert k.dtype.itemsize == 8
    assert kr.key_impl(k) == "threefry2x32"
    assert kr.key_impl(kr.PRNGKey(0)) == "threefry2x32"
    np.testing.assert_array_equal(data(k), [0, 42])
    assert repr(k).startswith("Array((), dtype=key<fry>) overlaying:")
    with pytest.raises(TypeError):
        np.asarray(k)
    with pytest.raises(TypeError):
        bool(k)
    with pytest.raises(TypeError):
        len(k)
    assert kr.key(0, dtype="threefry2x32").dtype == k.dtype
    with pytest.raises(ValueError, match="unrecognized PRNG"):
        kr.key(0, impl="nope")


def test_wrap_roundtrip_and_equality():
    ks = kr.split(kr.key(3), 4)
    d = kr.key_data(ks)
    assert d.shape == (4, 2) and d.dtype == np.uint32
    w = kr.wrap_key_data(d)
    assert w.shape == (4,)
    assert bool(np.all(np.asarray(w == ks)))
    assert not bool(np.any(np.asarray(w != ks)))
    assert kr.wrap_key_data(d, dtype=ks.dtype).dtype == ks.dtype
    assert bool(np.asarray(kr.clone(ks[1]) == ks[1]))


def test_key_array_indexing():
    ks = kr.split(kr.key(3), (2, 3))
    assert ks.shape == (2, 3) and len(ks) == 2
    np.testing.assert_array_equal(data(ks[1, 2]), data(ks)[1, 2])
    np.testing.assert_array_equal(data(ks[:, 1]), data(ks)[:, 1])
    np.testing.assert_array_equal(data(ks[..., -1]), data(ks)[..., -1, :])
    assert [k.shape for k in ks] == [(3,), (3,)]
    assert ks.reshape(6).shape == (6,) and ks.reshape(-1, 2).shape == (3, 2)
    assert ks.ravel().shape == (6,) and ks.T.shape == (3, 2)
    np.testing.assert_array_equal(data(ks.T), np.swapaxes(data(ks), 0, 1))
    np.testing.assert_array_equal(data(ks[None, 0]), data(ks)[None, 0])
    k1, k2 = kr.split(kr.key(0))
    assert k1.shape == () and k2.shape == ()
    with pytest.raises(TypeError):
        iter(kr.key(0))


def test_key_indexing_under_jit():
    ks = kr.split(kr.key(3), 5)
    f = kiln.jit(lambda ks, i: (ks[1:4], ks[i], ks[-1]))
    a, b, c = f(ks, 2)
    np.testing.assert_array_equal(data(a), data(ks)[1:4])
    np.testing.assert_array_equal(data(b), data(ks)[2])
    np.testing.assert_array_equal(data(c), data(ks)[-1])


def test_split_and_fold_in_values():
    # JAX 0.10.2 values (partitionable mode, the default).
    np.testing.assert_array_equal(
        np.asarray(kr.split(kr.PRNGKey(0))),
        [[1797259609, 2579123966], [928981903, 3453687069]])
    np.testing.assert_array_equal(
        data(kr.split(kr.key(0), 3)),
        [[1797259609, 2579123966], [928981903, 3453687069], [4146024105, 2718843009]])
    np.testing.assert_array_equal(np.asarray(kr.fold_in(kr.PRNGKey(0), 5)),
                                  [1524306142, 1887795613])
    assert kr.split(kr.PRNGKey(0), (2, 3)).shape == (2, 3, 2)
    assert kr.split(kr.key(0), (2, 3)).shape == (2, 3)
    assert kr.split(kr.key(0), 0).shape == (0,)


def test_split_original_mode(original_mode):
    # Original (non-partitionable) threefry: counts 0..2n-1 hashed as one vector.
    want = _threefry.threefry2x32_np(np.uint32(0), np.uint32(0),
                                     np.arange(2, dtype=np.uint32),
                                     np.arange(2, 4, dtype=np.uint32))
    got = np.asarray(kr.split(kr.PRNGKey(0)))
    np.testing.assert_array_equal(got.reshape(-1), np.concatenate(want))


def test_key_errors():
    with pytest.raises(TypeError, match="shape to end with"):
        kr.normal(np.zeros(3, np.uint32))
    with pytest.raises(TypeError, match="dtype = uint32"):
        kr.normal(np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="single key"):
        kr.normal(kr.split(kr.key(0)))
    with pytest.raises(ValueError, match="single key"):
        kr.normal(np.zeros((3, 2), np.uint32))
    with pytest.raises(TypeError, match="unexpected PRNG key type"):
        kr.normal([0, 0])
    with pytest.raises(ValueError, match="single key"):
        kr.split(kr.split(kr.key(0)))
    with pytest.raises(TypeError, match="scalar"):
        kr.fold_in(kr.key(0), np.arange(3))
    with pytest.raises(OverflowError):
        kr.fold_in(kr.key(0), -1)


def test_shape_and_dtype_errors():
    k = kr.key(0)
    with pytest.raises(TypeError, match="Shapes must be"):
        kr.normal(k, (2.5,))
    with pytest.raises(ValueError, match="must be a float dtype"):
        kr.uniform(k, (2,), dtype=np.int32)
    with pytest.raises(ValueError, match="float or complex"):
        kr.normal(k, (2,), dtype=np.int32)
    with pytest.raises(TypeError, match="integer dtypes"):
        kr.randint(k, (2,), 0, 3, dtype=np.float32)
    with pytest.raises(ValueError, match="unsigned int"):
        kr.bits(k, (2,), np.int32)
    with pytest.raises(ValueError, match="broadcast-compatible"):
        kr.bernoulli(k, np.full(3, 0.5, np.float32), (4,))
    with pytest.raises(TypeError, match="floating"):
        kr.bernoulli(k, 1)
    with pytest.raises(ValueError, match="larger sample"):
        kr.choice(k, 3, (4,), replace=False)
    with pytest.raises(TypeError, match="sequence"):
        kr.choice(k, 3, 4)
    with pytest.raises(ValueError, match="method"):
        kr.multivariate_normal(k, np.zeros(2), np.eye(2), method="qr")
    with pytest.raises(ValueError, match="mode"):
        kr.bernoulli(k, 0.5, mode="medium")
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda k, n: kr.permutation(k, n))(k, 3)


def test_threefry_known_answer():
    # Test vector from the Threefry reference implementation (Random123).
    k = np.array([0x13198A2E, 0x03707344], np.uint32)
    x = np.array([0x243F6A88, 0x85A308D3], np.uint32)
    y = kr.threefry_2x32(kiln.numpy.asarray(k) if hasattr(kiln.numpy, "asarray")
                         else kiln.core.trace.to_array(k), kiln.core.trace.to_array(x))
    np.testing.assert_array_equal(np.asarray(y), [0xC4923A9C, 0x483DF7A0])
    z = np.zeros(2, np.uint32)
    y0 = kr.threefry_2x32(kiln.core.trace.to_array(z), kiln.core.trace.to_array(z))
    np.testing.assert_array_equal(np.asarray(y0), [0x6B200159, 0x99BA4EFE])


def test_threefry_primitive_transforms():
    u32 = np.uint32
    k1, k2 = u32(7), u32(9)
    x1 = np.arange(6, dtype=u32).reshape(2, 3)
    x2 = np.arange(6, 12, dtype=u32).reshape(2, 3)
    eager = [np.asarray(v) for v in kr.threefry2x32_p.bind(k1, k2, x1, x2)]
    jitted = kiln.jit(lambda a, b: kr.threefry2x32_p.bind(k1, k2, a, b))(x1, x2)
    for e, j in zip(eager, jitted):
        np.testing.assert_array_equal(e, np.asarray(j))
    vm = kiln.vmap(lambda a, b: kr.threefry2x32_p.bind(k1, k2, a, b), in_axes=(1, 1))(x1, x2)
    for e, v in zip(eager, vm):
        np.testing.assert_array_equal(e.T, np.asarray(v))
    keys = np.array([3, 4], u32)
    vk = kiln.vmap(lambda k: kr.threefry2x32_p.bind(k, k2, x1[0], x2[0]))(keys)
    for i in range(2):
        want = _threefry.threefry2x32_np(keys[i], k2, x1[0], x2[0])
        np.testing.assert_array_equal(np.asarray(vk[0])[i], want[0])
    with pytest.raises(TypeError, match="uint32"):
        kr.threefry2x32_p.bind(np.int32(1), k2, x1, x2)
    # Deterministic counter hash: vectorized NumPy and native paths agree.
    big = np.arange(100_003, dtype=u32)
    a = _threefry.threefry2x32_np(u32(5), u32(6), big, big[::-1].copy())
    b0, b1 = big.copy(), big[::-1].copy()
    _threefry._hash_inplace(u32(5), u32(6), b0, b1)
    np.testing.assert_array_equal(a[0], b0)
    np.testing.assert_array_equal(a[1], b1)
