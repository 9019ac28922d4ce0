"""``kiln.numpy.fft`` (``jax.numpy.fft``): discrete Fourier transforms.

Every transform moves its axes to the end, crops or zero-pads them to the requested
lengths, calls the ``lax.fft`` primitive once (any number of axes) and applies the
``norm`` scaling ("backward" — the default —, "ortho" or "forward"). Results are
complex64 for float32/int inputs (complex128 with ``jax_enable_x64``), as in JAX.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import get_aval
from kiln.lax.fourier import FftType
from kiln.numpy._util import ensure_arraylike
from kiln.numpy._util import placed as _placed

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn",
           "ifftn", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift",
           "ifftshift"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _norm_factor(s, func_name, norm, dtype):
    """The scale applied after the unnormalized transform (None for none)."""
    if norm is None or norm == "backward":
        return None
    n = float(np.prod(s, dtype=np.float64)) if len(s) else 1.0
    inverse = func_name.startswith("i")
    if norm == "ortho":
        f = np.sqrt(n) if inverse else 1 / np.sqrt(n)
    elif norm == "forward":
        f = n if inverse else 1 / n
    else:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or '
                         '"forward".')
    return np.asarray(f, dtype)


def _fft_norm(s, func_name: str, norm: str):
    """The factor a transform named ``func_name`` scales by for ``norm``, from the
    transformed axes' sizes ``s`` (an array, possibly traced), computed in an inexact
    dtype so that a large product cannot overflow (JAX's private helper of the same
    name, which its tests call)."""
    jnp = _jnp()
    if norm == "backward":
        return jnp.array(1)
    from kiln.numpy._util import promote_dtypes_inexact
    (s,) = promote_dtypes_inexact(s)
    inverse = func_name.startswith("i")
    if norm == "ortho":
        r = jnp.sqrt(jnp.prod(s))
        return r if inverse else 1 / r
    if norm == "forward":
        p = jnp.prod(s)
        return p if inverse else 1 / p
    raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or '
                     '"forward".')


def _fft_core(func_name, fft_type, a, s, axes, norm):
    jnp = _jnp()
    full_name = f"jax.numpy.fft.{func_name}"
    arr = ensure_arraylike(full_name, a)
    ndim = get_aval(arr).ndim
    if s is not None:
        s = tuple(operator.index(x) for x in s)
        if any(x <= 0 for x in s):
            raise ValueError("Shape should be positive.")
    if s is not None and axes is not None and len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    orig_axes = axes
    if axes is None:
        axes = tuple(range(ndim)) if s is None else tuple(range(ndim - len(s), ndim))
    else:
        axes = tuple(operator.index(ax) for ax in axes)
    if len(axes) != len({ax % ndim if ndim else ax for ax in axes}):
        raise ValueError(f"{full_name} does not support repeated axes. Got axes "
                         f"{orig_axes}.")
    if orig_axes is not None:
        end = tuple(range(ndim - len(axes), ndim))
        arr = jnp.moveaxis(arr, axes, end)
        axes = end
    shape = get_aval(arr).shape
    if s is not None:
        in_s = list(shape)
        for ax, x in zip(axes, s):
            in_s[ax] = x
        if fft_type == FftType.IRFFT:
            in_s[-1] = in_s[-1] // 2 + 1
        arr = arr[tuple(slice(0, x) for x in in_s)]
        cur = get_aval(arr).shape
        if tuple(cur) != tuple(in_s):
            arr = jnp.pad(arr, [(0, x - y) for x, y in zip(in_s, cur)])
    else:
        if fft_type == FftType.IRFFT:
            s = [shape[ax] for ax in axes[:-1]]
            if axes:
                s += [max(0, 2 * (shape[axes[-1]] - 1))]
        else:
            s = [shape[ax] for ax in axes]
    out = lax.fft(arr, fft_type, tuple(s))
    factor = _norm_factor(s, func_name, norm, get_aval(out).dtype)
    if factor is not None:
        out = lax.mul(out, factor)
    if orig_axes is not None:
        out = jnp.moveaxis(out, axes, orig_axes)
    return out


def _axis_check_1d(func_name, axis):
    if isinstance(axis, (list, tuple)):
        full_name = f"jax.numpy.fft.{func_name}"
        raise ValueError(f"{full_name} does not support multiple axes. Please use "
                         f"{full_name}n. Got axis = {axis!r}.")


def _fft_core_1d(func_name, fft_type, a, n, axis, norm):
    _axis_check_1d(func_name, axis)
    axes = None if axis is None else [axis]
    s = None if n is None else [n]
    return _fft_core(func_name, fft_type, a, s, axes, norm)


def _fft_core_2d(func_name, fft_type, a, s, axes, norm):
    if len(axes) != 2:
        raise ValueError(f"jax.numpy.fft.{func_name} only supports 2 axes. Got axes = "
                         f"{axes!r}.")
    return _fft_core(func_name, fft_type, a, s, axes, norm)


def fft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """One-dimensional discrete Fourier transform along ``axis`` (length ``n``)."""
    return _fft_core_1d("fft", FftType.FFT, a, n, axis, norm)


def ifft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """One-dimensional inverse discrete Fourier transform."""
    return _fft_core_1d("ifft", FftType.IFFT, a, n, axis, norm)


def rfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """One-dimensional DFT of real input: the ``n//2 + 1`` non-negative frequencies."""
    return _fft_core_1d("rfft", FftType.RFFT, a, n, axis, norm)


def irfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """Inverse of ``rfft``: a real signal of length ``n`` (default ``2 * (m - 1)``)."""
    return _fft_core_1d("irfft", FftType.IRFFT, a, n, axis, norm)


def hfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """DFT of a signal with Hermitian symmetry (given by its first half): a real spectrum."""
    jnp = _jnp()
    a = ensure_arraylike("jax.numpy.fft.hfft", a)
    conj_a = jnp.conj(a)
    _axis_check_1d("hfft", axis)
    nn = (get_aval(conj_a).shape[axis] - 1) * 2 if n is None else n
    out = _fft_core_1d("hfft", FftType.IRFFT, conj_a, n, axis, norm)
    return lax.mul(out, np.asarray(nn, get_aval(out).dtype))


def ihfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """Inverse of ``hfft``: the first half of a Hermitian-symmetric signal."""
    jnp = _jnp()
    _axis_check_1d("ihfft", axis)
    arr = ensure_arraylike("jax.numpy.fft.ihfft", a)
    nn = get_aval(arr).shape[axis] if n is None else n
    out = _fft_core_1d("ihfft", FftType.RFFT, arr, n, axis, norm)
    out = jnp.conj(out)
    return lax.mul(out, np.asarray(1 / nn, get_aval(out).dtype))


def fft2(a, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
         norm: str | None = None):
    """Two-dimensional discrete Fourier transform."""
    return _fft_core_2d("fft2", FftType.FFT, a, s, axes, norm)


def ifft2(a, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None):
    """Two-dimensional inverse discrete Fourier transform."""
    return _fft_core_2d("ifft2", FftType.IFFT, a, s, axes, norm)


def rfft2(a, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None):
    """Two-dimensional DFT of real input."""
    return _fft_core_2d("rfft2", FftType.RFFT, a, s, axes, norm)


def irfft2(a, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
           norm: str | None = None):
    """Inverse of ``rfft2``."""
    return _fft_core_2d("irfft2", FftType.IRFFT, a, s, axes, norm)


def fftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str | None = None):
    """N-dimensional discrete Fourier transform (all axes by default)."""
    return _fft_core("fftn", FftType.FFT, a, s, axes, norm)


def ifftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None):
    """N-dimensional inverse discrete Fourier transform."""
    return _fft_core("ifftn", FftType.IFFT, a, s, axes, norm)


def rfftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None):
    """N-dimensional DFT of real input (the last axis halved)."""
    return _fft_core("rfftn", FftType.RFFT, a, s, axes, norm)


def irfftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str | None = None):
    """Inverse of ``rfftn``."""
    return _fft_core("irfftn", FftType.IRFFT, a, s, axes, norm)


def _check_freq_args(name, n, d):
    if isinstance(n, (list, tuple)):
        raise ValueError(f"The n argument of jax.numpy.fft.{name} only takes an int. Got "
                         f"n = {list(n)}.")
    if isinstance(d, (list, tuple)):
        raise ValueError(f"The d argument of jax.numpy.fft.{name} only takes a single value. "
                         f"Got d = {list(d)}.")


@_placed
def fftfreq(n: int, d=1.0, *, dtype=None, device=None):
    """Sample frequencies of ``fft``: ``[0, 1, ..., n/2-1, -n/2, ..., -1] / (d * n)``."""
    jnp = _jnp()
    _check_freq_args("fftfreq", n, d)
    n = operator.index(n)
    out_dtype = dtypes.canonicalize_dtype(dtype or dtypes.default_float_dtype())
    dt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(out_dtype))
    if dt.kind == "c":
        dt = np.dtype(np.float64) if dt == np.complex128 else np.dtype(np.float32)
    i = jnp.arange(n, dtype=dt)
    k = (i + n // 2) % n - n // 2
    result = jnp.astype(k, dt) / jnp.asarray(d * n, dtype=dt)
    return jnp.astype(result, out_dtype)


@_placed
def rfftfreq(n: int, d=1.0, *, dtype=None, device=None):
    """Sample frequencies of ``rfft``: ``[0, 1, ..., n//2] / (d * n)``."""
    jnp = _jnp()
    _check_freq_args("rfftfreq", n, d)
    n = operator.index(n)
    dt = dtypes.canonicalize_dtype(dtype or dtypes.default_float_dtype())
    k = jnp.arange(0, n // 2 + 1, dtype=dt)
    return k / jnp.asarray(d * n, dtype=dt)


def _shifts(name, x, axes, sign):
    shape = get_aval(x).shape
    if axes is None:
        axes = tuple(range(len(shape)))
        shift = [sign * (dim // 2) for dim in shape]
    elif isinstance(axes, int):
        shift = sign * (shape[axes] // 2)
    else:
        axes = tuple(axes)
        shift = [sign * (shape[ax] // 2) for ax in axes]
    return shift, axes


def fftshift(x, axes=None):
    """Shift the zero frequency to the center (``roll`` by half of each axis)."""
    x = ensure_arraylike("fftshift", x)
    shift, axes = _shifts("fftshift", x, axes, 1)
    return _jnp().roll(x, shift, axes)


def ifftshift(x, axes=None):
    """Inverse of ``fftshift``."""
    x = ensure_arraylike("ifftshift", x)
    shift, axes = _shifts("ifftshift", x, axes, -1)
    return _jnp().roll(x, shift, axes)
