"""Op records for ``kiln.lax.linalg`` (cholesky, eigh, eig, lu, qr, svd, triangular_solve,
lu_pivots_to_permutation, geqrf, schur, hessenberg, householder_product) and ``lax.fft``.

Decompositions are only unique up to conventions, so where a raw output is not a smooth
function of the input (eigenvector signs/phases of ``eigh``, complex SVD phases) the record
returns an invariant of it (a spectral function ``V f(w) V^H``, the reconstruction). Raw
outputs that LAPACK fixes smoothly (``L``, ``lu``, Householder ``Q``/``R``, real SVD
factors, ``geev`` eigenvectors under ``enable_eigvec_derivs``) are checked directly, so the
JVP rules are held to finite differences of the very factorization they describe.

Samplers give well-conditioned inputs with separated spectra (finite differences run in
float32). References are NumPy/SciPy.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from kiln import lax
from kiln.lax import linalg as L

try:  # tests/ is on sys.path under pytest; the repository root when run as a package
    from op_records import OpRecord, args_of
except ImportError:  # pragma: no cover
    from tests.op_records import OpRecord, args_of

# ----------------------------------------------------------------------------------------------
# samplers


def _orth(rng, n, cplx=False):
    a = rng.standard_normal((n, n))
    if cplx:
        a = a + 1j * rng.standard_normal((n, n))
    return np.linalg.qr(a)[0]


def spd(n, cplx=False, batch=()):
    """Hermitian positive definite with eigenvalues 1, 2, ..., n (well separated)."""
    def sample(rng):
        out = []
        for _ in range(int(np.prod(batch, dtype=int))):
            q = _orth(rng, n, cplx)
            out.append((q * (1.0 + np.arange(n))) @ q.conj().T)
        x = np.stack(out).reshape(batch + (n, n))
        return x.astype(np.complex64 if cplx else np.float32)
    return sample


def sym_gapped(n):
    """Symmetric (not definite) with eigenvalues spread by 1.5 around 0."""
    def sample(rng):
        q = _orth(rng, n)
        w = (np.arange(n) - (n - 1) / 2) * 1.5
        return ((q * w) @ q.T).astype(np.float32)
    return sample


def general(*shape, cplx=False):
    """A well-conditioned general matrix (Gaussian plus a multiple of the identity)."""
    def sample(rng):
        x = rng.standard_normal(shape)
        if cplx:
            x = x + 1j * rng.standard_normal(shape)
        m, n = shape[-2:]
        x = x + 2.0 * np.eye(m, n)
        return x.astype(np.complex64 if cplx else np.float32)
    return sample


def gaussian(*shape, cplx=False):
    def sample(rng):
        x = rng.standard_normal(shape)
        if cplx:
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(np.complex64 if cplx else np.float32)
    return sample


def distinct_spectrum(n):
    """A real matrix with real, well-separated eigenvalues (1..n, similarity by a
    well-conditioned matrix)."""
    def sample(rng):
        s = rng.standard_normal((n, n)) * 0.3 + np.eye(n)
        return (s @ np.diag(1.0 + np.arange(n)) @ np.linalg.inv(s)).astype(np.float32)
    return sample


def pivots(k, m):
    def sample(rng):
        return np.array([rng.integers(i, m) for i in range(k)], np.int32)
    return sample


# ----------------------------------------------------------------------------------------------
# NumPy references


def _sym(x):
    return (x + np.conj(np.swapaxes(x, -1, -2))) / 2


def np_lu(x):
    lu, piv = sla.lu_factor(x)
    perm = np.arange(x.shape[0])
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    return lu.astype(x.dtype), piv.astype(np.int32), perm.astype(np.int32)


def np_spectral(x, f):
    w, v = np.linalg.eigh(_sym(x))
    return w, ((v * f(w)) @ v.conj().T).astype(x.dtype)


def np_tri_solve(a, b, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    op = a
    if transpose_a:
        op = op.T
    if conjugate_a:
        op = op.conj()
    tri = np.tril if (lower != transpose_a) else np.triu
    op = tri(op)
    if unit_diagonal:
        op = op - np.diag(np.diag(op)) + np.eye(len(op))
    x = np.linalg.solve(op, b) if left_side else np.linalg.solve(op.T, b.T).T
    return x.astype(b.dtype)


def np_pivots_to_perm(piv, m):
    perm = np.arange(m, dtype=np.int32)
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    return perm


# ----------------------------------------------------------------------------------------------
# records

RECORDS: list[OpRecord] = []


def rec(name, fun, args, ref=None, **kw):
    RECORDS.append(OpRecord(name=name, fun=fun, args=args, ref=ref, **kw))


_DEC = dict(tol=1e-4, grad_tol=3e-2)

# cholesky
rec("linalg_cholesky", L.cholesky, args_of(spd(4)),
    lambda x: np.linalg.cholesky(_sym(x)).astype(x.dtype), **_DEC)
rec("linalg_cholesky_c64", L.cholesky, args_of(spd(3, cplx=True)),
    lambda x: np.linalg.cholesky(_sym(x)).astype(x.dtype), **_DEC)
rec("linalg_cholesky_batched", L.cholesky, args_of(spd(3, batch=(2,))),
    lambda x: np.linalg.cholesky(_sym(x)).astype(x.dtype), **_DEC)

# eigh: eigenvalues and an invariant spectral function of the eigenvectors
rec("linalg_eigh", lambda x: (lambda v, w: (w, (v * lax.exp(w / 4)) @ v.T))(*L.eigh(x)),
    args_of(sym_gapped(4)), lambda x: np_spectral(x, lambda w: np.exp(w / 4)), **_DEC)
rec("linalg_eigh_c64",
    lambda x: (lambda v, w: (w, (v * lax.convert_element_type(w, np.complex64)) @
                             lax.conj(lax.transpose(v, (1, 0)))))(*L.eigh(x)),
    args_of(spd(3, cplx=True)), lambda x: np_spectral(x, lambda w: w), **_DEC)
rec("linalg_eigh_upper", lambda x: L.eigh(x, lower=False, symmetrize_input=False)[1],
    args_of(sym_gapped(3)), lambda x: np.linalg.eigvalsh(x, UPLO="U").astype(x.dtype),
    diff_argnums=(), tol=1e-4)   # reads one triangle: the JVP assumes symmetric tangents

# eig: eigenvalues (complex from real input), and geev-normalised eigenvectors
rec("linalg_eigvals",
    lambda x: L.eig(x, compute_left_eigenvectors=False, compute_right_eigenvectors=False)[0],
    args_of(distinct_spectrum(4)),
    lambda x: sla.eig(x, right=False).astype(np.complex64), **_DEC)
rec("linalg_eig_vectors",
    lambda x: L.eig(x, compute_left_eigenvectors=False, enable_eigvec_derivs=True),
    args_of(distinct_spectrum(3)),
    lambda x: [r.astype(np.complex64) for r in sla.eig(x)], **_DEC)
rec("linalg_eig_left_right", lambda x: L.eig(x, enable_eigvec_derivs=True),
    args_of(distinct_spectrum(3)),
    lambda x: [r.astype(np.complex64) for r in sla.eig(x, left=True, right=True)], **_DEC)

# lu (square, tall, wide)
for shape in [(4, 4), (5, 3), (3, 5)]:
    rec(f"linalg_lu_{shape[0]}x{shape[1]}", L.lu, args_of(general(*shape)), np_lu, **_DEC)
rec("linalg_lu_c64", L.lu, args_of(general(3, 3, cplx=True)), np_lu, **_DEC)

rec("linalg_lu_pivots_to_permutation", lambda p: L.lu_pivots_to_permutation(p, 5),
    args_of(pivots(3, 5)), lambda p: np_pivots_to_perm(p, 5), diff_argnums=())

# qr
for shape in [(4, 3), (3, 3), (3, 5)]:
    for full in (False, True):
        mode = "complete" if full else "reduced"
        rec(f"linalg_qr_{shape[0]}x{shape[1]}_{mode}",
            lambda x, full=full: L.qr(x, full_matrices=full), args_of(gaussian(*shape)),
            lambda x, mode=mode: np.linalg.qr(x, mode=mode), **_DEC)
rec("linalg_qr_c64", lambda x: L.qr(x, full_matrices=False),
    args_of(gaussian(4, 3, cplx=True)), lambda x: np.linalg.qr(x), **_DEC)
rec("linalg_qr_pivoting", lambda x: L.qr(x, full_matrices=False, pivoting=True),
    args_of(gaussian(4, 3)),
    lambda x: (lambda q, r, p: (q, r, p.astype(np.int32)))(*sla.qr(x, mode="economic",
                                                                    pivoting=True)),
    **_DEC)

# svd (real factors directly; complex through the reconstruction)
for shape in [(4, 3), (3, 3), (3, 4)]:
    rec(f"linalg_svd_{shape[0]}x{shape[1]}", lambda x: L.svd(x, full_matrices=False),
        args_of(gaussian(*shape)), lambda x: np.linalg.svd(x, full_matrices=False), **_DEC)
rec("linalg_svd_values", lambda x: L.svd(x, compute_uv=False), args_of(gaussian(5, 3)),
    lambda x: np.linalg.svd(x, compute_uv=False), **_DEC)
rec("linalg_svd_c64_reconstruct",
    lambda x: (lambda u, s, vh: (s, (u * lax.convert_element_type(s, np.complex64)) @ vh))(
        *L.svd(x, full_matrices=False)),
    args_of(gaussian(4, 3, cplx=True)),
    lambda x: (np.linalg.svd(x, compute_uv=False), x), **_DEC)
rec("linalg_svd_full_square", lambda x: L.svd(x, full_matrices=True),
    args_of(gaussian(3, 3)), lambda x: np.linalg.svd(x), **_DEC)

# triangular_solve: every flag combination on both sides
for left in (True, False):
    for lower in (True, False):
        for trans in (False, True):
            for unit in (False, True):
                bshape = (3, 2) if left else (2, 3)
                name = (f"linalg_triangular_solve_{'left' if left else 'right'}_"
                        f"{'lower' if lower else 'upper'}{'_T' if trans else ''}"
                        f"{'_unit' if unit else ''}")
                params = dict(left_side=left, lower=lower, transpose_a=trans,
                              unit_diagonal=unit)
                rec(name, lambda a, b, params=params: L.triangular_solve(a, b, **params),
                    args_of(general(3, 3), gaussian(*bshape)),
                    lambda a, b, params=params: np_tri_solve(a, b, conjugate_a=False, **params),
                    diff_argnums=(0, 1), **_DEC)
rec("linalg_triangular_solve_c64_conj",
    lambda a, b: L.triangular_solve(a, b, left_side=True, lower=True, conjugate_a=True),
    args_of(general(3, 3, cplx=True), gaussian(3, 2, cplx=True)),
    lambda a, b: np_tri_solve(a, b, True, True, False, True, False), diff_argnums=(0, 1),
    **_DEC)
rec("linalg_triangular_solve_c64_adjoint",
    lambda a, b: L.triangular_solve(a, b, left_side=False, lower=False, transpose_a=True,
                                    conjugate_a=True),
    args_of(general(3, 3, cplx=True), gaussian(2, 3, cplx=True)),
    lambda a, b: np_tri_solve(a, b, False, False, True, True, False), diff_argnums=(0, 1),
    **_DEC)
rec("linalg_triangular_solve_batched",
    lambda a, b: L.triangular_solve(a, b, left_side=True, lower=True),
    args_of(general(2, 3, 3), gaussian(2, 3, 2)),
    lambda a, b: np.stack([np_tri_solve(a[i], b[i], True, True, False, False, False)
                           for i in range(2)]), diff_argnums=(0, 1), **_DEC)

# no derivatives (as in JAX): packed QR, Schur, Hessenberg, Householder products
rec("linalg_geqrf", L.geqrf, args_of(gaussian(4, 3)),
    lambda x: (lambda h, tau: (h.astype(x.dtype), tau.astype(x.dtype)))(
        *sla.lapack.sgeqrf(x)[:2]), diff_argnums=(), tol=1e-4)
rec("linalg_householder_product",
    lambda x: L.householder_product(*L.geqrf(x)), args_of(gaussian(4, 3)),
    lambda x: np.linalg.qr(x)[0], diff_argnums=(), tol=1e-4)
rec("linalg_schur", lambda x: L.schur(x), args_of(gaussian(4, 4)),
    lambda x: sla.schur(x), diff_argnums=(), tol=1e-4)
rec("linalg_hessenberg", lambda x: L.hessenberg(x)[0], args_of(gaussian(4, 4)),
    lambda x: sla.lapack.sgehrd(x)[0], diff_argnums=(), tol=1e-4)

# ----------------------------------------------------------------------------------------------
# fft


def _np_fft(kind, lengths):
    axes = tuple(range(-len(lengths), 0))

    def ref(x):
        if kind == "fft":
            return np.fft.fftn(x, lengths, axes).astype(np.complex64)
        if kind == "ifft":
            return np.fft.ifftn(x, lengths, axes).astype(np.complex64)
        if kind == "rfft":
            return np.fft.rfftn(x, lengths, axes).astype(np.complex64)
        return np.fft.irfftn(x, lengths, axes).astype(np.float32)
    return ref


_FFT = dict(tol=1e-4, grad_tol=1e-2)
rec("fft_fft", lambda x: lax.fft(x, "fft", (6,)), args_of(gaussian(3, 6, cplx=True)),
    _np_fft("fft", (6,)), **_FFT)
rec("fft_ifft_2d", lambda x: lax.fft(x, lax.FftType.IFFT, (3, 4)),
    args_of(gaussian(2, 3, 4, cplx=True)), _np_fft("ifft", (3, 4)), **_FFT)
rec("fft_fft_of_real", lambda x: lax.fft(x, "fft", (5,)), args_of(gaussian(2, 5)),
    _np_fft("fft", (5,)), **_FFT)
rec("fft_rfft", lambda x: lax.fft(x, "rfft", (8,)), args_of(gaussian(3, 8)),
    _np_fft("rfft", (8,)), **_FFT)
rec("fft_rfft_odd_2d", lambda x: lax.fft(x, "rfft", (3, 5)), args_of(gaussian(2, 3, 5)),
    _np_fft("rfft", (3, 5)), **_FFT)
rec("fft_irfft", lambda x: lax.fft(x, "irfft", (8,)), args_of(gaussian(3, 5, cplx=True)),
    _np_fft("irfft", (8,)), **_FFT)
rec("fft_irfft_odd_2d", lambda x: lax.fft(x, "irfft", (4, 7)),
    args_of(gaussian(2, 4, 4, cplx=True)), _np_fft("irfft", (4, 7)), **_FFT)
