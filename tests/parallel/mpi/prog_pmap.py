"""Run by tests/parallel/test_distributed.py under `mpiexec -n 2`: pmap across two processes."""
import os

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.experimental import multihost_utils as mhu

kiln.config.update("jax_num_cpu_devices", 2)
kiln.distributed.initialize()
p, P = kiln.process_index(), kiln.process_count()
assert P == 2, P
assert kiln.device_count() == 4 and kiln.local_device_count() == 2
assert [d.id for d in kiln.local_devices()] == [2 * p, 2 * p + 1]
assert [d.process_index for d in kiln.devices()] == [0, 0, 1, 1]

x = jnp.arange(2.) + 2 * p                     # global positions 0..3
out = {}
out["psum"] = kiln.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(x)
out["pmax"] = kiln.pmap(lambda v: lax.pmax(v, "i"), axis_name="i")(x)
out["pmean"] = kiln.pmap(lambda v: lax.pmean(v, "i"), axis_name="i")(x)
out["index"] = kiln.pmap(lambda v: lax.axis_index("i"), axis_name="i")(x)
out["gather"] = kiln.pmap(lambda v: lax.all_gather(v, "i"), axis_name="i")(x)
out["perm"] = kiln.pmap(lambda v: lax.ppermute(v, "i", [(k, (k + 1) % 4) for k in range(4)]),
                        axis_name="i")(x)
out["norm"] = kiln.pmap(lambda v: v / lax.psum(v, "i"), axis_name="i")(x)
big = kiln.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(jnp.ones((2, 1000)) * (p + 1))
out["big"] = big[:, :3]
ints = kiln.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(jnp.arange(2, dtype=jnp.int32))
out["ints"] = ints
allg = mhu.process_allgather(np.float32(p))
bc = mhu.broadcast_one_to_all(np.array([p + 10.0]))
mhu.sync_global_devices("done")
res = {k: np.asarray(v).tolist() for k, v in out.items()}
res["allgather"] = np.asarray(allg).tolist()
res["bcast"] = np.asarray(bc).tolist()
with open(os.path.join(os.environ["KILN_MPI_OUT"], f"result{p}.txt"), "w") as fh:
    fh.write(repr(res))
