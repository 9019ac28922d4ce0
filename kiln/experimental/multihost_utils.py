"""``kiln.experimental.multihost_utils`` (as ``jax.experimental.multihost_utils``):
helpers for programs running as several processes (``kiln.distributed``, over MPI).

In a single process each helper is the identity (with NumPy results, as in JAX)."""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from kiln.tree_util import tree_map


def _comm():
    from kiln import distributed
    return distributed.comm()


def process_allgather(in_tree: Any, tiled: bool = False) -> Any:
    """Gather every process's value of each leaf (same shape everywhere): stacked on a
    new leading axis, or concatenated along axis 0 with ``tiled=True``. NumPy arrays."""
    comm = _comm()

    def gather(x):
        v = np.asarray(x)
        if v.ndim == 0 or not tiled:
            v = v[None]
        if comm is None:
            return v
        return np.concatenate(comm.allgather(v), axis=0)
    return tree_map(gather, in_tree)


def broadcast_one_to_all(in_tree: Any, is_source: bool | None = None) -> Any:
    """Every process gets the source process's leaves (process 0 unless ``is_source``
    marks another one). NumPy arrays."""
    comm = _comm()
    if comm is None:
        return tree_map(np.asarray, in_tree)
    if is_source is None:
        is_source = comm.Get_rank() == 0
    sources = comm.allgather(bool(is_source))
    if sum(sources) != 1:
        raise ValueError(f"broadcast_one_to_all needs exactly one source process; "
                         f"is_source was True in {sum(sources)}")
    root = sources.index(True)
    return tree_map(lambda x: comm.bcast(np.asarray(x) if is_source else None, root=root),
                    in_tree)


def assert_equal(in_tree: Any, fail_message: str = "") -> None:
    """Raise ``AssertionError`` unless every process passed equal values."""
    gathered = process_allgather(in_tree)

    def check(g):
        if not all(np.array_equal(g[0], g[i]) for i in range(1, len(g))):
            raise AssertionError(f"{fail_message} Expected equal values on every process, "
                                 f"got {g}")
    tree_map(check, gathered)


def sync_global_devices(name: str) -> None:
    """A barrier across all processes; every process must pass the same ``name``."""
    h = np.uint32(zlib.crc32(name.encode()))
    assert_equal(h, f"sync_global_devices name mismatch ('{name}')")


def reached_preemption_sync_point(step_id: int) -> bool:
    """kiln has no preemption notices: always ``False``."""
    return False


__all__ = ["assert_equal", "broadcast_one_to_all", "process_allgather",
           "reached_preemption_sync_point", "sync_global_devices"]
