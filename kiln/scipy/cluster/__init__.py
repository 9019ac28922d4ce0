"""``kiln.scipy.cluster``, as ``jax.scipy.cluster``: the ``vq`` module."""
from kiln.scipy.cluster import vq  # noqa: F401
