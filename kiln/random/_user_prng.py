"""PRNG implementations defined by users (``jax.extend.random.define_prng_impl``).

A user gives functions on *one* key, written with ``jnp``/``lax``: ``seed(int[]) -> K``,
``split(K, shape) -> K[*shape]``, ``fold_in(K, uint32[]) -> K`` and
``random_bits(K, bit_width, shape) -> uint<bit_width>[*shape]``, where ``K`` is
``uint32[*key_shape]``. kiln's key primitives call an implementation's functions with
NumPy key data carrying any batch of keys in front (``_keys.PRNGImpl``); here each user
function is applied to such a batch under ``vmap`` (one ``vmap`` per batch dimension, as
JAX's ``iterated_vmap_unary``) and evaluated with kiln, giving NumPy data back. Under
``jit`` these primitives are host islands (the compiler lowers only threefry's).
"""
from __future__ import annotations

import numpy as np

from kiln.random import _threefry

_U32 = np.dtype(np.uint32)


def _vmapped(fn, nbatch: int):
    from kiln import vmap
    for _ in range(nbatch):
        fn = vmap(fn)
    return fn


def _np(x, dtype=None):
    out = np.asarray(x)
    return out if dtype is None or out.dtype == dtype else out.astype(dtype)


def make_user_impl(key_shape, seed, split, random_bits, fold_in, name, tag):
    """A kiln ``PRNGImpl`` running the user's per-key functions on batches of keys."""
    from kiln.random._keys import PRNGImpl
    key_shape = tuple(int(d) for d in key_shape)
    nk = len(key_shape)

    def seed_batch(seeds):
        seeds = np.asarray(seeds)
        return _np(_vmapped(seed, seeds.ndim)(seeds), _U32)

    def split_batch(keys, shape):
        keys = np.asarray(keys, _U32)
        shape = tuple(shape)
        return _np(_vmapped(lambda k: split(k, shape), keys.ndim - nk)(keys), _U32)

    def fold_in_batch(keys, msgs):
        keys = np.asarray(keys, _U32)
        msgs = np.asarray(msgs, _U32)
        b = np.broadcast_shapes(keys.shape[:keys.ndim - nk], msgs.shape)
        keys = np.broadcast_to(keys, b + key_shape)
        msgs = np.broadcast_to(msgs, b)
        return _np(_vmapped(fold_in, len(b))(keys, msgs), _U32)

    def bits_batch(keys, bit_width, shape):
        keys = np.asarray(keys, _U32)
        shape = tuple(shape)
        out = _vmapped(lambda k: random_bits(k, bit_width, shape), keys.ndim - nk)(keys)
        return _np(out, _threefry.UINT_DTYPES[bit_width])

    impl = PRNGImpl(key_shape=key_shape, seed=seed_batch, split=split_batch,
                    random_bits=bits_batch, fold_in=fold_in_batch, name=name, tag=tag)
    return impl
