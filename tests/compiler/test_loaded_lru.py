"""The bound on loaded programs: an LRU of compiled programs whose evicted libraries are
closed once nothing uses them (``KILN_MAX_LOADED_PROGRAMS``, ``kiln.compiler.build.loaded``).

Many distinct programs keep the process's memory mappings bounded, every result stays
right, and an evicted program runs again (reloaded from the disk cache)."""
import gc
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu
from kiln.compiler.build import loaded

LIMIT = 8
PROGRAMS = 40       # distinct C sources (built once per machine, then disk cache hits)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="counts /proc/self/maps")


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _program(i):
    c = 0.5 + i     # a literal of the program: one C source per i
    return kiln.jit(lambda x: x * c + 1.0), np.float32(c)


@pytest.fixture
def small_bound(monkeypatch):
    monkeypatch.setenv("KILN_MAX_LOADED_PROGRAMS", str(LIMIT))
    cpu.clear_cache()
    gc.collect()
    yield
    cpu.clear_cache()
    gc.collect()


def test_distinct_programs_keep_mappings_bounded(small_bound):
    x = np.arange(16, dtype=np.float32)
    fs = [_program(i) for i in range(PROGRAMS)]
    fs[0][0](x)
    start = _maps()
    closed_before = loaded.stats()["closed"]
    peak = start
    for f, c in fs:
        np.testing.assert_array_equal(np.asarray(f(x)), x * c + np.float32(1.0))
        peak = max(peak, _maps())
    # without the bound: 3-4 mappings per program (about 120-160 here)
    assert peak - start <= 4 * LIMIT + 16, (start, peak)
    assert loaded.stats()["closed"] - closed_before >= PROGRAMS - LIMIT - 1
    assert len(cpu._lru) <= LIMIT
    # evicted programs run again (loaded from the disk cache), still bounded; the fast
    # path of each jit function (kiln Arrays) holds entries, not executables
    xa = jnp.asarray(x)
    for f, c in fs:
        for _ in range(2):
            np.testing.assert_array_equal(np.asarray(f(xa)), x * c + np.float32(1.0))
        peak = max(peak, _maps())
    assert peak - start <= 4 * LIMIT + 16, (start, peak)
    assert len(cpu._lru) <= LIMIT


def test_an_executable_still_referenced_stays_loaded(small_bound):
    x = np.arange(5, dtype=np.float32)
    f0, c0 = _program(0)
    f0(x)
    exe = cpu.ready_executable(f0.lower(x).jaxpr)
    assert exe is not None
    for i in range(1, 2 * LIMIT + 2):       # evict program 0 from the LRU
        f, c = _program(i)
        f(x)
    entry = cpu._cache[f0.lower(x).jaxpr]
    assert entry.state == "evicted" and entry.exe is None
    # its library is not closed while the executable is referenced: it still runs
    np.testing.assert_array_equal(exe([x])[0], x * c0 + np.float32(1.0))
    del exe
    gc.collect()
    np.testing.assert_array_equal(np.asarray(f0(x)), x * c0 + np.float32(1.0))
    assert entry.state == "ready" and entry.exe is not None


def test_max_loaded_reads_the_environment(monkeypatch):
    monkeypatch.setenv("KILN_MAX_LOADED_PROGRAMS", "17")
    assert loaded.max_loaded() == 17
    monkeypatch.setenv("KILN_MAX_LOADED_PROGRAMS", "0")
    assert loaded.max_loaded() == 1
    monkeypatch.setenv("KILN_MAX_LOADED_PROGRAMS", "lots")
    assert loaded.max_loaded() == loaded.DEFAULT_MAX_LOADED
    monkeypatch.delenv("KILN_MAX_LOADED_PROGRAMS")
    assert loaded.max_loaded() == loaded.DEFAULT_MAX_LOADED
