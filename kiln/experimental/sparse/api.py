"""``sparse.todense``, ``sparse.empty``, ``sparse.eye`` and ``sparse.sparsify`` (the last
is not provided by kiln and raises ``NotImplementedError`` when called)."""
from __future__ import annotations

import functools
from collections.abc import Sequence

from kiln.experimental.sparse._base import JAXSparse
from kiln.experimental.sparse._bcoo_core import BCOO
from kiln.numpy._util import core_int

__all__ = ["empty", "eye", "sparsify", "todense"]

_FORMATS = ("bcoo", "bcsr", "coo", "csr", "csc")


def todense(arr):
    """The dense array of a sparse array; dense inputs are returned unchanged."""
    return arr.todense() if isinstance(arr, JAXSparse) else arr


def _format_class(sparse_format: str):
    if sparse_format not in _FORMATS:
        raise ValueError(f"sparse_format={sparse_format!r} not recognized; must be one of "
                         f"{list(_FORMATS)}")
    if sparse_format != "bcoo":
        raise NotImplementedError(f"sparse_format={sparse_format!r}: kiln provides only the "
                                  "'bcoo' format (BCOO).")
    return BCOO


def empty(shape: Sequence[int], dtype=None, index_dtype="int32", sparse_format: str = "bcoo",
          **kwds) -> BCOO:
    """An all-zero sparse array.

    Args:
      shape: the shape.
      dtype: the dtype of the values (default float).
      index_dtype: the dtype of the indices.
      sparse_format: ``"bcoo"`` (the only format kiln provides).
      **kwds: ``n_batch``, ``n_dense``, ``nse`` of the BCOO layout.

    Returns:
      A BCOO array.
    """
    cls = _format_class(sparse_format)
    return cls._empty(tuple(shape), dtype=dtype, index_dtype=index_dtype, **kwds)


def eye(N: int, M: int | None = None, k: int = 0, dtype=None, index_dtype="int32",
        sparse_format: str = "bcoo", **kwds) -> BCOO:
    """A sparse 2-D array with ones on the ``k``-th diagonal.

    Args:
      N: the number of rows.
      M: the number of columns (default ``N``).
      k: the diagonal (positive: above the main one).
      dtype: the dtype of the values.
      index_dtype: the dtype of the indices.
      sparse_format: ``"bcoo"``.
      **kwds: ``n_batch``, ``n_dense`` of the BCOO layout.

    Returns:
      A BCOO array.
    """
    cls = _format_class(sparse_format)
    M = N if M is None else M
    N, M, k = (core_int(v, "sparse.eye requires concrete integer arguments.")
               for v in (N, M, k))
    return cls._eye(N, M, k, dtype=dtype, index_dtype=index_dtype, **kwds)


def sparsify(f, use_tracer: bool = False):
    """Not provided by kiln: the returned function raises ``NotImplementedError``.

    JAX's ``sparsify`` re-interprets a traced program with sparse values; kiln offers the
    BCOO operations and operators directly instead (``@``, ``*``, ``.sum``, ...).
    """
    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        raise NotImplementedError(
            "jax.experimental.sparse.sparsify is not provided by kiln; call the BCOO "
            "operations directly (BCOO @ x, BCOO * x, BCOO.sum, bcoo_dot_general, ...).")
    return wrapped
