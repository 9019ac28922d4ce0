"""Libraries built on JAX, on kiln (through ``kiln.as_jax``) against JAX, each run in its
own process (the alias must own ``import jax``):

* an Optax ``adam`` step on the 784-512-512-10 tanh MLP under ``jit`` (issue 12);
* a BlackJAX NUTS chain: ``lax.scan`` of 300 NUTS steps on a 5-parameter Bayesian logistic
  regression (100 points), under ``jit``: the first call (trace, build, run; wall and CPU
  seconds, the C compiler's child processes included) and the steady state (best of 3
  later calls). Skipped when BlackJAX is not installed;
* a NumPyro ``MCMC.run``: NUTS on the eight-schools model (non-centered, 1000 warmup +
  1000 samples, one chain): the first run (trace, build, run) and the steady state (best
  of 2 later runs of the same ``MCMC`` object, new keys). Skipped without NumPyro;
* an Equinox MLP training loop (``eqx.nn.MLP`` 8-64-64-1, ``eqx.filter_jit`` +
  ``optax.adam``, 50 steps; steps 1..49 timed, wall and CPU). Skipped without Equinox.

Target ≤ 1× JAX. Run from the repository root::

    python benchmarks/bench_ecosystem.py [--batch 128] [--cold] [--nuts-only|--numpyro-only]

``--cold`` gives kiln an empty build cache (``KILN_CACHE_DIR``) so the first call includes
the C compiler, as on a user's first run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CODE = r"""
import json, statistics, time, sys
import numpy as np
import jax, jax.numpy as jnp, optax

batch = int(sys.argv[-1])
rng = np.random.default_rng(0)
sizes = [784, 512, 512, 10]
params = [(jnp.asarray(rng.normal(size=(m, n)).astype(np.float32) / np.sqrt(m)),
           jnp.zeros(n, jnp.float32)) for m, n in zip(sizes[:-1], sizes[1:])]
x = jnp.asarray(rng.normal(size=(batch, 784)).astype(np.float32))
y = jnp.asarray(rng.normal(size=(batch, 10)).astype(np.float32))

def loss(p, x, y):
    h = x
    for w, b in p[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = p[-1]
    return jnp.mean((h @ w + b - y) ** 2)

opt = optax.adam(1e-3)
state = opt.init(params)

@jax.jit
def step(p, s, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s, l

p, s = params, state
for _ in range(3):
    p, s, l = step(p, s, x, y)
jax.block_until_ready(l)
ts = []
for _ in range(30):
    t0 = time.perf_counter()
    p, s, l = step(p, s, x, y)
    jax.block_until_ready(l)
    ts.append(time.perf_counter() - t0)
print(json.dumps({"ms": statistics.median(ts) * 1e3, "loss": float(l),
                  "backend": jax.__name__ + ("" if hasattr(jax, "_src") else "")}))
"""


# Issue 24: an Equinox MLP training loop (eqx.nn.MLP 8-64-64-1, batch 128, optax.adam,
# eqx.filter_jit), 50 steps; the time of steps 1..49 (step 0 traces and compiles).
EQX_CODE = r"""
import json, time, sys
import numpy as np
import jax, jax.numpy as jnp, optax, equinox as eqx

model = eqx.nn.MLP(in_size=8, out_size=1, width_size=64, depth=2, key=jax.random.key(0))
rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=(128, 8)).astype(np.float32))
y = jnp.asarray(rng.normal(size=(128, 1)).astype(np.float32))
opt = optax.adam(1e-3)
state = opt.init(eqx.filter(model, eqx.is_inexact_array))

@eqx.filter_jit
def step(model, state, x, y):
    def loss(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)
    l, g = eqx.filter_value_and_grad(loss)(model)
    u, state = opt.update(g, state, eqx.filter(model, eqx.is_inexact_array))
    return eqx.apply_updates(model, u), state, l

ts, cpu = [], []
for i in range(50):
    t0, c0 = time.perf_counter(), time.process_time()
    model, state, l = step(model, state, x, y)
    l.block_until_ready()
    ts.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
print(json.dumps({"first_s": ts[0], "rest_s": sum(ts[1:]), "rest_cpu_s": sum(cpu[1:]),
                  "step_ms": 1e3 * sorted(ts[1:])[len(ts[1:]) // 2], "loss": float(l)}))
"""


NUTS_CODE = r"""
import json, os, time
import numpy as np
import jax, jax.numpy as jnp
import blackjax

def cpu():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system

rng = np.random.default_rng(0)
X = jnp.asarray(rng.normal(size=(100, 5)).astype(np.float32))
w_true = np.array([1.0, -2.0, 0.5, 0.0, 1.5], np.float32)
y = jnp.asarray((rng.random(100) < 1 / (1 + np.exp(-(np.asarray(X) @ w_true))))
                .astype(np.float32))

def logdensity(w):
    logits = X @ w
    return jnp.sum(y * logits - jnp.logaddexp(0.0, logits)) - 0.5 * jnp.sum(w ** 2)

nuts = blackjax.nuts(logdensity, step_size=0.1, inverse_mass_matrix=jnp.ones(5))

@jax.jit
def chain(key, w0):
    def step(s, k):
        s, info = nuts.step(k, s)
        return s, (s.position, info.num_integration_steps)
    _, (pos, n) = jax.lax.scan(step, nuts.init(w0), jax.random.split(key, 300))
    return pos, n

t0, c0 = time.perf_counter(), cpu()
pos, n = chain(jax.random.key(0), jnp.zeros(5))
jax.block_until_ready(pos)
first, first_cpu = time.perf_counter() - t0, cpu() - c0
ts = []
for i in range(3):
    t0 = time.perf_counter()
    p, _ = chain(jax.random.key(i + 1), jnp.zeros(5))
    jax.block_until_ready(p)
    ts.append(time.perf_counter() - t0)
print(json.dumps({"first_s": first, "first_cpu_s": first_cpu, "steady_s": min(ts),
                  "mean": np.asarray(pos[100:]).mean(0).tolist(), "steps": int(np.sum(n))}))
"""


NUMPYRO_CODE = r"""
import json, os, sys, time
import numpy as np
import jax
sys.path.insert(0, "examples")
from numpyro_eight_schools import J, eight_schools_noncentered, sigma, y
from numpyro.infer import MCMC, NUTS

def cpu():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system

mcmc = MCMC(NUTS(eight_schools_noncentered), num_warmup=1000, num_samples=1000,
            progress_bar=False)
t0, c0 = time.perf_counter(), cpu()
mcmc.run(jax.random.PRNGKey(0), J, sigma, y=y)
mu = float(np.mean(np.asarray(mcmc.get_samples()["mu"])))
first, first_cpu = time.perf_counter() - t0, cpu() - c0
ts = []
for i in range(2):
    t0 = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(i + 1), J, sigma, y=y)
    jax.block_until_ready(mcmc.get_samples())
    ts.append(time.perf_counter() - t0)
print(json.dumps({"first_s": first, "first_cpu_s": first_cpu, "steady_s": min(ts),
                  "mu": mu}))
"""


def run(args: list, extra_env: dict | None = None) -> dict:
    import os
    # kiln's default: the first call waits for its build (sync), so the timed calls never
    # run on the reference backend while a background build finishes.
    env = {**os.environ, **(extra_env or {})}
    env.pop("KILN_COMPILE", None) if "KILN_COMPILE" not in (extra_env or {}) else None
    out = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--cold", action="store_true", help="kiln starts with an empty build cache")
    ap.add_argument("--numpyro-only", action="store_true",
                    help="only the NumPyro MCMC.run rows (eight schools, NUTS)")
    a = ap.parse_args()
    if a.numpyro_only:
        print("| workload | kiln (as_jax) | JAX | kiln ÷ JAX |")
        print("| --- | ---: | ---: | ---: |")
        numpyro_rows()
        return
    kiln = run([sys.executable, "-m", "kiln.as_jax", "-c", CODE, str(a.batch)])
    jax = run([sys.executable, "-c", CODE, str(a.batch)])
    print("| workload | kiln (as_jax) | JAX | kiln ÷ JAX |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| Optax adam step, MLP 784-512-512-10, batch {a.batch} | {kiln['ms']:.2f} ms | "
          f"{jax['ms']:.2f} ms | {kiln['ms'] / jax['ms']:.2f} |")
    print(f"(losses after 33 steps: kiln {kiln['loss']:.6f}, JAX {jax['loss']:.6f})")
    nuts_rows()
    numpyro_rows()
    equinox_rows()


def nuts_rows(cold: bool | None = None):
    import importlib.util
    import tempfile
    if importlib.util.find_spec("blackjax") is None:
        print("(BlackJAX not installed: NUTS rows skipped)")
        return
    if cold is None:
        cold = "--cold" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        # kiln's default (sync: the first call waits for its build, as JAX's for XLA).
        env = {"KILN_CACHE_DIR": tmp} if cold else {}
        k = run([sys.executable, "-m", "kiln.as_jax", "-c", NUTS_CODE], env)
    j = run([sys.executable, "-c", NUTS_CODE])
    what = "cold build cache" if cold else "build cache warm"
    print(f"| BlackJAX NUTS, scan of 300 steps: first call ({what}), wall | "
          f"{k['first_s']:.2f} s | {j['first_s']:.2f} s | {k['first_s'] / j['first_s']:.2f} |")
    print(f"| same, CPU seconds (with the C compiler's) | {k['first_cpu_s']:.2f} s | "
          f"{j['first_cpu_s']:.2f} s | {k['first_cpu_s'] / max(j['first_cpu_s'], 1e-9):.2f} |")
    print(f"| same, steady state (best of 3) | {k['steady_s'] * 1e3:.1f} ms | "
          f"{j['steady_s'] * 1e3:.1f} ms | {k['steady_s'] / j['steady_s']:.2f} |")
    agree = max(abs(a - b) for a, b in zip(k["mean"], j["mean"]))
    print(f"(NUTS: integration steps kiln {k['steps']}, JAX {j['steps']}; posterior means "
          f"differ by {agree:.2g} at most)")


def numpyro_rows(cold: bool | None = None):
    import importlib.util
    import tempfile
    if importlib.util.find_spec("numpyro") is None:
        print("(NumPyro not installed: MCMC rows skipped)")
        return
    if cold is None:
        cold = "--cold" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        env = {"KILN_CACHE_DIR": tmp} if cold else {}
        k = run([sys.executable, "-m", "kiln.as_jax", "-c", NUMPYRO_CODE], env)
    j = run([sys.executable, "-c", NUMPYRO_CODE])
    what = "cold build cache" if cold else "build cache warm"
    print(f"| NumPyro NUTS, eight schools, 1000+1000: first MCMC.run ({what}), wall | "
          f"{k['first_s']:.2f} s | {j['first_s']:.2f} s | {k['first_s'] / j['first_s']:.2f} |")
    print(f"| same, CPU seconds (with the C compiler's) | {k['first_cpu_s']:.2f} s | "
          f"{j['first_cpu_s']:.2f} s | {k['first_cpu_s'] / max(j['first_cpu_s'], 1e-9):.2f} |")
    print(f"| same, steady state (best of 2 runs) | {k['steady_s']:.2f} s | "
          f"{j['steady_s']:.2f} s | {k['steady_s'] / j['steady_s']:.2f} |")
    print(f"(NumPyro: posterior mean of mu, key 0: kiln {k['mu']:.4f}, JAX {j['mu']:.4f})")


def equinox_rows():
    eqx_rows = [("kiln, default (sync build)", run([sys.executable, "-m", "kiln.as_jax",
                                                     "-c", EQX_CODE])),
                ("kiln, KILN_COMPILE=async (tiered, opt-in)",
                 run([sys.executable, "-m", "kiln.as_jax", "-c", EQX_CODE],
                     {"KILN_COMPILE": "async"})),
                ("JAX", run([sys.executable, "-c", EQX_CODE]))]
    jax_rest = eqx_rows[-1][1]["rest_s"]
    print()
    jax_cpu = eqx_rows[-1][1]["rest_cpu_s"]
    # CPU time (process time, all threads) is also shown: on a shared machine the wall
    # time of a few-ms step mostly measures the scheduler.
    print("| Equinox MLP training loop (filter_jit + optax.adam) | step 0 | steps 1..49 | "
          "median step | steps 1..49 ÷ JAX | CPU time of steps 1..49 | CPU ÷ JAX |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, r in eqx_rows:
        print(f"| {label} | {r['first_s']:.2f} s | {r['rest_s']:.3f} s | {r['step_ms']:.2f} ms "
              f"| {r['rest_s'] / jax_rest:.2f} | {r['rest_cpu_s']:.3f} s "
              f"| {r['rest_cpu_s'] / jax_cpu:.2f} |")
    print("(losses after 50 steps: " + ", ".join(f"{lb} {r['loss']:.6f}"
                                                   for lb, r in eqx_rows) + ")")


if __name__ == "__main__":
    if "--nuts-only" in sys.argv:
        nuts_rows()
    elif "--numpyro-only" in sys.argv:
        numpyro_rows()
    else:
        main()
