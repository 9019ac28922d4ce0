"""Many distinct jitted programs in one process: memory mappings and RSS (issue 25).

Builds ``N`` distinct small programs (``sin(x) * c + c`` with a different literal ``c``
each: one C library each), checks every result against NumPy, and prints the line count
of ``/proc/self/maps`` and the RSS as it goes. ``keep`` holds every jitted function (so
their traces stay alive) and calls them all again at the end (evicted programs reload).
The bound on loaded programs is ``KILN_MAX_LOADED_PROGRAMS`` (default 256).

Usage: ``python benchmarks/bench_loaded_programs.py [N] [keep]`` (Linux; the first run
builds N libraries, ~0.25 s each; later runs find them in the disk cache).
"""
import gc
import sys
import time

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.config import config


def maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main(n: int, keep: bool) -> None:
    config.update("kiln_compile", "sync")
    x = np.arange(8, dtype=np.float32)
    kiln.jit(lambda x: x * 2.0 + 1.0)(x)
    m0, r0 = maps(), rss_mb()
    print(f"start: maps={m0} rss={r0:.1f} MB", flush=True)
    held, wrong, t0 = [], 0, time.time()
    for i in range(n):
        c = float(i) + 0.5
        f = kiln.jit(lambda x, c=c: jnp.sin(x) * c + c)
        expect = np.sin(x) * np.float32(c) + np.float32(c)
        wrong += not np.allclose(np.asarray(f(x)), expect, rtol=1e-6)
        if keep:
            held.append(f)
        if (i + 1) % max(1, n // 4) == 0:
            print(f"{i + 1}: maps={maps()} rss={rss_mb():.1f} MB ({time.time() - t0:.1f} s)",
                  flush=True)
    gc.collect()
    print(f"end: maps={maps()} (+{maps() - m0}) rss={rss_mb():.1f} MB "
          f"(+{rss_mb() - r0:.1f}) wrong={wrong}", flush=True)
    if keep:
        wrong, t0 = 0, time.time()
        for i, f in enumerate(held):
            c = float(i) + 0.5
            expect = np.sin(x) * np.float32(c) + np.float32(c)
            wrong += not np.allclose(np.asarray(f(x)), expect, rtol=1e-6)
        print(f"all again: maps={maps()} rss={rss_mb():.1f} MB wrong={wrong} "
              f"({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000,
         len(sys.argv) > 2 and sys.argv[2] == "keep")
