"""``kiln.experimental.shard_map`` (as ``jax.experimental.shard_map``): ``shard_map``,
the same function as ``kiln.shard_map``; ``check_rep`` is the old name of ``check_vma``."""
from kiln.parallel.shard_map import shard_map

__all__ = ["shard_map"]
