"""``jax._src.debugging``: the debugging primitives' names (``debug_print`` is
``jax.debug.print``, ``debug_callback`` is ``jax.debug.callback``), from :mod:`kiln.debug`."""
from __future__ import annotations

import kiln.debug as _debug

debug_print = _debug.print
debug_callback = _debug.callback


def __getattr__(name: str):
    try:
        return getattr(_debug, name)
    except AttributeError:
        raise AttributeError(f"module 'jax._src.debugging' (kiln) has no attribute {name!r}") \
            from None
