"""Benchmark: ``random.normal(key, (10_000_000,))`` under jit, kiln vs JAX in one run.

Prints the best-of-N wall time of each and the ratio kiln / JAX (target: <= 1.5).
Also times a few other samplers at a smaller size. Run from the repository root:

    python benchmarks/bench_random.py [--size N] [--repeat R]
"""
import argparse
import time

import numpy as np


def best(fn, repeat):
    fn()  # warm up (tracing, compilation)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    import kiln
    import kiln.random as kr
    try:
        import jax
        import jax.random as jr
    except ImportError:
        jax = None

    n = args.size
    kf = kiln.jit(lambda k: kr.normal(k, (n,)))
    kk = kr.key(0)
    rows = []
    if jax is not None:
        jf = jax.jit(lambda k: jr.normal(k, (n,)))
        jk = jr.key(0)
        same = np.array_equal(np.asarray(kf(kk)), np.asarray(jf(jk)))
        # Interleave the two so that machine load affects both alike.
        tk, tj = [], []
        for _ in range(args.repeat):
            tk.append(best(lambda: kf(kk).block_until_ready(), 1))
            tj.append(best(lambda: jf(jk).block_until_ready(), 1))
        tk, tj = min(tk), min(tj)
        print(f"normal({n:,}) under jit: kiln {tk * 1e3:8.1f} ms   jax {tj * 1e3:8.1f} ms   "
              f"ratio kiln/jax {tk / tj:5.2f}   identical bits: {same}")
    else:
        tk = best(lambda: kf(kk).block_until_ready(), args.repeat)
        print(f"normal({n:,}) under jit: kiln {tk * 1e3:8.1f} ms   (jax not installed)")

    m = 1_000_000
    cases = [
        ("uniform", lambda r, k: r.uniform(k, (m,))),
        ("bits", lambda r, k: r.bits(k, (m,))),
        ("split(1000)", lambda r, k: r.split(k, 1000)),
        ("randint", lambda r, k: r.randint(k, (m,), 0, 100)),
        ("exponential", lambda r, k: r.exponential(k, (m,))),
        ("gamma(2.5)", lambda r, k: r.gamma(k, 2.5, (m // 10,))),
        ("poisson(5)", lambda r, k: r.poisson(k, 5.0, (m // 10,))),
        ("permutation", lambda r, k: r.permutation(k, m // 10)),
    ]
    for name, fn in cases:
        kfn = kiln.jit(lambda k, fn=fn: fn(kr, k))
        t1 = best(lambda: kfn(kk).block_until_ready(), 3)
        line = f"  {name:14s} kiln {t1 * 1e3:8.1f} ms"
        if jax is not None:
            jfn = jax.jit(lambda k, fn=fn: fn(jr, k))
            t2 = best(lambda: jfn(jk).block_until_ready(), 3)
            line += f"   jax {t2 * 1e3:8.1f} ms   ratio {t1 / t2:5.2f}"
        rows.append(line)
        print(line)


if __name__ == "__main__":
    main()
