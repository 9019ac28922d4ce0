"""``jax._src.tpu.linalg.eigh``: Hermitian eigendecomposition by QDWH spectral divide and
conquer (:mod:`kiln.scipy._qdwh_eigh`)."""
from kiln.scipy._qdwh_eigh import eigh, split_spectrum

__all__ = ["eigh", "split_spectrum"]
