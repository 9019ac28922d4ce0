"""``jax._src.abstract_arrays``: ``array_types`` (the Python types that are arrays), the
same object as ``jax.extend.core.array_types``."""
from kiln.extend.core import array_types  # noqa: F401
