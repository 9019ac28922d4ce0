"""``jax._src.lib``: what JAX's private ``lib`` module reports about jaxlib. kiln runs no
jaxlib: the version is the JAX version kiln follows, there is no CUDA (``cuda_versions``
is None, as in a CPU-only jaxlib) and no XLA extension object."""
from __future__ import annotations

version: tuple[int, ...] = (0, 10, 2)
version_str: str = "0.10.2"
#: JAX 0.10.2's ``jaxlib_extension_version``; kiln follows that API level.
jaxlib_extension_version: int = 467
cuda_versions = None
rocm_versions = None
