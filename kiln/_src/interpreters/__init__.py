"""``jax._src.interpreters``: the pieces of JAX's private interpreters libraries import
(``pxla`` here; ``mlir``, ``batching``, ``ad``, ``partial_eval`` are kiln's modules, see
``kiln._src.ALIASES``)."""
from kiln._src import subpackage_getattr

__getattr__ = subpackage_getattr("interpreters")
