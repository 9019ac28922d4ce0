"""``jax._src.dtypes``: kiln's dtype helpers under JAX's private module name."""
from __future__ import annotations

import numpy as np

from kiln.dtypes import *  # noqa: F401,F403
from kiln.dtypes import (  # noqa: F401
    ExtendedDType,
    canonicalize_dtype,
    dtype,
    extended,
    finfo,
    iinfo,
    issubdtype,
    prng_key,
    result_type,
    supports_inf,
)

#: NumPy's dtype class (annotations in libraries use ``dtypes.DType``).
DType = np.dtype
