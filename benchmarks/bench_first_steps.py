"""The first 20 steps of a jitted MLP gradient in a fresh process: kiln against JAX.

Issue 25 ("deterministic by default"): with the default compile mode, a fresh process's
first 20 steps of ``jit(grad(loss))`` on the 784-512-512-10 tanh MLP (batch 128) must take
at most 0.8x JAX's. Each measurement is its own process (imports excluded, the inputs made
before the clock starts); the 20 steps are timed together, outputs blocked on each step.

Rows: JAX (its persistent compilation cache off); kiln in the default mode with the
program not in the disk cache (kiln's per-machine runtime, BLAS glue and precompiled
prelude are, as after any earlier use of kiln) and with it there; kiln's opt-in tiered
mode (``KILN_COMPILE=async``), whose early steps run on the reference backend. The final
parameters of every kiln row are compared bit for bit with each other (one set of
numbers) and with JAX's (tolerance).

Run from the repository root::

    python benchmarks/bench_first_steps.py [--runs 3]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import numpy as np
lib = sys.argv[1]
if lib == "jax":
    import jax, jax.numpy as jnp
else:
    import kiln as jax, kiln.numpy as jnp

rng = np.random.default_rng(0)
sizes = [784, 512, 512, 10]
params = [(jnp.asarray((rng.normal(size=(m, n)) / np.sqrt(m)).astype(np.float32)),
           jnp.asarray(np.zeros(n, np.float32))) for m, n in zip(sizes[:-1], sizes[1:])]
x = jnp.asarray(rng.normal(size=(128, 784)).astype(np.float32))
y = jnp.asarray(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)])

def loss(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    logits = h @ w + b
    logp = logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)
    return -jnp.mean(jnp.sum(logp * y, axis=1))

@jax.jit
def step(params, x, y):
    g = jax.grad(loss)(params, x, y)
    return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, g)]

jax.block_until_ready((params, x, y))
t0 = time.perf_counter()
for _ in range(20):
    params = step(params, x, y)
    jax.block_until_ready(params)
t = time.perf_counter() - t0
np.savez(sys.argv[2], *[np.asarray(a) for p in params for a in p])
print("RESULT " + json.dumps({"t": t}))
"""


def child(lib: str, out: str, env: dict) -> float:
    p = subprocess.run([sys.executable, "-c", CHILD, lib, out], env=env,
                       capture_output=True, text=True, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["t"]
    raise RuntimeError(p.stderr[-2000:])


def _drop_new(cache: str, keep: set) -> None:
    """Remove what the cache's ``so/`` gained since ``keep`` was listed."""
    for name in os.listdir(os.path.join(cache, "so")):
        if name not in keep:
            path = os.path.join(cache, "so", name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--source-only", action="store_true",
                    help="do not byte-compile kiln first (an editable install's state)")
    a = ap.parse_args()
    import numpy as np
    base = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false")
    base.pop("KILN_COMPILE", None)
    times = {k: [] for k in ("jax", "default, program not cached", "default, cached",
                             "KILN_COMPILE=async (tiered)")}
    finals = {}
    with tempfile.TemporaryDirectory(prefix="kiln_first_steps_") as tmp:
        cache = os.path.join(tmp, "cache")
        env = dict(base, KILN_CACHE_DIR=cache)
        # kiln's Python bytecode, as an installed wheel has it (pip compiles every module
        # at install, as it did JAX's): an editable install under PYTHONDONTWRITEBYTECODE
        # otherwise compiles kiln's compiler modules from source in every process
        # (~0.1 s idle, 0.3 s under load, inside the first call). --source-only skips it.
        if not a.source_only:
            subprocess.run([sys.executable, "-m", "compileall", "-q",
                            os.path.dirname(importlib.util.find_spec("kiln").origin)],
                           capture_output=True, timeout=900)
        # kiln's per-machine files (runtime, BLAS glue, the precompiled prelude every
        # program includes) built once, as on any used machine: by one small program
        subprocess.run([sys.executable, "-c", "import kiln, kiln.numpy as jnp; "
                        "kiln.jit(lambda a: a @ a + 1)(jnp.ones((256, 256)))"],
                       env=env, capture_output=True, timeout=900)
        keep = set(os.listdir(os.path.join(cache, "so")))
        for i in range(a.runs):
            out = os.path.join(tmp, f"{i}-%s.npz")
            times["jax"].append(child("jax", out % "jax", base))
            _drop_new(cache, keep)
            times["default, program not cached"].append(child("kiln", out % "cold", env))
            times["default, cached"].append(child("kiln", out % "warm", env))
            _drop_new(cache, keep)
            times["KILN_COMPILE=async (tiered)"].append(
                child("kiln", out % "tiered", dict(env, KILN_COMPILE="async")))
            for k in ("jax", "cold", "warm", "tiered"):
                with np.load(out % k) as z:
                    finals.setdefault(k, []).append([z[f] for f in z.files])
        shutil.rmtree(cache, ignore_errors=True)
    jax_t = statistics.median(times["jax"])
    print(f"{a.runs} runs each, medians; 20 steps of jit(grad(mlp 784-512-512-10)) b128")
    print("| row | time | ÷ JAX |")
    print("| --- | ---: | ---: |")
    for k, ts in times.items():
        print(f"| {k} | {statistics.median(ts) * 1e3:.0f} ms | "
              f"{statistics.median(ts) / jax_t:.2f} |")
    ref = finals["cold"][0]

    def same(run):
        return all(np.array_equal(u, v) for u, v in zip(run, ref))
    for k in ("cold", "warm", "tiered"):
        print(f"kiln {k}: final parameters bit-identical to the first default run in "
              f"{sum(same(r) for r in finals[k])}/{len(finals[k])} runs")
    err = max(float(np.max(np.abs(u - v))) for u, v in zip(ref, finals["jax"][0]))
    print(f"max |kiln - JAX| over final parameters: {err:.3g}")


if __name__ == "__main__":
    main()
