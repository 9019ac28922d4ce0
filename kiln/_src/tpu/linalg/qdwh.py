"""``jax._src.tpu.linalg.qdwh``: QDWH polar decomposition (:mod:`kiln.scipy._qdwh`)."""
from kiln.scipy._qdwh import qdwh

__all__ = ["qdwh"]
