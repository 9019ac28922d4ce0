"""``jax._src.random.prng``: kiln's key machinery (:mod:`kiln.random._keys`), except that
``PRNGImpl`` takes JAX's per-key functions.

JAX's internal ``PRNGImpl(key_shape, seed, split, random_bits, fold_in, name, tag)`` takes
functions on *one* key written with ``jnp``/``lax`` (JAX's tests build custom PRNGs with
it). kiln's own ``PRNGImpl`` takes functions on NumPy batches of keys, so here the given
functions are wrapped as ``jax.extend.random.define_prng_impl`` wraps them
(:func:`kiln.random._user_prng.make_user_impl`: one ``vmap`` per batch dimension). Every
other name is :mod:`kiln.random._keys`'s.
"""
from __future__ import annotations

import importlib

from kiln.extend.random import seed_with_impl  # noqa: F401  (jax.extend.random's)
from kiln.random import _keys
from kiln.random._user_prng import make_user_impl


class PRNGImpl(_keys.PRNGImpl):
    """A PRNG from per-key functions (JAX's internal constructor's signature)."""

    def __new__(cls, key_shape, seed, split, random_bits, fold_in, name="<unnamed>",
                tag="?"):
        impl = make_user_impl(key_shape, seed, split, random_bits, fold_in, name, tag)
        return tuple.__new__(cls, tuple(impl))


def __getattr__(name: str):
    return getattr(importlib.import_module("kiln.random._keys"), name)
