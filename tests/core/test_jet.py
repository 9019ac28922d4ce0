"""``kiln.experimental.jet``: Taylor coefficients of f along a curve, checked against
closed forms (Faà di Bruno), nested ``jacfwd`` and JAX's own ``jet``."""
import math

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.experimental.jet import fact, jet, jet2, zero_series, zero_term

RNG = np.random.default_rng(0)


def _taylor_by_nesting(fun, primals, series):
    """The k-th derivative of t -> fun(x + sum_j t^j x_j / j!) at 0, by nested jacfwd."""
    order = len(series[0])

    def curve(t):
        args = [p + sum(t ** (j + 1) * s[j] / math.factorial(j + 1) for j in range(order))
                for p, s in zip(primals, series)]
        return fun(*args)

    terms, g = [], curve
    for _ in range(order):
        g = kiln.jacfwd(g)
        terms.append(g(0.0))
    return curve(0.0), terms


def test_faa_di_bruno_example():
    # sin(h(z)) with h(z) = z^3 at z = 0.5: JAX's documented example
    h0, h1, h2 = 0.5 ** 3, 3 * 0.5 ** 2, 6 * 0.5
    f0, (f1, f2) = jet(jnp.sin, (h0,), ((h1, h2),))
    np.testing.assert_allclose(f0, np.sin(h0), rtol=1e-6)
    np.testing.assert_allclose(f1, np.cos(h0) * h1, rtol=1e-6)
    np.testing.assert_allclose(f2, -np.sin(h0) * h1 ** 2 + np.cos(h0) * h2, rtol=1e-5)


@pytest.mark.parametrize("fun", [
    lambda a, b: jnp.tanh(jnp.dot(a, b)),
    lambda a, b: jnp.exp(a) @ jnp.log1p(b * b),
    lambda a, b: jnp.sum(a ** 3) * b / (1 + b ** 2),
])
def test_matches_nested_forward_mode(fun):
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    sa = [RNG.standard_normal(a.shape).astype(np.float32) for _ in range(3)]
    sb = [RNG.standard_normal(b.shape).astype(np.float32) for _ in range(3)]
    y, terms = jet(fun, (a, b), (sa, sb))
    y_ref, terms_ref = _taylor_by_nesting(fun, (a, b), (sa, sb))
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    for t, r in zip(terms, terms_ref):
        np.testing.assert_allclose(t, r, rtol=2e-4, atol=2e-4)


def test_exp_series_and_unscaled_coefficients():
    # exp along x(t) = 1 + t: every derivative is e.
    y, terms = jet(jnp.exp, (1.0,), ((1.0, 0.0, 0.0, 0.0),))
    np.testing.assert_allclose([y, *terms], [math.e] * 5, rtol=1e-6)
    # jet2: plain coefficients in and out (e * t^k / k!)
    y2, c = jet2(jnp.exp, (1.0,), ((1.0, 0.0, 0.0),))
    np.testing.assert_allclose(c, [math.e / math.factorial(k) for k in (1, 2, 3)], rtol=1e-6)
    assert y2.weak_type and all(t.weak_type for t in c)    # Python-scalar inputs stay weak


def test_pytree_output_zero_series_and_zero_term():
    x = RNG.standard_normal(3).astype(np.float32)
    c = RNG.standard_normal(3).astype(np.float32)

    def f(x, c):
        return {"a": jnp.sin(x) * c, "n": jnp.arange(3), "k": c * 2.0}

    y, terms = jet(f, (x, c), ([np.ones(3, np.float32), zero_term], zero_series))
    assert set(terms) == {"a", "n", "k"} and len(terms["a"]) == 2
    np.testing.assert_allclose(terms["a"][0], np.cos(x) * c, rtol=1e-6)
    np.testing.assert_allclose(terms["a"][1], -np.sin(x) * c, rtol=1e-5)
    for t in terms["k"] + terms["n"]:     # no dependence on the curve: zeros of that type
        assert not np.any(np.asarray(t))
    assert terms["n"][0].dtype == jnp.arange(3).dtype


def test_under_jit_and_vmap():
    f = lambda x: jet(jnp.sin, (x,), ((1.0, 0.0, 0.0),))[1]   # noqa: E731
    xs = jnp.array([0.3, 0.5])
    got = kiln.vmap(f)(xs)
    np.testing.assert_allclose(got[2], -np.cos([0.3, 0.5]), rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(f)(0.3)[1], -np.sin(0.3), rtol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match="inconsistent lengths"):
        jet(jnp.add, (1.0, 2.0), ((1.0,), (1.0, 2.0)))
    with pytest.raises(ValueError, match="primal value at position 0 is not an array"):
        jet(lambda x: x, ((1.0, 2.0),), ((1.0,),))
    with pytest.raises(ValueError, match="term 0 for argument 0 is not an array"):
        jet(lambda x: x, (1.0,), (([1.0, 2.0],),))


def test_fact():
    # exp(lgamma(n + 1)) in float32, as JAX computes it (so 5! is 120.00012 there too)
    assert float(fact(5)) == float(np.float32(120.00012))
    np.testing.assert_allclose(fact(3.0), 6.0, rtol=1e-5)


def test_against_jax():
    jax = pytest.importorskip("jax")
    from jax.experimental import jet as jjet
    x = RNG.standard_normal((4,)).astype(np.float32)
    s = [RNG.standard_normal((4,)).astype(np.float32) for _ in range(4)]
    fun = lambda m: lambda x: m.tanh(x) * m.exp(-x * x)   # noqa: E731
    y, t = jet(fun(jnp), (x,), (s,))
    yj, tj = jjet.jet(fun(jax.numpy), (x,), (s,))
    np.testing.assert_allclose(y, yj, rtol=1e-6)
    for a, b in zip(t, tj):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
