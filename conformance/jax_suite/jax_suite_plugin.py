"""pytest plugin of the JAX-suite harness (``-p jax_suite_plugin``), used on both sides.

* ``JAX_SUITE_IDS=FILE``: run only the test ids listed in FILE (one per line); the others
  are deselected, so both sides run exactly the same tests.
* ``JAX_SUITE_TIMEOUT=SECONDS``: a test still running after that long fails with
  ``TimeoutError`` (SIGALRM in the main thread; pytest-timeout is not needed).
* ``JAX_SUITE_RESULTS=FILE``: one JSON line per test: id, outcome, exception class and the
  first line of its message (and one line per collection error).
* On kiln (``JAX_SUITE_SIDE=kiln``): JAX's dispatch/compilation counters in
  ``jax._src.test_util`` (``count_*``, ``assert_num_jit_and_pmap_compilations``,
  ``collect_lowered_jaxprs``) count events that JAX's internals emit and kiln's do not; on
  kiln they would read 0 and make the checks vacuous, so a test that uses one is skipped
  with that reason instead.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import unittest

import pytest

_COUNTERS = (
    "count_device_put", "count_device_put_fast_path_hit", "count_pjit_cpp_cache_miss",
    "count_jit_tracing_cache_miss", "count_aot_jit_cpp_cache_miss",
    "count_jit_and_pmap_lowerings", "count_jit_compilation_cache_miss",
    "count_compilation_after_persistent_cache_miss", "count_jax_array_shard_arg_calls",
    "count_primitive_compiles", "count_subjaxpr_to_hlo_conversion", "collect_lowered_jaxprs",
    "assert_num_jit_and_pmap_compilations", "count_internal_device_puts",
)
SKIP_PREFIX = "jax_suite: needs JAX's internal counter"


def _skipping_counter(name):
    def counter(*args, **kwargs):
        raise unittest.SkipTest(f"{SKIP_PREFIX} jtu.{name} (kiln's internals emit no such "
                                "events; a count of 0 would make the check vacuous)")
    counter.__name__ = name
    return counter


class _NoOpByOpCompileCache:
    """Stands for JAX's ``dispatch.xla_primitive_callable`` (the cache of op-by-op compiled
    primitives), which kiln does not have: kiln runs eager primitives without compiling.
    ``cache_info()`` reports no numbers (None), and the one check that compares them,
    ``_CompileAndCheck(check_cache_misses=True)``, is turned off on kiln (see below)."""

    def cache_info(self):
        import functools
        return functools._CacheInfo(None, None, None, None)

    def cache_clear(self):
        raise unittest.SkipTest(f"{SKIP_PREFIX} dispatch.xla_primitive_callable (kiln "
                                "compiles nothing op by op)")


def _patch_kiln_side():
    import jax._src.dispatch as dispatch
    import jax._src.test_util as jtu
    for name in _COUNTERS:
        if hasattr(jtu, name):
            setattr(jtu, name, _skipping_counter(name))
    if not hasattr(dispatch, "xla_primitive_callable"):
        dispatch.xla_primitive_callable = _NoOpByOpCompileCache()
    original = jtu.JaxTestCase._CompileAndCheck

    def _CompileAndCheck(self, fun, args_maker, *, check_cache_misses=True, **kwargs):
        # Every check but the op-by-op compile-cache one (no kiln counterpart).
        return original(self, fun, args_maker, check_cache_misses=False, **kwargs)
    jtu.JaxTestCase._CompileAndCheck = _CompileAndCheck


def pytest_configure(config):
    path = os.environ.get("JAX_SUITE_RESULTS")
    config._jax_suite_out = open(path, "w") if path else None


def pytest_unconfigure(config):
    out = getattr(config, "_jax_suite_out", None)
    if out is not None:
        out.close()


def pytest_collection_modifyitems(session, config, items):
    # After the test modules are imported (so ``jax._src.test_util`` is imported under
    # pytest's output capture, as on JAX: its ``capture_stdout`` binds ``sys.stdout``).
    if os.environ.get("JAX_SUITE_SIDE") == "kiln" and "jax._src.test_util" in sys.modules:
        _patch_kiln_side()
    path = os.environ.get("JAX_SUITE_IDS")
    if not path:
        return
    with open(path) as f:
        wanted = {line.strip() for line in f if line.strip()}
    keep = [it for it in items if it.nodeid in wanted]
    drop = [it for it in items if it.nodeid not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def _write(config, record):
    out = getattr(config, "_jax_suite_out", None)
    if out is not None:
        out.write(json.dumps(record) + "\n")
        out.flush()


def pytest_collectreport(report):
    if report.failed:
        text = str(report.longrepr)
        lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
        first = lines[-1][1:].strip() if lines else text.splitlines()[-1] if text else ""
        cfg = pytest_collectreport.config
        if cfg is not None:
            _write(cfg, {"collect_error": report.nodeid, "message": first[:300]})


pytest_collectreport.config = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    pytest_collectreport.config = session.config


class _Timeout(BaseException):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    seconds = int(float(os.environ.get("JAX_SUITE_TIMEOUT", "0")))
    if seconds <= 0:
        yield
        return

    def alarm(signum, frame):
        raise TimeoutError(f"jax_suite: test exceeded {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        rec = {"id": item.nodeid, "outcome": rep.outcome}
        if rep.failed and call.excinfo is not None:
            exc = call.excinfo.value
            rec["exc"] = type(exc).__name__
            msg = str(exc).strip()
            rec["message"] = (msg.splitlines()[0] if msg else "")[:300]
        elif rep.skipped:
            lr = rep.longrepr
            rec["message"] = (lr[2] if isinstance(lr, tuple) else str(lr))[:300]
        _write(item.config, rec)
