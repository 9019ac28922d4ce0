"""``jax._src.mesh``: kiln's meshes and axis types under JAX's private module name."""
from __future__ import annotations

from kiln._abstract_mesh import AxisType  # noqa: F401
from kiln.sharding import Mesh  # noqa: F401


def __getattr__(name: str):
    import kiln._abstract_mesh as _am
    import kiln.sharding as _sharding
    for mod in (_sharding, _am):
        if hasattr(mod, name):
            return getattr(mod, name)
    raise AttributeError(f"module 'jax._src.mesh' (kiln) has no attribute {name!r}")


def _empty_concrete_mesh():
    from kiln.sharding import _EMPTY_CONCRETE_MESH
    return _EMPTY_CONCRETE_MESH


empty_concrete_mesh = _empty_concrete_mesh()
