"""Eager ``kiln.numpy`` calls against NumPy (and JAX when installed), side by side in one run.

Issue 3's target: common calls (``sum``, ``mean``, ``dot``, ``where``, indexing) stay within
3x of NumPy's own time on small inputs and within 1.2x on large ones. Each row times the
same call on the same data; the ratio is kiln / NumPy (best of several repeats, interleaved, so background
load inflates both sides alike). Basic slices of large arrays are views in NumPy and in
kiln (arrays are immutable, so sharing the buffer is safe): their cost does not grow with
the array, so they are rows of size "view", held to the small-input bound.

Run: ``python benchmarks/bench_numpy_eager.py`` (``--quick`` for fewer repeats).
"""
from __future__ import annotations

import platform
import sys
import timeit

import numpy as np

SMALL_LIMIT, LARGE_LIMIT = 3.0, 1.2


def best_per_call(fn, budget_s=0.2, repeat=7):
    """Best time of one call: calibrate a loop count that runs ~budget_s/repeat."""
    n = 1
    while True:
        t = timeit.timeit(fn, number=n)
        if t > budget_s / repeat / 4 or n > 1_000_000:
            break
        n *= 4
    n = max(1, int(n * (budget_s / repeat) / max(t, 1e-9)))
    return min(timeit.repeat(fn, number=n, repeat=repeat)) / n


def cases(xp, to):
    """(name, size class, thunk) for the module ``xp`` with arrays made by ``to``."""
    rng = np.random.default_rng(0)
    s = rng.standard_normal(10).astype(np.float32)
    s2 = rng.standard_normal(10).astype(np.float32)
    m = rng.standard_normal((4, 4)).astype(np.float32)
    L = rng.standard_normal(1_000_000).astype(np.float32)
    L2 = rng.standard_normal(1_000_000).astype(np.float32)
    M = rng.standard_normal((512, 512)).astype(np.float32)
    M2 = rng.standard_normal((512, 512)).astype(np.float32)
    i10 = np.array([1, 3, 5], np.int32)
    iL = rng.integers(0, 1_000_000, 100_000).astype(np.int32)
    s, s2, m, L, L2, M, M2, i10, iL = map(to, (s, s2, m, L, L2, M, M2, i10, iL))
    cs, cL = s > 0, L > 0
    M2D = to(np.asarray(M))
    return [
        ("sum(x)", "small", lambda: xp.sum(s)),
        ("sum(x)", "large", lambda: xp.sum(L)),
        ("sum(m, axis=0)", "small", lambda: xp.sum(m, axis=0)),
        ("sum(M, axis=0)", "large", lambda: xp.sum(M, axis=0)),
        ("mean(x)", "small", lambda: xp.mean(s)),
        ("mean(x)", "large", lambda: xp.mean(L)),
        ("dot(x, y)", "small", lambda: xp.dot(s, s2)),
        ("dot(m, m)", "small", lambda: xp.dot(m, m)),
        ("dot(x, y)", "large", lambda: xp.dot(L, L2)),
        ("dot(M, M)", "large", lambda: xp.dot(M, M2)),
        ("where(c, x, y)", "small", lambda: xp.where(cs, s, s2)),
        ("where(c, x, y)", "large", lambda: xp.where(cL, L, L2)),
        ("x[1]", "small", lambda: s[1]),
        ("x[1:3]", "small", lambda: s[1:3]),
        ("m[1, 2]", "small", lambda: m[1, 2]),
        ("m[:, 1]", "small", lambda: m[:, 1]),
        ("x[idx]", "small", lambda: s[i10]),
        ("x[mask]", "small", lambda: s[cs]),
        ("x[::2]", "view", lambda: L[::2]),
        ("x[idx]", "large", lambda: L[iL]),
        ("M[:, 1]", "view", lambda: M2D[:, 1]),
        ("x[mask]", "large", lambda: L[cL]),
    ]


def _force(xp_name):
    if xp_name == "jax":
        return lambda r: r.block_until_ready() if hasattr(r, "block_until_ready") else r
    return lambda r: r


def run(budget_s=0.2, rounds=5):
    """Times every case for each module; the modules are interleaved case by case and the
    best of ``rounds`` is kept, so slow drifts in machine load hit all sides alike."""
    import kiln.numpy as knp
    mods = [("numpy", np, np.asarray), ("kiln", knp, knp.asarray)]
    try:
        import jax.numpy as jnp
        mods.append(("jax", jnp, jnp.asarray))
    except ImportError:
        pass
    per_mod = {name: cases(xp, to) for name, xp, to in mods}
    table = {}
    for i, (label, size, _) in enumerate(per_mod["numpy"]):
        row = table.setdefault((label, size), {})
        for _ in range(rounds):
            for name, _, _ in mods:
                fn, force = per_mod[name][i][2], _force(name)
                force(fn())   # warm up (JAX compiles here)
                t = best_per_call(lambda fn=fn, force=force: force(fn()), budget_s / rounds)
                row[name] = min(row.get(name, t), t)
    return table


def fmt(t):
    return f"{t * 1e6:.2f} µs" if t < 1e-3 else f"{t * 1e3:.2f} ms"


def main():
    budget = 0.05 if "--quick" in sys.argv else 0.2
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"NumPy {np.__version__}")
    table = run(budget)
    print("| call | size | kiln | NumPy | JAX | kiln / NumPy | target |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for (label, size), r in table.items():
        ratio = r["kiln"] / r["numpy"]
        # A view of a large array costs O(1) in NumPy (and in kiln): it is per-call
        # overhead like a small input, so it is held to the small-input bound.
        limit = LARGE_LIMIT if size == "large" else SMALL_LIMIT
        ok = "✅" if ratio <= limit else "❌"
        jx = fmt(r["jax"]) if "jax" in r else "—"
        print(f"| `{label}` | {size} | {fmt(r['kiln'])} | {fmt(r['numpy'])} | {jx} | "
              f"{ratio:.2f}× | ≤ {limit}× {ok} |")


if __name__ == "__main__":
    main()
