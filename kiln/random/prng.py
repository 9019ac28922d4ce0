"""``kiln.random.prng``: the PRNG implementation layer (as ``jax.prng`` /
``jax.extend.random``): the threefry hash and primitive, PRNG implementations, and
the key primitives that operate on raw key data."""
from kiln.random._keys import (  # noqa: F401
    KeyTy,
    PRNGImpl,
    PRNGKeyArray,
    prngs,
    random_bits_p,
    random_fold_in_p,
    random_seed_p,
    random_split_p,
    random_unwrap,
    random_wrap,
    register_prng,
    threefry_prng_impl,
)
from kiln.random._threefry import (  # noqa: F401
    fold_in_np,
    iota_2x32,
    random_bits_np,
    seed_np,
    split_np,
    threefry2x32,
    threefry2x32_np,
    threefry2x32_p,
    threefry_2x32,
)


def threefry_seed(seed):
    """Raw threefry key data (uint32[2]) for an integer seed."""
    from kiln.random._keys import PRNGKey
    return PRNGKey(seed)


def threefry_split(key, shape):
    """Split raw threefry key data into ``shape`` new keys (``shape + (2,)``)."""
    from kiln.random._keys import canonicalize_shape
    return random_split_p.bind(key, shape=canonicalize_shape(shape), impl=threefry_prng_impl)


def threefry_fold_in(key, data):
    from kiln.random._keys import fold_in
    return fold_in(key, data)


def threefry_random_bits(key, bit_width, shape):
    if bit_width not in (8, 16, 32, 64):
        raise TypeError("requires 8-, 16-, 32- or 64-bit field width.")
    return random_bits_p.bind(key, bit_width=bit_width, shape=tuple(shape),
                              impl=threefry_prng_impl)
