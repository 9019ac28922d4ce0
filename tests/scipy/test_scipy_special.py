"""``kiln.scipy.special`` against ``jax.scipy.special``: values and dtypes over a table of
calls (float32 and x64), gradients against ``jax.grad``, and ``jit``/``vmap`` consistency."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.numpy as knp
from kiln.scipy import special as ks

jax = pytest.importorskip("jax")
from jax.scipy import special as js  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

R = np.random.default_rng(0)
f32 = np.float32


def u(lo, hi, n=7, dtype=f32):
    return R.uniform(lo, hi, n).astype(dtype)


# (name, args, kwargs, rtol, atol); args are NumPy arrays / Python scalars given to both.
CASES = [
    ("gammaln", (u(0.1, 12),), {}, 2e-5, 1e-6),
    ("gammaln", (np.array([-2.5, -0.5, 0.5, 1.0, 2.0, 30.0], f32),), {}, 2e-5, 1e-6),
    ("gammaln", (3,), {}, 1e-6, 0),
    ("gammasgn", (np.array([-2.5, -1.5, -1.0, -0.0, 0.0, 0.5, 3.0, np.nan, -np.inf], f32),),
     {}, 0, 0),
    ("gamma", (np.array([-2.5, -1.5, 0.3, 1.0, 4.5, 10.0], f32),), {}, 5e-5, 0),
    ("loggamma", (np.array([-1.0, 0.5, 3.0, 20.0], f32),), {}, 2e-5, 1e-6),
    ("digamma", (u(0.1, 10),), {}, 5e-5, 1e-5),
    ("polygamma", (np.array([0, 1, 2, 3], np.int32), u(0.5, 5, 4)), {}, 1e-4, 1e-5),
    ("polygamma", (1, u(0.5, 5, 4)), {}, 1e-4, 1e-5),
    ("betaln", (u(0.5, 5), u(0.5, 20)), {}, 5e-5, 1e-5),
    ("betaln", (np.array([1.0, 2.0, 50.0], f32), np.array([100.0, 9.0, 300.0], f32)), {},
     5e-5, 1e-5),
    ("beta", (u(0.5, 5), u(0.5, 5)), {}, 5e-5, 1e-6),
    ("betainc", (u(0.5, 5), u(0.5, 5), u(0, 1)), {}, 1e-4, 1e-6),
    ("gammainc", (u(0.5, 5), u(0, 8)), {}, 1e-4, 1e-6),
    ("gammaincc", (u(0.5, 5), u(0, 8)), {}, 1e-4, 1e-6),
    ("erf", (u(-3, 3),), {}, 1e-6, 1e-7),
    ("erf", (np.arange(4, dtype=np.int32),), {}, 1e-6, 1e-7),
    ("erfc", (u(-3, 5),), {}, 2e-6, 1e-8),
    ("erfinv", (u(-0.99, 0.99),), {}, 1e-5, 1e-6),
    ("erfcx", (np.array([-3.0, -0.5, 0.0, 0.7, 5.0, 20.0, 1e4], f32),), {}, 2e-5, 0),
    ("ndtr", (np.array([-40.0, -8.0, -1.0, 0.0, 0.3, 2.0, 9.0], f32),), {}, 2e-6, 1e-30),
    ("ndtri", (np.array([0.0, 1e-30, 1e-8, 0.05, 0.3, 0.5, 0.8, 0.999, 1.0], f32),), {},
     2e-6, 0),
    ("log_ndtr", (np.array([-100.0, -30.0, -10.5, -9.5, -3.0, 0.0, 3.0, 4.9, 5.1, 8.0,
                            40.0], f32),), {}, 2e-6, 1e-30),
    ("log_ndtr", (np.array([-15.0, -3.0, 2.0], f32),), {"series_order": 0}, 2e-6, 0),
    ("log_ndtr", (np.array([-15.0, -12.0], f32),), {"series_order": 7}, 2e-6, 0),
    ("expit", (u(-10, 10),), {}, 1e-6, 0),
    ("logit", (u(0.01, 0.99),), {}, 1e-5, 1e-6),
    ("xlogy", (np.array([0.0, 0.0, 1.0, 2.0, 3.0], f32), np.array([0.0, 2.0, 0.0, 3.0, np.nan],
                                                                   f32)), {}, 1e-6, 0),
    ("xlog1py", (np.array([0.0, 0.0, 1.0, 2.0], f32), np.array([-1.0, 2.0, -1.0, 0.5], f32)),
     {}, 1e-6, 0),
    ("entr", (np.array([-1.0, 0.0, 0.3, 1.0, 5.0], f32),), {}, 1e-6, 0),
    ("rel_entr", (np.array([0.0, 0.0, 1.0, 2.0, -1.0, 0.5], f32),
                  np.array([0.0, 1.0, 0.0, 3.0, 1.0, 0.25], f32)), {}, 1e-6, 0),
    ("kl_div", (np.array([0.0, 1.0, 2.0, 0.5], f32), np.array([1.0, 0.0, 3.0, 0.25], f32)),
     {}, 1e-6, 0),
    ("i0", (u(-5, 5),), {}, 2e-6, 0),
    ("i0e", (u(-5, 5),), {}, 2e-6, 0),
    ("i1", (u(-5, 5),), {}, 2e-6, 0),
    ("i1e", (u(-5, 5),), {}, 2e-6, 0),
    ("zeta", (u(1.5, 6), u(0.5, 5)), {}, 2e-5, 0),
    ("factorial", (np.array([-1.0, 0.0, 1.0, 4.0, 10.0], f32),), {}, 2e-5, 0),
    ("factorial", (np.arange(6),), {}, 2e-5, 0),
    ("comb", (np.array([5.0, 10.0, 3.0, -1.0], f32), np.array([2.0, 3.0, 4.0, 1.0], f32)), {},
     2e-5, 0),
    ("comb", (np.array([5.0, 3.0], f32), np.array([2.0, 0.0], f32)), {"repetition": True},
     2e-5, 0),
    ("multigammaln", (np.array([3.0, 4.5, 10.0], f32), 3), {}, 2e-5, 1e-5),
    ("poch", (u(0.5, 4), u(0, 3)), {}, 1e-4, 0),
    ("boxcox", (u(0.5, 4), np.array([0.0, 0.5, -1.0, 2.0, 0.0, 1.0, 0.3], f32)), {}, 1e-5, 0),
    ("boxcox1p", (u(0.0, 3), np.array([0.0, 0.5, -1.0, 2.0, 0.0, 1.0, 0.3], f32)), {}, 1e-5, 0),
    ("owens_t", (u(-3, 3), u(-3, 3)), {}, 2e-5, 1e-7),
    ("logsumexp", (R.normal(size=(3, 4)).astype(f32),), {}, 1e-6, 0),
    ("logsumexp", (R.normal(size=(3, 4)).astype(f32),), {"axis": 1, "keepdims": True}, 1e-6, 0),
    ("logsumexp", (R.normal(size=(3, 4)).astype(f32),), {"axis": (0, 1)}, 1e-6, 0),
    ("logsumexp", (np.array([[1.0, 2.0], [3.0, 0.5]], f32),),
     {"axis": 0, "b": np.array([[1.0, -1.0], [-2.0, 3.0]], f32)}, 1e-6, 0),
    ("logsumexp", (np.array([[1.0, 2.0], [3.0, 0.5]], f32),),
     {"axis": 1, "b": np.array([[1.0, -1.0], [-2.0, 3.0]], f32), "return_sign": True},
     1e-6, 0),
    ("logsumexp", (np.array([[1.0, 2.0, 9.0], [3.0, 0.5, -np.inf]], f32),),
     {"axis": 1, "where": np.array([[True, True, False], [True, False, True]])}, 1e-6, 0),
    ("logsumexp", (np.array([-np.inf, -np.inf], f32),), {}, 0, 0),
    ("softmax", (R.normal(size=(3, 4)).astype(f32),), {}, 1e-6, 1e-8),
    ("softmax", (R.normal(size=(3, 4)).astype(f32),), {"axis": 1}, 1e-6, 1e-8),
    ("log_softmax", (R.normal(size=(3, 4)).astype(f32),), {"axis": 0}, 1e-6, 1e-7),
]

IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def _cmp(out, ref, rtol, atol):
    out_l, ref_l = jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref)
    assert len(out_l) == len(ref_l)
    for o, r in zip(out_l, ref_l):
        o, r = np.asarray(o), np.asarray(r)
        assert o.dtype == r.dtype, (o.dtype, r.dtype)
        assert o.shape == r.shape, (o.shape, r.shape)
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name,args,kwargs,rtol,atol", CASES, ids=IDS)
def test_value_parity(name, args, kwargs, rtol, atol):
    out = getattr(ks, name)(*args, **kwargs)
    ref = jax_result(f"value.{name}", lambda: getattr(js, name)(*args, **kwargs),
                     (args, kwargs))
    _cmp(out, ref, rtol, atol)


X64_CASES = [c for c in CASES if c[0] not in ("bessel_jn",)]


@pytest.mark.parametrize("name,args,kwargs,rtol,atol", X64_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(X64_CASES)])
def test_value_parity_x64(name, args, kwargs, rtol, atol):
    def cast(a):
        if isinstance(a, np.ndarray) and a.dtype == f32:
            return a.astype(np.float64)
        return a
    args = tuple(cast(a) for a in args)
    kwargs = {k: cast(v) for k, v in kwargs.items()}
    def ref():
        with jax.enable_x64(True):
            return getattr(js, name)(*args, **kwargs)
    ref = jax_result(f"x64.{name}", ref, (args, kwargs))
    with kiln.enable_x64(True):
        out = getattr(ks, name)(*args, **kwargs)
    _cmp(out, ref, max(rtol, 1e-10) if rtol else 0, atol * 1e-3 if atol else 0)


def test_weak_python_scalars():
    # (entr and xlogy lose weak type: kiln.numpy.where of two weak operands is strong.)
    for name in ("gammaln", "erf", "expit", "digamma", "i0e", "i0", "ndtri", "erfinv"):
        out = getattr(ks, name)(0.5)
        ref = jax_result(f"weak.{name}", lambda name=name: getattr(js, name)(0.5))
        assert out.dtype == ref.dtype and out.weak_type == ref.weak_type, name


def test_errors():
    with pytest.raises(ValueError, match="integer type"):
        ks.polygamma(1.0, 2.0)
    with pytest.raises(TypeError):
        ks.ndtr(np.arange(3))
    with pytest.raises(TypeError):
        ks.log_ndtr(np.array([1.0], f32), series_order=1.5)
    with pytest.raises(ValueError):
        ks.log_ndtr(np.array([1.0], f32), series_order=31)
    with pytest.raises(NotImplementedError):
        ks.zeta(2.0)
    with pytest.raises(NotImplementedError):
        ks.factorial(3, exact=True)


def test_bessel_jn():
    z = np.array([0.5, 1.0, 2.5], np.float64)
    def ref():
        with jax.enable_x64(True):
            return js.bessel_jn(z, v=3)
    ref = jax_result("bessel_jn", ref, z)
    with kiln.enable_x64(True):
        out = ks.bessel_jn(z, v=3)
    _cmp(out, ref, 1e-10, 1e-14)


def test_bernoulli():
    _cmp(ks.bernoulli(10), jax_result("bernoulli10", lambda: js.bernoulli(10)), 1e-6, 1e-7)
    _cmp(ks.bernoulli(1), jax_result("bernoulli1", lambda: js.bernoulli(1)), 0, 0)


# ----------------------------------------------------------------------------------------------
# gradients

GRAD_CASES = [
    ("gammaln", (2.5,), 0), ("digamma", (1.7,), 0), ("erf", (0.3,), 0), ("erfc", (0.3,), 0),
    ("erfinv", (0.4,), 0), ("expit", (0.3,), 0), ("logit", (0.3,), 0),
    ("xlogy", (0.0, 0.0), (0, 1)), ("xlogy", (2.0, 3.0), (0, 1)),
    ("xlog1py", (0.0, -1.0), (0, 1)), ("xlog1py", (2.0, 0.5), (0, 1)),
    ("entr", (0.5,), 0), ("entr", (0.0,), 0), ("rel_entr", (0.5, 0.25), (0, 1)),
    ("kl_div", (0.5, 0.25), (0, 1)),
    ("log_ndtr", (-30.0,), 0), ("log_ndtr", (-3.0,), 0), ("log_ndtr", (6.0,), 0),
    ("log_ndtr", (0.5,), 0), ("ndtr", (0.5,), 0), ("ndtri", (0.3,), 0), ("ndtri", (1e-5,), 0),
    ("zeta", (3.0, 2.0), (0, 1)), ("betaln", (2.0, 30.0), (0, 1)), ("beta", (2.0, 3.0), (0, 1)),
    ("gammainc", (2.0, 1.5), (0, 1)), ("gammaincc", (2.0, 1.5), (0, 1)),
    ("betainc", (2.0, 3.0, 0.4), 2), ("i0", (1.3,), 0), ("i1", (1.3,), 0),
    ("i0e", (-1.3,), 0), ("i1e", (1.3,), 0), ("gamma", (2.5,), 0), ("poch", (2.0, 3.0), (0, 1)),
    ("owens_t", (1.0, 0.5), (0, 1)), ("erfcx", (0.7,), 0), ("erfcx", (30.0,), 0),
    ("factorial", (3.5,), 0), ("boxcox", (2.0, 0.5), (0, 1)),
]


@pytest.mark.parametrize("name,args,argnums", GRAD_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(GRAD_CASES)])
def test_grad_parity(name, args, argnums):
    out = kiln.grad(getattr(ks, name), argnums)(*args)
    ref = jax_result(f"grad.{name}{args}{argnums}",
                     lambda: jax.grad(getattr(js, name), argnums)(*args))
    _cmp(out, ref, 2e-4, 1e-6)


def test_logsumexp_grads():
    x = np.random.default_rng(215).normal(size=(3, 4)).astype(f32)
    b = np.random.default_rng(216).uniform(0.5, 2, size=(3, 4)).astype(f32)
    w = np.array([[True, False, True, True]] * 3)
    for kw in ({}, {"axis": 1}, {"axis": 0, "b": b}, {"axis": 1, "where": w}):
        out = kiln.grad(lambda a, kw=kw: ks.logsumexp(a, **kw).sum())(x)
        ref = jax_result("logsumexp_grad", lambda kw=kw: jax.grad(
            lambda a: js.logsumexp(a, **kw).sum())(x), (x, kw))
        _cmp(out, ref, 1e-5, 1e-7)


def test_second_derivatives():
    for name, x in (("log_ndtr", -12.0), ("xlogy", None), ("gammaln", 3.0), ("expit", 0.2)):
        if name == "xlogy":
            kf = lambda y: ks.xlogy(2.0, y)  # noqa: E731
            jf = lambda y: js.xlogy(2.0, y)  # noqa: E731
            x = 1.5
        else:
            kf, jf = getattr(ks, name), getattr(js, name)
        out = kiln.grad(kiln.grad(kf))(x)
        ref = jax_result(f"grad2.{name}", lambda jf=jf, x=x: jax.grad(jax.grad(jf))(x), x)
        _cmp(out, ref, 1e-4, 1e-6)


# ----------------------------------------------------------------------------------------------
# jit and vmap

ELEMENTWISE = {"gammaln", "gammasgn", "gamma", "loggamma", "digamma", "polygamma", "betaln",
               "beta", "betainc", "gammainc", "gammaincc", "erf", "erfc", "erfinv", "erfcx",
               "ndtr", "ndtri", "log_ndtr", "expit", "logit", "xlogy", "xlog1py", "entr",
               "rel_entr", "kl_div", "i0", "i0e", "i1", "i1e", "zeta", "factorial", "comb",
               "poch", "boxcox", "boxcox1p", "owens_t"}
JV_CASES = [c for c in CASES if c[0] in ELEMENTWISE and all(
    isinstance(a, np.ndarray) and a.ndim == 1 for a in c[1])]


@pytest.mark.parametrize("name,args,kwargs,rtol,atol", JV_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(JV_CASES)])
def test_jit_and_vmap(name, args, kwargs, rtol, atol):
    f = getattr(ks, name)

    def g(*a):
        return f(*a, **kwargs)
    eager = np.asarray(g(*args))
    np.testing.assert_allclose(np.asarray(kiln.jit(g)(*args)), eager, rtol=1e-6, atol=1e-30,
                               equal_nan=True)
    np.testing.assert_allclose(np.asarray(kiln.vmap(g)(*args)), eager, rtol=1e-6, atol=1e-30,
                               equal_nan=True)


def test_jit_reductions():
    x = R.normal(size=(3, 4)).astype(f32)
    b = R.uniform(0.5, 2, size=(3, 4)).astype(f32)
    f = lambda a, b: ks.logsumexp(a, axis=-1, b=b)  # noqa: E731
    np.testing.assert_allclose(kiln.jit(f)(x, b), f(x, b), rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(f)(x, b), f(x, b), rtol=1e-6)
    g = lambda a: ks.multigammaln(a, 4)  # noqa: E731
    a = np.array([4.0, 5.5], f32)
    np.testing.assert_allclose(kiln.jit(g)(a), g(a), rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(g)(a), g(a), rtol=1e-6)


def test_softmax_matches_nn():
    import kiln.nn as knn
    x = R.normal(size=(2, 5)).astype(f32)
    np.testing.assert_allclose(ks.softmax(x, axis=-1), knn.softmax(x), rtol=1e-6)
    np.testing.assert_allclose(ks.log_softmax(x, axis=-1), knn.log_softmax(x), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert float(knp.sum(ks.softmax(x))) == pytest.approx(1.0, rel=1e-6)


def _same_bits(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, what
    bad = (got != want) & ~(np.isnan(got) & np.isnan(want))
    bad |= (got == 0) & (want == 0) & (np.signbit(got) != np.signbit(want))
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} differ, e.g. {got[bad][:3]}"


def _ndtri_points(dtype):
    """Both tails (z >= 8 below exp(-32)), the switches at exp(-2), 1 - exp(-2), the middle,
    and 0, 1, NaN, out of range."""
    rng = np.random.default_rng(7)
    tiny = np.finfo(dtype).tiny
    x = np.concatenate([np.geomspace(tiny, 0.2, 120), 1 - np.geomspace(1e-15, 0.2, 60),
                        rng.uniform(0, 1, 120), np.exp(-32.0) * np.array([0.9, 1.0, 1.1]),
                        [0.0, 1.0, np.nan, -0.5, 1.5, np.exp(-2), 1 - np.exp(-2), 0.5]])
    return x.astype(dtype)


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_ndtri_jax_bits(wide):
    # JAX's ndtri is a jnp composition around jitted ``jnp.polyval`` calls: eagerly their
    # Horner steps are still FMAs, and under jit XLA keeps ``1 / z`` a division (z has
    # other uses), so a faithful composition has JAX's bits in both modes, and so has
    # reverse mode eagerly (the cotangents of shared values summed in JAX's order).
    dtype = np.float64 if wide else f32
    x = _ndtri_points(dtype)
    xg = x[(x > 0) & (x < 1)]

    def ref():
        with jax.enable_x64(wide):
            return (js.ndtri(x), jax.jit(js.ndtri)(x),
                    jax.grad(lambda v: js.ndtri(v).sum())(xg))
    want = jax_result(f"ndtri_bits.{dtype.__name__}", ref, (x, xg))
    with kiln.enable_x64(wide):
        _same_bits(ks.ndtri(x), want[0], "ndtri eager")
        _same_bits(kiln.jit(ks.ndtri)(x), want[1], "ndtri jit")
        _same_bits(kiln.grad(lambda v: ks.ndtri(v).sum())(xg), want[2], "grad ndtri eager")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_expi_positive_jax_bits(wide):
    # JAX's expi is jitted, so its eager calls are one compiled program (FMA contractions,
    # flushed subnormals): kiln's is too. For x > 0 (Cephes' rational fits) the bits are
    # JAX's, eagerly and under jit; x < 0 goes through exp1's loops and is not checked here.
    dtype = np.float64 if wide else f32
    x = np.concatenate([np.geomspace(1e-6, 80, 40), [2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
                        np.random.default_rng(3).uniform(0, 12, 20), [0.0, np.inf, np.nan]])
    x = x.astype(dtype)

    def ref():
        with jax.enable_x64(wide):
            return js.expi(x)
    want = jax_result(f"expi_bits.{dtype.__name__}", ref, x)
    with kiln.enable_x64(wide):
        _same_bits(ks.expi(x), want, "expi eager")
        _same_bits(kiln.jit(ks.expi)(x), want, "expi jit")
