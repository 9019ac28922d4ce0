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
