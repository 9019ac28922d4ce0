"""Convolution, correlation and detrending for ``kiln.scipy.signal`` (``jax.scipy.signal``).

The direct methods lower to the ``lax.conv_general_dilated`` primitive (one batch, one
feature, the inputs' dimensions as spatial dimensions); ``fftconvolve`` multiplies
``kiln.numpy.fft`` spectra. Everything is built from ``kiln.lax``/``kiln.numpy``, so it
traces under ``jit``, ``grad`` and ``vmap``. Shapes, modes and breakpoints are static.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

import kiln.numpy as jnp
from kiln import lax
from kiln.array import Array
from kiln.core.trace import concretize
from kiln.numpy._util import (
    canonicalize_axis,
    check_arraylike,
    ensure_arraylike,
    promote_dtypes_inexact,
    shape_of,
)

ModeString = Literal["full", "same", "valid"]
ArrayLike = Any
PrecisionLike = Any

_MODES = ("full", "same", "valid")


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _convolve_nd(in1, in2, mode: str, *, precision: PrecisionLike) -> Array:
    """N-d convolution of two arrays of equal rank through ``conv_general_dilated``.

    As ``scipy.signal.convolve``'s direct method, the larger input slides over the
    smaller one; which is which only changes the ``"same"`` window, which is centred on
    the *first* argument.
    """
    if mode not in _MODES:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    in1, in2 = ensure_arraylike("convolve", in1, in2)
    s1, s2 = shape_of(in1), shape_of(in2)
    if len(s1) != len(s2):
        raise ValueError("in1 and in2 must have the same number of dimensions")
    if _size(s1) == 0 or _size(s2) == 0:
        raise ValueError("zero-size arrays not supported in convolutions, got shapes "
                         f"{s1} and {s2}.")
    in1, in2 = promote_dtypes_inexact(in1, in2)
    first_larger = all(a >= b for a, b in zip(s1, s2))
    first_smaller = all(a <= b for a, b in zip(s1, s2))
    if not (first_larger or first_smaller):
        raise ValueError("One input must be smaller than the other in every dimension.")
    # The kernel is the smaller operand (the second one when the shapes are equal, after
    # the exchange below, i.e. the original first argument).
    if first_smaller:
        in1, in2 = in2, in1
    kshape = shape_of(in2)
    if mode == "full":
        padding = [(k - 1, k - 1) for k in kshape]
    elif mode == "valid":
        padding = [(0, 0)] * len(kshape)
    else:  # "same": centre the output on the original first argument
        padding = []
        for k, o in zip(kshape, s2):
            padding.append((k - 1 - (o - 1) // 2, k - o + (o - 1) // 2))
    kernel = jnp.flip(in2)
    out = lax.conv_general_dilated(in1[None, None], kernel[None, None], (1,) * len(kshape),
                                   padding, precision=precision)
    return out[0, 0]


def _index_tuple(axes) -> tuple:
    if isinstance(axes, (tuple, list)):
        return tuple(operator.index(a) for a in axes)
    return (operator.index(axes),)


def fftconvolve(in1: ArrayLike, in2: ArrayLike, mode: ModeString = "full",
                axes: Sequence[int] | None = None) -> Array:
    """Convolve two N-dimensional arrays with the fast Fourier transform.

    Kiln (JAX) implementation of :func:`scipy.signal.fftconvolve`.

    Args:
      in1: left-hand input to the convolution.
      in2: right-hand input to the convolution; ``in1.ndim == in2.ndim`` is required.
      mode: size of the output:

        * ``"full"`` (default): the full convolution of the inputs.
        * ``"same"``: the centred part of the full output with the shape of ``in1``.
        * ``"valid"``: only the part that does not depend on zero padding.

      axes: optional sequence of axes to convolve over. The other axes are mapped
        (element ``i`` of ``in1`` is convolved with element ``i`` of ``in2``) and must
        have the same size in both inputs.

    Returns:
      The convolution, of the inputs' inexact dtype.

    See Also:
      :func:`kiln.scipy.signal.convolve` (direct convolution).

    Examples:
      >>> x = jnp.array([1., 2., 3., 2., 1.])
      >>> fftconvolve(x, jnp.ones(3), mode='same')  # doctest: +SKIP
      Array([3., 6., 7., 6., 3.], dtype=float32)
    """
    check_arraylike("fftconvolve", in1, in2)
    in1, in2 = promote_dtypes_inexact(in1, in2)
    s1, s2 = shape_of(in1), shape_of(in2)
    nd = len(s1)
    if nd != len(s2):
        raise ValueError("in1 and in2 should have the same dimensionality")
    if mode not in _MODES:
        raise ValueError("mode must be one of ['same', 'full', 'valid']")
    if axes is None:
        conv_axes = tuple(range(nd))
    else:
        conv_axes = tuple(sorted({canonicalize_axis(a, nd) for a in _index_tuple(axes)}))
        mapped = [i for i in range(nd) if i not in conv_axes]
        if any(s1[i] != s2[i] for i in mapped):
            raise ValueError(f"mapped axes must have same shape; got in1.shape={s1} "
                             f"in2.shape={s2} axes={_index_tuple(axes)}")
    c1 = [s1[a] for a in conv_axes]
    c2 = [s2[a] for a in conv_axes]
    full = [a + b - 1 for a, b in zip(c1, c2)]
    if mode == "valid":
        keep = all(a >= b for a, b in zip(c1, c2))
        exchange = all(a <= b for a, b in zip(c1, c2))
        if not (keep or exchange):
            raise ValueError("For 'valid' mode, One input must be at least as large as "
                             "the other in every dimension.")
        if exchange:
            in1, in2, c1, c2, s1, s2 = in2, in1, c2, c1, s2, s1
    if all(a == 1 or b == 1 for a, b in zip(c1, c2)):
        conv = in1 * in2
    elif jnp.iscomplexobj(in1):
        conv = jnp.fft.ifftn(jnp.fft.fftn(in1, full, conv_axes) * jnp.fft.fftn(in2, full, conv_axes),
                             full, conv_axes)
    else:
        conv = jnp.fft.irfftn(jnp.fft.rfftn(in1, full, conv_axes)
                              * jnp.fft.rfftn(in2, full, conv_axes), full, conv_axes)
    if mode == "full":
        out = full
    elif mode == "same":
        out = c1
    else:
        out = [a - b + 1 for a, b in zip(c1, c2)]
    cshape = shape_of(conv)
    start = [0] * nd
    stop = list(cshape)
    for ax, f, o in zip(conv_axes, full, out):
        start[ax] = (f - o) // 2
        stop[ax] = start[ax] + o
    if tuple(start) == (0,) * nd and tuple(stop) == tuple(cshape):
        return conv
    return lax.slice(conv, start, stop)


def convolve(in1: Array, in2: Array, mode: ModeString = "full", method: str = "auto",
             precision: PrecisionLike = None) -> Array:
    """Convolution of two N-dimensional arrays.

    Kiln (JAX) implementation of :func:`scipy.signal.convolve`.

    Args:
      in1: left-hand input to the convolution.
      in2: right-hand input to the convolution; ``in1.ndim == in2.ndim`` is required.
      mode: ``"full"`` (default), ``"same"`` (centred, shaped as ``in1``) or ``"valid"``
        (no dependence on zero padding).
      method: ``"auto"`` (default; always ``"direct"``), ``"direct"`` (lowers to
        :func:`kiln.lax.conv_general_dilated`) or ``"fft"`` (:func:`fftconvolve`).
      precision: precision of the direct computation (see :class:`kiln.lax.Precision`).

    Returns:
      The convolution, of the inputs' inexact dtype.

    Examples:
      >>> convolve(jnp.array([1, 2, 3, 2, 1]), jnp.array([1, 1, 1]), mode='valid')  # doctest: +SKIP
      Array([6., 7., 6.], dtype=float32)
    """
    if method == "fft":
        return fftconvolve(in1, in2, mode=mode)
    if method in ("direct", "auto"):
        return _convolve_nd(in1, in2, mode, precision=precision)
    raise ValueError(f"Got method={method!r}; expected 'auto', 'fft', or 'direct'.")


def correlate(in1: Array, in2: Array, mode: ModeString = "full", method: str = "auto",
              precision: PrecisionLike = None) -> Array:
    """Cross-correlation of two N-dimensional arrays.

    Kiln (JAX) implementation of :func:`scipy.signal.correlate`: the convolution of
    ``in1`` with the reversed complex conjugate of ``in2``.

    Args:
      in1: left-hand input.
      in2: right-hand input; ``in1.ndim == in2.ndim`` is required.
      mode: ``"full"`` (default), ``"same"`` or ``"valid"`` (as :func:`convolve`).
      method: ``"auto"`` (default), ``"direct"`` or ``"fft"`` (as :func:`convolve`).
      precision: precision of the direct computation.

    Returns:
      The cross-correlation, of the inputs' inexact dtype.

    Examples:
      >>> correlate(jnp.array([1, 2, 3, 2, 1]), jnp.array([1, 3, 2]), mode='valid')  # doctest: +SKIP
      Array([13., 15., 11.], dtype=float32)
    """
    in2 = ensure_arraylike("correlate", in2)
    return convolve(in1, jnp.flip(jnp.conj(in2)), mode, precision=precision, method=method)


def _check_2d(name, in1, in2, boundary, fillvalue):
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError(f"{name}() only supports boundary='fill', fillvalue=0")
    if np.ndim(in1) != 2 or np.ndim(in2) != 2:
        raise ValueError(f"{name}() only supports 2-dimensional inputs.")


def convolve2d(in1: Array, in2: Array, mode: ModeString = "full", boundary: str = "fill",
               fillvalue: float = 0, precision: PrecisionLike = None) -> Array:
    """Convolution of two 2-dimensional arrays.

    Kiln (JAX) implementation of :func:`scipy.signal.convolve2d`.

    Args:
      in1: left-hand input, 2-dimensional.
      in2: right-hand input, 2-dimensional.
      mode: ``"full"`` (default), ``"same"`` or ``"valid"`` (as :func:`convolve`).
      boundary: only ``"fill"`` is supported (as in JAX).
      fillvalue: only ``0`` is supported (as in JAX).
      precision: precision of the computation (see :class:`kiln.lax.Precision`).

    Returns:
      The 2-D convolution, of the inputs' inexact dtype.

    Raises:
      NotImplementedError: for another ``boundary`` or a non-zero ``fillvalue``.
    """
    _check_2d("convolve2d", in1, in2, boundary, fillvalue)
    return _convolve_nd(in1, in2, mode, precision=precision)


def correlate2d(in1: Array, in2: Array, mode: ModeString = "full", boundary: str = "fill",
                fillvalue: float = 0, precision: PrecisionLike = None) -> Array:
    """Cross-correlation of two 2-dimensional arrays.

    Kiln (JAX) implementation of :func:`scipy.signal.correlate2d`.

    Args:
      in1: left-hand input, 2-dimensional.
      in2: right-hand input, 2-dimensional.
      mode: ``"full"`` (default), ``"same"`` or ``"valid"`` (as :func:`convolve`).
      boundary: only ``"fill"`` is supported (as in JAX).
      fillvalue: only ``0`` is supported (as in JAX).
      precision: precision of the computation (see :class:`kiln.lax.Precision`).

    Returns:
      The 2-D cross-correlation, of the inputs' inexact dtype.

    Raises:
      NotImplementedError: for another ``boundary`` or a non-zero ``fillvalue``.
    """
    _check_2d("correlate2d", in1, in2, boundary, fillvalue)
    in1, in2 = ensure_arraylike("correlate2d", in1, in2)
    s1, s2 = shape_of(in1), shape_of(in2)
    first_smaller = all(a <= b for a, b in zip(s1, s2))
    # The orientation JAX picks (and so its rounding and, for complex inputs in the
    # "full" case, its conjugation) depends on which operand is the larger one.
    if mode == "full" and first_smaller:
        return jnp.conj(_convolve_nd(jnp.flip(in2), jnp.conj(in1), mode, precision=precision))
    if mode == "valid" and first_smaller and s1 != s2:
        return _convolve_nd(jnp.flip(in2), jnp.conj(in1), mode, precision=precision)
    return jnp.flip(_convolve_nd(jnp.flip(in1), jnp.conj(in2), mode, precision=precision))


def detrend(data: ArrayLike, axis: int = -1, type: str = "linear",
            bp: int | Sequence[int] | np.ndarray = 0, overwrite_data: None = None) -> Array:
    """Remove a linear (optionally piecewise) or constant trend along an axis.

    Kiln (JAX) implementation of :func:`scipy.signal.detrend`.

    Args:
      data: the input array.
      axis: the axis to detrend along (default: the last).
      type: ``"linear"`` (default) subtracts the least-squares line fitted to each
        piece; ``"constant"`` subtracts the mean.
      bp: static breakpoint index or indices; the linear fit is done separately on
        each piece between consecutive breakpoints.
      overwrite_data: not supported (must be ``None``).

    Returns:
      The detrended data, of ``data``'s inexact dtype.

    Examples:
      >>> detrend(jnp.array([1., 4., 8., 8., 9.]))  # doctest: +SKIP
      Array([-1.,  0.,  2.,  0., -1.], dtype=float32)
    """
    if overwrite_data is not None:
        raise NotImplementedError("overwrite_data argument not implemented.")
    if type not in ("constant", "linear"):
        raise ValueError("Trend type must be 'linear' or 'constant'.")
    x, = promote_dtypes_inexact(jnp.asarray(data))
    if type == "constant":
        return x - jnp.mean(x, axis, keepdims=True)
    shape = shape_of(x)
    ax = canonicalize_axis(axis, len(shape))
    n = shape[ax]
    # static: a traced ``bp`` raises TracerArrayConversionError here, as in JAX
    bps = np.asarray(concretize(bp)).ravel()
    edges = np.sort(np.unique(np.concatenate([[0], bps, [n]])))
    if edges[0] < 0 or edges[-1] > n:
        raise ValueError("Breakpoints must be non-negative and less than length of data "
                         "along given axis.")
    if len(edges) < 2:
        return x
    y = jnp.moveaxis(x, ax, 0)
    moved = shape_of(y)
    y = y.reshape(n, -1)
    real = np.finfo(x.dtype).dtype
    pieces = []
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist()):
        seg = y[lo:hi]
        m = hi - lo
        if m == 1:
            # the fit (a line through one point) is the point itself
            pieces.append(jnp.zeros_like(seg))
            continue
        # Projection onto span{1, t}: the mean plus the component along the unit vector
        # of the centred ramp (orthogonal to the constant).
        t = np.arange(m, dtype=np.float64)
        t -= t.mean()
        u = t / np.sqrt(np.dot(t, t))
        u = jnp.asarray(u.astype(real))
        centred = seg - jnp.mean(seg, axis=0, keepdims=True)
        slope = jnp.matmul(u, centred, precision=lax.Precision.HIGHEST)
        pieces.append(centred - u[:, None] * slope[None, :])
    y = pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=0)
    return jnp.moveaxis(y.reshape(moved), 0, ax)
