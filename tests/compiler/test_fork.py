"""Native code in children made by ``fork`` (multiprocessing's fork start method).

A child forked after a parallel kernel ran must not hang in its first native call
(libgomp's worker pool does not survive fork), and a child forked while a build is
pending must get its program (its own build pool; ``wait_for_compiles`` returns).
Each child runs under a timeout, so a regression fails instead of hanging.
"""
import multiprocessing
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu

config_context = sys.modules["kiln.config"].config_context

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or "fork" not in multiprocessing.get_all_start_methods(),
    reason="needs the fork start method")

TIMEOUT = 60
N = 1 << 20     # large enough for the kernels' parallel loops


def _in_child(target, *args):
    """Run ``target(*args)`` in a forked child; its return value, or fail on a hang."""
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)

    def main():
        try:
            child_end.send(("ok", target(*args)))
        except BaseException as e:      # noqa: BLE001 - reported to the parent
            child_end.send(("error", f"{type(e).__name__}: {e}"))

    p = ctx.Process(target=main)
    p.start()
    try:
        if not parent_end.poll(TIMEOUT):
            pytest.fail(f"the forked child did not answer within {TIMEOUT} s (hang)")
        status, value = parent_end.recv()
    finally:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    assert status == "ok", value
    return value


def _reduce(x):
    return jnp.sum(jnp.sin(x) * 2.0 + x)


def _elementwise(x):
    return jnp.exp(-x) * jnp.cos(x) + 1.0


def test_child_forked_after_parallel_kernel_runs_native_code():
    f = kiln.jit(_reduce)
    g = kiln.jit(_elementwise)
    x = np.linspace(0.0, 1.0, N, dtype=np.float32)
    f(x).block_until_ready()        # the OpenMP pool of this thread now exists
    g(x).block_until_ready()

    def child():
        y = x + np.float32(1.0)
        out = [float(f(y)), np.asarray(g(y))]
        # a thread the child starts runs kernels too (its own OpenMP pool)
        res = []
        t = threading.Thread(target=lambda: res.append(np.asarray(g(x))))
        t.start()
        t.join(TIMEOUT)
        out.append(res[0] if res else None)
        out.append(cpu.ready_executable(f.lower(x).jaxpr) is not None)
        return out

    total, ey, ex, native = _in_child(child)
    y = (x + np.float32(1.0)).astype(np.float64)
    np.testing.assert_allclose(total, np.sum(np.sin(y) * 2.0 + y), rtol=1e-5)
    np.testing.assert_allclose(ey, np.exp(-y) * np.cos(y) + 1.0, rtol=2e-6, atol=1e-6)
    assert ex is not None, "a thread started in the child hung"
    xd = x.astype(np.float64)
    np.testing.assert_allclose(ex, np.exp(-xd) * np.cos(xd) + 1.0, rtol=2e-6, atol=1e-6)
    assert native
    # the parent still runs in parallel and agrees
    np.testing.assert_allclose(np.asarray(g(x)), ex, rtol=1e-6)


def test_child_forked_while_a_build_is_pending_gets_its_program(monkeypatch):
    release = threading.Event()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-blocked-build")
    pool.submit(release.wait, TIMEOUT)      # the build below stays queued behind this
    monkeypatch.setattr(cpu, "_pool", pool)
    c = 1234.5
    f = kiln.jit(lambda x: jnp.tanh(x) * c - x)
    x = np.linspace(-2.0, 2.0, 4096, dtype=np.float32)
    expect = np.tanh(x.astype(np.float64)) * np.float32(c) - x
    try:
        with config_context(kiln_compile="async"):
            np.testing.assert_allclose(np.asarray(f(x)), expect, rtol=1e-5, atol=1e-3)
            closed = f.lower(x).jaxpr
            assert cpu._cache[closed].state == "pending"

            def child():
                cpu.wait_for_compiles()         # must not wait for the parent's build
                first = np.asarray(f(x))        # starts the build again, on the child's pool
                cpu.wait_for_compiles()
                ready = cpu.ready_executable(closed) is not None
                return first, np.asarray(f(x)), ready, cpu._pool is not pool

            first, second, ready, fresh_pool = _in_child(child)
    finally:
        release.set()
        pool.shutdown(wait=True)
    np.testing.assert_allclose(first, expect, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(second, expect, rtol=1e-5, atol=1e-3)
    assert ready, "the child never got its compiled program"
    assert fresh_pool
    cpu.wait_for_compiles()                 # the parent's own build finishes as before
    assert cpu.ready_executable(closed) is not None
    np.testing.assert_allclose(np.asarray(f(x)), expect, rtol=1e-5, atol=1e-3)


def test_child_forked_after_threaded_random_bits_draws_them():
    key = kiln.random.key(7)
    bits = np.asarray(kiln.random.bits(key, (1 << 20,)))    # threefry's thread pool ran

    def child():
        return np.asarray(kiln.random.bits(kiln.random.key(7), (1 << 20,)))

    np.testing.assert_array_equal(_in_child(child), bits)


def test_child_forked_after_pmap_runs_pmap():
    n = kiln.local_device_count()
    f = kiln.pmap(lambda v: jnp.sin(v) * 2.0 + kiln.lax.psum(v, "i"), axis_name="i")
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    f(x).block_until_ready()            # the device threads now exist

    def child():
        return np.asarray(f(x + np.float32(1.0)))

    y = (x + np.float32(1.0)).astype(np.float64)
    np.testing.assert_allclose(_in_child(child), np.sin(y) * 2.0 + y.sum(0), rtol=1e-5)


def test_child_forked_while_another_thread_builds_builds_that_program_too():
    # A thread holding a build's key lock (a background build: the lock is held for the
    # whole cc run) at the fork: the child's own build of the same library must not wait
    # for a thread that does not exist in it.
    from kiln.compiler.build import build
    src = "double kiln_fork_key_lock(double x) { return 2.0 * x + 0.25; }\n"
    key = build._key(src, build.default_flags(), (), ())
    holding, release = threading.Event(), threading.Event()

    def hold():
        with build._key_lock(key):
            holding.set()
            release.wait(TIMEOUT)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert holding.wait(TIMEOUT)

        def child():
            import ctypes
            lib = build.load_library(src)
            fn = lib.kiln_fork_key_lock
            fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
            return fn(1.5)

        assert _in_child(child) == 3.25
    finally:
        release.set()
        t.join()
