"""``jax.extend.random.define_prng_impl``: a PRNG from functions on one key, usable with
``random.key``/``wrap_key_data``/``split``/``fold_in``/``bits``/samplers, eagerly and under
``jit``/``vmap`` (values computed here with NumPy; JAX gives the same, see
``docs/ecosystem.md``, dm-haiku's ``random_test``)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import random as krandom
from kiln.extend import random as kxr

U32 = np.uint32


def _toy():
    def seed(s):
        s = jnp.asarray(s).astype(jnp.uint32)
        return jnp.stack([s, s ^ jnp.uint32(0x9E3779B9)])

    def split(k, shape):
        n = int(np.prod(shape))
        i = jnp.arange(n, dtype=jnp.uint32)
        return jnp.stack([k[0] * jnp.uint32(3) + i, k[1] + i * jnp.uint32(7)], -1) \
            .reshape(*shape, 2)

    def fold_in(k, d):
        return k + jnp.uint32(d)

    def bits(k, bw, shape):
        n = int(np.prod(shape))
        i = jnp.arange(n, dtype=jnp.uint32)
        out = (k[0] * jnp.uint32(2654435761) + i * k[1]).reshape(shape)
        return out.astype({8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32}[bw])

    return kxr.define_prng_impl(key_shape=(2,), seed=seed, split=split, random_bits=bits,
                                fold_in=fold_in, name="toy", tag="toy")


def _np_split(k, n):
    i = np.arange(n, dtype=U32)
    return np.stack([k[0] * U32(3) + i, k[1] + i * U32(7)], -1)


def _np_bits(k, n):
    i = np.arange(n, dtype=U32)
    return k[0] * U32(2654435761) + i * k[1]


SPEC = _toy()


def test_key_seed_split_fold_in_bits():
    k = krandom.key(5, impl=SPEC)
    assert str(k.dtype) == "key<toy>" and k.shape == ()
    data = np.asarray(krandom.key_data(k))
    np.testing.assert_array_equal(data, [5, 5 ^ 0x9E3779B9])
    ks = krandom.split(k, 3)
    assert ks.shape == (3,) and ks.dtype == k.dtype
    np.testing.assert_array_equal(krandom.key_data(ks), _np_split(data, 3))
    np.testing.assert_array_equal(krandom.key_data(krandom.fold_in(k, 4)), data + U32(4))
    with np.errstate(over="ignore"):
        want = _np_bits(data, 4)
    np.testing.assert_array_equal(krandom.bits(k, (4,)), want)
    np.testing.assert_array_equal(kiln.jit(lambda k: krandom.bits(k, (4,)))(k), want)
    u = np.asarray(krandom.uniform(k, (3,)))
    assert u.dtype == np.float32 and ((0 <= u) & (u < 1)).all()
    assert krandom.key_impl(k) == SPEC


def test_batched_keys_under_jit_and_vmap():
    ks = krandom.split(krandom.key(5, impl=SPEC), 3)
    data = np.asarray(krandom.key_data(ks))
    out = kiln.jit(kiln.vmap(lambda k: krandom.fold_in(k, 4)))(ks)
    np.testing.assert_array_equal(krandom.key_data(out), data + U32(4))
    sp = kiln.vmap(lambda k: krandom.split(k, 2))(ks)
    assert sp.shape == (3, 2)
    np.testing.assert_array_equal(krandom.key_data(sp), np.stack([_np_split(d, 2) for d in data]))


def test_wrap_key_data_and_other_key_shapes():
    w = krandom.wrap_key_data(jnp.array([[1, 2]], jnp.uint32), impl=SPEC)
    assert w.shape == (1,) and str(w.dtype) == "key<toy>"
    np.testing.assert_array_equal(krandom.key_data(w), [[1, 2]])
    with pytest.raises(TypeError, match="key_data.shape"):
        krandom.wrap_key_data(jnp.zeros((3,), jnp.uint32), impl=SPEC)

    count = 0

    def count_splits(_, num):       # dm-haiku's random_test: a 13-word key, one split traced
        nonlocal count
        count += 1
        return jnp.zeros((*num, 13), np.uint32)

    spec = kxr.define_prng_impl(key_shape=(13,), seed=lambda _: jnp.zeros((13,), np.uint32),
                                split=count_splits, random_bits=lambda *_: None,
                                fold_in=lambda key, _: key)
    k = krandom.key(42, impl=spec)
    assert k.shape == () and str(k.dtype) == "key<?>" and str(spec) == "?"
    assert kiln.jit(lambda k: krandom.split(k))(k).shape == (2,)
    assert count == 1


def test_unnamed_impls_are_distinct():
    a = kxr.define_prng_impl(key_shape=(1,), seed=lambda s: jnp.zeros((1,), jnp.uint32),
                             split=lambda k, s: jnp.zeros((*s, 1), jnp.uint32),
                             random_bits=None, fold_in=lambda k, d: k)
    b = kxr.define_prng_impl(key_shape=(1,), seed=lambda s: jnp.ones((1,), jnp.uint32),
                             split=lambda k, s: jnp.ones((*s, 1), jnp.uint32),
                             random_bits=None, fold_in=lambda k, d: k)
    assert a != b
    f = kiln.jit(lambda k: krandom.key_data(krandom.split(k, 1)))
    assert int(f(krandom.key(0, impl=a))[0, 0]) == 0
    assert int(f(krandom.key(0, impl=b))[0, 0]) == 1


def test_extend_random_names():
    assert kxr.threefry_prng_impl.name == "threefry2x32"
    assert kxr.rbg_prng_impl.name == "rbg" and kxr.unsafe_rbg_prng_impl.name == "unsafe_rbg"
    k = kxr.seed_with_impl(kxr.threefry_prng_impl, 0)
    np.testing.assert_array_equal(krandom.key_data(k), krandom.key_data(krandom.key(0)))
