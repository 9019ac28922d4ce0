"""``kiln.scipy.signal`` (``jax.scipy.signal``): convolution and spectral analysis.

Every public name of ``jax.scipy.signal`` in JAX 0.10.2: ``convolve``, ``correlate``,
``fftconvolve``, ``convolve2d``, ``correlate2d``, ``detrend`` (in
``kiln/scipy/_signal_conv.py``) and ``stft``, ``istft``, ``csd``, ``welch`` (in
``kiln/scipy/_signal_spectral.py``). They are built only from ``kiln.lax`` and
``kiln.numpy`` (the ``conv_general_dilated`` primitive, ``kiln.numpy.fft``), so they work
eagerly and under ``jit``, ``grad`` and ``vmap``. As in JAX, ``convolve2d``/``correlate2d``
support only ``boundary="fill"`` with ``fillvalue=0``, and ``method="auto"`` always
means the direct method.
"""
from kiln.scipy._signal_conv import (
    convolve,
    convolve2d,
    correlate,
    correlate2d,
    detrend,
    fftconvolve,
)
from kiln.scipy._signal_spectral import csd, istft, stft, welch

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "csd", "detrend",
           "fftconvolve", "istft", "stft", "welch"]
