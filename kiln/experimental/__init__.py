"""``kiln.experimental``: APIs that JAX keeps under ``jax.experimental``."""
from kiln.experimental.io_callback import io_callback  # noqa: F401

__all__ = ["io_callback"]
