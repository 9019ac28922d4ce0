"""``jax._src.debugger``: the package behind ``jax.debug.breakpoint``, as JAX's tests
import it (``from jax._src import debugger; debugger.breakpoint(stdin=..., stdout=...,
backend="cli")``).

kiln's debugger is :mod:`kiln._debugger` (captured frames, backends, the ``jdb`` CLI) and
:func:`kiln.debug.breakpoint`; this package and its submodules ``core`` and
``cli_debugger`` re-export them under JAX's module names.
"""
from kiln._src.debugger import cli_debugger, core  # noqa: F401
from kiln._src.debugger.core import breakpoint  # noqa: A004,F401

__all__ = ["breakpoint"]
