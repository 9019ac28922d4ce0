"""``jax.experimental.sparse.coo``: the ``COO`` matrix (2-D coordinate format) and its
functions ``coo_todense``/``coo_fromdense``/``coo_matvec``/``coo_matmat`` (with the
buffer-level ``_coo_*`` forms JAX's tests call).

A ``COO`` matrix holds three 1-D buffers of length ``nse``: ``data``, ``row``, ``col``.
Duplicates add up. ``fromdense`` pads with zeros at coordinate ``(0, 0)`` when ``nse``
exceeds the number of nonzeros, as JAX. Each function is composed of ``kiln.numpy``
gathers and scatter-adds, so ``jit``, ``jvp``/``grad`` (linear in ``data`` and in the dense
operand; indices have ``float0`` tangents) and ``vmap`` come from those ops' rules.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kiln.experimental.sparse._base import JAXSparse
from kiln.numpy._util import core_int, promote_dtypes
from kiln.tree_util import register_pytree_node_class

__all__ = ["COO", "COOInfo", "coo_fromdense", "coo_matmat", "coo_matvec", "coo_todense"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


class COOInfo(NamedTuple):
    """Static metadata of a COO matrix."""
    shape: tuple
    rows_sorted: bool = False
    cols_sorted: bool = False


@register_pytree_node_class
class COO(JAXSparse):
    """A 2-D sparse matrix in coordinate format (``jax.experimental.sparse.COO``).

    Args:
      args: ``(data, row, col)``, three 1-D arrays of equal length.
      shape: the matrix shape ``(n_rows, n_cols)``.
      rows_sorted, cols_sorted: what is known of the coordinates' order.
    """

    data: object
    row: object
    col: object
    shape: tuple

    def __init__(self, args, *, shape, rows_sorted: bool = False, cols_sorted: bool = False):
        jnp = _jnp()
        self.data, self.row, self.col = map(jnp.asarray, args)
        self._rows_sorted = rows_sorted
        self._cols_sorted = cols_sorted
        super().__init__(args, shape=shape)

    @property
    def _info(self) -> COOInfo:
        return COOInfo(shape=self.shape, rows_sorted=self._rows_sorted,
                       cols_sorted=self._cols_sorted)

    @property
    def _bufs(self) -> tuple:
        return (self.data, self.row, self.col)

    @classmethod
    def fromdense(cls, mat, *, nse: int | None = None, index_dtype=np.int32) -> COO:
        """The COO matrix of the nonzero entries of a dense 2-D array."""
        return coo_fromdense(mat, nse=nse, index_dtype=index_dtype)

    def _sort_indices(self) -> COO:
        """A copy sorted by row, then column (``self`` when rows are already sorted)."""
        from kiln import lax
        if self._rows_sorted:
            return self
        row, col, data = lax.sort((self.row, self.col, self.data), num_keys=2)
        return type(self)((data, row, col), shape=self.shape, rows_sorted=True)

    @classmethod
    def _empty(cls, shape, *, dtype=None, index_dtype="int32") -> COO:
        jnp = _jnp()
        shape = tuple(shape)
        if len(shape) != 2:
            raise ValueError(f"COO must have ndim=2; got shape={shape}")
        data = jnp.empty(0, dtype)
        row = col = jnp.empty(0, index_dtype)
        return cls((data, row, col), shape=shape, rows_sorted=True, cols_sorted=True)

    @classmethod
    def _eye(cls, N: int, M: int, k: int, *, dtype=None, index_dtype="int32") -> COO:
        jnp = _jnp()
        diag = min(N, M - k) if k > 0 else min(N + k, M)
        if diag <= 0:
            return cls._empty((N, M), dtype=dtype, index_dtype=index_dtype)
        start = np.arange(diag)
        row = jnp.asarray(start + max(-k, 0), index_dtype)
        col = jnp.asarray(start + max(k, 0), index_dtype)
        return cls((jnp.ones(diag, dtype), row, col), shape=(N, M), rows_sorted=True,
                   cols_sorted=True)

    def todense(self):
        """The dense matrix (duplicates summed)."""
        return coo_todense(self)

    def transpose(self, axes=None) -> COO:
        """The transpose (rows and columns swapped)."""
        if axes is not None:
            raise NotImplementedError("axes argument to transpose()")
        return COO((self.data, self.col, self.row), shape=self.shape[::-1],
                   rows_sorted=self._cols_sorted, cols_sorted=self._rows_sorted)

    def tree_flatten(self):
        return (self.data, self.row, self.col), self._info._asdict()

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        obj = object.__new__(cls)
        obj.data, obj.row, obj.col = children
        if aux_data.keys() != {"shape", "rows_sorted", "cols_sorted"}:
            raise ValueError(f"COO.tree_unflatten: invalid aux_data={aux_data}")
        obj.shape = aux_data["shape"]
        obj._rows_sorted = aux_data["rows_sorted"]
        obj._cols_sorted = aux_data["cols_sorted"]
        return obj

    def __matmul__(self, other):
        if isinstance(other, JAXSparse):
            raise NotImplementedError("matmul between two sparse objects.")
        other = _jnp().asarray(other)
        data, other = promote_dtypes(self.data, other)
        mat = COO((data, self.row, self.col), **self._info._asdict())
        if other.ndim == 1:
            return coo_matvec(mat, other)
        if other.ndim == 2:
            return coo_matmat(mat, other)
        raise NotImplementedError(f"matmul with object of shape {other.shape}")


# -- todense ---------------------------------------------------------------------------------

def coo_todense(mat: COO):
    """The dense matrix of a ``COO`` matrix."""
    return _coo_todense(mat.data, mat.row, mat.col, spinfo=mat._info)


def _coo_todense(data, row, col, *, spinfo: COOInfo):
    """The dense matrix of COO buffers: ``data`` scatter-added at ``(row, col)``."""
    jnp = _jnp()
    data = jnp.asarray(data)
    return jnp.zeros(spinfo.shape, data.dtype).at[row, col].add(data)


# -- fromdense -------------------------------------------------------------------------------

def coo_fromdense(mat, *, nse: int | None = None, index_dtype=np.int32) -> COO:
    """A ``COO`` matrix of the nonzero entries of a dense 2-D array.

    Args:
      mat: the dense matrix.
      nse: the number of stored elements (default: the number of nonzeros, which needs a
        concrete ``mat``).
      index_dtype: the dtype of ``row``/``col``.
    """
    jnp = _jnp()
    mat = jnp.asarray(mat)
    if nse is None:
        nse = (mat != 0).sum()
    nse = core_int(nse, "coo_fromdense nse argument: the value must be concrete (pass a "
                        "Python int under jit).")
    return COO(_coo_fromdense(mat, nse=nse, index_dtype=index_dtype), shape=mat.shape,
               rows_sorted=True)


def _coo_fromdense(mat, *, nse: int, index_dtype=np.int32):
    """``(data, row, col)`` of the first ``nse`` nonzeros of ``mat`` in row-major order
    (padding: value 0 at ``(0, 0)``)."""
    jnp = _jnp()
    mat = jnp.asarray(mat)
    nse = core_int(nse, "nse argument of coo_fromdense() must be concrete.")
    if mat.ndim != 2:
        raise ValueError(f"coo_fromdense: expected a 2-D array, got shape {mat.shape}")
    row, col = jnp.nonzero(mat, size=nse)
    data = mat[row, col]
    real = jnp.arange(nse) < (mat != 0).sum()
    data = jnp.where(real, data, jnp.zeros((), data.dtype))
    return data, row.astype(index_dtype), col.astype(index_dtype)


# -- products --------------------------------------------------------------------------------

def coo_matvec(mat: COO, v, transpose: bool = False):
    """``mat @ v`` (``mat.T @ v`` with ``transpose``) for a ``COO`` matrix and a vector."""
    return _coo_matvec(mat.data, mat.row, mat.col, v, spinfo=mat._info, transpose=transpose)


def _check_product(name, data, row, col, x, shape, transpose, ndim):
    if len(shape) != 2:
        raise ValueError(f"{name}: the sparse matrix must be 2-D, got shape={shape}")
    if not (data.ndim == row.ndim == col.ndim == 1 and data.shape == row.shape == col.shape):
        raise ValueError(f"{name}: data, row and col must be 1-D of equal length; got "
                         f"{data.shape}, {row.shape}, {col.shape}")
    inner = shape[0] if transpose else shape[1]
    if x.ndim != ndim or x.shape[0] != inner:
        raise ValueError(f"{name}: the dense operand must be {ndim}-D with leading size "
                         f"{inner}; got shape {x.shape}")


def _coo_product(data, row, col, x, shape, transpose):
    jnp = _jnp()
    if transpose:
        row, col = col, row
    n_out = shape[1] if transpose else shape[0]
    picked = x[col]
    prod = data.reshape(data.shape + (1,) * (x.ndim - 1)) * picked
    return jnp.zeros((n_out,) + tuple(x.shape[1:]), prod.dtype).at[row].add(prod)


def _coo_matvec(data, row, col, v, *, spinfo: COOInfo, transpose: bool = False):
    """The product of COO buffers with a vector (see :func:`coo_matvec`)."""
    jnp = _jnp()
    data, row, col, v = map(jnp.asarray, (data, row, col, v))
    _check_product("coo_matvec", data, row, col, v, spinfo.shape, transpose, 1)
    return _coo_product(data, row, col, v, spinfo.shape, transpose)


def coo_matmat(mat: COO, B, *, transpose: bool = False):
    """``mat @ B`` (``mat.T @ B`` with ``transpose``) for a ``COO`` matrix and a dense
    matrix."""
    return _coo_matmat(mat.data, mat.row, mat.col, B, spinfo=mat._info, transpose=transpose)


def _coo_matmat(data, row, col, B, *, spinfo: COOInfo, transpose: bool = False):
    """The product of COO buffers with a dense matrix (see :func:`coo_matmat`)."""
    jnp = _jnp()
    data, row, col, B = map(jnp.asarray, (data, row, col, B))
    _check_product("coo_matmat", data, row, col, B, spinfo.shape, transpose, 2)
    return _coo_product(data, row, col, B, spinfo.shape, transpose)


