"""``kiln.scipy.fft`` (``jax.scipy.fft``): discrete cosine transforms of type 2.

``dct``/``idct`` (one axis) and ``dctn``/``idctn`` (several axes, applied one axis at a
time: the transforms are separable). As in JAX only type 2 exists (other types raise
``NotImplementedError``) and ``norm`` is ``None``/``"backward"`` or ``"ortho"``.

The DCT-II of length ``N`` is computed with one complex FFT of the same length
(Makhoul's reordering): the even-indexed samples followed by the odd-indexed ones in
reverse order are transformed and each coefficient is rotated by ``exp(-i pi k / 2N)``.
The inverse reverses each step. Everything is built from ``kiln.lax`` structural ops
(slices, reversal, padding with interior padding to interleave) and ``jnp.fft``, so
``jit``, ``grad`` (both modes) and ``vmap`` apply through their rules. The forward
transform rotates and scales with JAX's operations in JAX's dtypes (a complex ``exp``, the
complex product's real part, a division by ``sqrt``), so it rounds as JAX's wherever the
FFT does; the inverse's rotation factors are constants computed in float64.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import get_aval
from kiln.numpy._util import canonicalize_axis, ensure_arraylike, promote_dtypes_inexact

__all__ = ["dct", "dctn", "idct", "idctn"]


def _check_args(fun_name: str, type, norm) -> None:
    if type != 2:
        raise NotImplementedError(f"jax.scipy.fft.{fun_name}: only DCT type 2 is "
                                  f"implemented, got type={type!r}.")
    if norm is not None and norm not in ("backward", "ortho"):
        raise ValueError(f"jax.scipy.fft.{fun_name}: norm={norm!r} is not implemented "
                         '(use None, "backward" or "ortho").')


def _along(vec: np.ndarray, axis: int, shape: tuple, dtype):
    """A constant 1-D array broadcast along ``axis`` of an array of ``shape``."""
    const = lax.convert_element_type(np.asarray(vec), dtype)
    return lax.broadcast_in_dim(const, tuple(shape), (axis,))


def _resize(x, n, axis: int):
    """Zero-pad or truncate ``axis`` of ``x`` to length ``n`` (None: unchanged)."""
    if n is None:
        return x
    n = operator.index(n)
    if n < 1:
        raise TypeError(f"jax.scipy.fft: the transform length must be positive, got n={n}.")
    aval = get_aval(x)
    cfg = [(0, n - aval.shape[axis] if a == axis else 0, 0) for a in range(aval.ndim)]
    return lax.pad(x, lax.convert_element_type(0, aval.dtype), cfg)


def _ortho_scale(n: int) -> np.ndarray:
    """The factors that turn the unnormalized DCT-II into the orthonormal one."""
    f = np.full(n, 1.0 / np.sqrt(2.0 * n))
    if n:
        f[0] = 1.0 / np.sqrt(4.0 * n)
    return f


def _split_complex(fun, x, *args):
    """Apply a real transform to the real and imaginary parts of a complex input."""
    return lax.complex(fun(lax.real(x), *args), fun(lax.imag(x), *args))


def _dct_axis(x, axis: int, norm):
    """Unnormalized (or orthonormal) DCT-II of real ``x`` along ``axis``.

    The operations, their dtypes and order are JAX's (so the bits are too, eager and
    under ``jit``): the rotation ``exp(-i pi k / 2N)`` is a complex ``exp`` of the
    FFT's complex dtype, ``2 Re(V w)`` is taken from the complex product, and the
    orthonormal scale divides by ``sqrt(4N)`` / ``sqrt(2N)``."""
    from kiln.numpy import fft as jfft
    shape = get_aval(x).shape
    n = shape[axis]
    evens = lax.slice_in_dim(x, 0, None, 2, axis)
    odds = lax.rev(lax.slice_in_dim(x, 1, None, 2, axis), (axis,))
    spec = jfft.fft(lax.concatenate([evens, odds], axis), axis=axis)
    cdt = get_aval(spec).dtype
    rdt = get_aval(lax.real(spec)).dtype
    k = lax.convert_element_type(lax.iota(rdt, n), cdt)
    # -i pi / 2 * k / N, each step rounded in the complex dtype as JAX's expression is
    arg = lax.div(lax.mul(lax.convert_element_type(-0.5j * np.pi, cdt), k),
                  lax.convert_element_type(n, cdt))
    w = lax.broadcast_in_dim(lax.exp(arg), tuple(shape), (axis,))
    out = lax.mul(lax.convert_element_type(2, rdt), lax.real(lax.mul(spec, w)))
    if norm == "ortho":
        factor = np.full(n, 2.0)
        if n:
            factor[0] = 4.0
        scale = lax.sqrt(lax.mul(lax.convert_element_type(factor, rdt),
                                 lax.convert_element_type(n, rdt)))
        out = lax.div(out, lax.broadcast_in_dim(scale, tuple(shape), (axis,)))
    return out


def _idct_axis(x, axis: int, norm):
    """Inverse of ``_dct_axis`` (a DCT-III) along ``axis`` of real ``x``."""
    from kiln.numpy import fft as jfft
    aval = get_aval(x)
    n, ndim = aval.shape[axis], aval.ndim
    if norm == "ortho":
        x = lax.mul(x, _along(1.0 / _ortho_scale(n), axis, aval.shape, aval.dtype))
    # Coefficient k pairs with coefficient n-k (zero for k = 0).
    mirror = [(0, 0, 0)] * ndim
    mirror[axis] = (1, -1, 0)
    xs = lax.pad(lax.rev(x, (axis,)), lax.convert_element_type(0, aval.dtype), mirror)
    theta = np.pi * np.arange(n) / (2.0 * n)
    cos = _along(0.5 * np.cos(theta), axis, aval.shape, aval.dtype)
    sin = _along(0.5 * np.sin(theta), axis, aval.shape, aval.dtype)
    # V_k = (X_k - i X_{n-k}) e^{i theta_k} / 2
    re = lax.add(lax.mul(x, cos), lax.mul(xs, sin))
    im = lax.sub(lax.mul(x, sin), lax.mul(xs, cos))
    v = lax.real(jfft.ifft(lax.complex(re, im), axis=axis))
    # Sample 2m is v[m], sample 2m+1 is v[n-1-m]: interleave the two halves with padding.
    half = (n + 1) // 2
    zero = lax.convert_element_type(0, get_aval(v).dtype)
    first = [(0, 0, 0)] * ndim
    first[axis] = (0, 1 - n % 2, 1)
    second = [(0, 0, 0)] * ndim
    second[axis] = (1, n % 2, 1)
    a = lax.pad(lax.slice_in_dim(v, 0, half, 1, axis), zero, first)
    if n - half == 0:
        return a
    b = lax.pad(lax.rev(lax.slice_in_dim(v, half, n, 1, axis), (axis,)), zero, second)
    return lax.add(a, b)


def dct(x, type: int = 2, n: int | None = None, axis: int = -1,
        norm: str | None = None):
    """Discrete cosine transform (type 2) of ``x`` along ``axis``, as :func:`scipy.fft.dct`.

    Args:
      x: input array (real or complex; complex inputs transform their real and
        imaginary parts separately).
      type: the DCT type; only 2 is supported.
      n: length of the transform: ``x`` is zero-padded or truncated along ``axis``.
      axis: the axis to transform.
      norm: ``None``/``"backward"`` (unnormalized) or ``"ortho"`` (orthonormal).

    Returns:
      The transform, of the real inexact dtype of the FFT of ``x`` (complex for complex
      ``x``).
    """
    x = ensure_arraylike("dct", x)
    _check_args("dct", type, norm)
    if dtypes.issubdtype(get_aval(x).dtype, np.complexfloating):
        return _split_complex(lambda r: dct(r, type, n, axis, norm), x)
    axis = canonicalize_axis(axis, get_aval(x).ndim)
    return _dct_axis(_resize(x, n, axis), axis, norm)


def idct(x, type: int = 2, n: int | None = None, axis: int = -1,
         norm: str | None = None):
    """Inverse discrete cosine transform (of type 2) along ``axis``, as
    :func:`scipy.fft.idct`: ``idct(dct(x, norm=m), norm=m)`` recovers ``x``.

    Args:
      x: input array (real or complex).
      type: the DCT type; only 2 is supported.
      n: length of the transform: ``x`` is zero-padded or truncated along ``axis``.
      axis: the axis to transform.
      norm: ``None``/``"backward"`` or ``"ortho"``.

    Returns:
      The inverse transform.
    """
    x = ensure_arraylike("idct", x)
    _check_args("idct", type, norm)
    if dtypes.issubdtype(get_aval(x).dtype, np.complexfloating):
        return _split_complex(lambda r: idct(r, type, n, axis, norm), x)
    axis = canonicalize_axis(axis, get_aval(x).ndim)
    x = _resize(x, n, axis)
    (x,) = promote_dtypes_inexact(x)
    return _idct_axis(x, axis, norm)


def _nd_axes(fun_name: str, x, s, axes):
    """The (axis, length) pairs of an n-dimensional transform, as JAX resolves them."""
    ndim = get_aval(x).ndim
    if s is not None:
        s = [operator.index(s)] if not isinstance(s, Sequence) and np.ndim(s) == 0 \
            else [operator.index(v) for v in s]
        if len(s) > ndim:
            raise ValueError(f"jax.scipy.fft.{fun_name}: s must have at most x.ndim "
                             f"({ndim}) elements, got {len(s)}")
    if axes is None:
        axes = tuple(range(ndim - len(s), ndim)) if s is not None else tuple(range(ndim))
    else:
        axes = (axes,) if np.ndim(axes) == 0 else tuple(axes)
        axes = tuple(canonicalize_axis(a, ndim) for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError(f"jax.scipy.fft.{fun_name}: repeated axis in axes={axes}")
    lengths = [None] * len(axes) if s is None else \
        [s[i] if i < len(s) else None for i in range(len(axes))]
    return list(zip(axes, lengths))


def dctn(x, type: int = 2, s: Sequence[int] | None = None,
         axes: Sequence[int] | None = None, norm: str | None = None):
    """Multidimensional DCT (type 2) over ``axes``, as :func:`scipy.fft.dctn`.

    Args:
      x: input array.
      type: the DCT type; only 2 is supported.
      s: the transform lengths along ``axes`` (pad or truncate); default ``x``'s sizes.
      axes: the axes to transform; default the last ``len(s)`` axes, or all axes.
      norm: ``None``/``"backward"`` or ``"ortho"``.

    Returns:
      The transform.
    """
    x = ensure_arraylike("dctn", x)
    _check_args("dctn", type, norm)
    if dtypes.issubdtype(get_aval(x).dtype, np.complexfloating):
        return _split_complex(lambda r: dctn(r, type, s, axes, norm), x)
    plan = _nd_axes("dctn", x, s, axes)
    for ax, length in plan:
        x = _resize(x, length, ax)
    for ax, _ in plan:
        x = _dct_axis(x, ax, norm)
    return x


def idctn(x, type: int = 2, s: Sequence[int] | None = None,
          axes: Sequence[int] | None = None, norm: str | None = None):
    """Multidimensional inverse DCT (of type 2) over ``axes``, as :func:`scipy.fft.idctn`.

    Args:
      x: input array.
      type: the DCT type; only 2 is supported.
      s: the transform lengths along ``axes`` (pad or truncate); default ``x``'s sizes.
      axes: the axes to transform; default the last ``len(s)`` axes, or all axes.
      norm: ``None``/``"backward"`` or ``"ortho"``.

    Returns:
      The inverse transform.
    """
    x = ensure_arraylike("idctn", x)
    _check_args("idctn", type, norm)
    if dtypes.issubdtype(get_aval(x).dtype, np.complexfloating):
        return _split_complex(lambda r: idctn(r, type, s, axes, norm), x)
    plan = _nd_axes("idctn", x, s, axes)
    for ax, length in plan:
        x = _resize(x, length, ax)
    (x,) = promote_dtypes_inexact(x)
    for ax, _ in plan:
        x = _idct_axis(x, ax, norm)
    return x
