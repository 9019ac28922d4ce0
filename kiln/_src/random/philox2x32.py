"""``jax._src.random.philox2x32``: the Philox-2x32-10 PRNG (keys ``key<phx2>``, raw key data
``uint32[1]``): its hash primitive ``philox2x32_p``, its implementation ``philox2x32_prng_impl``
(the one ``jax.random.key(seed, impl="philox2x32")`` uses) and JAX's per-key functions on raw
keys."""
from kiln.random._hash_prims import philox2x32_p  # noqa: F401
from kiln.random._keys import prngs as _prngs
from kiln.random._raw_key_fns import raw_key_functions as _raw_key_functions

philox2x32_prng_impl = _prngs["philox2x32"]
_fns = _raw_key_functions("philox2x32")
philox2x32_seed = _fns["philox2x32_seed"]
philox2x32_split = _fns["philox2x32_split"]
philox2x32_fold_in = _fns["philox2x32_fold_in"]
philox2x32_random_bits = _fns["philox2x32_random_bits"]
del _fns
