"""Stand-in for ``jax._src.tpu``: only its ``linalg`` algorithms, which JAX also uses
off TPU (``jax.scipy.linalg.polar``'s QDWH)."""
