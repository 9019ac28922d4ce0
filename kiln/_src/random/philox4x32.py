"""``jax._src.random.philox4x32``: the Philox-4x32-10 PRNG (keys ``key<phx4>``, raw key data
``uint32[2]``): its hash primitive ``philox4x32_p``, its implementation ``philox4x32_prng_impl``
(the one ``jax.random.key(seed, impl="philox4x32")`` uses) and JAX's per-key functions on raw
keys."""
from kiln.random._hash_prims import philox4x32_p  # noqa: F401
from kiln.random._keys import prngs as _prngs
from kiln.random._raw_key_fns import raw_key_functions as _raw_key_functions

philox4x32_prng_impl = _prngs["philox4x32"]
_fns = _raw_key_functions("philox4x32")
philox4x32_seed = _fns["philox4x32_seed"]
philox4x32_split = _fns["philox4x32_split"]
philox4x32_fold_in = _fns["philox4x32_fold_in"]
philox4x32_random_bits = _fns["philox4x32_random_bits"]
del _fns
