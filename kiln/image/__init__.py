"""``jax.image``: resizing and scale-and-translate resampling of images.

``resize(image, shape, method)`` and ``scale_and_translate(...)`` with JAX's methods
(nearest, linear, cubic (Keys, a=-0.5), cubic-pytorch (a=-0.75 with edge padding when not
antialiased), lanczos3/5, area), half-pixel centers and antialiased downsampling. Each
spatial dimension is resampled by a dense weight matrix contracted with ``einsum``, so
``jit``, ``grad`` and ``vmap`` apply as to any kiln.numpy program.
"""
from kiln.image._scale import ResizeMethod, resize, scale_and_translate

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]
