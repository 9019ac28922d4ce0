"""``kiln.scipy.cluster.vq``, as ``jax.scipy.cluster.vq``: vector quantization."""
from __future__ import annotations

import kiln.numpy as jnp
from kiln.array import Array
from kiln.numpy._util import check_arraylike, promote_dtypes_inexact


def vq(obs, code_book, check_finite: bool = True) -> tuple[Array, Array]:
    """Assign each observation the index of its nearest code (Euclidean distance).

    kiln's version of :func:`scipy.cluster.vq.vq`, as JAX's.

    Args:
      obs: observations, shape ``(M, N)`` (or ``(M,)``: observations of length 1).
      code_book: codes, shape ``(K, N)`` (or ``(K,)``), the same rank as ``obs``.
      check_finite: unused (kept for SciPy's signature, as in JAX).

    Returns:
      ``(code, dist)``: for each observation the index ``0 <= i < K`` of its nearest
      code (the first on ties) and the distance to it, both of shape ``(M,)``.

    Raises:
      ValueError: when ``obs`` and ``code_book`` have different ranks, or a rank other
        than 1 or 2.
    """
    del check_finite
    check_arraylike("scipy.cluster.vq.vq", obs, code_book)
    obs, code_book = promote_dtypes_inexact(obs, code_book)
    if obs.ndim != code_book.ndim:
        raise ValueError("Observation and code_book should have the same rank")
    if obs.ndim == 1:
        obs, code_book = obs[:, None], code_book[:, None]
    if obs.ndim != 2:
        raise ValueError("ndim different than 1 or 2 are not supported")
    # every observation against every code: [M, K] distances (the norm of each
    # difference row, as JAX's per-observation vmap computes it)
    dist = jnp.linalg.norm(obs[:, None, :] - code_book[None, :, :], axis=-1)
    code = jnp.argmin(dist, axis=-1)
    return code, jnp.take_along_axis(dist, code[:, None], axis=-1)[:, 0]
