"""``kiln.scipy.integrate``, as ``jax.scipy.integrate``: ``trapezoid``."""
from __future__ import annotations

from kiln.numpy import trapezoid as _jnp_trapezoid


def trapezoid(y, x=None, dx=1.0, axis: int = -1):
    """Integrate along ``axis`` with the composite trapezoidal rule.

    kiln's version of :func:`scipy.integrate.trapezoid` (as JAX's: the same as
    :func:`kiln.numpy.trapezoid`).

    Args:
      y: the values to integrate.
      x: optional sample points along ``axis`` (default: spaced ``dx`` apart).
      dx: the spacing when ``x`` is None.
      axis: the axis to integrate along.

    Returns:
      The integral, with ``axis`` removed.
    """
    return _jnp_trapezoid(y, x, dx, axis)
