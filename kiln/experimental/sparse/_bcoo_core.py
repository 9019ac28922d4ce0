"""The ``BCOO`` class: batched-coordinate sparse arrays as a pytree, and layout helpers.

A BCOO array of shape ``batch + sparse + dense`` stores

- ``data``: ``batch + (nse,) + dense``, the stored values;
- ``indices``: ``batch + (nse, n_sparse)``, the sparse coordinates of each stored value.

Batch dimensions of ``data`` or ``indices`` may be 1 (broadcast). Unused slots hold zeros
in ``data`` and out-of-range coordinates (the sparse shape itself) in ``indices``;
duplicate coordinates add up. ``nse`` and the layout are static (part of the shapes).

The pytree's children are ``(data, indices)``; its static data is ``(shape,
indices_sorted, unique_indices, (n_batch, n_sparse, nse))``. When ``vmap`` maps or adds
a leading batch axis the children arrive with one batch dimension less or more than the
static layout says: ``tree_unflatten`` then rebuilds the shape from the buffers (the
batch shape of the children followed by the unchanged sparse and dense shape), which is
what JAX's vmappable registration of BCOO does; mapping an axis that is not a batch
dimension is refused with JAX's ``ValueError``.

What this module must not hold: the operations themselves (``_bcoo_*`` modules).
"""
from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kiln import dtypes
from kiln.experimental.sparse._base import JAXSparse
from kiln.numpy._util import canonicalize_shape
from kiln.tree_util import register_pytree_node_class

__all__ = ["BCOO", "BCOOProperties"]


class BCOOProperties(NamedTuple):
    n_batch: int
    n_sparse: int
    n_dense: int
    nse: int


def _shape_of(x):
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else None


def _validate_indices(indices_shape, indices_dtype, shape) -> BCOOProperties:
    if indices_dtype is not None and not dtypes.issubdtype(indices_dtype, np.integer):
        raise TypeError(f"BCOO indices must have an integer dtype, got {indices_dtype}.")
    if len(indices_shape) < 2:
        raise ValueError(f"BCOO indices must have at least 2 dimensions (batch..., nse, "
                         f"n_sparse), got shape {indices_shape}.")
    nse, n_sparse = indices_shape[-2:]
    n_batch = len(indices_shape) - 2
    n_dense = len(shape) - n_batch - n_sparse
    if n_dense < 0:
        raise ValueError(f"BCOO indices of shape {indices_shape} need an array of at least "
                         f"{n_batch + n_sparse} dimensions, got shape={shape}.")
    if any(s1 not in (1, s2) for s1, s2 in zip(indices_shape[:n_batch], shape[:n_batch])):
        raise ValueError(f"indices batch dimensions not compatible for "
                         f"indices.shape={indices_shape}, shape={shape}")
    return BCOOProperties(n_batch, n_sparse, n_dense, nse)


def validate_bcoo(data_shape, indices_shape, shape, indices_dtype=None) -> BCOOProperties:
    """The layout of a BCOO array with buffers of these shapes, or JAX's ValueError."""
    props = _validate_indices(tuple(indices_shape), indices_dtype, tuple(shape))
    n_batch, n_sparse, _, nse = props
    shape = tuple(shape)
    data_shape = tuple(data_shape)
    if any(s1 not in (1, s2) for s1, s2 in zip(data_shape[:n_batch], shape[:n_batch])):
        raise ValueError(f"data batch dimensions not compatible for data.shape={data_shape}, "
                         f"shape={shape}")
    if data_shape[n_batch:] != (nse,) + shape[n_batch + n_sparse:]:
        raise ValueError(f"Invalid data.shape={data_shape} for nse={nse}, n_batch={n_batch}, "
                         f"n_dense={props.n_dense} (shape={shape})")
    return props


def _broadcast_dim(a: int, b: int) -> int:
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    raise ValueError(f"incompatible BCOO batch sizes {a} and {b}")


class BCOO(JAXSparse):
    """Batched-coordinate sparse array (``jax.experimental.sparse.BCOO``).

    Args:
      args: ``(data, indices)``: ``data`` of shape ``batch + (nse,) + dense`` and integer
        ``indices`` of shape ``batch + (nse, n_sparse)``.
      shape: the shape of the array, ``batch + sparse + dense``.
      indices_sorted: whether the indices are known to be lexicographically sorted.
      unique_indices: whether the indices are known to have no duplicates.

    Attributes:
      data, indices: the buffers.
      shape, dtype, ndim, size, nse, n_batch, n_sparse, n_dense: the layout.
    """

    data: object
    indices: object
    shape: tuple
    indices_sorted: bool
    unique_indices: bool

    def __init__(self, args, *, shape: Sequence[int], indices_sorted: bool = False,
                 unique_indices: bool = False):
        from kiln import numpy as jnp
        try:
            data, indices = args
        except (TypeError, ValueError):
            raise TypeError("BCOO expects args=(data, indices), a pair of arrays; got "
                            f"{type(args).__name__}.") from None
        self.data = jnp.asarray(data)
        self.indices = jnp.asarray(indices)
        self.indices_sorted = indices_sorted
        self.unique_indices = unique_indices
        self.shape = canonicalize_shape(shape, "The BCOO shape must be static.")
        props = validate_bcoo(self.data.shape, self.indices.shape, self.shape,
                              self.indices.dtype)
        self._layout = (props.n_batch, props.n_sparse, props.nse)

    # -- layout ------------------------------------------------------------------------------

    @property
    def nse(self) -> int:
        return self.indices.shape[-2]

    @property
    def n_batch(self) -> int:
        """The number of leading batch dimensions."""
        return len(self.indices.shape) - 2

    @property
    def n_sparse(self) -> int:
        """The number of sparse dimensions (columns of ``indices``)."""
        return self.indices.shape[-1]

    @property
    def n_dense(self) -> int:
        """The number of trailing dense dimensions."""
        return len(self.data.shape) - 1 - self.n_batch

    @property
    def _info(self):
        from kiln.experimental.sparse.util import SparseInfo
        return SparseInfo(self.shape, self.indices_sorted, self.unique_indices)

    @property
    def _bufs(self) -> tuple:
        return (self.data, self.indices)

    @property
    def _props(self) -> BCOOProperties:
        return BCOOProperties(self.n_batch, self.n_sparse, self.n_dense, self.nse)

    # -- pytree ------------------------------------------------------------------------------

    def tree_flatten(self):
        return (self.data, self.indices), (self.shape, self.indices_sorted,
                                           self.unique_indices, self._layout)

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        obj = object.__new__(cls)
        obj.data, obj.indices = children
        shape, obj.indices_sorted, obj.unique_indices, layout = aux_data
        obj.shape, obj._layout = _unflatten_shape(shape, layout, obj.data, obj.indices)
        return obj

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def fromdense(cls, mat, *, nse: int | None = None, index_dtype=np.int32,
                  n_dense: int = 0, n_batch: int = 0) -> BCOO:
        """A BCOO array holding the nonzero entries of the dense ``mat``."""
        from kiln.experimental.sparse._bcoo_convert import bcoo_fromdense
        return bcoo_fromdense(mat, nse=nse, index_dtype=index_dtype, n_dense=n_dense,
                              n_batch=n_batch)

    @classmethod
    def from_scipy_sparse(cls, mat, *, index_dtype=None, n_dense: int = 0,
                          n_batch: int = 0) -> BCOO:
        """A BCOO array from a :mod:`scipy.sparse` matrix or array (any format)."""
        from kiln import numpy as jnp
        if n_dense != 0 or n_batch != 0:
            raise NotImplementedError("BCOO.from_scipy_sparse with nonzero n_dense/n_batch")
        coo = mat.tocoo()
        data = jnp.asarray(coo.data)
        rows = np.asarray(coo.row)
        cols = np.asarray(coo.col)
        indices = jnp.asarray(np.stack([rows, cols], axis=1)).astype(index_dtype or np.int32)
        return cls((data, indices), shape=coo.shape, indices_sorted=False,
                   unique_indices=False)

    @classmethod
    def _empty(cls, shape, *, dtype=None, index_dtype="int32", n_dense: int = 0,
               n_batch: int = 0, nse: int = 0) -> BCOO:
        from kiln.experimental.sparse._bcoo_convert import empty_bcoo
        return empty_bcoo(shape, dtype=dtype, index_dtype=index_dtype, n_dense=n_dense,
                          n_batch=n_batch, nse=nse)

    @classmethod
    def _eye(cls, N: int, M: int, k: int, *, dtype=None, index_dtype="int32",
             n_batch: int = 0, n_dense: int = 0) -> BCOO:
        from kiln.experimental.sparse._bcoo_convert import eye_bcoo
        return eye_bcoo(N, M, k, dtype=dtype, index_dtype=index_dtype, n_batch=n_batch,
                        n_dense=n_dense)

    # -- conversions and layout changes ------------------------------------------------------

    def todense(self):
        """The dense array (duplicates summed, out-of-range entries dropped)."""
        from kiln.experimental.sparse._bcoo_convert import bcoo_todense
        return bcoo_todense(self)

    def transpose(self, axes: Sequence[int] | None = None) -> BCOO:
        """The transpose; ``axes`` may permute batch, sparse and dense axes among
        themselves only."""
        from kiln.experimental.sparse._bcoo_struct import bcoo_transpose
        perm = tuple(range(self.ndim))[::-1] if axes is None else \
            tuple(operator.index(a) for a in axes)
        return bcoo_transpose(self, permutation=perm)

    def reshape(self, *args, **kwargs) -> BCOO:
        """The array with a new shape that keeps batch, sparse and dense sizes apart."""
        from kiln.experimental.sparse._bcoo_struct import reshape_method
        return reshape_method(self, *args, **kwargs)

    def astype(self, dtype) -> BCOO:
        """A copy with the values converted to ``dtype``."""
        return BCOO((self.data.astype(dtype), self.indices), shape=self.shape,
                    indices_sorted=self.indices_sorted, unique_indices=self.unique_indices)

    def sum(self, axis=None, dtype=None, out=None, keepdims: bool = False):
        """Sum over ``axis`` (all axes by default): a BCOO array, or a dense scalar when
        every axis is summed."""
        from kiln.experimental.sparse._bcoo_struct import sum_method
        return sum_method(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims)

    def sort_indices(self) -> BCOO:
        """A copy with the indices in lexicographic order (per batch)."""
        from kiln.experimental.sparse._bcoo_dedupe import bcoo_sort_indices
        return bcoo_sort_indices(self)

    def sum_duplicates(self, nse: int | None = None, remove_zeros: bool = True) -> BCOO:
        """A copy with duplicate indices summed (and explicit zeros removed unless
        ``remove_zeros=False``), sorted; ``nse`` sets the new size (needed under ``jit``)."""
        from kiln.experimental.sparse._bcoo_dedupe import (
            bcoo_eliminate_zeros,
            bcoo_sum_duplicates,
        )
        if remove_zeros:
            return bcoo_eliminate_zeros(self, nse=nse)
        return bcoo_sum_duplicates(self, nse=nse)

    def update_layout(self, *, n_batch: int | None = None, n_dense: int | None = None,
                      on_inefficient: str | None = "error") -> BCOO:
        """The same array with a new layout (see ``bcoo_update_layout``)."""
        from kiln.experimental.sparse._bcoo_layout import bcoo_update_layout
        return bcoo_update_layout(self, n_batch=n_batch, n_dense=n_dense,
                                  on_inefficient=on_inefficient)

    # -- arithmetic --------------------------------------------------------------------------

    def __matmul__(self, other):
        from kiln.experimental.sparse._bcoo_dot import sparse_matmul
        return sparse_matmul(self, other)

    def __rmatmul__(self, other):
        from kiln.experimental.sparse._bcoo_dot import sparse_matmul
        return sparse_matmul(other, self)

    def __mul__(self, other):
        from kiln.experimental.sparse._bcoo_arith import multiply
        return multiply(self, other)

    def __rmul__(self, other):
        from kiln.experimental.sparse._bcoo_arith import multiply
        return multiply(other, self)

    def __truediv__(self, other):
        from kiln.experimental.sparse._bcoo_arith import true_divide
        return true_divide(self, other)

    def __rtruediv__(self, other):
        raise NotImplementedError("Division by a sparse array is not implemented because it "
                                  "would result in dense output. If this is your intent, use "
                                  "sparse.todense() to convert your arguments to a dense "
                                  "array.")

    def __add__(self, other):
        from kiln.experimental.sparse._bcoo_arith import add
        return add(self, other)

    def __radd__(self, other):
        from kiln.experimental.sparse._bcoo_arith import add
        return add(other, self)

    def __sub__(self, other):
        from kiln.experimental.sparse._bcoo_arith import subtract
        return subtract(self, other)

    def __rsub__(self, other):
        from kiln.experimental.sparse._bcoo_arith import subtract
        return subtract(other, self)

    def __neg__(self):
        return self._with_data(-self.data)

    def __pos__(self):
        return self._with_data(+self.data)

    def __abs__(self):
        from kiln.experimental.sparse._bcoo_dedupe import bcoo_sum_duplicates
        mat = self if self.unique_indices else bcoo_sum_duplicates(self, nse=self.nse)
        return mat._with_data(abs(mat.data))

    def __pow__(self, exponent):
        from kiln.experimental.sparse._bcoo_arith import power
        return power(self, exponent)

    def __rpow__(self, base):
        return _sparsified("power", swap=True)(self, base)

    # Comparisons go through ``sparsify`` as in JAX: they would densify, so they raise
    # NotImplementedError naming the primitive (``sparse rule for gt ...``).
    def __gt__(self, other):
        return _sparsified("greater")(self, other)

    def __ge__(self, other):
        return _sparsified("greater_equal")(self, other)

    def __lt__(self, other):
        return _sparsified("less")(self, other)

    def __le__(self, other):
        return _sparsified("less_equal")(self, other)

    def __eq__(self, other):
        return _sparsified("equal")(self, other)

    def __ne__(self, other):
        return _sparsified("not_equal")(self, other)

    def __getitem__(self, idx) -> BCOO:
        from kiln.experimental.sparse._bcoo_index import bcoo_getitem
        return bcoo_getitem(self, idx)

    def __iter__(self):
        return (self[i] for i in range(self.shape[0]))

    def _with_data(self, data) -> BCOO:
        return BCOO((data, self.indices), shape=self.shape, indices_sorted=self.indices_sorted,
                    unique_indices=self.unique_indices)


register_pytree_node_class(BCOO)


def _sparsified(name: str, swap: bool = False):
    """``kiln.numpy.<name>`` under ``sparsify`` (arguments swapped with ``swap``)."""
    import kiln.numpy as jnp
    from kiln.experimental.sparse.transform import sparsify
    fn = getattr(jnp, name)
    return sparsify((lambda a, b: fn(b, a)) if swap else fn)


def _unflatten_shape(shape, layout, data, indices):
    """The shape of a BCOO rebuilt from children that ``vmap`` may have re-batched."""
    n_batch, n_sparse, nse = layout
    ishape, dshape = _shape_of(indices), _shape_of(data)
    if ishape is None or dshape is None or len(ishape) == n_batch + 2:
        return shape, layout
    new_nb = len(ishape) - 2
    tail = shape[n_batch:]
    n_dense = len(tail) - n_sparse
    ok = (new_nb >= 0 and ishape[new_nb:] == (nse, n_sparse)
          and len(dshape) == new_nb + 1 + n_dense
          and dshape[new_nb:] == (nse,) + tuple(tail[n_sparse:]))
    if not ok:
        raise ValueError(f"BCOO with n_batch={n_batch}: vmap in_axes/out_axes for a BCOO array "
                         "must name one of its batch dimensions (a contiguous block of "
                         "leading dimensions); got buffers of shapes "
                         f"data={dshape}, indices={ishape} for shape={shape}.")
    batch = tuple(_broadcast_dim(a, b) for a, b in zip(dshape[:new_nb], ishape[:new_nb]))
    return batch + tuple(tail), (new_nb, n_sparse, nse)


def full_buffers(mat: BCOO):
    """``data`` and ``indices`` with their batch dimensions broadcast to the array's."""
    from kiln import numpy as jnp
    nb = mat.n_batch
    batch = tuple(mat.shape[:nb])
    data, indices = mat.data, mat.indices
    if tuple(data.shape[:nb]) != batch:
        data = jnp.broadcast_to(data, batch + tuple(data.shape[nb:]))
    if tuple(indices.shape[:nb]) != batch:
        indices = jnp.broadcast_to(indices, batch + tuple(indices.shape[nb:]))
    return data, indices


def batch_grid(batch_shape: Sequence[int], trailing: int = 1) -> list:
    """One int32 index array per batch dimension, shaped to broadcast against
    ``batch_shape + (1,) * trailing`` (constants: they carry no data)."""
    nb = len(batch_shape)
    out = []
    for i, s in enumerate(batch_shape):
        shp = [1] * (nb + trailing)
        shp[i] = s
        out.append(np.arange(s, dtype=np.int32).reshape(shp))
    return out


def sparse_shape(mat: BCOO) -> tuple:
    return tuple(mat.shape[mat.n_batch:mat.n_batch + mat.n_sparse])


def prod(xs) -> int:
    return math.prod(xs)
