"""Benchmark: how long ``import kiln, kiln.numpy`` takes, beside ``import jax, jax.numpy``
and ``import numpy`` (issue 14; target: kiln <= 150 ms).

Each statement runs in a fresh interpreter, the statements interleaved, ``--repeat`` times;
the child times only the statement (``time.perf_counter`` around it, not the interpreter's
start-up). Prints the median and the fastest run, the ratio kiln / JAX, where kiln's import
time goes by top-level package, and the ten modules with the largest self time under
``python -X importtime``. Run from the repository root:

    python benchmarks/bench_import.py [--repeat R] [--cold-bytecode]

Bytecode: an installed package has its ``.pyc`` files written at install time. A checkout
run with ``PYTHONDONTWRITEBYTECODE=1`` (as on the shared test machines) has stale or no
``.pyc`` files, and every import compiles the sources again (that added ~90 ms to kiln's
time on those machines). So by default the children write and read their bytecode under a
private ``PYTHONPYCACHEPREFIX`` in the temporary directory, after one warm-up run of each
statement; ``--cold-bytecode`` keeps the environment as it is instead.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_MS = 150.0
MARK = "--- bench_import: statement starts ---"


def _child_env(cold_bytecode):
    env = dict(os.environ)
    if not cold_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "kiln_bench_import_pyc")
    return env


def _available(module, env):
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env).returncode == 0


def _version(module, env):
    code = f"import importlib.metadata as m; print(m.version({module!r}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def time_import(stmt, env):
    """Seconds that ``stmt`` takes in a fresh interpreter."""
    code = f"import time\nt = time.perf_counter()\n{stmt}\nprint(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def importtime(stmt, env):
    """``-X importtime`` of ``stmt`` alone (not the interpreter's start-up imports):
    a list of ``(module, self_us, cumulative_us, depth)``."""
    code = f"import sys\nsys.stderr.write({MARK!r} + '\\n')\n{stmt}"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    lines = out.stderr.splitlines()
    rows = []
    for line in lines[lines.index(MARK) + 1:]:
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_us, cum_us, name = line[len("import time:"):].split("|")
        if not self_us.strip().isdigit():      # the header line
            continue
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((name.strip(), int(self_us), int(cum_us), depth))
    return rows


def _stdlib_names():
    return set(getattr(sys, "stdlib_module_names", ()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--cold-bytecode", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE and the checkout's .pyc files as they are")
    args = ap.parse_args()
    env = _child_env(args.cold_bytecode)

    cases = [("numpy", "import numpy"), ("ml_dtypes", "import ml_dtypes"),
             ("kiln", "import kiln, kiln.numpy"), ("jax", "import jax, jax.numpy")]
    cases = [(name, stmt) for name, stmt in cases if _available(name, env)]
    if not args.cold_bytecode:
        for _, stmt in cases:          # warm-up: writes the bytecode cache
            time_import(stmt, env)
    times = defaultdict(list)
    for _ in range(args.repeat):       # interleaved, so that machine load hits all alike
        for name, stmt in cases:
            times[name].append(time_import(stmt, env) * 1e3)
    med = {name: statistics.median(ts) for name, ts in times.items()}

    versions = ", ".join(f"{m} {_version(m, env)}" for m in ("numpy", "ml_dtypes", "scipy", "jax")
                         if _available(m, env))
    print(f"Python {sys.version.split()[0]}, {versions}; {os.cpu_count()} CPUs; "
          f"{args.repeat} fresh interpreters per statement, interleaved; bytecode "
          f"{'as found' if args.cold_bytecode else 'cached (warm)'}.\n")
    print("| statement | median | fastest | ÷ `import numpy` |")
    print("| --- | ---: | ---: | ---: |")
    for name, stmt in cases:
        ratio = f"{med[name] / med['numpy']:.2f}" if "numpy" in med else "—"
        print(f"| `{stmt}` | {med[name]:.1f} ms | {min(times[name]):.1f} ms | {ratio} |")
    if "kiln" in med and "jax" in med:
        print(f"\nkiln ÷ JAX (medians): {med['kiln'] / med['jax']:.2f}")
    if "kiln" in med and "ml_dtypes" in med:
        # kiln imports ml_dtypes (which imports NumPy) first; the rest is kiln's own.
        print(f"kiln beyond `import ml_dtypes` (medians): {med['kiln'] - med['ml_dtypes']:.1f} ms")
    if "kiln" in med:
        met = "met" if med["kiln"] <= TARGET_MS else "not met"
        print(f"target `import kiln, kiln.numpy` <= {TARGET_MS:.0f} ms: {met} "
              f"({med['kiln']:.1f} ms)")
    if "kiln" not in med:
        return

    # Where kiln's import time goes: self times summed by top-level package (median of
    # three -X importtime runs), and the ten largest modules.
    runs = [importtime("import kiln, kiln.numpy", env) for _ in range(3)]
    stdlib = _stdlib_names()
    by_pkg = defaultdict(list)
    by_mod_self = defaultdict(list)
    by_mod_cum = {}
    for rows in runs:
        totals = defaultdict(int)
        for name, self_us, cum_us, _ in rows:
            top = name.split(".")[0]
            group = top if top in ("kiln", "numpy", "ml_dtypes", "scipy") else \
                ("standard library" if top in stdlib or top.startswith("_") else "other")
            totals[group] += self_us
            by_mod_self[name].append(self_us)
            by_mod_cum.setdefault(name, []).append(cum_us)
        for group, us in totals.items():
            by_pkg[group].append(us)
    scipy_mods = sorted(n for n in by_mod_self if n == "scipy" or n.startswith("scipy."))
    print("\n`import kiln, kiln.numpy` under `-X importtime` (self time by top-level package, "
          "median of 3 runs; importtime's own overhead included):\n")
    print("| package | self time |")
    print("| --- | ---: |")
    for group, us in sorted(by_pkg.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"| {group} | {statistics.median(us) / 1e3:.1f} ms |")
    print(f"\nSciPy modules imported: {len(scipy_mods)}"
          + (f" ({', '.join(scipy_mods[:5])}, ...)" if scipy_mods else ""))
    print("\nTop 10 modules by self time:\n")
    print("| module | self | cumulative |")
    print("| --- | ---: | ---: |")
    top = sorted(by_mod_self, key=lambda n: -statistics.median(by_mod_self[n]))[:10]
    for name in top:
        print(f"| `{name}` | {statistics.median(by_mod_self[name]) / 1e3:.1f} ms | "
              f"{statistics.median(by_mod_cum[name]) / 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
