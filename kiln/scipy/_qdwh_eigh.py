"""Hermitian eigendecomposition by spectral divide and conquer on QDWH
(``jax._src.tpu.linalg.eigh``, JAX's ``eigh`` on TPU).

The method (Nakatsukasa and Higham, SIAM J. Sci. Comput. 35(3), 2013): the unitary polar
factor ``U`` of ``H - sigma I`` (:mod:`kiln.scipy._qdwh`) is ``sign(H - sigma I)``, so
``(I - U) / 2`` projects onto the eigenvectors with eigenvalues below ``sigma`` (the
median of the diagonal). A subspace iteration on the projector of smaller rank gives
orthonormal bases ``V-`` and ``V+`` of both invariant subspaces, and ``V^H H V`` splits
``H`` into two smaller Hermitian blocks. Blocks are split again until they are at most
``termination_size`` wide (then a dense ``eigh`` finishes them), nearly diagonal, or
negligible next to the input's norm.

The recursion runs as a ``lax.while_loop`` over a work list (:mod:`kiln.scipy.
_bounded_stack`): every block lives, left-aligned, in rows ``offset:offset+size`` of one
``N x N`` workspace, and its isometry in the same columns of an ``N x N`` eigenvector
matrix. A block is processed at one of a few static padded sizes (``N``, then about
halving, rounded up to multiples of 32), chosen by ``lax.switch``: the smallest that
holds it. Off TPU, a ``termination_size`` above 1 relies on the dense ``eigh`` keeping
its eigenvalues unsorted, which kiln's (LAPACK's) does not promise; JAX's own tests use 1
there.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np

from kiln import dtypes, lax
from kiln.api import jit
from kiln.lax import linalg as lax_linalg
from kiln.numpy.linalg import jnp  # the lazy kiln.numpy proxy (kiln.numpy sits above)
from kiln.scipy._bounded_stack import Stack
from kiln.scipy._qdwh import _masked, qdwh


def _read_block(x, starts, sizes, padded_sizes, fill=0):
    """``x[starts : starts + sizes]`` (traced starts and sizes) as an array of the static
    ``padded_sizes``; entries past ``sizes`` (or past ``x``'s edge) are ``fill``."""
    grown = lax.pad(x, jnp.array(0, x.dtype), [(0, d, 0) for d in padded_sizes])
    block = lax.dynamic_slice(grown, tuple(jnp.asarray(i, np.int32) for i in starts),
                              padded_sizes)
    return _masked(block, sizes, fill)


def _write_block(x, block, starts, sizes):
    """``x`` with the leading ``sizes`` of the padded ``block`` written at ``starts``;
    the rest of ``x`` (also under the block's padding) is unchanged."""
    shape = x.shape
    grown = lax.pad(x, jnp.array(0, x.dtype), [(0, d, 0) for d in block.shape])
    starts = tuple(jnp.asarray(i, np.int32) for i in starts)
    under = lax.dynamic_slice(grown, starts, block.shape)
    grown = lax.dynamic_update_slice(grown, _masked(block, sizes, under), starts)
    return lax.slice(grown, (0,) * x.ndim, shape)


def _subspaces(P, H, n, rank, maxiter=2, swap=False):
    """Orthonormal bases ``(V1, V2)`` of the range of the rank-``rank`` projector ``P``
    (``n x n``, padded) and of its complement, by subspace iteration started from
    ``P``'s ``rank`` largest columns (``swap``: returned as ``(V2, V1)``)."""
    N = P.shape[0]
    # the largest columns first; padded columns (NaN) sort last
    order = jnp.argsort(_masked(-jnp.linalg.norm(P, axis=1), (n,), np.nan))
    start = _masked(P[:, order], (n, rank))
    threshold = 10.0 * float(dtypes.finfo(start.dtype).eps) * jnp.linalg.norm(H)

    def orthonormalize(X):
        Q, _ = jnp.linalg.qr(X, mode="complete")
        V1 = _masked(Q, (n, rank))
        V2 = _read_block(Q, (0, rank), (n, n - rank), (N, N))
        residual = jnp.linalg.norm(jnp.dot(jnp.dot(V2.conj().T, H), V1))
        return V1, V2, residual

    def unfinished(carry):
        _, _, j, residual = carry
        return jnp.logical_and(j < maxiter, residual > threshold)[0]

    def again(carry):
        V1, _, j, _ = carry
        V1, V2, residual = orthonormalize(jnp.dot(P, V1))
        return V1, V2, j + 1, residual

    V1, V2, residual = orthonormalize(start)
    V1, V2, _, _ = lax.while_loop(unfinished, again,
                                  (V1, V2, jnp.ones(1, np.int32), residual))
    return (V2, V1) if swap else (V1, V2)


def split_spectrum(H, n, split_point, V0=None):
    """Split the Hermitian ``H`` (``n x n``, padded) at ``split_point``: returns
    ``(H_minus, V_minus, H_plus, V_plus, rank)`` with ``H_i = V_i^H H V_i`` holding the
    eigenvalues below / above the split, ``rank`` the size of ``H_minus``; with ``V0``,
    the isometries are ``V0 @ V_i``."""
    N = H.shape[0]
    shifted = H - (split_point * jnp.eye(N, dtype=split_point.dtype)).astype(H.dtype)
    U, _, _, _ = qdwh(shifted, is_hermitian=True, dynamic_shape=(n, n))
    eye = _masked(jnp.eye(N, dtype=H.dtype), (n, n))
    below = -0.5 * (U - eye)
    rank_below = jnp.round(jnp.trace(jnp.real(below))).astype(np.int32)
    above = 0.5 * (U + eye)
    rank_above = n - rank_below
    # iterate on the projector of smaller rank: its QR factorizations are the cheaper
    V_minus, V_plus = lax.cond(
        rank_above < rank_below,
        lambda: _subspaces(above, H, n, rank_above, swap=True),
        lambda: _subspaces(below, H, n, rank_below, swap=False))
    H_minus = (V_minus.conj().T @ H) @ V_minus
    H_plus = (V_plus.conj().T @ H) @ V_plus
    if V0 is not None:
        V_minus = jnp.dot(V0, V_minus)
        V_plus = jnp.dot(V0, V_plus)
    return H_minus, V_minus, H_plus, V_plus, rank_below


class _Block(NamedTuple):
    """A pending Hermitian block: rows ``offset:offset+size`` of the workspace."""
    offset: object
    size: object


def _round_up(i: int, n: int) -> int:
    return -(-i // n) * n


def _padded_sizes(N: int, termination_size: int) -> list[int]:
    """The static sizes blocks are processed at: the base size, ``N``, then roughly
    halving (``/1.98`` so a block split a little off the middle still fits the next
    size down) in multiples of 32 down to the base size."""
    base = min(N, termination_size)
    sizes = [base]
    if N > termination_size:
        sizes.append(N)
        i = int(N / 1.98)
        while i > base:
            sizes.append(_round_up(i, 32))
            i //= 2
    return sizes


@partial(jit, static_argnames=("termination_size", "subset_by_index"))
def _divide_and_conquer(H, n, termination_size, subset_by_index):
    """The eigenvalues (in the workspace's first column, unsorted) and eigenvectors of the
    ``n x n`` (padded) Hermitian ``H``."""
    N = H.shape[0]
    n = jnp.asarray(n, np.int32)
    zero = jnp.array(0, np.int32)
    agenda = Stack.create(N + 1, _Block(zero, zero)).push(_Block(zero, n))
    vectors = jnp.eye(N, dtype=H.dtype)
    # blocks smaller than eps times the input's norm are noise: not split further
    input_norm = jnp.linalg.norm(_masked(H, (n, n)))

    def finish(B, offset, b, agenda, blocks, vectors):
        block = _masked(_read_block(blocks, (offset, 0), (b, b), (B, B)), (b, b))
        basis = _read_block(vectors, (0, offset), (n, b), (N, B))
        evecs, evals = lax_linalg.eigh(block, sort_eigenvalues=False)
        evecs = jnp.dot(basis, _masked(evecs, (b, b)))
        evals = _masked(evals, (b,)).astype(evecs.dtype)
        blocks = _write_block(blocks, evals[:, None], (offset, 0), (b, 1))
        vectors = _write_block(vectors, evecs, (0, offset), (n, b))
        return agenda, blocks, vectors

    def wanted(start, end):
        if subset_by_index is None:
            return True
        return (start < subset_by_index[1]) & (end > subset_by_index[0])

    def divide(B, offset, b, agenda, blocks, vectors):
        block = _read_block(blocks, (offset, 0), (b, b), (B, B))

        def diagonal(agenda, blocks, vectors):
            blocks = _write_block(blocks, jnp.diag(block)[:, None], (offset, 0), (b, 1))
            return agenda, blocks, vectors

        def split(agenda, blocks, vectors):
            basis = _read_block(vectors, (0, offset), (n, b), (N, B))
            median = jnp.nanmedian(_masked(jnp.diag(jnp.real(block)), (b,), np.nan))
            H_minus, V_minus, H_plus, V_plus, rank = split_spectrum(block, b, median,
                                                                    V0=basis)
            blocks, vectors, agenda = lax.cond(
                wanted(offset, offset + rank),
                lambda: (_write_block(blocks, H_minus, (offset, 0), (rank, rank)),
                         _write_block(vectors, V_minus, (0, offset), (n, rank)),
                         agenda.push(_Block(offset, rank))),
                lambda: (blocks, vectors, agenda))
            blocks, vectors, agenda = lax.cond(
                wanted(offset + rank, offset + b),
                lambda: (_write_block(blocks, H_plus, (offset + rank, 0),
                                      (b - rank, b - rank)),
                         _write_block(vectors, V_plus, (0, offset + rank), (n, b - rank)),
                         agenda.push(_Block(offset + rank, b - rank))),
                lambda: (blocks, vectors, agenda))
            return agenda, blocks, vectors

        # clusters of equal eigenvalues (rank deficiency among them) leave blocks that
        # are diagonal to working precision or negligible: take their diagonal as is
        norm = jnp.linalg.norm(block)
        eps = jnp.asarray(dtypes.finfo(block.dtype).eps, dtype=norm.dtype)
        off_diagonal = jnp.linalg.norm(
            block - jnp.diag(jnp.diag(jnp.real(block)).astype(block.dtype)))
        done = (off_diagonal <= 5 * eps * norm) | (norm < eps * input_norm)
        return lax.cond(done, diagonal, split, agenda, blocks, vectors)

    sizes = _padded_sizes(N, termination_size)
    branches = [partial(finish, sizes[0])] + [partial(divide, B) for B in sizes[1:]]
    size_table = jnp.array(sizes, dtype=np.int32)

    def pending(state):
        return ~state[0].empty()

    def step(state):
        agenda, blocks, vectors = state
        (offset, b), agenda = agenda.pop()
        # the smallest static size that holds the block
        fits = jnp.where(size_table < b, np.iinfo(np.int32).max, size_table)
        return lax.switch(jnp.argmin(fits), branches, offset, b, agenda, blocks, vectors)

    _, blocks, vectors = lax.while_loop(pending, step, (agenda, H, vectors))
    return blocks[:, 0], vectors


def eigh(H, *, precision="float32", termination_size: int = 256, n=None,
         sort_eigenvalues: bool = True, subset_by_index: tuple[int, int] | None = None):
    """Eigendecomposition of a Hermitian matrix by QDWH spectral divide and conquer.

    Args:
      H: the ``n x n`` Hermitian input, padded to ``N x N``.
      precision: the matrix-multiplication precision (accepted; kiln's CPU products are
        full precision).
      termination_size: blocks at most this wide are finished by a dense ``eigh``.
      n: the true size of ``H`` (default ``N``).
      sort_eigenvalues: whether to sort the eigenvalues in ascending order.
      subset_by_index: ``(start, end)``: only the eigenpairs with indices in that range
        (ascending order).

    Returns:
      ``(eigenvalues, eigenvectors)`` with ``H @ eigenvectors = eigenvectors *
      eigenvalues``; entries for a padded ``H`` past ``n`` are NaN (values) and zero.
    """
    del precision
    M, N = H.shape
    if M != N:
        raise TypeError(f"Input H of shape {H.shape} must be square.")
    if n is not None and n > N:
        raise ValueError("Static size must be greater or equal to dynamic size.")
    sliced = False
    if subset_by_index is not None:
        sliced = subset_by_index != (0, n)
        if len(subset_by_index) != 2:
            raise ValueError("subset_by_index must be a tuple of size 2.")
        if subset_by_index[0] >= subset_by_index[1]:
            raise ValueError("Got empty index range in subset_by_index.")
        if subset_by_index[0] < 0:
            raise ValueError("Indices in subset_by_index must be non-negative.")
        if subset_by_index[1] > (N if n is None else n):
            raise ValueError("Index in subset_by_index[1] exceeds matrix size.")
    if N <= termination_size:
        if n is not None:
            H = _masked(H, (n, n))
        vecs, vals = lax_linalg.eigh(
            H, lower=True, sort_eigenvalues=sort_eigenvalues or sliced,
            subset_by_index=None, symmetrize_input=False,
            implementation=lax_linalg.EighImplementation.JACOBI)
        if sliced:
            vals = vals[subset_by_index[0]:subset_by_index[1]]
            vecs = vecs[:, subset_by_index[0]:subset_by_index[1]]
        return vals, vecs
    n = N if n is None else n
    vals, vecs = _divide_and_conquer(H, n, termination_size=termination_size,
                                     subset_by_index=subset_by_index)
    vals = _masked(jnp.real(vals), (n,), np.nan)
    if sort_eigenvalues or sliced:
        order = jnp.argsort(vals)
        if sliced:
            order = order[subset_by_index[0]:subset_by_index[1]]
        vals, vecs = vals[order], vecs[:, order]
    return vals, vecs
