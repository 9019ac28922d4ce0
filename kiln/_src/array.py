"""``jax._src.array``: kiln's array type (``ArrayImpl``) and the array constructors JAX's
private ``array`` module holds (``make_array_from_callback``), from :mod:`kiln.array` and
:mod:`kiln`."""
from __future__ import annotations

from kiln.array import *  # noqa: F401,F403
from kiln.array import Array, ArrayImpl  # noqa: F401


def __getattr__(name: str):
    import kiln
    import kiln.array as _array
    for mod in (_array, kiln):
        if name in ("make_array_from_callback", "make_array_from_single_device_arrays",
                    "make_array_from_process_local_data") or mod is _array:
            if hasattr(mod, name):
                return getattr(mod, name)
    raise AttributeError(f"module 'jax._src.array' (kiln) has no attribute {name!r}")
