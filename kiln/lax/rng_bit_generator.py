"""``lax.rng_bit_generator``: XLA's stateless RngBitGenerator, with the bits JAX gets on CPU.

The primitive takes a key (``uint32[4]``, or ``uint64[2]`` under x64) and returns the
updated key and an array of random bits (``uint8``/``16``/``32``/``64``). The key, read
as two 64-bit words ``(s0, s1)`` (little-endian pairs of the ``uint32`` words), holds a
hash key and a counter:

* ``RNG_PHILOX`` (and ``RNG_DEFAULT``, which XLA's CPU compiler expands as Philox):
  Philox-4x32 with 10 rounds, key ``(lo(s0), hi(s0))``, on the 128-bit counters
  ``(s1, s0) + i`` (low word ``s1``, carried into ``s0``); each counter gives four
  words, laid out in order; 64-bit values join words ``(0, 1)`` and ``(2, 3)`` (low
  first). The new key is ``(s0, s1 + number of counters)``.
* ``RNG_THREE_FRY``: Threefry-2x32 under key ``(lo(s0), hi(s0))`` on the 64-bit
  counters ``s1 + i``. 32-bit (and narrower) outputs hash half of the elements: the
  first even axis of the shape (else its largest) is cut into pairs whose two members
  are the hash's two lanes; 64-bit outputs join the lanes (``lane0 | lane1 << 32``).
  The new key is ``(s0, s1 + number of hashes)``.

8- and 16-bit outputs are the low bits of 32-bit ones. Under ``vmap`` the rule is JAX's:
the bits of a batch come from the *first* key of the batch, as one array of shape
``(batch, *shape)``.

What it must not hold: PRNG key implementations built on it (``kiln.random._rbg``).
"""
from __future__ import annotations

import enum
import math

import numpy as np

from kiln import dtypes
from kiln.config import config
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.lax._factory import standard_primitive

_U32 = np.dtype(np.uint32)
_U64 = np.dtype(np.uint64)
_UINTS = (np.dtype(np.uint8), np.dtype(np.uint16), _U32, _U64)
_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


class RandomAlgorithm(enum.IntEnum):
    """The PRNG algorithm of ``rng_bit_generator``."""

    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2

    def __str__(self):
        return self.name


# ----------------------------------------------------------------------------------------------
# The generators on NumPy values.

def _state_words(key: np.ndarray) -> tuple:
    """``(s0, s1)``: the two 64-bit words of a ``uint32[4]`` or ``uint64[2]`` key."""
    if key.dtype == _U64:
        return np.uint64(key[0]), np.uint64(key[1])
    k = key.astype(_U64)
    return k[0] | (k[1] << _S32), k[2] | (k[3] << _S32)


def _state_key(s0, s1, like: np.ndarray) -> np.ndarray:
    if like.dtype == _U64:
        return np.array([s0, s1], _U64)
    w = np.array([s0 & _M32, s0 >> _S32, s1 & _M32, s1 >> _S32], _U64)
    return w.astype(_U32)


def _lo(x):
    return (np.asarray(x, _U64) & _M32).astype(_U32)


def _hi(x):
    return (np.asarray(x, _U64) >> _S32).astype(_U32)


_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))


def philox4x32(x: list, k0, k1) -> list:
    """Philox-4x32-10 of the four uint32 lanes ``x`` under key ``(k0, k1)``."""
    x0, x1, x2, x3 = (np.asarray(v, _U32) for v in x)
    k0, k1 = np.uint32(k0), np.uint32(k1)
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0 = x0.astype(_U64) * _PHILOX_M[0]
            p1 = x2.astype(_U64) * _PHILOX_M[1]
            x0, x1, x2, x3 = (_hi(p1) ^ x1 ^ k0, _lo(p1), _hi(p0) ^ x3 ^ k1, _lo(p0))
            k0 = np.uint32(k0 + _PHILOX_W[0])
            k1 = np.uint32(k1 + _PHILOX_W[1])
    return [x0, x1, x2, x3]


def _philox_words(s0, s1, nvec: int) -> list:
    """The four output lanes of Philox on the counters ``(s1, s0) + i``, ``i < nvec``."""
    i = np.arange(nvec, dtype=_U64)
    with np.errstate(over="ignore"):
        low = s1 + i
    high = np.where(low < s1, s0 + np.uint64(1), s0).astype(_U64)
    return philox4x32([_lo(low), _hi(low), _lo(high), _hi(high)], _lo(s0), _hi(s0))


def _philox(key: np.ndarray, shape: tuple, dtype: np.dtype):
    s0, s1 = _state_words(key)
    n = math.prod(shape)
    if dtype == _U64:
        nvec = -(-2 * n // 4)
        w = _philox_words(s0, s1, nvec)
        b0 = w[0].astype(_U64) | (w[1].astype(_U64) << _S32)
        b1 = w[2].astype(_U64) | (w[3].astype(_U64) << _S32)
        flat = np.stack([b0, b1], axis=1).reshape(-1)[:n]
    else:
        nvec = -(-n // 4)
        w = _philox_words(s0, s1, nvec)
        flat = np.stack(w, axis=1).reshape(-1)[:n]
        if dtype != _U32:
            flat = flat.astype(dtype)
    with np.errstate(over="ignore"):
        new = _state_key(s0, s1 + np.uint64(nvec), key)
    return new, flat.reshape(shape)


# The Threefry-2x32 hash on NumPy values is kiln.random's (its native kernels);
# ``kiln.random._threefry`` installs it here when imported (kiln.random sits above lax).
_threefry2x32_np = None


def set_threefry(threefry2x32_np) -> None:
    """Install ``threefry2x32_np(k0, k1, x0, x1) -> (y0, y1)`` (uint32 NumPy arrays)."""
    global _threefry2x32_np
    _threefry2x32_np = threefry2x32_np


def _threefry_hash(s0, counters):
    if _threefry2x32_np is None:
        raise RuntimeError("rng_bit_generator's THREE_FRY needs kiln.random: import kiln")
    return _threefry2x32_np(_lo(s0), _hi(s0), _lo(counters), _hi(counters))


def _threefry(key: np.ndarray, shape: tuple, dtype: np.dtype):
    s0, s1 = _state_words(key)
    if dtype == _U64:
        n = math.prod(shape)
        with np.errstate(over="ignore"):
            ctr = s1 + np.arange(n, dtype=_U64)
        y0, y1 = _threefry_hash(s0, ctr)
        out = (y0.astype(_U64) | (y1.astype(_U64) << _S32)).reshape(shape)
        with np.errstate(over="ignore"):
            return _state_key(s0, s1 + np.uint64(n), key), out
    if not shape:
        nh, split, half = 1, None, (1,)
    else:
        even = [i for i, d in enumerate(shape) if d % 2 == 0]
        split = even[0] if even else int(np.argmax(shape))
        half = list(shape)
        half[split] = -(-shape[split] // 2)
        nh = math.prod(half)
    with np.errstate(over="ignore"):
        ctr = (s1 + np.arange(nh, dtype=_U64)).reshape(half)
    y0, y1 = _threefry_hash(s0, ctr)
    if split is None:
        out = y0.reshape(())
    else:
        both = np.stack([y0, y1], axis=split + 1)
        full = list(shape)
        full[split] = 2 * half[split]
        out = both.reshape(full)
        if full[split] != shape[split]:
            out = out[tuple(slice(0, d) for d in shape)]
    if dtype != _U32:
        out = out.astype(dtype)
    with np.errstate(over="ignore"):
        return _state_key(s0, s1 + np.uint64(nh), key), np.array(out, order="C")


def rng_bit_generator_np(key, shape, dtype, algorithm):
    """``(new_key, bits)`` on NumPy values (``RNG_DEFAULT`` is Philox, as XLA on CPU)."""
    key = np.asarray(key)
    dtype = np.dtype(dtype)
    if RandomAlgorithm(algorithm) == RandomAlgorithm.RNG_THREE_FRY:
        return _threefry(key, tuple(shape), dtype)
    return _philox(key, tuple(shape), dtype)


# ----------------------------------------------------------------------------------------------
# The primitive.

def _abstract_eval(key, *, shape, dtype, algorithm, out_sharding=None):
    ok = (key.shape == (4,) and key.dtype == _U32) or (key.shape == (2,) and key.dtype == _U64)
    if not ok:
        raise TypeError("rng_bit_generator key must be uint32[4] or uint64[2], got "
                        f"{key.str_short()}")
    return [ShapedArray(key.shape, key.dtype, key.weak_type),
            ShapedArray(tuple(shape), np.dtype(dtype))]


def _impl(key, *, shape, dtype, algorithm, out_sharding=None):
    new, bits = rng_bit_generator_np(key, shape, dtype, algorithm)
    return [new, bits]


rng_bit_generator_p = standard_primitive(
    "rng_bit_generator", _abstract_eval, _impl,
    weak_type_rule=lambda w, **_: [w, False], multiple_results=True)
ad.defjvp_zero(rng_bit_generator_p)


def _batch(axis_data, vals, dims, *, shape, dtype, algorithm, out_sharding=None):
    """JAX's rule: one draw of shape ``(batch, *shape)`` from the first key of the batch;
    that key alone advances."""
    from kiln.lax.slicing import dynamic_update_index_in_dim, index_in_dim
    (keys,), (d,) = vals, dims
    if d is None:
        return rng_bit_generator_p.bind(keys, shape=shape, dtype=dtype, algorithm=algorithm,
                                        out_sharding=out_sharding), [None, None]
    keys = batching.moveaxis(keys, d, 0)
    size = get_aval(keys).shape[0]
    key = index_in_dim(keys, 0, 0, keepdims=False)
    new_key, bits = rng_bit_generator_p.bind(key, shape=(size, *shape), dtype=dtype,
                                             algorithm=algorithm, out_sharding=None)
    new_keys = dynamic_update_index_in_dim(keys, new_key, 0, 0)
    return [new_keys, bits], [0, 0]


batching.batch_rules[rng_bit_generator_p] = _batch


def rng_bit_generator(key, shape, dtype=np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *,
                      out_sharding=None):
    """Stateless random bits from XLA's RngBitGenerator: ``(new_key, bits)``.

    Args:
      key: ``uint32[4]`` (or ``uint64[2]`` with x64) generator state.
      shape: the shape of ``bits``.
      dtype: ``uint8``, ``uint16``, ``uint32`` or ``uint64``.
      algorithm: a :class:`RandomAlgorithm`; ``RNG_DEFAULT`` is Philox on CPU.
      out_sharding: accepted for compatibility.

    Returns:
      The updated key (same shape and dtype as ``key``) and the bits.
    """
    from kiln.lax.slicing import _ints
    shape = _ints(shape)
    dtype = dtypes.check_and_canonicalize_user_dtype(dtype, "rng_bit_generator")
    if np.dtype(dtype) not in _UINTS:
        raise TypeError(f"rng_bit_generator: unsupported dtype {dtype}")
    if not config.jax_enable_x64 and np.dtype(dtype) == _U64:
        dtype = _U32
    return tuple(rng_bit_generator_p.bind(key, shape=shape, dtype=np.dtype(dtype),
                                          algorithm=RandomAlgorithm(algorithm),
                                          out_sharding=out_sharding))


__all__ = ["RandomAlgorithm", "rng_bit_generator", "rng_bit_generator_p"]
