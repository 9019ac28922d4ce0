"""Threefry-2x32: the counter-based hash under every kiln PRNG key, and the NumPy
implementations of the threefry key operations (seed, split, fold_in, random_bits).

What this module holds:

* ``threefry2x32_np``: the hash (20 rounds, key injection every 4 rounds) on
  uint32 NumPy arrays, vectorized and worked in cache-sized chunks (threads for
  large inputs: NumPy releases the GIL inside its ufuncs).
* ``threefry2x32_p``: the primitive (``key1, key2, x1, x2 -> (y1, y2)``, operands
  broadcast), with abstract evaluation, batching and a zero JVP, so it runs
  under ``jit``/``vmap``/``grad``; ``threefry_2x32(keypair, count)`` is JAX's
  helper of the same name built on it.
* ``seed_np``, ``split_np``, ``fold_in_np``, ``random_bits_np``: the key
  operations on raw key data (uint32 arrays ending in ``(2,)``, with any leading
  batch of keys), in both settings of ``jax_threefry_partitionable``. They are the
  impls of the key primitives in ``kiln.random._keys`` and produce JAX's bits.

What it must not hold: key-array types or samplers (``_keys``, ``_distributions``).
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.interpreters import ad, batching
from kiln.lax._factory import standard_primitive
from kiln.lax.rng_bit_generator import set_threefry as _set_rbg_threefry
from kiln.random import _native

_U32 = np.dtype(np.uint32)
_ROT0 = (13, 15, 26, 6)
_ROT1 = (17, 29, 16, 24)
_SHIFTS = {r: (np.uint32(r), np.uint32(32 - r)) for r in _ROT0 + _ROT1}
_PARITY = np.uint32(0x1BD11BDA)

# 64K elements (256 KiB per operand) keep the working set of one chunk in L2.
_CHUNK = 1 << 16
_THREADS = max(1, min(4, os.cpu_count() or 1))
_pool = None


def _get_pool():
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="kiln-threefry")
    return _pool


def _forget_pool_in_child():
    # a child made by fork has none of the parent's worker threads: start a fresh pool
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _rounds(x0, x1, tmp, rotations):
    for r in rotations:
        left, right = _SHIFTS[r]
        np.add(x0, x1, out=x0)
        np.left_shift(x1, left, out=tmp)
        np.right_shift(x1, right, out=x1)
        np.bitwise_or(x1, tmp, out=x1)
        np.bitwise_xor(x1, x0, out=x1)


def _hash_inplace(k0, k1, x0, x1):
    """Threefry-2x32 of (x0, x1) under key (k0, k1), in place.

    ``x0``/``x1`` are contiguous uint32 arrays of one shape; ``k0``/``k1`` are
    uint32 scalars or arrays of that shape.
    """
    k2 = k0 ^ k1 ^ _PARITY
    ks = (k0, k1, k2)
    tmp = np.empty_like(x0)
    x0 += k0
    x1 += k1
    for i in range(5):
        _rounds(x0, x1, tmp, _ROT0 if i % 2 == 0 else _ROT1)
        x0 += ks[(i + 1) % 3]
        x1 += ks[(i + 2) % 3]
        x1 += np.uint32(i + 1)


def threefry2x32_np(k0, k1, x0, x1):
    """Threefry-2x32 on NumPy values (broadcast together); returns two new uint32 arrays."""
    k0, k1, x0, x1 = (np.asarray(v, _U32) for v in (k0, k1, x0, x1))
    shape = np.broadcast_shapes(k0.shape, k1.shape, x0.shape, x1.shape)
    scalar_keys = k0.ndim == 0 and k1.ndim == 0
    n = math.prod(shape)
    native = _native.lib() if n >= 64 else None
    if native is not None:
        return _threefry_native(k0, k1, x0, x1, shape, scalar_keys)
    y0 = np.array(np.broadcast_to(x0, shape), _U32, order="C")
    y1 = np.array(np.broadcast_to(x1, shape), _U32, order="C")
    if scalar_keys:
        k0s, k1s = np.uint32(k0), np.uint32(k1)
        if n <= _CHUNK:
            _hash_inplace(k0s, k1s, y0, y1)
            return y0, y1
        f0, f1 = y0.reshape(-1), y1.reshape(-1)

        def work(span_list):
            for s, e in span_list:
                _hash_inplace(k0s, k1s, f0[s:e], f1[s:e])
    else:
        kb0 = np.array(np.broadcast_to(k0, shape), _U32, order="C").reshape(-1)
        kb1 = np.array(np.broadcast_to(k1, shape), _U32, order="C").reshape(-1)
        if n <= _CHUNK:
            _hash_inplace(kb0, kb1, y0.reshape(-1), y1.reshape(-1))
            return y0, y1
        f0, f1 = y0.reshape(-1), y1.reshape(-1)

        def work(span_list):
            for s, e in span_list:
                _hash_inplace(kb0[s:e], kb1[s:e], f0[s:e], f1[s:e])
    _run_spans(work, n, _CHUNK)
    return y0, y1


# Installed below (kiln.random sits above lax): lax's eager rng_bit_generator hashes with
# threefry2x32_np.
_set_rbg_threefry(lambda k0, k1, x0, x1: threefry2x32_np(k0, k1, x0, x1))


def _run_spans(work, n, chunk):
    spans = [(s, min(s + chunk, n)) for s in range(0, n, chunk)]
    if _THREADS > 1 and len(spans) >= 4:
        parts = [spans[i::_THREADS] for i in range(_THREADS)]
        list(_get_pool().map(work, parts))
    else:
        work(spans)


def _threefry_native(k0, k1, x0, x1, shape, scalar_keys):
    n = math.prod(shape)
    flat = lambda v: np.ascontiguousarray(np.broadcast_to(v, shape), _U32).reshape(-1)  # noqa: E731
    f0, f1 = flat(x0), flat(x1)
    if scalar_keys:
        kk0, kk1 = np.asarray(k0, _U32).reshape(()), np.asarray(k1, _U32).reshape(())
    else:
        kk0, kk1 = flat(k0), flat(k1)
    y0 = np.empty(n, _U32)
    y1 = np.empty(n, _U32)
    big = 1 << 18

    def work(span_list):
        for s, e in span_list:
            a = kk0 if scalar_keys else kk0[s:e]
            b = kk1 if scalar_keys else kk1[s:e]
            _native.threefry2x32(a, b, f0[s:e], f1[s:e], y0[s:e], y1[s:e])

    _run_spans(work, n, big)
    return y0.reshape(shape), y1.reshape(shape)


# ----------------------------------------------------------------------------------------------
# The primitive.

def _tf_abstract_eval(k1, k2, x1, x2):
    avals = (k1, k2, x1, x2)
    if any(a.dtype != _U32 for a in avals):
        raise TypeError("Arguments to threefry2x32 must have uint32 type, got "
                        f"{[a.dtype.name for a in avals]}")
    try:
        shape = np.broadcast_shapes(*(a.shape for a in avals))
    except ValueError:
        raise TypeError("threefry2x32 got incompatible shapes for broadcasting: "
                        f"{', '.join(str(a.shape) for a in avals)}.") from None
    out = ShapedArray(shape, _U32)
    return [out, out]


def _tf_impl(k1, k2, x1, x2):
    return list(threefry2x32_np(k1, k2, x1, x2))


threefry2x32_p = standard_primitive("threefry2x32", _tf_abstract_eval, _tf_impl,
                                    weak_type_rule=lambda *a, **k: [False, False],
                                    multiple_results=True)


def _tf_batch(axis_data, vals, dims):
    from kiln import lax
    from kiln.core.trace import get_aval
    size = axis_data.size
    unbatched = []
    for v, d in zip(vals, dims):
        s = get_aval(v).shape
        unbatched.append(s if d is None else s[:d] + s[d + 1:])
    shape = np.broadcast_shapes(*unbatched)
    full = (size,) + tuple(shape)
    args = []
    for v, d, s in zip(vals, dims, unbatched):
        if d is None:
            if s == ():
                args.append(v)
                continue
            nd = len(s)
            args.append(lax.broadcast_in_dim(v, full, tuple(range(len(full) - nd, len(full)))))
        else:
            v = batching.moveaxis(v, d, 0)
            nd = len(s)
            dims_ = (0,) + tuple(range(len(full) - nd, len(full)))
            if get_aval(v).shape != full:
                v = lax.broadcast_in_dim(v, full, dims_)
            args.append(v)
    out = threefry2x32_p.bind(*args)
    return out, [0, 0]


batching.batch_rules[threefry2x32_p] = _tf_batch
ad.defjvp_zero(threefry2x32_p)


def threefry2x32(k1, k2, x1, x2):
    """Bind the threefry2x32 primitive: four broadcast-compatible uint32 operands."""
    return threefry2x32_p.bind(k1, k2, x1, x2)


def threefry_2x32(keypair, count):
    """Apply the Threefry-2x32 hash to ``count`` (any shape, uint32) under ``keypair``.

    As JAX's ``prng.threefry_2x32``: the flattened counts (padded with one zero if
    odd) are cut into halves that form the two hash lanes; the outputs are put
    back together in the same order.
    """
    from kiln import lax
    from kiln.array import make_array
    from kiln.core.trace import get_aval
    key1, key2 = _key_words(keypair)
    dts = [get_aval(key1).dtype, get_aval(key2).dtype, get_aval(count).dtype]
    if not all(d == _U32 for d in dts):
        raise TypeError(f"threefry_2x32 requires uint32 arguments, got {[d.name for d in dts]}")
    shape = get_aval(count).shape
    n = math.prod(shape)
    flat = lax.reshape(count, (n,))
    odd = n % 2
    if odd:
        flat = lax.concatenate([flat, make_array(np.zeros((1,), _U32))], 0)
    half = (n + odd) // 2
    x1 = lax.slice(flat, (0,), (half,))
    x2 = lax.slice(flat, (half,), (2 * half,))
    y1, y2 = threefry2x32_p.bind(key1, key2, x1, x2)
    out = lax.concatenate([y1, y2], 0)
    if odd:
        out = lax.slice(out, (0,), (n,))
    return lax.reshape(out, shape)


def _key_words(keypair):
    """The two uint32 words of a raw key (an array of shape (2,) or a pair)."""
    from kiln import lax
    if isinstance(keypair, (tuple, list)):
        return keypair[0], keypair[1]
    return (lax.reshape(lax.slice(keypair, (0,), (1,)), ()),
            lax.reshape(lax.slice(keypair, (1,), (2,)), ()))


# ----------------------------------------------------------------------------------------------
# Key operations on raw key data (NumPy). ``keys`` has shape (*batch, 2).

def _partitionable() -> bool:
    from kiln.config import config
    return bool(config.jax_threefry_partitionable)


def seed_np(seeds: np.ndarray) -> np.ndarray:
    """Raw keys from integer seeds (any shape): high word, low word of the 64-bit seed.

    Seeds narrower than 64 bits have a zero high word (JAX shifts them right by
    32, which gives 0); the low word is the two's-complement bit pattern.
    """
    seeds = np.asarray(seeds)
    if seeds.dtype.itemsize == 8:
        s = seeds.astype(np.uint64)
        hi = (s >> np.uint64(32)).astype(_U32)
        lo = (s & np.uint64(0xFFFFFFFF)).astype(_U32)
    else:
        hi = np.zeros(seeds.shape, _U32)
        lo = seeds.astype(np.int64).astype(np.uint64).astype(_U32) \
            if seeds.dtype.kind == "i" else seeds.astype(_U32)
    return np.stack([hi, lo], axis=-1)


def _threefry_2x32_np(k0, k1, counts):
    """``threefry_2x32`` on NumPy values with a batch of keys: ``k0``/``k1`` of shape
    ``batch``, ``counts`` a 1-D uint32 array; result of shape ``batch + counts.shape``."""
    n = counts.shape[0]
    odd = n % 2
    if odd:
        counts = np.concatenate([counts, np.zeros((1,), _U32)])
    half = counts.shape[0] // 2
    bshape = k0.shape
    kk0 = k0.reshape(bshape + (1,))
    kk1 = k1.reshape(bshape + (1,))
    y0, y1 = threefry2x32_np(kk0, kk1, counts[:half], counts[half:])
    out = np.concatenate([y0, y1], axis=-1)
    return out[..., :n] if odd else out


def iota_2x32(shape):
    """The flat index of every position of ``shape`` as (high, low) uint32 words."""
    n = math.prod(shape)
    if n < 2 ** 32:
        lo = np.arange(n, dtype=_U32).reshape(shape)
        return np.zeros(shape, _U32), lo
    idx = np.arange(n, dtype=np.uint64).reshape(shape)
    return (idx >> np.uint64(32)).astype(_U32), (idx & np.uint64(0xFFFFFFFF)).astype(_U32)


def _hash_shape(keys, shape):
    """Partitionable mode: hash the 64-bit iota of ``shape`` under every key."""
    bshape = keys.shape[:-1]
    k0 = keys[..., 0].reshape(bshape + (1,) * len(shape))
    k1 = keys[..., 1].reshape(bshape + (1,) * len(shape))
    hi, lo = iota_2x32(shape)
    return threefry2x32_np(k0, k1, hi, lo)


def split_np(keys: np.ndarray, shape: tuple) -> np.ndarray:
    """New raw keys of shape ``batch + shape + (2,)`` from raw keys ``batch + (2,)``."""
    keys = np.asarray(keys, _U32)
    bshape = keys.shape[:-1]
    if _partitionable():
        b1, b2 = _hash_shape(keys, shape)
        out = np.stack([np.broadcast_to(b1, bshape + tuple(shape)),
                        np.broadcast_to(b2, bshape + tuple(shape))], axis=-1)
        return np.ascontiguousarray(out)
    num = math.prod(shape)
    counts = np.arange(num * 2, dtype=_U32)
    out = _threefry_2x32_np(keys[..., 0], keys[..., 1], counts)
    return out.reshape(bshape + tuple(shape) + (2,))


def fold_in_np(keys: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Fold uint32 ``data`` into raw ``keys``; batch shapes broadcast (NumPy rules)."""
    keys = np.asarray(keys, _U32)
    data = np.asarray(data, _U32)
    bshape = np.broadcast_shapes(keys.shape[:-1], data.shape)
    k0 = np.broadcast_to(keys[..., 0], bshape)
    k1 = np.broadcast_to(keys[..., 1], bshape)
    d = np.broadcast_to(data, bshape)
    # threefry_2x32(key, seed(data)) with counts [0, data]: lanes x1 = 0, x2 = data.
    y0, y1 = threefry2x32_np(k0, k1, np.zeros(bshape, _U32), d)
    return np.stack([y0, y1], axis=-1)


UINT_DTYPES = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _U32,
               64: np.dtype(np.uint64)}


def random_bits_np(keys: np.ndarray, bit_width: int, shape: tuple) -> np.ndarray:
    """Uniform random bits of ``shape`` under every raw key: ``batch + shape``."""
    keys = np.asarray(keys, _U32)
    shape = tuple(shape)
    bshape = keys.shape[:-1]
    dtype = UINT_DTYPES[bit_width]
    if _partitionable():
        if math.prod(shape) > 2 ** 64:
            raise NotImplementedError("random bits array of size exceeding 2 ** 64")
        b1, b2 = _hash_shape(keys, shape)
        full = bshape + shape
        if bit_width == 64:
            out = (b1.astype(np.uint64) << np.uint64(32)) | b2.astype(np.uint64)
        else:
            np.bitwise_xor(b1, b2, out=b1)
            out = b1 if bit_width == 32 else b1.astype(dtype)
        return np.broadcast_to(out, full) if out.shape != full else out
    size = math.prod(shape)
    max_count, r = divmod(bit_width * size, 32)
    if r > 0:
        max_count += 1
    if max_count >= np.iinfo(np.uint32).max:
        raise NotImplementedError(
            "random bits of more than 2**32 - 1 words with jax_threefry_partitionable=False")
    bits = _threefry_2x32_np(keys[..., 0], keys[..., 1], np.arange(max_count, dtype=_U32))
    if bit_width == 64:
        half = max_count // 2
        out = (bits[..., :half].astype(np.uint64) << np.uint64(32)) \
            | bits[..., half:].astype(np.uint64)
    elif bit_width in (8, 16):
        per = 32 // bit_width
        shifts = (np.arange(per, dtype=_U32) * np.uint32(bit_width))
        parts = (bits[..., :, None] >> shifts) & np.uint32((1 << bit_width) - 1)
        out = parts.reshape(bshape + (max_count * per,))[..., :size].astype(dtype)
    else:
        out = bits
    return out.reshape(bshape + shape)
