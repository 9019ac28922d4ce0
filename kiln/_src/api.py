"""``jax._src.api``: kiln's public transformations (``jit``, ``grad``, ``vmap``, ...)
under JAX's private module name; every name is read from :mod:`kiln`."""
from __future__ import annotations

import kiln as _kiln
from kiln._src.xla_bridge import clear_backends  # noqa: F401  (JAX's api.clear_backends)
from kiln.transformations import VJP, NotNeeded  # noqa: F401  (JAX's names here)


def __getattr__(name: str):
    try:
        return getattr(_kiln, name)
    except AttributeError:
        raise AttributeError(f"module 'jax._src.api' (kiln) has no attribute {name!r}") from None


def _placed_over(devices, stacked):
    import numpy as np

    from kiln.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(np.array(list(devices)), ("_device_put_axis",))
    return _kiln.device_put(stacked, NamedSharding(mesh, PartitionSpec("_device_put_axis")))


def device_put_sharded(shards, devices):
    """The ``shards`` (a sequence of pytrees of equal structure, one per device) stacked
    along a new leading axis, each slice on its device (``jax._src.api``; JAX removed it
    from its top level)."""
    from kiln import numpy as jnp
    from kiln._physical_tree import tree_map
    if not isinstance(devices, (list, tuple)) or not devices:
        raise ValueError("`devices` argument to `device_put_sharded must be a non-empty "
                         "sequence.")
    if len(shards) != len(devices):
        raise ValueError(f"len(shards) = {len(shards)} must equal len(devices) = "
                         f"{len(devices)}.")
    return tree_map(lambda *xs: _placed_over(devices, jnp.stack([jnp.asarray(x) for x in xs])),
                    shards[0], *shards[1:])


def device_put_replicated(x, devices):
    """``x`` broadcast along a new leading axis of ``len(devices)``, each slice on its
    device (``jax._src.api``)."""
    from kiln import numpy as jnp
    from kiln._physical_tree import tree_map
    if not isinstance(devices, (list, tuple)) or not devices:
        raise ValueError("`devices` argument to `device_put_replicated must be a non-empty "
                         "sequence.")
    n = len(devices)
    return tree_map(lambda v: _placed_over(
        devices, jnp.broadcast_to(jnp.asarray(v), (n, *jnp.shape(v)))), x)
