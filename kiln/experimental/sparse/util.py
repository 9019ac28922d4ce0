"""Warnings and errors of ``jax.experimental.sparse`` (``SparseEfficiencyError`` and
``SparseEfficiencyWarning``; ``CuSparseEfficiencyWarning`` exists for code that filters
it, kiln never raises it)."""
from __future__ import annotations

__all__ = ["CuSparseEfficiencyWarning", "SparseEfficiencyError", "SparseEfficiencyWarning"]


class SparseEfficiencyError(ValueError):
    """An operation would store many explicit zeros."""


class SparseEfficiencyWarning(UserWarning):
    """An operation stores many explicit zeros."""


class CuSparseEfficiencyWarning(SparseEfficiencyWarning):
    """A cuSPARSE kernel is not available (never raised on kiln's CPU backend)."""
