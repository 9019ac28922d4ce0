"""Polynomials as 1-D coefficient arrays, highest power first (NumPy's legacy ``poly*``
API): ``polyval``, ``polyadd``, ``polysub``, ``polymul``, ``polydiv``, ``polyder``,
``polyint``, ``poly``, ``roots`` and ``polyfit``.

``roots``/``poly`` of a matrix use ``linalg.eigvals`` and ``polyfit`` uses
``linalg.lstsq``; they are looked up in ``kiln.numpy.linalg`` when called.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util

__all__ = ["polyval", "polyadd", "polysub", "polymul", "polydiv", "polyder", "polyint",
           "poly", "roots", "polyfit"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _linalg():
    import kiln.numpy.linalg as linalg
    return linalg


def _len(x):
    return get_aval(x).shape[0]


def polyval(p, x, *, unroll=16):
    """``p[0] * x**(n-1) + ... + p[n-1]`` by Horner's rule (``p`` may have trailing batch
    axes that broadcast against ``x``).

    A jitted function, as in JAX: called eagerly it is still one compiled program, whose
    multiply-adds ``y * x + p[i]`` are contracted into fused multiply-adds as XLA's CPU
    code does (``docs/compatibility.md``, "FMA contraction"), so eager results have
    JAX's bits too."""
    _util.ensure_arraylike("polyval", p, x)
    if not _JITTED:
        from kiln.jitting import jit
        _JITTED.append(jit(_polyval, static_argnames=("unroll",)))
    return _JITTED[0](p, x, unroll=unroll)


_JITTED: list = []


def _polyval(p, x, *, unroll):
    jnp = _jnp()
    p, x = _util.ensure_arraylike("polyval", p, x)
    p, x = _util.promote_dtypes(p, x)
    shape = _util.broadcast_shapes(get_aval(p).shape[1:], get_aval(x).shape)
    y = jnp.zeros(shape, get_aval(x).dtype)
    if get_aval(p).shape[0] <= unroll:
        for i in range(get_aval(p).shape[0]):
            y = y * x + p[i]
        return y
    return lax.scan(lambda acc, c: (acc * x + c, None), y, p)[0]


def polyadd(a1, a2):
    """The sum of two polynomials."""
    a1, a2 = _util.ensure_arraylike("polyadd", a1, a2)
    a1, a2 = _util.promote_dtypes(a1, a2)
    if _len(a2) <= _len(a1):
        return a1.at[_len(a1) - _len(a2):].add(a2)
    return a2.at[_len(a2) - _len(a1):].add(a1)


def polysub(a1, a2):
    """The difference of two polynomials."""
    a1, a2 = _util.ensure_arraylike("polysub", a1, a2)
    a1, a2 = _util.promote_dtypes(a1, a2)
    return polyadd(a1, _jnp().negative(a2))


def polymul(a1, a2, *, trim_leading_zeros=False):
    """The product of two polynomials (a convolution)."""
    jnp = _jnp()
    a1, a2 = _util.ensure_arraylike("polymul", a1, a2)
    a1, a2 = _util.promote_dtypes_inexact(a1, a2)
    if trim_leading_zeros and (_len(a1) > 1 or _len(a2) > 1):
        a1, a2 = jnp.trim_zeros(a1, trim="f"), jnp.trim_zeros(a2, trim="f")
    if _len(a1) == 0:
        a1 = jnp.zeros((1,), get_aval(a2).dtype)
    if _len(a2) == 0:
        a2 = jnp.zeros((1,), get_aval(a1).dtype)
    return jnp.convolve(a1, a2, mode="full")


def polydiv(u, v, *, trim_leading_zeros=False):
    """Quotient and remainder of polynomial division ``u / v``."""
    jnp = _jnp()
    u, v = _util.ensure_arraylike("polydiv", u, v)
    u, v = _util.promote_dtypes_inexact(u, v)
    m, n = _len(u) - 1, _len(v) - 1
    scale = 1.0 / v[0]
    q = jnp.zeros((max(m - n + 1, 1),), get_aval(u).dtype)
    for k in range(m - n + 1):
        d = scale * u[k]
        q = q.at[k].set(d)
        u = u.at[k:k + n + 1].add(-d * v)
    if trim_leading_zeros:
        known = _util.concretize(u)
        if isinstance(known, Tracer):
            raise ConcretizationTypeError(u, "polydiv(..., trim_leading_zeros=True) needs "
                                             "concrete inputs.")
        tol = np.sqrt(np.finfo(get_aval(u).dtype).eps)
        val = np.asarray(known._value)
        nz = np.nonzero(np.abs(val) > tol)[0]
        u = u[int(nz[0]):] if nz.size else u[:0]
    return q, u


def polyder(p, m=1):
    """The ``m``-th derivative of a polynomial."""
    jnp = _jnp()
    p = _util.ensure_arraylike("polyder", p)
    m = _util.core_int(m, "'m' argument of jnp.polyder")
    (p,) = _util.promote_dtypes_inexact(p)
    if m < 0:
        raise ValueError("Order of derivative must be positive")
    if m == 0:
        return p
    dt = get_aval(p).dtype
    n = _len(p)
    # coefficient of x**k (k = n-1 ... m) is multiplied by k (k-1) ... (k-m+1)
    k = np.arange(n - 1, m - 1, -1)
    coeff = np.prod([k - j for j in range(m)], axis=0)
    return p[:n - m] * jnp.asarray(coeff, dtype=dt)


def polyint(p, m=1, k=None):
    """The ``m``-th antiderivative of a polynomial, with integration constants ``k``."""
    jnp = _jnp()
    m = _util.core_int(m, "'m' argument of jnp.polyint")
    k = 0 if k is None else k
    p, k = _util.ensure_arraylike("polyint", p, k)
    p, k = _util.promote_dtypes_inexact(p, k)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = jnp.atleast_1d(k)
    if _len(k) == 1:
        k = jnp.full((m,), k[0])
    if get_aval(k).shape != (m,):
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or m.")
    if m == 0:
        return p
    n = _len(p)
    # divisor of the coefficient at position i of the result (length n + m)
    grid = np.arange(n + m)[None, :] - np.arange(m)[:, None]
    coeff = np.prod(np.maximum(1, grid), axis=0)[::-1]
    dt = get_aval(p).dtype
    return jnp.true_divide(jnp.concatenate([p, k]), jnp.asarray(coeff, dtype=dt))


def poly(seq_of_zeros):
    """The coefficients of the monic polynomial with the given roots (or the characteristic
    polynomial of a square matrix)."""
    jnp = _jnp()
    z = _util.ensure_arraylike("poly", seq_of_zeros)
    (z,) = _util.promote_dtypes_inexact(z)
    z = jnp.atleast_1d(z)
    sh = get_aval(z).shape
    if len(sh) == 2 and sh[0] == sh[1] and sh[0] != 0:
        z = _linalg().eigvals(z)
    if get_aval(z).ndim != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    dt = get_aval(z).dtype
    if _len(z) == 0:
        return jnp.ones((), dt)
    a = jnp.ones((1,), dt)
    for i in range(_len(z)):
        a = jnp.convolve(a, jnp.stack([jnp.ones((), dt), -z[i]]), mode="full")
    return a


def _companion_roots(p):
    jnp = _jnp()
    n = _len(p)
    dt = get_aval(p).dtype
    if n < 2:
        return jnp.zeros((0,), dtypes.to_complex_dtype(dt))
    A = jnp.diag(jnp.ones((n - 2,), dt), -1)
    A = A.at[0, :].set(-p[1:] / p[0])
    return _linalg().eigvals(A)


def roots(p, *, strip_zeros=True):
    """The roots of a polynomial (eigenvalues of its companion matrix). Leading zeros are
    stripped (needs a concrete ``p``); with ``strip_zeros=False`` they give NaN roots."""
    jnp = _jnp()
    p = _util.ensure_arraylike("roots", p)
    (p,) = _util.promote_dtypes_inexact(p)
    p = jnp.atleast_1d(p)
    if get_aval(p).ndim != 1:
        raise ValueError("Input must be a rank-1 array.")
    n = _len(p)
    if n < 2:
        return jnp.zeros((0,), dtypes.canonicalize_dtype(dtypes.to_complex_dtype(
            get_aval(p).dtype)))
    lead = jnp.where(jnp.all(p == 0), n, jnp.argmax(p != 0))
    if strip_zeros:
        lead = _util.concretize(lead)
        if isinstance(lead, Tracer):
            raise ConcretizationTypeError(
                lead, "The error occurred in the jnp.roots() function. To use this within a "
                      "JIT-compiled context, pass strip_zeros=False, but be aware that leading "
                      "zeros will result in some returned roots being set to NaN.")
        return _companion_roots(p[int(lead):])
    p = jnp.where(n == lead, 1.0, p)
    r = _companion_roots(jnp.roll(p, -lead))
    # the zero roots produced by the rolled-in zeros move last and become NaN
    r = lax.sort((lax.convert_element_type(r == 0, np.int32), r), dimension=0,
                 num_keys=1)[1]
    return jnp.where(jnp.arange(_len(r)) < _len(r) - lead, r, complex(np.nan, np.nan))


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """Least-squares fit of a degree-``deg`` polynomial to ``(x, y)`` (``y`` may have a
    second axis of independent data sets); ``full`` also returns the lstsq diagnostics,
    ``cov`` the covariance of the coefficients."""
    jnp = _jnp()
    if w is None:
        x, y = _util.ensure_arraylike("polyfit", x, y)
    else:
        x, y, w = _util.ensure_arraylike("polyfit", x, y, w)
    deg = _util.core_int(deg, "deg must be int")
    order = deg + 1
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if get_aval(x).ndim != 1:
        raise TypeError("expected 1D vector for x")
    if get_aval(x).size == 0:
        raise TypeError("expected non-empty vector for x")
    if get_aval(y).ndim < 1 or get_aval(y).ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if _len(x) != _len(y):
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = _len(x) * float(jnp.finfo(get_aval(x).dtype).eps)
    rcond = _util.concretize(rcond)
    if isinstance(rcond, Tracer):
        raise ConcretizationTypeError(rcond, "rcond must be float")
    rcond = float(rcond)
    lhs = jnp.vander(x, order)
    rhs = y
    if w is not None:
        (w,) = _util.promote_dtypes_inexact(w)
        if get_aval(w).ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if _len(w) != _len(y):
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if get_aval(rhs).ndim == 2 else w)
    scale = jnp.sqrt(jnp.sum(lhs * lhs, axis=0))
    lhs = lhs / scale[None, :]
    c, resids, rank, s = _linalg().lstsq(lhs, rhs, rcond)
    c = (c.T / scale[None, :]).T if get_aval(c).ndim > 1 else c / scale
    if full:
        return c, resids, rank, s, jnp.asarray(rcond)
    if cov:
        vbase = _linalg().inv(jnp.dot(lhs.T, lhs))
        vbase = vbase / jnp.outer(scale, scale)
        if cov == "unscaled":
            fac = jnp.asarray(1.0)
        else:
            if _len(x) <= order:
                raise ValueError("the number of data points must exceed order to scale the "
                                 "covariance matrix")
            fac = resids / (_len(x) - order)
        if get_aval(y).ndim == 1:
            return c, vbase * jnp.atleast_1d(fac)[None]
        return c, vbase[:, :, None] * jnp.atleast_1d(fac)[None, None, :]
    return c
