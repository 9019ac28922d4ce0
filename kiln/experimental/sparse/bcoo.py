"""``jax.experimental.sparse.bcoo``: the ``BCOO`` class and the ``bcoo_*`` functions."""
from __future__ import annotations

from kiln.experimental.sparse._bcoo_arith import bcoo_multiply_dense, bcoo_multiply_sparse
from kiln.experimental.sparse._bcoo_convert import bcoo_extract, bcoo_fromdense, bcoo_todense
from kiln.experimental.sparse._bcoo_core import BCOO, BCOOProperties
from kiln.experimental.sparse._bcoo_dedupe import (
    bcoo_eliminate_zeros,
    bcoo_sort_indices,
    bcoo_sum_duplicates,
)
from kiln.experimental.sparse._bcoo_dot import bcoo_dot_general, bcoo_dot_general_sampled
from kiln.experimental.sparse._bcoo_struct import (
    bcoo_reduce_sum,
    bcoo_reshape,
    bcoo_squeeze,
    bcoo_transpose,
)

__all__ = ["BCOO", "BCOOProperties", "bcoo_dot_general", "bcoo_dot_general_sampled",
           "bcoo_eliminate_zeros", "bcoo_extract", "bcoo_fromdense", "bcoo_multiply_dense",
           "bcoo_multiply_sparse", "bcoo_reduce_sum", "bcoo_reshape", "bcoo_sort_indices",
           "bcoo_squeeze", "bcoo_sum_duplicates", "bcoo_todense", "bcoo_transpose"]
