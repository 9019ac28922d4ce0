"""``jax._src.traceback_util``: the names libraries built on JAX import from it (Flax:
``api_boundary``, ``register_exclusion``, ``_exclude_paths``).

They are kiln's own traceback filtering (:mod:`kiln._traceback_util`, described in
``docs/debugging.md``): ``_exclude_paths`` is the very list that filtering reads, so a
library that appends to it or removes from it (Flax's ``show_flax_in_tracebacks``) changes
what is hidden.
"""
from __future__ import annotations

from kiln._traceback_util import (
    UnfilteredStackTrace,
    api_boundary,
    filter_exception,
    include_filename,
    include_frame,
    register_exclusion,
)
from kiln._traceback_util import (
    _exclude_paths as _exclude_paths,  # re-exported (private in JAX too)
)

__all__ = ["UnfilteredStackTrace", "api_boundary", "filter_exception", "include_filename",
           "include_frame", "register_exclusion"]
