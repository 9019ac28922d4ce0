"""``jax.extend``: access to kiln's internal machinery for libraries that extend it.

As JAX's, this surface has no compatibility guarantee. kiln provides the parts libraries
built on JAX use (Flax, Optax, Chex): :mod:`kiln.extend.core` (primitives, jaxprs, the
current trace), :mod:`kiln.extend.linear_util` (``WrappedFun`` and its transformations) and
:mod:`kiln.extend.source_info_util`. JAX's ``backend``, ``lowering``, ``mlir``, ``pallas``,
``random``, ``sharding`` and ``xla`` submodules are about XLA and are not provided.
"""
from kiln.extend import core, linear_util, source_info_util  # noqa: F401

__all__ = ["core", "linear_util", "source_info_util"]
