"""Interpolation, differences and integration: ``interp``, ``gradient``,
``ediff1d``, ``trapezoid``, ``unwrap``, and ``vander``, as ``jax.numpy``.

Semantics and dtypes are JAX's (which sometimes differ from NumPy's). Static arguments
(``axis``, ``N``, ``count``, ...) must be concrete; everything else may be traced.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import get_aval
from kiln.numpy import _util

__all__ = ["interp", "gradient", "ediff1d", "trapezoid", "unwrap", "vander"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _shape(x):
    return get_aval(x).shape


def _dtype(x):
    return get_aval(x).dtype



# ----------------------------------------------------------------------------------------------
# interpolation and differences


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of ``(xp, fp)`` at ``x`` (``xp`` increasing);
    ``left``/``right`` give the values outside (or ``'extrapolate'``), ``period`` makes the
    abscissa periodic."""
    jnp = _jnp()
    x, xp, fp = _util.ensure_arraylike("interp", x, xp, fp)
    if _shape(xp) != _shape(fp) or get_aval(xp).ndim != 1:
        raise ValueError("xp and fp must be one-dimensional arrays of equal size")
    x, xp = _util.promote_dtypes_inexact(x, xp)
    (fp,) = _util.promote_dtypes_inexact(fp)
    extrap = []
    for side, val in (("left", left), ("right", right)):
        if isinstance(val, str):
            if val != "extrapolate":
                raise ValueError(f"the only valid string value of `{side}` is 'extrapolate', "
                                 f"but got: {val!r}")
            extrap.append(True)
        else:
            extrap.append(False)
    if dtypes.issubdtype(_dtype(x), np.complexfloating):
        raise ValueError("jnp.interp: complex x values not supported.")
    if period is not None:
        if np.ndim(period) != 0:
            raise ValueError(f"period must be a scalar; got {period}")
        period = jnp.abs(period)
        x = x % period
        xp = xp % period
        xp, fp = lax.sort((xp, fp), dimension=0, num_keys=1)
        xp = jnp.concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = jnp.concatenate([fp[-1:], fp, fp[:1]])
    nxp = _shape(xp)[0]
    if nxp > 64:  # binary search; for few points one fused compare-and-count is faster
        i = jnp.searchsorted(xp, x, side="right")
    else:
        i = jnp.sum(xp <= x[..., None], axis=-1, dtype=dtypes.default_int_dtype())
    i = jnp.clip(i, 1, nxp - 1)
    f0, f1 = fp[i - 1], fp[i]
    x0, x1 = xp[i - 1], xp[i]
    df, dx = f1 - f0, x1 - x0
    delta = x - x0
    eps = np.spacing(np.finfo(_dtype(xp)).eps)
    dx0 = jnp.abs(dx) <= eps          # avoids NaN gradients for repeated abscissae
    f = jnp.where(dx0, f0, f0 + (delta / jnp.where(dx0, 1, dx)) * df)
    if not extrap[0] and period is None:
        f = jnp.where(x < xp[0], fp[0] if left is None else left, f)
    if not extrap[1] and period is None:
        f = jnp.where(x > xp[-1], fp[-1] if right is None else right, f)
    return f


def _slice_axis(x, start, stop, axis):
    n = _shape(x)[axis]
    start, stop, _ = slice(start, stop).indices(n)
    return lax.slice_in_dim(x, start, max(start, stop), 1, axis)


def gradient(f, *varargs, axis=None, edge_order=None):
    """Second-order central differences in the interior and first-order one-sided
    differences at the edges; ``varargs`` give scalar spacings or 1-D coordinates."""
    jnp = _jnp()
    if edge_order is not None:
        raise NotImplementedError("The 'edge_order' argument to jnp.gradient is not "
                                  "supported.")
    _util.check_arraylike("gradient", f, *varargs)
    a, *spacing = _util.promote_dtypes_inexact(f, *varargs)
    nd = get_aval(a).ndim
    if axis is None:
        axes = tuple(range(nd))
    else:
        axes = _util.canonicalize_axes(axis, nd, allow_duplicate=True)
    if not axes:
        return []
    if min(_shape(a)[i] for i in axes) < 2:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at "
                         "least 2 elements are required.")
    if not spacing:
        dx = [1.0] * len(axes)
    elif len(spacing) == 1:
        dx = spacing * len(axes)
    elif len(spacing) == len(axes):
        dx = spacing
    else:
        raise TypeError(f"Invalid number of spacing arguments {len(spacing)} for {axis=}")

    def along(h, ax):
        def sl(x, s, e):
            return _slice_axis(x, s, e, ax)
        upper = sl(a, 1, 2) - sl(a, 0, 1)
        lower = sl(a, -1, None) - sl(a, -2, -1)
        if np.ndim(h) == 0:
            inner = (sl(a, 2, None) - sl(a, None, -2)) * 0.5 / h
            upper, lower = upper / h, lower / h
        elif np.ndim(h) == 1:
            if _shape(h)[0] != _shape(a)[ax]:
                raise ValueError("Spacing arrays must have the same length as the dimension "
                                 "along which the gradient is calculated.")
            hs = [1] * nd
            hs[ax] = _shape(h)[0]
            h = jnp.reshape(h, hs)
            upper = upper / (sl(h, 1, 2) - sl(h, 0, 1))
            lower = lower / (sl(h, -1, None) - sl(h, -2, -1))
            d1 = sl(h, 1, -1) - sl(h, 0, -2)
            d2 = sl(h, 2, None) - sl(h, 1, -1)
            inner = (-d2 / (d1 * (d1 + d2)) * sl(a, 0, -2)
                     + (d2 - d1) / (d1 * d2) * sl(a, 1, -1)
                     + d1 / (d2 * (d1 + d2)) * sl(a, 2, None))
        else:
            raise ValueError("Spacing arrays must be 1D arrays or scalars.")
        return jnp.concatenate([upper, inner, lower], axis=ax)

    out = [along(h, ax) for ax, h in zip(axes, dx)]
    return out[0] if len(axes) == 1 else out


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences of consecutive elements of the flattened array, with optional values
    prepended/appended (cast to the array's dtype)."""
    jnp = _jnp()
    arr = jnp.ravel(_util.ensure_arraylike("ediff1d", ary))
    res = lax.sub(arr[1:], arr[:-1])
    if to_begin is not None:
        tb = _util.ensure_arraylike("ediff1d", to_begin)
        res = jnp.concatenate([jnp.ravel(tb.astype(_dtype(arr))), res])
    if to_end is not None:
        te = _util.ensure_arraylike("ediff1d", to_end)
        res = jnp.concatenate([res, jnp.ravel(te.astype(_dtype(arr)))])
    return res


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """Integral of ``y`` along ``axis`` by the trapezoidal rule (sample points ``x`` or a
    uniform spacing ``dx``)."""
    jnp = _jnp()
    if x is None:
        y = _util.ensure_arraylike("trapezoid", y)
        (y,) = _util.promote_dtypes_inexact(y)
        d = jnp.asarray(dx)
        if get_aval(d).ndim > 0:
            d = jnp.expand_dims(d, tuple(range(get_aval(y).ndim - get_aval(d).ndim)))
            d = jnp.moveaxis(d, axis, -1)
    else:
        y, x = _util.ensure_arraylike("trapezoid", y, x)
        y, x = _util.promote_dtypes_inexact(y, x)
        d = jnp.diff(x) if get_aval(x).ndim == 1 else jnp.moveaxis(jnp.diff(x, axis=axis),
                                                                     axis, -1)
    y = jnp.moveaxis(y, axis, -1)
    if get_aval(d).ndim == 0 or _shape(d)[-1] == 1:
        d0 = d if get_aval(d).ndim == 0 else d[..., 0]
        return d0 * (jnp.sum(y, axis=-1) - 0.5 * (y[..., 0] + y[..., -1]))
    return 0.5 * jnp.sum(d * (y[..., 1:] + y[..., :-1]), axis=-1)


def unwrap(p, discont=None, axis=-1, period=2 * np.pi):
    """Unwrap phases: jumps larger than ``discont`` become their ``period`` complement."""
    jnp = _jnp()
    p = _util.ensure_arraylike("unwrap", p)
    p, period = _util.promote_dtypes(p, period)
    if dtypes.issubdtype(_dtype(p), np.complexfloating):
        raise ValueError("jnp.unwrap does not support complex inputs.")
    ax = _util.canonicalize_axis(axis, get_aval(p).ndim)
    if _shape(p)[ax] == 0:
        return p
    if discont is None:
        discont = period / 2
    interval = period // 2 if dtypes.issubdtype(_dtype(p), np.integer) else period / 2
    dd = jnp.diff(p, axis=ax)
    ddmod = jnp.mod(dd + interval, period) - interval
    ddmod = jnp.where((ddmod == -interval) & (dd > 0), interval, ddmod)
    correct = jnp.where(jnp.abs(dd) < discont, 0, ddmod - dd)
    rest = _slice_axis(p, 1, None, ax) + jnp.cumsum(correct, axis=ax)
    return jnp.concatenate([_slice_axis(p, 0, 1, ax), rest.astype(_dtype(p))], axis=ax)


def vander(x, N=None, increasing=False):  # noqa: N803
    """The Vandermonde matrix of 1-D ``x``: columns are powers of ``x``."""
    jnp = _jnp()
    x = _util.ensure_arraylike("vander", x)
    if get_aval(x).ndim != 1:
        raise ValueError("x must be a one-dimensional array")
    N = _shape(x)[0] if N is None else _util.core_int(N, "'N' argument of jnp.vander()")
    if N < 0:
        raise ValueError("N must be nonnegative")
    powers = lax.iota(_dtype(x), N) if _dtype(x) != np.bool_ else jnp.arange(N)
    if not increasing:
        powers = (N - 1) - powers
    return jnp.power(x[:, None], powers[None, :].astype(_dtype(x)))


