"""Run by bench_pmap.py under `mpiexec -n 2`: psum of 1 MB across 2 processes (one device
each) through kiln's pmap, next to MPI's own Allreduce of the same buffer."""
import json
import statistics
import time

import numpy as np

import kiln
from kiln import lax

kiln.config.update("jax_num_cpu_devices", 1)
kiln.distributed.initialize()
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
x = np.ones((1, 262144), np.float32)
out = np.empty_like(x)


def med(fn, reps=50):
    fn()
    fn()
    ts = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


raw = med(lambda: comm.Allreduce(x, out))


def many(v):
    for _ in range(10):
        v = lax.psum(v, "i")
    return v


one = kiln.pmap(lambda v: lax.psum(v, "i"), axis_name="i")
ten = kiln.pmap(many, axis_name="i")
t1 = med(lambda: one(x).block_until_ready())
t10 = med(lambda: ten(x).block_until_ready())
if comm.Get_rank() == 0:
    print(json.dumps({"mpi_allreduce_ms": raw, "pmap_psum_call_ms": t1,
                      "psum_in_call_ms": (t10 - t1) / 9}))
