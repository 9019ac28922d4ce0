"""``jax.stages``: the stages of ``jit``: a wrapped function is traced, lowered and
compiled (``jit(f).trace(x).lower().compile()``)."""
from __future__ import annotations

from kiln.api import ArgInfo, Compiled, JitWrapped, Lowered, Traced

__all__ = ["ArgInfo", "Compiled", "Lowered", "Traced", "Wrapped"]

#: The type of ``kiln.jit(f)``.
Wrapped = JitWrapped
