"""pmap and collectives over kiln's virtual CPU devices (issue "Parallelism").

Workloads and targets:

1. ``scale``  ``pmap`` of a compute-heavy function (a chain of four 1024x1024 f32 matmuls,
   each followed by ``tanh``): two items over 2 devices (one each, in parallel) against
   the same two items over 1 device (one after the other). Speed-up = time on 1 device
   / time on 2 devices; target >= 1.7 on this 2-core machine.
3. ``mpi``    with ``mpiexec`` (``pip install -e ".[mpi]"``): psum of 1 MB across 2 processes
   (one device each) through ``pmap``, next to MPI's own ``Allreduce`` of the buffer
   (``benchmarks/mpi_psum.py``).
4. ``spmd``   ``jit(step, in_shardings=...)`` of an MLP training step (1024x512 batch,
   512x512 and 512x512 weights, mean-squared loss, SGD update) with the batch split over
   a 2-device mesh (partitioned: each device runs the step on its half, ``psum`` of the
   loss and the weight gradients), against the same step as one unsharded ``jit``
   (whose kernels use both cores). Reported, no target.
2. ``psum``   ``psum`` of a 1 MB f32 array across 8 devices: the time of one
   ``pmap(psum)`` call, and the time per ``psum`` inside one call that runs 20 of them
   (the difference between calls with 20 and with 1 chained psums, divided by 19);
   target < 1 ms per psum.

Runs with ``jax_num_cpu_devices = 8`` (so each device has 2 // 8 -> 1 thread) for both.
JAX has no comparable CPU setting on this machine (its virtual devices share one XLA
thread pool), so the table reports kiln's ratios; JAX's times with
``--xla_force_host_platform_device_count=8`` are printed beside them when JAX is installed.

Run from the repository root::

    python benchmarks/bench_pmap.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

N = 1024
CHAIN = 4


def chain(x, ws, jnp):
    for i in range(CHAIN):
        x = jnp.tanh(x @ ws[i])
    return x


def _time(fn, reps):
    fn()
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def run_kiln(quick: bool) -> dict:
    import kiln
    import kiln.numpy as jnp
    from kiln import lax
    kiln.config.update("jax_num_cpu_devices", 8)
    rng = np.random.default_rng(0)
    ws = [jnp.asarray(rng.standard_normal((N, N), np.float32) / 32) for _ in range(CHAIN)]
    x = rng.standard_normal((2, N, N), np.float32)
    f = kiln.pmap(lambda v: chain(v, ws, jnp))
    reps = 3 if quick else 7
    one = _time(lambda: (f(x[:1]).block_until_ready(), f(x[1:]).block_until_ready()), reps)
    two = _time(lambda: f(x).block_until_ready(), reps)
    res = {"scale_1dev_ms": one * 1e3, "scale_2dev_ms": two * 1e3, "speedup": one / two}

    big = np.ones((8, 262144), np.float32)       # 1 MB per device
    ps = kiln.pmap(lambda v: lax.psum(v, "i"), axis_name="i")
    res["psum_call_ms"] = _time(lambda: ps(big).block_until_ready(), reps * 3) * 1e3

    def many(v):
        for _ in range(20):          # 8**20 stays finite in float32
            v = lax.psum(v, "i")
        return v
    pm = kiln.pmap(many, axis_name="i")
    ident = kiln.pmap(lambda v: lax.psum(v, "i"), axis_name="i")
    t_many = _time(lambda: pm(big).block_until_ready(), reps * 2)
    t_one = _time(lambda: ident(big).block_until_ready(), reps * 2)
    res["psum_each_ms"] = (t_many - t_one) / 19 * 1e3
    return res


def mlp_step(params, x, y, kiln, jnp):
    def loss(params):
        w1, w2 = params
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)
    val, grads = kiln.value_and_grad(loss)(params)
    return val, [w - 0.01 * g for w, g in zip(params, grads)]


def run_kiln_spmd(quick: bool) -> dict:
    import kiln
    import kiln.numpy as jnp
    from kiln.sharding import NamedSharding, PartitionSpec
    rng = np.random.default_rng(1)
    params = [jnp.asarray(rng.standard_normal((512, 512), np.float32) / 23)
              for _ in range(2)]
    x = jnp.asarray(rng.standard_normal((1024, 512), np.float32))
    y = jnp.asarray(rng.standard_normal((1024, 512), np.float32))
    mesh = kiln.make_mesh((2,), ("x",))
    rep, batch = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("x"))

    def step(params, x, y):
        return mlp_step(params, x, y, kiln, jnp)
    one = kiln.jit(step)
    split = kiln.jit(step, in_shardings=(rep, batch, batch))
    xs, ys = kiln.device_put(x, batch), kiln.device_put(y, batch)
    ref, got = one(params, x, y), split(params, xs, ys)
    assert np.allclose(np.asarray(ref[0]), np.asarray(got[0]), rtol=1e-4)
    reps = 5 if quick else 15
    t1 = _time(lambda: one(params, x, y)[0].block_until_ready(), reps)
    t2 = _time(lambda: split(params, xs, ys)[0].block_until_ready(), reps)
    return {"spmd_1_ms": t1 * 1e3, "spmd_2_ms": t2 * 1e3, "spmd_speedup": t1 / t2}


def run_jax(quick: bool) -> dict | None:
    code = f"""
import os, time, statistics, json
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import numpy as np, jax, jax.numpy as jnp
from jax import lax
import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from bench_pmap import chain, _time, N, CHAIN
rng = np.random.default_rng(0)
ws = [jnp.asarray(rng.standard_normal((N, N), np.float32) / 32) for _ in range(CHAIN)]
x = rng.standard_normal((2, N, N), np.float32)
f = jax.pmap(lambda v: chain(v, ws, jnp))
reps = {3 if quick else 7}
one = _time(lambda: (f(x[:1]).block_until_ready(), f(x[1:]).block_until_ready()), reps)
two = _time(lambda: f(x).block_until_ready(), reps)
big = np.ones((8, 262144), np.float32)
ps = jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i")
pc = _time(lambda: ps(big).block_until_ready(), reps * 3)
print(json.dumps({{"scale_1dev_ms": one * 1e3, "scale_2dev_ms": two * 1e3,
                  "speedup": one / two, "psum_call_ms": pc * 1e3}}))
"""
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_mpi() -> dict | None:
    import shutil
    exe = shutil.which("mpiexec") or shutil.which("mpirun")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-n", "2", sys.executable,
                              os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                           "mpi_psum.py")],
                             capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    k = run_kiln(args.quick)
    k.update(run_kiln_spmd(args.quick))
    j = run_jax(args.quick)
    print("| workload | kiln | JAX | target |")
    print("| --- | ---: | ---: | --- |")

    def jv(key, fmt="{:.2f}"):
        return fmt.format(j[key]) if j and key in j else "-"
    print(f"| 2 items on 1 device (ms) | {k['scale_1dev_ms']:.1f} | {jv('scale_1dev_ms', '{:.1f}')} | |")
    print(f"| 2 items on 2 devices (ms) | {k['scale_2dev_ms']:.1f} | {jv('scale_2dev_ms', '{:.1f}')} | |")
    print(f"| speed-up, 2 devices vs 1 | {k['speedup']:.2f}x | {jv('speedup')}x | >= 1.7x |")
    print(f"| pmap(psum) call, 1 MB x 8 devices (ms) | {k['psum_call_ms']:.2f} | {jv('psum_call_ms')} | |")
    print(f"| one psum of 1 MB across 8 devices, in a call (ms) | {k['psum_each_ms']:.2f} | - | < 1 ms |")
    print(f"| MLP step, one unsharded jit (ms) | {k['spmd_1_ms']:.1f} | - | |")
    print(f"| MLP step, batch split over 2 devices, partitioned jit (ms) | "
          f"{k['spmd_2_ms']:.1f} | - | |")
    print(f"| speed-up, partitioned vs unsharded | {k['spmd_speedup']:.2f}x | - | (reported) |")
    m = run_mpi()
    if m:
        print(f"| 2 MPI processes: MPI Allreduce of 1 MB (ms) | {m['mpi_allreduce_ms']:.3f} | - | |")
        print(f"| 2 MPI processes: pmap(psum) call, 1 MB (ms) | {m['pmap_psum_call_ms']:.3f} | - | |")
        print(f"| 2 MPI processes: one psum in a call (ms) | {m['psum_in_call_ms']:.3f} | - | |")


if __name__ == "__main__":
    main()
