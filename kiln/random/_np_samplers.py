"""NumPy versions of the basic samplers, on raw keys, for the rejection loops.

The rejection samplers (gamma's Marsaglia-Tsang loop, poisson, binomial) run as
primitives whose impls loop in NumPy; inside them, keys are raw uint32 arrays
of shape ``(..., 2)`` and every helper here computes, for each key, exactly what
the corresponding ``kiln.random`` sampler computes (JAX's bits, XLA's float
arithmetic).

What this module must not hold: primitives or traced code.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from kiln import dtypes
from kiln.random import _rbg, _threefry
from kiln.random import _xla_math as xm

_state = threading.local()


@contextlib.contextmanager
def using(impl):
    """Run the helpers on keys of PRNG implementation ``impl`` (None: threefry)."""
    prev = getattr(_state, "impl", None)
    _state.impl = impl
    try:
        yield
    finally:
        _state.impl = prev


def _impl_name() -> str:
    impl = getattr(_state, "impl", None)
    return "threefry2x32" if impl is None else impl.name


def split(keys, num, vmapped=False):
    """``num`` new keys per key: shape ``keys.shape[:-1] + (num, key_size)``. Each key is
    split on its own (JAX's ``lax.map`` over keys); with ``vmapped``, as JAX's ``vmap`` of
    ``split`` (the same except for ``unsafe_rbg``, whose batch draws from its first key)."""
    name = _impl_name()
    if name == "threefry2x32":
        return _threefry.split_np(keys, (num,))
    if name == "unsafe_rbg":
        return (_rbg.unsafe_split if vmapped else _rbg.unsafe_split_per_key)(keys, (num,))
    return _state.impl.split(keys, (num,))     # per-key functions of their keys


def random_bits(keys, bit_width, shape, vmapped=False):
    """Each key's own ``random_bits`` (``keys.shape[:-1] + shape``); with ``vmapped``, JAX's
    ``vmap`` of it (for ``rbg`` keys: one draw for the whole batch from its first key)."""
    name = _impl_name()
    if name == "threefry2x32":
        return _threefry.random_bits_np(keys, bit_width, shape)
    if name not in ("rbg", "unsafe_rbg"):
        return _state.impl.random_bits(keys, bit_width, shape)
    if vmapped:
        return _rbg.random_bits(keys, bit_width, shape)
    return _rbg.bits_per_key(keys, bit_width, shape)


def batched_draws(nkeys: int) -> bool:
    """Whether a loop over a ``vmap`` batch of ``nkeys`` keys must draw JAX's batched way
    (from the batch's first key, whichever rows are still running): ``rbg`` keys."""
    return nkeys > 1 and _impl_name() in ("rbg", "unsafe_rbg")


def split_parts(keys, num):
    s = split(keys, num)
    return [s[..., i, :] for i in range(num)]


def fma(a, b, c):
    return xm._fma_impl(np.asarray(a), np.asarray(b), np.asarray(c))


def uniform(keys, shape, dtype, minval=0.0, maxval=1.0, vmapped=False):
    """``uniform(key, shape, dtype, minval, maxval)`` for every key (batch first); with
    ``vmapped``, as JAX's ``vmap`` of it (see :func:`random_bits`)."""
    dtype = np.dtype(dtype)
    finfo = dtypes.finfo(dtype)
    nbits, nmant = finfo.bits, finfo.nmant
    rng_bits = 8 if nmant < 8 else nbits
    bits = random_bits(keys, rng_bits, tuple(shape), vmapped)
    uint_dtype = _threefry.UINT_DTYPES[nbits]
    bits = bits.astype(uint_dtype)
    float_bits = (bits >> uint_dtype.type(rng_bits - nmant)) | \
        np.array(1.0, dtype).view(uint_dtype)
    floats = float_bits.view(dtype) - dtype.type(1)
    lo = np.asarray(minval, dtype)
    hi = np.asarray(maxval, dtype)
    return np.maximum(lo, fma(floats, (hi - lo).astype(dtype), lo)).astype(dtype)


def normal(keys, shape, dtype):
    dtype = np.dtype(dtype)
    lo = np.nextafter(np.array(-1., dtype), np.array(0., dtype), dtype=dtype)
    v = uniform(keys, shape, dtype, lo, np.array(1., dtype))
    return (dtype.type(np.sqrt(2)) * xm.erf_inv(v)).astype(dtype)


def exponential(keys, shape, dtype):
    dtype = np.dtype(dtype)
    v = uniform(keys, shape, dtype)
    return -xm.log1p(-v)
