"""JAX's own example programs, unmodified, on JAX and on kiln (issue 27), side by side.

Runs ``examples/mnist_vae.py``, ``examples/mnist_classifier_fromscratch.py`` and
``examples/mnist_classifier.py`` from JAX's repository at the tag of the installed JAX
(``jax-v0.10.2``), each in its own process: once on the installed JAX and once on kiln
through ``python -m kiln.as_jax -m examples.NAME``. Prints the per-epoch times each
program prints, the steady-state epoch time (median of the epochs after the first, which
holds tracing and compiling) and kiln ÷ JAX. Targets: ``mnist_vae`` ≤ 1×,
``mnist_classifier*`` ≤ 0.8×.

The programs are read from a git mirror of JAX (``--jax-git``, default
``/work/.mirror/jax-ml+jax/repo``, or ``$JAX_GIT_DIR``) with ``git show TAG:examples/...``
into a temporary directory at run time; their text is never stored in this repository.

The harness (what the temporary directory holds besides JAX's files):

* ``examples/datasets.py``: a stand-in for JAX's ``examples/datasets.py``, which downloads
  MNIST (no network here). Same functions (``mnist_raw``, ``mnist``), same shapes and
  dtypes (uint8 images 60000x28x28 / 10000x28x28 scaled to float32 [0, 1] and flattened,
  one-hot float32 labels), deterministic random data (NumPy seed 0). The training set has
  ``--train-size`` examples (default 12,800 so that a run takes minutes; 60000 is MNIST's
  size: epochs 4.7x longer, the ratio is what counts).
* ``matplotlib/`` (``pyplot.imsave``, ``pyplot.cm.gray``): ``mnist_vae`` saves a sample
  grid after each epoch with matplotlib, which is not installed; the stand-in checks the
  array is 2-D and writes nothing. The save happens after the program's timed region.

The "s/epoch" columns are what each program prints (the target's measure). JAX dispatches
asynchronously, so a classifier's printed epoch time can stop before its last steps ran
(they finish during the accuracy pass that follows); the "wall/epoch" columns are the
time between consecutive epoch lines (training, the evaluation the program does between
epochs, printing), the same work on both systems.

Each program runs until it has printed ``--epochs`` epoch times (then it is stopped), so
a run takes a few minutes. ``--repeats`` alternates JAX and kiln processes that many
times. Run from the repository root::

    python benchmarks/bench_programs.py [--quick] [--epochs N] [--repeats R]
        [--programs mnist_vae,mnist_classifier_fromscratch,mnist_classifier]
        [--train-size N] [--kiln-only] [--jax-only] [--profile DIR] [--trace DIR]

``--trace DIR`` runs kiln's side under ``kiln.profiler`` and writes the profiler's
summary (kernels, steps of native loop bodies, host islands, builds) to ``DIR/NAME.txt``.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "jax-v0.10.2"
DEFAULT_GIT = "/work/.mirror/jax-ml+jax/repo"

# What each program prints per epoch, and the target kiln ÷ JAX.
PROGRAMS = {
    "mnist_vae": (re.compile(r"^\s*(\d+)\s+\S+\s+\(([\d.]+) sec\)"), 1.0),
    "mnist_classifier_fromscratch": (re.compile(r"^Epoch (\d+) in ([\d.]+) sec"), 0.8),
    "mnist_classifier": (re.compile(r"^Epoch (\d+) in ([\d.]+) sec"), 0.8),
}

DATASETS = r'''"""Stand-in for JAX's examples/datasets.py (benchmark harness): MNIST's shapes and
dtypes with deterministic random data; no download."""
import os

import numpy as np


def _partial_flatten(x):
    return np.reshape(x, (x.shape[0], -1))


def _one_hot(x, k, dtype=np.float32):
    return np.array(x[:, None] == np.arange(k), dtype)


def mnist_raw():
    n_train = int(os.environ.get("BENCH_MNIST_TRAIN", "60000"))
    rng = np.random.RandomState(0)
    train_images = rng.randint(0, 256, size=(n_train, 28, 28)).astype(np.uint8)
    train_labels = rng.randint(0, 10, size=n_train).astype(np.uint8)
    test_images = rng.randint(0, 256, size=(10000, 28, 28)).astype(np.uint8)
    test_labels = rng.randint(0, 10, size=10000).astype(np.uint8)
    return train_images, train_labels, test_images, test_labels


def mnist(permute_train=False):
    train_images, train_labels, test_images, test_labels = mnist_raw()
    train_images = _partial_flatten(train_images) / np.float32(255.)
    test_images = _partial_flatten(test_images) / np.float32(255.)
    train_labels = _one_hot(train_labels, 10)
    test_labels = _one_hot(test_labels, 10)
    if permute_train:
        perm = np.random.RandomState(0).permutation(train_images.shape[0])
        train_images = train_images[perm]
        train_labels = train_labels[perm]
    return train_images, train_labels, test_images, test_labels
'''

PYPLOT = r'''"""Stand-in for matplotlib.pyplot (benchmark harness): imsave checks, writes nothing."""
import types

import numpy as np

cm = types.SimpleNamespace(gray="gray")


def imsave(fname, arr, **kwargs):
    if np.asarray(arr).ndim != 2:
        raise ValueError("imsave expects a 2-D array")
'''


def extract(git_dir: str, names: list[str]) -> str:
    """Write JAX's example programs and the harness modules into a fresh directory."""
    tmp = tempfile.mkdtemp(prefix="kiln_bench_programs_")
    os.makedirs(os.path.join(tmp, "examples"))
    os.makedirs(os.path.join(tmp, "matplotlib"))
    for name in ["__init__"] + names:
        text = subprocess.run(
            ["git", f"--git-dir={git_dir}", "show", f"{TAG}:examples/{name}.py"],
            check=True, capture_output=True).stdout
        with open(os.path.join(tmp, "examples", f"{name}.py"), "wb") as fh:
            fh.write(text)
    with open(os.path.join(tmp, "examples", "datasets.py"), "w") as fh:
        fh.write(DATASETS)
    with open(os.path.join(tmp, "matplotlib", "__init__.py"), "w") as fh:
        fh.write('"""Stand-in (benchmark harness)."""\n')
    with open(os.path.join(tmp, "matplotlib", "pyplot.py"), "w") as fh:
        fh.write(PYPLOT)
    return tmp


def run_program(tmp: str, name: str, system: str, epochs: int, train_size: int,
                profile: str | None = None,
                trace: str | None = None) -> tuple[list[float], list[float]]:
    """Run one program in a fresh process until it printed ``epochs`` epoch times.

    Returns the epoch times it printed and the wall time between its epoch lines (the
    same work plus what the program does between epochs, e.g. an accuracy pass)."""
    pattern = PROGRAMS[name][0]
    if system == "jax":
        cmd = [sys.executable, "-u", "-m", f"examples.{name}"]
        pythonpath = tmp
    else:
        cmd = [sys.executable, "-u"]
        if profile:
            cmd += ["-m", "cProfile", "-o", profile]
            # cProfile runs a script, not a module: a two-line launcher.
            launcher = os.path.join(tmp, f"run_{name}.py")
            with open(launcher, "w") as fh:
                fh.write("import runpy, kiln.as_jax\n"
                         f"kiln.as_jax.install()\n"
                         f"runpy.run_module('examples.{name}', run_name='__main__')\n")
            cmd += [launcher]
        elif trace:
            # kiln.profiler over the whole run; on SIGINT the trace is stopped and its
            # summary written to TRACE/NAME.txt (kernels, loop-body steps, islands).
            launcher = os.path.join(tmp, f"trace_{name}.py")
            with open(launcher, "w") as fh:
                fh.write(TRACE_LAUNCHER.format(logdir=os.path.join(trace, name),
                                               out=os.path.join(trace, f"{name}.txt"),
                                               name=name))
            cmd += [launcher]
        else:
            cmd += ["-m", "kiln.as_jax", "-m", f"examples.{name}"]
        pythonpath = os.pathsep.join([ROOT, tmp])
    if os.environ.get("PYTHONPATH"):      # keep the caller's (site directories elsewhere)
        pythonpath = os.pathsep.join([pythonpath, os.environ["PYTHONPATH"]])
    env = dict(os.environ, PYTHONPATH=pythonpath, TMPDIR=tmp,
               BENCH_MNIST_TRAIN=str(train_size))
    times: list[float] = []
    stamps: list[float] = []
    with subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = pattern.match(line)
            if m:
                times.append(float(m.group(2)))
                stamps.append(time.perf_counter())
                print(f"    {system:4s} {name} epoch {m.group(1)}: {m.group(2)} s",
                      flush=True)
                if len(times) >= epochs:
                    break
        if len(times) >= epochs:
            if profile or trace:
                # Let cProfile write its file: interrupt, do not kill.
                proc.send_signal(2)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                proc.kill()
            proc.wait()
        else:
            err = proc.stderr.read() if proc.stderr else ""
            proc.wait()
            raise RuntimeError(f"{system} {name} ended after {len(times)} epochs "
                               f"(rc {proc.returncode}):\n{err[-4000:]}")
    return times, [b - a for a, b in zip(stamps, stamps[1:])]


TRACE_LAUNCHER = """import os, runpy, signal
import kiln.as_jax, kiln.profiler
kiln.as_jax.install()
kiln.profiler.start_trace({logdir!r})


def _stop(*_):
    kiln.profiler.stop_trace()
    with open({out!r}, "w") as fh:
        fh.write(str(kiln.profiler.summary({logdir!r})))
    os._exit(0)


signal.signal(signal.SIGINT, _stop)
runpy.run_module("examples.{name}", run_name="__main__")
"""


def steady(times: list[float]) -> float:
    """The steady-state epoch time: the median of the epochs after the first."""
    return statistics.median(times[1:]) if len(times) > 1 else times[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--epochs", type=int, default=None,
                    help="epochs per run (default 6 for mnist_vae, 4 for the classifiers)")
    ap.add_argument("--quick", action="store_true",
                    help="3 epochs per run (the first compiles: 2 steady epochs)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--train-size", type=int, default=12800,
                    help="training examples (MNIST has 60000; fewer = shorter epochs)")
    ap.add_argument("--jax-git", default=os.environ.get("JAX_GIT_DIR", DEFAULT_GIT))
    ap.add_argument("--kiln-only", action="store_true")
    ap.add_argument("--jax-only", action="store_true")
    ap.add_argument("--profile", default=None,
                    help="write a cProfile of each kiln run to DIR/NAME.prof")
    ap.add_argument("--trace", default=None,
                    help="run kiln under kiln.profiler; write its summary to DIR/NAME.txt")
    args = ap.parse_args()
    names = [n for n in args.programs.split(",") if n]
    for n in names:
        if n not in PROGRAMS:
            ap.error(f"unknown program {n!r}; choose from {', '.join(PROGRAMS)}")
    systems = ["jax", "kiln"]
    if args.kiln_only:
        systems = ["kiln"]
    if args.jax_only:
        systems = ["jax"]
    tmp = extract(args.jax_git, names)
    load = os.getloadavg()
    print(f"# {TAG} examples, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    results: dict[str, dict[str, list[float]]] = {}
    for name in names:
        epochs = 3 if args.quick else (args.epochs or (6 if name == "mnist_vae" else 4))
        for _ in range(args.repeats):
            for system in systems:
                prof = None
                if args.profile and system == "kiln":
                    os.makedirs(args.profile, exist_ok=True)
                    prof = os.path.join(os.path.abspath(args.profile), f"{name}.prof")
                trace = (os.path.abspath(args.trace)
                         if args.trace and system == "kiln" else None)
                if trace:
                    os.makedirs(trace, exist_ok=True)
                times, walls = run_program(tmp, name, system, epochs, args.train_size, prof,
                                           trace)
                results.setdefault(name, {}).setdefault(system, []).append(steady(times))
                if walls:
                    results[name].setdefault(system + "_wall", []).append(
                        statistics.median(walls[1:] or walls))
    print()
    print("| program | JAX s/epoch | kiln s/epoch | kiln ÷ JAX | target | "
          "JAX wall/epoch | kiln wall/epoch | wall ratio |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for name in names:
        r = results[name]
        j = statistics.median(r["jax"]) if "jax" in r else float("nan")
        k = statistics.median(r["kiln"]) if "kiln" in r else float("nan")
        target = PROGRAMS[name][1]
        ratio = k / j
        met = "✅" if ratio <= target else "❌"
        jw = statistics.median(r["jax_wall"]) if "jax_wall" in r else float("nan")
        kw = statistics.median(r["kiln_wall"]) if "kiln_wall" in r else float("nan")
        print(f"| {name} | {j:.3f} | {k:.3f} | {ratio:.3f} | ≤ {target} {met} | "
              f"{jw:.3f} | {kw:.3f} | {kw / jw:.3f} |")
    load = os.getloadavg()
    print(f"# load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
