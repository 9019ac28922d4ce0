"""Gaps JAX's ``random_lax_test`` found: samplers' ``out_sharding=``, ``orthogonal`` with an
empty side, ``jax._src.random.prng.PRNGImpl`` taking per-key functions (custom PRNGs
under ``vmap``), and ``jax._src.random.core``'s helpers."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import random
from kiln._src.random import core as random_core
from kiln._src.random import prng as prng_internal
from kiln.random import prng as threefry
from kiln.sharding import AxisType, NamedSharding
from kiln.sharding import PartitionSpec as P

SAMPLERS = {
    "normal": lambda k, n, s: random.normal(k, (n,), out_sharding=s),
    "uniform": lambda k, n, s: random.uniform(k, (n,), out_sharding=s),
    "bits": lambda k, n, s: random.bits(k, (n,), out_sharding=s),
    "randint": lambda k, n, s: random.randint(k, (n,), 0, 10, out_sharding=s),
    "gamma": lambda k, n, s: random.gamma(k, 2.0, (n,), out_sharding=s),
    "categorical": lambda k, n, s: random.categorical(k, jnp.ones((n, 3)), shape=(n,),
                                                      out_sharding=s),
    "permutation": lambda k, n, s: random.permutation(k, n, out_sharding=s),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_out_sharding_is_obeyed_with_the_same_values(name):
    fn = SAMPLERS[name]
    mesh = kiln.make_mesh((4,), ("x",), axis_types=(AxisType.Explicit,))
    s = NamedSharding(mesh, P("x"))
    key = random.key(0)
    plain = fn(key, 4, None)
    with kiln.set_mesh(mesh):
        eager = fn(key, 4, s)
        jitted = kiln.jit(fn, static_argnums=(1, 2))(key, 4, s)
    for r in (eager, jitted):
        assert r.sharding.is_equivalent_to(s, r.ndim)
        np.testing.assert_array_equal(np.asarray(r), np.asarray(plain))
    assert not plain.sharding.is_equivalent_to(s, plain.ndim)


@pytest.mark.parametrize("n,m", [(0, 0), (0, 2), (2, 0), (3, None), (0, None)])
@pytest.mark.parametrize("shape", [(), (5,)])
def test_orthogonal_with_an_empty_side(n, m, shape):
    want = (*shape, n, n if m is None else m)
    assert random.orthogonal(random.key(0), n, shape, np.float32, m).shape == want
    f = kiln.jit(lambda k: random.orthogonal(k, n, shape, np.float32, m))
    assert f(random.key(0)).shape == want


def _double_impl():
    """A custom PRNG as JAX's tests define one: per-key functions, two threefry keys."""
    def seed(s):
        return jnp.vstack([threefry.threefry_seed(s), threefry.threefry_seed(s ^ 3)])

    def split(key, shape):
        return kiln.vmap(threefry.threefry_split, (0, None), len(shape))(key, shape)

    def bits(key, width, shape):
        return threefry.threefry_random_bits(key[0], width, shape)

    def fold_in(key, data):
        return jnp.vstack([threefry.threefry_fold_in(key[0], data),
                           threefry.threefry_fold_in(key[1], data)])
    return prng_internal.PRNGImpl(key_shape=(2, 2), seed=seed, split=split,
                                  random_bits=bits, fold_in=fold_in, tag="fry2")


def test_internal_prng_impl_takes_per_key_functions():
    impl = _double_impl()
    assert isinstance(impl, prng_internal.PRNGImpl) and impl.key_shape == (2, 2)
    key = prng_internal.random_seed(73, impl=impl)
    mapped = random.split(key, 3)
    vmapped = kiln.vmap(random.split)(mapped)
    assert vmapped.shape == (3, 2)
    for k, v in zip(mapped, vmapped):
        np.testing.assert_array_equal(random.key_data(random.split(k)), random.key_data(v))
    keys = random.split(key, 6).reshape((2, 3))
    msgs = jnp.arange(6).reshape((2, 3))
    out = kiln.vmap(kiln.vmap(random.fold_in), in_axes=(0, 1))(keys, msgs.T)
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(random.key_data(out[1, 2]),
                                  random.key_data(random.fold_in(keys[1, 2], msgs.T[2, 1])))


def test_random_core_helpers():
    mask = (1 << 24) - 1
    for shift in range(40):
        i = mask << shift
        f = random_core._safe_int_to_float(
            np.array([i >> 32, i & 0xFFFFFFFF], np.uint32), np.float32)
        assert i == int(float(np.ldexp(f, 64)))
    with pytest.raises(RuntimeError, match="u32 -> f32"):
        random_core._safe_int_to_float(np.zeros(2, np.int32), np.float32)
    assert random_core._check_broadcast_shapes("t", None) == ()
    assert random_core._check_broadcast_shapes("t", (2, 3)) == (2, 3)
    assert random_core._check_broadcast_shapes("t", None, np.ones((2, 1)), np.ones(3)) == (2, 3)
