"""Every kiln program the benchmarks time builds to native code: no silent fallback.

A jitted program whose C does not build runs on the NumPy reference backend with only a
warning; in session 19 the LeNet gradient of ``benchmarks/bench_loops_conv.py`` did so for
a whole session, and the benchmark timed NumPy. This test imports the benchmark modules
(``BUILD_CHECKED`` of ``bench_compiler.py`` and ``bench_loops_conv.py``, the jitted loops
of ``bench_control_flow.py``), so a new row is covered as soon as it is added; builds each
program with the benchmark's own shapes and data (the program's structure depends on
them) and checks that

- the build-failure counter the benchmarks read (``kiln.compiler.build.build.stats()
  ["failures"]``) did not move,
- every jitted program the workload created (at least one, except in the ``eager_*``
  rows, which time un-jitted calls) is compiled (cache state ``ready``, not
  ``reference`` or ``failed``: a missing or broken compiler leaves no failure count),
- the output agrees with the reference backend's (the benchmarks' loose tolerance; bits
  for the PRNG row), or, where the reference backend would take seconds (``SLOW_ON_REF``),
  is finite.
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys
import warnings

import numpy as np
import pytest

import kiln
from kiln.backends import cpu
from kiln.compiler.build import build
from kiln.config import config_context

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def _module(name):
    """A benchmark module, imported by path (once; ``bench_loops_conv`` imports
    ``bench_compiler`` by name and finds this one)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


bc = _module("bench_compiler")
lc = _module("bench_loops_conv")
cf = _module("bench_control_flow")


def _control_flow_workloads():
    """``bench_control_flow.running``'s programs: ``jit`` of each loop at ``N_BIG`` steps,
    called on a NumPy f32[4] as the benchmark does."""
    out = []
    for kind in cf.programs(kiln.lax, kiln.numpy):
        def build_(L, d, kind=kind):
            f = L.mod.jit(cf.programs(L.mod.lax, L.jnp)[kind](cf.N_BIG))
            x = np.ones(4, np.float32)
            return lambda: L.block(f(x))
        out.append(bc.Workload(kind, f"{kind} of {cf.N_BIG} steps", None, build_))
    return out


CASES = ([pytest.param(w, id=f"bench_compiler:{w.name}") for w in bc.BUILD_CHECKED]
         + [pytest.param(w, id=f"bench_loops_conv:{w.name}") for w in lc.BUILD_CHECKED]
         + [pytest.param(w, id=f"bench_control_flow:{w.name}")
            for w in _control_flow_workloads()])

# Programs the reference backend runs for seconds (a Python step per loop iteration):
# their outputs are checked for finiteness only.
SLOW_ON_REF = {"trips1000000"}


@pytest.fixture(scope="module")
def data():
    """The benchmarks' inputs (NumPy, made once per module as a benchmark run does)."""
    return bc.Data()


def _leaves(L, tree):
    return [np.asarray(a) for a in L.leaves(tree)]


def test_cases_cover_every_benchmark_row():
    names = {p.id for p in CASES}
    for mod, tag in ((bc, "bench_compiler"), (lc, "bench_loops_conv")):
        for w in mod.WORKLOADS:
            assert f"{tag}:{w.name}" in names
    assert {"bench_compiler:dot", "bench_loops_conv:lenet", "bench_control_flow:scan",
            "bench_control_flow:fori_loop"} <= names
    assert {f"bench_loops_conv:{n}" for n in SLOW_ON_REF} <= names   # (not stale)


@pytest.mark.parametrize("w", CASES)
def test_workload_builds_natively(w, data, request):
    label = request.node.callspec.id
    L = bc.kiln_lib()
    old = list(cpu._cache.values())     # held, so their ids stay theirs
    seen = {id(e) for e in old}
    failures = build.stats()["failures"]
    with warnings.catch_warnings(record=True) as caught:   # (reported below, by name)
        warnings.simplefilter("always")
        fn = w.build(L, data)
        fn()                            # first call: trace + build (+ run)
        bc.wait_for_kiln_compiles()     # (builds in the background under KILN_COMPILE=async)
        out = fn()
    said = "".join(f"\n  warning: {str(c.message).splitlines()[0]}" for c in caught)
    failed = build.stats()["failures"] - failures
    assert failed == 0, (f"{label}: {failed} C build(s) failed; the benchmark would time "
                         f"the NumPy reference backend{said}")
    new = [e for e in list(cpu._cache.values()) if id(e) not in seen]
    not_native = [(e.state, e.error or "; ".join(cpu._disabled_reason)) for e in new
                  if e.exe is None]
    assert not not_native, (f"{label}: jitted program(s) not compiled, they run on the "
                            f"reference backend: {not_native}{said}")
    if not w.name.startswith("eager"):     # eager rows (eager_add) jit nothing
        assert new, f"{label}: the workload created no jitted program"

    if w.name in SLOW_ON_REF:
        got = _leaves(L, out)
        assert got and all(np.all(np.isfinite(g)) for g in got), f"{label}: {got}"
        return
    with config_context(kiln_backend="reference"):
        ref = w.build(L, data)()
    check = bc.compare(L, out, L, ref, exact=w.exact)
    assert check.startswith("✓"), f"{label}: native output vs reference backend: {check}"
