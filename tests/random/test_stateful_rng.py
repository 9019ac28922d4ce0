"""``kiln.experimental.random`` (JAX's stateful PRNG) and ``kiln._src.blocked_sampler``:
values computed once with JAX 0.10.2 (stored here), the counter's updates eagerly,
under ``jit``, ``scan`` and ``vmap``, and JAX's errors."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import random
from kiln._src import blocked_sampler
from kiln.experimental import random as exp_random


def _data(k):
    return np.asarray(random.key_data(k)).tolist()


def test_docstring_values():
    rng = exp_random.stateful_rng(42)
    assert _data(rng._base_key) == [0, 42] and int(rng._counter[...]) == 0
    assert [float(rng.uniform()), float(rng.uniform())] == [
        np.float32(0.5302608), np.float32(0.72766423)]
    jit_uniform = kiln.jit(rng.uniform)
    assert [float(jit_uniform()), float(jit_uniform())] == [
        np.float32(0.6672406), np.float32(0.3890121)]
    assert _data(rng.key()) == [2954079971, 3276725750]
    assert _data(rng.key()) == [2765691542, 824333390]
    assert int(rng._counter[...]) == 6
    rng = exp_random.stateful_rng(0)
    assert _data(rng.key()) == [1797259609, 2579123966]
    assert _data(rng.key()) == [928981903, 3453687069]


def test_split_vmap_and_spawn_values():
    rng = exp_random.stateful_rng(123)
    out = kiln.vmap(lambda r, x: x + r.uniform())(rng.split(3), jnp.zeros(3))
    assert np.asarray(out).tolist() == np.asarray(
        [0.35525954, 0.21937883, 0.5336956], np.float32).tolist()
    rng = exp_random.stateful_rng(123)
    assert [np.asarray(r.integers(0, 10, 2)).tolist() for r in rng.spawn(2)] == [[4, 5], [2, 1]]
    rng = exp_random.stateful_rng(11)
    split = rng.split((2,))
    assert _data(split._base_key) == [[4278498530, 2682168217], [2303529360, 3250916741]]
    assert split._counter.shape == (2,) and isinstance(split._counter, kiln.Ref)


def test_samplers_values_philox4x32():
    rng = exp_random.stateful_rng(7, impl="philox4x32")
    assert rng._base_key.dtype.name == "key<phx4>"
    np.testing.assert_array_equal(np.asarray(rng.normal(size=3)), np.asarray(
        [0.6879653930664062, -0.1566486954689026, 1.3999660015106201], np.float32))
    assert np.asarray(rng.integers(5, size=4)).tolist() == [2, 3, 4, 0]
    np.testing.assert_array_equal(np.asarray(rng.random(2)), np.asarray(
        [0.4120587110519409, 0.6292905807495117], np.float32))
    assert int(rng._counter[...]) == 3


def test_parameter_shapes_and_dtypes():
    rng = exp_random.stateful_rng(3)
    u = rng.uniform(np.array([0., 10.]), 20.)
    assert u.dtype == np.float32 and np.asarray(u).tolist() == np.asarray(
        [0.17390727996826172, 10.439884185791016], np.float32).tolist()
    n = rng.normal(1., np.array([1., 2.]), dtype=jnp.float16)
    assert n.dtype == np.float16 and np.asarray(n).tolist() == [1.220703125, 0.572265625]
    i = rng.integers(np.array([1, 5]), 9)
    assert i.dtype == np.int32 and np.asarray(i).tolist() == [1, 5]
    assert rng.random((5, 2)).shape == (5, 2)


def test_scan_closure_and_jit():
    def draws(seed):
        rng = exp_random.stateful_rng(seed)
        return kiln.lax.scan(lambda c, _: (None, rng.uniform()), None, length=3)[1]
    want = np.asarray([0.7026152610778809, 0.4036463499069214, 0.5577840805053711], np.float32)
    np.testing.assert_array_equal(np.asarray(draws(1)), want)
    np.testing.assert_array_equal(np.asarray(kiln.jit(draws)(1)), want)


def test_counter_advances_under_jit():
    rng = exp_random.stateful_rng(5)
    f = kiln.jit(lambda r: r.uniform(size=4))
    a, b = f(rng), f(rng)
    assert int(rng._counter[...]) == 2 and not np.array_equal(np.asarray(a), np.asarray(b))


def test_errors():
    key, ref = random.key(0), kiln.new_ref(0)
    with pytest.raises(ValueError, match="Expected base_key to be a typed PRNG key"):
        exp_random.StatefulPRNG(jnp.array([0, 1], dtype="uint32"), ref)
    with pytest.raises(ValueError, match="Expected counter to be a scalar integer ref"):
        exp_random.StatefulPRNG(key, 0)
    with pytest.raises(ValueError, match="cannot operate on split stateful generator"):
        exp_random.stateful_rng(0).split(2).key()
    rng = exp_random.stateful_rng(1)
    with pytest.raises(Exception, match="performing an addupdate operation with vmapped value"):
        kiln.vmap(lambda r, x: x + r.uniform(), in_axes=(None, 0))(rng, jnp.arange(3.0))
    with pytest.raises(Exception, match="performing an addupdate operation with vmapped value"):
        kiln.vmap(lambda x: x + rng.uniform())(jnp.arange(3.0))
    def unseeded(x):
        return x + exp_random.stateful_rng().uniform()
    for transform, arg in ((kiln.jit, 1.0), (kiln.grad, 1.0), (kiln.vmap, jnp.arange(2.0))):
        with pytest.raises(TypeError, match="When used within transformed code"):
            transform(unseeded)(arg)


def test_default_seed_at_top_level():
    assert exp_random.stateful_rng().uniform(size=3).shape == (3,)


# -- blocked_sampler ------------------------------------------------------------------------------

def _blocked(key, block_size, grid):
    def block(idx):
        keys = blocked_sampler.blocked_fold_in(key, (4, 6), block_size, (2, 3), idx)
        return blocked_sampler.sample_block(random.uniform, keys, block_size, (2, 3))
    return jnp.concatenate([jnp.concatenate([block((i, j)) for j in range(grid[1])], 1)
                            for i in range(grid[0])], 0)


def test_blocked_sampler_values_and_invariance():
    key = random.key(0)
    rows = _blocked(key, (2, 6), (2, 1))
    want = np.asarray([
        [0.8423141241073608, 0.1823786497116089, 0.22717809677124023, 0.007293820381164551,
         0.020891189575195312, 0.5814265012741089],
        [0.12072563171386719, 0.19181346893310547, 0.7220150232315063, 0.3618379831314087,
         0.2230377197265625, 0.11928832530975342],
        [0.9024494886398315, 0.9122928380966187, 0.34104764461517334, 0.26698946952819824,
         0.733950138092041, 0.9537230730056763],
        [0.2200911045074463, 0.6483767032623291, 0.5075352191925049, 0.20954155921936035,
         0.008985400199890137, 0.8148592710494995]], np.float32)
    np.testing.assert_array_equal(np.asarray(rows), want)
    np.testing.assert_array_equal(np.asarray(_blocked(key, (4, 3), (1, 2))), want)
    np.testing.assert_array_equal(np.asarray(_blocked(key, (2, 3), (2, 2))), want)
    keys = blocked_sampler.blocked_fold_in(key, (4, 6), (2, 6), (2, 3), (1, 0))
    assert len(keys) == 1 and len(keys[0]) == 2
    assert [_data(k) for k in keys[0]] == [[4146024105, 2718843009], [2467461003, 3840466878]]
