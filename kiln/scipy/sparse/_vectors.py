"""Vector algebra on pytrees for the Krylov solvers of :mod:`kiln.scipy.sparse.linalg`.

A "vector" here is any pytree of arrays (the right-hand side ``b`` and every iterate share
its structure); inner products add up the per-leaf products. Every product runs at
``Precision.HIGHEST``, as JAX's solvers do. Also here: turning the user's ``A``/``M``
argument into a matrix-vector function.
"""
from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.array import Array
from kiln.tree_util import tree_leaves, tree_map

_HIGHEST = lax.Precision.HIGHEST


def _total(values: list) -> Any:
    """The sum of a non-empty list of scalars, left to right."""
    return functools.reduce(operator.add, values)


def real_inner(x, y) -> Any:
    """``Re <x, y>`` of two arrays, as a real scalar: the real parts' dot product plus, when
    either side is complex, the imaginary parts' (the cross terms are dropped, so for
    ``y = M x`` with Hermitian ``M`` it is exactly ``x^H M x``)."""
    out = jnp.vdot(jnp.real(x), jnp.real(y), precision=_HIGHEST)
    if jnp.iscomplexobj(x) or jnp.iscomplexobj(y):
        out = out + jnp.vdot(jnp.imag(x), jnp.imag(y), precision=_HIGHEST)
    return out


def tree_real_inner(x, y) -> Any:
    """``real_inner`` summed over the leaves of two pytrees of one structure."""
    return _total(tree_leaves(tree_map(real_inner, x, y)))


def tree_inner(x, y) -> Any:
    """``sum(vdot(xi, yi))`` over the leaves: the complex inner product (``x`` conjugated)."""
    def leaf(a, c):
        return jnp.vdot(a, c, precision=_HIGHEST)
    return _total(tree_leaves(tree_map(leaf, x, y)))


def tree_norm(x) -> Any:
    """The Euclidean norm of a pytree vector (a real scalar)."""
    return jnp.sqrt(_total([real_inner(v, v) for v in tree_leaves(x)]))


def scale(alpha, x) -> Any:
    """``alpha * x`` for a scalar ``alpha``."""
    return tree_map(lambda v: alpha * v, x)


def add(x, y) -> Any:
    return tree_map(operator.add, x, y)


def sub(x, y) -> Any:
    return tree_map(operator.sub, x, y)


def select(pred, x, y) -> Any:
    """``x`` where the scalar ``pred`` holds, else ``y``, leaf by leaf."""
    return tree_map(lambda a, c: jnp.where(pred, a, c), x, y)


def safe_normalize(x, thresh=None) -> tuple[Any, Any]:
    """``(x / |x|, |x|)``, except that a norm not above ``thresh`` (default: the machine
    epsilon of the norm's dtype) counts as zero: then the zero vector and ``0``."""
    norm = tree_norm(x)
    dtype, weak = dtypes._lattice_result_type(*tree_leaves(x))
    if thresh is None:
        thresh = dtypes.finfo(norm.dtype).eps
    # the threshold goes through the vectors' dtype (as JAX), then back to its real part
    thresh = thresh.astype(dtype).real
    keep = norm > thresh
    divisor = lax._convert_element_type(norm, dtype, weak)
    unit = tree_map(lambda v: jnp.where(keep, v / divisor, 0.0), x)
    return unit, jnp.where(keep, norm, 0.0)


def identity(x):
    """The default preconditioner."""
    return x


def as_matvec(op) -> Callable:
    """The matrix-vector function of ``A`` (or ``M``): a callable is used as given; a
    square 2-D array multiplies at ``Precision.HIGHEST``; any other object with
    ``__matmul__`` (and, when it has a ``shape``, a square one) is applied as ``op @ x``."""
    if callable(op):
        return op
    if isinstance(op, (np.ndarray, Array)):
        if op.ndim != 2 or op.shape[0] != op.shape[1]:
            raise ValueError(f"linear operator must be a square matrix, but has shape: {op.shape}")
        return functools.partial(jnp.dot, op, precision=_HIGHEST)
    if hasattr(op, "__matmul__"):
        shape = getattr(op, "shape", None)
        if shape is not None and (len(shape) != 2 or shape[0] != shape[1]):
            raise ValueError(f"linear operator must be a square matrix, but has shape: {shape}")
        return functools.partial(operator.matmul, op)
    raise TypeError(f"linear operator must be either a function or ndarray: {op}")
