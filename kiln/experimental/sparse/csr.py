"""``jax.experimental.sparse.csr``: the ``CSR`` and ``CSC`` matrices (compressed rows /
columns) and the functions ``csr_todense``/``csr_fromdense``/``csr_matvec``/``csr_matmat``
(with the buffer-level ``_csr_*`` forms JAX's tests call).

A ``CSR`` matrix holds ``data`` and ``indices`` (column of each stored element, length
``nse``) and ``indptr`` (length ``n_rows + 1``: where each row's elements start). A ``CSC``
matrix holds the same buffers of its transpose (``CSC.T`` is a ``CSR`` matrix sharing them).
Every function converts ``indptr`` to row coordinates (a scatter of row starts and a
cumulative sum) and uses the COO computation, so the transformations come from
``kiln.numpy``'s rules as for :mod:`kiln.experimental.sparse.coo`. ``fromdense`` counts only
the true nonzeros in ``indptr``; padding slots hold value 0 and column 0, as JAX.
"""
from __future__ import annotations

import numpy as np

from kiln.experimental.sparse._base import JAXSparse
from kiln.experimental.sparse.coo import COOInfo, _coo_matmat, _coo_matvec, _coo_todense
from kiln.experimental.sparse.util import _csr_to_coo
from kiln.numpy._util import core_int, promote_dtypes
from kiln.tree_util import register_pytree_node_class

__all__ = ["CSC", "CSR", "csr_fromdense", "csr_matmat", "csr_matvec", "csr_todense"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _eye_buffers(N, M, k, dtype, index_dtype):
    """CSR buffers of the ``N x M`` matrix with ones on diagonal ``k`` (None if empty)."""
    jnp = _jnp()
    diag = min(N, M - k) if k > 0 else min(N + k, M)
    if diag <= 0:
        return None
    start = np.arange(diag)
    rows = start + max(-k, 0)
    cols = start + max(k, 0)
    indptr = np.zeros(N + 1, np.int64)
    indptr[1:] = np.cumsum(np.bincount(rows, minlength=N))
    return (jnp.ones(diag, dtype), jnp.asarray(cols, index_dtype),
            jnp.asarray(indptr, index_dtype))


class _Compressed(JAXSparse):
    """What CSR and CSC share: the three buffers and the pytree."""

    data: object
    indices: object
    indptr: object
    shape: tuple

    def __init__(self, args, *, shape):
        jnp = _jnp()
        self.data, self.indices, self.indptr = map(jnp.asarray, args)
        super().__init__(args, shape=shape)

    @property
    def _bufs(self) -> tuple:
        return (self.data, self.indices, self.indptr)

    def tree_flatten(self):
        return (self.data, self.indices, self.indptr), {"shape": self.shape}

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        obj = object.__new__(cls)
        obj.data, obj.indices, obj.indptr = children
        if aux_data.keys() != {"shape"}:
            raise ValueError(f"{cls.__name__}.tree_unflatten: invalid aux_data={aux_data}")
        obj.shape = aux_data["shape"]
        return obj

    def _matmul(self, other, shape, transpose):
        if isinstance(other, JAXSparse):
            raise NotImplementedError("matmul between two sparse objects.")
        other = _jnp().asarray(other)
        data, other = promote_dtypes(self.data, other)
        if other.ndim == 1:
            return _csr_matvec(data, self.indices, self.indptr, other, shape=shape,
                               transpose=transpose)
        if other.ndim == 2:
            return _csr_matmat(data, self.indices, self.indptr, other, shape=shape,
                               transpose=transpose)
        raise NotImplementedError(f"matmul with object of shape {other.shape}")

    @classmethod
    def _empty_buffers(cls, shape, n_ptr, dtype, index_dtype):
        jnp = _jnp()
        return (jnp.empty(0, dtype), jnp.empty(0, index_dtype),
                jnp.zeros(n_ptr + 1, index_dtype))


@register_pytree_node_class
class CSR(_Compressed):
    """A 2-D sparse matrix in compressed-row format (``jax.experimental.sparse.CSR``).

    Args:
      args: ``(data, indices, indptr)``.
      shape: the matrix shape ``(n_rows, n_cols)``.
    """

    @classmethod
    def fromdense(cls, mat, *, nse: int | None = None, index_dtype=np.int32) -> CSR:
        """The CSR matrix of the nonzero entries of a dense 2-D array."""
        if nse is None:
            nse = (_jnp().asarray(mat) != 0).sum()
        return csr_fromdense(mat, nse=nse, index_dtype=index_dtype)

    @classmethod
    def _empty(cls, shape, *, dtype=None, index_dtype="int32") -> CSR:
        shape = tuple(shape)
        if len(shape) != 2:
            raise ValueError(f"CSR must have ndim=2; got shape={shape}")
        return cls(cls._empty_buffers(shape, shape[0], dtype, index_dtype), shape=shape)

    @classmethod
    def _eye(cls, N: int, M: int, k: int, *, dtype=None, index_dtype="int32") -> CSR:
        bufs = _eye_buffers(N, M, k, dtype, index_dtype)
        if bufs is None:
            return cls._empty((N, M), dtype=dtype, index_dtype=index_dtype)
        return cls(bufs, shape=(N, M))

    def todense(self):
        """The dense matrix."""
        return csr_todense(self)

    def transpose(self, axes=None) -> CSC:
        """The transpose: a ``CSC`` matrix sharing the buffers."""
        if axes is not None:
            raise NotImplementedError("axes argument to transpose()")
        return CSC((self.data, self.indices, self.indptr), shape=self.shape[::-1])

    def __matmul__(self, other):
        return self._matmul(other, self.shape, False)


@register_pytree_node_class
class CSC(_Compressed):
    """A 2-D sparse matrix in compressed-column format (``jax.experimental.sparse.CSC``):
    the CSR buffers of its transpose.

    Args:
      args: ``(data, indices, indptr)``: ``indices`` are row indices, ``indptr`` has
        length ``n_cols + 1``.
      shape: the matrix shape ``(n_rows, n_cols)``.
    """

    @classmethod
    def fromdense(cls, mat, *, nse: int | None = None, index_dtype=np.int32) -> CSC:
        """The CSC matrix of the nonzero entries of a dense 2-D array."""
        mat = _jnp().asarray(mat)
        if nse is None:
            nse = (mat != 0).sum()
        return csr_fromdense(mat.T, nse=nse, index_dtype=index_dtype).T

    @classmethod
    def _empty(cls, shape, *, dtype=None, index_dtype="int32") -> CSC:
        shape = tuple(shape)
        if len(shape) != 2:
            raise ValueError(f"CSC must have ndim=2; got shape={shape}")
        return cls(cls._empty_buffers(shape, shape[1], dtype, index_dtype), shape=shape)

    @classmethod
    def _eye(cls, N: int, M: int, k: int, *, dtype=None, index_dtype="int32") -> CSC:
        return CSR._eye(M, N, -k, dtype=dtype, index_dtype=index_dtype).T

    def todense(self):
        """The dense matrix."""
        return csr_todense(self.T).T

    def transpose(self, axes=None) -> CSR:
        """The transpose: a ``CSR`` matrix sharing the buffers."""
        if axes is not None:
            raise NotImplementedError("axes argument to transpose()")
        return CSR((self.data, self.indices, self.indptr), shape=self.shape[::-1])

    def __matmul__(self, other):
        return self._matmul(other, self.shape[::-1], True)


# -- todense / fromdense ---------------------------------------------------------------------

def csr_todense(mat: CSR):
    """The dense matrix of a ``CSR`` matrix."""
    return _csr_todense(mat.data, mat.indices, mat.indptr, shape=mat.shape)


def _csr_todense(data, indices, indptr, *, shape):
    """The dense matrix of CSR buffers."""
    row, col = _csr_to_coo(indices, indptr)
    return _coo_todense(data, row, col, spinfo=COOInfo(shape=tuple(shape)))


def csr_fromdense(mat, *, nse: int | None = None, index_dtype=np.int32) -> CSR:
    """A ``CSR`` matrix of the nonzero entries of a dense 2-D array.

    Args:
      mat: the dense matrix.
      nse: the number of stored elements (default: the number of nonzeros, which needs a
        concrete ``mat``).
      index_dtype: the dtype of ``indices``/``indptr``.
    """
    mat = _jnp().asarray(mat)
    if nse is None:
        nse = (mat != 0).sum()
    nse = core_int(nse, "csr_fromdense nse argument: the value must be concrete (pass a "
                        "Python int under jit).")
    return CSR(_csr_fromdense(mat, nse=nse, index_dtype=index_dtype), shape=mat.shape)


def _csr_fromdense(mat, *, nse: int, index_dtype=np.int32):
    """``(data, indices, indptr)`` of the first ``nse`` nonzeros of ``mat`` (row-major)."""
    jnp = _jnp()
    mat = jnp.asarray(mat)
    nse = core_int(nse, "nse argument of csr_fromdense() must be concrete.")
    if mat.ndim != 2:
        raise ValueError(f"csr_fromdense: expected a 2-D array, got shape {mat.shape}")
    m = mat.shape[0]
    row, col = jnp.nonzero(mat, size=nse)
    data = mat[row, col]
    real = jnp.arange(nse) < (mat != 0).sum()
    data = jnp.where(real, data, jnp.zeros((), data.dtype))
    row = jnp.where(real, row, m)
    counts = jnp.bincount(row, length=m).astype(index_dtype)
    indptr = jnp.concatenate([jnp.zeros(1, index_dtype), jnp.cumsum(counts, dtype=index_dtype)])
    return data, col.astype(index_dtype), indptr


# -- products --------------------------------------------------------------------------------

def _check_ptr(name, indptr, shape):
    if indptr.ndim != 1 or indptr.shape[0] != shape[0] + 1:
        raise ValueError(f"{name}: indptr must have shape ({shape[0] + 1},) for a matrix of "
                         f"shape {tuple(shape)}; got {indptr.shape}")


def csr_matvec(mat: CSR, v, transpose: bool = False):
    """``mat @ v`` (``mat.T @ v`` with ``transpose``) for a ``CSR`` matrix and a vector."""
    return _csr_matvec(mat.data, mat.indices, mat.indptr, v, shape=mat.shape,
                       transpose=transpose)


def _csr_matvec(data, indices, indptr, v, *, shape, transpose: bool = False):
    """The product of CSR buffers with a vector."""
    indptr = _jnp().asarray(indptr)
    _check_ptr("csr_matvec", indptr, shape)
    row, col = _csr_to_coo(indices, indptr)
    return _coo_matvec(data, row, col, v, spinfo=COOInfo(shape=tuple(shape)),
                       transpose=transpose)


def csr_matmat(mat: CSR, B, *, transpose: bool = False):
    """``mat @ B`` (``mat.T @ B`` with ``transpose``) for a ``CSR`` matrix and a dense
    matrix."""
    return _csr_matmat(mat.data, mat.indices, mat.indptr, B, shape=mat.shape,
                       transpose=transpose)


def _csr_matmat(data, indices, indptr, B, *, shape, transpose: bool = False):
    """The product of CSR buffers with a dense matrix."""
    indptr = _jnp().asarray(indptr)
    _check_ptr("csr_matmat", indptr, shape)
    row, col = _csr_to_coo(indices, indptr)
    return _coo_matmat(data, row, col, B, spinfo=COOInfo(shape=tuple(shape)),
                       transpose=transpose)
