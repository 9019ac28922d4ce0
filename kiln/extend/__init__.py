"""``jax.extend``: access to kiln's internal machinery for libraries that extend it.

As JAX's, this surface has no compatibility guarantee. kiln provides the parts libraries
built on JAX use (Flax, Optax, Chex): :mod:`kiln.extend.core` (primitives, jaxprs, the
current trace), :mod:`kiln.extend.random` (``define_prng_impl`` and the built-in PRNG
implementations), :mod:`kiln.extend.linear_util` (``WrappedFun`` and its transformations) and
:mod:`kiln.extend.source_info_util`, and :mod:`kiln.extend.backend` (the backend queries,
over kiln's one CPU backend). JAX's ``lowering``, ``mlir``, ``pallas``, ``sharding`` and
``xla`` submodules are about XLA and are not provided.
"""
from kiln.extend import backend, core, linear_util, random, source_info_util  # noqa: F401

__all__ = ["backend", "core", "linear_util", "random", "source_info_util"]
