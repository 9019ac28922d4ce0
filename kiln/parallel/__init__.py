"""Parallelism: SPMD execution over virtual devices (``spmd``), ``pmap``, ``shard_map``,
and the collectives' per-device implementations (``collectives``)."""
# axis_types installs sharding.auto_axes/explicit_axes, collectives the SPMD collective
# impls, type_rules staging.type_rule (shardings in types through operations)
from kiln.parallel import axis_types, collectives, type_rules  # noqa: F401
from kiln.parallel.pmap import pmap
from kiln.parallel.shard_map import shard_map, smap

__all__ = ["pmap", "shard_map", "smap"]
