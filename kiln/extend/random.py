"""``jax.extend.random``: PRNG implementations (defining new ones, the built-in ones, and
the threefry primitive)."""
from __future__ import annotations

from kiln.random._keys import (  # noqa: F401
    PRNGImpl,
    PRNGSpec,
    random_seed,
    threefry_prng_impl,
)
from kiln.random._keys import prngs as _prngs
from kiln.random._threefry import threefry2x32_p, threefry_2x32  # noqa: F401
from kiln.random._user_prng import make_user_impl

rbg_prng_impl = _prngs["rbg"]
unsafe_rbg_prng_impl = _prngs["unsafe_rbg"]


def define_prng_impl(*, key_shape, seed, split, random_bits, fold_in,
                     name: str = "<unnamed>", tag: str = "?"):
    """A new PRNG implementation from functions on one key (``uint32[*key_shape]``):
    ``seed(int[]) -> key``, ``split(key, shape) -> keys[*shape]``,
    ``random_bits(key, bit_width, shape)``, ``fold_in(key, uint32[]) -> key``.

    Returns a ``PRNGSpec`` to pass as ``impl=`` to ``jax.random.key``,
    ``wrap_key_data`` and the like. The functions are applied under ``vmap`` to arrays
    of keys, and called with kiln values.
    """
    return PRNGSpec(make_user_impl(key_shape, seed, split, random_bits, fold_in,
                                   name=name, tag=tag))


def seed_with_impl(impl, seed):
    return random_seed(seed, impl=impl)


__all__ = ["define_prng_impl", "random_seed", "seed_with_impl", "rbg_prng_impl",
           "unsafe_rbg_prng_impl", "threefry2x32_p", "threefry_2x32", "threefry_prng_impl"]
