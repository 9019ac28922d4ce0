"""``kiln.scipy``: SciPy-style functions built on ``kiln.lax``/``kiln.numpy``, as ``jax.scipy``."""
from kiln.scipy import (
    linalg,  # noqa: F401
    optimize,  # noqa: F401
    special,  # noqa: F401
    stats,  # noqa: F401
)
