"""``jax.experimental.sparse._lowerings``: JAX's cuSPARSE kernels as primitives.

kiln runs on CPUs and has no cuSPARSE: only the dtype tables are provided (JAX's tests
read them at import); the GPU primitives (``coo_spmv_p``, ``coo_spmm_p``, ``csr_spmv_p``,
``csr_spmm_p``) raise ``AttributeError`` naming themselves.
"""
from __future__ import annotations

import numpy as np

__all__ = ["SUPPORTED_DATA_DTYPES", "SUPPORTED_INDEX_DTYPES"]

SUPPORTED_DATA_DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
SUPPORTED_INDEX_DTYPES = [np.int32]


def __getattr__(name):
    if name.endswith("_p"):
        raise AttributeError(f"jax.experimental.sparse._lowerings.{name}: a cuSPARSE (GPU) "
                             "kernel, not provided by kiln.")
    raise AttributeError(f"module 'kiln.experimental.sparse._lowerings' has no attribute "
                         f"{name!r}")
