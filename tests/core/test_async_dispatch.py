"""Asynchronous dispatch of cached ``jit`` calls (``kiln._async_dispatch``): outputs are
pending until read, chains of calls queue behind each other, values and errors are the
synchronous ones, and the flag ``jax_cpu_enable_async_dispatch`` turns it off."""
import threading

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _async_dispatch
from kiln._async_dispatch import Pending
from kiln.config import config_context


def _step(p, x):
    return [(w - 0.01 * (x @ w).sum(), b * 0.5) for w, b in p]


def _params():
    rng = np.random.default_rng(0)
    return [(jnp.asarray(rng.standard_normal((160, 160)).astype(np.float32)),
             jnp.ones(160)) for _ in range(2)]


def _run(n, **cfg):
    with config_context(**cfg) if cfg else _nullcontext():
        f = kiln.jit(_step)
        x = jnp.asarray(np.linspace(-1, 1, 4 * 160, dtype=np.float32).reshape(4, 160))
        p = _params()
        for _ in range(n):
            p = f(p, x)
        return p


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_cached_calls_return_pending_outputs_with_metadata():
    p = _run(6)
    w = p[0][0]
    assert type(w._v) is Pending or w.is_ready()
    # metadata without waiting
    assert w.shape == (160, 160) and w.dtype == np.float32 and w.ndim == 2 and w.size == 25600
    assert w.aval.shape == (160, 160)
    w.block_until_ready()
    assert w.is_ready() and type(w._v) is np.ndarray


def test_chained_async_calls_equal_synchronous_bits():
    fast = kiln.tree_util.tree_map(np.asarray, _run(12))
    slow = kiln.tree_util.tree_map(np.asarray, _run(12, jax_cpu_enable_async_dispatch=False))
    for a, b in zip(kiln.tree_util.tree_leaves(fast), kiln.tree_util.tree_leaves(slow)):
        np.testing.assert_array_equal(a, b)


def test_flag_off_gives_ready_outputs():
    with config_context(jax_cpu_enable_async_dispatch=False):
        p = _run(4)
    assert all(type(a._v) is np.ndarray for a in kiln.tree_util.tree_leaves(p))


def test_positional_fast_path_and_eager_use_of_pending_values():
    f = kiln.jit(lambda a, b: a * 2.0 + b)
    a = jnp.arange(1 << 16, dtype=jnp.float32)
    b = jnp.ones(1 << 16)
    for _ in range(5):
        a = f(a, b)
    assert type(a._v) is Pending or a.is_ready()
    # an eager op and a NumPy conversion wait for the value
    np.testing.assert_array_equal(np.asarray(a + 0.0), np.arange(1 << 16) * 32.0 + 31)
    assert float(a[1]) == 63.0


def test_small_programs_run_on_the_calling_thread():
    f = kiln.jit(lambda a: a + 1.0)
    x = jnp.ones(4)
    for _ in range(4):
        y = f(x)
    assert type(y._v) is np.ndarray


def test_no_memory_for_a_queued_output_is_raised_where_it_is_read():
    """The dispatch thread allocates a queued program's outputs when it runs it: no
    memory for one is a MemoryError where that output, or an output computed from it,
    is read; the queue goes on."""
    f = kiln.jit(lambda a: a + 1.0)
    x = jnp.ones(1 << 16)
    for _ in range(3):
        f(x).block_until_ready()
    from kiln.backends import cpu
    (exe,) = [e.exe for e in cpu._cache.values() if e.exe is not None
              and e.exe.prog.inputs[0].shape == (1 << 16,)]
    saved = exe._out_nbytes
    exe._out_nbytes = [1 << 62 for _ in saved]      # more memory than there is
    try:
        y = f(x)                    # returns: the allocation happens on the thread
        assert type(y._v) is Pending
    finally:
        exe._out_nbytes = saved
    z = f(y)                        # queued behind it, on its missing output
    with pytest.raises(MemoryError, match="queued program"):
        np.asarray(y)
    with pytest.raises(MemoryError):
        z.block_until_ready()
    np.testing.assert_array_equal(f(x), np.full(1 << 16, 2.0))   # the queue goes on
    deleted = jnp.ones(1 << 16)
    deleted.delete()
    with pytest.raises(RuntimeError, match="deleted"):   # found by the call itself
        f(deleted)


def test_queued_program_runs_while_the_main_thread_holds_the_gil():
    """The dispatch thread never takes the GIL: a program queued before a long stretch
    of pure Python finishes during it, even with a switch interval far longer than the
    stretch (a Python dispatch thread would wait for it to wake up and after each
    native call)."""
    import sys
    import time
    f = kiln.jit(lambda a: jnp.tanh(a @ a) * 0.5)
    x = jnp.ones((256, 256)) * 0.01
    for _ in range(3):
        f(x).block_until_ready()
    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        y = f(x)
        assert type(y._v) is Pending
        t0 = time.perf_counter()
        while not y.is_ready() and time.perf_counter() - t0 < 5.0:
            pass                            # pure Python: the GIL is never released
        spun = time.perf_counter() - t0
    finally:
        sys.setswitchinterval(old)
    assert spun < 5.0
    with config_context(jax_cpu_enable_async_dispatch=False):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(f(x)))


def test_calls_from_other_threads_run_synchronously():
    f = kiln.jit(lambda a: a * 3.0)
    x = jnp.ones(1 << 16)
    for _ in range(3):
        f(x)
    seen = []
    t = threading.Thread(target=lambda: seen.append(type(f(x)._v)))
    t.start()
    t.join()
    assert seen == [np.ndarray]


def test_effects_barrier_and_drain_wait_for_queued_programs():
    f = kiln.jit(lambda a: a @ a)
    x = jnp.ones((256, 256))
    ys = [f(x) for _ in range(8)]
    kiln.effects_barrier()
    assert all(y.is_ready() for y in ys)
    _async_dispatch.drain()


def test_programs_with_callbacks_stay_synchronous():
    seen = []
    f = kiln.jit(lambda a: kiln.debug.callback(lambda v: seen.append(float(v[0])), a) or a + 1)
    x = jnp.ones(1 << 16)
    for _ in range(4):
        y = f(x)
        assert type(y._v) is np.ndarray
    assert seen == [1.0] * 4


def test_deleted_argument_still_raises_on_the_fast_path():
    f = kiln.jit(lambda a: a + 1)
    x = jnp.ones(1 << 16)
    for _ in range(3):
        f(x)
    x.delete()
    with pytest.raises(RuntimeError, match="deleted"):
        f(x).block_until_ready()


def test_numpy_and_python_leaves_on_the_pytree_fast_path():
    """A NumPy batch and a Python step counter key the fast path (as tracing types them)
    and are copied at the call: changing the batch after the call does not change the
    (possibly still pending) result."""
    traces = []

    def step(p, batch, i):
        traces.append(1)
        return {"w": p["w"] + batch.sum(axis=0) * i}
    f = kiln.jit(step)
    p = {"w": jnp.zeros(1 << 16)}
    batch = np.ones((2, 1 << 16))            # float64: canonicalized to float32
    for i in range(4):
        p = f(p, batch, i)
    assert len(traces) == 1                  # one trace: ints and the batch keyed alike
    batch[:] = 1.0
    q = f(p, batch, 1)
    batch[:] = -5.0                          # after the call: must not leak in
    np.testing.assert_array_equal(np.asarray(q["w"]), np.full(1 << 16, 14.0, np.float32))
    assert q["w"].dtype == np.float32
    assert len(traces) == 1
    with config_context(jax_transfer_guard="disallow"):   # the guard still sees the batch
        with pytest.raises(Exception, match="[Dd]isallowed"):
            f(p, batch, 1)


def test_queued_output_is_donatable_once_no_queued_program_reads_it():
    """A queued program's output (memory the dispatch thread allocated) owns its memory
    once read, as an np.empty array does: a later donating call writes into it in place;
    a program queued to read it still reads the values it had."""
    from kiln import donation
    f = kiln.jit(lambda a: a * 2.0)
    h = kiln.jit(lambda a: jnp.tanh(a.reshape(256, 256) @ a.reshape(256, 256)).ravel())
    g = kiln.jit(lambda a: a + 1.0, donate_argnums=0)
    x = jnp.ones(1 << 16) * 0.01
    for _ in range(3):
        f(x).block_until_ready()
        h(x).block_until_ready()
    want = np.asarray(h(f(x)))
    for _ in range(5):
        y = f(x)
        u = h(y)                      # queued, reads y's buffer
        z = g(y)                      # donates y: never under u's feet
        np.testing.assert_array_equal(np.asarray(u), want)
        np.testing.assert_array_equal(np.asarray(z), np.full(1 << 16, 1.02, np.float32))
    y = f(x)
    y.block_until_ready()
    assert donation.reusable([y], [(0, 0)]) == ((0, 0),)
    where = y.unsafe_buffer_pointer()
    z = g(y)
    assert z.unsafe_buffer_pointer() == where and y.is_deleted()
