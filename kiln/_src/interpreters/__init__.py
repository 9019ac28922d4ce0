"""``jax._src.interpreters``: the pieces of JAX's private interpreters libraries import."""
