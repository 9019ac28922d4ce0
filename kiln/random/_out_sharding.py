"""``out_sharding=`` of the samplers: the result laid out as asked (JAX's samplers take
it for explicit-sharding meshes). Every sampler computes its values on one array and
:func:`obeying_out_sharding` reshards the result (``kiln.sharding.reshard``: a
``NamedSharding``, or a ``PartitionSpec`` of the mesh set with ``set_mesh``), eagerly and
under ``jit`` alike; the values do not depend on the layout. A sharding over an empty
mesh (no axes) lays out nothing, as in JAX."""
from __future__ import annotations

import functools
import inspect


def obeying_out_sharding(fn):
    """``fn`` (whose ``out_sharding`` keyword its body ignores) with its result resharded."""
    if "out_sharding" not in inspect.signature(fn).parameters:
        return fn

    @functools.wraps(fn)
    def sampler(*args, out_sharding=None, **kwargs):
        out = fn(*args, **kwargs)
        mesh = getattr(out_sharding, "mesh", None)
        if out_sharding is None or (mesh is not None and not tuple(mesh.axis_names)):
            # None, or a sharding over an empty mesh (Flax's nnx initializers pass
            # ``NamedSharding(AbstractMesh(()), P(None, None))``): nothing to lay out.
            return out
        from kiln.sharding import reshard
        return reshard(out, out_sharding)
    return sampler
