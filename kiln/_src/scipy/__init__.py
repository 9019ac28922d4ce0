"""``jax._src.scipy``: its submodules that JAX's tests import are kiln modules (see
``kiln._src.ALIASES``)."""
from kiln._src import subpackage_getattr

__getattr__ = subpackage_getattr("scipy")
