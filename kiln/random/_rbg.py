"""The ``rbg`` and ``unsafe_rbg`` PRNG implementations (keys ``uint32[4]``, dtypes
``key<rbg>`` and ``key<urbg>``), as JAX defines them.

* Both seed as two copies of the threefry key of the seed, and draw bits with XLA's
  RngBitGenerator (``lax.rng_bit_generator``, default algorithm: Philox on CPU), so their
  bits are JAX's bits on CPU.
* ``rbg`` splits and folds in each half of the key with threefry (in the current
  ``jax_threefry_partitionable`` mode).
* ``unsafe_rbg`` splits by taking every tenth row of a ``(10 * n, 4)`` draw, and folds
  in ``data`` by xoring the key with the last row of a ``(10, 4)`` draw under the key
  seeded by ``data``.

The functions take raw key data with a leading batch of keys (``batch + (4,)``), as the
key primitives give them. A batch stands for JAX's ``vmap`` of the per-key function,
and JAX's ``vmap`` of ``rng_bit_generator`` draws for the whole batch from the *first*
key: so batched ``random_bits`` (and ``unsafe_rbg``'s split, and its fold-in of a batch
of data) give JAX's answer, which is not the per-key one. :func:`bits_per_key` and
:func:`split_per_key` give the per-key answers (what ``lax.map`` over the keys gives).

What it must not hold: the key types (``_keys``) or samplers.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.lax.rng_bit_generator import RandomAlgorithm, rng_bit_generator_np
from kiln.random import _threefry

_U32 = np.dtype(np.uint32)
_DEFAULT = RandomAlgorithm.RNG_DEFAULT


def seed(seeds: np.ndarray) -> np.ndarray:
    """``batch + (4,)`` keys: the threefry key of every seed, twice."""
    half = _threefry.seed_np(seeds)
    return np.concatenate([half, half], axis=-1)


def _halves(keys: np.ndarray) -> np.ndarray:
    keys = np.asarray(keys, _U32)
    return keys.reshape(keys.shape[:-1] + (2, 2))


def split(keys: np.ndarray, shape: tuple) -> np.ndarray:
    """``rbg``: each half split with threefry; ``batch + shape + (4,)``."""
    keys = np.asarray(keys, _U32)
    b = keys.shape[:-1]
    s = _threefry.split_np(_halves(keys), tuple(shape))      # b + (2,) + shape + (2,)
    s = np.moveaxis(s, len(b), -2)                            # b + shape + (2, 2)
    return np.ascontiguousarray(s).reshape(b + tuple(shape) + (4,))


def fold_in(keys: np.ndarray, msgs: np.ndarray) -> np.ndarray:
    """``rbg``: each half folded with threefry; batch shapes broadcast."""
    keys = np.asarray(keys, _U32)
    msgs = np.asarray(msgs, _U32)
    out = _threefry.fold_in_np(_halves(keys), msgs[..., None])
    return out.reshape(out.shape[:-2] + (4,))


def _draw(key: np.ndarray, shape: tuple, dtype) -> np.ndarray:
    return rng_bit_generator_np(np.asarray(key, _U32), tuple(shape), dtype, _DEFAULT)[1]


def bits_per_key(keys: np.ndarray, bit_width: int, shape: tuple) -> np.ndarray:
    """Each key's own ``random_bits`` (``batch + shape``)."""
    keys = np.asarray(keys, _U32)
    b = keys.shape[:-1]
    dtype = _threefry.UINT_DTYPES[bit_width]
    flat = keys.reshape(-1, 4)
    out = np.empty((flat.shape[0],) + tuple(shape), dtype)
    for i, k in enumerate(flat):
        out[i] = _draw(k, shape, dtype)
    return out.reshape(b + tuple(shape))


def random_bits(keys: np.ndarray, bit_width: int, shape: tuple) -> np.ndarray:
    """``random_bits`` as JAX computes it for a batch of ``rbg`` keys: one draw of shape
    ``batch + shape`` from the first key (a single key: its own bits)."""
    keys = np.asarray(keys, _U32)
    b = keys.shape[:-1]
    dtype = _threefry.UINT_DTYPES[bit_width]
    if math.prod(b) == 0:
        return np.zeros(b + tuple(shape), dtype)
    return _draw(keys.reshape(-1, 4)[0], b + tuple(shape), dtype)


def unsafe_split(keys: np.ndarray, shape: tuple) -> np.ndarray:
    """``unsafe_rbg``: every tenth row of a ``(10 * n, 4)`` draw (a batch: of one draw from
    the first key, as under JAX's ``vmap``)."""
    keys = np.asarray(keys, _U32)
    b = keys.shape[:-1]
    num = math.prod(shape)
    if math.prod(b) == 0:
        return np.zeros(b + tuple(shape) + (4,), _U32)
    rows = _draw(keys.reshape(-1, 4)[0], b + (10 * num, 4), _U32)
    return np.ascontiguousarray(rows[..., ::10, :]).reshape(b + tuple(shape) + (4,))


def unsafe_split_per_key(keys: np.ndarray, shape: tuple) -> np.ndarray:
    """Each ``unsafe_rbg`` key's own split."""
    keys = np.asarray(keys, _U32)
    b = keys.shape[:-1]
    flat = keys.reshape(-1, 4)
    out = [unsafe_split(k, shape) for k in flat]
    if not out:
        return np.zeros(b + tuple(shape) + (4,), _U32)
    return np.stack(out).reshape(b + tuple(shape) + (4,))


def unsafe_fold_in(keys: np.ndarray, msgs: np.ndarray) -> np.ndarray:
    """``unsafe_rbg``: the key xor the last row of a ``(10, 4)`` draw under ``seed(data)``;
    a batch of data draws once from the first datum's key, as under JAX's ``vmap``."""
    keys = np.asarray(keys, _U32)
    msgs = np.asarray(msgs, _U32)
    bshape = np.broadcast_shapes(keys.shape[:-1], msgs.shape)
    n = math.prod(msgs.shape)
    if n == 0 or math.prod(bshape) == 0:
        return np.zeros(bshape + (4,), _U32)
    first = seed(msgs.reshape(-1)[:1].astype(np.uint32))[0]
    if n == 1:
        last = _draw(first, (10, 4), _U32)[-1]
        return np.broadcast_to(keys ^ last, bshape + (4,)).copy()
    rows = _draw(first, msgs.shape + (10, 4), _U32)[..., -1, :]
    return np.broadcast_to(keys ^ rows, bshape + (4,)).copy()
