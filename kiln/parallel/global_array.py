"""Global arrays of a multi-process run (``kiln.distributed``), as multi-controller JAX's.

A ``NamedSharding`` whose mesh holds other processes' devices lays out an array of which
this process holds only its own devices' blocks. Such an Array's ``_value`` is

* the whole global value (a NumPy array) when this process's blocks cover it (the array
  is replicated across processes, or split only along mesh axes inside a process): it
  reads as a whole, as JAX's does;
* else a :class:`ProcessLocalValue`: the global shape and dtype and this process's
  blocks (one per local device); reading it as a whole raises JAX's ``RuntimeError``.

Either way ``.shape`` is the global shape, ``addressable_shards`` are this process's
devices' blocks and ``is_fully_addressable`` is False. The helpers here slice values into
local blocks (:func:`local_blocks`), assemble results (:func:`assemble`) and gather a
global value across processes (:func:`gather_global`, an MPI collective every process
calls in the same order, as JAX's cross-process computations are).

What it must not hold: execution of programs (``shard_map``, ``partition``, ``spmd``).
"""
from __future__ import annotations

import numpy as np

from kiln import sharding as _sharding
from kiln._unreadable import UnreadableValue

FETCH_ERROR = ("Fetching value for `jax.Array` that spans non-addressable (non process "
               "local) devices is not possible. You can use "
               "`jax.experimental.multihost_utils.process_allgather` to print the global "
               "array or use `.addressable_shards` method of jax.Array to inspect the "
               "addressable (process local) shards.")


class ProcessLocalValue(UnreadableValue):
    """What a global Array holds when this process's blocks do not cover its value:
    its global ``shape`` and ``dtype`` and ``blocks`` (device id -> NumPy block).
    Anything that would read the whole value raises JAX's ``RuntimeError``."""

    __slots__ = ("blocks",)

    def __init__(self, shape, dtype, blocks: dict):
        super().__init__(shape, dtype)
        self.blocks = blocks

    def _error(self):
        return RuntimeError(FETCH_ERROR)


# A shard of a multi-process global array reads this process's block of its device.
_sharding.register_block_reader(ProcessLocalValue, lambda v, device: v.blocks[device.id])


def _process() -> tuple[int, int]:
    from kiln import distributed
    return distributed.process_index(), distributed.process_count()


def spans_processes(mesh) -> bool:
    """Whether ``mesh`` holds devices of a process other than this one."""
    here, count = _process()
    if count == 1:
        return False
    return any(d.process_index != here for d in mesh.devices.flat)


def check_mesh(mesh, what: str) -> None:
    """A multi-process mesh must hold devices of every process (its program runs in each,
    and its collectives are MPI calls over all of them)."""
    _, count = _process()
    procs = sorted({d.process_index for d in mesh.devices.flat})
    if procs != list(range(count)):
        raise NotImplementedError(
            f"{what} over a mesh holding devices of processes {procs} of {count}: kiln runs "
            "a multi-process mesh's program in every process (its collectives are MPI calls "
            "over all of them); use a mesh with devices of every process, or one of "
            "kiln.local_devices() only.")


def local_placements(mesh) -> list:
    """``(device, coords)`` for this process's devices of ``mesh``, in mesh order."""
    here, _ = _process()
    return [(d, c) for d, c in mesh.coords() if d.process_index == here]


def layout(mesh) -> list:
    """``(coords, process index)`` for every device of ``mesh``, in mesh order."""
    return [(c, d.process_index) for d, c in mesh.coords()]


def _key(index) -> tuple:
    return tuple((s.start, s.stop) for s in index)


def has_full_value(sharding, shape) -> bool:
    """Whether this process's devices hold blocks covering the whole array."""
    everywhere = {_key(sharding.block_index(c, shape)) for _, c in sharding.mesh.coords()}
    mine = {_key(sharding.block_index(c, shape)) for _, c in local_placements(sharding.mesh)}
    return len(mine) == len(everywhere)


def assemble(sharding, shape, dtype, weak_type: bool, blocks: dict):
    """The global Array laid out as ``sharding`` from this process's ``blocks`` (device
    id -> block of its local devices)."""
    from kiln.array import make_array
    shape, dtype = tuple(shape), np.dtype(dtype)
    placements = local_placements(sharding.mesh)
    if has_full_value(sharding, shape):
        value = np.empty(shape, dtype)
        for d, c in placements:
            value[sharding.block_index(c, shape)] = blocks[d.id]
    else:
        value = ProcessLocalValue(shape, dtype, {d.id: np.asarray(blocks[d.id], dtype)
                                                 for d, _ in placements})
    out = make_array(value, weak_type)
    out._sharding = sharding
    return out


def block_of(x, sharding, device, coords):
    """Device ``device``'s block of ``x``, an Array laid out as ``sharding``."""
    v = x._value
    if type(v) is ProcessLocalValue:
        return v.blocks[device.id]
    return np.asarray(v)[sharding.block_index(coords, v.shape)]


def _spans(x) -> bool:
    from kiln.sharding import NamedSharding
    s = x._sharding_or_none()
    return isinstance(s, NamedSharding) and spans_processes(s.mesh)


def gather_global(x) -> np.ndarray:
    """The whole value of ``x``; for an array over several processes an MPI collective
    (every process must call it, in the same order)."""
    if not _spans(x):
        return np.asarray(x._value)
    from kiln import distributed
    sh = x._sharding
    mine = [(sh.block_index(c, x.shape), np.asarray(block_of(x, sh, d, c)))
            for d, c in local_placements(sh.mesh) if sh.replica_id(c) == 0]
    out = np.empty(x.shape, x.dtype)
    for part in distributed.comm().allgather(mine):
        for index, block in part:
            out[index] = block
    return out


def local_blocks(x, sharding, placements) -> list:
    """The blocks of ``x`` (an Array, or a value every process holds whole) that
    ``placements`` (this process's devices) own under ``sharding``. An array over
    several processes laid out otherwise is gathered first (a collective)."""
    from kiln.array import Array
    if type(x) is Array:
        if x._sharding_or_none() == sharding:
            return [block_of(x, sharding, d, c) for d, c in placements]
        v = gather_global(x)
    else:
        v = np.asarray(x)
    return [v[sharding.block_index(c, v.shape)] for _, c in placements]


def put(x, sharding):
    """``x`` laid out as ``sharding`` (a ``NamedSharding`` over several processes):
    ``device_put`` / ``jit`` ``in_shardings`` of a multi-process run."""
    from kiln.array import Array, make_array, to_array
    a = x if type(x) is Array else to_array(x)
    sharding.check_shape(a.shape)
    if a._sharding_or_none() == sharding:
        out = make_array(a._value, a.weak_type)
        out._sharding = sharding
        return out
    placements = local_placements(sharding.mesh)
    blocks = local_blocks(a, sharding, placements)
    return assemble(sharding, a.shape, a.dtype, a.weak_type,
                    {d.id: b for (d, _), b in zip(placements, blocks)})


def any_spans(leaves) -> bool:
    """Whether any leaf is an Array laid out over several processes."""
    from kiln.array import Array
    return any(type(x) is Array and _spans(x) for x in leaves)
