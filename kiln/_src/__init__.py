"""Stand-ins for the few private ``jax._src`` modules that libraries built on JAX import.

Under :mod:`kiln.as_jax`, ``jax._src.X`` resolves to ``kiln._src.X``. Only small, stable
pieces are provided: ``traceback_util`` (Flax), ``core`` and ``dtypes`` (Flax's fp8 ops).
Everything else under ``jax._src`` is JAX's implementation and has no kiln counterpart.
"""
from kiln._src import xla_bridge  # noqa: E402,F401  (read as ``jax._src.xla_bridge``)
