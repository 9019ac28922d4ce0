"""``jax.experimental.sparse.bcoo``: the ``BCOO`` class, the ``bcoo_*`` functions, their
buffer-level ``_bcoo_*`` forms (which take ``(data, indices)`` and a ``SparseInfo`` and
return buffers, as JAX's) and the ``bcoo_*_p`` primitives (each the composition of its
function; see :mod:`kiln.experimental.sparse._composite`)."""
from __future__ import annotations

import numpy as np

from kiln.experimental.sparse._bcoo_arith import bcoo_multiply_dense, bcoo_multiply_sparse
from kiln.experimental.sparse._bcoo_convert import (
    bcoo_extract,
    bcoo_fromdense,
    bcoo_todense,
    extract_data,
)
from kiln.experimental.sparse._bcoo_core import BCOO, BCOOProperties
from kiln.experimental.sparse._bcoo_dedupe import (
    bcoo_eliminate_zeros,
    bcoo_sort_indices,
    bcoo_sum_duplicates,
)
from kiln.experimental.sparse._bcoo_dot import bcoo_dot_general, bcoo_dot_general_sampled
from kiln.experimental.sparse._bcoo_layout import (
    bcoo_broadcast_in_dim,
    bcoo_concatenate,
    bcoo_conv_general_dilated,
    bcoo_dynamic_slice,
    bcoo_gather,
    bcoo_rev,
    bcoo_set_nse,
    bcoo_slice,
    bcoo_update_layout,
)
from kiln.experimental.sparse._bcoo_struct import (
    bcoo_reduce_sum,
    bcoo_reshape,
    bcoo_squeeze,
    bcoo_transpose,
)
from kiln.experimental.sparse._composite import composite_primitive
from kiln.experimental.sparse.util import SparseInfo

__all__ = ["BCOO", "BCOOProperties", "bcoo_broadcast_in_dim", "bcoo_concatenate",
           "bcoo_conv_general_dilated", "bcoo_dot_general", "bcoo_dot_general_p",
           "bcoo_dot_general_sampled", "bcoo_dot_general_sampled_p", "bcoo_dynamic_slice",
           "bcoo_eliminate_zeros", "bcoo_extract", "bcoo_extract_p", "bcoo_fromdense",
           "bcoo_fromdense_p", "bcoo_gather", "bcoo_multiply_dense", "bcoo_multiply_sparse",
           "bcoo_reduce_sum", "bcoo_reshape", "bcoo_rev", "bcoo_slice", "bcoo_sort_indices",
           "bcoo_sort_indices_p", "bcoo_spdot_general_p", "bcoo_squeeze",
           "bcoo_sum_duplicates", "bcoo_sum_duplicates_p", "bcoo_todense", "bcoo_todense_p",
           "bcoo_transpose", "bcoo_transpose_p", "bcoo_update_layout"]

_bcoo_set_nse = bcoo_set_nse


def _mat(data, indices, spinfo) -> BCOO:
    return BCOO((data, indices), shape=spinfo.shape, indices_sorted=spinfo.indices_sorted,
                unique_indices=spinfo.unique_indices)


def _bcoo_todense(data, indices, *, spinfo: SparseInfo):
    """The dense array of BCOO buffers."""
    return bcoo_todense(_mat(data, indices, spinfo))


def _bcoo_fromdense(mat, *, nse: int, n_batch: int = 0, n_dense: int = 0,
                    index_dtype=np.int32):
    """``(data, indices)`` of ``bcoo_fromdense``."""
    out = bcoo_fromdense(mat, nse=nse, n_batch=n_batch, n_dense=n_dense,
                         index_dtype=index_dtype)
    return out.data, out.indices


def _bcoo_extract(indices, arr, *, assume_unique: bool = True):
    """The values of the dense ``arr`` at BCOO ``indices`` (the ``data`` buffer)."""
    return extract_data(indices, arr, assume_unique=assume_unique)


def _bcoo_transpose(data, indices, *, permutation, spinfo: SparseInfo):
    out = bcoo_transpose(_mat(data, indices, spinfo), permutation=permutation)
    return out.data, out.indices


def _bcoo_dot_general(lhs_data, lhs_indices, rhs, *, dimension_numbers,
                      preferred_element_type=None, lhs_spinfo: SparseInfo, out_sharding=None):
    """``bcoo_dot_general`` of BCOO buffers and a dense ``rhs``."""
    return bcoo_dot_general(_mat(lhs_data, lhs_indices, lhs_spinfo), rhs,
                            dimension_numbers=dimension_numbers,
                            preferred_element_type=preferred_element_type)


def _bcoo_rdot_general(lhs, rhs_data, rhs_indices, *, dimension_numbers,
                       preferred_element_type=None, rhs_spinfo: SparseInfo,
                       out_sharding=None):
    """``bcoo_dot_general`` of a dense ``lhs`` and BCOO buffers."""
    return bcoo_dot_general(lhs, _mat(rhs_data, rhs_indices, rhs_spinfo),
                            dimension_numbers=dimension_numbers,
                            preferred_element_type=preferred_element_type)


def _bcoo_spdot_general(lhs_data, lhs_indices, rhs_data, rhs_indices, *,
                        lhs_spinfo: SparseInfo, rhs_spinfo: SparseInfo, dimension_numbers,
                        preferred_element_type=None):
    """``(data, indices)`` of the product of two BCOO arrays given as buffers."""
    out = bcoo_dot_general(_mat(lhs_data, lhs_indices, lhs_spinfo),
                           _mat(rhs_data, rhs_indices, rhs_spinfo),
                           dimension_numbers=dimension_numbers,
                           preferred_element_type=preferred_element_type)
    return out.data, out.indices


def _bcoo_sum_duplicates(data, indices, *, spinfo: SparseInfo, nse: int | None):
    out = bcoo_sum_duplicates(_mat(data, indices, spinfo), nse=nse)
    return out.data, out.indices


def _bcoo_sort_indices(data, indices, *, spinfo: SparseInfo):
    out = bcoo_sort_indices(_mat(data, indices, spinfo))
    return out.data, out.indices


def _bcoo_reduce_sum(data, indices, *, spinfo: SparseInfo, axes):
    out = bcoo_reduce_sum(_mat(data, indices, spinfo), axes=axes)
    return out.data, out.indices, out.shape


def _bcoo_multiply_dense(data, indices, v, *, spinfo: SparseInfo):
    return bcoo_multiply_dense(_mat(data, indices, spinfo), v)


def _bcoo_multiply_sparse(lhs_data, lhs_indices, rhs_data, rhs_indices, *,
                          lhs_spinfo: SparseInfo, rhs_spinfo: SparseInfo):
    out = bcoo_multiply_sparse(_mat(lhs_data, lhs_indices, lhs_spinfo),
                               _mat(rhs_data, rhs_indices, rhs_spinfo))
    return out.data, out.indices, out.shape


def _bcoo_broadcast_in_dim(data, indices, *, spinfo: SparseInfo, shape,
                           broadcast_dimensions):
    out = bcoo_broadcast_in_dim(_mat(data, indices, spinfo), shape=shape,
                                broadcast_dimensions=broadcast_dimensions)
    return out.data, out.indices


bcoo_todense_p = composite_primitive("bcoo_todense", _bcoo_todense)
bcoo_fromdense_p = composite_primitive("bcoo_fromdense", _bcoo_fromdense,
                                       multiple_results=True)
bcoo_extract_p = composite_primitive("bcoo_extract", _bcoo_extract)
bcoo_transpose_p = composite_primitive("bcoo_transpose", _bcoo_transpose,
                                       multiple_results=True)
bcoo_dot_general_p = composite_primitive("bcoo_dot_general", _bcoo_dot_general)
bcoo_dot_general_sampled_p = composite_primitive(
    "bcoo_dot_general_sampled",
    lambda A, B, indices, *, dimension_numbers: bcoo_dot_general_sampled(
        A, B, indices, dimension_numbers=dimension_numbers))
bcoo_spdot_general_p = composite_primitive("bcoo_spdot_general", _bcoo_spdot_general,
                                           multiple_results=True)
bcoo_sum_duplicates_p = composite_primitive("bcoo_sum_duplicates", _bcoo_sum_duplicates,
                                            multiple_results=True)
bcoo_sort_indices_p = composite_primitive("bcoo_sort_indices", _bcoo_sort_indices,
                                          multiple_results=True)
