"""``lax.with_sharding_constraint``: lay a value out as a sharding (values unchanged)."""
from __future__ import annotations


def with_sharding_constraint(x, shardings):
    """``x`` unchanged in value, laid out as ``shardings`` (a tree prefix of
    ``Sharding``s or ``PartitionSpec``s, the latter against the mesh set with
    ``kiln.sharding.set_mesh``). Under ``jit`` it is the identity."""
    from kiln.parallel.placement import with_sharding_constraint as place
    return place(x, shardings)


__all__ = ["with_sharding_constraint"]
