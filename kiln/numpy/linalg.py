"""``kiln.numpy.linalg`` (``jax.numpy.linalg``): linear algebra on (batches of) matrices.

Built from the ``kiln.lax.linalg`` primitives and ``kiln.numpy``. Functions whose
derivative is better written by hand than differentiated through a factorization have
``custom_jvp`` rules, as in JAX: ``solve`` (``x' = A^{-1}(b' - A' x)``, reusing the LU
factors), ``det`` (the adjugate, well defined for singular matrices), ``slogdet``
(``trace(A^{-1} A')``) and ``pinv``. Tangent computations inside those rules only use
primitives that are linear in the tangent, so reverse mode works through them.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import get_aval
from kiln.custom_derivatives import custom_jvp
from kiln.lax import linalg as lax_linalg
from kiln.numpy._util import canonicalize_axis, ensure_arraylike, promote_dtypes_inexact

__all__ = ["cholesky", "cond", "cross", "det", "diagonal", "eig", "eigh", "eigvals",
           "eigvalsh", "inv", "lstsq", "matmul", "matrix_norm", "matrix_power", "matrix_rank",
           "matrix_transpose", "multi_dot", "norm", "outer", "pinv", "qr", "slogdet", "solve",
           "svd", "svdvals", "tensordot", "tensorinv", "tensorsolve", "trace", "vecdot",
           "vector_norm"]


class _Jnp:
    """``kiln.numpy``, resolved on first use (this module is imported while it initializes)."""

    _mod = None

    def __getattr__(self, name):
        mod = _Jnp._mod
        if mod is None:
            import kiln.numpy as mod
            _Jnp._mod = mod
        return getattr(mod, name)


jnp = _Jnp()


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class EigResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class QRResult(NamedTuple):
    Q: object
    R: object


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


# ----------------------------------------------------------------------------------------------
# helpers


def _shape(x):
    return get_aval(x).shape


def _ndim(x):
    return len(get_aval(x).shape)


def _dtype(x):
    return get_aval(x).dtype


def _T(x):
    return jnp.swapaxes(x, -1, -2)


def _H(x):
    return jnp.conj(_T(x))


def _symmetrize(x):
    return (x + _H(x)) / 2


def _is_complex(x):
    return _dtype(x).kind == "c"


def _check_square(name, a):
    s = _shape(a)
    if len(s) < 2 or s[-1] != s[-2]:
        raise ValueError(f"Argument to {name} must have shape [..., n, n], got {s}")


def _lu_solve(lu, perm, b, trans=0):
    """Solve with packed LU factors; ``lu``, ``perm`` and the matrix ``b`` share batch dims.
    Only ``triangular_solve`` and gathers touch ``b``, so this is linear (and transposable)
    in ``b``."""
    if trans == 0:
        x = jnp.take_along_axis(b, perm[..., :, None], axis=-2)
        x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
        return lax_linalg.triangular_solve(lu, x, left_side=True, lower=False)
    cj = trans == 2
    x = lax_linalg.triangular_solve(lu, b, left_side=True, lower=False, transpose_a=True,
                                    conjugate_a=cj)
    x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True,
                                    transpose_a=True, conjugate_a=cj)
    n = _shape(perm)[-1]
    # the inverse permutation: inv[perm[i]] = i
    onehot = perm[..., :, None] == jnp.arange(n, dtype=perm.dtype)
    inv_perm = jnp.sum(jnp.where(onehot, jnp.arange(n, dtype=perm.dtype)[:, None], 0), axis=-2)
    return jnp.take_along_axis(x, inv_perm[..., :, None].astype(perm.dtype), axis=-2)


@custom_jvp
def _solve_matrix(a, b):
    lu, _, perm = lax_linalg.lu(a)
    return _lu_solve(lu, perm, b)


@_solve_matrix.defjvp
def _solve_matrix_jvp(primals, tangents):
    a, b = primals
    da, db = tangents
    lu, _, perm = lax_linalg.lu(a)
    x = _lu_solve(lu, perm, b)
    # A x = b  =>  A x' = b' - A' x
    return x, _lu_solve(lu, perm, db - jnp.matmul(da, x))


def _broadcast_batch(a, b, a_core, b_core):
    sa, sb = _shape(a), _shape(b)
    batch = np.broadcast_shapes(sa[:len(sa) - a_core], sb[:len(sb) - b_core])
    a = jnp.broadcast_to(a, tuple(batch) + sa[len(sa) - a_core:])
    b = jnp.broadcast_to(b, tuple(batch) + sb[len(sb) - b_core:])
    return a, b


# ----------------------------------------------------------------------------------------------
# factorizations


def cholesky(a, *, upper: bool = False, symmetrize_input: bool = True):
    """Cholesky factor of Hermitian positive-definite matrices (lower, or upper with
    ``upper=True``); NaNs where the matrix is not positive definite."""
    a = ensure_arraylike("jnp.linalg.cholesky", a)
    a, = promote_dtypes_inexact(a)
    L = lax_linalg.cholesky(a, symmetrize_input=symmetrize_input)
    return _H(L) if upper else L


def _hermitian_svd(a, compute_uv, subset_by_index):
    v, w = lax_linalg.eigh(a, subset_by_index=subset_by_index)
    s = jnp.abs(w)
    n = _shape(s)[-1]
    # The stable ascending order of |w|, reversed (as JAX's sort + rev): rank by comparisons.
    si, sj = s[..., :, None], s[..., None, :]
    idx = jnp.arange(n)
    pos = jnp.sum(sj < si, axis=-1) + jnp.sum((sj == si) & (idx[None, :] < idx[:, None]),
                                              axis=-1)
    dest = n - 1 - pos                                   # where element i goes
    order = jnp.sum(jnp.where(dest[..., :, None] == idx, idx[:, None], 0), axis=-2)
    order = order.astype(np.int32)
    s_sorted = jnp.take_along_axis(s, order, axis=-1)
    if not compute_uv:
        return s_sorted
    sign = jnp.take_along_axis(jnp.sign(w), order, axis=-1)
    u = jnp.take_along_axis(v, order[..., None, :], axis=-1)
    vh = _H(u * sign[..., None, :].astype(_dtype(u)))
    return SVDResult(u, s_sorted, vh)


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False,
        subset_by_index=None):
    """Singular value decomposition ``a = U diag(S) Vh``: ``SVDResult(U, S, Vh)``, or ``S``
    alone when ``compute_uv=False``."""
    a = ensure_arraylike("jnp.linalg.svd", a)
    a, = promote_dtypes_inexact(a)
    if hermitian:
        return _hermitian_svd(a, compute_uv, subset_by_index)
    if compute_uv:
        u, s, vh = lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=True,
                                  subset_by_index=subset_by_index)
        return SVDResult(u, s, vh)
    return lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=False,
                          subset_by_index=subset_by_index)


def svdvals(x, /):
    """Singular values, descending."""
    x = ensure_arraylike("jnp.linalg.svdvals", x)
    return svd(x, compute_uv=False, hermitian=False)


def qr(a, mode: str = "reduced"):
    """QR decomposition. ``mode``: ``'reduced'`` (default), ``'complete'``, ``'r'`` (only R)
    or ``'raw'`` (LAPACK's Householder form ``(h, tau)``)."""
    a = ensure_arraylike("jnp.linalg.qr", a)
    a, = promote_dtypes_inexact(a)
    if mode == "raw":
        h, taus = lax_linalg.geqrf(a)
        return QRResult(_T(h), taus)
    if mode in ("reduced", "r", "full"):
        full_matrices = False
    elif mode == "complete":
        full_matrices = True
    else:
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    q, r = lax_linalg.qr(a, pivoting=False, full_matrices=full_matrices)
    if mode == "r":
        return r
    return QRResult(q, r)


def eigh(a, UPLO: str | None = None, symmetrize_input: bool = True):
    """Eigendecomposition of Hermitian matrices: ``EighResult(eigenvalues, eigenvectors)``,
    eigenvalues ascending."""
    a = ensure_arraylike("jnp.linalg.eigh", a)
    if UPLO is None or UPLO == "L":
        lower = True
    elif UPLO == "U":
        lower = False
    else:
        raise ValueError(f"UPLO must be one of None, 'L', or 'U', got {UPLO}")
    a, = promote_dtypes_inexact(a)
    v, w = lax_linalg.eigh(a, lower=lower, symmetrize_input=symmetrize_input)
    return EighResult(w, v)


def eigvalsh(a, UPLO: str | None = "L", *, symmetrize_input: bool = True):
    """Eigenvalues of Hermitian matrices, ascending."""
    a = ensure_arraylike("jnp.linalg.eigvalsh", a)
    a, = promote_dtypes_inexact(a)
    w, _ = eigh(a, UPLO, symmetrize_input=symmetrize_input)
    return w


def eig(a):
    """Eigenvalues and right eigenvectors of general square matrices (complex results).
    Only the eigenvalues are differentiable."""
    a = ensure_arraylike("jnp.linalg.eig", a)
    a, = promote_dtypes_inexact(a)
    w, v = lax_linalg.eig(a, compute_left_eigenvectors=False)
    return EigResult(w, v)


def eigvals(a):
    """Eigenvalues of general square matrices (complex)."""
    a = ensure_arraylike("jnp.linalg.eigvals", a)
    a, = promote_dtypes_inexact(a)
    return lax_linalg.eig(a, compute_left_eigenvectors=False,
                          compute_right_eigenvectors=False)[0]


# ----------------------------------------------------------------------------------------------
# solves and inverses


def solve(a, b):
    """Solve ``a x = b``. ``b`` is a vector ``(m,)`` or (a batch of) matrices ``(..., m, k)``;
    batch dimensions broadcast."""
    a, b = ensure_arraylike("jnp.linalg.solve", a, b)
    a, b = promote_dtypes_inexact(a, b)
    sa, sb = _shape(a), _shape(b)
    if len(sa) < 2:
        raise ValueError(f"left hand array must be at least two dimensional; got a.shape={sa}")
    if len(sb) > 1 and len(sa) == len(sb) + 1 and sa[-1] == sb[-1] and sa[-1] != sb[-2]:
        raise ValueError(
            f"Invalid shapes for solve: {sa}, {sb}. Prior to JAX v0.5.0, this would have been "
            "treated as a batched 1-dimensional solve. To recover this behavior, use "
            "solve(a, b[..., None]).squeeze(-1).")
    _check_square("solve", a)
    vec = len(sb) == 1
    if vec:
        b = b[:, None]
    if _shape(b)[-2] != sa[-1]:
        raise ValueError(f"solve: a and b have incompatible shapes {sa} and {sb}")
    a, b = _broadcast_batch(a, b, 2, 2)
    x = _solve_matrix(a, b)
    return x[..., 0] if vec else x


def inv(a):
    """Inverse of square matrices (``solve(a, I)``)."""
    arr = ensure_arraylike("jnp.linalg.inv", a)
    s = _shape(arr)
    if len(s) < 2 or s[-1] != s[-2]:
        raise ValueError(f"Argument to inv must have shape [..., n, n], got {s}.")
    arr, = promote_dtypes_inexact(arr)
    eye = jnp.broadcast_to(jnp.eye(s[-1], dtype=_dtype(arr)), s)
    return solve(arr, eye)


def tensorinv(a, ind: int = 2):
    """Inverse of a tensor seen as a matrix: the first ``ind`` axes against the rest."""
    arr = ensure_arraylike("tensorinv", a)
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"ind must be a positive integer; got ind={ind}")
    s = _shape(arr)
    contracting, batch = s[:ind], s[ind:]
    flat = (math.prod(contracting), math.prod(batch))
    if flat[0] != flat[1]:
        raise ValueError("tensorinv is only possible when the product of the first `ind` "
                         "dimensions equals that of the remaining dimensions. got "
                         f"arr.shape={s} with ind={ind}.")
    return jnp.reshape(inv(jnp.reshape(arr, flat)), (*batch, *contracting))


def tensorsolve(a, b, axes: tuple[int, ...] | None = None):
    """Solve the tensor equation ``tensordot(a, x, x.ndim) == b`` for ``x``."""
    a_arr, b_arr = ensure_arraylike("tensorsolve", a, b)
    if axes is not None:
        nd = _ndim(a_arr)
        # each axis of ``axes`` moved to the end, in order (NumPy's)
        a_arr = jnp.moveaxis(a_arr, tuple(axes), tuple(range(nd - len(axes), nd)))
    sa, sb = _shape(a_arr), _shape(b_arr)
    out_shape = sa[len(sb):]
    if sa[:len(sb)] != sb:
        raise ValueError("After moving axes to end, leading shape of a must match shape of b. "
                         f"got a.shape={sa}, b.shape={sb}")
    bsize = math.prod(sb)
    if bsize != math.prod(out_shape):
        raise ValueError("Input arrays must have prod(a.shape[:b.ndim]) == "
                         f"prod(a.shape[b.ndim:]); got a.shape={sa}, b.ndim={len(sb)}.")
    a_arr = jnp.reshape(a_arr, (bsize, math.prod(out_shape)))
    return jnp.reshape(solve(a_arr, jnp.ravel(b_arr)), out_shape)


def _lstsq(a, b, rcond, *, numpy_resid=False):
    a, b = promote_dtypes_inexact(a, b)
    sa, sb = _shape(a), _shape(b)
    if sa[0] != sb[0]:
        raise ValueError("Leading dimensions of input arrays must match")
    b_orig_ndim = len(sb)
    if b_orig_ndim == 1:
        b = b[:, None]
    if len(sa) != 2:
        raise TypeError(f"{len(sa)}-dimensional array given. Array must be two-dimensional")
    if _ndim(b) != 2:
        raise TypeError(f"{_ndim(b)}-dimensional array given. Array must be one or "
                        "two-dimensional")
    m, n = sa
    dtype = _dtype(a)
    if m * n == 0:
        s = jnp.empty(0, dtype=dtype)
        rank = jnp.array(0, dtype=int)
        x = jnp.zeros((n, *_shape(b)[1:]), dtype=dtype)
    else:
        eps = float(dtypes.finfo(dtype).eps)
        if rcond is None:
            rcond = eps * max(n, m)
        else:
            rcond = jnp.where(jnp.asarray(rcond) < 0, eps, rcond)
        u, s, vt = svd(a, full_matrices=False)
        mask = (s > 0) & (s >= jnp.asarray(rcond, dtype=_dtype(s)) * s[0])
        rank = jnp.sum(mask)
        safe_s = jnp.where(mask, s, 1).astype(dtype)
        s_inv = jnp.where(mask, 1 / safe_s, 0)[:, None]
        uTb = jnp.matmul(_H(u), b)
        x = jnp.matmul(_H(vt), s_inv * uTb)
    if numpy_resid and (int(rank) < n or m <= n):
        resid = jnp.asarray([])
    else:
        b_est = jnp.matmul(a, x)
        resid = norm(b - b_est, axis=0) ** 2
    if b_orig_ndim == 1:
        x = jnp.ravel(x)
    return x, resid, rank, s


def lstsq(a, b, rcond: float | None = None, *, numpy_resid: bool = False):
    """Least-squares solution of ``a x = b``: ``(x, residuals, rank, singular values)`` via the
    SVD. With ``numpy_resid=True`` the residuals follow NumPy (empty when rank-deficient or
    ``m <= n``; not traceable)."""
    a, b = ensure_arraylike("jnp.linalg.lstsq", a, b)
    return _lstsq(a, b, rcond, numpy_resid=numpy_resid)


def _pinv_impl(a, rtol, hermitian):
    arr, = promote_dtypes_inexact(a)
    s_ = _shape(arr)
    m, n = s_[-2:]
    if m == 0 or n == 0:
        return jnp.empty(s_[:-2] + (n, m), _dtype(arr))
    arr = jnp.conj(arr)
    if rtol is None:
        rtol = 10.0 * max(m, n) * np.asarray(dtypes.finfo(_dtype(arr)).eps)
    rtol = jnp.asarray(rtol)
    u, s, vh = svd(arr, full_matrices=False, hermitian=hermitian)
    rtol = jnp.expand_dims(rtol[..., None], tuple(range(_ndim(s) - _ndim(rtol) - 1)))
    cutoff = rtol * s[..., 0:1]
    s = jnp.where(s > cutoff, s, np.inf).astype(_dtype(u))
    res = jnp.matmul(_T(vh), jnp.divide(_T(u), s[..., None]))
    return lax.convert_element_type(res, _dtype(arr))


def _pinv(a, rtol, hermitian):
    return _pinv_impl(a, rtol, hermitian)


_pinv = custom_jvp(_pinv, nondiff_argnums=(1, 2))


@_pinv.defjvp
def _pinv_jvp(rtol, hermitian, primals, tangents):
    # Golub & Pereyra, "The differentiation of pseudo-inverses ..." (1973), Theorem 4.3.
    a, = primals
    a_dot, = tangents
    p = _pinv_impl(a, rtol, hermitian)
    a, a_dot = promote_dtypes_inexact(a, a_dot)
    if hermitian:
        a = _symmetrize(a)
        a_dot = _symmetrize(a_dot)
    m, n = _shape(a)[-2:]
    mm = jnp.matmul
    if m >= n:
        s = mm(mm(p, _H(p)), _H(a_dot))
        t = mm(mm(_H(a_dot), _H(p)), p)
        p_dot = -mm(mm(p, a_dot), p) + s - mm(mm(s, a), p) + t - mm(mm(p, a), t)
    else:
        s = mm(p, mm(_H(p), _H(a_dot)))
        t = mm(_H(a_dot), mm(_H(p), p))
        p_dot = -mm(p, mm(a_dot, p)) + s - mm(s, mm(a, p)) + t - mm(p, mm(a, t))
    return p, p_dot


def pinv(a, rtol=None, hermitian: bool = False, *, rcond=None):
    """Moore-Penrose pseudo-inverse via the SVD (singular values below ``rtol * s_max`` are
    dropped)."""
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: only one of rtol and rcond may be specified.")
        rtol = rcond
    a = ensure_arraylike("jnp.linalg.pinv", a)
    return _pinv(a, rtol, bool(hermitian))


def matrix_power(a, n: int):
    """``a`` raised to the integer power ``n`` (by repeated squaring; ``inv`` for ``n < 0``)."""
    arr = ensure_arraylike("jnp.linalg.matrix_power", a)
    s = _shape(arr)
    if len(s) < 2:
        raise TypeError(f"{len(s)}-dimensional array given. Array must be at least "
                        "two-dimensional")
    if s[-2] != s[-1]:
        raise TypeError("Last 2 dimensions of the array must be square")
    try:
        n = operator.index(n)
    except TypeError as err:
        raise TypeError(f"exponent must be an integer, got {n}") from err
    if n == 0:
        return jnp.broadcast_to(jnp.eye(s[-2], dtype=_dtype(arr)), s)
    if n < 0:
        arr = inv(arr)
        n = -n
    if n == 1:
        return arr
    if n == 2:
        return jnp.matmul(arr, arr)
    if n == 3:
        return jnp.matmul(jnp.matmul(arr, arr), arr)
    z = result = None
    while n > 0:
        z = arr if z is None else jnp.matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else jnp.matmul(result, z)
    return result


def matrix_rank(M, rtol=None, *, hermitian: bool = False, tol=None):
    """Number of singular values above ``rtol * s_max`` (default
    ``max(m, n) * eps * s_max``)."""
    M = ensure_arraylike("jnp.linalg.matrix_rank", M)
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
        rtol = tol
    M, = promote_dtypes_inexact(M)
    if _ndim(M) < 2:
        return jnp.any(M != 0).astype(np.int32)
    S = svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian)
    if rtol is None:
        eps = dtypes.finfo(_dtype(S)).eps
        rtol = jnp.max(S, axis=-1) * np.asarray(max(_shape(M)[-2:]) * eps, _dtype(S))
    rtol = jnp.asarray(rtol)
    rtol = jnp.expand_dims(rtol, _ndim(rtol))
    return jnp.sum(S > rtol, axis=-1)


# ----------------------------------------------------------------------------------------------
# determinants


def _slogdet_lu_impl(a):
    dtype = _dtype(a)
    n = _shape(a)[-1]
    lu, pivot, _ = lax_linalg.lu(a)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    is_zero = jnp.any(diag == jnp.array(0, dtype=dtype), axis=-1)
    # iota at the pivots' rank: no rank promotion (jax_numpy_rank_promotion='raise')
    iota = jnp.reshape(jnp.arange(n, dtype=pivot.dtype), (1,) * (pivot.ndim - 1) + (n,))
    parity = jnp.count_nonzero(pivot != iota, axis=-1)
    if _is_complex(a):
        sign = jnp.prod(diag / jnp.abs(diag).astype(dtype), axis=-1)
    else:
        sign = jnp.array(1, dtype=dtype)
        parity = parity + jnp.count_nonzero(diag < 0, axis=-1)
    sign = jnp.where(is_zero, jnp.array(0, dtype=dtype),
                     sign * jnp.array(-2 * (parity % 2) + 1, dtype=dtype))
    logdet = jnp.where(is_zero, jnp.array(-np.inf, dtype=dtype),
                       jnp.sum(jnp.log(jnp.abs(diag)).astype(dtype), axis=-1))
    return sign, jnp.real(logdet)


def _slogdet_qr_impl(a):
    if _is_complex(a):
        raise NotImplementedError("slogdet method='qr' not implemented for complex inputs")
    n = _shape(a)[-1]
    h, taus = lax_linalg.geqrf(a)
    diag = jnp.diagonal(h, axis1=-2, axis2=-1)
    log_abs_det = jnp.sum(jnp.log(jnp.abs(diag)), axis=-1)
    sign_diag = jnp.prod(jnp.sign(diag), axis=-1)
    # each Householder reflector with tau != 0 has determinant -1
    sign_taus = jnp.prod(jnp.where(taus[..., :n - 1] != 0, -1, 1), axis=-1)
    return sign_diag * sign_taus.astype(_dtype(sign_diag)), log_abs_det


def _solve_same_batch(a, b):
    lu, _, perm = lax_linalg.lu(a)
    return _lu_solve(lu, perm, b)


def _slogdet_jvp_rule(impl):
    def jvp(primals, tangents):
        x, = primals
        g, = tangents
        sign, ans = impl(x)
        # d log|det A| = Re trace(A^{-1} A'); for complex A, d sign = i Im(trace) sign.
        ans_dot = jnp.trace(_solve_same_batch(x, g), axis1=-1, axis2=-2)
        if _is_complex(x):
            sign_dot = (ans_dot - jnp.real(ans_dot).astype(_dtype(ans_dot))) * sign
            ans_dot = jnp.real(ans_dot)
        else:
            sign_dot = jnp.zeros_like(sign)
        return (sign, ans), (sign_dot, ans_dot)
    return jvp


_slogdet_lu = custom_jvp(lambda a: _slogdet_lu_impl(a))
_slogdet_lu.defjvp(_slogdet_jvp_rule(_slogdet_lu_impl))
_slogdet_qr = custom_jvp(lambda a: _slogdet_qr_impl(a))
_slogdet_qr.defjvp(_slogdet_jvp_rule(_slogdet_qr_impl))


def slogdet(a, *, method: str | None = None):
    """Sign and natural log of the absolute value of the determinant: ``SlogdetResult``.
    ``method``: ``'lu'`` (default) or ``'qr'``.

    Compiled as one program, as JAX's (a jitted function): called eagerly, the log of
    the pivots is summed in the compiled reduction's order, as XLA's, not NumPy's
    pairwise order."""
    return _slogdet_jit(a, method=method)


def _slogdet(a, *, method: str | None = None):
    a = ensure_arraylike("jnp.linalg.slogdet", a)
    a, = promote_dtypes_inexact(a)
    s = _shape(a)
    if len(s) < 2 or s[-1] != s[-2]:
        raise ValueError(f"Argument to slogdet() must have shape [..., n, n], got {s}")
    if method is None or method == "lu":
        return SlogdetResult(*_slogdet_lu(a))
    if method == "qr":
        return SlogdetResult(*_slogdet_qr(a))
    raise ValueError(f"Unknown slogdet method '{method}'. Supported methods are 'lu' (`None`), "
                     "and 'qr'.")


def _slogdet_jit(a, *, method: str | None = None):
    global _slogdet_compiled
    if _slogdet_compiled is None:
        from kiln.jitting import jit
        _slogdet_compiled = jit(_slogdet, static_argnames=("method",))
    return _slogdet_compiled(a, method=method)


_slogdet_compiled = None


def _cofactor_solve(a, b):
    """``(det(a), adj(a) @ b)`` for square ``a`` and ``b`` of equal shapes, well defined when
    ``a`` is singular.

    With ``P a = L U``: ``det(a) a^{-1} b = det(a) U^{-1} L^{-1} P b``. Replacing the last
    pivot ``u_nn`` by ``1 / (sign * prod_{i<n} u_ii)`` and scaling all but the last row of
    ``L^{-1} P b`` by ``det(a)`` gives the same product without dividing by ``u_nn``, so a
    rank ``n-1`` matrix gets its (rank one) adjugate. If the modified ``U`` is still singular
    the rank is below ``n-1`` and the adjugate is zero.
    """
    n = _shape(a)[-1]
    if n == 1:
        return a[..., 0, 0], b
    lu, pivots, perm = lax_linalg.lu(a)
    dtype = _dtype(a)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    iota = jnp.reshape(jnp.arange(n, dtype=pivots.dtype), (1,) * (pivots.ndim - 1) + (n,))
    parity = jnp.count_nonzero(pivots != iota, axis=-1)
    sign = jnp.asarray(-2 * (parity % 2) + 1, dtype=dtype)
    partial_det = jnp.cumprod(diag, axis=-1) * sign[..., None]
    lu = lu.at[..., -1, -1].set(1.0 / partial_det[..., -2])
    ones = jnp.ones(_shape(b)[:-1], dtype)
    d = lax_linalg.triangular_solve(lu, ones, left_side=True, lower=False)
    d = jnp.any(jnp.isnan(d) | jnp.isinf(d), axis=-1)
    d = d[..., None, None]
    x = jnp.where(d, jnp.zeros_like(b), b)
    x = jnp.take_along_axis(x, perm[..., :, None], axis=-2)
    x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
    x = jnp.concatenate((x[..., :-1, :] * partial_det[..., -1, None, None], x[..., -1:, :]),
                        axis=-2)
    x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=False)
    x = jnp.where(d, jnp.zeros_like(x), x)
    return partial_det[..., -1], x


def _det_2x2(a):
    return a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]


def _det_3x3(a):
    return (a[..., 0, 0] * a[..., 1, 1] * a[..., 2, 2] +
            a[..., 0, 1] * a[..., 1, 2] * a[..., 2, 0] +
            a[..., 0, 2] * a[..., 1, 0] * a[..., 2, 1] -
            a[..., 0, 2] * a[..., 1, 1] * a[..., 2, 0] -
            a[..., 0, 0] * a[..., 1, 2] * a[..., 2, 1] -
            a[..., 0, 1] * a[..., 1, 0] * a[..., 2, 2])


@custom_jvp
def _det(a):
    sign, logdet = slogdet(a)
    return sign * jnp.exp(logdet).astype(_dtype(sign))


@_det.defjvp
def _det_jvp(primals, tangents):
    x, = primals
    g, = tangents
    y, z = _cofactor_solve(x, g)      # d det(A) = trace(adj(A) A')
    return y, jnp.trace(z, axis1=-1, axis2=-2)


def det(a):
    """Determinant of square matrices (closed forms for 2x2 and 3x3, LU otherwise)."""
    a = ensure_arraylike("jnp.linalg.det", a)
    a, = promote_dtypes_inexact(a)
    s = _shape(a)
    if len(s) >= 2 and s[-1] == 2 and s[-2] == 2:
        return _det_2x2(a)
    if len(s) >= 2 and s[-1] == 3 and s[-2] == 3:
        return _det_3x3(a)
    if len(s) >= 2 and s[-1] == s[-2]:
        return _det(a)
    raise ValueError(f"Argument to _det() must have shape [..., n, n], got {s}")


# ----------------------------------------------------------------------------------------------
# norms


def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord=2):
    """Vector norm over ``axis`` (all axes by default): ``ord`` in ``{2, 1, inf, -inf, 0}`` or
    any other number (``sum(|x|^ord)^(1/ord)``)."""
    x = ensure_arraylike("jnp.linalg.vector_norm", x)
    if ord is None or (not isinstance(ord, str) and ord == 2):
        return jnp.sqrt(jnp.sum(jnp.real(x * jnp.conj(x)), axis=axis, keepdims=keepdims))
    if isinstance(ord, str):
        msg = f"Invalid order '{ord}' for vector norm."
        if ord == "inf":
            msg += "Use 'jax.numpy.inf' instead."
        if ord == "-inf":
            msg += "Use '-jax.numpy.inf' instead."
        raise ValueError(msg)
    if ord == np.inf:
        return _amax0(jnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return jnp.min(jnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        return jnp.sum(x != 0, dtype=dtypes.finfo(_real_inexact(_dtype(x))).dtype, axis=axis,
                       keepdims=keepdims)
    if ord == 1:
        return jnp.sum(jnp.abs(x), axis=axis, keepdims=keepdims)
    abs_x = jnp.abs(x)
    dt = _dtype(abs_x)
    out = jnp.sum(abs_x ** jnp.asarray(ord, dt), axis=axis, keepdims=keepdims)
    return jnp.power(out, jnp.asarray(1.0 / ord, dt))


def _real_inexact(dt):
    dt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(dt))
    if dt.kind == "c":
        return np.dtype(np.float64) if dt == np.complex128 else np.dtype(np.float32)
    return dt


def _amax0(x, axis, keepdims):
    """``max`` with initial 0 (a norm of nothing is 0)."""
    shape = _shape(x)
    axes = range(len(shape)) if axis is None else \
        (axis if isinstance(axis, tuple) else (axis,))
    if any(shape[canonicalize_axis(ax, len(shape))] == 0 for ax in axes):
        return jnp.sum(jnp.zeros_like(x), axis=axis, keepdims=keepdims)
    return jnp.max(x, axis=axis, keepdims=keepdims, initial=0)


def norm(x, ord=None, axis=None, keepdims: bool = False):
    """Vector or matrix norm (NumPy's ``ord`` conventions; ``axis`` one axis for vector norms,
    two for matrix norms)."""
    x = ensure_arraylike("jnp.linalg.norm", x)
    x, = promote_dtypes_inexact(x)
    ndim = _ndim(x)
    if axis is None:
        if ord is None:
            return jnp.sqrt(jnp.sum(jnp.real(x * jnp.conj(x)), keepdims=keepdims))
        axis = tuple(range(ndim))
    elif isinstance(axis, tuple):
        axis = tuple(canonicalize_axis(a, ndim) for a in axis)
    else:
        axis = (canonicalize_axis(axis, ndim),)
    if len(axis) == 1:
        return vector_norm(x, ord=2 if ord is None else ord, axis=axis, keepdims=keepdims)
    if len(axis) != 2:
        raise ValueError(f"Improper number of axes for norm: axis={axis}. Pass one axis to "
                         "compute a vector-norm, or two axes to compute a matrix-norm.")
    row_axis, col_axis = axis
    if ord is None or ord in ("f", "fro"):
        return jnp.sqrt(jnp.sum(jnp.real(x * jnp.conj(x)), axis=axis, keepdims=keepdims))
    if isinstance(ord, str) and ord != "nuc":
        raise ValueError(f"Invalid order '{ord}' for matrix norm.")
    if ord == 1 or ord == -1:
        if not keepdims and col_axis > row_axis:
            col_axis -= 1
        sums = jnp.sum(jnp.abs(x), axis=row_axis, keepdims=keepdims)
        if ord == 1:
            return _amax0(sums, col_axis, keepdims)
        return jnp.min(sums, axis=col_axis, keepdims=keepdims)
    if ord == np.inf or ord == -np.inf:
        if not keepdims and row_axis > col_axis:
            row_axis -= 1
        sums = jnp.sum(jnp.abs(x), axis=col_axis, keepdims=keepdims)
        if ord == np.inf:
            return _amax0(sums, row_axis, keepdims)
        return jnp.min(sums, axis=row_axis, keepdims=keepdims)
    if ord in ("nuc", 2, -2):
        x = jnp.moveaxis(x, axis, (-2, -1))
        s = svd(x, compute_uv=False)
        if ord == 2:
            y = _amax0(s, -1, False)
        elif ord == -2:
            y = jnp.min(s, axis=-1)
        else:
            y = jnp.sum(s, axis=-1)
        if keepdims:
            y = jnp.expand_dims(y, axis)
        return y
    raise ValueError(f"Invalid order '{ord}' for matrix norm.")


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro"):
    """Norm of the matrices in the last two axes."""
    x = ensure_arraylike("jnp.linalg.matrix_norm", x)
    return norm(x, ord=ord, keepdims=keepdims, axis=(-2, -1))


def cond(x, p=None):
    """Condition number ``norm(x, p) * norm(inv(x), p)`` (ratio of extreme singular values
    for ``p`` in ``None, 2, -2``)."""
    arr = ensure_arraylike("cond", x)
    s_ = _shape(arr)
    if len(s_) < 2:
        raise ValueError(f"jnp.linalg.cond: input array must be at least 2D; got "
                         f"x.shape={s_}")
    if s_[-1] == 0 or s_[-2] == 0:
        raise ValueError(f"jnp.linalg.cond: input array must not be empty; got x.shape={s_}")
    if p is None or p == 2:
        s = svdvals(arr)
        return s[..., 0] / s[..., -1]
    if p == -2:
        s = svdvals(arr)
        r = s[..., -1] / s[..., 0]
    else:
        if s_[-2] != s_[-1]:
            raise ValueError(f"jnp.linalg.cond: for p={p}, array must be square; got "
                             f"x.shape={s_}")
        r = norm(arr, ord=p, axis=(-2, -1)) * norm(inv(arr), ord=p, axis=(-2, -1))
    nan_in = jnp.any(jnp.isnan(arr), axis=(-2, -1))
    return jnp.where(jnp.isnan(r) & ~nan_in, np.inf, r)


# ----------------------------------------------------------------------------------------------
# products and array-API helpers


def multi_dot(arrays: Sequence, *, precision=None):
    """Product of a chain of matrices (the first/last may be vectors), in the cheapest order
    (the classic matrix-chain dynamic program)."""
    arrs = [ensure_arraylike("jnp.linalg.multi_dot", a) for a in arrays]
    if len(arrs) < 2:
        raise ValueError(f"multi_dot requires at least two arrays; got "
                         f"len(arrays)={len(arrs)}")
    nds = [_ndim(a) for a in arrs]
    if not (nds[0] in (1, 2) and nds[-1] in (1, 2) and all(d == 2 for d in nds[1:-1])):
        raise ValueError("multi_dot: input arrays must all be two-dimensional, except for the "
                         "first and last array which may be 1 or 2 dimensional. Got array "
                         f"shapes {[_shape(a) for a in arrs]}")
    if any(_shape(a)[-1] != _shape(b)[0] for a, b in zip(arrs[:-1], arrs[1:])):
        raise ValueError("multi_dot: last dimension of each array must match first dimension "
                         f"of following array. Got array shapes {[_shape(a) for a in arrs]}")
    first_vec, last_vec = nds[0] == 1, nds[-1] == 1
    if first_vec:
        arrs[0] = arrs[0][None, :]
    if last_vec:
        arrs[-1] = arrs[-1][:, None]
    dims = [_shape(arrs[0])[0]] + [_shape(a)[1] for a in arrs]
    k = len(arrs)
    cost = [[0] * k for _ in range(k)]
    split = [[0] * k for _ in range(k)]
    for length in range(1, k):
        for i in range(k - length):
            j = i + length
            cost[i][j] = None
            for s in range(i, j):
                c = cost[i][s] + cost[s + 1][j] + dims[i] * dims[s + 1] * dims[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, s

    def chain(i, j):
        if i == j:
            return arrs[i]
        s = split[i][j]
        return jnp.matmul(chain(i, s), chain(s + 1, j), precision=precision)
    out = chain(0, k - 1)
    if first_vec:
        out = out[0]
    if last_vec:
        out = out[..., 0]
    return out


def matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
    """Matrix product (``jnp.matmul``)."""
    x1, x2 = ensure_arraylike("jnp.linalg.matmul", x1, x2)
    return jnp.matmul(x1, x2, precision=precision,
                      preferred_element_type=preferred_element_type)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None,
              out_sharding=None):
    """Tensor contraction (``jnp.tensordot``)."""
    x1, x2 = ensure_arraylike("jnp.linalg.tensordot", x1, x2)
    return jnp.tensordot(x1, x2, axes=axes, precision=precision,
                         preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis: int = -1, precision=None, preferred_element_type=None):
    """Conjugated dot product along ``axis``."""
    x1, x2 = ensure_arraylike("jnp.linalg.vecdot", x1, x2)
    return jnp.vecdot(x1, x2, axis=axis, precision=precision,
                      preferred_element_type=preferred_element_type)


def outer(x1, x2, /):
    """Outer product of two 1-D arrays."""
    x1, x2 = ensure_arraylike("jnp.linalg.outer", x1, x2)
    if _ndim(x1) != 1 or _ndim(x2) != 1:
        raise ValueError(f"Input arrays must be one-dimensional, but they are "
                         f"x1.ndim={_ndim(x1)} x2.ndim={_ndim(x2)}")
    return x1[:, None] * x2[None, :]


def cross(x1, x2, /, *, axis=-1):
    """Cross product of 3-vectors along ``axis``."""
    x1, x2 = ensure_arraylike("jnp.linalg.cross", x1, x2)
    if _shape(x1)[axis] != 3 or _shape(x2)[axis] != 3:
        raise ValueError("Both input arrays must be (arrays of) 3-dimensional vectors, but they "
                         f"have x1.shape[axis]={_shape(x1)[axis]} and "
                         f"x2.shape[axis]={_shape(x2)[axis]}")
    return jnp.cross(x1, x2, axis=axis)


def matrix_transpose(x, /):
    """Swap the last two axes."""
    x = ensure_arraylike("jnp.linalg.matrix_transpose", x)
    nd = _ndim(x)
    if nd < 2:
        raise ValueError(f"matrix_transpose requires at least 2 dimensions; got ndim={nd}")
    return lax.transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def diagonal(x, /, *, offset: int = 0):
    """Diagonals of the matrices in the last two axes."""
    x = ensure_arraylike("jnp.linalg.diagonal", x)
    return jnp.diagonal(x, offset=offset, axis1=-2, axis2=-1)


def trace(x, /, *, offset: int = 0, dtype=None):
    """Traces of the matrices in the last two axes."""
    x = ensure_arraylike("jnp.linalg.trace", x)
    return jnp.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=dtype)
