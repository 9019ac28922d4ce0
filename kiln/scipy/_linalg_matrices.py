"""Special-matrix constructors of ``jax.scipy.linalg``: ``pascal``, ``invpascal``,
``invhilbert``, ``helmert``, ``hadamard``, ``leslie``, ``fiedler_companion`` and
``convolution_matrix``, with JAX's dtypes, errors and floating-point formulas (binomial
coefficients through ``lgamma``, as JAX, so values are JAX's approximations, not SciPy's
exact integers).

Leading dimensions of ``leslie``/``fiedler_companion``/``convolution_matrix`` operands are
batch dimensions. Every function works under ``jit`` (sizes and kinds are static),
``vmap`` and ``grad`` (of the array operands).
"""
from __future__ import annotations

import math
import operator

import numpy as np

from kiln import dtypes, lax
from kiln.numpy._util import check_arraylike, promote_dtypes, promote_dtypes_inexact

__all__ = ["convolution_matrix", "fiedler_companion", "hadamard", "helmert", "invhilbert",
           "invpascal", "leslie", "pascal"]

_KINDS = ("symmetric", "lower", "upper")


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _binom(n, k):
    """``n choose k`` as ``exp(lgamma(n+1) - lgamma(n-k+1) - lgamma(k+1))`` (0 for k > n,
    where ``lgamma`` of a non-positive integer is inf)."""
    return lax.exp(lax.lgamma(n + 1.0) - lax.lgamma(n - k + 1.0) - lax.lgamma(k + 1.0))


def _check_kind(kind: str | None, article: str) -> str:
    kind = "symmetric" if kind is None else kind
    if kind not in _KINDS:
        raise ValueError(f"Expected kind to be {article}: {list(_KINDS)}; got {kind}")
    return kind


def pascal(n: int, kind: str | None = None):
    """The Pascal matrix of order ``n`` (float32; binomial coefficients computed in floating
    point, so large entries are approximate).

    Args:
      n: the size of the matrix.
      kind: ``'symmetric'`` (default), ``'lower'`` or ``'upper'``.

    Returns:
      A float32 array of shape ``(n, n)``.
    """
    kind = _check_kind(kind, "on of")
    jnp = _jnp()
    a = jnp.arange(n, dtype=np.float32)
    low = _binom(a[:, None], a[None, :])
    if kind == "lower":
        return low
    if kind == "upper":
        return low.T
    return jnp.dot(low, low.T)


def invpascal(n: int, kind: str | None = None):
    """The inverse of the Pascal matrix of order ``n`` (default float dtype; no
    ``exact=``).

    Args:
      n: the size of the matrix.
      kind: ``'symmetric'`` (default), ``'lower'`` or ``'upper'``.

    Returns:
      An array of shape ``(n, n)``.
    """
    kind = _check_kind(kind, "one of")
    jnp = _jnp()
    a = jnp.arange(n, dtype=dtypes.default_float_dtype())
    i, j = a[:, None], a[None, :]
    low_inv = ((-1.0) ** (i - j)) * _binom(i, j)
    if kind == "lower":
        return low_inv
    if kind == "upper":
        return low_inv.T
    return jnp.dot(low_inv.T, low_inv)


def invhilbert(n: int):
    """The inverse of the Hilbert matrix of order ``n`` in floating point (no ``exact=``).

    Args:
      n: the size of the matrix.

    Returns:
      An array of shape ``(n, n)`` of the default float dtype.
    """
    from kiln.scipy.special import comb
    jnp = _jnp()
    a = jnp.arange(n, dtype=dtypes.default_float_dtype())
    i, j = a[:, None], a[None, :]
    s = i + j
    return ((-1.0) ** s * (s + 1.0) * comb(n + i, n - j - 1) * comb(n + j, n - i - 1)
            * comb(s, i) ** 2)


def helmert(n: int, full: bool = False):
    """The Helmert matrix of order ``n``.

    Args:
      n: a positive integer.
      full: whether to include the first row ``1/sqrt(n)`` (shape ``(n, n)``); else the
        ``(n - 1, n)`` contrast block.

    Returns:
      An array of the default float dtype.
    """
    if n < 1:
        raise ValueError(f"n must be a positive integer; got {n}.")
    jnp = _jnp()
    i = jnp.arange(n - 1)[:, None]
    j = jnp.arange(n)[None, :]
    k = i + 1
    kf = k.astype(dtypes.default_float_dtype())
    denom = jnp.sqrt(kf * (kf + 1))
    h = jnp.where(j <= i, 1.0 / denom, jnp.where(j == k, -kf / denom, jnp.zeros_like(denom)))
    if full:
        first = jnp.full((1, n), 1.0 / jnp.sqrt(n), dtype=h.dtype)
        h = jnp.concatenate([first, h], axis=0)
    return h


def hadamard(n: int, dtype=int):
    """The ``n``-by-``n`` Hadamard matrix (Sylvester's construction).

    Args:
      n: a positive power of 2.
      dtype: the result dtype (default ``int``).

    Returns:
      An array of shape ``(n, n)``.
    """
    if n < 1 or not math.log2(n).is_integer():
        raise ValueError(f"n must be a positive power of 2; got {n}.")
    jnp = _jnp()
    h = jnp.ones((1, 1), dtype=dtype)
    for _ in range(int(math.log2(n))):
        h = jnp.block([[h, h], [h, -h]])
    return h


def leslie(f, s):
    """The Leslie matrix with first row ``f`` and first sub-diagonal ``s``.

    Args:
      f: fecundity coefficients, shape ``(..., N)`` with ``N >= 2``.
      s: survival coefficients, shape ``(..., N - 1)``.

    Returns:
      An array of shape ``(..., N, N)``.
    """
    check_arraylike("leslie", f, s)
    jnp = _jnp()
    f, s = jnp.atleast_1d(f), jnp.atleast_1d(s)
    if f.shape[-1] < 2:
        raise ValueError("The length of f along the last axis must be at least 2; "
                         f"got shape {f.shape}.")
    if s.shape[-1] != f.shape[-1] - 1:
        raise ValueError(
            "Incorrect lengths for f and s. The length of s along the last axis must be "
            f"one less than the length of f; got f shape {f.shape} and s shape {s.shape}.")

    def one(f1, s1):
        f1, s1 = promote_dtypes(f1, s1)
        return jnp.diag(s1, k=-1).at[0].set(f1)
    return jnp.vectorize(one, signature="(n),(m)->(n,n)")(f, s)


def fiedler_companion(a):
    """The Fiedler companion matrix of the polynomial with coefficients ``a`` (highest
    degree first): pentadiagonal, with the polynomial's roots as eigenvalues.

    Args:
      a: coefficients, shape ``(..., N)`` with ``N >= 1``.

    Returns:
      An inexact array of shape ``(..., N - 1, N - 1)``.
    """
    a, = promote_dtypes_inexact(a)
    jnp = _jnp()
    a = jnp.atleast_1d(a)
    if a.shape[-1] == 0:
        raise ValueError("fiedler_companion requires the last axis of 'a' to have nonzero "
                         f"length, but got an array of shape {a.shape}.")

    def one(v):
        n = v.shape[0] - 1
        if n == 0:
            return jnp.zeros((0, 0), dtype=v.dtype)
        v = v / v[0]
        if n == 1:
            return -v[1:].reshape(1, 1)
        c = jnp.zeros((n, n), dtype=v.dtype)
        c = c.at[np.arange(3, n, 2), np.arange(1, n - 2, 2)].set(1)
        c = c.at[np.arange(2, n, 2), np.arange(1, n - 1, 2)].set(-v[3::2])
        c = c.at[np.arange(0, n - 2, 2), np.arange(2, n, 2)].set(1)
        c = c.at[np.arange(0, n - 1, 2), np.arange(1, n, 2)].set(-v[2::2])
        c = c.at[0, 0].set(-v[1])
        return c.at[1, 0].set(1)
    return jnp.vectorize(one, signature="(n)->(m,m)")(a)


def convolution_matrix(a, n: int, mode: str = "full"):
    """The matrix ``A`` with ``A @ v == jnp.convolve(a, v, mode)`` for ``v`` of length
    ``n``.

    Args:
      a: the filter, shape ``(..., m)``.
      n: the length of the vectors it is applied to (a positive integer).
      mode: ``'full'`` (``m + n - 1`` rows), ``'same'`` (``max(m, n)``) or ``'valid'``
        (``max(m, n) - min(m, n) + 1``).

    Returns:
      An array of shape ``(..., rows, n)``.
    """
    from kiln.scipy.linalg import toeplitz
    n = operator.index(n)
    if n <= 0:
        raise ValueError(f"n must be a positive integer; got {n}.")
    check_arraylike("convolution_matrix", a)
    jnp = _jnp()
    a = jnp.asarray(a)
    if a.ndim == 0:
        raise ValueError("convolution_matrix: a must be at least 1-dimensional, got a scalar.")
    m = a.shape[-1]
    if m < 1:
        raise ValueError(f"len(a) must be at least 1; got shape {a.shape}.")
    if mode not in ("full", "valid", "same"):
        raise ValueError(f"mode must be one of 'full', 'valid', 'same'; got {mode!r}.")
    pad = [(0, 0)] * (a.ndim - 1) + [(0, n - 1)]
    az = jnp.pad(a, pad)
    raz = jnp.pad(jnp.flip(a, axis=-1), pad)
    if mode == "same":
        trim = min(n, m) - 1
        tb, te = trim // 2, trim - trim // 2
    elif mode == "valid":
        tb = te = min(n, m) - 1
    else:
        tb = te = 0
    length = m + n - 1
    col0 = lax.slice_in_dim(az, tb, length - te, axis=-1)
    row0 = lax.slice_in_dim(raz, length - n - tb, length - tb, axis=-1)
    return toeplitz(col0, row0)
