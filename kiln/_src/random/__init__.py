"""``jax._src.random``: its submodules are kiln modules (``core``, ``prng``, ``rbg`` and
the PRNG implementations ``philox2x32``, ``philox4x32``, ``threefry4x32`` here; the others
through ``kiln._src.ALIASES``: ``threefry2x32`` is :mod:`kiln.random.prng`,
``stateful_rng`` is :mod:`kiln.experimental.random`), and its other names (the samplers
and key functions JAX's package re-exports) are :mod:`kiln.random`'s."""
import importlib
from collections.abc import Sequence
from typing import Union

from kiln._src import subpackage_getattr
from kiln.random._keys import KeyTy, PRNGImpl, PRNGSpec
from kiln.typing import ArrayLike, DTypeLike

# JAX's type aliases of the package (annotations only).
Shape = Sequence[int]
RealArray = ArrayLike
IntegerArray = ArrayLike
DTypeLikeInt = DTypeLike
DTypeLikeUInt = DTypeLike
DTypeLikeFloat = DTypeLike
PRNGSpecDesc = Union[str, PRNGSpec, PRNGImpl]
KeyDTypeLike = Union[str, type, KeyTy]

_SUBMODULES = ("core", "prng", "rbg", "philox2x32", "philox4x32", "threefry4x32")
_aliased = subpackage_getattr("random")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    try:
        return _aliased(name)
    except AttributeError:
        pass
    public = importlib.import_module("kiln.random")
    if not name.startswith("_") and hasattr(public, name):
        return getattr(public, name)
    raise AttributeError(f"module 'kiln._src.random' has no attribute {name!r}")
