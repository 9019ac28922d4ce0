"""When a first call waits for the C build: ``kiln_compile="async"`` runs a program on the
reference backend while it builds, unless its estimated reference work (loops counted per
iteration) passes ``cpu.SYNC_BUILD_STEPS``; then the first call builds and runs it natively
(an MCMC chain would otherwise spend seconds in NumPy)."""
import sys

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference

config_context = sys.modules["kiln.config"].config_context


def _body(c, x):
    return jnp.sin(c) * 0.5 + x, c.sum()


def test_estimated_steps_counts_loop_iterations():
    one = reference.estimated_steps(kiln.make_jaxpr(lambda c: _body(c, 1.0))(jnp.ones(3)).jaxpr)
    body = reference.estimated_steps(
        kiln.make_jaxpr(lambda c, x: _body(c, x))(jnp.ones(3), 1.0).jaxpr)
    scan = kiln.make_jaxpr(lambda c: lax.scan(_body, c, jnp.ones(50)))(jnp.ones(3))
    assert 1 <= one and 50 * (body - 1) <= reference.estimated_steps(scan.jaxpr) <= 50 * body + 5
    wl = kiln.make_jaxpr(lambda c: lax.while_loop(lambda c: c.sum() < 9, jnp.cos, c))(
        jnp.ones(3))
    assert reference.estimated_steps(wl.jaxpr) >= reference.WHILE_TRIPS_GUESS * 2
    nested = kiln.make_jaxpr(lambda c: lax.scan(
        lambda c, x: (lax.scan(_body, c, jnp.ones(20))[0], x), c, jnp.ones(30)))(jnp.ones(3))
    assert reference.estimated_steps(nested.jaxpr) >= 600 * (body - 1)
    br = kiln.make_jaxpr(lambda p, c: lax.cond(p, lambda c: lax.scan(_body, c, jnp.ones(40))[0],
                                               jnp.sin, c))(True, jnp.ones(3))
    assert 40 * (body - 1) <= reference.estimated_steps(br.jaxpr) <= 40 * body + 10


def _entry(jitted):
    (entry,) = jitted._cache.values()
    return cpu._cache.get(entry.jaxpr)


def test_a_long_loop_builds_before_its_first_call_returns():
    def chain(c):
        return lax.scan(_body, c, jnp.ones(cpu.SYNC_BUILD_STEPS // 4))[0]

    def small(c):
        return jnp.sin(c) * 3.0 + 1.0

    f, g = kiln.jit(chain), kiln.jit(small)
    with config_context(kiln_compile="async"):
        out = f(jnp.ones(3))
        assert _entry(f).state == "ready" and _entry(f).future is None
        g(jnp.ones(3))
        assert _entry(g).future is not None    # built in the background meanwhile
        cpu.wait_for_compiles()
    ref = lax.scan(_body, jnp.ones(3), jnp.ones(cpu.SYNC_BUILD_STEPS // 4))[0]
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5)


def _forget_eager(monkeypatch, op, width, dt):
    """This process forgets ``op``'s eager library (as if not loaded yet) for the test."""
    from kiln.lax import _xla_eager
    from kiln.random import _native
    monkeypatch.setattr(_native, "_state",
                        {k: v for k, v in _native._state.items() if k != ("eager", op, width)})
    monkeypatch.setattr(_native, "_later", set())
    monkeypatch.setattr(_xla_eager, "_fns", {k: v for k, v in _xla_eager._fns.items()
                                             if k[:2] != (op, width)})
    monkeypatch.setattr(_xla_eager, "_entries", {k: v for k, v in _xla_eager._entries.items()
                                                 if k != (op, np.dtype(dt))})
    built = []
    real = _native._build_eager

    def slow_build(o, w):
        import threading
        import time
        built.append((o, w, threading.current_thread().name))
        time.sleep(0.2)
        return real(o, w)
    monkeypatch.setattr(_native, "_build_eager", slow_build)
    return built


def test_a_tiered_first_call_does_not_wait_for_an_eager_kernel(monkeypatch):
    # While a tiered program builds, its reference run uses NumPy's tanh for an eager
    # kernel not loaded yet (its library builds in the background) instead of waiting
    # for cc on the calling thread (2.4 s of a 2.6 s first call on a cold cache).
    import threading

    from kiln.random import _native
    built = _forget_eager(monkeypatch, "tanh", "f32", np.float32)
    x = np.linspace(-3, 3, 1001, dtype=np.float32)
    f = kiln.jit(lambda x: jnp.tanh(x) * 2.0 + 1.0)
    with config_context(kiln_compile="async"):
        out = np.asarray(f(x))
        state = _entry(f).state
        cpu.wait_for_compiles()
    assert all(name != threading.current_thread().name for _, _, name in built)
    np.testing.assert_allclose(out, np.tanh(x.astype(np.float64)) * 2 + 1, rtol=1e-6,
                               atol=1e-6)
    for t in threading.enumerate():
        if t.name.startswith("kiln-eager-tanh"):
            t.join(30)
    if state == "pending":                  # the reference tier ran (not a fast build)
        assert [b[:2] for b in built] == [("tanh", "f32")]
    # the library now loaded: eager tanh has the compiled code's (JAX's) bits again
    assert ("eager", "tanh", "f32") in _native._state
    np.testing.assert_array_equal(np.asarray(jnp.tanh(x) * 2.0 + 1.0), np.asarray(f(x)))


def test_eager_math_still_waits_for_its_kernel(monkeypatch):
    # Outside a tiered reference run an eager op builds its kernel on the calling thread:
    # its bits never depend on timing.
    import threading
    built = _forget_eager(monkeypatch, "tanh", "f32", np.float32)
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    jnp.tanh(x)
    assert [b[2] for b in built] == [threading.current_thread().name]


def test_a_fork_during_a_background_eager_build_does_not_hang(monkeypatch):
    # The background build holds kiln.random._native's lock; a child forked meanwhile
    # must not inherit it locked (its own next eager build would wait forever).
    import os
    import signal
    import threading

    from kiln.random import _native
    if not hasattr(os, "fork"):
        import pytest
        pytest.skip("no fork")
    _forget_eager(monkeypatch, "tanh", "f32", np.float32)
    started = threading.Event()
    real = _native._build_eager

    def slow(o, w):
        started.set()
        import time
        time.sleep(1.0)
        return real(o, w)
    monkeypatch.setattr(_native, "_build_eager", slow)
    assert _native.eager_lib_later("tanh", "f32") is _native.PENDING
    assert started.wait(10)
    pid = os.fork()
    if pid == 0:                                    # the child: must not block on the lock
        signal.alarm(30)
        try:
            ok = _native.eager_lib("tanh", "f32") is not None
        except BaseException:                       # noqa: BLE001
            ok = False
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    for t in threading.enumerate():
        if t.name.startswith("kiln-eager-tanh"):
            t.join(30)
