"""Structured control flow: cond, switch, while_loop, fori_loop, scan, map, associative_scan,
custom_linear_solve, custom_root."""
from kiln.lax.control.associative_scan import associative_scan  # noqa: F401
from kiln.lax.control.cond import cond, cond_p, platform_dependent, switch  # noqa: F401
from kiln.lax.control.loops import (  # noqa: F401
    fori_loop,
    map,
    scan,
    scan_p,
    while_loop,
    while_p,
)
from kiln.lax.control.solves import (  # noqa: F401
    custom_linear_solve,
    custom_linear_solve_p,
    custom_root,
)

__all__ = ["cond", "switch", "cond_p", "while_loop", "fori_loop", "scan", "map", "while_p",
           "scan_p", "associative_scan", "platform_dependent", "custom_linear_solve",
           "custom_root"]
