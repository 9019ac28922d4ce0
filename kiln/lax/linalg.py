"""``kiln.lax.linalg`` (``jax.lax.linalg``): matrix decompositions and triangular solves.

What it holds: the primitives ``cholesky``, ``eigh``, ``eig``, ``lu``,
``lu_pivots_to_permutation``, ``qr``, ``svd``, ``triangular_solve``, ``schur``,
``hessenberg`` and ``householder_product``, each beside its abstract evaluation, its
NumPy/LAPACK impl, its JVP rule (the standard matrix-calculus formulas, written with
other lax primitives so higher derivatives and reverse mode follow) and its batching
rule, plus the public wrappers with JAX's signatures.

Every primitive works on the trailing two axes and is batched over the leading ones,
so the batching rules only move the batch axis to the front. Failed factorizations
give NaNs (as JAX does), never exceptions. float16/bfloat16 inputs are computed in
float32 and cast back.

What it must not hold: anything of ``kiln.numpy``; this module sits under it.
"""
from __future__ import annotations

import enum
import warnings

import numpy as np

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax._factory import _inexact, _int, check_dtype, standard_primitive
from kiln.lax.arith import add, div, eq, mul, neg, sub
from kiln.lax.dot import dot_general
from kiln.lax.elementwise import complex as _complex
from kiln.lax.elementwise import conj, imag, integer_pow, real
from kiln.lax.monoid_reductions import argmax
from kiln.lax.reductions import reduce_sum
from kiln.lax.slicing import broadcasted_iota, concatenate, full, full_like, pad
from kiln.lax.slicing import slice as _slice
from kiln.lax.structural import (
    broadcast_in_dim,
    convert_element_type,
    expand_dims,
    reshape,
    select_n,
    transpose,
)

__all__ = [
    "cholesky", "eigh", "eig", "lu", "lu_pivots_to_permutation", "qr", "svd",
    "triangular_solve", "schur", "hessenberg", "householder_product", "lu_solve", "geqrf",
    "EigImplementation", "EighImplementation", "SvdAlgorithm",
    "cholesky_p", "eigh_p", "eig_p", "lu_p", "lu_pivots_to_permutation_p", "qr_p", "svd_p",
    "triangular_solve_p", "geqrf_p", "schur_p", "hessenberg_p", "householder_product_p",
    "tridiagonal_solve", "ormqr", "symmetric_product",
]


class EighImplementation(enum.Enum):
    """Implementation choice for ``eigh`` (accepted; CPU always uses LAPACK ``syevd``)."""
    QR = "qr"
    JACOBI = "jacobi"
    QDWH = "qdwh"


class EigImplementation(enum.Enum):
    """Implementation choice for ``eig`` (accepted; CPU always uses LAPACK ``geev``)."""
    LAPACK = "lapack"
    MAGMA = "magma"
    CUSOLVER = "cusolver"


class SvdAlgorithm(enum.Enum):
    """Algorithm choice for ``svd`` (accepted; CPU always uses LAPACK ``gesdd``, itself
    the divide-and-conquer algorithm, as JAX's CPU default)."""
    DEFAULT = "default"
    QR = "QR"
    JACOBI = "Jacobi"
    POLAR = "polar"
    DIVIDE_AND_CONQUER = "divide_and_conquer"


# ================================================================================================
# Helpers on NumPy values (impls)
# ================================================================================================

_LOW = (np.dtype(np.float16), np.dtype(dtypes.bfloat16))


class _LazySciPy:
    """``scipy.linalg`` (and its ``lapack``/``blas``) imported on first use: importing it
    costs most of a second, which ``import kiln`` should not pay."""

    __slots__ = ("_name", "_module")

    def __init__(self, name):
        self._name = name
        self._module = None

    def __getattr__(self, attr):
        module = self._module
        if module is None:
            import importlib
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)


_sla = _LazySciPy("scipy.linalg")
_lapack = _LazySciPy("scipy.linalg.lapack")
_blas = _LazySciPy("scipy.linalg.blas")


def _work(x):
    """A NumPy array in a dtype LAPACK handles (low-precision floats go to float32)."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype in _LOW else x


def _real_dtype(dt):
    dt = np.dtype(dt)
    if dt.kind == "c":
        return np.dtype(np.float32) if dt == np.complex64 else np.dtype(np.float64)
    return dt


def _complex_dtype(dt):
    dt = np.dtype(dt)
    if dt.kind == "c":
        return dt
    return np.dtype(np.complex128) if dt == np.float64 else np.dtype(np.complex64)


def _each_matrix(fn, x, *, batch_ndim=None):
    """Apply ``fn`` (matrix -> tuple of arrays) to every trailing matrix of ``x``; stacks the
    results over the batch shape."""
    batch = x.shape[:-2] if batch_ndim is None else x.shape[:batch_ndim]
    flat = x.reshape((-1,) + x.shape[len(batch):])
    outs = [fn(m) for m in flat] if flat.shape[0] else []
    if not outs:
        return None
    return [np.stack([o[i] for o in outs]).reshape(batch + outs[0][i].shape)
            for i in range(len(outs[0]))]


def _nan_fill(shape, dtype):
    return np.full(shape, np.nan, dtype)


_FLUSHED = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64),
            np.dtype(np.complex128))


def _flush_denormals(x):
    """``x`` with its subnormal float32/float64 values (complex: parts) replaced by zeros
    of their sign; anything else unchanged."""
    if not isinstance(x, np.ndarray) or x.dtype not in _FLUSHED:
        return x
    if x.dtype.kind == "c":
        part = x.real.dtype
        tiny = np.finfo(part).tiny
        sub_re = (np.abs(x.real) < tiny) & (x.real != 0)
        sub_im = (np.abs(x.imag) < tiny) & (x.imag != 0)
        if not (sub_re.any() or sub_im.any()):
            return x
        out = np.array(x, copy=True)
        out.real = np.where(sub_re, x.real * 0, x.real)
        out.imag = np.where(sub_im, x.imag * 0, x.imag)
        return out
    tiny = np.finfo(x.dtype).tiny
    sub = (np.abs(x) < tiny) & (x != 0)
    if not sub.any():
        return x
    return np.where(sub, x * 0, x).astype(x.dtype, copy=False)


def _quiet_linalg(fn):
    """The impl ``fn`` with NumPy's warnings off and denormals flushed as XLA's CPU
    runtime does around its LAPACK calls (DAZ: a subnormal operand reads as zero; FTZ: a
    subnormal result is zero; float32 and float64): JAX's inverse of a float32 matrix
    whose row was scaled by 1e-40 is all non-finite, as the matrix is singular to it."""
    def wrapped(*args, **kw):
        args = [_flush_denormals(np.asarray(a)) if isinstance(a, np.ndarray) else a
                for a in args]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            out = fn(*args, **kw)
        if isinstance(out, (list, tuple)):
            return type(out)(_flush_denormals(o) for o in out)
        return _flush_denormals(out)
    return wrapped


def _check_square(name, aval):
    if aval.ndim < 2 or aval.shape[-1] != aval.shape[-2]:
        raise ValueError(f"Argument to {name} must have shape [..., n, n], got {aval.shape}")


def _check_matrix(name, aval):
    if aval.ndim < 2:
        raise ValueError(f"Argument to {name} must have rank >= 2, got shape {aval.shape}")


# ================================================================================================
# Helpers on traced values (JVP rules)
# ================================================================================================

def _const(value, dtype):
    from kiln.array import make_array
    return make_array(np.asarray(value, dtype), False)


def _ndim(x):
    return get_aval(x).ndim


def _shape(x):
    return get_aval(x).shape


def _dtype(x):
    return get_aval(x).dtype


def _is_complex(x):
    return _dtype(x).kind == "c"


def _T(x):
    nd = _ndim(x)
    return transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _conj(x):
    return conj(x) if _is_complex(x) else x


def _H(x):
    return _conj(_T(x))


def _astype(x, dtype):
    dtype = np.dtype(dtype)
    if _dtype(x) == dtype:
        return x
    return convert_element_type(x, dtype)


def _real_part(x):
    return real(x) if _is_complex(x) else x


def _mm(a, b):
    """Batched matrix product ``a @ b`` over equal leading batch shapes, at the highest
    precision (as JAX's linalg rules compute theirs)."""
    from kiln.lax.dot import Precision
    na, nb = _ndim(a), _ndim(b)
    nbatch = na - 2
    assert nb == na, (na, nb)
    batch = tuple(range(nbatch))
    return dot_general(a, b, (((na - 1,), (nbatch,)), (batch, batch)),
                       precision=Precision.HIGHEST)


def _broadcast_const(mask2d, x):
    """Broadcast a 2-D constant over ``x``'s leading axes."""
    shape = _shape(x)
    nd = len(shape)
    return broadcast_in_dim(mask2d, shape, (nd - 2, nd - 1))


def _tri_mask(m, n, k, lower):
    """NumPy bool mask of the lower (``i >= j - k``) or upper (``j >= i + k``) triangle."""
    return np.tri(m, n, k, dtype=bool) if lower else ~np.tri(m, n, k - 1, dtype=bool)


def _select_mask(x, mask):
    from kiln.array import make_array
    pred = _broadcast_const(make_array(mask, False), x)
    return select_n(pred, full_like(x, 0), x)


def _tril(x, k=0):
    m, n = _shape(x)[-2:]
    return _select_mask(x, _tri_mask(m, n, k, True))


def _triu(x, k=0):
    m, n = _shape(x)[-2:]
    return _select_mask(x, _tri_mask(m, n, k, False))


def _eye_like(x, n=None, dtype=None):
    """An identity matrix broadcast over ``x``'s leading axes."""
    shape = _shape(x)
    n = shape[-1] if n is None else n
    dt = _dtype(x) if dtype is None else dtype
    return broadcast_in_dim(_const(np.eye(n, dtype=dt), dt), shape[:-2] + (n, n),
                            (len(shape) - 2, len(shape) - 1))


def _diag_part(x):
    """``x[..., i, i]`` for ``i < min(m, n)`` (linear: slices and a reshape)."""
    shape = _shape(x)
    m, n = shape[-2:]
    k = min(m, n)
    nd = len(shape)
    if k == 0:
        return full(shape[:-2] + (0,), 0, _dtype(x))
    rows = _slice(x, (0,) * nd, shape[:-2] + (k, n))
    flat = reshape(rows, shape[:-2] + (k * n,))
    return _slice(flat, (0,) * (nd - 1), shape[:-2] + ((k - 1) * (n + 1) + 1,),
                  (1,) * (nd - 2) + (n + 1,))


def _diag_embed(s):
    """A diagonal matrix ``(..., k, k)`` from ``(..., k)`` (linear: an interior pad)."""
    shape = _shape(s)
    k = shape[-1]
    if k == 0:
        return full(shape + (0,), 0, _dtype(s))
    cfg = [(0, 0, 0)] * (len(shape) - 1) + [(0, 0, k)]
    flat = pad(s, _const(0, _dtype(s)), cfg)
    return reshape(flat, shape + (k,))


def _permutation_matrix(perm, dtype):
    """``P[..., i, j] = (perm[..., i] == j)``: ``P @ x`` takes rows ``x[perm]``."""
    shape = _shape(perm)
    n = shape[-1]
    full_shape = shape + (n,)
    cols = broadcasted_iota(_dtype(perm), full_shape, len(full_shape) - 1)
    rows = broadcast_in_dim(perm, full_shape, tuple(range(len(shape))))
    return convert_element_type(eq(rows, cols), dtype)


def _bcast_row(s, m):
    """``(..., k) -> (..., m, k)``: ``s[..., j]`` along the columns."""
    sh = _shape(s)
    return broadcast_in_dim(s, sh[:-1] + (m, sh[-1]),
                            tuple(range(len(sh) - 1)) + (len(sh),))


def _bcast_col(s, n):
    """``(..., k) -> (..., k, n)``: ``s[..., i]`` along the rows."""
    sh = _shape(s)
    return broadcast_in_dim(s, sh + (n,), tuple(range(len(sh))))


def _scale(x, c):
    return mul(x, _const(c, _dtype(x)))


def symmetrize(x):
    """``(x + x^H) / 2``."""
    return _scale(add(x, _H(x)), 0.5)


def _zero_out(prim, out):
    return [Zero.from_primal_value(o) for o in out] if prim.multiple_results \
        else Zero.from_primal_value(out)


def _front_batcher(prim):
    """Batching rule for primitives over trailing matrices: batch axis to the front."""
    def rule(axis_data, vals, dims, **params):
        size = axis_data.size
        args = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
        out = prim.bind(*args, **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)
    batching.batch_rules[prim] = rule
    return rule


def _check_inexact(name, aval):
    check_dtype(name, aval.dtype, _inexact)


#: The element types LAPACK (what JAX's CPU lowering calls) has routines for.
_LAPACK_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                                 np.complex128))


def _check_lapack(name, aval):
    """JAX's CPU error for a factorization of a type LAPACK lacks (float16, bfloat16)."""
    _check_inexact(name, aval)
    if aval.dtype not in _LAPACK_DTYPES:
        raise NotImplementedError(f"Unsupported dtype {np.dtype(aval.dtype).name}.")


# ================================================================================================
# cholesky
# ================================================================================================

def _cholesky_abstract_eval(x):
    _check_lapack("cholesky", x)
    _check_square("cholesky", x)
    return ShapedArray(x.shape, x.dtype, x.weak_type)


@_quiet_linalg
def _cholesky_impl(x):
    dt = x.dtype
    w = _work(x)
    if w.size == 0:
        return np.zeros(x.shape, dt)
    try:
        out = np.linalg.cholesky(w)
    except np.linalg.LinAlgError:
        def one(m):
            try:
                return (np.linalg.cholesky(m),)
            except np.linalg.LinAlgError:
                return (_nan_fill(m.shape, m.dtype),)
        out, = _each_matrix(one, w)
    return np.asarray(out).astype(dt, copy=False)


cholesky_p = standard_primitive("cholesky", _cholesky_abstract_eval, _cholesky_impl)
_front_batcher(cholesky_p)


def _cholesky_phi(x):
    """The lower triangle of ``x`` with its diagonal halved."""
    n = _shape(x)[-1]
    scale = np.tri(n, n, -1) + 0.5 * np.eye(n)
    return mul(x, _broadcast_const(_const(scale, _dtype(x)), x))


def _cholesky_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    L = cholesky_p.bind(x)
    # L' = L phi(L^{-1} X' L^{-H})  (Murray, "Differentiation of the Cholesky decomposition")
    tmp = triangular_solve(L, t, left_side=False, lower=True, transpose_a=True,
                           conjugate_a=True)
    inner = triangular_solve(L, tmp, left_side=True, lower=True)
    return L, _mm(L, _cholesky_phi(inner))


ad.jvp_rules[cholesky_p] = _cholesky_jvp


def cholesky(x, *, symmetrize_input: bool = True):
    """Cholesky factor ``L`` (lower triangular, ``x = L L^H``) of Hermitian positive-definite
    matrices ``[..., n, n]``; NaNs where the factorization fails."""
    if symmetrize_input:
        x = symmetrize(x)
    return _tril(cholesky_p.bind(x))


# ================================================================================================
# eigh
# ================================================================================================

def _eigh_abstract_eval(x, *, lower, sort_eigenvalues, subset_by_index, algorithm):
    _check_lapack("eigh", x)
    _check_square("eigh", x)
    n = x.shape[-1]
    d = n
    if subset_by_index is not None:
        lo, hi = subset_by_index
        if not 0 <= lo <= hi <= n:
            raise ValueError(f"subset_by_index must satisfy 0 <= lo <= hi <= n, got "
                             f"{subset_by_index} for n={n}")
        d = hi - lo
    batch = x.shape[:-2]
    return [ShapedArray(batch + (n, d), x.dtype, x.weak_type),
            ShapedArray(batch + (d,), _real_dtype(x.dtype), x.weak_type)]


@_quiet_linalg
def _eigh_impl(x, *, lower, sort_eigenvalues, subset_by_index, algorithm):
    dt = x.dtype
    w_ = _work(x)
    n = x.shape[-1]
    uplo = "L" if lower else "U"
    if w_.size == 0:
        v = np.zeros(x.shape, dt)
        w = np.zeros(x.shape[:-1], _real_dtype(dt))
    else:
        try:
            w, v = np.linalg.eigh(w_, UPLO=uplo)
        except np.linalg.LinAlgError:
            def one(m):
                try:
                    ww, vv = np.linalg.eigh(m, UPLO=uplo)
                except np.linalg.LinAlgError:
                    ww = _nan_fill(m.shape[:-1], _real_dtype(m.dtype))
                    vv = _nan_fill(m.shape, m.dtype)
                return ww, vv
            w, v = _each_matrix(one, w_)
    if subset_by_index is not None and tuple(subset_by_index) != (0, n):
        lo, hi = subset_by_index
        w = w[..., lo:hi]
        v = v[..., lo:hi]
    return [np.asarray(v).astype(dt, copy=False),
            np.asarray(w).astype(_real_dtype(dt), copy=False)]


eigh_p = standard_primitive("eigh", _eigh_abstract_eval, _eigh_impl,
                            weak_type_rule=lambda w, **_: [w, w], multiple_results=True)
_front_batcher(eigh_p)


def _eigh_jvp(primals, tangents, *, lower, sort_eigenvalues, subset_by_index, algorithm):
    (a,), (t,) = primals, tangents
    n = _shape(a)[-1]
    if not (subset_by_index is None or tuple(subset_by_index) == (0, n)):
        raise NotImplementedError("Derivatives not defined for partial eigen decomposition.")
    v, w_real = eigh_p.bind(a, lower=lower, sort_eigenvalues=sort_eigenvalues,
                            subset_by_index=subset_by_index, algorithm=algorithm)
    # Nondegenerate perturbation theory: with P = V^H A' V,
    #   w' = Re diag(P),  V' = V (F o P),  F_ij = 1 / (w_j - w_i) (i != j), 0 on the diagonal.
    w = _astype(w_real, _dtype(a))
    eye = _eye_like(v)
    diffs = sub(_bcast_row(w, n), _bcast_col(w, n))
    F = sub(integer_pow(add(eye, diffs), -1), eye)
    P = _mm(_mm(_H(v), t), v)
    dv = _mm(v, mul(F, P))
    dw = _real_part(_diag_part(P))
    return [v, w_real], [dv, dw]


ad.jvp_rules[eigh_p] = _eigh_jvp


def eigh(x, *, lower: bool = True, symmetrize_input: bool = True,
         sort_eigenvalues: bool = True, subset_by_index=None, implementation=None):
    """Eigendecomposition of Hermitian matrices: returns ``(v, w)`` with eigenvectors in the
    columns of ``v`` and real eigenvalues ``w`` in ascending order."""
    if symmetrize_input:
        x = symmetrize(x)
    if subset_by_index is not None:
        subset_by_index = tuple(int(i) for i in subset_by_index)
    v, w = eigh_p.bind(x, lower=bool(lower), sort_eigenvalues=bool(sort_eigenvalues),
                       subset_by_index=subset_by_index, algorithm=implementation)
    return v, w


# ================================================================================================
# eig
# ================================================================================================

def _eig_abstract_eval(x, *, compute_left_eigenvectors, compute_right_eigenvectors,
                       enable_eigvec_derivs, implementation):
    _check_lapack("eig", x)
    _check_square("eig", x)
    cdt = _complex_dtype(x.dtype if x.dtype not in _LOW else np.float32)
    batch, n = x.shape[:-2], x.shape[-1]
    outs = [ShapedArray(batch + (n,), cdt)]
    if compute_left_eigenvectors:
        outs.append(ShapedArray(batch + (n, n), cdt))
    if compute_right_eigenvectors:
        outs.append(ShapedArray(batch + (n, n), cdt))
    return outs


@_quiet_linalg
def _eig_impl(x, *, compute_left_eigenvectors, compute_right_eigenvectors,
              enable_eigvec_derivs, implementation):
    w_ = _work(x)
    cdt = _complex_dtype(w_.dtype)
    n = x.shape[-1]
    left, right = compute_left_eigenvectors, compute_right_eigenvectors

    def one(m):
        try:
            if not np.all(np.isfinite(m)):
                raise np.linalg.LinAlgError("non-finite input")
            res = _sla.eig(m, left=left, right=right, check_finite=False)
            if not (left or right):
                res = (res,)
            elif left and right:
                res = res
            else:
                res = (res[0], res[1])
        except (np.linalg.LinAlgError, ValueError):
            k = 1 + left + right
            res = (_nan_fill((n,), cdt),) + tuple(_nan_fill((n, n), cdt) for _ in range(k - 1))
        return tuple(np.asarray(r).astype(cdt) for r in res)

    if w_.size == 0:
        outs = [np.zeros(x.shape[:-1], cdt)] + \
            [np.zeros(x.shape, cdt) for _ in range(left + right)]
        return outs
    return _each_matrix(one, w_)


eig_p = standard_primitive("eig", _eig_abstract_eval, _eig_impl,
                           weak_type_rule=lambda w, *, compute_left_eigenvectors,
                           compute_right_eigenvectors, **_:
                           [False] * (1 + compute_left_eigenvectors +
                                      compute_right_eigenvectors),
                           multiple_results=True)
_front_batcher(eig_p)


def _eig_vec_jvp(w, v, da):
    """Eigenvalue and eigenvector tangents under LAPACK's normalisation (unit 2-norm, the
    largest-magnitude component real)."""
    n = _shape(w)[-1]
    eye = _eye_like(v, n)
    diffs = sub(_bcast_row(w, n), _bcast_col(w, n))
    F = sub(integer_pow(add(eye, diffs), -1), eye)
    P = _mm(_solve(v, da), v)
    dw = _diag_part(P)
    U = _mm(v, mul(F, P))
    # dv_j = u_j + c_j v_j; the two real normalisation constraints fix c_j:
    #   c_j = -Re(v_j^H u_j) - i Im(u_kj) / v_kj,  k = argmax_i |v_ij|
    vnd = _ndim(v)
    absv = _real_part(mul(v, conj(v)))
    k = argmax(absv, vnd - 2, np.int32)
    mask = eq(broadcasted_iota(np.int32, _shape(v), vnd - 2), _bcast_row(k, n))
    mask = convert_element_type(mask, _dtype(v))
    re = neg(real(reduce_sum(mul(conj(v), U), (vnd - 2,))))
    im = neg(div(imag(reduce_sum(mul(mask, U), (vnd - 2,))),
                 real(reduce_sum(mul(mask, v), (vnd - 2,)))))
    c = _complex(re, im)
    return dw, add(U, mul(v, _bcast_row(c, n)))


def _eig_jvp(primals, tangents, *, compute_left_eigenvectors, compute_right_eigenvectors,
             enable_eigvec_derivs, implementation):
    (a,), (da,) = primals, tangents
    if (compute_left_eigenvectors or compute_right_eigenvectors) and not enable_eigvec_derivs:
        raise NotImplementedError(
            "Derivatives of non-symmetric eigenvectors are only valid under assumptions on "
            "the input that cannot be checked (see the enable_eigvec_derivs argument to "
            "kiln.lax.linalg.eig). Pass enable_eigvec_derivs=True to kiln.lax.linalg.eig to "
            "opt in. See https://github.com/jax-ml/jax/issues/2748 for discussion.")
    # Eigenvalue-only derivatives use the eigenvectors; dw is invariant to their scaling,
    # so their own derivative (needed for second order) may be enabled unconditionally.
    only_values = not (compute_left_eigenvectors or compute_right_eigenvectors)
    outs = eig_p.bind(a, compute_left_eigenvectors=compute_left_eigenvectors,
                      compute_right_eigenvectors=True,
                      enable_eigvec_derivs=enable_eigvec_derivs or only_values,
                      implementation=implementation)
    w, vr = outs[0], outs[-1]
    da = _astype(da, _dtype(vr))
    if not (compute_left_eigenvectors or compute_right_eigenvectors):
        # w' = diag(V^{-1} A' V)
        dw = reduce_sum(mul(_solve(vr, da), _T(vr)), (_ndim(vr) - 1,))
        return [w], [dw]
    dw, dvr = _eig_vec_jvp(w, vr, da)
    p_out, t_out = [w], [dw]
    if compute_left_eigenvectors:
        vl = outs[1]
        _, dvl = _eig_vec_jvp(conj(w), vl, _H(da))
        p_out.append(vl)
        t_out.append(dvl)
    if compute_right_eigenvectors:
        p_out.append(vr)
        t_out.append(dvr)
    return p_out, t_out


ad.jvp_rules[eig_p] = _eig_jvp


def eig(x, *, compute_left_eigenvectors: bool = True, compute_right_eigenvectors: bool = True,
        enable_eigvec_derivs: bool = False, implementation=None, use_magma=None):
    """Eigendecomposition of general square matrices: ``[w, vl, vr]`` (complex; ``vl``/``vr``
    only when requested). NaNs for batch elements where it fails."""
    return eig_p.bind(x, compute_left_eigenvectors=bool(compute_left_eigenvectors),
                      compute_right_eigenvectors=bool(compute_right_eigenvectors),
                      enable_eigvec_derivs=bool(enable_eigvec_derivs),
                      implementation=implementation)


# ================================================================================================
# lu and lu_pivots_to_permutation
# ================================================================================================

def _pivots_to_perm_np(piv, m):
    perm = np.arange(m, dtype=np.int32)
    for i, p in enumerate(piv):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


def _lu_abstract_eval(x):
    _check_lapack("lu", x)
    _check_matrix("lu", x)
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    i32 = np.dtype(np.int32)
    return [ShapedArray(x.shape, x.dtype, x.weak_type), ShapedArray(batch + (min(m, n),), i32),
            ShapedArray(batch + (m,), i32)]


@_quiet_linalg
def _lu_impl(x):
    dt = x.dtype
    w = _work(x)
    m, n = x.shape[-2:]
    k = min(m, n)
    batch = x.shape[:-2]
    if w.size == 0:
        return [np.zeros(x.shape, dt), np.zeros(batch + (k,), np.int32),
                np.broadcast_to(np.arange(m, dtype=np.int32), batch + (m,)).copy()]
    getrf, = _lapack.get_lapack_funcs(("getrf",), (w,))

    def one(a):
        lu, piv, _info = getrf(a)
        piv = np.asarray(piv[:k], np.int32)
        return lu, piv, _pivots_to_perm_np(piv, m)
    lu, piv, perm = _each_matrix(one, w)
    return [lu.astype(dt, copy=False), piv, perm]


lu_p = standard_primitive("lu", _lu_abstract_eval, _lu_impl,
                          weak_type_rule=lambda w: [w, False, False], multiple_results=True)
_front_batcher(lu_p)


def _unpack_lu(lu):
    """``(l, u)``: ``l`` unit lower ``(m, m)`` and ``u`` upper ``(n, n)``, padded with the
    identity beyond ``k = min(m, n)`` (so both are invertible)."""
    shape = _shape(lu)
    m, n = shape[-2:]
    k = min(m, n)
    nd = len(shape)
    dt = _dtype(lu)
    zero = _const(0, dt)
    cols = _slice(lu, (0,) * nd, shape[:-1] + (k,))
    l_ = _tril(cols, -1)
    if m > k:
        l_ = pad(l_, zero, [(0, 0, 0)] * (nd - 1) + [(0, m - k, 0)])
    l_ = add(l_, _eye_like(lu, m))
    rows = _slice(lu, (0,) * nd, shape[:-2] + (k, n))
    u = _triu(rows)
    if n > k:
        u = pad(u, zero, [(0, 0, 0)] * (nd - 2) + [(0, n - k, 0), (0, 0, 0)])
        extra = np.diag(np.concatenate([np.zeros(k), np.ones(n - k)])).astype(dt)
        u = add(u, _broadcast_const(_const(extra, dt), u))
    return l_, u


def _lu_jvp(primals, tangents):
    (a,), (t,) = primals, tangents
    lu, piv, perm = lu_p.bind(a)
    # De Hoog, Anderssen & Lukas: with P A = L U,
    #   L^{-1} P A' U^{-1} = L^{-1} L' + U' U^{-1}  (strictly lower + upper parts), so
    #   L' = L tril(X, -1),  U' = triu(X) U,  X = L^{-1} P A' U^{-1}.
    l_, u = _unpack_lu(lu)
    x = _mm(_permutation_matrix(perm, _dtype(a)), t)
    la = triangular_solve(l_, x, left_side=True, lower=True, unit_diagonal=True)
    lau = triangular_solve(u, la, left_side=False, lower=False)
    lu_dot = add(_mm(l_, _tril(lau, -1)), _mm(_triu(lau), u))
    return [lu, piv, perm], [lu_dot, Zero.from_primal_value(piv), Zero.from_primal_value(perm)]


ad.jvp_rules[lu_p] = _lu_jvp


def lu(x):
    """LU decomposition with partial pivoting, ``P A = L U``: returns ``(lu, pivots,
    permutation)`` with ``L`` (unit diagonal implicit) and ``U`` packed in ``lu``."""
    return tuple(lu_p.bind(x))


def _l2p_abstract_eval(pivots, *, permutation_size):
    check_dtype("lu_pivots_to_permutation", pivots.dtype, _int)
    if pivots.ndim < 1:
        raise ValueError("Argument to lu_pivots_to_permutation must have rank >= 1, got shape "
                         f"{pivots.shape}")
    if permutation_size < pivots.shape[-1]:
        raise ValueError(f"Output permutation size {permutation_size} has to exceed the trailing "
                         f"dimension of the pivots. Got pivots size {pivots.shape[-1]}")
    return ShapedArray(pivots.shape[:-1] + (permutation_size,), np.dtype(np.int32))


def _l2p_impl(pivots, *, permutation_size):
    batch = pivots.shape[:-1]
    flat = pivots.reshape((-1, pivots.shape[-1]))
    out = np.stack([_pivots_to_perm_np(p, permutation_size) for p in flat]) if flat.shape[0] \
        else np.zeros((0, permutation_size), np.int32)
    return out.reshape(batch + (permutation_size,))


lu_pivots_to_permutation_p = standard_primitive(
    "lu_pivots_to_permutation", _l2p_abstract_eval, _l2p_impl,
    weak_type_rule=lambda w, **_: False)
_front_batcher(lu_pivots_to_permutation_p)
ad.defjvp_zero(lu_pivots_to_permutation_p)


def lu_pivots_to_permutation(pivots, permutation_size: int):
    """The permutation (int32, ``[..., permutation_size]``) that the row swaps ``pivots``
    perform."""
    return lu_pivots_to_permutation_p.bind(pivots, permutation_size=int(permutation_size))


def lu_solve(lu, permutation, b, trans: int = 0):
    """Solve ``A x = b`` (``trans=0``), ``A^T x = b`` (1) or ``A^H x = b`` (2) from the LU
    factorization of ``A``. ``b`` is ``[..., m, k]`` or a batch of vectors ``[..., m]`` when
    its rank is one less than ``lu``'s."""
    lu_shape, b_shape = _shape(lu), _shape(b)
    if len(lu_shape) < 2 or lu_shape[-1] != lu_shape[-2]:
        raise ValueError("last two dimensions of LU decomposition must be equal, got shape "
                         f"{lu_shape}")
    vec = len(lu_shape) == len(b_shape) + 1
    if vec:
        b = expand_dims(b, (len(b_shape),))
    batch = np.broadcast_shapes(lu_shape[:-2], _shape(permutation)[:-1], _shape(b)[:-2])

    def bc(x, tail):
        s = _shape(x)
        want = tuple(batch) + s[-tail:]
        if s == want:
            return x
        return broadcast_in_dim(x, want, tuple(range(len(want) - len(s), len(want))))
    lu, permutation, b = bc(lu, 2), bc(permutation, 1), bc(b, 2)
    x = _lu_solve(lu, permutation, b, trans)
    if vec:
        x = reshape(x, _shape(x)[:-1])
    return x


def _lu_solve(lu, perm, b, trans=0):
    """Solve from a packed LU factorization (all of equal batch shape; ``b`` is a matrix)."""
    dt = _dtype(lu)
    P = _permutation_matrix(perm, dt)
    if trans == 0:
        x = _mm(P, b)
        x = triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
        return triangular_solve(lu, x, left_side=True, lower=False)
    if trans not in (1, 2):
        raise ValueError(f"'trans' value must be 0, 1, or 2, got {trans}")
    cj = trans == 2
    x = triangular_solve(lu, b, left_side=True, lower=False, transpose_a=True, conjugate_a=cj)
    x = triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True,
                         transpose_a=True, conjugate_a=cj)
    return _mm(_T(P), x)


def _solve(a, b):
    """``a^{-1} b`` for square ``a`` and matrix ``b`` of equal batch shape (used by rules)."""
    lu_, _, perm = lu_p.bind(a)
    return _lu_solve(lu_, perm, b)


# ================================================================================================
# qr
# ================================================================================================

def _qr_abstract_eval(x, *, pivoting, full_matrices, use_magma):
    _check_lapack("qr", x)
    _check_matrix("qr", x)
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    k = m if full_matrices else min(m, n)
    outs = [ShapedArray(batch + (m, k), x.dtype, x.weak_type),
            ShapedArray(batch + (k, n), x.dtype, x.weak_type)]
    if pivoting:
        outs.append(ShapedArray(batch + (n,), np.dtype(np.int32)))
    return outs


@_quiet_linalg
def _qr_impl(x, *, pivoting, full_matrices, use_magma):
    dt = x.dtype
    w = _work(x)
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    k = m if full_matrices else min(m, n)
    if w.size == 0:
        q = np.zeros(batch + (m, k), dt)
        if k:
            q[..., :, :] = np.eye(m, k, dtype=dt)
        outs = [q, np.zeros(batch + (k, n), dt)]
        if pivoting:
            outs.append(np.broadcast_to(np.arange(n, dtype=np.int32), batch + (n,)).copy())
        return outs
    if not pivoting:
        q, r = np.linalg.qr(w, mode="complete" if full_matrices else "reduced")
        return [q.astype(dt, copy=False), r.astype(dt, copy=False)]

    def one(a):
        q, r, p = _sla.qr(a, mode="full" if full_matrices else "economic", pivoting=True,
                          check_finite=False)
        return q, r, np.asarray(p, np.int32)
    q, r, p = _each_matrix(one, w)
    return [q.astype(dt, copy=False), r.astype(dt, copy=False), p]


qr_p = standard_primitive(
    "qr", _qr_abstract_eval, _qr_impl,
    weak_type_rule=lambda w, *, pivoting, **_: [w, w] + ([False] if pivoting else []),
    multiple_results=True)
_front_batcher(qr_p)


def _thin_qr_jvp(q, r, dx):
    """QR tangents for ``[..., m, n]`` with ``m >= n`` (Townsend's derivation): with
    ``C = Q^H dX R^{-1}`` and ``O`` the skew-Hermitian part built from its strict lower
    triangle, ``dQ = Q (O - C) + dX R^{-1}`` and ``dR = (C - O) R``."""
    dx_rinv = triangular_solve(r, dx)          # dX R^{-1} (right-side solve)
    c = _mm(_H(q), dx_rinv)
    c_low = _tril(c, -1)
    o = sub(c_low, _H(c_low))
    if _is_complex(c):
        n = _shape(r)[-1]
        eye = _eye_like(c, n)
        o = add(o, mul(eye, sub(c, _astype(real(c), _dtype(c)))))
    dq = add(_mm(q, sub(o, c)), dx_rinv)
    dr = _mm(sub(c, o), r)
    return dq, dr


def _cols(x, lo, hi):
    s = _shape(x)
    return _slice(x, (0,) * (len(s) - 1) + (lo,), s[:-1] + (hi,))


def _rows(x, lo, hi):
    s = _shape(x)
    return _slice(x, (0,) * (len(s) - 2) + (lo, 0), s[:-2] + (hi, s[-1]))


def _qr_jvp(primals, tangents, *, pivoting, full_matrices, use_magma):
    (x,), (dx,) = primals, tangents
    outs = qr_p.bind(x, pivoting=pivoting, full_matrices=full_matrices, use_magma=use_magma)
    q, r = outs[0], outs[1]
    m, n = _shape(x)[-2:]
    nd = _ndim(x)
    if pivoting:
        p = outs[2]
        # dx[..., :, p]: columns permuted.
        dx = _mm(dx, _T(_permutation_matrix(p, _dtype(dx))))
    if m < n:
        # Wide: X = Q [R1 R2]; the square block gives dQ, dR1; R2 = Q^H X2 gives dR2.
        x2, dx1, dx2, r1 = _cols(x, m, n), _cols(dx, 0, m), _cols(dx, m, n), _cols(r, 0, m)
        if pivoting:
            x2 = _cols(_mm(x, _T(_permutation_matrix(p, _dtype(x)))), m, n)
        dq, dr1 = _thin_qr_jvp(q, r1, dx1)
        dr2 = add(_mm(_H(dq), x2), _mm(_H(q), dx2))
        dr = concatenate([dr1, dr2], nd - 1)
    else:
        q_mn = _cols(q, 0, n) if full_matrices else q
        r_nn = _rows(r, 0, n) if full_matrices else r
        dq_mn, dr_nn = _thin_qr_jvp(q_mn, r_nn, dx)
        if not full_matrices or m == n:
            dq, dr = dq_mn, dr_nn
        else:
            # The completion Q_mp of a full QR follows from Householder's construction
            # (Roberts & Roberts, arXiv:2409.13374, eqs. 32-33):
            #   Z = Q_pn (Q_nn - I)^{-1},
            #   dQ_mp = dQ_mn Z^H - (Q_mn + Q_mp Z) (dQ_pn - Z dQ_nn)^H.
            q_nn, q_pn = _rows(q_mn, 0, n), _rows(q_mn, n, m)
            q_mp = _cols(q, n, m)
            dq_nn, dq_pn = _rows(dq_mn, 0, n), _rows(dq_mn, n, m)
            lu_, _, perm = lu_p.bind(sub(q_nn, _eye_like(q_nn, n)))
            z_h = _lu_solve(lu_, perm, _H(q_pn), trans=2)
            z = _H(z_h)
            dq_mp = sub(_mm(dq_mn, z_h),
                        _mm(add(q_mn, _mm(q_mp, z)), _H(sub(dq_pn, _mm(z, dq_nn)))))
            dq = concatenate([dq_mn, dq_mp], nd - 1)
            zeros = full(_shape(dr_nn)[:-2] + (m - n, n), 0, _dtype(dr_nn))
            dr = concatenate([dr_nn, zeros], nd - 2)
    p_out, t_out = [q, r], [dq, dr]
    if pivoting:
        p_out.append(outs[2])
        t_out.append(Zero.from_primal_value(outs[2]))
    return p_out, t_out


ad.jvp_rules[qr_p] = _qr_jvp


def qr(x, *, pivoting: bool = False, full_matrices: bool = True, use_magma=None):
    """QR decomposition ``x = Q R`` (``x[:, p] = Q R`` with ``pivoting``): returns ``(q, r)``
    or ``(q, r, p)``."""
    outs = qr_p.bind(x, pivoting=bool(pivoting), full_matrices=bool(full_matrices),
                     use_magma=use_magma)
    return tuple(outs)


# ================================================================================================
# svd
# ================================================================================================

def _svd_shapes(shape, full_matrices, compute_uv, subset_by_index):
    m, n = shape[-2:]
    rank = min(m, n)
    if subset_by_index is not None:
        if full_matrices and tuple(subset_by_index) != (0, rank):
            raise ValueError("full_matrices and subset_by_index cannot both be set")
        rank = min(rank, subset_by_index[1] - subset_by_index[0])
    if not compute_uv:
        return [(rank,)]
    return [(rank,), (m, m if full_matrices else rank), (n if full_matrices else rank, n)]


def _svd_abstract_eval(x, *, full_matrices, compute_uv, subset_by_index, algorithm):
    _check_lapack("svd", x)
    _check_matrix("svd", x)
    batch = x.shape[:-2]
    shapes = _svd_shapes(x.shape, full_matrices, compute_uv, subset_by_index)
    outs = [ShapedArray(batch + shapes[0], _real_dtype(x.dtype), x.weak_type)]
    for s in shapes[1:]:
        outs.append(ShapedArray(batch + s, x.dtype, x.weak_type))
    return outs


@_quiet_linalg
def _svd_impl(x, *, full_matrices, compute_uv, subset_by_index, algorithm):
    dt = x.dtype
    rdt = _real_dtype(dt)
    w = _work(x)
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    k = min(m, n)
    if w.size == 0:
        s = np.zeros(batch + (0,), rdt)
        if not compute_uv:
            return [s]
        if full_matrices:
            u = np.broadcast_to(np.eye(m, dtype=dt), batch + (m, m)).copy()
            vt = np.broadcast_to(np.eye(n, dtype=dt), batch + (n, n)).copy()
        else:
            u, vt = np.zeros(batch + (m, 0), dt), np.zeros(batch + (0, n), dt)
        return [s, u, vt]

    def nan_result(a):
        s_ = _nan_fill((k,), _real_dtype(a.dtype))
        if not compute_uv:
            return (s_,)
        km = m if full_matrices else k
        kn = n if full_matrices else k
        return s_, _nan_fill((m, km), a.dtype), _nan_fill((kn, n), a.dtype)

    def one(a):
        try:
            if not np.all(np.isfinite(a)):
                return nan_result(a)
            r = np.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
        except np.linalg.LinAlgError:
            return nan_result(a)
        return (r,) if not compute_uv else (r[1], r[0], r[2])

    try:
        if not np.all(np.isfinite(w)):
            raise np.linalg.LinAlgError
        r = np.linalg.svd(w, full_matrices=full_matrices, compute_uv=compute_uv)
        outs = [r] if not compute_uv else [r[1], r[0], r[2]]
    except np.linalg.LinAlgError:
        outs = _each_matrix(one, w)
    if subset_by_index is not None and tuple(subset_by_index) != (0, k):
        lo, hi = subset_by_index
        hi = min(hi, k)
        outs[0] = outs[0][..., lo:hi]
        if compute_uv:
            outs[1] = outs[1][..., :, lo:hi]
            outs[2] = outs[2][..., lo:hi, :]
    res = [np.asarray(outs[0]).astype(rdt, copy=False)]
    res += [np.asarray(o).astype(dt, copy=False) for o in outs[1:]]
    return res


svd_p = standard_primitive(
    "svd", _svd_abstract_eval, _svd_impl,
    weak_type_rule=lambda w, *, compute_uv, **_: [w] * (3 if compute_uv else 1),
    multiple_results=True)
_front_batcher(svd_p)


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv, subset_by_index, algorithm):
    (A,), (dA,) = primals, tangents
    m, n = _shape(A)[-2:]
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError(
            "Singular value decomposition JVP not implemented for full matrices")
    s, U, Vt = svd_p.bind(A, full_matrices=False, compute_uv=True,
                          subset_by_index=subset_by_index, algorithm=algorithm)
    dt = _dtype(A)
    Ut, V = _H(U), _H(Vt)
    dS = _mm(_mm(Ut, dA), V)
    ds = _real_part(_diag_part(dS))
    if not compute_uv:
        return [s], [ds]
    k = _shape(s)[-1]
    s_row, s_col = _bcast_row(s, k), _bcast_col(s, k)     # s_j, s_i
    # F_ij = 1 / (s_j^2 - s_i^2) off the diagonal, 0 on it.
    s_diffs = mul(add(s_row, s_col), sub(s_row, s_col))
    eye_r = _eye_like(s_diffs, k)
    F = _astype(sub(div(_const(1, _dtype(s)), add(s_diffs, eye_r)), eye_r), dt)
    s_row_c = _astype(s_row, dt)
    dSS = mul(s_row_c, dS)                          # dS diag(s)
    SdS = mul(_T(s_row_c), dS)                      # diag(s) dS
    s_zeros = _astype(eq(s, _const(0, _dtype(s))), _dtype(s))
    s_inv = sub(div(_const(1, _dtype(s)), add(s, s_zeros)), s_zeros)
    s_inv_mat = _astype(_diag_embed(s_inv), dt)
    dUdV_diag = mul(_scale(sub(dS, _H(dS)), 0.5), s_inv_mat)
    dU = _mm(U, add(mul(F, add(dSS, _H(dSS))), dUdV_diag))
    dV = _mm(V, mul(F, add(SdS, _H(SdS))))
    if m > n:
        dAV = _mm(dA, V)
        dU = add(dU, div(sub(dAV, _mm(U, _mm(Ut, dAV))), _astype(_bcast_row(s, m), dt)))
    if n > m:
        dAHU = _mm(_H(dA), U)
        dV = add(dV, div(sub(dAHU, _mm(V, _mm(Vt, dAHU))), _astype(_bcast_row(s, n), dt)))
    return [s, U, Vt], [ds, dU, _H(dV)]


ad.jvp_rules[svd_p] = _svd_jvp


def svd(x, *, full_matrices: bool = True, compute_uv: bool = True, subset_by_index=None,
        algorithm=None):
    """Singular value decomposition: ``(u, s, vh)`` (``s`` real, descending), or ``s`` alone
    when ``compute_uv=False``."""
    if subset_by_index is not None:
        subset_by_index = tuple(int(i) for i in subset_by_index)
    outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv),
                      subset_by_index=subset_by_index, algorithm=algorithm)
    if compute_uv:
        s, u, vt = outs
        return u, s, vt
    return outs[0]


# ================================================================================================
# triangular_solve
# ================================================================================================

def _ts_abstract_eval(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    _check_inexact("triangular_solve", a)
    _check_inexact("triangular_solve", b)
    if a.dtype != b.dtype:
        raise TypeError("triangular_solve requires both arguments to have the same dtype, got "
                        f"{a.dtype.name} and {b.dtype.name}")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError("The first input to triangular_solve must be a square matrix. Got "
                         f"shape {a.shape}.")
    if b.ndim != a.ndim:
        raise ValueError("triangular_solve requires arguments of equal rank, got shapes "
                         f"{a.shape} and {b.shape}")
    if a.shape[:-2] != b.shape[:-2]:
        raise ValueError("triangular_solve requires equal batch dimensions, got shapes "
                         f"{a.shape} and {b.shape}")
    common = b.shape[-2] if left_side else b.shape[-1]
    if a.shape[-1] != common:
        raise ValueError(f"Incompatible shapes for arguments to triangular_solve: {a.shape} "
                         f"and {b.shape}.")
    return ShapedArray(b.shape, b.dtype, a.weak_type and b.weak_type)


@_quiet_linalg
def _ts_impl(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    dt = b.dtype
    wa, wb = _work(a), _work(b)
    if wb.size == 0:
        return np.zeros(b.shape, dt)
    cplx = wa.dtype.kind == "c"
    conj_only = cplx and conjugate_a and not transpose_a
    trans = 0 if not transpose_a else (2 if (conjugate_a and cplx) else 1)
    trsm, = _blas.get_blas_funcs(("trsm",), (wa, wb))
    batch = wb.shape[:-2]
    fa = wa.reshape((-1,) + wa.shape[-2:])
    fb = wb.reshape((-1,) + wb.shape[-2:])
    out = np.empty(fb.shape, fb.dtype)
    for i in range(fb.shape[0]):
        bb = np.conj(fb[i]) if conj_only else fb[i]
        x = trsm(1.0, fa[i], bb, side=0 if left_side else 1, lower=int(bool(lower)),
                 trans_a=trans, diag=int(bool(unit_diagonal)))
        out[i] = np.conj(x) if conj_only else x
    return out.reshape(batch + wb.shape[-2:]).astype(dt, copy=False)


triangular_solve_p = standard_primitive("triangular_solve", _ts_abstract_eval, _ts_impl)


def _ts_jvp_a(g_a, ans, a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    # op(A) X = B  =>  op(A) X' = -op(A') X  (only A's referenced triangle varies).
    m, n = _shape(b)[-2:]
    k = 1 if unit_diagonal else 0
    g_a = _tril(g_a, -k) if lower else _triu(g_a, k)
    g_a = neg(g_a)
    g_a = _T(g_a) if transpose_a else g_a
    g_a = _conj(g_a) if conjugate_a else g_a

    def a_inverse(rhs):
        return triangular_solve_p.bind(a, rhs, left_side=left_side, lower=lower,
                                       transpose_a=transpose_a, conjugate_a=conjugate_a,
                                       unit_diagonal=unit_diagonal)
    if left_side:
        return a_inverse(_mm(g_a, ans)) if m > n else _mm(a_inverse(g_a), ans)
    return a_inverse(_mm(ans, g_a)) if m < n else _mm(ans, a_inverse(g_a))


def _ts_jvp_b(g_b, ans, a, b, **params):
    return triangular_solve_p.bind(a, g_b, **params)


ad.defjvp2(triangular_solve_p, _ts_jvp_a, _ts_jvp_b)


def _ts_transpose(ct, a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    if ad.is_undefined_primal(a):
        raise ValueError("triangular_solve is not linear in its first argument")
    if type(ct) is Zero:
        return [None, Zero(b.aval)]
    ct_b = triangular_solve_p.bind(a, ct, left_side=left_side, lower=lower,
                                   transpose_a=not transpose_a, conjugate_a=conjugate_a,
                                   unit_diagonal=unit_diagonal)
    return [None, ct_b]


ad.transpose_rules[triangular_solve_p] = _ts_transpose


def _ts_batch(axis_data, vals, dims, **params):
    (a, b), (da, db) = vals, dims
    size = axis_data.size
    if da is None:
        # Fold the batch axis of b into its free dimension: one solve for all.
        bnd = _ndim(b)
        if params["left_side"]:
            b2 = batching.moveaxis(b, db, bnd - 1)          # (..., m, n, B)
            s = _shape(b2)
            flat = reshape(b2, s[:-2] + (s[-2] * s[-1],))
            out = triangular_solve_p.bind(a, flat, **params)
            return reshape(out, s), bnd - 1
        b2 = batching.moveaxis(b, db, bnd - 3)              # (..., B, m, n)
        s = _shape(b2)
        flat = reshape(b2, s[:-3] + (s[-3] * s[-2], s[-1]))
        out = triangular_solve_p.bind(a, flat, **params)
        return reshape(out, s), bnd - 3
    a = batching.bdim_at_front(a, da, size)
    b = batching.bdim_at_front(b, db, size)
    return triangular_solve_p.bind(a, b, **params), 0


batching.batch_rules[triangular_solve_p] = _ts_batch


def triangular_solve(a, b, *, left_side: bool = False, lower: bool = False,
                     transpose_a: bool = False, conjugate_a: bool = False,
                     unit_diagonal: bool = False):
    """Solve ``op(a) x = b`` (``left_side``) or ``x op(a) = b`` for triangular ``a``; only the
    ``lower``/upper triangle of ``a`` is read (its diagonal is taken as ones with
    ``unit_diagonal``). ``op`` transposes and/or conjugates. ``b`` may be a batch of vectors
    (rank one less than ``a``)."""
    conjugate_a = bool(conjugate_a) and _is_complex(a)
    singleton = _ndim(b) == _ndim(a) - 1
    if singleton:
        b = expand_dims(b, (_ndim(b) if left_side else _ndim(b) - 1,))
    out = triangular_solve_p.bind(a, b, left_side=bool(left_side), lower=bool(lower),
                                  transpose_a=bool(transpose_a), conjugate_a=conjugate_a,
                                  unit_diagonal=bool(unit_diagonal))
    if singleton:
        s = _shape(out)
        out = reshape(out, s[:-1] if left_side else s[:-2] + s[-1:])
    return out


# ================================================================================================
# geqrf, schur, hessenberg, householder_product (no derivatives, as in JAX)


def _geqrf_abstract_eval(a):
    _check_lapack("geqrf", a)
    _check_matrix("geqrf", a)
    m, n = a.shape[-2:]
    return [ShapedArray(a.shape, a.dtype, a.weak_type),
            ShapedArray(a.shape[:-2] + (min(m, n),), a.dtype, a.weak_type)]


@_quiet_linalg
def _geqrf_impl(a):
    dt = a.dtype
    w = _work(a)
    m, n = a.shape[-2:]
    if w.size == 0:
        return [np.zeros(a.shape, dt), np.zeros(a.shape[:-2] + (min(m, n),), dt)]
    geqrf, = _lapack.get_lapack_funcs(("geqrf",), (w,))

    def one(x):
        qr_, tau, _work_, _info = geqrf(x)
        return qr_, np.asarray(tau)[:min(m, n)]
    h, tau = _each_matrix(one, w)
    return [h.astype(dt, copy=False), tau.astype(dt, copy=False)]


geqrf_p = standard_primitive("geqrf", _geqrf_abstract_eval, _geqrf_impl,
                             weak_type_rule=lambda w: [w, w], multiple_results=True)
_front_batcher(geqrf_p)


def geqrf(a):
    """LAPACK's Householder QR in packed form: ``(a, taus)`` with ``R`` in the upper triangle
    and the reflectors below it."""
    return tuple(geqrf_p.bind(a))
# ================================================================================================

def _schur_abstract_eval(x, *, compute_schur_vectors, sort_eig_vals, select_callable):
    _check_lapack("schur", x)
    _check_square("schur", x)
    out = ShapedArray(x.shape, x.dtype, x.weak_type)
    return [out, out] if compute_schur_vectors else [out]


@_quiet_linalg
def _schur_impl(x, *, compute_schur_vectors, sort_eig_vals, select_callable):
    dt = x.dtype
    w = _work(x)
    output = "complex" if w.dtype.kind == "c" else "real"

    def one(m):
        if not np.all(np.isfinite(m)):
            return _nan_fill(m.shape, m.dtype), _nan_fill(m.shape, m.dtype)
        if sort_eig_vals and select_callable is not None:
            t, z, _ = _sla.schur(m, output=output, sort=select_callable, check_finite=False)
        else:
            t, z = _sla.schur(m, output=output, check_finite=False)
        return t, z
    if w.size == 0:
        outs = [np.zeros(x.shape, dt), np.zeros(x.shape, dt)]
    else:
        outs = _each_matrix(one, w)
    outs = [o.astype(dt, copy=False) for o in outs]
    return outs if compute_schur_vectors else outs[:1]


schur_p = standard_primitive(
    "schur", _schur_abstract_eval, _schur_impl,
    weak_type_rule=lambda w, *, compute_schur_vectors, **_: [w] * (1 + compute_schur_vectors),
    multiple_results=True)
_front_batcher(schur_p)


def schur(x, *, compute_schur_vectors: bool = True, sort_eig_vals: bool = False,
          select_callable=None):
    """Schur decomposition ``x = Z T Z^H``: returns ``(T, Z)`` (``T`` quasi-triangular for
    real input). With ``sort_eig_vals``, eigenvalues selected by ``select_callable`` come
    first."""
    outs = schur_p.bind(x, compute_schur_vectors=bool(compute_schur_vectors),
                        sort_eig_vals=bool(sort_eig_vals), select_callable=select_callable)
    return tuple(outs)


def _hessenberg_abstract_eval(a):
    _check_lapack("hessenberg", a)
    _check_square("hessenberg", a)
    n = a.shape[-1]
    return [ShapedArray(a.shape, a.dtype, a.weak_type),
            ShapedArray(a.shape[:-2] + (max(n - 1, 0),), a.dtype, a.weak_type)]


@_quiet_linalg
def _hessenberg_impl(a):
    dt = a.dtype
    w = _work(a)
    n = a.shape[-1]
    if w.size == 0:
        return [np.zeros(a.shape, dt), np.zeros(a.shape[:-2] + (max(n - 1, 0),), dt)]
    gehrd, = _lapack.get_lapack_funcs(("gehrd",), (w,))

    def one(m):
        if n == 1:
            return m.copy(), np.zeros((0,), m.dtype)
        h, tau, _info = gehrd(m)
        return h, np.asarray(tau)[:n - 1]
    h, tau = _each_matrix(one, w)
    return [h.astype(dt, copy=False), tau.astype(dt, copy=False)]


hessenberg_p = standard_primitive("hessenberg", _hessenberg_abstract_eval, _hessenberg_impl,
                                  weak_type_rule=lambda w: [w, w], multiple_results=True)
_front_batcher(hessenberg_p)


def hessenberg(a):
    """Reduce square matrices to upper Hessenberg form: returns ``(a, taus)`` in LAPACK's packed
    form (``H`` in the upper Hessenberg part, Householder reflectors below)."""
    return tuple(hessenberg_p.bind(a))


def _hp_abstract_eval(a, taus):
    _check_lapack("householder_product", a)
    if a.ndim < 2 or taus.ndim != a.ndim - 1 or a.shape[:-2] != taus.shape[:-1]:
        raise ValueError("householder_product requires a [..., m, n] and taus [..., k], got "
                         f"{a.shape} and {taus.shape}")
    m, n = a.shape[-2:]
    if not (m >= n >= taus.shape[-1]):
        raise ValueError("householder_product requires m >= n >= k, got a of shape "
                         f"{a.shape} and taus of shape {taus.shape}")
    if a.dtype != taus.dtype:
        raise TypeError("householder_product requires a and taus of equal dtypes")
    return ShapedArray(a.shape, a.dtype, a.weak_type)


@_quiet_linalg
def _hp_impl(a, taus):
    dt = a.dtype
    wa, wt = _work(a), _work(taus)
    if wa.size == 0:
        return np.zeros(a.shape, dt)
    name = "ungqr" if wa.dtype.kind == "c" else "orgqr"
    orgqr, = _lapack.get_lapack_funcs((name,), (wa,))
    batch = wa.shape[:-2]
    fa = wa.reshape((-1,) + wa.shape[-2:])
    ft = wt.reshape((-1, wt.shape[-1]))
    outs = []
    for i in range(fa.shape[0]):
        m, n = fa[i].shape
        if ft.shape[-1] == 0:
            outs.append(np.eye(m, n, dtype=fa.dtype))
            continue
        q, _work_, _info = orgqr(fa[i], ft[i])
        outs.append(q)
    return np.stack(outs).reshape(batch + wa.shape[-2:]).astype(dt, copy=False)


householder_product_p = standard_primitive("householder_product", _hp_abstract_eval, _hp_impl)
_front_batcher(householder_product_p)


def householder_product(a, taus):
    """The product of Householder reflectors ``(I - tau_i v_i v_i^H)`` stored LAPACK-style in
    ``a`` (``[..., m, n]``, ``m >= n``) and ``taus``: the first ``n`` columns of ``Q``."""
    return householder_product_p.bind(a, taus)


def ormqr(a, taus, c, *, left: bool = True, transpose: bool = False):
    """Multiply ``c`` by the ``Q`` of a Householder QR factorization (``lax.linalg.ormqr``).

    ``a`` (``[..., m, n]``) and ``taus`` (``[..., k]``) are ``geqrf``'s packed reflectors;
    the result is ``Q @ c`` (``left``) or ``c @ Q``, with ``Q`` replaced by its (conjugate)
    transpose when ``transpose``; ``c`` is ``[..., m, p]`` (``left``) or ``[..., p, m]``,
    and the result has its shape. ``Q`` (``m x m``) is formed from the reflectors with
    :func:`householder_product` and applied with a highest-precision matmul, so the
    function runs eagerly and under ``jit``/``vmap``/``grad``.
    """
    a, taus, c = (_as_operand(v) for v in (a, taus, c))
    sa, sc = get_aval(a).shape, get_aval(c).shape
    if len(sa) < 2 or len(sc) < 2:
        raise ValueError(f"ormqr expects a and c of rank >= 2, got shapes {sa} and {sc}")
    m, n = sa[-2:]
    if left and sc[-2] != m:
        raise ValueError(
            "ormqr with left=True expects c to have the same number of rows as the "
            f"Householder matrix a. Got a shape {tuple(sa[-2:])} and c shape "
            f"{tuple(sc[-2:])}.")
    if not left and sc[-1] != m:
        raise ValueError(
            "ormqr with left=False expects c to have the same number of columns as the "
            f"Householder matrix a has rows. Got a shape {tuple(sa[-2:])} and c shape "
            f"{tuple(sc[-2:])}.")
    nb = len(sa) - 2
    # the reflectors in an m x m matrix (columns past n are zero; past m unused)
    if n < m:
        a = pad(a, full((), 0, get_aval(a).dtype), [(0, 0, 0)] * nb + [(0, 0, 0),
                                                                       (0, m - n, 0)])
    elif n > m:
        a = _slice(a, (0,) * (nb + 2), tuple(sa[:-1]) + (m,))
    k = get_aval(taus).shape[-1]
    if k > m:
        taus = _slice(taus, (0,) * (nb + 1), tuple(get_aval(taus).shape[:-1]) + (m,))
    q = householder_product(a, taus)
    if transpose:
        q = _T(q)
        if dtypes.issubdtype(get_aval(q).dtype, np.complexfloating):
            q = conj(q)
    batch = tuple(range(nb))
    from kiln.lax.dot import Precision
    if left:    # q [..., m, m] @ c [..., m, p]
        return dot_general(q, c, (((nb + 1,), (nb,)), (batch, batch)),
                           precision=Precision.HIGHEST)
    return dot_general(c, q, (((nb + 1,), (nb,)), (batch, batch)),
                       precision=Precision.HIGHEST)


def symmetric_product(a_matrix, c_matrix, *, alpha: float = 1., beta: float = 0.,
                      symmetrize_output: bool = False):
    """``alpha * A @ A^T + beta * C`` (``lax.linalg.symmetric_product``) for ``A``
    ``[..., m, n]`` and a symmetric ``C`` ``[..., m, m]``, with a highest-precision matmul.

    Every entry is computed (JAX's CPU result); JAX guarantees only the lower triangle on
    other platforms. ``symmetrize_output`` replaces the upper triangle with the transpose
    of the lower one."""
    a, c = _as_operand(a_matrix), _as_operand(c_matrix)
    sa, sc = get_aval(a).shape, get_aval(c).shape
    for name, x in (("symmetric_product", a), ("symmetric_product", c)):
        if not dtypes.issubdtype(get_aval(x).dtype, np.floating):
            raise TypeError(f"{name} requires floating-point operands, got "
                            f"{np.dtype(get_aval(x).dtype).name}")
    if len(sa) < 2 or len(sc) < 2 or sa[-2] != sc[-1] or sc[-2] != sc[-1] \
            or tuple(sa[:-2]) != tuple(sc[:-2]):
        raise ValueError("symmetric_update expects a rectangular matrix of shape (m, n) and "
                         f"a square matrix of shape (n, n). Got shapes {tuple(sa)} and "
                         f"{tuple(sc)}.")
    from kiln.lax.dot import Precision
    nb = len(sa) - 2
    batch = tuple(range(nb))
    aat = dot_general(a, a, (((nb + 1,), (nb + 1,)), (batch, batch)),
                      precision=Precision.HIGHEST)
    out = add(mul(full_like(aat, alpha), aat), mul(full_like(c, beta), c))
    if symmetrize_output:
        out = add(_tril(out), _T(_tril(out, -1)))
    return out


def _as_operand(x):
    from kiln.array import Array, to_array
    from kiln.core.trace import Tracer
    return x if isinstance(x, (Array, Tracer)) else to_array(x)


from kiln.lax.tridiagonal import tridiagonal_solve  # noqa: E402,F401
