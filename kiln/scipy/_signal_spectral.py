"""Windowed-FFT spectral analysis for ``kiln.scipy.signal``: ``stft``, ``istft``, ``csd``, ``welch``.

Semantics follow ``jax.scipy.signal`` (which follows ``scipy.signal``'s
``_spectral_helper``), including its defaults: with a named window and no ``nperseg``,
``csd``/``welch`` use one segment spanning the whole input. Segments are taken with one
gather of a static index table and re-assembled (``istft``) with one scatter-add, so every
function traces under ``jit``, ``grad`` and ``vmap``. Window names other than ``"hann"``
are evaluated by :func:`scipy.signal.get_window` (imported on first use).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, lax
from kiln.array import Array
from kiln.numpy._util import (
    broadcast_shapes,
    canonicalize_axis,
    check_arraylike,
    core_int,
    ensure_arraylike,
    promote_dtypes_complex,
    promote_dtypes_inexact,
    shape_of,
)
from kiln.scipy._signal_conv import detrend as _detrend

ArrayLike = Any


def _hann(n: int, dtype) -> Array:
    """The periodic Hann window of length ``n`` (computed in the default float type)."""
    if n == 1:
        win = jnp.array([1.0])
    else:
        win = jnp.sin(jnp.linspace(0, np.pi, n, endpoint=False)) ** 2
    return win if dtype is None else jnp.asarray(win, dtype=dtype)


def _named_window(window, n: int, dtype) -> Array:
    if isinstance(window, str) and window == "hann":
        return _hann(n, dtype)
    try:
        from scipy.signal import get_window
    except ImportError as err:  # pragma: no cover - scipy is a dependency
        raise ImportError(f"scipy must be available to use window={window!r}") from err
    return jnp.asarray(get_window(window, n), dtype=dtype)


def _triage_segments(window, nperseg: int | None, input_length: int, dtype):
    """The window array and the segment length for a window spec and ``nperseg``."""
    if isinstance(window, (str, tuple)):
        n = input_length if nperseg is None else int(nperseg)
        if n > input_length:
            warnings.warn(f"nperseg={n} is greater than input_length={input_length}, "
                          f"using nperseg={input_length}", stacklevel=4)
            n = input_length
        return _named_window(window, n, dtype), n
    win = jnp.asarray(window, dtype=dtype)
    wshape = shape_of(win)
    size = int(np.prod(wshape, dtype=np.int64))
    n = size if nperseg is None else int(nperseg)
    if len(wshape) != 1:
        raise ValueError("window must be 1-D")
    if input_length < size:
        raise ValueError("window is longer than input signal")
    if n != size:
        raise ValueError("value specified for nperseg is different from length of window")
    return win, n


def _median_bias(n: int) -> Array:
    """Bias of the median of ``n`` periodograms relative to their mean (Allen et al.)."""
    even = jnp.arange(2.0, n, 2)
    return 1 + jnp.sum(1.0 / (even + 1) - 1.0 / even)


def _pad_last(x, n: int, **kw) -> Array:
    widths = [(0, 0)] * (len(shape_of(x)) - 1) + [(n, n)]
    return jnp.pad(x, widths, **kw)


def _odd_ext(x, n: int, axis: int = -1) -> Array:
    """Extend ``x`` by ``n`` points at both ends by odd (point) reflection."""
    if n < 1:
        return x
    length = shape_of(x)[axis]
    if n > length - 1:
        raise ValueError(f"The extension length n ({n}) is too big. It must not exceed "
                         f"x.shape[axis]-1, which is {length - 1}.")
    first = lax.slice_in_dim(x, 0, 1, axis=axis)
    last = lax.slice_in_dim(x, length - 1, length, axis=axis)
    head = jnp.flip(lax.slice_in_dim(x, 1, n + 1, axis=axis), axis=axis)
    tail = jnp.flip(lax.slice_in_dim(x, length - n - 1, length - 1, axis=axis), axis=axis)
    return jnp.concatenate((2 * first - head, x, 2 * last - tail), axis=axis)


_BOUNDARIES: dict[Any, Callable] = {
    "even": lambda x, n: _pad_last(x, n, mode="reflect"),
    "odd": lambda x, n: _odd_ext(x, n, axis=-1),
    "constant": lambda x, n: _pad_last(x, n, mode="edge"),
    "zeros": lambda x, n: _pad_last(x, n, mode="constant", constant_values=0.0),
    None: lambda x, n: x,
}


def _segments(x, nperseg: int, noverlap: int) -> Array:
    """``x[..., L]`` → ``[..., nseg, nperseg]`` overlapping segments (one gather)."""
    length = shape_of(x)[-1]
    if nperseg == 1 and noverlap == 0:
        return x[..., None]
    starts = np.arange(0, length - nperseg + 1, nperseg - noverlap)
    return x[..., starts[:, None] + np.arange(nperseg)[None, :]]


def _windowed_fft(x, win, detrend_func, nperseg, noverlap, nfft, onesided) -> Array:
    if not dtypes.issubdtype(x.dtype, np.inexact):
        x = x.astype(win.dtype)
    seg = detrend_func(_segments(x, nperseg, noverlap))
    if jnp.iscomplexobj(win):
        seg, = promote_dtypes_complex(seg)
    seg = win * seg
    if onesided:
        return jnp.fft.rfft(jnp.real(seg), n=nfft)
    return jnp.fft.fft(seg, n=nfft)


def _static_int(value, what: str) -> int:
    return core_int(value, f"{what} of windowed-FFT")


def _spectral_helper(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
                     detrend_type: bool | str | Callable = "constant", return_onesided=True,
                     scaling="density", axis=-1, mode="psd", boundary=None, padded=False):
    """Frequencies, segment times and windowed spectra (``mode="psd"`` or ``"stft"``).

    ``y=None`` requests the auto-spectrum of ``x``. Mirrors
    ``jax.scipy.signal``'s helper of the same name.
    """
    if mode not in ("psd", "stft"):
        raise ValueError(f"Unknown value for mode {mode}, must be one of: ('psd', 'stft')")
    if boundary not in _BOUNDARIES:
        raise ValueError(f"Unknown boundary option '{boundary}', must be one of: "
                         f"{list(_BOUNDARIES.keys())}")
    axis = _static_int(axis, "axis")
    if y is None:
        check_arraylike("spectral_helper", x)
        x, = promote_dtypes_inexact(x)
        axis = canonicalize_axis(axis, x.ndim)
        yv = x
        outer = tuple(d for i, d in enumerate(x.shape) if i != axis)
    else:
        if mode != "psd":
            raise ValueError("two-argument mode is available only when mode=='psd'")
        check_arraylike("spectral_helper", x, y)
        x, yv = promote_dtypes_inexact(x, y)
        axis = canonicalize_axis(axis, x.ndim)
        if x.ndim != yv.ndim:
            raise ValueError(f"two-arguments must have the same rank ({x.ndim} vs {yv.ndim}).")
        try:
            outer = broadcast_shapes(tuple(d for i, d in enumerate(x.shape) if i != axis),
                                     tuple(d for i, d in enumerate(yv.shape) if i != axis))
        except ValueError as err:
            raise ValueError("x and y cannot be broadcast together.") from err

    result_dtype = dtypes.to_complex_dtype(x.dtype)
    freq_dtype = np.finfo(result_dtype).dtype

    nperseg_given = None
    if nperseg is not None:
        nperseg_given = _static_int(nperseg, "nperseg")
        if nperseg_given < 1:
            raise ValueError("nperseg must be a positive integer")
    win, nperseg = _triage_segments(window, nperseg_given, input_length=x.shape[axis],
                                    dtype=x.dtype)
    noverlap = nperseg // 2 if noverlap is None else _static_int(noverlap, "noverlap")
    nfft = nperseg if nfft is None else _static_int(nfft, "nfft")

    if y is None:
        if x.size == 0:
            return (jnp.zeros(x.shape, freq_dtype), jnp.zeros(x.shape, freq_dtype),
                    jnp.zeros(x.shape, result_dtype))
    elif x.size == 0 or yv.size == 0:
        shape = outer[:axis] + (min(x.shape[axis], yv.shape[axis]),) + outer[axis:]
        return (jnp.zeros(shape, freq_dtype), jnp.zeros(shape, freq_dtype),
                jnp.zeros(shape, result_dtype))

    x = jnp.moveaxis(x, axis, -1)
    if y is not None:
        if yv.ndim > 1:
            yv = jnp.moveaxis(yv, axis, -1)
        lx, ly = x.shape[-1], yv.shape[-1]
        if lx < ly:
            x = jnp.concatenate((x, jnp.zeros(x.shape[:-1] + (ly - lx,), x.dtype)), -1)
        elif ly < lx:
            yv = jnp.concatenate((yv, jnp.zeros(yv.shape[:-1] + (lx - ly,), x.dtype)), -1)

    if nfft < nperseg:
        raise ValueError("nfft must be greater than or equal to nperseg.")
    if noverlap >= nperseg:
        raise ValueError("noverlap must be less than nperseg.")
    nstep = nperseg - noverlap

    if boundary is not None:
        extend = _BOUNDARIES[boundary]
        x = extend(x, nperseg // 2)
        if y is not None:
            yv = extend(yv, nperseg // 2)

    if padded:
        nadd = (-(x.shape[-1] - nperseg) % nstep) % nperseg
        x = jnp.concatenate((x, jnp.zeros(x.shape[:-1] + (nadd,), x.dtype)), -1)
        if y is not None:
            yv = jnp.concatenate((yv, jnp.zeros(yv.shape[:-1] + (nadd,), x.dtype)), -1)

    if isinstance(detrend_type, str):
        def detrend_func(d):
            return _detrend(d, type=detrend_type, axis=-1)
    elif callable(detrend_type):
        # As JAX: ``axis`` is canonical (non-negative) here, so the user's function is
        # always called on segments with ``axis`` moved to the end.
        def detrend_func(d):
            return jnp.moveaxis(detrend_type(jnp.moveaxis(d, axis, -1)), -1, axis)
    elif not detrend_type:
        def detrend_func(d):
            return d
    else:
        raise ValueError(f"Unsupported detrend type: {detrend_type}")

    if scaling == "density":
        scale = 1.0 / (fs * (win * win).sum())
    elif scaling == "spectrum":
        scale = 1.0 / win.sum() ** 2
    else:
        raise ValueError(f"Unknown scaling: {scaling}")
    if mode == "stft":
        scale = jnp.sqrt(scale)
    scale, = promote_dtypes_complex(scale)

    onesided = bool(return_onesided)
    if onesided and (jnp.iscomplexobj(x) or (y is not None and jnp.iscomplexobj(yv))):
        onesided = False
        warnings.warn("Input data is complex, switching to return_onesided=False",
                      stacklevel=3)

    if onesided:
        freqs = jnp.fft.rfftfreq(nfft, 1 / fs, dtype=freq_dtype)
    else:
        freqs = jnp.fft.fftfreq(nfft, 1 / fs, dtype=freq_dtype)

    result = _windowed_fft(x, win, detrend_func, nperseg, noverlap, nfft, onesided)
    if y is not None:
        result = jnp.conjugate(result) * _windowed_fft(yv, win, detrend_func, nperseg,
                                                       noverlap, nfft, onesided)
    elif mode == "psd":
        result = jnp.conjugate(result) * result
    result = result * scale

    if onesided and mode == "psd":
        # every bin but DC (and Nyquist, for an even nfft) carries both signs' power
        nbins = result.shape[-1]
        factor = np.full(nbins, 2.0)
        factor[0] = 1.0
        if nfft % 2 == 0 and nbins > 1:
            factor[-1] = 1.0
        result = result * jnp.asarray(factor, dtype=np.finfo(result.dtype).dtype)

    time = jnp.arange(nperseg / 2, x.shape[-1] - nperseg / 2 + 1, nperseg - noverlap,
                      dtype=freq_dtype) / fs
    if boundary is not None:
        time = time - (nperseg / 2) / fs

    result = result.astype(result_dtype)
    if y is None and mode != "stft":
        result = jnp.real(result)
    return freqs, time, jnp.moveaxis(result, -1, axis)


def stft(x: Array, fs: ArrayLike = 1.0, window: str = "hann", nperseg: int = 256,
         noverlap: int | None = None, nfft: int | None = None, detrend: bool = False,
         return_onesided: bool = True, boundary: str | None = "zeros", padded: bool = True,
         axis: int = -1) -> tuple[Array, Array, Array]:
    """Short-time Fourier transform.

    Kiln (JAX) implementation of :func:`scipy.signal.stft`.

    Args:
      x: the time series.
      fs: sampling frequency (default 1.0).
      window: window name (``"hann"`` default; others through
        :func:`scipy.signal.get_window`), a ``(name, param...)`` tuple, or a 1-D array.
      nperseg: segment length (default 256; clipped, with a warning, to the input length).
      noverlap: points shared by consecutive segments (default ``nperseg // 2``).
      nfft: FFT length, ``>= nperseg`` (default ``nperseg``).
      detrend: ``False`` (default), ``"constant"``, ``"linear"`` or a callable applied to
        each segment.
      return_onesided: one-sided spectrum for real input (default True; complex input
        always gives a two-sided one, with a warning).
      boundary: extension at both ends by ``nperseg // 2`` points: ``"zeros"`` (default),
        ``"even"``, ``"odd"``, ``"constant"`` or ``None``.
      padded: zero-pad the end to a whole number of segments (default True).
      axis: the time axis (default -1).

    Returns:
      ``(f, t, Zxx)``: sample frequencies, segment times and the STFT (complex; the
      frequency axis replaces ``axis`` and the segment axis is last).
    """
    return _spectral_helper(x, None, fs, window, nperseg, noverlap, nfft, detrend,
                            return_onesided, scaling="spectrum", axis=axis, mode="stft",
                            boundary=boundary, padded=padded)


def csd(x: Array, y: ArrayLike | None, fs: ArrayLike = 1.0, window: str = "hann",
        nperseg: int | None = None, noverlap: int | None = None, nfft: int | None = None,
        detrend: str = "constant", return_onesided: bool = True, scaling: str = "density",
        axis: int = -1, average: str = "mean") -> tuple[Array, Array]:
    """Cross power spectral density by Welch's method.

    Kiln (JAX) implementation of :func:`scipy.signal.csd`.

    Args:
      x: first time series.
      y: second time series (zero-padded to the longer length along ``axis``); ``None``
        computes the (real) power spectral density of ``x``.
      fs: sampling frequency (default 1.0).
      window: window name, ``(name, param...)`` tuple or 1-D array (default ``"hann"``).
      nperseg: segment length (default: the window's length for an array window, else the
        whole input).
      noverlap: points shared by consecutive segments (default ``nperseg // 2``).
      nfft: FFT length (default ``nperseg``).
      detrend: ``"constant"`` (default), ``"linear"``, ``False`` or a callable.
      return_onesided: one-sided spectrum for real input (default True).
      scaling: ``"density"`` (default, V**2/Hz) or ``"spectrum"`` (V**2).
      axis: the time axis (default -1).
      average: ``"mean"`` (default) or ``"median"`` (bias-corrected) over segments.

    Returns:
      ``(f, Pxy)``: sample frequencies and the cross spectral density (complex when ``y``
      is given).
    """
    freqs, _, pxy = _spectral_helper(x, y, fs, window, nperseg, noverlap, nfft, detrend,
                                     return_onesided, scaling, axis, mode="psd")
    if y is not None:
        pxy = pxy + 0j
    if pxy.ndim >= 2 and pxy.size > 0:
        nseg = pxy.shape[-1]
        if nseg > 1:
            if average == "median":
                bias = _median_bias(nseg).astype(pxy.dtype)
                if jnp.iscomplexobj(pxy):
                    pxy = (jnp.median(jnp.real(pxy), axis=-1)
                           + 1j * jnp.median(jnp.imag(pxy), axis=-1))
                else:
                    pxy = jnp.median(pxy, axis=-1)
                pxy = pxy / bias
            elif average == "mean":
                pxy = pxy.mean(axis=-1)
            else:
                raise ValueError(f'average must be "median" or "mean", got {average}')
        else:
            pxy = jnp.reshape(pxy, pxy.shape[:-1])
    return freqs, pxy


def welch(x: Array, fs: ArrayLike = 1.0, window: str = "hann", nperseg: int | None = None,
          noverlap: int | None = None, nfft: int | None = None, detrend: str = "constant",
          return_onesided: bool = True, scaling: str = "density", axis: int = -1,
          average: str = "mean") -> tuple[Array, Array]:
    """Power spectral density by Welch's method (averaged modified periodograms).

    Kiln (JAX) implementation of :func:`scipy.signal.welch`.

    Args:
      x: the time series.
      fs: sampling frequency (default 1.0).
      window: window name, ``(name, param...)`` tuple or 1-D array (default ``"hann"``).
      nperseg: segment length (default: the window's length for an array window, else the
        whole input).
      noverlap: points shared by consecutive segments (default ``nperseg // 2``).
      nfft: FFT length (default ``nperseg``).
      detrend: ``"constant"`` (default), ``"linear"``, ``False`` or a callable.
      return_onesided: one-sided spectrum for real input (default True).
      scaling: ``"density"`` (default, V**2/Hz) or ``"spectrum"`` (V**2).
      axis: the time axis (default -1).
      average: ``"mean"`` (default) or ``"median"`` (bias-corrected) over segments.

    Returns:
      ``(f, Pxx)``: sample frequencies and the (real) power spectral density.
    """
    freqs, pxx = csd(x, None, fs=fs, window=window, nperseg=nperseg, noverlap=noverlap,
                     nfft=nfft, detrend=detrend, return_onesided=return_onesided,
                     scaling=scaling, axis=axis, average=average)
    return freqs, jnp.real(pxx)


def _overlap_add(frames, step: int) -> Array:
    """``[..., nframes, seglen]`` frames summed at offsets ``step`` apart (one scatter-add)."""
    *batch, nframes, seglen = frames.shape
    length = step * (nframes - 1) + seglen
    index = (np.arange(nframes) * step)[:, None] + np.arange(seglen)[None, :]
    out = jnp.zeros((*batch, length), frames.dtype)
    return out.at[..., index].add(frames)


def istft(Zxx: Array, fs: ArrayLike = 1.0, window: str = "hann", nperseg: int | None = None,
          noverlap: int | None = None, nfft: int | None = None, input_onesided: bool = True,
          boundary: bool = True, time_axis: int = -1,
          freq_axis: int = -2) -> tuple[Array, Array]:
    """Inverse short-time Fourier transform (windowed overlap-add).

    Kiln (JAX) implementation of :func:`scipy.signal.istft`.

    Args:
      Zxx: the STFT, at least 2-D.
      fs: sampling frequency (default 1.0).
      window: window name, ``(name, param...)`` tuple or 1-D array (default ``"hann"``).
      nperseg: segment length (default: from the number of frequency bins).
      noverlap: points shared by consecutive segments (default ``nperseg // 2``; as in
        JAX, ``0`` also selects the default).
      nfft: FFT length (default: from the number of frequency bins).
      input_onesided: ``Zxx`` holds a one-sided spectrum (default True).
      boundary: the signal was extended at both ends by ``stft`` (default True).
      time_axis: the segment axis of ``Zxx`` (default -1).
      freq_axis: the frequency axis of ``Zxx`` (default -2).

    Returns:
      ``(t, x)``: sample times and the reconstructed signal.
    """
    Zxx = ensure_arraylike("istft", Zxx)
    if Zxx.ndim < 2:
        raise ValueError("Input stft must be at least 2d!")
    freq_axis = canonicalize_axis(freq_axis, Zxx.ndim)
    time_axis = canonicalize_axis(time_axis, Zxx.ndim)
    if freq_axis == time_axis:
        raise ValueError("Must specify differing time and frequency axes!")
    Zxx = jnp.asarray(Zxx, dtype=dtypes.to_complex_dtype(Zxx.dtype))

    nbins = Zxx.shape[freq_axis]
    n_default = 2 * (nbins - 1) if input_onesided else nbins
    nperseg_int = core_int(nperseg or n_default, "nperseg: segment length of STFT")
    if nperseg_int < 1:
        raise ValueError("nperseg must be a positive integer")
    if nfft is None:
        nfft_int = n_default
        if input_onesided and nperseg_int == n_default + 1:
            nfft_int += 1
    else:
        nfft_int = core_int(nfft, "nfft of STFT")
    if nfft_int < nperseg_int:
        raise ValueError(f"FFT length ({nfft_int}) must be longer than nperseg ({nperseg_int}).")
    noverlap_int = core_int(noverlap or nperseg_int // 2, "noverlap of STFT")
    if noverlap_int >= nperseg_int:
        raise ValueError("noverlap must be less than nperseg.")
    nstep = nperseg_int - noverlap_int

    if time_axis != Zxx.ndim - 1 or freq_axis != Zxx.ndim - 2:
        outer = tuple(i for i in range(Zxx.ndim) if i not in (time_axis, freq_axis))
        Zxx = jnp.transpose(Zxx, outer + (freq_axis, time_axis))

    # As JAX, the transform length is the ``nfft`` argument itself (None: the default
    # length of the inverse transform), not the validated ``nfft_int``.
    inverse = jnp.fft.irfft if input_onesided else jnp.fft.ifft
    xsubs = inverse(Zxx, axis=-2, n=nfft)[..., :nperseg_int, :]

    if isinstance(window, str) and window == "hann":
        win = _hann(nperseg_int, xsubs.dtype)
    elif isinstance(window, (str, tuple)):
        win = _named_window(window, nperseg_int, xsubs.dtype)
    else:
        win = jnp.asarray(window)
        if win.ndim != 1:
            raise ValueError("window must be 1-D")
        if win.shape[0] != nperseg_int:
            raise ValueError(f"window must have length of {nperseg_int}")
    xsubs = xsubs * win.sum()  # undoes stft's 'spectrum' scaling

    win = lax.expand_dims(win, (*range(xsubs.ndim - 2), -1))  # [1.., nperseg, 1]
    x = _overlap_add(jnp.swapaxes(xsubs * win, -2, -1), nstep)
    win_sq = jnp.repeat(win * win, xsubs.shape[-1], axis=-1)
    norm = _overlap_add(jnp.swapaxes(win_sq, -2, -1), nstep)

    if boundary:
        half = nperseg_int // 2
        x = x[..., half:-half]
        norm = norm[..., half:-half]
    x = x / jnp.where(norm > 1e-10, norm, 1.0)

    if x.ndim > 1 and time_axis != Zxx.ndim - 1:
        if freq_axis < time_axis:
            time_axis -= 1
        x = jnp.moveaxis(x, -1, time_axis)

    time = jnp.arange(x.shape[0], dtype=np.finfo(x.dtype).dtype) / fs
    return time, x
