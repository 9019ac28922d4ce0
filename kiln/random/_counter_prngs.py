"""JAX's other counter-based PRNGs: ``philox2x32`` (``key<phx2>``, data ``uint32[1]``),
``philox4x32`` (``key<phx4>``, ``uint32[2]``) and ``threefry4x32`` (``key<fry4>``,
``uint32[4]``), on NumPy raw key data with a leading batch of keys.

Each hashes counters under the key, as JAX defines them: a seed's high and low words
are hashed into the key; ``split`` hashes the 64-bit row-major index of every new key;
``fold_in`` hashes the data; ``random_bits`` hashes the index of every element and
xors the output words (64-bit values join two words). They are pure functions of each
key, so a batch of keys is the per-key result (what JAX's ``vmap`` gives).

The hashes (``philox2x32``, ``philox4x32_hash``, ``threefry4x32``; also the eager impls
of the hash primitives of ``_hash_prims``) work on chunks of 32K elements, on threads
for large inputs: Philox reads each 64-bit product as two uint32 views, Threefry
updates its lanes in place.

What it must not hold: the key types (``_keys``) or samplers.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from kiln.lax.rng_bit_generator import _PHILOX_M, _PHILOX_W
from kiln.random._threefry import UINT_DTYPES, _run_spans, iota_2x32, seed_np

_U32 = np.dtype(np.uint32)
_U64 = np.dtype(np.uint64)
_LITTLE = sys.byteorder == "little"
# Elements per chunk: the lanes of one chunk stay in L2; chunks run on threads (NumPy
# releases the GIL inside its ufuncs).
_CHUNK = 1 << 15


def _chunked(rounds, args, nouts: int):
    """The ``nouts`` results of ``rounds(*args)`` (uint32 lanes, broadcast together) as
    fresh contiguous arrays of the broadcast shape, worked in chunks of the flattened
    elements."""
    args = [np.asarray(a, _U32) for a in args]
    shape = np.broadcast_shapes(*(a.shape for a in args))
    n = math.prod(shape)
    if n <= _CHUNK:
        return [np.array(np.broadcast_to(y, shape), _U32) for y in rounds(*args)]
    flat = [a.reshape(()) if a.size == 1 else
            np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1) for a in args]
    outs = None

    def work(spans):
        nonlocal outs
        for s, e in spans:
            ys = rounds(*[a if a.ndim == 0 else a[s:e] for a in flat])
            for o, y in zip(outs, ys):
                o[s:e] = y
    outs = [np.empty(n, _U32) for _ in range(nouts)]
    _run_spans(work, n, _CHUNK)
    return [o.reshape(shape) for o in outs]


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


def _mulhilo(x, m):
    """The low and high uint32 words of the 64-bit products ``x * m`` (views of one
    uint64 result on little-endian machines, which avoids two conversions)."""
    p = np.asarray(np.multiply(x, m, dtype=_U64))
    if _LITTLE:
        w = p[..., None].view(_U32)
        return w[..., 0], w[..., 1]
    return p.astype(_U32), (p >> np.uint64(32)).astype(_U32)


def _xor3(a, b, c):
    t = np.bitwise_xor(a, b)
    if np.shape(t) == np.broadcast_shapes(np.shape(t), np.shape(c)) and np.ndim(t):
        return np.bitwise_xor(t, c, out=t)
    return np.bitwise_xor(t, c)


def _philox2_rounds(k0, x0, x1):
    with np.errstate(over="ignore"):
        for rnd in range(10):
            if rnd:
                k0 = k0 + _P2_W
            lo, hi = _mulhilo(x0, _P2_M)
            x0, x1 = _xor3(hi, x1, k0), lo
    return [x0, x1]


def philox2x32(k0, x0, x1):
    """Philox-2x32-10 of the lanes ``(x0, x1)`` under the key word ``k0`` (broadcast)."""
    return _chunked(_philox2_rounds, (k0, x0, x1), 2)


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

def _philox4_rounds(k0, k1, x0, x1, x2, x3):
    with np.errstate(over="ignore"):
        for rnd in range(10):
            if rnd:
                k0 = k0 + _PHILOX_W[0]
                k1 = k1 + _PHILOX_W[1]
            lo0, hi0 = _mulhilo(x0, _PHILOX_M[0])
            lo1, hi1 = _mulhilo(x2, _PHILOX_M[1])
            x0, x1, x2, x3 = _xor3(hi1, x1, k0), lo1, _xor3(hi0, x3, k1), lo0
    return [x0, x1, x2, x3]


def philox4x32_hash(k0, k1, x0, x1, x2, x3):
    """Philox-4x32-10 of four lanes under the key words ``(k0, k1)`` (all broadcast)."""
    return _chunked(_philox4_rounds, (k0, k1, x0, x1, x2, x3), 4)


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


def _threefry4_rounds(k0, k1, k2, k3, x0, x1, x2, x3):
    ks = [k0, k1, k2, k3, k0 ^ k1 ^ k2 ^ k3 ^ T4_PARITY]
    with np.errstate(over="ignore"):
        x = [np.add(x0, k0), np.add(x1, k1), np.add(x2, k2), np.add(x3, k3)]
        shape = np.broadcast_shapes(*(np.shape(v) for v in x + ks))
        x = [np.array(np.broadcast_to(v, shape), _U32) for v in x]
        tmp = np.empty(shape, _U32)
        for rnd in range(20):
            r0, r1 = T4_ROT[rnd % 8]
            a, b, c, d = (0, 1, 2, 3) if rnd % 2 == 0 else (0, 3, 2, 1)
            for (p, q, r) in ((a, b, r0), (c, d, r1)):
                np.add(x[p], x[q], out=x[p])
                np.left_shift(x[q], np.uint32(r), out=tmp)
                np.right_shift(x[q], np.uint32(32 - r), out=x[q])
                np.bitwise_or(x[q], tmp, out=x[q])
                np.bitwise_xor(x[q], x[p], out=x[q])
            if rnd & 3 == 3:
                j = rnd // 4
                for i in range(4):
                    np.add(x[i], ks[(i + 1 + j) % 5], out=x[i])
                np.add(x[3], np.uint32(j + 1), out=x[3])
    return x


def threefry4x32(k, x):
    """Threefry-4x32-20 of the lanes ``x`` (four arrays) under the key words ``k``."""
    return _chunked(_threefry4_rounds, (*k, *x), 4)


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
