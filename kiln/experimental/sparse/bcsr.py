"""``jax.experimental.sparse.bcsr``: batched compressed-sparse-row arrays (``BCSR``) and
their functions (``bcsr_fromdense``/``bcsr_todense``/``bcsr_extract``,
``bcsr_dot_general``, ``bcsr_broadcast_in_dim``, ``bcsr_concatenate``,
``bcsr_sum_duplicates``/``bcsr_eliminate_zeros``) with their ``_bcsr_*`` buffer forms.

A BCSR array of shape ``batch + (rows, cols) + dense`` stores ``data`` (``batch + (nse,) +
dense``), ``indices`` (``batch + (nse,)``: the column of each element) and ``indptr``
(``batch + (rows + 1,)``: where each row's elements start). Exactly two sparse dimensions;
batch dimensions of the buffers may be 1 (broadcast). Every operation converts to BCOO
(rows from ``indptr`` by a scatter of row starts and a cumulative sum) and back, so the
transformations are those of the BCOO operations.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kiln.experimental.sparse import bcoo as _bcoo
from kiln.experimental.sparse._base import JAXSparse
from kiln.experimental.sparse._bcoo_core import BCOO
from kiln.experimental.sparse._composite import composite_primitive
from kiln.experimental.sparse.util import (
    SparseInfo,
    _count_stored_elements,
    _csr_to_coo,
    nfold_vmap,
)
from kiln.numpy._util import core_int
from kiln.tree_util import register_pytree_node_class

__all__ = ["BCSR", "bcsr_broadcast_in_dim", "bcsr_concatenate", "bcsr_dot_general",
           "bcsr_dot_general_p", "bcsr_eliminate_zeros", "bcsr_extract", "bcsr_extract_p",
           "bcsr_fromdense", "bcsr_fromdense_p", "bcsr_sum_duplicates", "bcsr_todense",
           "bcsr_todense_p"]

_TRACED_NSE = ("The nse argument of bcsr_fromdense must be concrete: to use BCSR.fromdense() "
               "under jit or another transformation, pass nse=<number of stored elements>.")


def _jnp():
    import kiln.numpy as jnp
    return jnp


class BCSRProperties(NamedTuple):
    n_batch: int
    n_dense: int
    nse: int


def _compatible(s1, s2) -> bool:
    return all(a in (1, b) for a, b in zip(s1, s2))


def _validate_bcsr_indices(indices, indptr, shape) -> BCSRProperties:
    from kiln import dtypes
    shape = tuple(shape)
    for name, x in (("indices", indices), ("indptr", indptr)):
        if not dtypes.issubdtype(x.dtype, np.integer):
            raise TypeError(f"BCSR {name} must have an integer dtype, got {x.dtype}.")
    nse = indices.shape[-1]
    n_batch = indices.ndim - 1
    n_dense = len(shape) - n_batch - 2
    if n_dense < 0:
        raise ValueError(f"BCSR indices of shape {indices.shape} need an array of at least "
                         f"{n_batch + 2} dimensions, got shape={shape}.")
    if not _compatible(indices.shape[:n_batch], shape[:n_batch]):
        raise ValueError(f"indices batch dimensions not compatible for "
                         f"indices.shape={indices.shape}, shape={shape}")
    if not _compatible(indptr.shape[:n_batch], shape[:n_batch]):
        raise ValueError(f"indptr batch dimensions not compatible for "
                         f"indptr.shape={indptr.shape}, shape={shape}")
    if tuple(indptr.shape[n_batch:]) != (shape[n_batch] + 1,):
        raise ValueError("indptr shape must match the matrix shape plus 1.")
    return BCSRProperties(n_batch, n_dense, nse)


def _validate_bcsr(data, indices, indptr, shape) -> BCSRProperties:
    props = _validate_bcsr_indices(indices, indptr, shape)
    shape = tuple(shape)
    nb, nd, nse = props
    if not _compatible(data.shape[:nb], shape[:nb]):
        raise ValueError(f"data batch dimensions not compatible for data.shape={data.shape}, "
                         f"shape={shape}")
    if tuple(data.shape[data.ndim - nd - 1:]) != (nse,) + shape[nb + 2:]:
        raise ValueError(f"Invalid data.shape={data.shape} for nse={nse}, n_batch={nb}, "
                         f"n_dense={nd}")
    return props


def _bcsr_to_bcoo(indices, indptr, *, shape):
    """BCOO ``indices`` (``batch + (nse, 2)``) of BCSR ``(indices, indptr)``."""
    jnp = _jnp()
    indices, indptr = jnp.asarray(indices), jnp.asarray(indptr)
    nb = _validate_bcsr_indices(indices, indptr, shape).n_batch
    rows, cols = nfold_vmap(_csr_to_coo, nb)(indices, indptr)
    return jnp.stack([rows, cols], axis=indices.ndim)


def _bcoo_to_bcsr(indices, *, shape, index_dtype=None):
    """BCSR ``(indices, indptr)`` of BCOO ``indices`` with two sparse dimensions, sorted
    within each batch (out-of-range rows are not counted in ``indptr``)."""
    jnp = _jnp()
    indices = jnp.asarray(indices)
    nb = indices.ndim - 2
    if indices.shape[-1] != 2:
        raise ValueError("Must have 2 sparse dimensions to be converted to BCSR.")
    index_dtype = indices.dtype if index_dtype is None else index_dtype
    n_rows = tuple(shape)[nb]

    def ptr(rows):
        counts = jnp.bincount(rows, length=n_rows).astype(index_dtype)
        return jnp.concatenate([jnp.zeros(1, index_dtype), jnp.cumsum(counts,
                                                                       dtype=index_dtype)])
    return indices[..., 1], nfold_vmap(ptr, nb, broadcasted=False)(indices[..., 0])


@register_pytree_node_class
class BCSR(JAXSparse):
    """Batched compressed-sparse-row array (``jax.experimental.sparse.BCSR``).

    Args:
      args: ``(data, indices, indptr)``.
      shape: ``batch + (rows, cols) + dense``.
      indices_sorted, unique_indices: what is known of the indices.
    """

    data: object
    indices: object
    indptr: object
    shape: tuple

    def __init__(self, args, *, shape: Sequence[int], indices_sorted: bool = False,
                 unique_indices: bool = False):
        jnp = _jnp()
        self.data, self.indices, self.indptr = map(jnp.asarray, args)
        self.indices_sorted = indices_sorted
        self.unique_indices = unique_indices
        super().__init__(args, shape=shape)
        _validate_bcsr(self.data, self.indices, self.indptr, self.shape)

    @property
    def _bufs(self) -> tuple:
        return (self.data, self.indices, self.indptr)

    @property
    def _info(self) -> SparseInfo:
        return SparseInfo(self.shape, self.indices_sorted, self.unique_indices)

    @property
    def nse(self) -> int:
        return self.indices.shape[-1]

    @property
    def n_batch(self) -> int:
        return self.indices.ndim - 1

    @property
    def n_sparse(self) -> int:
        return 2

    @property
    def n_dense(self) -> int:
        return self.data.ndim - self.indices.ndim

    @property
    def _sparse_shape(self) -> tuple:
        return tuple(self.shape[self.n_batch:self.n_batch + 2])

    def transpose(self, *args, **kwargs):
        raise NotImplementedError("Transpose is not implemented.")

    def tree_flatten(self):
        return (self.data, self.indices, self.indptr), self._info._asdict()

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        obj = object.__new__(cls)
        obj.data, obj.indices, obj.indptr = children
        if aux_data.keys() != {"shape", "indices_sorted", "unique_indices"}:
            raise ValueError(f"BCSR.tree_unflatten: invalid aux_data={aux_data}")
        shape = tuple(aux_data["shape"])
        obj.indices_sorted = aux_data["indices_sorted"]
        obj.unique_indices = aux_data["unique_indices"]
        obj.shape = _rebatched_shape(shape, obj.data, obj.indices, obj.indptr)
        return obj

    @classmethod
    def _empty(cls, shape, *, dtype=None, index_dtype="int32", n_dense: int = 0,
               n_batch: int = 0, nse: int = 0) -> BCSR:
        jnp = _jnp()
        shape = tuple(shape)
        if n_dense < 0 or n_batch < 0 or nse < 0:
            raise ValueError(f"Invalid inputs: shape={shape}, n_dense={n_dense}, "
                             f"n_batch={n_batch}, nse={nse}")
        if len(shape) - n_dense - n_batch != 2:
            raise ValueError("BCSR sparse.empty: must have 2 sparse dimensions.")
        batch, (rows, cols), dense = shape[:n_batch], shape[n_batch:n_batch + 2], \
            shape[n_batch + 2:]
        data = jnp.zeros(batch + (nse,) + dense, dtype)
        indices = jnp.full(batch + (nse,), cols, index_dtype)
        indptr = jnp.zeros(batch + (rows + 1,), index_dtype)
        return cls((data, indices, indptr), shape=shape)

    @classmethod
    def _eye(cls, N: int, M: int, k: int, *, dtype=None, index_dtype="int32",
             n_batch: int = 0, n_dense: int = 0) -> BCSR:
        if n_batch or n_dense:
            raise ValueError("BCSR eye: a 2-D array has no room for batch or dense "
                             "dimensions besides its two sparse ones.")
        return cls.from_bcoo(BCOO._eye(N, M, k, dtype=dtype, index_dtype=index_dtype))

    def sum_duplicates(self, nse: int | None = None, remove_zeros: bool = True) -> BCSR:
        """A copy with duplicates summed, sorted (and explicit zeros removed unless
        ``remove_zeros=False``)."""
        if remove_zeros:
            return bcsr_eliminate_zeros(self, nse=nse)
        return bcsr_sum_duplicates(self, nse=nse)

    @classmethod
    def fromdense(cls, mat, *, nse: int | None = None, index_dtype=np.int32,
                  n_dense: int = 0, n_batch: int = 0) -> BCSR:
        """A BCSR array of the nonzero entries of a dense array."""
        return bcsr_fromdense(mat, nse=nse, index_dtype=index_dtype, n_dense=n_dense,
                              n_batch=n_batch)

    def todense(self):
        """The dense array."""
        return bcsr_todense(self)

    def to_bcoo(self) -> BCOO:
        """The equivalent BCOO array (same data, row coordinates from ``indptr``)."""
        return BCOO((self.data, _bcsr_to_bcoo(self.indices, self.indptr, shape=self.shape)),
                    shape=self.shape)

    @classmethod
    def from_bcoo(cls, arr: BCOO) -> BCSR:
        """The BCSR array of a BCOO array with two sparse dimensions (sorted first)."""
        if arr.n_sparse != 2:
            raise NotImplementedError(f"BSCR.from_bcoo requires n_sparse=2; got "
                                      f"arr.n_sparse={arr.n_sparse}")
        if not arr.indices_sorted:
            arr = arr.sort_indices()
        indices, indptr = _bcoo_to_bcsr(arr.indices, shape=arr.shape,
                                        index_dtype=arr.indices.dtype)
        return cls((arr.data, indices, indptr), shape=arr.shape)

    @classmethod
    def from_scipy_sparse(cls, mat, *, index_dtype=None, n_dense: int = 0,
                          n_batch: int = 0) -> BCSR:
        """A BCSR array from a :mod:`scipy.sparse` matrix or array (2-D)."""
        jnp = _jnp()
        if n_dense != 0 or n_batch != 0:
            raise NotImplementedError("BCSR from_scipy_sparse with nonzero n_dense/n_batch.")
        if mat.ndim != 2:
            raise ValueError(f"BCSR from_scipy_sparse requires 2D array; {mat.ndim}D is "
                             "given.")
        mat = mat.tocsr()
        idt = index_dtype or np.int32
        return cls((jnp.asarray(mat.data), jnp.asarray(np.asarray(mat.indices).astype(idt)),
                    jnp.asarray(np.asarray(mat.indptr).astype(idt))), shape=mat.shape)

    def __matmul__(self, other):
        return _matmul(self, other)

    def __rmatmul__(self, other):
        return _matmul(other, self)

    def __getitem__(self, idx):
        out = self.to_bcoo()[idx]
        return BCSR.from_bcoo(out) if isinstance(out, BCOO) and out.n_sparse == 2 else out


def _rebatched_shape(shape, data, indices, indptr):
    """The shape of a BCSR array whose buffers ``vmap`` may have re-batched."""
    ishape = getattr(indices, "shape", None)
    dshape = getattr(data, "shape", None)
    if ishape is None or dshape is None:
        return shape
    n_dense = len(dshape) - len(ishape)
    old_nb = len(shape) - 2 - n_dense
    new_nb = len(ishape) - 1
    if new_nb == old_nb or new_nb < 0:
        return shape
    pshape = tuple(getattr(indptr, "shape", ishape))
    batch = tuple(max(a, b, c) for a, b, c in zip(dshape[:new_nb], ishape[:new_nb],
                                                  pshape[:new_nb]))
    return batch + tuple(shape[old_nb:])



def _matmul(a, b):
    from kiln.experimental.sparse._bcoo_dot import sparse_matmul
    a_b = a.to_bcoo() if isinstance(a, BCSR) else a
    b_b = b.to_bcoo() if isinstance(b, BCSR) else b
    out = sparse_matmul(a_b, b_b)
    if isinstance(out, BCOO):
        return BCSR.from_bcoo(out) if out.n_sparse == 2 else out
    return out


# -- conversions -----------------------------------------------------------------------------

def bcsr_fromdense(mat, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0,
                   index_dtype=np.int32) -> BCSR:
    """A BCSR array of the nonzero entries of a dense array (``nse`` defaults to the
    largest per-batch count, which needs a concrete ``mat``)."""
    mat = _jnp().asarray(mat)
    if nse is None:
        nse = _count_stored_elements(mat, n_batch, n_dense)
    nse = core_int(nse, _TRACED_NSE)
    return BCSR(_bcsr_fromdense(mat, nse=nse, n_batch=n_batch, n_dense=n_dense,
                                index_dtype=index_dtype),
                shape=mat.shape, indices_sorted=True, unique_indices=True)


def _bcsr_fromdense(mat, *, nse: int, n_batch: int = 0, n_dense: int = 0,
                    index_dtype=np.int32):
    """``(data, indices, indptr)`` of ``bcsr_fromdense``."""
    mat = _jnp().asarray(mat)
    n_batch, n_dense = operator.index(n_batch), operator.index(n_dense)
    if mat.ndim - n_batch - n_dense != 2:
        raise ValueError("bcsr_fromdense: must have 2 sparse dimensions.")
    nse = core_int(nse, _TRACED_NSE)
    m = _bcoo.bcoo_fromdense(mat, nse=nse, index_dtype=index_dtype, n_dense=n_dense,
                             n_batch=n_batch)
    indices, indptr = _bcoo_to_bcsr(m.indices, shape=mat.shape, index_dtype=index_dtype)
    return m.data, indices, indptr


def bcsr_todense(mat: BCSR):
    """The dense array of a BCSR array."""
    return _bcsr_todense(mat.data, mat.indices, mat.indptr, spinfo=mat._info)


def _bcsr_todense(data, indices, indptr, *, spinfo: SparseInfo):
    """The dense array of BCSR buffers."""
    shape = tuple(spinfo.shape)
    return BCOO((data, _bcsr_to_bcoo(indices, indptr, shape=shape)), shape=shape).todense()


def bcsr_extract(indices, indptr, mat):
    """The values of the dense ``mat`` at BCSR ``(indices, indptr)`` (a ``data`` buffer)."""
    mat = _jnp().asarray(mat)
    return _bcoo._bcoo_extract(_bcsr_to_bcoo(indices, indptr, shape=mat.shape), mat)


# -- products and structure ------------------------------------------------------------------

def bcsr_dot_general(lhs, rhs, *, dimension_numbers, precision=None,
                     preferred_element_type=None, out_sharding=None):
    """General contraction of a BCSR ``lhs`` with a dense ``rhs`` (or two dense arrays).

    Args:
      lhs: a BCSR array or dense array.
      rhs: a dense array.
      dimension_numbers: as in :func:`kiln.lax.dot_general`.
      precision: unused.
      preferred_element_type: the result dtype.
      out_sharding: unused.
    """
    from kiln import Array, lax
    del precision, out_sharding
    if isinstance(rhs, (np.ndarray, Array)) or hasattr(rhs, "aval"):
        if not isinstance(lhs, JAXSparse):
            return lax.dot_general(lhs, rhs, dimension_numbers=dimension_numbers,
                                   preferred_element_type=preferred_element_type)
        if isinstance(lhs, BCSR):
            return _bcsr_dot_general(*lhs._bufs, rhs, dimension_numbers=dimension_numbers,
                                     preferred_element_type=preferred_element_type,
                                     lhs_spinfo=lhs._info)
    raise NotImplementedError("bcsr_dot_general currently implemented for BCSR lhs and "
                              "ndarray rhs.")


def _bcsr_dot_general(lhs_data, lhs_indices, lhs_indptr, rhs, *, dimension_numbers,
                      preferred_element_type=None, lhs_spinfo: SparseInfo):
    """``bcsr_dot_general`` of BCSR buffers and a dense ``rhs``."""
    shape = tuple(lhs_spinfo.shape)
    lhs = BCOO((lhs_data, _bcsr_to_bcoo(lhs_indices, lhs_indptr, shape=shape)), shape=shape)
    return _bcoo.bcoo_dot_general(lhs, rhs, dimension_numbers=dimension_numbers,
                                  preferred_element_type=preferred_element_type)


def bcsr_broadcast_in_dim(mat: BCSR, *, shape, broadcast_dimensions, sharding=None) -> BCSR:
    """``lax.broadcast_in_dim`` of a BCSR array (through BCOO)."""
    out = _bcoo.bcoo_broadcast_in_dim(mat.to_bcoo(), shape=shape,
                                      broadcast_dimensions=broadcast_dimensions)
    return BCSR.from_bcoo(out)


def bcsr_concatenate(operands: Sequence[BCSR], *, dimension: int) -> BCSR:
    """``lax.concatenate`` of BCSR arrays (through BCOO)."""
    if not all(isinstance(m, BCSR) for m in operands):
        raise ValueError("bcsr_concatenate: expected operands to be a sequence of BCSR "
                         f"arrays. Got {operands}")
    return BCSR.from_bcoo(_bcoo.bcoo_concatenate([m.to_bcoo() for m in operands],
                                                 dimension=dimension))


def bcsr_sum_duplicates(mat: BCSR, nse: int | None = None) -> BCSR:
    """A copy with duplicate coordinates summed and indices sorted."""
    return BCSR.from_bcoo(_bcoo.bcoo_sum_duplicates(mat.to_bcoo(), nse=nse))


def bcsr_eliminate_zeros(mat: BCSR, nse: int | None = None) -> BCSR:
    """A copy without explicit zeros, duplicates summed."""
    return BCSR.from_bcoo(_bcoo.bcoo_eliminate_zeros(mat.to_bcoo(), nse=nse))


bcsr_fromdense_p = composite_primitive("bcsr_fromdense", _bcsr_fromdense,
                                       multiple_results=True)
bcsr_todense_p = composite_primitive("bcsr_todense", _bcsr_todense)
bcsr_extract_p = composite_primitive("bcsr_extract", bcsr_extract)
bcsr_dot_general_p = composite_primitive("bcsr_dot_general", _bcsr_dot_general)
