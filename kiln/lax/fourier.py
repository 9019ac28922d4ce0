"""The ``fft`` primitive (``jax.lax.fft``) and ``FftType``, with their rules.

``fft_p`` transforms the trailing ``len(fft_lengths)`` axes. It is linear, so its JVP
applies it to the tangent; the transposes (JAX's convention: no conjugation) are:

- FFT and IFFT: the DFT matrix is symmetric, so each is its own transpose;
- RFFT (real ``x`` → the first ``n//2+1`` coefficients): the real part of the FFT of the
  cotangent zero-padded to length ``n``;
- IRFFT: ``conj(RFFT(ct)) * w / N`` where ``w`` counts each kept coefficient once for
  itself and once for its dropped Hermitian mirror (2 inside, 1 for DC and Nyquist).

This module is named ``fourier`` because ``kiln.lax.fft`` is the function, as in JAX.
"""
from __future__ import annotations

import enum
import math

import numpy as np

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax._factory import standard_primitive
from kiln.lax.arith import mul
from kiln.lax.elementwise import conj, real
from kiln.lax.slicing import pad
from kiln.lax.structural import broadcast_in_dim, convert_element_type

__all__ = ["fft", "FftType", "fft_p"]


class FftType(enum.IntEnum):
    """Which FFT to perform."""

    FFT = 0      # forward complex-to-complex
    IFFT = 1     # inverse complex-to-complex
    RFFT = 2     # forward real-to-complex
    IRFFT = 3    # inverse complex-to-real


_FFT_NAMES = {"fft": FftType.FFT, "ifft": FftType.IFFT, "rfft": FftType.RFFT,
              "irfft": FftType.IRFFT}


def _fft_type(t) -> FftType:
    if isinstance(t, FftType):
        return t
    if isinstance(t, str):
        try:
            return _FFT_NAMES[t.lower()]
        except KeyError:
            raise ValueError(f"Unknown FFT type '{t}'") from None
    raise TypeError(f"Unknown FFT type value '{t}'")


def _complex_of(dt):
    return np.dtype(np.complex128) if np.dtype(dt) in (np.float64, np.complex128) \
        else np.dtype(np.complex64)


def _real_of(dt):
    return np.dtype(np.float64) if np.dtype(dt) in (np.float64, np.complex128) \
        else np.dtype(np.float32)


def _fft_abstract_eval(x, *, fft_type, fft_lengths):
    k = len(fft_lengths)
    if k > x.ndim:
        raise ValueError(f"FFT input shape {x.shape} must have at least as many input "
                         f"dimensions as fft_lengths {fft_lengths}.")
    minor = x.shape[x.ndim - k:]
    if fft_type == FftType.RFFT:
        if x.dtype not in (np.float32, np.float64):
            raise ValueError(f"RFFT input must be float32 or float64, got {x.dtype}")
        if minor != fft_lengths:
            raise ValueError(f"RFFT input shape {x.shape} minor dimensions must be equal to "
                             f"fft_lengths {fft_lengths}")
        shape = x.shape[:x.ndim - k] + fft_lengths[:-1] + (fft_lengths[-1] // 2 + 1,)
        dtype = _complex_of(x.dtype)
    elif fft_type == FftType.IRFFT:
        if x.dtype.kind != "c":
            raise ValueError(f"IRFFT input must be complex64 or complex128, got {x.dtype}")
        if minor[:-1] != fft_lengths[:-1]:
            raise ValueError(f"IRFFT input shape {x.shape} minor dimensions must be equal to "
                             f"all except the last fft_length, got fft_lengths={fft_lengths}")
        shape = x.shape[:x.ndim - k] + fft_lengths
        dtype = _real_of(x.dtype)
    else:
        if x.dtype.kind != "c":
            raise ValueError(f"FFT input must be complex64 or complex128, got {x.dtype}")
        if minor != fft_lengths:
            raise ValueError(f"FFT input shape {x.shape} minor dimensions must be equal to "
                             f"fft_lengths {fft_lengths}")
        shape, dtype = x.shape, x.dtype
    return ShapedArray(shape, dtype, x.weak_type)


def _fft_impl(x, *, fft_type, fft_lengths):
    k = len(fft_lengths)
    axes = tuple(range(x.ndim - k, x.ndim))
    if fft_type in (FftType.FFT, FftType.IFFT) and any(n == 0 for n in fft_lengths):
        # An empty transform is empty (as JAX; NumPy's pocketfft rejects zero points).
        return np.zeros(x.shape[:x.ndim - k] + tuple(fft_lengths), x.dtype)
    if fft_type == FftType.FFT:
        out, dt = np.fft.fftn(x, s=fft_lengths, axes=axes), x.dtype
    elif fft_type == FftType.IFFT:
        out, dt = np.fft.ifftn(x, s=fft_lengths, axes=axes), x.dtype
    elif fft_type == FftType.RFFT:
        out, dt = np.fft.rfftn(x, s=fft_lengths, axes=axes), _complex_of(x.dtype)
    else:
        if any(n == 0 for n in fft_lengths):
            return np.zeros(x.shape[:x.ndim - k] + fft_lengths, _real_of(x.dtype))
        out, dt = np.fft.irfftn(x, s=fft_lengths, axes=axes), _real_of(x.dtype)
    return np.asarray(out).astype(dt, copy=False)


fft_p = standard_primitive("fft", _fft_abstract_eval, _fft_impl,
                           weak_type_rule=lambda w, **_: w)


def _const(value, dtype):
    from kiln.array import make_array
    return make_array(np.asarray(value, dtype), False)


def _rfft_transpose(ct, fft_lengths):
    # Zero-pad the coefficients to the full last length, FFT, keep the real part.
    s = get_aval(ct).shape
    n = fft_lengths[-1]
    cfg = [(0, 0, 0)] * (len(s) - 1) + [(0, n - s[-1], 0)]
    full = pad(ct, _const(0, get_aval(ct).dtype), cfg)
    return real(fft_p.bind(full, fft_type=FftType.FFT, fft_lengths=fft_lengths))


def _irfft_transpose(ct, fft_lengths):
    x = fft_p.bind(ct, fft_type=FftType.RFFT, fft_lengths=fft_lengths)
    aval = get_aval(x)
    m = aval.shape[-1]
    n = fft_lengths[-1]
    w = np.full(m, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    w = w / math.prod(fft_lengths)
    scale = broadcast_in_dim(_const(w, aval.dtype), aval.shape, (aval.ndim - 1,))
    return conj(mul(scale, x))


def _fft_transpose(ct, x, *, fft_type, fft_lengths):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    if fft_type == FftType.RFFT:
        out = _rfft_transpose(ct, fft_lengths)
    elif fft_type == FftType.IRFFT:
        out = _irfft_transpose(ct, fft_lengths)
    else:
        out = fft_p.bind(ct, fft_type=fft_type, fft_lengths=fft_lengths)
    if get_aval(out).dtype != x.aval.dtype:
        out = convert_element_type(out, x.aval.dtype)
    return [out]


ad.deflinear2(fft_p, _fft_transpose)


def _fft_batch(axis_data, vals, dims, *, fft_type, fft_lengths):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=fft_lengths), 0


batching.batch_rules[fft_p] = _fft_batch


def fft(x, fft_type, fft_lengths):
    """Fast Fourier transform of the trailing ``len(fft_lengths)`` axes of ``x``.

    ``fft_type`` is an ``FftType`` or one of ``'fft'``, ``'ifft'``, ``'rfft'``, ``'irfft'``.
    Inputs are converted to complex (to real inexact for RFFT) first.
    """
    typ = _fft_type(fft_type)
    aval = get_aval(x)
    if typ == FftType.RFFT:
        if aval.dtype.kind == "c":
            raise ValueError("only real valued inputs supported for rfft")
        x = convert_element_type(x, dtypes.to_inexact_dtype(aval.dtype))
    else:
        x = convert_element_type(x, dtypes.to_complex_dtype(aval.dtype))
    fft_lengths = tuple(int(n) for n in fft_lengths)
    if not fft_lengths:
        return x
    return fft_p.bind(x, fft_type=typ, fft_lengths=fft_lengths)
