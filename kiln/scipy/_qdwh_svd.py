"""Singular value decomposition through the QDWH polar decomposition.

``svd(a, full_matrices)`` factors ``a = u diag(s) vh`` as JAX's
``jax._src.tpu.linalg.svd`` does (its SVD on TPU): the polar decomposition
``a = u_p h`` (:mod:`kiln.scipy._qdwh`) and the eigendecomposition ``h = v diag(s) v^H``
give ``u = u_p v`` (Nakatsukasa and Higham, SIAM J. Sci. Comput. 35(3), 2013). Wide
matrices are factored through their conjugate transpose; tall ones (``m > 1.15 n``, or
``full_matrices``) are first reduced to their ``R`` factor by a QR factorization. When the
smallest singular value is below ``n eps`` of the largest, ``u`` is re-orthonormalized by a
QR step (the polar factor of a rank-deficient matrix is not unitary). Non-finite input
gives NaN factors.
"""
from __future__ import annotations

import operator
from functools import partial

from kiln import dtypes, lax
from kiln.api import jit
from kiln.extend.core import concrete_or_error
from kiln.lax import linalg as lax_linalg
from kiln.numpy.linalg import jnp  # the lazy kiln.numpy proxy (kiln.numpy sits above)
from kiln.scipy._qdwh import qdwh


@partial(jit, static_argnums=(1, 2, 3, 4))
def _square_or_tall(a, hermitian, compute_uv, max_iterations, subset_by_index=None):
    """The SVD of an ``m x n`` matrix with ``m >= n`` (``s`` in descending order)."""
    u_p, h, _, _ = qdwh(a, is_hermitian=hermitian, max_iterations=max_iterations)
    v, s = lax_linalg.eigh(h, subset_by_index=subset_by_index, sort_eigenvalues=False)
    s = jnp.maximum(s, 0.0)        # eigh may give tiny negative values for zero ones
    order = jnp.argsort(s, descending=True)
    s_out = s[order]
    if not compute_uv:
        return s_out
    v_out = v[:, order]
    u_out = u_p @ v_out

    def reorthonormalize(args):
        q, r = lax_linalg.qr(args[0], full_matrices=False)
        return q @ jnp.diag(jnp.where(jnp.diag(r) >= 0, 1, -1)), False

    eps = float(dtypes.finfo(a.dtype).eps)
    deficient = s_out[-1] <= a.shape[1] * eps * s_out[0]
    u_out, _ = lax.while_loop(lambda args: args[1], reorthonormalize, (u_out, deficient))
    return u_out, s_out, v_out


def _subset(subset_by_index, m, n, full_matrices):
    """``subset_by_index`` checked, counted from the small end (eigenvalue order)."""
    if len(subset_by_index) != 2:
        raise ValueError("subset_by_index must be a tuple of size 2.")
    lo, hi = operator.index(subset_by_index[0]), operator.index(subset_by_index[1])
    if lo >= hi:
        raise ValueError("Got empty index range in subset_by_index.")
    if lo < 0:
        raise ValueError("Indices in subset_by_index must be non-negative.")
    rank = min(m, n)
    if hi > rank:
        raise ValueError("Index in subset_by_index[1] exceeds matrix size.")
    if full_matrices and (lo, hi) != (0, rank):
        raise ValueError("full_matrices and subset_by_index cannot be both be set.")
    return rank - hi, rank - lo


@partial(jit, static_argnums=(1, 2, 3, 4, 5))
def svd(a, full_matrices: bool, compute_uv: bool = True, hermitian: bool = False,
        max_iterations: int = 10, subset_by_index: tuple[int, int] | None = None):
    """Singular value decomposition by QDWH polar decomposition and ``eigh``.

    Args:
      a: an ``m x n`` matrix.
      full_matrices: if True ``u`` and ``vh`` are ``m x m`` and ``n x n``, else
        ``m x k`` and ``k x n`` with ``k = min(m, n)``.
      compute_uv: whether to compute ``u`` and ``vh`` (else only ``s`` is returned).
      hermitian: whether ``a`` is Hermitian (passed to QDWH, which does not use it).
      max_iterations: the most QDWH iterations.
      subset_by_index: ``(start, end)``: only the singular triplets with indices in
        that range (singular values counted from the largest).

    Returns:
      ``(u, s, vh)`` with ``s`` non-increasing, or ``s`` alone if not ``compute_uv``.
    """
    full_matrices = concrete_or_error(
        bool, full_matrices, "The `full_matrices` argument must be statically specified "
        "to use `svd` within JAX transformations.")
    compute_uv = concrete_or_error(
        bool, compute_uv, "The `compute_uv` argument must be statically specified to use "
        "`svd` within JAX transformations.")
    hermitian = concrete_or_error(
        bool, hermitian, "The `hermitian` argument must be statically specified to use "
        "`svd` within JAX transformations.")
    max_iterations = concrete_or_error(
        int, max_iterations, "The `max_iterations` argument must be statically specified "
        "to use `svd` within JAX transformations.")
    m, n = a.shape
    if subset_by_index is not None:
        subset_by_index = _subset(subset_by_index, m, n, full_matrices)
    flipped = m < n
    if flipped:
        a = a.T.conj()
        m, n = a.shape
    q = null = None
    if full_matrices and m > n:
        q_full, r_full = lax_linalg.qr(a, pivoting=False, full_matrices=True)
        q, null, a = q_full[:, :n], q_full[:, n:], r_full[:n, :]
    elif m > 1.15 * n:      # the threshold of Nakatsukasa's reference implementation
        q, a = lax_linalg.qr(a, pivoting=False, full_matrices=False)
    if not compute_uv:
        return _square_or_tall(a, hermitian, False, max_iterations, subset_by_index)
    u, s, v = _square_or_tall(a, hermitian, True, max_iterations, subset_by_index)
    if q is not None:
        u = q @ u
    if null is not None:
        u = jnp.hstack((u, null))

    def poison(args):
        return (jnp.array(True), jnp.full_like(args[1], jnp.nan),
                jnp.full_like(args[2], jnp.nan), jnp.full_like(args[3], jnp.nan))

    finite = jnp.all(jnp.isfinite(a))
    _, u, s, v = lax.while_loop(lambda args: jnp.logical_not(args[0]), poison,
                                (finite, u, s, v))
    if flipped:
        return v, s, u.T.conj()
    return u, s, v.T.conj()
