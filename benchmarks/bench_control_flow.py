"""Control-flow benchmarks, kiln and JAX measured side by side in one run.

1. Staging cost does not grow with the trip count: ``make_jaxpr`` of a ``scan`` and of a
   ``fori_loop`` with 10 and with 10,000 iterations (time and equation count).
2. Running a 10,000-step ``fori_loop`` of small steps (a damped scalar update on a
   4-vector) under ``jit``, after a warm-up call, so no retracing is measured: µs per
   iteration on kiln (a native C loop) and with JAX (XLA compiles the loop).
3. The same for ``scan`` emitting a value per step.
4. Loops whose body holds an operation without a native lowering (``sort``, a 24x24
   ``cholesky``, ``pure_callback``): kiln compiles the loop and calls back into Python
   for that operation (``kiln/compiler/lower/host_calls.py``), ms per 500-step ``scan``.

Run: ``python benchmarks/bench_control_flow.py`` (JAX optional; ratios printed).
Numbers are for comparison within one run only; CI never gates on them.
"""
from __future__ import annotations

import platform
import time
import timeit

import numpy as np

N_SMALL, N_BIG = 10, 10_000


def best(fn, number=1, repeat=5):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def n_eqns(closed):
    """Equations in a jaxpr, counting sub-jaxprs (duck-typed for kiln and JAX)."""
    total, stack = 0, [closed.jaxpr]
    while stack:
        jx = stack.pop()
        total += len(jx.eqns)
        for e in jx.eqns:
            for p in e.params.values():
                for s in (p if isinstance(p, (tuple, list)) else [p]):
                    inner = getattr(s, "jaxpr", None)
                    if inner is not None and hasattr(inner, "eqns"):
                        stack.append(inner)
    return total


def programs(lax, jnp):
    def scan_prog(n):
        def f(x):
            return lax.scan(lambda c, _: (c * 0.999 + jnp.sin(c), c), x, None, length=n)
        return f

    def fori_prog(n):
        def f(x):
            return lax.fori_loop(0, n, lambda i, c: c * 0.999 + 1.0, x)
        return f

    return {"scan": scan_prog, "fori_loop": fori_prog}


def staging(name, mod, lax, jnp):
    x = np.ones(4, np.float32)
    rows = []
    for kind, make in programs(lax, jnp).items():
        for n in (N_SMALL, N_BIG):
            f = make(n)
            t = best(lambda: mod.make_jaxpr(f)(x), number=20)
            rows.append((f"{name} make_jaxpr {kind} n={n}", t, n_eqns(mod.make_jaxpr(f)(x))))
    return rows


def running(name, mod, lax, jnp, block):
    x = np.ones(4, np.float32)
    res = {}
    for kind, make in programs(lax, jnp).items():
        f = mod.jit(make(N_BIG))
        block(f(x))                                   # trace + compile once
        t0 = time.perf_counter()
        block(f(x))
        first = time.perf_counter() - t0
        t = min(first, best(lambda: block(f(x)), number=1, repeat=3))
        res[f"{name} {kind}"] = t / N_BIG
    return res


def hosted_programs(mod, lax, jnp):
    """500-step scans whose body holds one host-only operation (item 4)."""
    w = (np.random.default_rng(0).standard_normal((32, 32)) / 6).astype(np.float32)

    def make(op):
        def f(x):
            def body(c, _):
                return op(jnp.tanh(w @ c) + 0.1), None
            return lax.scan(body, x, None, length=500)[0]
        return mod.jit(f)

    def chol(c):
        a = jnp.eye(24) * 2 + jnp.outer(c[:24], c[:24]) * 0.01
        return c + jnp.linalg.cholesky(a)[0].sum() * 1e-3

    def callback(c):
        return mod.pure_callback(lambda a: a, mod.ShapeDtypeStruct(c.shape, c.dtype), c)
    return {"sort": make(jnp.sort), "cholesky 24x24": make(chol),
            "pure_callback": make(callback)}


def hosted(mods):
    x = np.ones(32, np.float32)
    print("\n## 500-step scan with a host-only operation in the body, ms per call")
    res = {}
    for name, mod, lax, jnp, block in mods:
        for kind, f in hosted_programs(mod, lax, jnp).items():
            block(f(x))
            res[(name, kind)] = best(lambda: block(f(x)), number=1, repeat=5)
            print(f"  {name:5s} {kind:16s} {res[(name, kind)] * 1e3:8.2f}")
    for (name, kind), t in res.items():
        if name == "kiln" and ("jax", kind) in res:
            print(f"  ratio kiln / jax ({kind}) = {t / res[('jax', kind)]:.2f}")


def main():
    import kiln
    import kiln.numpy as knp
    print(f"machine: {platform.machine()} {platform.processor() or ''} "
          f"python {platform.python_version()} numpy {np.__version__}")
    mods = [("kiln", kiln, kiln.lax, knp, lambda r: r)]
    try:
        import jax
        import jax.numpy as jnp
        print(f"jax {jax.__version__}")
        mods.append(("jax", jax, jax.lax, jnp, jax.block_until_ready))
    except ImportError:
        print("jax not installed: JAX columns omitted")

    print(f"\n## Staging: make_jaxpr of a loop of {N_SMALL} vs {N_BIG} iterations")
    print(f"  {'program':40s} {'ms/trace':>9s} {'eqns':>5s}")
    for name, mod, lax, jnp, _ in mods:
        rows = staging(name, mod, lax, jnp)
        for label, t, eq in rows:
            print(f"  {label:40s} {t * 1e3:9.3f} {eq:5d}")
        for i in range(0, len(rows), 2):
            small, big = rows[i], rows[i + 1]
            same = "same" if small[2] == big[2] else "DIFFERENT"
            print(f"    -> {name}: {big[1] / small[1]:.2f}x time, {same} equation count "
                  f"for {N_BIG} vs {N_SMALL} iterations")

    print(f"\n## Running a jitted {N_BIG}-step loop (small steps), µs per iteration")
    results = {}
    for name, mod, lax, jnp, block in mods:
        results.update(running(name, mod, lax, jnp, block))
    for k, v in results.items():
        print(f"  {k:24s} {v * 1e6:9.3f}")
    for kind in ("scan", "fori_loop"):
        if f"jax {kind}" in results:
            print(f"  ratio kiln / jax ({kind}) = "
                  f"{results[f'kiln {kind}'] / results[f'jax {kind}']:.1f}x")
    hosted(mods)


if __name__ == "__main__":
    main()
