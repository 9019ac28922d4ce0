"""Warnings, errors and helpers of ``jax.experimental.sparse`` (``jax.experimental.sparse.util``).

``SparseEfficiencyError``/``SparseEfficiencyWarning`` are raised/issued by operations that
would store many explicit zeros; ``CuSparseEfficiencyWarning`` exists for code that
filters it (kiln never issues it). ``SparseInfo`` is the static metadata of a BCOO/BCSR
array; the underscore helpers are the ones JAX's own code and tests call: CSR to COO
indices, extraction at coordinates and counting stored elements.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["CuSparseEfficiencyWarning", "SparseEfficiencyError", "SparseEfficiencyWarning",
           "SparseInfo", "nfold_vmap"]


class SparseEfficiencyError(ValueError):
    """An operation would store many explicit zeros."""


class SparseEfficiencyWarning(UserWarning):
    """An operation stores many explicit zeros."""


class CuSparseEfficiencyWarning(SparseEfficiencyWarning):
    """A cuSPARSE kernel is not available (never issued on kiln's CPU backend)."""


class SparseInfo(NamedTuple):
    """Static metadata of a BCOO/BCSR array: its shape and what is known of its indices."""
    shape: tuple
    indices_sorted: bool = False
    unique_indices: bool = False


def _jnp():
    import kiln.numpy as jnp
    return jnp


def nfold_vmap(fun, N: int, *, broadcasted: bool = True, in_axes=0):
    """``fun`` mapped ``N`` times over leading axes; with ``broadcasted`` an operand whose
    mapped axis has size 1 is broadcast against the others (as BCOO batch dimensions)."""
    from kiln.transformations import vmap
    for _ in range(N):
        fun = _broadcasting_vmap(fun, in_axes) if broadcasted else vmap(fun, in_axes=in_axes)
    return fun


def _broadcasting_vmap(fun, in_axes=0):
    from kiln import lax
    from kiln.api_util import flatten_axes
    from kiln.transformations import vmap
    from kiln.tree_util import tree_flatten, tree_unflatten

    def mapped(*args):
        flat, tree = tree_flatten(args)
        axes = flatten_axes("vmap in_axes", tree, in_axes, kws=False)
        sizes = [x.shape[a] for x, a in zip(flat, axes) if a is not None]
        size = max(sizes, default=1)
        if size > 1:
            if any(s not in (1, size) for s in sizes):
                raise ValueError("broadcasting_vmap: mismatched input shapes")
            new_flat, new_axes = [], []
            for x, a in zip(flat, axes):
                if a is not None and x.shape[a] == 1:
                    new_flat.append(lax.squeeze(x, (a,)))
                    new_axes.append(None)
                else:
                    new_flat.append(x)
                    new_axes.append(a)
            flat, axes = new_flat, new_axes
        return vmap(fun, in_axes=tree_unflatten(tree, list(axes)))(*tree_unflatten(tree, flat))
    return mapped


def _csr_to_coo(indices, indptr):
    """The COO ``(row, col)`` of CSR ``(indices, indptr)``: each stored element's row is
    the number of row starts at or before it, minus one."""
    jnp = _jnp()
    indices, indptr = jnp.asarray(indices), jnp.asarray(indptr)
    marks = jnp.zeros_like(indices).at[indptr].add(1, mode="drop")
    return jnp.cumsum(marks, dtype=indices.dtype) - 1, indices


def _coo_extract(row, col, mat):
    """The values of the dense matrix ``mat`` at COO coordinates."""
    return _jnp().asarray(mat)[row, col]


def _csr_extract(indices, indptr, mat):
    """The values of the dense matrix ``mat`` at CSR coordinates."""
    row, col = _csr_to_coo(indices, indptr)
    return _coo_extract(row, col, mat)


def _count_stored_elements_per_batch(mat, n_batch: int = 0, n_dense: int = 0):
    """Per batch, the number of nonzero sparse positions of the dense ``mat`` (a position
    counts when any of its dense block is nonzero)."""
    jnp = _jnp()
    mask = jnp.asarray(mat) != 0
    if n_dense > 0:
        mask = mask.any(tuple(range(mask.ndim - n_dense, mask.ndim)))
    return mask.sum(tuple(range(n_batch, mask.ndim)))


def _count_stored_elements(mat, n_batch: int = 0, n_dense: int = 0):
    """The largest per-batch number of stored elements ``fromdense`` needs for ``mat``."""
    return _count_stored_elements_per_batch(mat, n_batch, n_dense).max(initial=0)


def _dot_general_validated_shape(lhs_shape, rhs_shape, dimension_numbers) -> tuple:
    """The shape ``lax.dot_general`` gives operands of these shapes (or its error)."""
    import numpy as np

    from kiln import lax
    from kiln.shape_eval import ShapeDtypeStruct, eval_shape
    out = eval_shape(lambda a, b: lax.dot_general(a, b, dimension_numbers),
                     ShapeDtypeStruct(tuple(lhs_shape), np.float32),
                     ShapeDtypeStruct(tuple(rhs_shape), np.float32))
    return tuple(out.shape)
