"""``kiln.test_util`` (``jax.test_util``): ``check_grads``/``check_jvp``/``check_vjp`` accept
correct derivatives and raise ``AssertionError`` on wrong ones, as JAX's do."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln import lax
from kiln import test_util as ktu

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import test_util as jtu  # noqa: E402


@pytest.fixture
def x64():
    jax.config.update("jax_enable_x64", True)
    kiln.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)
    kiln.config.update("jax_enable_x64", False)


def _outcome(fn):
    """``None`` when ``fn()`` passes, else the exception class it raised."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e)
    return None


def test_public_names():
    assert kiln.test_util is ktu
    assert ktu.__all__ == ["check_grads", "check_jvp", "check_vjp"]
    import inspect
    for name in ktu.__all__:
        ks = inspect.signature(getattr(ktu, name))
        js = inspect.signature(getattr(jtu, name))
        assert list(ks.parameters) == list(js.parameters), name
        for p in ks.parameters.values():
            assert p.default == js.parameters[p.name].default, (name, p.name)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("modes", [("fwd", "rev"), ("fwd",), ("rev",), ("lin",)])
def test_correct_functions_pass(order, modes):
    x = np.array([0.3, -1.2, 2.0], np.float32)
    y = np.array([[0.5, 1.5, -0.7]], np.float32)
    ktu.check_grads(lambda a, b: knp.sin(a) * knp.exp(b), (x, y), order, modes=modes)
    ktu.check_grads(lambda d: {"s": knp.tanh(d["u"]).sum(), "p": d["u"] * d["v"]},
                    ({"u": x, "v": 2.0},), order, modes=modes)
    ktu.check_grads(lambda a: knp.cumsum(a ** 3), (x,), order, modes=modes, eps=1e-3)


def test_complex_and_python_scalars():
    z = np.array([0.3 + 0.2j, -1.0 + 0.5j], np.complex64)
    ktu.check_grads(lambda a: a * knp.conj(a) + knp.sin(a), (z,), 2)
    ktu.check_grads(lambda a, b: a * b + a ** 2, (1.5, -0.5), 2)


@kiln.custom_jvp
def _bad_first(x):
    return knp.sin(x)


@_bad_first.defjvp
def _bad_first_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return knp.sin(x), 1.1 * knp.cos(x) * t      # wrong by 10%


@kiln.custom_jvp
def _bad_second(x):
    return knp.sin(x)


@_bad_second.defjvp
def _bad_second_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    # Correct first derivative, but its own derivative is lost (zero instead of -sin).
    return knp.sin(x), lax.stop_gradient(knp.cos(x)) * t


@kiln.custom_vjp
def _bad_vjp(x):
    return x ** 2


_bad_vjp.defvjp(lambda x: (x ** 2, x), lambda x, g: (3 * x * g,))


_X = np.array([0.4, 1.3, -0.8], np.float32)


@pytest.mark.parametrize("modes", [("fwd",), ("rev",), ("lin",)])
def test_wrong_first_derivative_raises(modes):
    with pytest.raises(AssertionError):
        ktu.check_grads(_bad_first, (_X,), 1, modes=modes)
    with pytest.raises(AssertionError):
        ktu.check_grads(_bad_first, (_X,), 2, modes=modes)


@pytest.mark.parametrize("modes", [("fwd",), ("rev",)])
def test_wrong_second_derivative_raises_only_at_order_2(modes):
    ktu.check_grads(_bad_second, (_X,), 1, modes=modes)
    with pytest.raises(AssertionError):
        ktu.check_grads(_bad_second, (_X,), 2, modes=modes)


def test_wrong_custom_vjp_raises():
    with pytest.raises(TypeError, match="forward-mode"):   # a custom_vjp has no JVP
        ktu.check_grads(_bad_vjp, (_X,), 1, modes=["fwd"])
    with pytest.raises(AssertionError, match="cotangent projection"):
        ktu.check_grads(_bad_vjp, (_X,), 1, modes=["rev"])
    with pytest.raises(AssertionError):
        ktu.check_vjp(_bad_vjp, partial(kiln.vjp, _bad_vjp), (_X,))


def test_check_jvp_and_check_vjp_directly():
    def f(a):
        return knp.log1p(a ** 2)
    ktu.check_jvp(f, partial(kiln.jvp, f), (_X,))
    ktu.check_vjp(f, partial(kiln.vjp, f), (_X,))
    with pytest.raises(AssertionError, match="tangent"):
        ktu.check_jvp(f, lambda p, t: (f(*p), 2. * kiln.jvp(f, p, t)[1]), (_X,))
    with pytest.raises(AssertionError, match="primal"):
        ktu.check_jvp(f, lambda p, t: (f(*p) + 1., kiln.jvp(f, p, t)[1]), (_X,))
    with pytest.raises(AssertionError):
        ktu.check_jvp(f, lambda p, t: (f(*p), kiln.jvp(f, p, t)[1].astype(np.float16)), (_X,))


def test_tolerances_default_by_dtype_and_overrides(x64):
    # A derivative off by 1e-4 (relative) passes float32's default gradient tolerance and
    # fails float64's, in kiln as in JAX.
    def make(mod, np_):
        @mod.custom_jvp
        def g(x):
            return np_.sin(x)

        @g.defjvp
        def g_jvp(p, t):
            return np_.sin(p[0]), (1 + 1e-4) * np_.cos(p[0]) * t[0]
        return g
    gk, gj = make(kiln, knp), make(jax, jnp)
    for dt in (np.float32, np.float64):
        x = _X.astype(dt)
        ok = _outcome(lambda: ktu.check_grads(gk, (x,), 1))
        assert ok is _outcome(lambda: jtu.check_grads(gj, (x,), 1))
        assert ok is (None if dt == np.float32 else AssertionError)
    x = _X.astype(np.float64)
    ktu.check_grads(gk, (x,), 1, atol=1e-2, rtol=1e-2)
    ktu.check_grads(gk, (x,), 1, atol={np.float64: 1e-2}, rtol={np.float64: 1e-2})
    with pytest.raises(AssertionError):
        ktu.check_grads(gk, (x,), 1, atol={np.float32: 1e-2}, rtol={np.float32: 1e-2})


def test_outcomes_agree_with_jax():
    cases = [
        (lambda a: knp.sin(a) * a, lambda a: jnp.sin(a) * a, 2, ("fwd", "rev")),
        (_bad_first, None, 1, ("fwd", "rev")),
        (_bad_second, None, 2, ("rev",)),
    ]

    def jax_bad(second):
        @jax.custom_jvp
        def h(x):
            return jnp.sin(x)

        @h.defjvp
        def h_jvp(p, t):
            if second:
                return jnp.sin(p[0]), jax.lax.stop_gradient(jnp.cos(p[0])) * t[0]
            return jnp.sin(p[0]), 1.1 * jnp.cos(p[0]) * t[0]
        return h
    cases[1] = (cases[1][0], jax_bad(False), 1, ("fwd", "rev"))
    cases[2] = (cases[2][0], jax_bad(True), 2, ("rev",))
    for fk, fj, order, modes in cases:
        ok = _outcome(lambda: ktu.check_grads(fk, (_X,), order, modes=modes))
        oj = _outcome(lambda: jtu.check_grads(fj, (_X,), order, modes=modes))
        assert ok is oj, (ok, oj)


def test_jitted_and_vmapped_functions():
    f = kiln.jit(lambda a, b: knp.dot(a, b) ** 2)
    ktu.check_grads(f, (_X, _X[::-1].copy()), 2)
    ktu.check_grads(kiln.vmap(lambda a: knp.sin(a) * a), (np.ones((2, 3), np.float32),), 2)


def test_numerical_jvp_helper():
    out = ktu.numerical_jvp(np.sin, (np.float64(0.5),), (np.float64(1.0),))
    np.testing.assert_allclose(out, np.cos(0.5), rtol=1e-7)
