"""Small ``cholesky`` and ``triangular_solve`` inside loop and branch bodies, natively.

At the top level of a program these primitives are host islands (LAPACK through their
NumPy impls). Inside a ``scan``/``while``/``cond`` body an island would keep the whole loop
on the host, one Python iteration per step: an MCMC chain whose log-density is a
multivariate normal (``cholesky`` and two ``triangular_solve``s per step) then runs at
milliseconds per step. For real matrices up to ``MAX_N`` rows, such an equation is instead
lowered as its *expansion*: a jaxpr of native primitives (slices, ``dot_general``,
elementwise ops, ``select_n``), unrolled over the rows, that computes the same
factorization / substitution; the loop then compiles to C.

Semantics are the primitives' (and LAPACK's): ``cholesky`` reads the lower triangle, gives
``L`` with zeros above the diagonal, and a matrix whose factorization fails (a pivot that
is not positive, or NaN) gives all NaNs, as the impl does; ``triangular_solve`` reads only
the ``lower``/upper triangle of ``a`` (its diagonal taken as ones with ``unit_diagonal``),
applies ``transpose_a`` and solves from the left or the right. Results agree with LAPACK's
to a few ulps (another order of operations), the compiler's accuracy contract.

What it must not hold: anything that runs at the top level of a program.
"""
from __future__ import annotations

import functools

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr

EXPANDED = ("cholesky", "triangular_solve")
MAX_N = 16
_REAL = (np.dtype(np.float32), np.dtype(np.float64))


def expandable(eqn) -> bool:
    """Whether ``eqn`` is a ``cholesky``/``triangular_solve`` this module expands."""
    if eqn.primitive.name not in EXPANDED:
        return False
    if eqn.primitive.name == "triangular_solve" and eqn.params.get("conjugate_a"):
        return False
    for v in list(eqn.invars) + list(eqn.outvars):
        a = v.aval
        if np.dtype(a.dtype) not in _REAL or 0 in a.shape:
            return False
    n = eqn.invars[0].aval.shape[-1]
    return 1 <= n <= MAX_N


def expansion(eqn) -> ClosedJaxpr:
    """The expansion of ``eqn`` (see :func:`expandable`): a closed jaxpr taking the
    equation's operands, optimised, ready for ``lower_nested``."""
    avals = tuple(ShapedArray(v.aval.shape, v.aval.dtype, False) for v in eqn.invars)
    return _expansion(eqn.primitive.name, avals, tuple(sorted(eqn.params.items())))


@functools.lru_cache(maxsize=256)
def _expansion(name, avals, params):
    from kiln.compiler.passes.passes import optimize
    from kiln.interpreters import staging
    fn = _cholesky if name == "cholesky" else functools.partial(_triangular_solve,
                                                                 **dict(params))
    jaxpr, consts = staging.trace_to_jaxpr(lambda *xs: [fn(*xs)], list(avals))
    return optimize(ClosedJaxpr(jaxpr, consts), contract=False)


# ----------------------------------------------------------------------------------------------
# The expansions, in kiln.lax (traced once per shape, dtype and parameters).

def _row(x, i):
    """Row ``i`` of the trailing matrices of ``x``: shape ``(..., 1, m)``."""
    from kiln import lax
    return lax.slice_in_dim(x, i, i + 1, axis=x.ndim - 2)


def _col(x, j):
    from kiln import lax
    return lax.slice_in_dim(x, j, j + 1, axis=x.ndim - 1)


def _matmul(a, b):
    """``a @ b`` over trailing matrices with equal leading batch dimensions."""
    from kiln import lax
    nb = a.ndim - 2
    batch = tuple(range(nb))
    return lax.dot_general(a, b, (((a.ndim - 1,), (nb,)), (batch, batch)),
                           precision=lax.Precision.HIGHEST)


def _where(shape, fn):
    """A constant boolean matrix, true where ``fn(i, j)``, broadcast to ``shape`` (its
    trailing two dims are the matrix)."""
    from kiln import lax
    n, m = shape[-2:]
    i, j = np.indices((n, m))
    return lax.broadcast_in_dim(np.asarray(fn(i, j), np.bool_), shape,
                                (len(shape) - 2, len(shape) - 1))


def _bcast(x, shape):
    """``x`` with size-1 dims expanded to ``shape`` (same rank)."""
    from kiln import lax
    return x if x.shape == shape else lax.broadcast_in_dim(x, shape, tuple(range(x.ndim)))


def _swap(ndim):
    return tuple(range(ndim - 2)) + (ndim - 1, ndim - 2)


# Masks select, never multiply: 0 * inf would spread a NaN to entries LAPACK leaves alone.

def _cholesky(x):
    from kiln import lax
    n = x.shape[-1]
    zero = lax.full_like(x, 0)
    x = lax.select(_where(x.shape, lambda i, j: i >= j), x, zero)    # the lower triangle
    L = zero
    ok = None
    for j in range(n):
        # s = x[:, j] - L @ L[j, :]^T: columns >= j of L are still zero.
        s = lax.sub(_col(x, j), _matmul(L, lax.transpose(_row(L, j), _swap(x.ndim))))
        pivot = lax.slice_in_dim(s, j, j + 1, axis=x.ndim - 2)          # (..., 1, 1)
        good = lax.gt(pivot, lax.full_like(pivot, 0))                   # False for NaN
        ok = good if ok is None else lax.bitwise_and(ok, good)
        d = lax.sqrt(pivot)
        col = lax.select(_where(s.shape, lambda i, _: i == j), _bcast(d, s.shape),
                         lax.div(s, _bcast(d, s.shape)))
        col = lax.select(_where(s.shape, lambda i, _: i >= j), col, lax.full_like(col, 0))
        L = lax.select(_where(L.shape, lambda _, k: k == j), _bcast(col, L.shape), L)
    return lax.select(_bcast(ok, L.shape), L, lax.full_like(L, np.nan))


def _triangular_solve(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    from kiln import lax
    del conjugate_a     # real operands only (expandable)
    m = a.shape[-1]
    # The referenced strict triangle of a (zeros elsewhere), and its diagonal.
    off = lax.select(_where(a.shape, (lambda i, j: i > j) if lower else (lambda i, j: i < j)),
                     a, lax.full_like(a, 0))
    # Reduce op(A) X = B, or X op(A) = B (i.e. op(A)^T X^T = B^T), to M Y = C with M
    # lower or upper triangular.
    transposed = bool(transpose_a) != (not left_side)
    if transposed:
        off = lax.transpose(off, _swap(a.ndim))
    m_lower = bool(lower) != transposed
    c = b if left_side else lax.transpose(b, _swap(b.ndim))
    Y = lax.full_like(c, 0)
    for i in (range(m) if m_lower else range(m - 1, -1, -1)):
        # Rows of Y not solved yet are zero, as are the entries of M outside its triangle.
        acc = lax.sub(_row(c, i), _matmul(_row(off, i), Y))              # (..., 1, n)
        if not unit_diagonal:
            aii = lax.slice_in_dim(_row(a, i), i, i + 1, axis=a.ndim - 1)  # (..., 1, 1)
            acc = lax.div(acc, _bcast(aii, acc.shape))
        Y = lax.select(_where(Y.shape, lambda k, _: k == i), _bcast(acc, Y.shape), Y)
    return Y if left_side else lax.transpose(Y, _swap(Y.ndim))
