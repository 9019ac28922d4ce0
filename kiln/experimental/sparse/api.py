"""``sparse.todense`` (and its primitive ``todense_p``), ``sparse.empty`` and ``sparse.eye``
for every format."""
from __future__ import annotations

from collections.abc import Sequence

from kiln.core.trace import Tracer
from kiln.experimental.sparse._base import JAXSparse
from kiln.experimental.sparse._composite import composite_primitive
from kiln.numpy._util import core_int
from kiln.tree_util import tree_flatten, tree_unflatten

__all__ = ["empty", "eye", "todense", "todense_p"]

_FORMATS = ("bcoo", "bcsr", "coo", "csr", "csc")


def todense(arr):
    """The dense array of a sparse array; dense inputs are returned unchanged.

    A traced dense input goes through ``todense_p`` (as in JAX), so that a transformation
    that sees sparse values behind dense tracers (``sparsify``) can densify them.
    """
    if isinstance(arr, JAXSparse):
        return arr.todense()
    if isinstance(arr, Tracer):
        bufs, tree = tree_flatten(arr)
        return todense_p.bind(*bufs, tree=tree)
    return arr


def _todense_bufs(*bufs, tree):
    arr = tree_unflatten(tree, list(bufs))
    return arr.todense() if isinstance(arr, JAXSparse) else arr


#: ``todense`` as a primitive over a sparse array's buffers: ``todense_p.bind(*bufs,
#: tree=treedef)`` with ``bufs, treedef = tree_flatten(arr)``.
todense_p = composite_primitive("todense", _todense_bufs)


def _format_class(sparse_format: str):
    if sparse_format not in _FORMATS:
        raise ValueError(f"sparse_format={sparse_format!r} not recognized; must be one of "
                         f"{list(_FORMATS)}")
    from kiln.experimental import sparse
    return getattr(sparse, sparse_format.upper())


def empty(shape: Sequence[int], dtype=None, index_dtype="int32", sparse_format: str = "bcoo",
          **kwds) -> JAXSparse:
    """An all-zero sparse array.

    Args:
      shape: the shape.
      dtype: the dtype of the values (default float).
      index_dtype: the dtype of the indices.
      sparse_format: ``"bcoo"``, ``"bcsr"``, ``"coo"``, ``"csr"`` or ``"csc"``.
      **kwds: the format's layout (``n_batch``, ``n_dense``, ``nse`` of BCOO).

    Returns:
      A sparse array of that format.
    """
    cls = _format_class(sparse_format)
    return cls._empty(tuple(shape), dtype=dtype, index_dtype=index_dtype, **kwds)


def eye(N: int, M: int | None = None, k: int = 0, dtype=None, index_dtype="int32",
        sparse_format: str = "bcoo", **kwds) -> JAXSparse:
    """A sparse 2-D array with ones on the ``k``-th diagonal.

    Args:
      N: the number of rows.
      M: the number of columns (default ``N``).
      k: the diagonal (positive: above the main one).
      dtype: the dtype of the values.
      index_dtype: the dtype of the indices.
      sparse_format: ``"bcoo"``, ``"bcsr"``, ``"coo"``, ``"csr"`` or ``"csc"``.
      **kwds: the format's layout (``n_batch``, ``n_dense``).

    Returns:
      A sparse array of that format.
    """
    cls = _format_class(sparse_format)
    M = N if M is None else M
    N, M, k = (core_int(v, "sparse.eye requires concrete integer arguments.")
               for v in (N, M, k))
    return cls._eye(N, M, k, dtype=dtype, index_dtype=index_dtype, **kwds)
