"""``jax._src.random.threefry4x32``: the Threefry-4x32-20 PRNG (keys ``key<fry4>``, raw key data
``uint32[4]``): its hash primitive ``threefry4x32_p``, its implementation ``threefry4x32_prng_impl``
(the one ``jax.random.key(seed, impl="threefry4x32")`` uses) and JAX's per-key functions on raw
keys."""
from kiln.random._hash_prims import threefry4x32_p  # noqa: F401
from kiln.random._keys import prngs as _prngs
from kiln.random._raw_key_fns import raw_key_functions as _raw_key_functions

threefry4x32_prng_impl = _prngs["threefry4x32"]
_fns = _raw_key_functions("threefry4x32")
threefry4x32_seed = _fns["threefry4x32_seed"]
threefry4x32_split = _fns["threefry4x32_split"]
threefry4x32_fold_in = _fns["threefry4x32_fold_in"]
threefry4x32_random_bits = _fns["threefry4x32_random_bits"]
del _fns
