"""``kiln.distributed`` (as ``jax.distributed``): several processes, one device set, over MPI.

``initialize()`` in a program started with ``mpirun -n P python prog.py`` (MPICH or
Open MPI, through ``mpi4py``: ``pip install "kiln[mpi]"``) joins the P processes: each
keeps its ``jax_num_cpu_devices`` local devices, ``devices()`` lists all P of them
(global ids ``process * local + i``), ``process_index()``/``process_count()`` say where
the caller is. A ``pmap`` then maps over every process's local devices at once: each
process passes its own slice (leading size = its local device count) and gets its own
devices' results, while collectives combine all processes' devices (MPI allreduce for
``psum``/``pmax``/``pmin``, an MPI allgather of the operands for the others). A mesh of
every process's devices makes global arrays (``make_array_from_process_local_data``,
``kiln.parallel.global_array``) that ``shard_map`` and ``jit`` with shardings run over,
each process on its own devices' blocks.

What it must not hold: anything that runs without MPI (single-process code never
imports ``mpi4py``).
"""
from __future__ import annotations

import os

_state: dict = {"comm": None, "process_index": 0, "process_count": 1}

_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
            "HYDRA_CONTROL_FD", "MPICH_INTERFACE_HOSTNAME")


def _launched_by_mpi() -> bool:
    return any(v in os.environ for v in _MPI_ENV)


def is_initialized() -> bool:
    """Whether ``initialize`` has joined this process to others."""
    return _state["comm"] is not None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, local_device_ids=None,
               cluster_detection_method: str | None = None,
               initialization_timeout: int = 300, heartbeat_timeout_seconds: int = 100,
               shutdown_timeout_seconds: int = 300, coordinator_bind_address=None,
               slice_index=None, partition_index=None) -> None:
    """Join the processes of an MPI launch into one device set (call it first, before
    any kiln computation, as in JAX).

    Args:
      cluster_detection_method: ``None`` (detect an MPI launch from its environment) or
        ``"mpi4py"``; kiln's multi-process runtime is MPI, so other methods raise.
      num_processes, process_id: if given, checked against MPI's world size and rank.
      coordinator_address, local_device_ids and the timeouts: accepted for JAX
        compatibility; MPI has its own launcher and timeouts.
    """
    from kiln.devices import _frozen_count, local_count
    if is_initialized():
        raise RuntimeError("distributed.initialize should only be called once.")
    if _frozen_count:
        raise RuntimeError("kiln.distributed.initialize() must be called before any kiln "
                           "computation that uses devices (devices(), pmap, ...).")
    if cluster_detection_method not in (None, "mpi4py"):
        raise ValueError(f"cluster_detection_method={cluster_detection_method!r}: kiln "
                         "joins processes over MPI; use None or 'mpi4py' and start the "
                         "program with mpirun/mpiexec.")
    if cluster_detection_method is None and not _launched_by_mpi():
        if num_processes in (None, 1):
            raise ValueError("kiln.distributed.initialize: this process was not started by "
                             "an MPI launcher. Run it with `mpirun -n N python prog.py` (or "
                             "pass cluster_detection_method='mpi4py').")
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("kiln.distributed needs mpi4py and an MPI library: "
                          "pip install 'kiln[mpi]' (mpi4py + MPICH), or mpi4py over the "
                          "system's Open MPI/MPICH.") from e
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if num_processes is not None and num_processes != size:
        raise ValueError(f"num_processes={num_processes} but MPI started {size} processes")
    if process_id is not None and process_id != rank:
        raise ValueError(f"process_id={process_id} but this is MPI rank {rank}")
    local = comm.allgather(local_count())
    if len(set(local)) != 1:
        raise ValueError(f"every process needs the same jax_num_cpu_devices; got {local}")
    _state.update(comm=comm, process_index=rank, process_count=size)


def shutdown() -> None:
    """Leave the process group (MPI itself finalizes at exit)."""
    comm = _state["comm"]
    if comm is not None:
        comm.Barrier()
    _state.update(comm=None, process_index=0, process_count=1)


def comm():
    """The MPI communicator of all processes, or ``None`` in a single process."""
    return _state["comm"]


def process_index() -> int:
    return _state["process_index"]


def process_count() -> int:
    return _state["process_count"]


__all__ = ["initialize", "is_initialized", "shutdown"]
