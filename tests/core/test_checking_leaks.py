"""``kiln.checking_leaks()`` / ``jax_check_tracer_leaks``: a tracer still referenced when
its trace ends raises ``UnexpectedTracerError`` naming it and the user's line."""
import os
import re

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.errors import UnexpectedTracerError

_leaked = []


def _leaky(x):
    y = x * 2  # the leaked value
    _leaked.append(y)
    return x + 1


_LINE = _leaky.__code__.co_firstlineno + 1


@pytest.fixture(autouse=True)
def _clear():
    _leaked.clear()
    yield
    _leaked.clear()


@pytest.mark.parametrize("transform,arg", [
    (kiln.jit, np.float32(1.0)),
    (kiln.make_jaxpr, np.float32(1.0)),
    (kiln.vmap, np.ones(3, np.float32)),
])
def test_leak_raises(transform, arg):
    with kiln.checking_leaks():
        with pytest.raises(UnexpectedTracerError) as e:
            transform(_leaky)(arg)
    msg = str(e.value)
    assert msg.startswith("Leaked trace ")
    assert "Leaked tracer(s):" in msg
    assert re.search(r"is referred to by <list \d+>\[0\]", msg)
    assert f"{__name__}._leaked" in msg
    if transform is not kiln.vmap:
        assert f"{__file__}:{_LINE}" in msg and "(_leaky)" in msg
        assert "created by mul" in msg


def test_leak_in_scan_body_names_the_argument():
    def body(c, x):
        _leaked.append(c)
        return c + x, x
    with kiln.checking_leaks(), pytest.raises(UnexpectedTracerError,
                                              match="is an argument of the traced function"):
        lax.scan(body, 0.0, jnp.ones(3))


def test_no_leak_no_error_and_same_values():
    def f(x):
        return lax.fori_loop(0, 3, lambda i, c: c * 2.0, x) + kiln.vmap(jnp.sin)(x).sum()
    x = jnp.arange(3.0)
    before = kiln.config.jax_check_tracer_leaks
    with kiln.checking_leaks():
        assert kiln.config.jax_check_tracer_leaks
        got = kiln.jit(f)(x)
        g = kiln.grad(lambda x: f(x).sum())(x)
    assert kiln.config.jax_check_tracer_leaks == before
    np.testing.assert_allclose(np.asarray(got), np.asarray(f(x)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g), np.asarray(kiln.grad(lambda x: f(x).sum())(x)))


def test_off_by_default():
    if os.environ.get("JAX_CHECK_TRACER_LEAKS"):
        pytest.skip("JAX_CHECK_TRACER_LEAKS is set")
    assert not kiln.config.jax_check_tracer_leaks
    kiln.jit(_leaky)(np.float32(1.0))  # leaks, unchecked
    assert len(_leaked) == 1
    with kiln.check_tracer_leaks(True):
        with pytest.raises(UnexpectedTracerError):
            kiln.jit(lambda x: _leaky(x) * 3)(np.float32(1.0))


@pytest.mark.slow  # ~20 s of JAX compilations; the kiln-only tests above stay
def test_matches_jax():
    jax = pytest.importorskip("jax")
    seen = []

    def f(x):
        seen.append(x * 2)
        return x + 1
    for transform, arg in ((jax.jit, 1.0), (jax.vmap, np.ones(3)), (jax.grad, 1.0)):
        seen.clear()
        try:
            with jax.checking_leaks():
                transform(f)(arg)
            jax_raised = False
        except Exception as e:  # noqa: BLE001  (JAX raises a plain Exception)
            jax_raised = "Leaked trace" in str(e)
        seen.clear()
        kt = {jax.jit: kiln.jit, jax.vmap: kiln.vmap, jax.grad: kiln.grad}[transform]
        try:
            with kiln.checking_leaks():
                kt(f)(arg)
            kiln_raised = False
        except UnexpectedTracerError:
            kiln_raised = True
        assert kiln_raised == jax_raised, transform
