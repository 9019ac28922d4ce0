"""``jax._src.random.rbg``: the ``rbg`` and ``unsafe_rbg`` PRNG implementations (the same
objects as ``jax.extend.random``'s)."""
from kiln.extend.random import rbg_prng_impl, unsafe_rbg_prng_impl  # noqa: F401
