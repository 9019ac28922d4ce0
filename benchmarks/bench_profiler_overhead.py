"""Benchmark: what ``kiln.profiler`` costs when it is off, and when it records (issue 13).

Measures, on a cached ``jit`` call of a tiny program (the dispatch overhead dominates):

* ``no hook``: the executable's call path with the profiler's test removed (its source
  with the ``if PROFILING`` lines dropped, compiled in the same module): the baseline;
* ``hook, off``: the shipped call path, no trace active;
* ``hook, off, API loaded``: the same after every ``kiln.profiler`` module is imported;
* ``tracing``: inside ``kiln.profiler.trace`` (an ``execute`` event plus one per kernel);

and the price of finding live arrays (``kiln.live_arrays``: one pass over the GC's
objects) against what registering each new array would have cost (a weak reference
appended to a list, the cheapest registry: ``ArrayImpl`` is unhashable, so a ``WeakSet``
cannot hold it) beside the cost of a small eager op.

Run from the repository root: ``python benchmarks/bench_profiler_overhead.py [--n N]``.
Timings are the fastest of several repeats (the machine may be shared).
"""
import argparse
import inspect
import os
import sys
import tempfile
import textwrap
import timeit
import weakref

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import kiln  # noqa: E402
import kiln.numpy as jnp  # noqa: E402
from kiln.config import config  # noqa: E402


def best_ns(fn, number, repeat=7):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def unhooked_call():
    """``Executable.__call__`` without the profiler's test, compiled in its module."""
    from kiln.compiler.build import executable
    src = textwrap.dedent(inspect.getsource(executable.Executable.__call__))
    lines = src.splitlines()
    out, skip = [], False
    for ln in lines:
        if ln.strip() == "if PROFILING:":
            skip = True
            continue
        if skip:
            skip = False
            continue
        out.append(ln)
    ns: dict = {}
    exec(compile("\n".join(out), executable.__file__, "exec"), executable.__dict__, ns)
    return ns["__call__"]


_FLAG = False


def _isolated_check_ns():
    def with_check():
        if _FLAG:
            return 1
        return 0

    def without():
        return 0

    diffs = []
    for _ in range(3):
        a = best_ns(with_check, 1_000_000)
        b = best_ns(without, 1_000_000)
        diffs.append(a - b)
    return sorted(diffs)[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000, help="calls per timing")
    args = ap.parse_args()
    n = args.n
    config.update("kiln_compile", "sync")
    from kiln.compiler.build.executable import Executable

    f = kiln.jit(lambda x: x * 2.0 + 1.0)
    x = jnp.ones((8,), jnp.float32)
    f(x).block_until_ready()
    f(x)
    call = lambda: f(x)  # noqa: E731

    hooked, unhooked = Executable.__call__, unhooked_call()
    base = off = float("inf")
    for r in range(6):          # interleaved, in both orders: drifts of a shared machine cancel
        for which in ((0, 1) if r % 2 else (1, 0)):
            if which:
                off = min(off, best_ns(call, n, repeat=3))
                continue
            Executable.__call__ = unhooked
            try:
                base = min(base, best_ns(call, n, repeat=3))
            finally:
                Executable.__call__ = hooked
    import kiln.profiler as prof
    for name in prof.__all__:
        getattr(prof, name)
    off_loaded = best_ns(call, n, repeat=15)
    with tempfile.TemporaryDirectory() as d:
        prof.start_trace(d)
        f(x)                         # the first profiled call names its kernels
        try:
            on = best_ns(call, max(n // 4, 100), repeat=5)
        finally:
            prof.stop_trace()
    print(f"cached jit call, {n} calls per timing (fastest of 15):")
    print(f"  no hook (baseline)      {base:8.0f} ns")
    print(f"  hook, off               {off:8.0f} ns  ({off - base:+.0f} ns)")
    print(f"  hook, off, API loaded   {off_loaded:8.0f} ns  ({off_loaded - base:+.0f} ns)")
    print(f"  tracing                 {on:8.0f} ns  ({on - base:+.0f} ns per call)")
    check = _isolated_check_ns()
    print(f"  the test alone (a global read and branch, isolated): {check:.1f} ns")

    v = np.ones(3, np.float32)
    from kiln.array import make_array
    a = jnp.ones(3)
    make = best_ns(lambda: make_array(v), n * 5)
    refs = []
    ref = weakref.ref
    reg = best_ns(lambda: refs.append(ref(make_array(v))), n * 5) - make
    refs.clear()
    add = best_ns(lambda: a + a, n * 5)
    keep = [jnp.ones(3) for _ in range(10000)]
    live = best_ns(kiln.live_arrays, 20, repeat=3)
    print("live arrays:")
    print(f"  eager a + a (3 floats)                 {add:8.0f} ns")
    print(f"  registering each array (weakref+list)  {reg:8.0f} ns per array "
          f"({100 * reg / add:.0f}% of a + a) -- not done")
    print(f"  kiln.live_arrays() with {len(keep)}+ arrays   {live / 1e6:8.2f} ms per call "
          f"({len(kiln.live_arrays())} found)")


if __name__ == "__main__":
    main()
