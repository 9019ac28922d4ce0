"""Assorted ``jax.numpy`` functions built from ``lax`` and other ``kiln.numpy`` functions:
1-D ``convolve``/``correlate``, ``interp``, ``gradient``, ``ediff1d``, ``trapezoid``,
``unwrap``, ``vander``, ``gcd``/``lcm``, ``frexp``/``modf``, ``piecewise``,
``apply_along_axis``/``apply_over_axes``, ``fromfunction``, ``fill_diagonal``,
``packbits``/``unpackbits``, ``geomspace``, ``insert``/``delete``/``trim_zeros`` and the
window functions.

Semantics and dtypes are JAX's (which sometimes differ from NumPy's: ``convolve`` promotes
to inexact, ``fill_diagonal`` needs ``inplace=False``, ...). Static arguments (``axis``,
``N``, ``count``, ...) must be concrete; everything else may be traced.
"""
from __future__ import annotations

import operator

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util

__all__ = ["convolve", "correlate", "interp", "gradient", "ediff1d", "trapezoid", "unwrap",
           "vander", "gcd", "lcm", "frexp", "modf", "piecewise", "apply_along_axis",
           "apply_over_axes", "fromfunction", "fill_diagonal", "packbits", "unpackbits",
           "geomspace", "insert", "delete", "trim_zeros", "bartlett", "blackman", "hamming",
           "hanning", "kaiser"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _shape(x):
    return get_aval(x).shape


def _dtype(x):
    return get_aval(x).dtype


# ----------------------------------------------------------------------------------------------
# convolution


def _conv(name, a, v, mode, precision, preferred_element_type):
    jnp = _jnp()
    a, v = _util.ensure_arraylike(name, a, v)
    if get_aval(a).ndim != 1 or get_aval(v).ndim != 1:
        raise ValueError(f"{name}() only support 1-dimensional inputs.")
    if preferred_element_type is None:
        a, v = _util.promote_dtypes_inexact(a, v)
        preferred = None
    else:
        a, v = _util.promote_dtypes(a, v)
        preferred = _util.user_dtype(preferred_element_type, name)
    n, m = _shape(a)[0], _shape(v)[0]
    if n == 0 or m == 0:
        raise ValueError(f"{name}: inputs cannot be empty, got shapes {_shape(a)} and "
                         f"{_shape(v)}.")
    reverse = False
    if name == "correlate":
        v = jnp.conj(v)
        if n < m:
            a, v, n, m = v, a, m, n
            reverse = True
    else:
        if n < m:
            a, v, n, m = v, a, m, n
        v = lax.rev(v, (0,))
    if mode == "valid":
        lo, hi = 0, 0
    elif mode == "same":
        lo, hi = m // 2, m - m // 2 - 1
    elif mode == "full":
        lo, hi = m - 1, m - 1
    else:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    # As JAX: one conv_general_dilated of the (1, 1, n) and (1, 1, m) views, the mode's
    # zero padding done by the convolution.
    out = lax.conv_general_dilated(a[None, None, :], v[None, None, :], (1,), [(lo, hi)],
                                   precision=precision,
                                   preferred_element_type=preferred)[0, 0, :]
    return lax.rev(out, (0,)) if reverse else out


def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """Discrete linear convolution of two 1-D arrays (``mode``: full, same, valid)."""
    return _conv("convolve", a, v, mode, precision, preferred_element_type)


def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    """Cross-correlation of two 1-D arrays (``mode``: valid, same, full)."""
    return _conv("correlate", a, v, mode, precision, preferred_element_type)


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


# ----------------------------------------------------------------------------------------------
# integer and floating-point decompositions


def gcd(x1, x2):
    """Elementwise greatest common divisor of integers (of absolute values)."""
    jnp = _jnp()
    x1, x2 = _util.ensure_arraylike("gcd", x1, x2)
    x1, x2 = _util.promote_dtypes(x1, x2)
    if not dtypes.issubdtype(_dtype(x1), np.integer):
        raise ValueError("Arguments to jax.numpy.gcd must be integers.")
    x1, x2 = jnp.broadcast_arrays(x1, x2)

    def cond(c):
        return jnp.any(c[1] != 0)

    def body(c):
        a, b = c
        nz = b != 0
        a, b = jnp.where(nz, b, a), jnp.where(nz, lax.rem(a, jnp.where(nz, b, 1)), 0)
        return jnp.where(a < b, b, a), jnp.where(a < b, a, b)

    return lax.while_loop(cond, body, (jnp.abs(x1), jnp.abs(x2)))[0]


def lcm(x1, x2):
    """Elementwise least common multiple of integers (of absolute values)."""
    jnp = _jnp()
    x1, x2 = _util.ensure_arraylike("lcm", x1, x2)
    x1, x2 = _util.promote_dtypes(x1, x2)
    x1, x2 = jnp.abs(x1), jnp.abs(x2)
    if not dtypes.issubdtype(_dtype(x1), np.integer):
        raise ValueError("Arguments to jax.numpy.lcm must be integers.")
    d = gcd(x1, x2)
    return jnp.where(d == 0, 0, x1 * jnp.floor_divide(x2, jnp.where(d == 0, 1, d)))


def _pow2(k, dt):
    """Exactly ``2**k`` in float dtype ``dt`` for integer ``k`` in the normal range."""
    info = dtypes.finfo(dt)
    it = np.dtype(f"int{info.bits}")
    bias = 1 - info.minexp
    bits = lax.shift_left(lax.convert_element_type(k + bias, it),
                          _util.scalar_const(info.nmant, it))
    return lax.bitcast_convert_type(bits, dt)


def frexp(x, /):
    """Mantissa in [0.5, 1) (with ``x``'s sign) and integer exponent: ``x = m * 2**e``."""
    jnp = _jnp()
    x = _util.ensure_arraylike("frexp", x)
    (x,) = _util.promote_dtypes_inexact(x)
    dt = _dtype(x)
    if dtypes.issubdtype(dt, np.complexfloating):
        raise TypeError("frexp does not support complex-valued inputs")
    info = dtypes.finfo(dt)
    it = np.dtype(f"int{info.bits}")
    # Subnormals are scaled into the normal range first.
    small = jnp.abs(x) < info.tiny
    xs = jnp.where(small, x * float(2 ** info.nmant), x)
    bits = lax.bitcast_convert_type(lax.stop_gradient(xs), it)
    field = lax.bitwise_and(lax.shift_right_logical(bits, _util.scalar_const(info.nmant, it)),
                            _util.scalar_const((1 << info.nexp) - 1, it))
    e = field.astype(np.int32) + info.minexp - jnp.where(small, info.nmant, 0)
    special = jnp.isinf(x) | jnp.isnan(x) | (x == 0)
    e = jnp.where(special, 0, e)
    # m = x * 2**-e in two exact power-of-two steps (so it stays differentiable in x).
    h = -e // 2
    m = x * _pow2(h, dt) * _pow2(-e - h, dt)
    return jnp.where(special, x, m), e


def modf(x, /, out=None):
    """Fractional and integral parts, both with ``x``'s sign."""
    jnp = _jnp()
    x = _util.ensure_arraylike("modf", x)
    (x,) = _util.promote_dtypes_inexact(x)
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.modf is not supported.")
    whole = jnp.where(x >= 0, jnp.floor(x), jnp.ceil(x))
    return x - whole, whole


# ----------------------------------------------------------------------------------------------
# functional helpers


def piecewise(x, condlist, funclist, *args, **kw):
    """``funclist[i](x)`` (or the constant ``funclist[i]``) where ``condlist[i]`` holds,
    the last true condition winning; an extra function is the default."""
    jnp = _jnp()
    from kiln.numpy._vectorize import vectorize
    x = _util.ensure_arraylike("piecewise", x)
    nc, nf = len(condlist), len(funclist)
    if nf == nc + 1:
        funclist = list(funclist[-1:]) + list(funclist[:-1])
    elif nf == nc:
        funclist = [0] + list(funclist)
    else:
        raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are "
                         f"expected; got {nf}")
    conds = jnp.asarray(condlist, dtype=bool)
    if get_aval(conds).ndim == get_aval(x).ndim and nc == 1 and get_aval(x).ndim == 0:
        conds = conds.reshape((1,))
    conds = jnp.concatenate([jnp.zeros_like(conds[:1]), conds], axis=0)
    # Index of the last true condition (0: the default branch).
    which = jnp.argmax(jnp.cumsum(conds, axis=0), axis=0)
    dt = _dtype(x)

    def branch(f):
        if callable(f):
            return lambda v: jnp.asarray(f(v, *args, **kw)).astype(dt)
        return lambda v: jnp.asarray(f, dtype=dt)

    branches = [branch(f) for f in funclist]
    return vectorize(lambda i, v: lax.switch(i, branches, v))(which, x)


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``func1d`` applied to every 1-D slice of ``arr`` along ``axis`` (via ``vmap``)."""
    from kiln.transformations import vmap
    _util.check_arraylike("apply_along_axis", arr)
    nd = np.ndim(arr) if not isinstance(arr, (Array, Tracer)) else get_aval(arr).ndim
    axis = _util.canonicalize_axis(axis, nd)

    def func(a):
        return func1d(a, *args, **kwargs)

    for i in range(1, nd - axis):
        func = vmap(func, in_axes=i, out_axes=-1)
    for _ in range(axis):
        func = vmap(func, in_axes=0, out_axes=0)
    return func(arr)


def apply_over_axes(func, a, axes):
    """``func(a, axis)`` applied repeatedly over ``axes``, keeping the rank."""
    jnp = _jnp()
    a = _util.ensure_arraylike("apply_over_axes", a)
    for axis in axes:
        b = func(a, axis)
        if get_aval(b).ndim == get_aval(a).ndim:
            a = b
        elif get_aval(b).ndim == get_aval(a).ndim - 1:
            a = jnp.expand_dims(b, axis)
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function(i0, i1, ...)`` evaluated on the index grids of ``shape`` (via ``vmap``,
    so ``function`` sees scalar indices)."""
    from kiln.transformations import vmap
    jnp = _jnp()
    shape = _util.canonicalize_shape(shape, "shape argument of jnp.fromfunction()")
    f = function
    for i in range(len(shape)):
        in_axes = [0 if i == j else None for j in range(len(shape))]
        f = vmap(f, in_axes=tuple(in_axes[::-1]))
    return f(*(jnp.arange(s, dtype=dtype) for s in shape), **kwargs)


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """A copy of ``a`` with its main diagonal set to ``val`` (repeated as needed); only
    ``inplace=False`` is supported since arrays are immutable."""
    jnp = _jnp()
    if inplace:
        raise NotImplementedError("JAX arrays are immutable, must use inplace=False")
    if wrap:
        raise NotImplementedError("wrap=True is not implemented, must use wrap=False")
    a, val = _util.ensure_arraylike("fill_diagonal", a, val)
    nd = get_aval(a).ndim
    if nd < 2:
        raise ValueError("array must be at least 2-d")
    if nd > 2 and not all(d == _shape(a)[0] for d in _shape(a)[1:]):
        raise ValueError("All dimensions of input must be of equal length")
    n = min(_shape(a))
    idx = jnp.diag_indices(n, nd)
    if get_aval(val).ndim:
        v = jnp.ravel(val)
        m = get_aval(v).size
        if m < n:
            v = jnp.tile(v, -(-n // m))
        val = v[:n]
    return a.at[idx].set(val)


# ----------------------------------------------------------------------------------------------
# bits


def _check_bitorder(bitorder):
    if bitorder not in ("little", "big"):
        raise ValueError("'order' must be either 'little' or 'big'")


def packbits(a, axis=None, bitorder="big"):
    """Pack the truth values of ``a`` into ``uint8`` bytes along ``axis`` (flattened when
    None), padding with zero bits."""
    jnp = _jnp()
    arr = _util.ensure_arraylike("packbits", a)
    if not (dtypes.issubdtype(_dtype(arr), np.integer) or _dtype(arr) == np.bool_):
        raise TypeError("Expected an input array of integer or boolean data type")
    _check_bitorder(bitorder)
    bits = (arr != 0).astype(np.uint8)
    if axis is None:
        bits = jnp.ravel(bits)
        axis = 0
    bits = jnp.swapaxes(bits, axis, -1)
    rem = _shape(bits)[-1] % 8
    if rem:
        bits = lax.pad(bits, _util.scalar_const(0, np.uint8),
                       [(0, 0, 0)] * (bits.ndim - 1) + [(0, 8 - rem, 0)])
    bits = bits.reshape(_shape(bits)[:-1] + (_shape(bits)[-1] // 8, 8))
    shifts = np.arange(8, dtype=np.uint8)
    if bitorder == "big":
        shifts = shifts[::-1]
    packed = jnp.sum(jnp.left_shift(bits, jnp.asarray(shifts)), axis=-1).astype(np.uint8)
    return jnp.swapaxes(packed, axis, -1)


def unpackbits(a, axis=None, count=None, bitorder="big"):
    """Unpack ``uint8`` bytes into bits (0/1 ``uint8``) along ``axis`` (flattened when None);
    ``count`` keeps (or zero-pads to) that many bits."""
    jnp = _jnp()
    arr = _util.ensure_arraylike("unpackbits", a)
    if _dtype(arr) != np.uint8:
        raise TypeError("Expected an input array of unsigned byte data type")
    _check_bitorder(bitorder)
    masks = np.left_shift(np.uint8(1), np.arange(8, dtype=np.uint8))
    if bitorder == "big":
        masks = masks[::-1]
    if axis is None:
        arr = jnp.ravel(arr)
        axis = 0
    arr = jnp.swapaxes(arr, axis, -1)
    out = (jnp.bitwise_and(arr[..., None], jnp.asarray(masks)) > 0).astype(np.uint8)
    out = out.reshape(_shape(out)[:-2] + (-1,))
    if count is not None:
        count = _util.core_int(count, "The count argument of jnp.unpackbits must be static.")
        have = _shape(out)[-1]
        if count > have:
            out = jnp.pad(out, [(0, 0)] * (out.ndim - 1) + [(0, count - have)])
        else:
            out = out[..., :count]
    return jnp.swapaxes(out, axis, -1)


# ----------------------------------------------------------------------------------------------
# creation and editing


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """``num`` numbers spaced evenly on a log scale from ``start`` to ``stop``."""
    jnp = _jnp()
    num = _util.core_int(num, "'num' argument of jnp.geomspace")
    axis = _util.core_int(axis, "'axis' argument of jnp.geomspace")
    _util.check_arraylike("geomspace", start, stop)
    if dtype is None:
        dt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(dtypes.result_type(start, stop)))
    else:
        dt = _util.user_dtype(dtype, "geomspace")
    cdt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(dt))
    start = jnp.asarray(start).astype(cdt)
    stop = jnp.asarray(stop).astype(cdt)
    sign = jnp.sign(start)
    res = sign * jnp.logspace(jnp.log10(start / sign), jnp.log10(stop / sign), num,
                              endpoint=endpoint, base=10.0, dtype=cdt, axis=0)
    ax = _util.canonicalize_axis(axis, get_aval(res).ndim)
    if ax:
        res = jnp.moveaxis(res, 0, ax)
    return lax.convert_element_type(res, dt)


def insert(arr, obj, values, axis=None):
    """``arr`` with ``values`` inserted before the indices ``obj`` along ``axis``."""
    jnp = _jnp()
    a, _, vals = _util.ensure_arraylike("insert", arr, 0 if isinstance(obj, slice) else obj,
                                        values)
    if axis is None:
        a = jnp.ravel(a)
        axis = 0
    axis = _util.concretize(axis)
    if isinstance(axis, Tracer):
        raise ConcretizationTypeError(axis, "axis argument of jnp.insert()")
    axis = _util.canonicalize_axis(axis, get_aval(a).ndim)
    n_in = _shape(a)[axis]
    if isinstance(obj, slice):
        idx = jnp.arange(*obj.indices(n_in))
    else:
        idx = jnp.asarray(obj)
    if get_aval(idx).ndim > 1:
        raise ValueError(f"jnp.insert(): obj must be a slice, a one-dimensional array, or a "
                         f"scalar; got {obj}")
    if not dtypes.issubdtype(_dtype(idx), np.integer):
        if get_aval(idx).size == 0 and not isinstance(obj, (Array, Tracer)):
            idx = idx.astype(dtypes.default_int_dtype())
        else:
            raise ValueError(f"jnp.insert(): index array must be integer typed; got {obj}")
    vals = jnp.array(vals, ndmin=get_aval(a).ndim, dtype=_dtype(a), copy=False)
    if get_aval(idx).size == 1:
        index = jnp.ravel(idx)[0]
        if get_aval(idx).ndim == 0:
            vals = jnp.moveaxis(vals, 0, axis)
        idx = jnp.full((_shape(vals)[axis],), index)
    n_ins = _util.broadcast_shapes(_shape(idx), (_shape(vals)[axis],))[0]
    out_shape = list(_shape(a))
    out_shape[axis] += n_ins
    idx = jnp.clip(jnp.where(idx < 0, idx + n_in, idx), 0, n_in)
    # Final position of inserted element k: its index plus the number of inserted elements
    # that come before it (stable order: by index, then by k).
    k = jnp.arange(n_ins, dtype=_dtype(idx))
    idx = jnp.broadcast_to(idx, (n_ins,))
    before = jnp.sum((idx[None, :] < idx[:, None]) | ((idx[None, :] == idx[:, None])
                                                      & (k[None, :] < k[:, None])),
                     axis=1, dtype=_dtype(idx))
    vpos = idx + before
    keep = jnp.ones((n_in + n_ins,), bool).at[vpos].set(False)
    from kiln.numpy._setops import nonzero
    apos = nonzero(keep, size=n_in)[0]
    out = jnp.zeros(tuple(out_shape), _dtype(a))
    lead = (slice(None),) * axis
    vals = jnp.broadcast_to(vals, tuple(out_shape[:axis]) + (n_ins,)
                            + tuple(out_shape[axis + 1:]))
    out = out.at[lead + (vpos,)].set(vals)
    return out.at[lead + (apos,)].set(a)


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """``arr`` without the entries ``obj`` (an int, slice, index array or mask) along
    ``axis``; index arrays must be concrete unless ``assume_unique_indices``."""
    jnp = _jnp()
    a = _util.ensure_arraylike("delete", arr)
    if axis is None:
        a = jnp.ravel(a)
        axis = 0
    axis = _util.canonicalize_axis(axis, get_aval(a).ndim)
    n = _shape(a)[axis]
    lead = (slice(None),) * axis
    if not isinstance(obj, (Tracer, slice)):
        try:
            i = operator.index(obj)
        except TypeError:
            pass
        else:
            i = _util.canonicalize_axis(i, n)
            return jnp.concatenate([a[lead + (slice(0, i),)], a[lead + (slice(i + 1, None),)]],
                                   axis=axis)
    if isinstance(obj, slice):
        obj = np.arange(n)[obj]
        assume_unique_indices = True
    _util.check_arraylike("delete", a, obj)
    if dtypes.issubdtype(_util.dtype_of(obj), np.integer) and assume_unique_indices:
        o = jnp.ravel(jnp.asarray(obj))
        o = jnp.clip(jnp.where(o < 0, o + n, o), 0, n)
        # Kept position j of the output: j plus the number of deleted indices <= it.
        m = get_aval(o).size
        o = jnp.sort(o) - jnp.arange(m, dtype=_dtype(o))
        j = jnp.arange(n - m, dtype=_dtype(o))
        j = j + jnp.sum(j[None, :] >= o[:, None], axis=0, dtype=_dtype(j))
        return a[lead + (j,)]
    obj = _util.concretize(obj)
    if isinstance(obj, Tracer):
        raise ConcretizationTypeError(obj, "'obj' array argument of jnp.delete(); pass "
                                           "assume_unique_indices=True to use traced indices.")
    o = np.asarray(obj._value if type(obj) is Array else obj)
    if dtypes.issubdtype(o.dtype, np.integer):
        mask = np.ones(n, bool)
        mask[o] = False
    elif o.dtype == bool:
        if o.shape != (n,):
            raise ValueError("np.delete(arr, obj): for boolean indices, obj must be "
                             "one-dimensional with length matching specified axis.")
        mask = ~o
    else:
        raise ValueError(f"np.delete(arr, obj): got obj.dtype={o.dtype}; must be integer or "
                         "bool.")
    return a[lead + (np.nonzero(mask)[0],)]


def trim_zeros(filt, trim="fb", axis=None):
    """``filt`` without its leading ('f') and/or trailing ('b') zeros (needs a concrete
    input: the result's shape depends on the values)."""
    filt = _util.ensure_arraylike("trim_zeros", filt)
    known = _util.concretize(filt)     # the slice bounds need values; the slice keeps filt
    if isinstance(known, Tracer):
        raise ConcretizationTypeError(filt, "Error arose in the `filt` argument of "
                                            "trim_zeros()")
    v = np.asarray(known._value)
    axes = set(_util.canonicalize_axes(axis, v.ndim))
    t = trim.lower()
    if not axes or ("f" not in t and "b" not in t):
        return filt
    idx = []
    for ax in range(v.ndim):
        if ax not in axes:
            idx.append(slice(None))
            continue
        nz = np.any(v != 0, axis=tuple(i for i in range(v.ndim) if i != ax))
        if not nz.any():
            idx.append(slice(0, 0))
            continue
        start = int(nz.argmax()) if "f" in t else None
        stop = v.shape[ax] - int(nz[::-1].argmax()) if "b" in t else None
        idx.append(slice(start, stop))
    return filt[tuple(idx)]


# ----------------------------------------------------------------------------------------------
# window functions (default float dtype)


def _window(name, M, fn):
    jnp = _jnp()
    M = _util.core_int(M, f"M argument of jnp.{name}")
    dt = dtypes.default_float_dtype()
    if M <= 1:
        return jnp.ones((max(M, 0),), dt)
    return fn(lax.iota(dt, M), M)


def bartlett(M):
    """The Bartlett (triangular) window."""
    jnp = _jnp()
    return _window("bartlett", M, lambda n, M: 1 - jnp.abs(2 * n + 1 - M) / (M - 1))


def blackman(M):
    """The Blackman window."""
    jnp = _jnp()
    return _window("blackman", M, lambda n, M: 0.42 - 0.5 * jnp.cos(2 * np.pi * n / (M - 1))
                   + 0.08 * jnp.cos(4 * np.pi * n / (M - 1)))


def hamming(M):
    """The Hamming window."""
    jnp = _jnp()
    return _window("hamming", M, lambda n, M: 0.54 - 0.46 * jnp.cos(2 * np.pi * n / (M - 1)))


def hanning(M):
    """The Hann window."""
    jnp = _jnp()
    return _window("hanning", M, lambda n, M: 0.5 * (1 - jnp.cos(2 * np.pi * n / (M - 1))))


def kaiser(M, beta):
    """The Kaiser window with shape parameter ``beta``."""
    jnp = _jnp()

    def fn(n, M):
        alpha = 0.5 * (M - 1)
        return jnp.i0(beta * jnp.sqrt(1 - ((n - alpha) / alpha) ** 2)) / jnp.i0(beta)

    return _window("kaiser", M, fn)

