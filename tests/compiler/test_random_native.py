"""kiln.random under the compiler: native Threefry bits, bit for bit with the reference.

The samplers' programs (bits -> float conversion -> XLA math) fuse into one kernel and
must give exactly the bits the reference backend (and JAX) gives.
"""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.random as kr
from kiln.backends import cpu, reference
from kiln.compiler.lower.program import Island, Kernel


def _both(f, *args):
    closed = kiln.make_jaxpr(f)(*args)
    flat = [np.asarray(a) for a in kiln.tree_util.tree_leaves(args)]
    exe = cpu.executable_for(closed)
    assert exe is not None
    # The reference runs the compiler's passes' output, as for a program with nothing
    # native: "chain" adds a normal sample to a uniform one, and XLA (so kiln's compiler)
    # contracts the normal's last product into that add (JAX's eager result differs).
    ref = cpu._reference_form(closed)
    return exe(flat), reference.run_jaxpr(ref.jaxpr, ref.consts, flat), exe


def _same_bits(f, *args, islands=0):
    got, want, exe = _both(f, *args)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))
    assert sum(isinstance(s, Island) for s in exe.prog.steps) == islands
    return exe


KEY = kr.PRNGKey(42)
KEYS = kr.split(KEY, 3)


@pytest.mark.parametrize("width", [8, 16, 32, 64])
def test_bits_every_width(width):
    with kiln.enable_x64(width == 64):
        _same_bits(lambda k: kr.bits(k, (5, 7), dtype=f"uint{width}"), KEY)


@pytest.mark.parametrize("sampler", [
    lambda k: kr.normal(k, (1000,)),
    lambda k: kr.uniform(k, (10, 30), minval=-2.0, maxval=3.0),
    lambda k: kr.bernoulli(k, 0.3, (100,)),
    lambda k: kr.randint(k, (50,), 0, 10),
    lambda k: kr.truncated_normal(k, -1.0, 2.0, (300,)),
    lambda k: kr.split(k, 4),
    lambda k: kr.fold_in(k, 7),
    lambda k: kr.normal(kr.fold_in(k, 3), (64,)) + kr.uniform(kr.split(k)[1], (64,)),
    lambda k: kr.exponential(k, (200,)),
    lambda k: kr.logistic(k, (200,)),
    lambda k: kr.gumbel(k, (200,)),
], ids=["normal", "uniform", "bernoulli", "randint", "truncated_normal", "split", "fold_in",
        "chain", "exponential", "logistic", "gumbel"])
def test_samplers_bit_exact(sampler):
    _same_bits(sampler, KEY)


def test_normal_is_one_kernel():
    exe = _same_bits(lambda k: kr.normal(k, (4096,)), KEY)
    assert [type(s) for s in exe.prog.steps] == [Kernel]


def test_batched_keys_and_vmap():
    _same_bits(lambda ks: kiln.vmap(lambda k: kr.normal(k, (5,)))(ks), KEYS)
    _same_bits(lambda ks: kiln.vmap(lambda k: kr.split(k, 3))(ks), KEYS)
    _same_bits(lambda ks, d: kiln.vmap(kr.fold_in)(ks, d), KEYS,
               jnp.arange(3, dtype=jnp.uint32))


def test_float64_samplers():
    with kiln.enable_x64():
        _same_bits(lambda k: kr.normal(k, (257,), dtype=jnp.float64), KEY)
        _same_bits(lambda k: kr.uniform(k, (33,), dtype=jnp.float64), KEY)


def test_non_partitionable_mode_uses_host_islands_and_stays_right():
    with _flag(False):
        exe = _same_bits(lambda k: kr.normal(k, (100,)), KEY, islands=1)
    assert exe is not None


class _flag:
    def __init__(self, value):
        self.value = value

    def __enter__(self):
        self.old = kiln.config.jax_threefry_partitionable
        kiln.config.update("jax_threefry_partitionable", self.value)

    def __exit__(self, *a):
        kiln.config.update("jax_threefry_partitionable", self.old)


def test_flipping_the_flag_after_compiling_falls_back():
    f = kiln.jit(lambda k: kr.normal(k, (50,)))
    native = np.asarray(f(KEY))
    with _flag(False):
        old_scheme = np.asarray(f(KEY))
        ref = np.asarray(reference.run_jaxpr(*_closed(lambda k: kr.normal(k, (50,)), KEY))[0])
    np.testing.assert_array_equal(old_scheme, ref)
    assert not np.array_equal(native, old_scheme)


def _closed(f, *args):
    c = kiln.make_jaxpr(f)(*args)
    return c.jaxpr, c.consts, [np.asarray(a) for a in args]
