"""``kiln.experimental.sparse`` (``jax.experimental.sparse``): batched-COO sparse arrays.

What it holds: the ``BCOO`` class (a pytree: ``jit``, ``grad`` with respect to its values
and to dense operands, and ``vmap`` over its batch dimensions all work), its operations
(``bcoo_todense``/``bcoo_fromdense``/``bcoo_extract``, ``bcoo_dot_general`` and
``bcoo_dot_general_sampled``, ``bcoo_transpose``/``bcoo_reshape``/``bcoo_squeeze``,
``bcoo_reduce_sum``, ``bcoo_multiply_dense``/``bcoo_multiply_sparse``,
``bcoo_sort_indices``/``bcoo_sum_duplicates``/``bcoo_eliminate_zeros``), the operators
``@ * / + - ** abs`` and the methods ``.T .transpose .reshape .sum .astype .todense``,
``todense``/``empty``/``eye``, and sparse-aware ``grad``/``value_and_grad``/``jacfwd``/
``jacrev``.

How: JAX defines each operation as a primitive with its own rules; kiln composes them
from ``kiln.numpy`` gathers, scatter-adds and reshapes, so every transformation comes from
those ops' rules (``nse``, the layout and the shape are static).

Not provided (attribute access raises ``AttributeError`` naming it): the BCSR, COO, CSR
and CSC formats and their functions, the ``*_p`` primitives, ``bcoo_update_layout``,
``bcoo_broadcast_in_dim``, ``bcoo_concatenate``, ``bcoo_slice``/``bcoo_dynamic_slice``/
``bcoo_gather``/``bcoo_rev``, ``bcoo_conv_general_dilated``, ``random_bcoo``,
``sparse.linalg`` and ``BCOO.__getitem__``; ``sparsify`` exists but raises
``NotImplementedError`` when the sparsified function is called.
"""
from kiln.experimental.sparse import ad as _ad
from kiln.experimental.sparse._base import JAXSparse
from kiln.experimental.sparse.api import empty, eye, sparsify, todense
from kiln.experimental.sparse.bcoo import (
    BCOO,
    bcoo_dot_general,
    bcoo_dot_general_sampled,
    bcoo_eliminate_zeros,
    bcoo_extract,
    bcoo_fromdense,
    bcoo_multiply_dense,
    bcoo_multiply_sparse,
    bcoo_reduce_sum,
    bcoo_reshape,
    bcoo_sort_indices,
    bcoo_squeeze,
    bcoo_sum_duplicates,
    bcoo_todense,
    bcoo_transpose,
)
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

__all__ = ["BCOO", "CuSparseEfficiencyWarning", "JAXSparse", "SparseEfficiencyError",
           "SparseEfficiencyWarning", "bcoo_dot_general", "bcoo_dot_general_sampled",
           "bcoo_eliminate_zeros", "bcoo_extract", "bcoo_fromdense", "bcoo_multiply_dense",
           "bcoo_multiply_sparse", "bcoo_reduce_sum", "bcoo_reshape", "bcoo_sort_indices",
           "bcoo_squeeze", "bcoo_sum_duplicates", "bcoo_todense", "bcoo_transpose", "empty",
           "eye", "grad", "jacfwd", "jacobian", "jacrev", "sparsify", "todense",
           "value_and_grad"]

_NOT_PROVIDED = {
    "BCSR", "COO", "CSR", "CSC", "SparseTracer", "random_bcoo", "linalg", "transform",
    "bcoo_update_layout", "bcoo_broadcast_in_dim", "bcoo_concatenate", "bcoo_slice",
    "bcoo_dynamic_slice", "bcoo_gather", "bcoo_rev", "bcoo_conv_general_dilated",
    "bcsr_broadcast_in_dim", "bcsr_concatenate", "bcsr_dot_general", "bcsr_extract",
    "bcsr_fromdense", "bcsr_sum_duplicates", "bcsr_todense", "coo_fromdense", "coo_matmat",
    "coo_matvec", "coo_todense", "csr_fromdense", "csr_matmat", "csr_matvec", "csr_todense",
}


def __getattr__(name):
    if name in _NOT_PROVIDED or name.endswith("_p"):
        raise AttributeError(f"jax.experimental.sparse.{name} is not provided by kiln "
                             "(only the BCOO format and its operations are; see "
                             "docs/ecosystem.md).")
    raise AttributeError(f"module 'kiln.experimental.sparse' has no attribute {name!r}")
