"""``mode``, ``rankdata`` and ``sem``, as in ``jax.scipy.stats``.

JAX computes ``mode`` with ``jnp.unique`` and ``rankdata`` with a sort; kiln has no sort
primitive yet, so both compare all pairs of elements along the axis instead (O(n^2) work
and memory per slice, exact, and jit/vmap-compatible). Ties and NaNs follow JAX: ``mode``
returns the smallest of the most frequent values (NaNs compare equal to each other and sort
last); ``rankdata`` returns all-NaN ranks when a slice holds a NaN.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kiln import dtypes, lax
from kiln.numpy._util import canonicalize_axis, check_arraylike, promote_args_inexact
from kiln.scipy.stats._common import jnp
from kiln.transformations import vmap


class ModeResult(NamedTuple):
    mode: object
    count: object


def _check_nan_policy(nan_policy, fun):
    if nan_policy not in ("propagate", "omit", "raise"):
        raise ValueError(f"Illegal nan_policy value {nan_policy!r}; expected one of "
                         "{'propagate', 'omit', 'raise'}")
    if nan_policy == "omit":
        raise NotImplementedError(f"Logic for `nan_policy` of {nan_policy} is not implemented")
    if nan_policy == "raise":
        raise NotImplementedError(
            f"In order to best JIT compile `{fun}`, we cannot know whether `x` contains nans. "
            "Please check if nans exist in `x` outside of the `{fun}` function.")


def _equal_nan(a, b):
    return (a == b) | (jnp.isnan(a) & jnp.isnan(b))


def _mode_1d(x):
    if x.size == 0:
        return (jnp.array(np.nan, dtype=dtypes.default_float_dtype()),
                jnp.array(0, dtype=dtypes.default_float_dtype()))
    eq = _equal_nan(x[:, None], x[None, :])
    counts = jnp.sum(eq, axis=1).astype(dtypes.default_int_dtype())
    top = counts == jnp.max(counts)
    if dtypes.issubdtype(x.dtype, np.inexact):
        # Order NaNs after every number, as a sort would.
        nan = jnp.isnan(x)
        numeric_top = top & ~nan
        best = jnp.min(jnp.where(numeric_top, x, jnp.inf))
        is_best = jnp.where(jnp.any(numeric_top), numeric_top & (x == best), top & nan)
    else:
        big = True if x.dtype == np.bool_ else np.iinfo(x.dtype).max
        is_best = top & (x == jnp.min(jnp.where(top, x, big)))
    idx = jnp.argmax(is_best)
    return x[idx], jnp.max(counts)


def mode(a, axis: int | None = 0, nan_policy: str = "propagate", keepdims: bool = False):
    """The most frequent value along ``axis`` and its count (``ModeResult``)."""
    check_arraylike("mode", a)
    x = jnp.atleast_1d(a)
    _check_nan_policy(nan_policy, "mode")
    if axis is not None:
        axis = canonicalize_axis(axis, x.ndim)
    input_shape = x.shape
    if keepdims:
        output_shape = (tuple(1 for _ in input_shape) if axis is None else
                        tuple(1 if i == axis else s for i, s in enumerate(input_shape)))
    else:
        output_shape = (() if axis is None else
                        tuple(s for i, s in enumerate(input_shape) if i != axis))
    if axis is None:
        axis = 0
        x = x.ravel()
    x = jnp.moveaxis(x, axis, 0)
    x = x.reshape(x.shape[0], math.prod(x.shape[1:]))
    vals, counts = vmap(_mode_1d, in_axes=1)(x)
    return ModeResult(vals.reshape(output_shape), counts.reshape(output_shape))


def _rankdata_1d(a, method):
    out_dtype = dtypes.default_float_dtype()
    n = a.shape[0]
    less = (a[None, :] < a[:, None])                        # less[i, j]: a_j < a_i
    equal = (a[None, :] == a[:, None])
    n_less = jnp.sum(less, axis=1)
    n_equal = jnp.sum(equal, axis=1)
    if method == "ordinal":
        before = np.arange(n)[None, :] < np.arange(n)[:, None]
        ranks = n_less + jnp.sum(equal & before, axis=1) + 1
    elif method == "min":
        ranks = n_less + 1
    elif method == "max":
        ranks = n_less + n_equal
    elif method == "average":
        ranks = n_less.astype(out_dtype) + 0.5 * (n_equal.astype(out_dtype) + 1)
    else:  # dense: the number of distinct values below, plus one
        first = ~jnp.any(equal & (np.arange(n)[None, :] < np.arange(n)[:, None]), axis=1)
        ranks = jnp.sum(less & first[None, :], axis=1) + 1
    ranks = jnp.asarray(ranks).astype(out_dtype)
    return jnp.where(jnp.any(jnp.isnan(a)), jnp.full_like(ranks, jnp.nan), ranks)


def rankdata(a, method: str = "average", *, axis: int | None = None,
             nan_policy: str = "propagate"):
    """Ranks of the data (``average``/``min``/``max``/``dense``/``ordinal``), as floats."""
    check_arraylike("rankdata", a)
    _check_nan_policy(nan_policy, "rankdata")
    if method not in ("average", "min", "max", "dense", "ordinal"):
        raise ValueError(f"unknown method '{method}'")
    a = jnp.asarray(a)
    if axis is not None:
        axis = canonicalize_axis(axis, a.ndim)
        moved = jnp.moveaxis(a, axis, -1)
        flat = moved.reshape(-1, moved.shape[-1]) if moved.ndim > 1 else moved[None]
        out = vmap(lambda r: _rankdata_1d(r, method))(flat)
        return jnp.moveaxis(out.reshape(moved.shape), -1, axis)
    return _rankdata_1d(jnp.ravel(a), method)


def sem(a, axis: int | None = 0, ddof: int = 1, nan_policy: str = "propagate", *,
        keepdims: bool = False):
    """The standard error of the mean along ``axis``."""
    b, = promote_args_inexact("sem", a)
    if nan_policy == "propagate":
        size = b.size if axis is None else b.shape[axis]
        return b.std(axis, ddof=ddof, keepdims=keepdims) / jnp.sqrt(size).astype(b.dtype)
    if nan_policy == "omit":
        count = (~jnp.isnan(b)).sum(axis, keepdims=keepdims)
        return jnp.nanstd(b, axis, ddof=ddof, keepdims=keepdims) \
            / jnp.sqrt(count).astype(b.dtype)
    raise ValueError(f"{nan_policy} is not supported")


del lax
