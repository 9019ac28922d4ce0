"""``jax._src.random.core``: the two helpers JAX's ``random_lax_test`` imports from it.

``_check_broadcast_shapes`` is kiln.random's own shape check; ``_safe_int_to_float`` maps
64 random bits, given as ``uint32[2, ...]`` (high word first), to a float32 in (0, 1):
the value ``bits / 2**64`` with its significand truncated to float32's 24 bits.
"""
from __future__ import annotations

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln.random._distributions import check_broadcast_shapes as _check_broadcast_shapes


def _safe_int_to_float(bits, dtype):
    bits = jnp.asarray(bits)
    if bits.dtype != np.uint32 or np.dtype(dtype) != np.float32:
        raise RuntimeError("_safe_int_to_float only works for u32 -> f32")
    hi, lo = bits[0], bits[1]
    hz, lz = lax.clz(hi), lax.clz(lo)
    lead = jnp.where(hz == 32, 32 + lz, hz)            # leading zeros of the 64 bits
    # The 32 bits after the leading one's position (that bit included).
    top = jnp.where(hz == 32, lax.shift_left(lo, lz),
                    lax.bitwise_or(lax.shift_left(hi, hz),
                                   lax.shift_right_logical(lo, np.uint32(32) - hz)))
    mant = lax.bitwise_and(lax.shift_right_logical(top, np.uint32(8)), np.uint32(0x7FFFFF))
    # The leading one sits at 2**(-1 - lead): biased exponent 126 - lead.
    expo = lax.shift_left((np.uint32(126) - lead).astype(np.uint32), np.uint32(23))
    return lax.bitcast_convert_type(lax.bitwise_or(expo, mant), np.float32)


__all__ = ["_check_broadcast_shapes", "_safe_int_to_float"]
