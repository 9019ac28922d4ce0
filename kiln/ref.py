"""``jax.ref``: mutable array references (see ``docs/state.md``).

``new_ref(x)`` creates a reference; ``get(ref, idx)`` / ``ref[idx]`` reads,
``set(ref, idx, v)`` / ``ref[idx] = v`` writes, ``swap`` writes and returns the old value,
``addupdate`` adds in place, ``freeze`` gives the final value.
"""
from kiln.core.ref import Ref  # noqa: F401
from kiln.state.primitives import (  # noqa: F401
    empty_ref,
    free_ref,
    freeze,
    new_ref,
)
from kiln.state.primitives import ref_addupdate as addupdate  # noqa: F401
from kiln.state.primitives import ref_get as get  # noqa: F401
from kiln.state.primitives import ref_set as set  # noqa: F401,A004
from kiln.state.primitives import ref_swap as swap  # noqa: F401
from kiln.state.types import AbstractRef  # noqa: F401

__all__ = ["AbstractRef", "Ref", "addupdate", "free_ref", "freeze", "get", "new_ref",
           "empty_ref", "set", "swap"]
