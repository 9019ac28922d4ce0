"""JAX's other counter-based PRNGs: ``philox2x32`` (``key<phx2>``, data ``uint32[1]``),
``philox4x32`` (``key<phx4>``, ``uint32[2]``) and ``threefry4x32`` (``key<fry4>``,
``uint32[4]``), on NumPy raw key data with a leading batch of keys.

Each hashes counters under the key, as JAX defines them: a seed's high and low words
are hashed into the key; ``split`` hashes the 64-bit row-major index of every new key;
``fold_in`` hashes the data; ``random_bits`` hashes the index of every element and
xors the output words (64-bit values join two words). They are pure functions of each
key, so a batch of keys is the per-key result (what JAX's ``vmap`` gives).

What it must not hold: the key types (``_keys``) or samplers.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.lax.rng_bit_generator import _PHILOX_M, _PHILOX_W, _hi, _lo
from kiln.random._threefry import UINT_DTYPES, iota_2x32, seed_np

_U32 = np.dtype(np.uint32)
_U64 = np.dtype(np.uint64)


def _words(keys, shape):
    """The key words of ``keys`` (batch + (n,)), shaped to broadcast with ``shape``."""
    keys = np.asarray(keys, _U32)
    b = keys.shape[:-1]
    return [keys[..., i].reshape(b + (1,) * len(shape)) for i in range(keys.shape[-1])], b


def _zeros(shape):
    return np.zeros(shape, _U32)


def _check_size(shape):
    if math.prod(shape) > 2 ** 64:
        raise NotImplementedError("random bits array of size exceeding 2 ** 64")


def _join_bits(bit_width, hi, lo, xor):
    dtype = UINT_DTYPES[bit_width]
    if bit_width == 64:
        return (hi.astype(_U64) << np.uint64(32)) | lo.astype(_U64)
    return xor if bit_width == 32 else xor.astype(dtype)


# -- philox2x32 ----------------------------------------------------------------------------------

_P2_M = np.uint64(0xD256D193)
_P2_W = np.uint32(0x9E3779B9)


def philox2x32(k0, x0, x1):
    """Philox-2x32-10 of the lanes ``(x0, x1)`` under the key word ``k0`` (broadcast)."""
    k0, x0, x1 = np.broadcast_arrays(*(np.asarray(v, _U32) for v in (k0, x0, x1)))
    k0 = k0.copy()
    with np.errstate(over="ignore"):
        for rnd in range(10):
            if rnd:
                k0 += _P2_W
            p = x0.astype(_U64) * _P2_M
            x0, x1 = (p >> np.uint64(32)).astype(_U32) ^ x1 ^ k0, p.astype(_U32)
    return x0, x1


def philox2x32_seed(seeds):
    hl = seed_np(seeds)
    out0, _ = philox2x32(np.uint32(0), hl[..., 0], hl[..., 1])
    return out0[..., None]


def philox2x32_split(keys, shape):
    (k0,), b = _words(keys, shape)
    hi, lo = iota_2x32(shape)
    out0, _ = philox2x32(k0, hi, lo)
    return np.ascontiguousarray(np.broadcast_to(out0, b + tuple(shape)))[..., None]


def philox2x32_fold_in(keys, msgs):
    keys = np.asarray(keys, _U32)
    out0, _ = philox2x32(keys[..., 0], np.uint32(0), np.asarray(msgs, _U32))
    return out0[..., None]


def philox2x32_random_bits(keys, bit_width, shape):
    shape = tuple(shape)
    _check_size(shape)
    (k0,), b = _words(keys, shape)
    hi, lo = iota_2x32(shape)
    o0, o1 = philox2x32(k0, hi, lo)
    out = _join_bits(bit_width, o0, o1, o0 ^ o1)
    return np.ascontiguousarray(np.broadcast_to(out, b + shape))


# -- philox4x32 ----------------------------------------------------------------------------------

def philox4x32_hash(k0, k1, x0, x1, x2, x3):
    """Philox-4x32-10 of four lanes under the key words ``(k0, k1)`` (all broadcast)."""
    arrs = np.broadcast_arrays(*(np.asarray(v, _U32) for v in (k0, k1, x0, x1, x2, x3)))
    k0, k1 = arrs[0].copy(), arrs[1].copy()
    x0, x1, x2, x3 = arrs[2:]
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0 = x0.astype(_U64) * _PHILOX_M[0]
            p1 = x2.astype(_U64) * _PHILOX_M[1]
            x0, x1, x2, x3 = (_hi(p1) ^ x1 ^ k0, _lo(p1), _hi(p0) ^ x3 ^ k1, _lo(p0))
            k0 += _PHILOX_W[0]
            k1 += _PHILOX_W[1]
    return [x0, x1, x2, x3]


def philox4x32_seed(seeds):
    hl = seed_np(seeds)
    z = np.uint32(0)
    out = philox4x32_hash(z, z, hl[..., 0], hl[..., 1], z, z)
    return np.stack([out[0], out[1]], axis=-1)


def philox4x32_split(keys, shape):
    (k0, k1), b = _words(keys, shape)
    hi, lo = iota_2x32(shape)
    z = _zeros(shape)
    out = philox4x32_hash(k0, k1, z, z, hi, lo)
    full = b + tuple(shape)
    return np.stack([np.broadcast_to(out[0], full), np.broadcast_to(out[1], full)], axis=-1)


def philox4x32_fold_in(keys, msgs):
    keys = np.asarray(keys, _U32)
    z = np.uint32(0)
    out = philox4x32_hash(keys[..., 0], keys[..., 1], z, z, z, np.asarray(msgs, _U32))
    return np.stack([out[0], out[1]], axis=-1)


def philox4x32_random_bits(keys, bit_width, shape):
    shape = tuple(shape)
    _check_size(shape)
    (k0, k1), b = _words(keys, shape)
    hi, lo = iota_2x32(shape)
    z = _zeros(shape)
    o = philox4x32_hash(k0, k1, hi, lo, z, z)
    out = _join_bits(bit_width, o[0], o[1], o[0] ^ o[1] ^ o[2] ^ o[3])
    return np.ascontiguousarray(np.broadcast_to(out, b + shape))


# -- threefry4x32 --------------------------------------------------------------------------------

T4_ROT = ((10, 26), (11, 21), (13, 27), (23, 5), (6, 20), (17, 11), (25, 10), (18, 20))
T4_PARITY = np.uint32(0x1BD11BDA)


def _rotl(x, d):
    return (x << np.uint32(d)) | (x >> np.uint32(32 - d))


def threefry4x32(k, x):
    """Threefry-4x32-20 of the lanes ``x`` (four arrays) under the key words ``k``."""
    arrs = np.broadcast_arrays(*(np.asarray(v, _U32) for v in (*k, *x)))
    k = [a.copy() for a in arrs[:4]]
    x0, x1, x2, x3 = (a.copy() for a in arrs[4:])
    ks = k + [k[0] ^ k[1] ^ k[2] ^ k[3] ^ T4_PARITY]
    with np.errstate(over="ignore"):
        x0 += ks[0]
        x1 += ks[1]
        x2 += ks[2]
        x3 += ks[3]
        for rnd in range(20):
            r0, r1 = T4_ROT[rnd % 8]
            if rnd % 2 == 0:
                x0 += x1
                x1 = _rotl(x1, r0) ^ x0
                x2 += x3
                x3 = _rotl(x3, r1) ^ x2
            else:
                x0 += x3
                x3 = _rotl(x3, r0) ^ x0
                x2 += x1
                x1 = _rotl(x1, r1) ^ x2
            if rnd & 3 == 3:
                j = rnd // 4
                x0 += ks[(1 + j) % 5]
                x1 += ks[(2 + j) % 5]
                x2 += ks[(3 + j) % 5]
                x3 += ks[(4 + j) % 5]
                x3 += np.uint32(1 + j)
    return [x0, x1, x2, x3]


def threefry4x32_seed(seeds):
    hl = seed_np(seeds)
    z = np.uint32(0)
    return np.stack(threefry4x32([hl[..., 0], hl[..., 1], z, z], [z, z, z, z]), axis=-1)


def threefry4x32_split(keys, shape):
    k, b = _words(keys, shape)
    hi, lo = iota_2x32(shape)
    z = _zeros(shape)
    out = threefry4x32(k, [z, z, hi, lo])
    full = b + tuple(shape)
    return np.stack([np.broadcast_to(o, full) for o in out], axis=-1)


def threefry4x32_fold_in(keys, msgs):
    keys = np.asarray(keys, _U32)
    z = np.uint32(0)
    out = threefry4x32([keys[..., i] for i in range(4)], [z, z, z, np.asarray(msgs, _U32)])
    return np.stack(out, axis=-1)


def threefry4x32_random_bits(keys, bit_width, shape):
    shape = tuple(shape)
    _check_size(shape)
    k, b = _words(keys, shape)
    hi, lo = iota_2x32(shape)
    z = _zeros(shape)
    o = threefry4x32(k, [hi, lo, z, z])
    out = _join_bits(bit_width, o[0] ^ o[2], o[1] ^ o[3], o[0] ^ o[1] ^ o[2] ^ o[3])
    return np.ascontiguousarray(np.broadcast_to(out, b + shape))
