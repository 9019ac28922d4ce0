"""``kiln.scipy.spatial`` (``jax.scipy.spatial``): the ``transform`` submodule."""
from kiln.scipy.spatial import transform as transform

__all__ = ["transform"]
