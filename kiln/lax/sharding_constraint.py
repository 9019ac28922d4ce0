"""``lax.with_sharding_constraint``: lay a value out as a sharding (values unchanged).

The placement itself is the SPMD runtime's (``kiln.parallel.placement``), which installs
it here when imported: ``kiln.parallel`` sits above ``kiln.lax``.
"""
from __future__ import annotations

_place = None


def set_placement(place) -> None:
    """Install ``place(x, shardings)`` (``kiln.parallel.placement``'s)."""
    global _place
    _place = place


def with_sharding_constraint(x, shardings):
    """``x`` unchanged in value, laid out as ``shardings`` (a tree prefix of
    ``Sharding``s or ``PartitionSpec``s, the latter against the mesh set with
    ``kiln.sharding.set_mesh``). Under ``jit`` it is the identity."""
    if _place is None:
        raise RuntimeError("with_sharding_constraint needs kiln.parallel: import kiln")
    return _place(x, shardings)


def apply_out_sharding(x, out_sharding):
    """``x`` laid out as an operation's ``out_sharding=`` (``reshard``: a ``Sharding`` or a
    ``PartitionSpec`` of the context mesh); ``x`` itself when it is None."""
    if out_sharding is None:
        return x
    from kiln.sharding import reshard
    return reshard(x, out_sharding)


__all__ = ["with_sharding_constraint"]
