"""``jax.experimental.sparse.linalg``: ``spsolve`` (a linear solve with a CSR matrix).

kiln has no sparse direct solver: ``spsolve`` densifies the CSR matrix and solves with
``kiln.numpy.linalg.solve`` (LU), which gives JAX's solution for a nonsingular matrix and
the derivatives of the solve with respect to the stored values and the right-hand side.
``lobpcg_standard`` is not provided (``AttributeError``).
"""
from __future__ import annotations

__all__ = ["spsolve"]


def spsolve(data, indices, indptr, b, tol: float = 1e-6, reorder: int = 1):
    """The solution ``x`` of ``A @ x = b`` for the square CSR matrix ``A``.

    Args:
      data, indices, indptr: the CSR buffers of ``A`` (``n x n``).
      b: the right-hand side, shape ``(n,)``.
      tol: accepted for JAX's signature (a direct solve needs no tolerance).
      reorder: accepted for JAX's signature (the fill-reducing ordering of JAX's QR).
    """
    import kiln.numpy as jnp
    from kiln.experimental.sparse.csr import _csr_todense
    del tol, reorder
    b = jnp.asarray(b)
    n = b.shape[0]
    if jnp.ndim(b) != 1:
        raise ValueError(f"spsolve: b must be 1-D, got shape {b.shape}")
    a = _csr_todense(data, indices, indptr, shape=(n, n))
    return jnp.linalg.solve(a, b)


def __getattr__(name):
    if name == "lobpcg_standard":
        raise AttributeError("jax.experimental.sparse.linalg.lobpcg_standard is not provided "
                             "by kiln.")
    raise AttributeError(f"module 'kiln.experimental.sparse.linalg' has no attribute "
                         f"{name!r}")
