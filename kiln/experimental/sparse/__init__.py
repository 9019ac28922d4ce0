"""``kiln.experimental.sparse`` (``jax.experimental.sparse``): sparse arrays.

What it holds:

- ``BCOO`` (batched coordinates; a pytree: ``jit``, ``grad`` with respect to its values and
  to dense operands, ``vmap`` over its batch dimensions) and its operations:
  ``bcoo_todense``/``bcoo_fromdense``/``bcoo_extract``, ``bcoo_dot_general`` (sparse-dense
  and sparse-sparse, any layouts) and ``bcoo_dot_general_sampled``,
  ``bcoo_transpose``/``bcoo_reshape``/``bcoo_squeeze``/``bcoo_reduce_sum``,
  ``bcoo_multiply_dense``/``bcoo_multiply_sparse`` (broadcasting), ``bcoo_sort_indices``/
  ``bcoo_sum_duplicates``/``bcoo_eliminate_zeros``, ``bcoo_update_layout``,
  ``bcoo_broadcast_in_dim``, ``bcoo_concatenate``, ``bcoo_slice``/``bcoo_dynamic_slice``/
  ``bcoo_gather``/``bcoo_rev``, ``bcoo_conv_general_dilated`` (JAX's 1-D case); the
  operators ``@ * / + - ** abs``, indexing (``BCOO.__getitem__``: any ``jnp`` index),
  iteration, ``.T .transpose .reshape .sum .astype .todense .update_layout``;
  the buffer-level ``bcoo._bcoo_*`` forms JAX's tests call.
- ``BCSR`` (batched compressed rows) with ``bcsr_fromdense``/``bcsr_todense``/
  ``bcsr_extract``, ``bcsr_dot_general``, ``bcsr_broadcast_in_dim``, ``bcsr_concatenate``,
  ``bcsr_sum_duplicates``/``bcsr_eliminate_zeros``, ``to_bcoo``/``from_bcoo``, ``@``.
- ``COO``, ``CSR``, ``CSC`` (2-D) with ``coo_*``/``csr_*`` ``todense``/``fromdense``/
  ``matvec``/``matmat``, ``.T``, ``@`` (modules ``coo``, ``csr``).
- ``todense``/``empty``/``eye`` for every format, ``random_bcoo``, ``sparsify`` (JAX's
  jaxpr interpreter, and ``use_tracer=True`` with ``SparseTracer``; sparse rules for the
  zero-preserving elementwise, arithmetic, contraction, reduction, structural and indexing
  primitives, ``jit``, ``cond``, loops and custom derivatives; others raise
  ``NotImplementedError`` naming the primitive: ``transform.py``), ``linalg.spsolve`` (densified LU solve), sparse-aware ``grad``/
  ``value_and_grad``/``jacfwd``/``jacrev``, and primitives ``todense_p``, ``bcoo_*_p``,
  ``bcsr_*_p`` for code that binds them.

How: JAX defines each operation as a primitive with its own rules; kiln composes them
from ``kiln.numpy`` gathers, scatter-adds and reshapes, so every transformation comes from
those ops' rules (``nse``, the layout and the shape are static). The ``*_p`` primitives are
such compositions wrapped as primitives (``_composite.py``).

Not provided (attribute access raises ``AttributeError`` naming it): the cuSPARSE
primitives of ``_lowerings`` and ``coo_*_p``/``csr_*_p``, ``linalg.lobpcg_standard``; ``BCSR.transpose``
raises ``NotImplementedError`` as in JAX.
"""
from kiln.experimental.sparse import ad as _ad
from kiln.experimental.sparse import linalg
from kiln.experimental.sparse._base import JAXSparse
from kiln.experimental.sparse.api import empty, eye, todense, todense_p
from kiln.experimental.sparse.bcoo import (
    BCOO,
    bcoo_broadcast_in_dim,
    bcoo_concatenate,
    bcoo_conv_general_dilated,
    bcoo_dot_general,
    bcoo_dot_general_p,
    bcoo_dot_general_sampled,
    bcoo_dot_general_sampled_p,
    bcoo_dynamic_slice,
    bcoo_eliminate_zeros,
    bcoo_extract,
    bcoo_extract_p,
    bcoo_fromdense,
    bcoo_fromdense_p,
    bcoo_gather,
    bcoo_multiply_dense,
    bcoo_multiply_sparse,
    bcoo_reduce_sum,
    bcoo_reshape,
    bcoo_rev,
    bcoo_slice,
    bcoo_sort_indices,
    bcoo_sort_indices_p,
    bcoo_spdot_general_p,
    bcoo_squeeze,
    bcoo_sum_duplicates,
    bcoo_sum_duplicates_p,
    bcoo_todense,
    bcoo_todense_p,
    bcoo_transpose,
    bcoo_transpose_p,
    bcoo_update_layout,
)
from kiln.experimental.sparse.bcsr import (
    BCSR,
    bcsr_broadcast_in_dim,
    bcsr_concatenate,
    bcsr_dot_general,
    bcsr_dot_general_p,
    bcsr_eliminate_zeros,
    bcsr_extract,
    bcsr_extract_p,
    bcsr_fromdense,
    bcsr_fromdense_p,
    bcsr_sum_duplicates,
    bcsr_todense,
    bcsr_todense_p,
)
from kiln.experimental.sparse.coo import (
    COO,
    COOInfo,
    coo_fromdense,
    coo_matmat,
    coo_matvec,
    coo_todense,
)
from kiln.experimental.sparse.csr import (
    CSC,
    CSR,
    csr_fromdense,
    csr_matmat,
    csr_matvec,
    csr_todense,
)
from kiln.experimental.sparse.random import random_bcoo
from kiln.experimental.sparse.transform import SparseTracer, sparsify
from kiln.experimental.sparse.util import (
    CuSparseEfficiencyWarning,
    SparseEfficiencyError,
    SparseEfficiencyWarning,
)

grad = _ad.grad
value_and_grad = _ad.value_and_grad
jacfwd = _ad.jacfwd
jacrev = _ad.jacrev
jacobian = _ad.jacobian

__all__ = ["BCOO", "BCSR", "COO", "COOInfo", "CSC", "CSR", "CuSparseEfficiencyWarning",
           "JAXSparse", "SparseEfficiencyError", "SparseTracer", "SparseEfficiencyWarning",
           "bcoo_broadcast_in_dim", "bcoo_concatenate", "bcoo_conv_general_dilated",
           "bcoo_dot_general", "bcoo_dot_general_p", "bcoo_dot_general_sampled",
           "bcoo_dot_general_sampled_p", "bcoo_dynamic_slice", "bcoo_eliminate_zeros",
           "bcoo_extract", "bcoo_extract_p", "bcoo_fromdense", "bcoo_fromdense_p",
           "bcoo_gather", "bcoo_multiply_dense", "bcoo_multiply_sparse", "bcoo_reduce_sum",
           "bcoo_reshape", "bcoo_rev", "bcoo_slice", "bcoo_sort_indices",
           "bcoo_sort_indices_p", "bcoo_spdot_general_p", "bcoo_squeeze",
           "bcoo_sum_duplicates", "bcoo_sum_duplicates_p", "bcoo_todense",
           "bcoo_todense_p", "bcoo_transpose", "bcoo_transpose_p", "bcoo_update_layout",
           "bcsr_broadcast_in_dim", "bcsr_concatenate", "bcsr_dot_general",
           "bcsr_dot_general_p", "bcsr_eliminate_zeros", "bcsr_extract", "bcsr_extract_p",
           "bcsr_fromdense", "bcsr_fromdense_p", "bcsr_sum_duplicates", "bcsr_todense",
           "bcsr_todense_p", "coo_fromdense", "coo_matmat", "coo_matvec", "coo_todense",
           "csr_fromdense", "csr_matmat", "csr_matvec", "csr_todense", "empty", "eye",
           "grad", "jacfwd", "jacobian", "jacrev", "linalg", "random_bcoo", "sparsify", "todense",
           "todense_p", "value_and_grad"]

def __getattr__(name):
    if name.endswith("_p"):
        raise AttributeError(f"jax.experimental.sparse.{name} is not provided by kiln "
                             "(see the docstring of kiln.experimental.sparse).")
    raise AttributeError(f"module 'kiln.experimental.sparse' has no attribute {name!r}")
