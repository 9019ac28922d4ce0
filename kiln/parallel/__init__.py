"""Parallelism: SPMD execution over virtual devices (``spmd``), ``pmap``, ``shard_map``,
and the collectives' per-device implementations (``collectives``)."""
from kiln.parallel import collectives  # noqa: F401  (installs the SPMD collective impls)
from kiln.parallel.pmap import pmap
from kiln.parallel.shard_map import shard_map, smap

__all__ = ["pmap", "shard_map", "smap"]
