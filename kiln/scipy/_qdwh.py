"""Polar decomposition by the QR-based dynamically weighted Halley iteration (QDWH).

``qdwh(x)`` gives ``x = u h`` with ``u`` having orthonormal columns and ``h`` Hermitian
positive semi-definite, for an ``M x N`` matrix with ``M >= N``. It is what
``jax.scipy.linalg.polar(method='qdwh')`` computes and JAX's ``jax._src.tpu.linalg.qdwh``
(also the first half of JAX's QDWH-based SVD, :mod:`kiln.scipy._qdwh_svd`), so kiln runs
the same iteration with the same weights, in the same order of operations, on every
platform.

The method (Nakatsukasa, Bai and Gygi, SIAM J. Matrix Anal. Appl. 31(5), 2010): after
scaling ``x`` so its 2-norm is at most 1, each step maps the singular values through the
rational function ``s (a + b s^2) / (1 + c s^2)`` whose weights ``a, b, c`` are chosen
from ``l``, a lower bound of the smallest scaled singular value (the machine epsilon at
the start), so that ``l`` reaches 1 in at most six steps in float64. The weights depend on
nothing but ``l``, so they are computed ahead in Python. Steps with large ``c`` are taken
through a QR factorization of ``[sqrt(c) u; I]`` (stable when the iteration matrix is
ill-conditioned), the others through a Cholesky factorization of ``c u^H u + I``; once
the weights are spent, Halley's iteration (``a, b, c = 3, 1, 3``) runs until the change
of ``u`` is below ``cbrt(5 eps)`` or ``max_iterations`` is reached; a Newton-Schulz step
finishes ``u``.

A matrix padded to a static shape can be passed with its true ``dynamic_shape``
``(m, n)`` (traced values allowed): the padding is masked out of every step.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from kiln import dtypes, lax
from kiln.api import jit
from kiln.extend.core import concrete_or_error
from kiln.lax import linalg as lax_linalg
from kiln.numpy.linalg import jnp  # the lazy kiln.numpy proxy (kiln.numpy sits above)

#: Steps whose weight ``c`` exceeds this go through QR, the rest through Cholesky.
_CHOLESKY_CUTOFF = 100


def _masked(x, dims, fill=0):
    """``x`` with the entries outside the leading ``dims`` (None: the whole dimension)
    replaced by ``fill`` (broadcast against ``x``)."""
    keep = None
    for axis, d in enumerate(dims):
        if d is None:
            continue
        inside = lax.broadcasted_iota(np.int32, x.shape, axis) < d
        keep = inside if keep is None else keep & inside
    return x if keep is None else jnp.where(keep, x, fill)


def _stack_rows(top, bottom, m):
    """``top`` (padded, ``m`` true rows) with ``bottom`` stacked below its true rows."""
    grown = lax.pad(top, jnp.array(0, top.dtype),
                    [(0, bottom.shape[0], 0)] + [(0, 0, 0)] * (top.ndim - 1))
    return lax.dynamic_update_slice_in_dim(grown, bottom, m, 0)


def _qr_step(u, m, n, weights):
    """One weighted Halley step through the QR factorization of ``[sqrt(c) u; I]``:
    ``e u + (a - e)/sqrt(c) * Q1 Q2^H``."""
    scale, sqrt_c, e = weights
    M, N = u.shape
    stacked = _stack_rows(sqrt_c * u, jnp.eye(N, dtype=u.dtype), m)
    q, _ = lax_linalg.qr(stacked, full_matrices=False)
    q_top = _masked(lax.slice(q, (0, 0), (M, N)), (m, n))
    q_bottom = _masked(lax.dynamic_slice_in_dim(q, m, N, axis=0), (n, n))
    return e * u + scale * (q_top @ q_bottom.T.conj())


def _cholesky_step(u, m, n, weights):
    """One weighted Halley step through the Cholesky factor ``L`` of ``c u^H u + I``:
    ``e u + (a - e) u (L L^H)^{-1}``."""
    a_minus_e, c, e = weights
    N = u.shape[1]
    gram = c * (u.T.conj() @ u) + jnp.eye(N, dtype=u.dtype)
    # the padded corner gets the identity, so the factorization stays positive definite
    gram = _masked(gram, (n, n), jnp.eye(N, dtype=gram.dtype))
    chol = lax_linalg.cholesky(gram, symmetrize_input=False)
    z = lax_linalg.triangular_solve(chol, u.T, left_side=True, lower=True,
                                    conjugate_a=True).conj()
    z = lax_linalg.triangular_solve(chol, z, left_side=True, lower=True, transpose_a=True,
                                    conjugate_a=True).T.conj()
    return e * u + a_minus_e * z


def _weights(eps: float, max_iterations: int):
    """The dynamically chosen weights, split by the step that uses them: QR steps get
    ``((a - e)/sqrt(c), sqrt(c), e)``, Cholesky steps ``(a - e, c, e)`` with ``e = b/c``."""
    tol_l = 10.0 * eps / 2.0
    lower = eps
    qr_weights, chol_weights = [], []
    while lower + tol_l < 1 and len(qr_weights) + len(chol_weights) < max_iterations:
        l2 = lower * lower
        d = (4 * (1 / l2 - 1) / l2) ** (1 / 3)
        root = (1.0 + d) ** (1 / 2)
        a = root + (2 - d + 2 * (2 - l2) / (l2 * root)) ** (1 / 2)
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        lower = lower * (a + b * l2) / (1 + c * l2)
        e = b / c
        if c > _CHOLESKY_CUTOFF:
            qr_weights.append(((a - e) / c ** (1 / 2), c ** (1 / 2), e))
        else:
            chol_weights.append((a - e, c, e))
    return qr_weights, chol_weights


def _iterate(x, m, n, max_iterations, eps):
    if eps is None:
        eps = float(dtypes.finfo(x.dtype).eps)
    col_norm = jnp.linalg.norm(x, ord=1)
    row_norm = jnp.linalg.norm(x, ord=np.inf)
    # 1/sqrt(|x|_1 |x|_inf) bounds 1/|x|_2 from below: the scaled matrix has norm <= 1
    inv_alpha = lax.rsqrt(col_norm) * lax.rsqrt(row_norm)
    inv_alpha = jnp.where(col_norm == 0, 1, inv_alpha)
    u = x * inv_alpha.astype(x.dtype)
    tol_change = jnp.cbrt(10.0 * eps / 2.0)
    qr_weights, chol_weights = _weights(eps, max_iterations)

    def step(update, weights, check):
        def body(k, carry):
            u_prev, _ = carry
            w = (3.0 - 1 / 3, 3.0, 1 / 3) if weights is None else \
                lax.dynamic_index_in_dim(weights, k, keepdims=False)
            u_next = update(u_prev, m, n, tuple(w[i] for i in range(3)))
            moving = jnp.linalg.norm(u_next - u_prev) > tol_change if check else True
            return u_next, moving
        return body

    def run(u, weights, update, check):
        if not weights:
            return u, True
        table = jnp.array(weights).astype(x.dtype)
        return lax.fori_loop(0, len(weights), step(update, table, check), (u, True))

    u, _ = run(u, qr_weights, _qr_step, False)
    u, moving = run(u, chol_weights, _cholesky_step, True)

    halley = step(_cholesky_step, None, True)

    def more(carry):
        k, _, still = carry
        return jnp.logical_and(still, k < max_iterations)

    def again(carry):
        k, u_k, still = carry
        u_k, still = halley(k, (u_k, still))
        return k + 1, u_k, still

    num_iters, u, moving = lax.while_loop(
        more, again, (len(qr_weights) + len(chol_weights), u, moving))
    # one Newton-Schulz step restores orthonormality to working precision
    u = 1.5 * u - 0.5 * u @ (u.T.conj() @ u)
    h = u.T.conj() @ x
    h = (h + h.T.conj()) / 2
    return u, h, num_iters, jnp.logical_not(moving)


@partial(jit, static_argnames=("max_iterations", "eps"))
def _qdwh_jit(x, dynamic_shape, *, max_iterations, eps):
    if dynamic_shape is not None:
        m, n = dynamic_shape
        x = _masked(x, (m, n))
    else:
        m, n = x.shape
    return _iterate(x, m, n, max_iterations, eps)


def qdwh(x, *, is_hermitian: bool = False, max_iterations: int | None = None,
         eps: float | None = None, dynamic_shape: tuple[int, int] | None = None):
    """Polar decomposition ``x = u h`` by QR-based dynamically weighted Halley iteration.

    Args:
      x: a full-rank ``M x N`` matrix with ``M >= N``, possibly padded from a smaller
        true shape (``dynamic_shape``).
      is_hermitian: accepted for compatibility; unused.
      max_iterations: the most iterations (static; default 10).
      eps: the iteration stops once ``|u_k - u_{k-1}| < cbrt(5 eps)`` (default: the
        machine epsilon of ``x``'s dtype).
      dynamic_shape: the true ``(m, n)`` of a padded ``x``.

    Returns:
      ``(u, h, num_iters, is_converged)``: the factors, the number of iterations taken,
      and whether the iteration converged within ``max_iterations``.
    """
    concrete_or_error(bool, is_hermitian,
                      "The `is_hermitian` argument must be statically specified to use "
                      "`qdwh` within JAX transformations.")
    if max_iterations is None:
        max_iterations = 10
    else:
        max_iterations = concrete_or_error(
            int, max_iterations, "The `max_iterations` argument must be statically "
            "specified to use `qdwh` within JAX transformations.")
    x = jnp.asarray(x)
    M, N = x.shape
    if M < N:
        raise ValueError("The input matrix of shape M x N must have M >= N.")
    if dynamic_shape is not None:
        dynamic_shape = tuple(dynamic_shape)
    return _qdwh_jit(x, dynamic_shape, max_iterations=max_iterations,
                     eps=None if eps is None else float(eps))
