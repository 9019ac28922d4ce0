"""Order statistics and counting: ``quantile``/``percentile``/``median`` (and ``nan*``
versions), ``cov``, ``corrcoef``, ``bincount`` and the ``histogram*`` family.

Quantiles follow JAX: the values are sorted with ``lax.sort`` along the (merged) reduction
axes, the order statistics are gathered with ``take_along_axis`` and combined in the dtype
of ``q``; the methods are JAX's ('linear', 'lower', 'higher', 'midpoint', 'nearest',
'inverted_cdf', the last one also weighted). ``median`` is the 'midpoint' 0.5-quantile.
Counting functions scatter-add with ``.at[].add``; ``bincount`` needs a static ``length=``
under transformations.

This module must not sort by itself: ordering goes through ``lax.sort``.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util

__all__ = ["quantile", "percentile", "median", "nanquantile", "nanpercentile", "nanmedian",
           "cov", "corrcoef", "bincount", "histogram_bin_edges", "histogram", "histogram2d",
           "histogramdd"]

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf")


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _int():
    return dtypes.default_int_dtype()


# ----------------------------------------------------------------------------------------------
# quantiles


def _merge_axes(x, axis):
    """Move the reduction axes of ``x`` last and merge them; returns (x, kept-dims shape,
    keepdims shape)."""
    shape = get_aval(x).shape
    nd = len(shape)
    if axis is None:
        return lax.reshape(x, (math.prod(shape),)), (), (1,) * nd
    axes = _util.canonicalize_axes(axis, nd)
    keep = [i for i in range(nd) if i not in axes]
    kept = tuple(shape[i] for i in keep)
    x = lax.transpose(x, tuple(keep) + tuple(axes)) if keep + list(axes) != list(range(nd)) \
        else x
    x = lax.reshape(x, kept + (math.prod(shape[i] for i in axes),))
    return x, kept, tuple(1 if i in axes else d for i, d in enumerate(shape))


def _quantile(name, a, q, axis, method, keepdims, squash_nans, weights):
    jnp = _jnp()
    if method not in _METHODS:
        raise ValueError("method can only be 'linear', 'lower', 'higher', 'midpoint', "
                         "'nearest' or 'inverted_cdf'")
    if isinstance(axis, list):
        axis = tuple(axis)
    if weights is not None:
        if dtypes.issubdtype(get_aval(weights).dtype, np.complexfloating):
            raise ValueError("Weights cannot be complex types.")
        if method != "inverted_cdf":
            raise NotImplementedError(f"{method} doesn't support weights. Only method "
                                      "'inverted_cdf' supports weights.")
        a, weights = _util.promote_dtypes_inexact(a, weights)
        ashape, wshape = get_aval(a).shape, get_aval(weights).shape
        if wshape != ashape:
            if axis is None:
                raise ValueError("Weights shape must match 'a' shape when axis is None.")
            axes = _util.canonicalize_axes(axis, len(ashape))
            if wshape != tuple(ashape[i] for i in axes):
                raise ValueError(f"Weights shape {wshape} must match reduction axes "
                                 f"{tuple(ashape[i] for i in axes)}")
            weights = lax.broadcast_in_dim(weights, ashape, axes)
    else:
        (a,) = _util.promote_dtypes_inexact(a)
    out_dtype = get_aval(a).dtype
    if dtypes.issubdtype(out_dtype, np.complexfloating):
        raise ValueError("quantile does not support complex input, as the operation is poorly "
                         "defined.")
    (q,) = _util.promote_dtypes_inexact(q)
    q_shape = get_aval(q).shape
    if len(q_shape) > 1:
        raise ValueError(f"q must be have rank <= 1, got shape {q_shape}")
    qdt = get_aval(q).dtype
    x, kept, keep_shape = _merge_axes(a, axis)
    n = get_aval(x).shape[-1]
    if n == 0 and weights is None:
        # The quantile of no values is NaN (NumPy's answer; JAX fails inside its gather).
        x = jnp.full(kept + (1,), np.nan, out_dtype)
        n = 1
    last = len(kept)
    nq = q_shape[0] if q_shape else 1
    qv = lax.reshape(q, (nq,))
    qb = _util.broadcast_to(qv, kept + (nq,))        # q along a new last axis

    nan = jnp.isnan(x)
    if squash_nans:
        x = jnp.where(nan, np.nan, x)                   # NaNs (of any sign) sort last
    else:
        x = jnp.where(jnp.any(nan, axis=-1, keepdims=True), np.nan, x)
    if weights is not None:
        w, _, _ = _merge_axes(weights, axis)
        x, w = lax.sort((x, w), dimension=last, num_keys=1)
    else:
        w = None
        x = lax.sort(x, dimension=last)
    nan = jnp.isnan(x)

    if method == "inverted_cdf":
        res = _inverted_cdf(x, w, nan, qb, n, squash_nans)
    else:
        if squash_nans:
            counts = jnp.sum(~nan, axis=-1, keepdims=True, dtype=qdt)
        else:
            counts = jnp.full((), n, qdt)
        pos = qb * (counts - 1)
        low, high = jnp.floor(pos), jnp.ceil(pos)
        hw = pos - low
        lw = 1 - hw
        top = counts - 1
        low = jnp.clip(low, 0, top).astype(_int())
        high = jnp.clip(high, 0, top).astype(_int())
        lv = jnp.take_along_axis(x, low, axis=-1)
        hv = jnp.take_along_axis(x, high, axis=-1)
        if method == "linear":
            res = lv.astype(qdt) * lw + hv.astype(qdt) * hw
        elif method == "lower":
            res = lv
        elif method == "higher":
            res = hv
        elif method == "nearest":
            res = jnp.where(hw <= 0.5, lv, hv)
        else:  # midpoint
            res = (lv + hv) * 0.5
    # res: kept + (nq,) -> q axis first.
    res = jnp.moveaxis(res, -1, 0)
    if keepdims:
        res = lax.reshape(res, (nq,) + keep_shape)
    if not q_shape:
        res = lax.reshape(res, get_aval(res).shape[1:])
    return lax.convert_element_type(res, out_dtype)


def _inverted_cdf(x, w, nan, qb, n, squash_nans):
    """The smallest sorted value whose cumulative weight reaches ``q`` of the total (NaN when
    a weight is negative/NaN, or a value is NaN without ``squash_nans``)."""
    jnp = _jnp()
    qdt = get_aval(qb).dtype
    if w is None:
        w = jnp.ones_like(x)
    bad = (w < 0) | jnp.isnan(w)
    clean = jnp.where(bad | nan, 0, w)
    cw = jnp.cumsum(clean, axis=-1)
    total = cw[..., -1:]
    target = (qb * total.astype(qdt)).astype(get_aval(cw).dtype)
    idx = jnp.sum(cw[..., None, :] < target[..., :, None], axis=-1, dtype=_int())
    if squash_nans:
        valid = jnp.sum(~nan, axis=-1, keepdims=True, dtype=_int())
    else:
        valid = jnp.full((), n, _int())
    idx = jnp.clip(idx, 0, jnp.maximum(valid - 1, 0))
    res = jnp.take_along_axis(x, idx, axis=-1)
    force = jnp.any(bad, axis=-1, keepdims=True)
    force = force | ((valid == 0) if squash_nans else jnp.any(nan, axis=-1, keepdims=True))
    return jnp.where(force, np.nan, res)


def _check_quantile_args(name, a, q, weights, out, overwrite_input):
    a, q = _util.ensure_arraylike(name, a, q)
    if weights is not None:
        weights = _util.ensure_arraylike(name, weights)
    if overwrite_input or out is not None:
        raise ValueError(f"jax.numpy.{name} does not support overwrite_input=True or "
                         "out != None")
    return a, q, weights


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None):
    """The ``q``-th quantiles (``q`` in [0, 1], scalar or 1-D) over ``axis``."""
    a, q, weights = _check_quantile_args("quantile", a, q, weights, out, overwrite_input)
    return _quantile("quantile", a, q, axis, method, keepdims, False, weights)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, weights=None):
    """``quantile`` ignoring NaNs."""
    a, q, weights = _check_quantile_args("nanquantile", a, q, weights, out, overwrite_input)
    return _quantile("nanquantile", a, q, axis, method, keepdims, True, weights)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, out_sharding=None):
    """The ``q``-th percentiles (``q`` in [0, 100])."""
    a, q, weights = _check_quantile_args("percentile", a, q, weights, out, overwrite_input)
    (q,) = _util.promote_dtypes_inexact(q)
    return _quantile("percentile", a, _jnp().true_divide(q, 100), axis, method, keepdims,
                     False, weights)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, weights=None):
    """``percentile`` ignoring NaNs."""
    a, q, weights = _check_quantile_args("nanpercentile", a, q, weights, out, overwrite_input)
    (q,) = _util.promote_dtypes_inexact(q)
    return _quantile("nanpercentile", a, _jnp().true_divide(q, 100), axis, method, keepdims,
                     True, weights)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median over ``axis`` (NaN where a NaN is present)."""
    a = _util.ensure_arraylike("median", a)
    return quantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input,
                    keepdims=keepdims, method="midpoint")


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median over ``axis`` ignoring NaNs."""
    a = _util.ensure_arraylike("nanmedian", a)
    return nanquantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input,
                       keepdims=keepdims, method="midpoint")


# ----------------------------------------------------------------------------------------------
# covariance


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None,
        dtype=None):
    """The covariance matrix of the variables in the rows (``rowvar``) or columns of ``m``
    (and ``y``); ``fweights``/``aweights`` weight the observations."""
    jnp = _jnp()
    if y is not None:
        m, y = _util.promote_args_inexact("cov", m, y)
        if get_aval(y).ndim > 2:
            raise ValueError("y has more than 2 dimensions")
    else:
        (m,) = _util.promote_args_inexact("cov", m)
    if get_aval(m).ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    if dtype is not None and not dtypes.issubdtype(dtype, np.inexact):
        raise ValueError(f"cov: dtype must be a subclass of float or complex; got {dtype=}")
    X = jnp.atleast_2d(m)
    if not rowvar and get_aval(m).ndim != 1:
        X = X.T
    if get_aval(X).shape[0] == 0:
        return jnp.zeros((0, 0), get_aval(X).dtype)
    if y is not None:
        Y = jnp.atleast_2d(y)
        if not rowvar and get_aval(Y).shape[0] != 1:
            Y = Y.T
        X = jnp.concatenate([X, Y], axis=0)
    nvar, nobs = get_aval(X).shape
    if nobs == 0:
        return jnp.full(() if nvar == 1 else (nvar, nvar), np.nan, get_aval(X).dtype)
    if ddof is None:
        ddof = 1 if not bias else 0
    w = None
    if fweights is not None:
        fweights = _util.ensure_arraylike("cov", fweights)
        if get_aval(fweights).ndim > 1:
            raise RuntimeError("cannot handle multidimensional fweights")
        if get_aval(fweights).shape[0] != nobs:
            raise RuntimeError("incompatible numbers of samples and fweights")
        if not dtypes.issubdtype(get_aval(fweights).dtype, np.integer):
            raise TypeError("fweights must be integer.")
        w = jnp.abs(fweights)
    if aweights is not None:
        aweights = _util.ensure_arraylike("cov", aweights)
        if get_aval(aweights).ndim > 1:
            raise RuntimeError("cannot handle multidimensional aweights")
        if get_aval(aweights).shape[0] != nobs:
            raise RuntimeError("incompatible numbers of samples and aweights")
        aweights = jnp.abs(aweights)
        w = aweights if w is None else w * aweights
    if dtype is not None:
        X = X.astype(dtype)
        w = None if w is None else w.astype(dtype)
    avg, w_sum = jnp.average(X, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        f = nobs - ddof
    elif ddof == 0:
        f = w_sum
    elif aweights is None:
        f = w_sum - ddof
    else:
        f = w_sum - ddof * jnp.sum(w * aweights) / w_sum
    X = X - avg[:, None]
    XT = X.T if w is None else (X * w[None, :]).T
    return jnp.squeeze(jnp.true_divide(jnp.dot(X, jnp.conj(XT)), f))


def corrcoef(x, y=None, rowvar=True, dtype=None):
    """Pearson correlation coefficients (``cov`` normalized by the standard deviations)."""
    jnp = _jnp()
    _util.check_arraylike("corrcoef", x)
    if dtype is not None and not dtypes.issubdtype(dtype, np.inexact):
        raise ValueError(f"corrcoef: dtype must be a subclass of float or complex; got "
                         f"{dtype=}")
    c = cov(x, y, rowvar, dtype=dtype)
    if get_aval(c).ndim == 0:
        return jnp.true_divide(c, c)
    d = jnp.diag(c)
    std = jnp.sqrt(jnp.real(d)).astype(get_aval(c).dtype)
    c = c / std[:, None] / std[None, :]
    re = jnp.clip(jnp.real(c), -1, 1)
    if dtypes.issubdtype(get_aval(c).dtype, np.complexfloating):
        return lax.complex(re, jnp.clip(jnp.imag(c), -1, 1))
    return re


# ----------------------------------------------------------------------------------------------
# counting


def bincount(x, weights=None, minlength=0, *, length=None, out_sharding=None):
    """Counts (or summed ``weights``) of each non-negative integer in ``x``; negative values
    count as 0 and values ``>= length`` are dropped. Needs a static ``length`` under
    transformations."""
    jnp = _jnp()
    x = _util.ensure_arraylike("bincount", x)
    if get_aval(x).dtype == np.bool_:
        x = lax.convert_element_type(x, np.int32)
    if not dtypes.issubdtype(get_aval(x).dtype, np.integer):
        raise TypeError(f"x argument to bincount must have an integer type; got "
                        f"{get_aval(x).dtype}")
    if get_aval(x).ndim != 1:
        raise ValueError("only 1-dimensional input supported.")
    minlength = _util.core_int(minlength, "The error occurred because of argument "
                                          "'minlength' of jnp.bincount.")
    if length is None:
        x = _util.concretize(x)
        if isinstance(x, Tracer):
            raise ConcretizationTypeError(
                x, "The error occurred because of argument 'x' of jnp.bincount. To avoid this "
                   "error, pass a static `length` argument.")
        v = np.asarray(x._value)
        length = builtins.max(minlength, v.size and int(builtins.max(0, v.max())) + 1)
    else:
        length = _util.core_int(length, "The error occurred because of argument 'length' of "
                                        "jnp.bincount.")
    if weights is None:
        weights = _util.scalar_const(1, _int())
    else:
        weights = _util.ensure_arraylike("bincount", weights)
        if get_aval(weights).shape != get_aval(x).shape:
            raise ValueError(f"type of weights must match type of x. Got "
                             f"x.shape={get_aval(x).shape} and "
                             f"weights.shape={get_aval(weights).shape}")
    return jnp.zeros((length,), get_aval(weights).dtype).at[jnp.maximum(x, 0)].add(
        weights, mode="drop")


def _bin_index(edges, x):
    """``searchsorted(edges, x, side='right')`` for sorted 1-D ``edges``."""
    jnp = _jnp()
    nb = get_aval(edges).shape[0]
    if nb > 64:
        return jnp.searchsorted(edges, x, side="right")
    # Few edges: counting the edges <= x is a single fused compare-and-sum.
    # (edges at x's rank + 1: no rank promotion under jax_numpy_rank_promotion='raise')
    e = jnp.reshape(edges, (1,) * get_aval(x).ndim + (nb,))
    return jnp.sum(e <= x[..., None], axis=-1, dtype=_int())


def histogram_bin_edges(a, bins=10, range=None, weights=None):  # noqa: A002
    """The edges of the bins ``histogram`` would use (``bins``: a count or the edges)."""
    jnp = _jnp()
    del weights
    if isinstance(bins, str):
        raise NotImplementedError("string values for `bins` not implemented.")
    _util.check_arraylike("histogram_bin_edges", a, bins)
    arr = _util.as_operand(a)
    dt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(get_aval(arr).dtype))
    if np.ndim(bins) == 1:
        return jnp.asarray(bins, dtype=dt)
    nbins = _util.core_int(bins, "The bins argument of histogram_bin_edges must be static.")
    if range is None:
        range = [jnp.min(arr), jnp.max(arr)]  # noqa: A001
    r = jnp.asarray(range, dtype=dt)
    if get_aval(r).shape != (2,):
        raise ValueError(f"`range` must be either None or a sequence of scalars, got {range}")
    flat = jnp.equal(r[1] - r[0], 0)
    lo = jnp.where(flat, r[0] - 0.5, r[0])
    hi = jnp.where(flat, r[1] + 0.5, r[1])
    return jnp.linspace(lo, hi, nbins + 1, dtype=dt)


def histogram(a, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """Counts (or summed weights) of ``a`` in each bin, and the bin edges. The last bin
    includes its right edge; values outside the range are ignored."""
    jnp = _jnp()
    if weights is None:
        a, _ = _util.ensure_arraylike("histogram", a, bins)
        (a,) = _util.promote_dtypes_inexact(a)
        weights = jnp.ones_like(a)
    else:
        a, _, weights = _util.ensure_arraylike("histogram", a, bins, weights)
        if get_aval(a).shape != get_aval(weights).shape:
            raise ValueError("weights should have the same shape as a.")
        a, weights = _util.promote_dtypes_inexact(a, weights)
    edges = histogram_bin_edges(a, bins, range, weights)
    ne = get_aval(edges).shape[0]
    idx = _bin_index(edges, a)
    idx = jnp.where(a == edges[-1], ne - 1, idx)
    counts = jnp.zeros((ne,), get_aval(weights).dtype).at[idx].add(weights, mode="drop")[1:]
    if density:
        counts = counts / jnp.diff(edges) / counts.sum()
    return counts, edges


def histogramdd(sample, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """The D-dimensional histogram of ``sample`` (shape (N, D)) and the edges per axis."""
    jnp = _jnp()
    if weights is None:
        sample = _util.ensure_arraylike("histogramdd", sample)
        (sample,) = _util.promote_dtypes_inexact(sample)
    else:
        sample, weights = _util.ensure_arraylike("histogramdd", sample, weights)
        if get_aval(weights).shape != get_aval(sample).shape[:1]:
            raise ValueError("should have one weight for each sample.")
        sample, weights = _util.promote_dtypes_inexact(sample, weights)
    N, D = get_aval(sample).shape
    if range is not None and (len(range) != D or any(
            r is not None and np.shape(r)[0] != 2 for r in range)):
        raise ValueError(f"For sample.shape={(N, D)}, range must be a sequence of {D} pairs "
                         f"or Nones; got {range=}")
    try:
        per_dim = list(bins)
    except TypeError:
        per_dim = [bins] * D
    else:
        if len(per_dim) != D:
            raise ValueError("should be a bin for each dimension.")
    idxs, edges = [], []
    for i in builtins.range(D):
        col = sample[:, i]
        e = histogram_bin_edges(col, per_dim[i], None if range is None else range[i], weights)
        k = _bin_index(e, col)
        k = jnp.where(col == e[-1], k - 1, k)
        idxs.append(k)
        edges.append(e)
    nbins = tuple(get_aval(e).shape[0] + 1 for e in edges)
    flat = jnp.ravel_multi_index(tuple(idxs), nbins, mode="clip")
    hist = bincount(flat, weights, length=math.prod(nbins)).reshape(nbins)
    hist = hist[(slice(1, -1),) * D]
    if density:
        hist = hist.astype(get_aval(sample).dtype)
        hist = hist / hist.sum()
        for norm in jnp.ix_(*[jnp.diff(e) for e in edges]):
            hist = hist / norm
    return hist, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """The 2-D histogram of points ``(x, y)`` and the edges along each axis."""
    jnp = _jnp()
    x, y = _util.ensure_arraylike("histogram2d", x, y)
    try:
        nb = len(bins)
    except TypeError:
        nb = 1
    if nb != 1 and nb != 2:
        e = jnp.asarray(bins)
        bins = [e, e]
    hist, edges = histogramdd(jnp.stack([x, y], axis=1), bins, range, weights, density)
    return hist, edges[0], edges[1]

