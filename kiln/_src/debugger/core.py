"""``jax._src.debugger.core``: frames, the backend registry and ``breakpoint``, from
:mod:`kiln._debugger` and :mod:`kiln.debug`."""
from kiln._debugger import (  # noqa: F401
    Debugger,
    DebuggerFrame,
    cant_flatten,
    debug_lock,
    get_debugger,
    register_debugger,
)
from kiln.debug import breakpoint  # noqa: A004,F401
