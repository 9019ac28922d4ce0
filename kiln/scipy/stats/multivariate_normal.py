"""The multivariate normal distribution, as ``jax.scipy.stats.multivariate_normal``.

The Cholesky factor and the triangular solve come from ``kiln.lax.linalg`` when it exists;
otherwise a small unrolled factorization and forward substitution (over the static
dimension ``n``) built from ``kiln.numpy`` ops stand in. Both work under
``jit``/``grad``/``vmap``.
"""
import numpy as np

from kiln.scipy.stats._common import jnp, lax, promote_dtypes_inexact


def _linalg():
    la = getattr(lax, "linalg", None)
    if la is not None and hasattr(la, "cholesky") and hasattr(la, "triangular_solve"):
        return la
    return None


def _cholesky(a):
    """Lower Cholesky factor of ``(..., n, n)`` (NaN where not positive definite)."""
    la = _linalg()
    if la is not None:
        return la.cholesky(a)
    # Symmetrize first (as lax.linalg.cholesky), so gradients are symmetric too.
    a = (a + jnp.conj(jnp.swapaxes(a, -1, -2))) / 2
    n = a.shape[-1]
    cols = []           # cols[j]: column j of L, shape (..., n), zero above the diagonal
    for j in range(n):
        if j:
            prev = jnp.stack(cols, axis=-1)                       # (..., n, j)
            row_j = prev[..., j, :]                                # (..., j)
            s = a[..., :, j] - jnp.einsum("...ik,...k->...i", prev, row_j)
        else:
            s = a[..., :, j]
        d = jnp.sqrt(s[..., j])
        col = s / d[..., None]
        mask = np.arange(n) >= j
        col = jnp.where(mask, jnp.where(np.arange(n) == j, d[..., None], col), 0)
        cols.append(col)
    return jnp.stack(cols, axis=-1)


def _solve_lower(L, b):
    """``y`` with ``L @ y == b`` for lower-triangular ``L`` (batched, broadcasting)."""
    la = _linalg()
    n = L.shape[-1]
    if la is not None:
        batch = jnp.broadcast_shapes(L.shape[:-2], b.shape[:-1])
        L = jnp.broadcast_to(L, batch + (n, n))
        b = jnp.broadcast_to(b, batch + (n,))[..., None, :]
        # Right-side solve of y^T L^T = b^T, as JAX's multivariate_normal.
        y = la.triangular_solve(L, b, left_side=False, lower=True, transpose_a=True)
        return y[..., 0, :]
    ys = []
    for i in range(n):
        acc = b[..., i]
        for k in range(i):
            acc = acc - L[..., i, k] * ys[k]
        ys.append(acc / L[..., i, i])
    return jnp.stack(ys, axis=-1)


def logpdf(x, mean, cov, allow_singular=None):
    if allow_singular is not None:
        raise NotImplementedError("allow_singular argument of multivariate_normal.logpdf")
    x, mean, cov = promote_dtypes_inexact(jnp.asarray(x), jnp.asarray(mean), jnp.asarray(cov))
    if not mean.shape:
        return (-1 / 2 * jnp.square(x - mean) / cov
                - 1 / 2 * (jnp.log(2 * np.pi) + jnp.log(cov)))
    n = mean.shape[-1]
    if not np.shape(cov):
        y = x - mean
        return (-1 / 2 * jnp.einsum("...i,...i->...", y, y) / cov
                - n / 2 * (jnp.log(2 * np.pi) + jnp.log(cov)))
    if cov.ndim < 2 or cov.shape[-2:] != (n, n):
        raise ValueError("multivariate_normal.logpdf got incompatible shapes")
    L = _cholesky(cov)
    y = _solve_lower(L, x - mean)
    return (-1 / 2 * jnp.einsum("...i,...i->...", y, y) - n / 2 * jnp.log(2 * np.pi)
            - jnp.log(jnp.diagonal(L, axis1=-1, axis2=-2)).sum(-1))


def pdf(x, mean, cov):
    return lax.exp(logpdf(x, mean, cov))
