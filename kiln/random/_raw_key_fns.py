"""JAX's per-key functions of a PRNG implementation (``philox2x32_seed``,
``philox2x32_split``, ``philox2x32_fold_in``, ``philox2x32_random_bits``, and the same
for ``philox4x32``/``threefry4x32``): each takes *one* raw key (uint32 data of the
implementation's key shape), as the functions JAX's ``jax._src.random.<impl>`` modules
define, and binds kiln's key primitives on it (so they trace, ``vmap`` and ``jit``).

What it must not hold: the hashes or the key types (``_hash_prims``, ``_keys``).
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln.core.trace import get_aval
from kiln.random import _keys

_U32 = np.dtype(np.uint32)


def _as_array(x):
    from kiln.array import Array
    from kiln.core.trace import Tracer, to_array
    if isinstance(x, Tracer) or type(x) is Array:
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return to_array(np.int64(x))
    return to_array(x)


def raw_key_functions(name: str) -> dict:
    """``{f"{name}_seed": ..., f"{name}_split": ..., f"{name}_fold_in": ...,
    f"{name}_random_bits": ...}`` for the registered implementation ``name``."""
    impl = _keys.prngs[name]

    def seed(seed):
        """Create a single raw key of this PRNG from an integer seed."""
        s = _as_array(seed)
        aval = get_aval(s)
        if aval.shape:
            raise TypeError(f"PRNG key seed must be a scalar; got {seed!r}.")
        if not dtypes.issubdtype(aval.dtype, np.integer):
            raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
        return _keys.random_seed_p.bind(s, impl=impl)

    def split(key, shape):
        """Split one raw key into raw keys of ``shape`` (result ``shape + key_shape``)."""
        shape = _keys.canonicalize_shape(shape)
        return _keys.random_split_p.bind(_as_array(key), shape=shape, impl=impl)

    def fold_in(key, data):
        """Fold a scalar integer ``data`` into one raw key."""
        from kiln import lax
        d = _as_array(data)
        if get_aval(d).shape:
            raise TypeError(f"{name}_fold_in takes a scalar; got data of shape "
                            f"{get_aval(d).shape}")
        return _keys.random_fold_in_p.bind(_as_array(key), lax.convert_element_type(d, _U32),
                                           impl=impl)

    def random_bits(key, bit_width, shape):
        """Uniform random bits of ``shape`` (``uint{bit_width}``) from one raw key."""
        k = _as_array(key)
        aval = get_aval(k)
        if tuple(aval.shape) != tuple(impl.key_shape) or aval.dtype != _U32:
            raise TypeError(f"{name}_random_bits got invalid prng key.")
        if bit_width not in (8, 16, 32, 64):
            raise TypeError("requires 8-, 16-, 32- or 64-bit field width.")
        return _keys.random_bits_p.bind(k, bit_width=bit_width, shape=tuple(shape), impl=impl)

    fns = {"seed": seed, "split": split, "fold_in": fold_in, "random_bits": random_bits}
    out = {}
    for what, f in fns.items():
        f.__name__ = f.__qualname__ = f"{name}_{what}"
        out[f"{name}_{what}"] = f
    return out
