"""``jax._src.tpu.linalg.svd``: the SVD through QDWH and ``eigh``
(:mod:`kiln.scipy._qdwh_svd`)."""
from kiln.scipy._qdwh_svd import svd

__all__ = ["svd"]
