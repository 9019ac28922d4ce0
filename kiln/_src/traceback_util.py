"""``jax._src.traceback_util``: library frames left out of kiln's error locations.

kiln does not rewrite tracebacks; it names the user's line in its error messages
(``kiln.errors.user_frame_summary``). Files registered here (Flax registers its own) are
skipped when looking for that line.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kiln import errors
from kiln.extend.source_info_util import register_exclusion

__all__ = ["api_boundary", "register_exclusion"]

F = TypeVar("F", bound=Callable)

#: The registered paths (the same list ``register_exclusion`` appends to).
_exclude_paths: list = errors._excluded_paths


def api_boundary(fun: F) -> F:
    """Mark ``fun`` as a public entry point. JAX filters its tracebacks at such points;
    kiln keeps tracebacks whole, so ``fun`` is returned unchanged."""
    return fun
