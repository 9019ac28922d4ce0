"""``kiln.scipy.linalg`` (``jax.scipy.linalg``): SciPy-style linear algebra.

Built on ``kiln.lax.linalg`` and ``kiln.numpy.linalg``. Leading batch dimensions
broadcast (as JAX's ``vectorize`` signatures do). ``overwrite_*``/``check_finite``
arguments are accepted and ignored. ``expm`` is Higham's scaling-and-squaring Padé
method written with ``lax.switch``/``lax.scan``/``lax.cond``, so it is differentiable
(``expm_frechet`` is its JVP) and works under ``jit``/``vmap``.
"""
from __future__ import annotations

import warnings

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import get_aval
from kiln.custom_derivatives import custom_jvp
from kiln.lax import linalg as lax_linalg
from kiln.numpy import linalg as jnp_linalg
from kiln.numpy._util import check_arraylike, promote_dtypes, promote_dtypes_inexact

__all__ = ["block_diag", "cho_factor", "cho_solve", "cholesky", "circulant", "companion",
           "convolution_matrix", "det", "dft", "eigh", "expm", "expm_frechet", "fiedler",
           "fiedler_companion", "hadamard", "hankel", "helmert", "hessenberg", "hilbert",
           "inv", "invhilbert", "invpascal", "leslie", "lu", "lu_factor", "lu_solve",
           "pascal", "polar", "qr", "schur", "solve", "solve_sylvester", "solve_triangular",
           "sqrtm", "svd", "toeplitz", "funm", "qr_multiply", "rsf2csf"]


from kiln.numpy.linalg import jnp  # noqa: E402  (lazy kiln.numpy proxy, shared)
from kiln.scipy._linalg_matrices import (  # noqa: E402,F401
    convolution_matrix,
    fiedler_companion,
    hadamard,
    helmert,
    invhilbert,
    invpascal,
    leslie,
    pascal,
)
from kiln.scipy._linalg_schur import funm, qr_multiply, rsf2csf  # noqa: E402,F401


def _shape(x):
    return get_aval(x).shape


def _ndim(x):
    return len(get_aval(x).shape)


def _dtype(x):
    return get_aval(x).dtype


def _H(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _bcast(a, b, a_core, b_core):
    """Broadcast the batch dimensions of ``a`` and ``b`` (all but the ``*_core`` trailing)."""
    sa, sb = _shape(a), _shape(b)
    batch = tuple(np.broadcast_shapes(sa[:len(sa) - a_core], sb[:len(sb) - b_core]))
    a = jnp.broadcast_to(a, batch + sa[len(sa) - a_core:])
    b = jnp.broadcast_to(b, batch + sb[len(sb) - b_core:])
    return a, b


def _rhs_kind(name, a, b):
    """``True`` when ``b`` is (a batch of) vectors in a ``(n,n),(n)`` signature."""
    if _ndim(b) == 1:
        return True
    if _ndim(a) == _ndim(b) + 1 and _shape(a)[-1] == _shape(b)[-1]:
        warnings.warn(
            f"jax.scipy.linalg.{name}: batched 1D solves with b.ndim > 1 are deprecated, and "
            "in the future will be treated as a batched 2D solve. Use "
            f"{name}(..., b[..., None]).squeeze(-1) to avoid this warning.",
            category=FutureWarning, stacklevel=3)
        return True
    return False


def _batched_tri_solve(a, b, **params):
    """``lax.linalg.triangular_solve(left_side=True)`` with broadcast batch dims; ``b`` a
    vector or a matrix per batch element."""
    vec = _rhs_kind("solve_triangular", a, b)
    if vec:
        a, b = _bcast(a, b, 2, 1)
        b = b[..., None]
    else:
        a, b = _bcast(a, b, 2, 2)
    x = lax_linalg.triangular_solve(a, b, left_side=True, **params)
    return x[..., 0] if vec else x


# ----------------------------------------------------------------------------------------------
# triangular and Cholesky solves


def solve_triangular(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False,
                     overwrite_b: bool = False, debug=None, check_finite: bool = True):
    """Solve ``op(a) x = b`` for triangular ``a`` (``trans``: 0/'N', 1/'T', 2/'C')."""
    if trans == 0 or trans == "N":
        transpose_a, conjugate_a = False, False
    elif trans == 1 or trans == "T":
        transpose_a, conjugate_a = True, False
    elif trans == 2 or trans == "C":
        transpose_a, conjugate_a = True, True
    else:
        raise ValueError(f"Invalid 'trans' value {trans}")
    check_arraylike("solve_triangular", a, b)
    a, b = promote_dtypes_inexact(a, b)
    return _batched_tri_solve(a, b, lower=bool(lower), transpose_a=transpose_a,
                              conjugate_a=conjugate_a, unit_diagonal=bool(unit_diagonal))


def cholesky(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """Cholesky factor (upper by default, as SciPy); only the referenced triangle is read."""
    check_arraylike("cholesky", a)
    a, = promote_dtypes_inexact(a)
    L = lax_linalg.cholesky(a if lower else _H(a), symmetrize_input=False)
    return L if lower else _H(L)


def cho_factor(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """``(c, lower)`` for ``cho_solve``."""
    return (cholesky(a, lower=lower), lower)


def cho_solve(c_and_lower, b, overwrite_b: bool = False, check_finite: bool = True):
    """Solve ``A x = b`` given the Cholesky factorization ``(c, lower)`` of ``A``."""
    c, lower = c_and_lower
    check_arraylike("cho_solve", c, b)
    c, b = promote_dtypes_inexact(c, b)
    # A = L L^H (lower) or U^H U (upper): solve with the first factor, then the second.
    y = _batched_tri_solve(c, b, lower=lower, transpose_a=not lower, conjugate_a=not lower,
                           unit_diagonal=False)
    return _batched_tri_solve(c, y, lower=lower, transpose_a=lower, conjugate_a=lower,
                              unit_diagonal=False)


# ----------------------------------------------------------------------------------------------
# LU


def lu_factor(a, overwrite_a: bool = False, check_finite: bool = True):
    """``(lu, piv)``: packed LU factors and (0-based) row-swap pivots."""
    check_arraylike("lu_factor", a)
    a, = promote_dtypes_inexact(a)
    lu_, pivots, _ = lax_linalg.lu(a)
    return lu_, pivots


def lu_solve(lu_and_piv, b, trans: int = 0, overwrite_b: bool = False,
             check_finite: bool = True):
    """Solve ``A x = b`` (``trans`` 0), ``A^T x = b`` (1) or ``A^H x = b`` (2) from
    ``lu_factor``'s output."""
    lu_, pivots = lu_and_piv
    check_arraylike("lu_solve", lu_, b)
    lu_, b = promote_dtypes_inexact(lu_, b)
    m = _shape(lu_)[-2]
    perm = lax_linalg.lu_pivots_to_permutation(pivots, m)
    vec = _rhs_kind("lu_solve", lu_, b)
    if vec:
        lu_, b = _bcast(lu_, b, 2, 1)
        b = b[..., None]
    else:
        lu_, b = _bcast(lu_, b, 2, 2)
    perm = jnp.broadcast_to(perm, _shape(lu_)[:-1])
    x = lax_linalg.lu_solve(lu_, perm, b, trans=trans)
    return x[..., 0] if vec else x


def lu(a, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """LU decomposition with partial pivoting: ``(p, l, u)`` with ``a = p @ l @ u``, or
    ``(p @ l, u)`` with ``permute_l``."""
    check_arraylike("lu", a)
    a, = promote_dtypes_inexact(a)
    lu_, _, permutation = lax_linalg.lu(a)
    dtype = _dtype(a)
    m, n = _shape(a)[-2:]
    k = min(m, n)
    # p[i, j] = (perm[j] == i): the transpose of the row permutation
    p = (permutation[..., None, :] == jnp.arange(m, dtype=permutation.dtype)[:, None])
    p = p.astype(dtype)
    l_ = jnp.tril(lu_, -1)[..., :, :k] + jnp.eye(m, k, dtype=dtype)
    u = jnp.triu(lu_)[..., :k, :]
    if permute_l:
        return jnp.matmul(p, l_), u
    return p, l_, u


# ----------------------------------------------------------------------------------------------
# solve, inv, det and the decompositions


def _pos_solve_impl(a, b, lower):
    c = cholesky(a, lower=lower)
    return cho_solve((c, lower), b)


_pos_solve = custom_jvp(_pos_solve_impl, nondiff_argnums=(2,))


@_pos_solve.defjvp
def _pos_solve_jvp(lower, primals, tangents):
    a, b = primals
    da, db = tangents
    c = cholesky(a, lower=lower)
    x = cho_solve((c, lower), b)
    return x, cho_solve((c, lower), db - jnp.matmul(da, x))


def solve(a, b, lower: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
          debug: bool = False, check_finite: bool = True, assume_a: str = "gen"):
    """Solve ``a x = b``. ``assume_a='pos'`` uses a Cholesky factorization (of the ``lower``
    or upper triangle); ``'gen'``, ``'sym'`` and ``'her'`` use LU."""
    valid = ["gen", "sym", "her", "pos"]
    if assume_a not in valid:
        raise ValueError(f"Expected assume_a to be one of {valid}; got {assume_a!r}")
    if assume_a != "pos":
        return jnp_linalg.solve(a, b)
    check_arraylike("solve", a, b)
    a, b = promote_dtypes_inexact(a, b)
    sa, sb = _shape(a), _shape(b)
    if not (len(sa) >= 2 and len(sb) in (len(sa), len(sa) - 1) and
            sa[-1] == sa[-2] == sb[len(sa) - 2]):
        raise ValueError("The arguments to solve must have shapes a=[..., m, m] and "
                         f"b=[..., m, k] or b=[..., m]; got a={sa} and b={sb}")
    vec = len(sa) == len(sb) + 1
    if vec:
        b = b[..., None]
    a, b = _bcast(a, b, 2, 2)
    x = _pos_solve(a, b, bool(lower))
    return x[..., 0] if vec else x


def inv(a, overwrite_a: bool = False, check_finite: bool = True):
    """Matrix inverse."""
    return jnp_linalg.inv(a)


def det(a, overwrite_a: bool = False, check_finite: bool = True):
    """Determinant."""
    return jnp_linalg.det(a)


def svd(a, full_matrices: bool = True, compute_uv: bool = True, overwrite_a: bool = False,
        check_finite: bool = True, lapack_driver: str = "gesdd"):
    """``(u, s, vh)`` (or ``s``) as ``scipy.linalg.svd``."""
    check_arraylike("svd", a)
    a, = promote_dtypes_inexact(a)
    return lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def eigh(a, b=None, lower: bool = True, eigvals_only: bool = False, overwrite_a: bool = False,
         overwrite_b: bool = False, turbo: bool = True, eigvals=None, type: int = 1,  # noqa: A002
         check_finite: bool = True):
    """Eigenvalues (ascending) and eigenvectors of a Hermitian matrix (the standard problem
    only: ``b=None``, ``type=1``, ``eigvals=None``)."""
    if b is not None:
        raise NotImplementedError("Only the b=None case of eigh is implemented")
    if type != 1:
        raise NotImplementedError("Only the type=1 case of eigh is implemented.")
    if eigvals is not None:
        raise NotImplementedError("Only the eigvals=None case of eigh is implemented.")
    check_arraylike("eigh", a)
    a, = promote_dtypes_inexact(a)
    v, w = lax_linalg.eigh(a, lower=lower)
    return w if eigvals_only else (w, v)


def qr(a, overwrite_a: bool = False, lwork=None, mode: str = "full", pivoting: bool = False,
       check_finite: bool = True):
    """QR decomposition; ``mode`` in ``'full'``, ``'economic'``, ``'r'``. Returns ``(q, r)``,
    ``(q, r, p)`` with ``pivoting``, ``(r,)`` or ``(r, p)`` for ``mode='r'``."""
    if mode in ("full", "r"):
        full_matrices = True
    elif mode == "economic":
        full_matrices = False
    else:
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    check_arraylike("qr", a)
    a, = promote_dtypes_inexact(a)
    q, r, *p = lax_linalg.qr(a, pivoting=pivoting, full_matrices=full_matrices)
    if mode == "r":
        return (r, p[0]) if pivoting else (r,)
    return (q, r, p[0]) if pivoting else (q, r)


def schur(a, output: str = "real"):
    """Schur decomposition ``a = Z T Z^H``: ``(T, Z)``; ``output='complex'`` gives the
    triangular complex form. Not differentiable (as in JAX)."""
    if output not in ("real", "complex"):
        raise ValueError(f"Expected 'output' to be either 'real' or 'complex', got "
                         f"output={output!r}.")
    check_arraylike("schur", a)
    a = jnp.asarray(a)
    if output == "complex":
        a = a.astype(dtypes.to_complex_dtype(_dtype(a)))
    return lax_linalg.schur(a)


def hessenberg(a, *, calc_q: bool = False, overwrite_a: bool = False,
               check_finite: bool = True):
    """Upper Hessenberg form ``h`` of ``a`` (and ``q`` with ``a = q h q^H`` if ``calc_q``)."""
    check_arraylike("hessenberg", a)
    a = jnp.asarray(a)
    n = _shape(a)[-1]
    if n == 0:
        return (jnp.zeros_like(a), jnp.zeros_like(a)) if calc_q else jnp.zeros_like(a)
    a_out, taus = lax_linalg.hessenberg(a)
    h = jnp.triu(a_out, -1)
    if not calc_q:
        return h
    dt = _dtype(a_out)
    batch = _shape(a_out)[:-2]
    if n == 1:
        return h, jnp.ones(batch + (1, 1), dt)
    q = lax_linalg.householder_product(a_out[..., 1:, :-1], taus)
    top = jnp.concatenate([jnp.ones(batch + (1, 1), dt), jnp.zeros(batch + (1, n - 1), dt)],
                          axis=-1)
    bottom = jnp.concatenate([jnp.zeros(batch + (n - 1, 1), dt), q], axis=-1)
    return h, jnp.concatenate([top, bottom], axis=-2)


def polar(a, side: str = "right", *, method: str = "qdwh", eps=None, max_iterations=None):
    """Polar decomposition: ``a = u p`` (``side='right'``, ``p`` is ``n x n``) or ``a = p u``
    (``'left'``, ``p`` is ``m x m``), ``u`` unitary and ``p`` Hermitian positive
    semi-definite.

    ``method='qdwh'`` (the default) runs the QR-based dynamically weighted Halley
    iteration (:mod:`kiln.scipy._qdwh`, JAX's algorithm and weights; ``eps`` sets its
    tolerance); it needs ``m >= n`` with ``side='right'`` or ``m < n`` with
    ``side='left'``. ``method='svd'`` builds the factors from the SVD. As in JAX 0.10.2,
    ``max_iterations`` is accepted but not passed on (QDWH stops after at most 10).
    Leading dimensions are batch dimensions."""
    arr = jnp.asarray(a)
    if _ndim(arr) < 2:
        raise ValueError("The input `a` must be at least a 2-D array.")
    if side not in ("right", "left"):
        raise ValueError("The argument `side` must be either 'right' or 'left'.")
    if method not in ("qdwh", "svd"):
        raise ValueError(f"Unknown polar decomposition method {method}.")
    m, n = _shape(arr)[-2:]
    if method == "qdwh" and not ((m >= n and side == "right") or (m < n and side == "left")):
        raise NotImplementedError("method='qdwh' only supports mxn matrices where m < n where "
                                  "side='right' and m >= n side='left', got "
                                  f"{_shape(arr)} with side={side!r}")
    arr, = promote_dtypes_inexact(arr)
    if method == "qdwh":
        from kiln.scipy._qdwh import qdwh

        def one(x):
            if side == "right":
                u, p, _, _ = qdwh(x, eps=eps)
                return u, p
            u, p, _, _ = qdwh(_H(x), eps=eps)
            return _H(u), _H(p)

        sig = "(m,n)->(m,n),(n,n)" if side == "right" else "(m,n)->(m,n),(m,m)"
        return jnp.vectorize(one, signature=sig)(arr)
    u, s, vh = lax_linalg.svd(arr, full_matrices=False)
    s = s.astype(_dtype(u))
    unitary = jnp.matmul(u, vh)
    if side == "right":
        posdef = jnp.matmul(_H(vh) * s[..., None, :], vh)
    else:
        posdef = jnp.matmul(u * s[..., None, :], _H(u))
    return unitary, posdef


def _sqrtm_triu(T):
    """Square root of upper triangular ``T`` (column by column: the strict upper part of
    column ``j`` solves ``(U[:j, :j] + U_jj I) x = T[:j, j]``)."""
    n = _shape(T)[-1]
    diag = jnp.sqrt(jnp.diagonal(T, axis1=-2, axis2=-1))
    U = jnp.zeros_like(T)
    U = U + jnp.eye(n, dtype=_dtype(T)) * diag[..., None, :]
    for j in range(1, n):
        block = U[..., :j, :j] + jnp.eye(j, dtype=_dtype(T)) * diag[..., j, None, None]
        col = lax_linalg.triangular_solve(block, T[..., :j, j:j + 1], left_side=True,
                                          lower=False)
        U = U.at[..., :j, j].set(col[..., 0])
    return U


def sqrtm(A, blocksize: int = 1):
    """Principal matrix square root via the complex Schur form (complex result)."""
    if blocksize > 1:
        raise NotImplementedError("Blocked version is not implemented yet.")
    T, Z = schur(A, output="complex")
    return jnp.matmul(jnp.matmul(Z, _sqrtm_triu(T)), _H(Z))


# ----------------------------------------------------------------------------------------------
# expm


# Padé coefficients b_k of the [m/m] approximant of exp (Higham 2005, "The scaling and
# squaring method for the matrix exponential revisited").
_PADE = {
    3: (120., 60., 12., 1.),
    5: (30240., 15120., 3360., 420., 30., 1.),
    7: (17297280., 8648640., 1995840., 277200., 25200., 1512., 56., 1.),
    9: (17643225600., 8821612800., 2075673600., 302702400., 30270240., 2162160., 110880.,
        3960., 90., 1.),
    13: (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
         129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
         40840800., 960960., 16380., 182., 1.),
}
# The largest 1-norms for which each degree reaches unit roundoff, per precision.
_THETA64 = (1.495585217958292e-2, 2.539398330063230e-1, 9.504178996162932e-1,
            2.097847961257068e0)
_MAXNORM64 = 5.371920351148152
_THETA32 = (4.258730016922831e-1, 1.880152677804762e0)
_MAXNORM32 = 3.925724783138660


def _pade(m):
    b = _PADE[m]

    def uv(A):
        n = _shape(A)[-1]
        ident = jnp.eye(n, dtype=_dtype(A))
        mm = jnp.matmul
        A2 = mm(A, A)
        if m == 13:
            A4 = mm(A2, A2)
            A6 = mm(A4, A2)
            U = mm(A, mm(A6, b[13] * A6 + b[11] * A4 + b[9] * A2) +
                   b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * ident)
            V = mm(A6, b[12] * A6 + b[10] * A4 + b[8] * A2) + \
                b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * ident
            return U, V
        powers = [ident, A2]
        for _ in range(2, m // 2 + 1):
            powers.append(mm(powers[-1], A2))
        odd = sum(b[2 * k + 1] * powers[k] for k in range(len(powers)))
        even = sum(b[2 * k] * powers[k] for k in range(len(powers)))
        return mm(A, odd), even
    return uv


def _calc_P_Q(A):
    A_L1 = jnp_linalg.norm(A, 1)
    if _dtype(A) in (np.float64, np.complex128):
        maxnorm, conds, degrees = _MAXNORM64, _THETA64, (3, 5, 7, 9, 13)
    elif _dtype(A) in (np.float32, np.complex64):
        maxnorm, conds, degrees = _MAXNORM32, _THETA32, (3, 5, 7)
    else:
        raise TypeError(f"A.dtype={_dtype(A)} is not supported.")
    n_squarings = jnp.maximum(0, jnp.floor(jnp.log2(A_L1 / maxnorm)))
    A = A / (2 ** n_squarings).astype(_dtype(A))
    idx = sum((A_L1 >= c).astype(np.int32) for c in conds)
    U, V = lax.switch(idx, [_pade(m) for m in degrees], A)
    return U + V, -U + V, n_squarings


def _expm_2d(A, upper_triangular, max_squarings):
    P, Q, n_squarings = _calc_P_Q(A)

    def nan(args):
        return jnp.full_like(args[0], np.nan)

    def compute(args):
        _, P, Q = args
        R = solve_triangular(Q, P) if upper_triangular else jnp_linalg.solve(Q, P)

        def step(c, i):
            return lax.cond(i < n_squarings, lambda x: jnp.matmul(x, x), lambda x: x, c), None
        R, _ = lax.scan(step, R, jnp.arange(max_squarings, dtype=_dtype(n_squarings)))
        return R
    return lax.cond(n_squarings > max_squarings, nan, compute, (A, P, Q))


def expm(A, *, upper_triangular: bool = False, max_squarings: int = 16):
    """Matrix exponential (scaling and squaring with Padé approximants of degree 3 to 13 for
    64-bit, 3 to 7 for 32-bit types). NaNs when more than ``max_squarings`` squarings would
    be needed."""
    check_arraylike("expm", A)
    A, = promote_dtypes_inexact(A)
    s = _shape(A)
    if len(s) < 2 or s[-1] != s[-2]:
        raise ValueError(f"Expected A to be a (batched) square matrix, got A.shape={s}.")
    if len(s) > 2:
        from kiln.transformations import vmap
        flat = jnp.reshape(A, (-1,) + s[-2:])
        out = vmap(lambda x: _expm_2d(x, upper_triangular, max_squarings))(flat)
        return jnp.reshape(out, s)
    return _expm_2d(A, upper_triangular, max_squarings)


def expm_frechet(A, E, *, method=None, compute_expm: bool = True):
    """Fréchet derivative of ``expm`` at ``A`` in direction ``E`` (with ``expm(A)`` unless
    ``compute_expm=False``)."""
    from kiln.transformations import jvp
    A_arr, E_arr = jnp.asarray(A), jnp.asarray(E)
    if _ndim(A_arr) < 2 or _shape(A_arr)[-2] != _shape(A_arr)[-1]:
        raise ValueError(f"expected A to be a (batched) square matrix, got "
                         f"A.shape={_shape(A_arr)}")
    if _ndim(E_arr) < 2 or _shape(E_arr)[-2] != _shape(E_arr)[-1]:
        raise ValueError(f"expected E to be a (batched) square matrix, got "
                         f"E.shape={_shape(E_arr)}")
    if _shape(A_arr) != _shape(E_arr):
        raise ValueError("expected A and E to be the same shape, got "
                         f"A.shape={_shape(A_arr)} E.shape={_shape(E_arr)}")
    A_arr, E_arr = promote_dtypes_inexact(A_arr, E_arr)
    expm_A, frechet = jvp(lambda x: expm(x), (A_arr,), (E_arr,))
    return (expm_A, frechet) if compute_expm else frechet


# ----------------------------------------------------------------------------------------------
# special matrices


def block_diag(*arrs):
    """Block-diagonal matrix from 0-, 1- or 2-D blocks."""
    if len(arrs) == 0:
        arrs = (jnp.zeros((1, 0)),)
    check_arraylike("block_diag", *arrs)
    arrs = tuple(promote_dtypes(*arrs))
    bad = [i for i, a in enumerate(arrs) if _ndim(a) > 2]
    if bad:
        raise ValueError("Arguments to jax.scipy.linalg.block_diag must have at most 2 "
                         f"dimensions, got {arrs[bad[0]]} at argument {bad[0]}.")
    arrs = [jnp.atleast_2d(a) for a in arrs]
    dtype = _dtype(arrs[0])
    total = sum(_shape(a)[1] for a in arrs)
    rows, col = [], 0
    for a in arrs:
        cols = _shape(a)[1]
        rows.append(lax.pad(a, np.zeros((), dtype), ((0, 0, 0), (col, total - cols - col, 0))))
        col += cols
    return jnp.concatenate(rows, axis=0)


def _batch_vectors(c, r):
    c, r = jnp.atleast_1d(c), jnp.atleast_1d(r)
    c, r = promote_dtypes(c, r)
    return _bcast(c, r, 1, 1)


def toeplitz(c, r=None):
    """Toeplitz matrix with first column ``c`` and first row ``r`` (default ``conj(c)``);
    ``r[0]`` is ignored. Leading dimensions are batch dimensions."""
    if r is None:
        check_arraylike("toeplitz", c)
        r = jnp.conjugate(jnp.asarray(c))
    else:
        check_arraylike("toeplitz", c, r)
    c, r = _batch_vectors(c, r)
    m, n = _shape(c)[-1], _shape(r)[-1]
    if m == 0 or n == 0:
        return jnp.empty(_shape(c)[:-1] + (m, n), dtype=_dtype(c))
    elems = jnp.concatenate((jnp.flip(c, axis=-1), r[..., 1:]), axis=-1)
    idx = (m - 1) - np.arange(m)[:, None] + np.arange(n)[None, :]
    return elems[..., idx]


def hankel(c, r=None):
    """Hankel matrix with first column ``c`` and last row ``r`` (default zeros)."""
    if r is None:
        check_arraylike("hankel", c)
        c = jnp.asarray(c)
        r = jnp.zeros_like(c)
    else:
        check_arraylike("hankel", c, r)
    if _ndim(c) == 0:
        raise ValueError("hankel: c must be at least 1-dimensional, got a scalar.")
    if _ndim(r) == 0:
        raise ValueError("hankel: r must be at least 1-dimensional, got a scalar.")
    c, r = _batch_vectors(c, r)
    m, n = _shape(c)[-1], _shape(r)[-1]
    if m == 0 or n == 0:
        return jnp.empty(_shape(c)[:-1] + (m, n), dtype=_dtype(c))
    v = jnp.concatenate((c, r[..., 1:]), axis=-1)
    idx = np.arange(m)[:, None] + np.arange(n)[None, :]
    return v[..., idx]


def circulant(c):
    """Circulant matrix whose first column is ``c``."""
    check_arraylike("circulant", c)
    c = jnp.atleast_1d(jnp.asarray(c))
    n = _shape(c)[-1]
    idx = (np.arange(n)[:, None] - np.arange(n)[None, :]) % n
    return c[..., idx]


def companion(a):
    """Companion matrix of the polynomial with coefficients ``a`` (highest degree first)."""
    check_arraylike("companion", a)
    a, = promote_dtypes_inexact(jnp.atleast_1d(jnp.asarray(a)))
    if _shape(a)[-1] < 2:
        raise ValueError("The length of `a` along the last axis must be at least 2; got "
                         f"shape {_shape(a)}.")
    first_row = -a[..., 1:] / a[..., :1]
    m = _shape(a)[-1] - 1
    out = jnp.broadcast_to(jnp.eye(m, m, k=-1, dtype=_dtype(first_row)),
                           _shape(first_row)[:-1] + (m, m))
    return out.at[..., 0, :].set(first_row)


def fiedler(a):
    """Fiedler matrix ``|a_i - a_j|``."""
    check_arraylike("fiedler", a)
    arr = jnp.atleast_1d(jnp.asarray(a))
    return jnp.abs(arr[..., :, None] - arr[..., None, :])


def hilbert(n: int):
    """Hilbert matrix ``1 / (i + j + 1)``."""
    a = lax.broadcasted_iota(dtypes.default_float_dtype(), (n, 1), 0)
    return 1 / (a + a.T + 1)


def dft(n: int, scale: str | None = None, *, dtype=None):
    """Discrete Fourier transform matrix (``scale``: None, ``'sqrtn'`` or ``'n'``)."""
    if scale is not None and scale not in ("sqrtn", "n"):
        raise ValueError(f"scale must be None, 'sqrtn', or 'n'; got {scale!r}.")
    if dtype is None:
        dtype = dtypes.canonicalize_dtype(np.complex128)
    else:
        dtype = dtypes.check_and_canonicalize_user_dtype(dtype, "dft")
        if not dtypes.issubdtype(dtype, np.complexfloating):
            raise ValueError(f"dtype must be a complex floating-point type; got {dtype}.")
    a = jnp.arange(n, dtype=dtype)
    omegas = jnp.exp(-2j * np.pi * a[:, None] * a[None, :] / n)
    if scale == "sqrtn":
        omegas = omegas / jnp.sqrt(n)
    elif scale == "n":
        omegas = omegas / n
    return omegas


def _sylvester_triangular(r, s, f):
    """Solve ``r y + y s = f`` for upper-triangular ``r`` and lower-triangular ``s`` by
    back substitution over the entries of ``y``, last row and column first."""
    r, s, f = promote_dtypes_inexact(r, s, f)
    m, n = _shape(f)
    rows, cols = jnp.arange(m), jnp.arange(n)

    def step(y_flat, idx):
        i, j = idx // n, idx % n
        y = y_flat.reshape((m, n))
        # Entries below (i, j) in column j and right of it in row i are already solved.
        row_term = jnp.sum(jnp.where(rows > i, r[i, :] * y[:, j], 0.0))
        col_term = jnp.sum(jnp.where(cols > j, y[i, :] * s[:, j], 0.0))
        val = (f[i, j] - (row_term + col_term)) / (r[i, i] + s[j, j])
        return y_flat.at[i * n + j].set(val), None

    y_flat, _ = lax.scan(step, jnp.zeros((m * n,), _dtype(f)), jnp.arange(m * n - 1, -1, -1))
    return y_flat.reshape((m, n))


def _solve_sylvester_2d(a, b, c, *, method, tol):
    m, n = _shape(c)[-2:]
    if method == "schur":
        r, u = schur(a, output="complex")
        s, v = schur(_H(b), output="complex")
        f = _H(u) @ c.astype(_dtype(r)) @ v
        y = _sylvester_triangular(r, _H(s), f)
        x = u @ y @ _H(v)
    elif method == "eigen":
        ra, ua = jnp_linalg.eig(a)
        rb, ub = jnp_linalg.eig(b)
        f = solve(ua, c.astype(_dtype(ra)) @ ub)
        y = f / (ra[:, None] + rb[None, :])
        x = ua[:m, :m] @ y[:m, :n] @ inv(ub)[:n, :n]
    else:
        raise ValueError(f"Unrecognized method {method}. The two valid methods are either "
                         "\"schur\" or \"eigen\".")
    if not dtypes.issubdtype(_dtype(c), np.complexfloating):
        x = x.real
    near_singular = jnp.any(jnp.abs(jnp_linalg.eigvals(a)[:, None]
                                    + jnp_linalg.eigvals(b)[None, :]) < tol)
    return lax.cond(near_singular, lambda: jnp.zeros_like(x) * np.nan, lambda: x)


def _solve_sylvester(a, b, c, tol, *, method):
    a, b, c = promote_dtypes_inexact(jnp.asarray(a), jnp.asarray(b), jnp.asarray(c))
    m, n = _shape(c)[-2:]
    if _shape(a)[-2:] != (m, m) or _shape(b)[-2:] != (n, n):
        raise ValueError(f"Incompatible shapes for Sylvester equation:\nA: {_shape(a)}\n"
                         f"B: {_shape(b)}\nC: {_shape(c)}")

    def core(a2, b2, c2):
        return _solve_sylvester_2d(a2, b2, c2, method=method, tol=tol)
    return jnp.vectorize(core, signature="(m,m),(n,n),(m,n)->(m,n)")(a, b, c)


def solve_sylvester(A, B, C, *, method: str = "schur", tol: float = 1e-8):
    """Solve the Sylvester equation ``A @ X + X @ B = C`` for ``X``.

    Args:
      A: array of shape ``(..., m, m)``.
      B: array of shape ``(..., n, n)``.
      C: array of shape ``(..., m, n)``; batch dimensions of ``A``, ``B`` and ``C``
        broadcast.
      method: ``"schur"`` (default): the Bartels-Stewart algorithm on complex Schur forms
        of ``A`` and ``B^H``, robust also for defective matrices; or ``"eigen"``: solving in
        the eigenbases of ``A`` and ``B``, faster but inaccurate when they are
        ill-conditioned.
      tol: when some ``|eig(A)_i + eig(B)_j|`` is below ``tol`` the equation is treated as
        singular and the result is all NaN.

    Returns:
      The solution ``X``, of shape ``(..., m, n)`` and the promoted inexact dtype of the
      inputs (real for real inputs).
    """
    global _solve_sylvester_jit
    if _solve_sylvester_jit is None:
        from kiln.jitting import jit
        _solve_sylvester.__name__ = _solve_sylvester.__qualname__ = "solve_sylvester"
        _solve_sylvester_jit = jit(_solve_sylvester, static_argnames=("method",))
    return _solve_sylvester_jit(A, B, C, tol, method=method)


_solve_sylvester_jit = None
