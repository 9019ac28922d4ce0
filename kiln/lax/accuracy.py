"""``lax.Tolerance`` and ``lax.AccuracyMode``: the values of the ``accuracy=`` argument
of ``lax.exp``, ``exp2``, ``expm1``, ``log``, ``log1p``, ``tanh``, ``logistic``, ``sin``,
``cos``, ``tan``, ``sqrt``, ``rsqrt`` and ``cbrt``.

In JAX the argument asks the compiler for an implementation of the op within a tolerance;
XLA's CPU backend returns the same bits whatever it is (checked against JAX 0.10.2 for
every op above). kiln computes those ops with XLA's CPU formulas, so it accepts the
argument and its results are the ones JAX gives on CPU for every ``accuracy``.
"""
from __future__ import annotations

import enum


class Tolerance:
    """An accuracy request: absolute, relative and/or ulp tolerances (at least one set,
    none negative)."""

    def __init__(self, atol: float = 0.0, rtol: float = 0.0, ulps: int = 0) -> None:
        if atol < 0.0 or rtol < 0.0 or ulps < 0:
            raise ValueError("Tolerances must be non-negative.")
        if atol == 0.0 and rtol == 0.0 and ulps == 0:
            raise ValueError("At least one of atol, rtol, or ulps must be set.")
        self.atol = atol
        self.rtol = rtol
        self.ulps = ulps

    def __repr__(self) -> str:
        return f"Tolerance(atol={self.atol}, rtol={self.rtol}, ulps={self.ulps})"


class AccuracyMode(enum.Enum):
    """An accuracy request by name: the most accurate implementation, or the default."""
    HIGHEST = 1
    DEFAULT = 2


def check_accuracy(name: str, accuracy) -> None:
    """TypeError unless ``accuracy`` is None, a :class:`Tolerance` or an
    :class:`AccuracyMode`."""
    if accuracy is not None and not isinstance(accuracy, (Tolerance, AccuracyMode)):
        raise TypeError(f"lax.{name}: accuracy must be None, a lax.Tolerance or a "
                        f"lax.AccuracyMode, got {accuracy!r}")


__all__ = ["Tolerance", "AccuracyMode"]
