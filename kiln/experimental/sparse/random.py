"""``jax.experimental.sparse.random_bcoo``: a BCOO array with random values at random
coordinates."""
from __future__ import annotations

import math
import operator

from kiln.experimental.sparse._bcoo_core import BCOO

__all__ = ["random_bcoo"]


def random_bcoo(key, shape, *, dtype=None, indices_dtype=None, nse=0.2, n_batch: int = 0,
                n_dense: int = 0, unique_indices: bool = True, sorted_indices: bool = False,
                generator=None, **kwds) -> BCOO:
    """A random BCOO array.

    Args:
      key: a PRNG key.
      shape: the array's shape.
      dtype: the dtype of the values (default: the default float dtype).
      indices_dtype: the dtype of the indices (default: the default int dtype).
      nse: the number of stored elements per batch, or a fraction (``0 < nse < 1``) of
        the sparse size, rounded up (default 0.2).
      n_batch, n_dense: the layout.
      unique_indices: draw coordinates without replacement (default True).
      sorted_indices: sort the indices of each batch.
      generator: ``generator(key, shape=, dtype=, **kwds)`` for the values (default
        ``random.uniform``).
      **kwds: passed to ``generator``.
    """
    import kiln.numpy as jnp
    from kiln import dtypes, random
    from kiln.transformations import vmap
    shape = tuple(operator.index(s) for s in shape)
    n_batch, n_dense = operator.index(n_batch), operator.index(n_dense)
    if n_batch < 0 or n_dense < 0 or n_batch + n_dense > len(shape):
        raise ValueError(f"Invalid n_batch={n_batch}, n_dense={n_dense} for shape={shape}")
    n_sparse = len(shape) - n_batch - n_dense
    batch = shape[:n_batch]
    sparse = shape[n_batch:n_batch + n_sparse]
    dense = shape[n_batch + n_sparse:]
    sparse_size = math.prod(sparse)
    if not 0 <= nse < sparse_size:
        raise ValueError(f"got nse={nse}, expected to be between 0 and {sparse_size}")
    if 0 < nse < 1:
        nse = int(math.ceil(nse * sparse_size))
    nse = operator.index(nse)
    if dtype is None:
        dtype = jnp.zeros(()).dtype
    if indices_dtype is None:
        indices_dtype = dtypes.canonicalize_dtype(jnp.int64)
    if sparse_size > jnp.iinfo(indices_dtype).max:
        raise ValueError(f"indices_dtype={indices_dtype} does not have enough range to "
                         f"generate sparse indices of size {sparse_size}.")
    generator = random.uniform if generator is None else generator

    def one(k):
        if not sparse:
            return jnp.zeros((nse, n_sparse), indices_dtype)
        flat = random.choice(k, sparse_size, shape=(nse,), replace=not unique_indices)
        flat = flat.astype(indices_dtype)
        return jnp.stack(jnp.unravel_index(flat, sparse), axis=-1).astype(indices_dtype)
    keys = random.split(key, math.prod(batch) + 1)
    data = generator(keys[0], shape=batch + (nse,) + dense, dtype=dtype, **kwds)
    indices = vmap(one)(keys[1:]).reshape(batch + (nse, n_sparse))
    mat = BCOO((data, indices), shape=shape)
    return mat.sort_indices() if sorted_indices else mat
