"""``kiln.scipy.stats`` against ``jax.scipy.stats``: every function of every distribution over
sample arguments (values, dtypes; float32 and x64), gradients of the log densities,
``jit``/``vmap``, and ``mode``/``rankdata``/``sem``."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.scipy.stats as kst

jax = pytest.importorskip("jax")
import jax.numpy as jjnp  # noqa: E402
import jax.scipy.stats as jst  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

R = np.random.default_rng(1)
f32 = np.float32

DISTS = ["bernoulli", "beta", "betabinom", "binom", "cauchy", "chi2", "dirichlet", "expon",
         "gamma", "gennorm", "geom", "gumbel_l", "gumbel_r", "laplace", "logistic",
         "multinomial", "multivariate_normal", "nbinom", "norm", "pareto", "poisson", "t",
         "truncnorm", "uniform", "vonmises", "wrapcauchy"]
FUNCS = ["logpdf", "pdf", "cdf", "logcdf", "ppf", "sf", "logsf", "isf", "logpmf", "pmf",
         "entropy"]


def _jax_funcs(dist):
    mod = getattr(jst, dist)
    return [f for f in FUNCS if hasattr(mod, f)]


def test_coverage():
    for dist in DISTS:
        for f in _jax_funcs(dist):
            assert hasattr(getattr(kst, dist), f), f"{dist}.{f}"
    for name in ("mode", "rankdata", "sem"):
        assert hasattr(kst, name)


def _x(lo, hi, n=9):
    return R.uniform(lo, hi, n).astype(f32)


def _q(n=9):
    return np.concatenate([[0.0, 1.0, 1e-6], R.uniform(0.01, 0.99, n - 3)]).astype(f32)


# Arguments per distribution: {function group: tuple of args}. "x" args are also used for
# cdf/sf etc.; "q" args for ppf/isf.
ARGS = {
    "bernoulli": {"x": (np.array([-1, 0, 1, 2, 0, 1], f32), np.array([.3, .3, .7, .5, 0., 1.],
                                                                      f32)),
                  "cdf": (np.array([-1, 0, 0.5, 1, 2, 0.], f32), np.array([.3, .3, .7, .5, 1.2,
                                                                           np.nan], f32)),
                  "q": (np.array([0., .2, .5, .9, 1., 1.5], f32), np.array([.3, .3, .7, .5, .5,
                                                                           .5], f32))},
    "beta": {"x": (_x(-0.1, 1.1), _x(0.5, 4), _x(0.5, 4))},
    "betabinom": {"x": (np.array([0, 1, 2, 5, 3, 7, 0], f32), np.array([5, 5, 5, 5, 0, 6, 0],
                                                                        f32),
                        _x(0.5, 3, 7), _x(0.5, 3, 7))},
    "binom": {"x": (np.array([0, 1, 2, 5, 3, 7, 0], f32), np.array([5, 5, 5, 5, 4, 6, 0], f32),
                    np.array([.2, .5, .9, .5, 0., 1., .3], f32))},
    "cauchy": {"x": (_x(-5, 5), _x(-1, 1), _x(0.5, 2)), "q": (_q(), 0.5, 2.0)},
    "chi2": {"x": (_x(-0.5, 8), _x(1, 6)), "loc": (_x(0.5, 8), 3.0, 0.3, 1.5)},
    "dirichlet": {"x": (np.array([0.2, 0.3, 0.5], f32), np.array([1.0, 2.0, 3.0], f32))},
    "expon": {"x": (_x(-1, 5), 0.2, 1.5), "q": (_q(), 0.5, 2.0)},
    "gamma": {"x": (_x(-0.5, 8), _x(0.5, 5)), "loc": (_x(0.5, 8), 2.0, 0.3, 1.5)},
    "gennorm": {"x": (_x(-3, 3), _x(0.5, 3))},
    "geom": {"x": (np.array([0, 1, 2, 5, 3], f32), np.array([.2, .5, .9, .5, 1.], f32))},
    "gumbel_l": {"x": (_x(-4, 4), 0.3, 1.5), "q": (_q(), 0.5, 2.0)},
    "gumbel_r": {"x": (_x(-4, 4), 0.3, 1.5), "q": (_q(), 0.5, 2.0)},
    "laplace": {"x": (_x(-4, 4), 0.3, 1.5)},
    "logistic": {"x": (_x(-6, 6), 0.3, 1.5), "q": (_q(), 0.5, 2.0)},
    "multinomial": {"x": (np.array([1, 2, 0], np.int32), 3, np.array([.2, .5, .3], f32))},
    "multivariate_normal": {"x": (R.normal(size=(4, 3)).astype(f32),
                                  np.array([0.1, -0.2, 0.3], f32),
                                  np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2],
                                            [0.1, -0.2, 1.5]], f32))},
    "nbinom": {"x": (np.array([0, 1, 2, 5, 3, -1], f32), _x(1, 5, 6), _x(0.1, 0.9, 6))},
    "norm": {"x": (_x(-5, 5), 0.3, 1.5), "q": (_q(), 0.5, 2.0),
             "tail": (np.array([-40.0, -12.0, -6.0, 0.0, 6.0, 12.0, 40.0], f32),)},
    "pareto": {"x": (_x(0.5, 6), _x(0.5, 3), 0.1, 1.2), "q": (_q(), 1.5, 0.3, 2.0)},
    "poisson": {"x": (np.array([0, 1, 2, 5, 3, 2.5, -1], f32), _x(0.5, 5, 7)),
                "entropy": (np.array([0.0, 0.5, 3.0, 9.9, 10.0, 50.0, 99.0, 100.0, 500.0],
                                     f32),)},
    "t": {"x": (_x(-5, 5), _x(1, 10), 0.3, 1.5)},
    "truncnorm": {"x": (_x(-3, 3), -1.0, 2.0),
                  "tails": (np.array([-12.0, -11.0, 10.5, 11.0, 0.0], f32),
                            np.array([-15.0, -13.0, 10.0, 10.0, 1.0], f32),
                            np.array([-10.0, -10.0, 12.0, 13.0, 1.5], f32)),
                  "loc": (_x(-2, 3), -1.0, 2.0, 0.5, 0.8)},
    "uniform": {"x": (_x(-1, 3), 0.3, 1.5), "q": (_q(), 0.5, 2.0)},
    "vonmises": {"x": (_x(-3, 3), _x(0.1, 30))},
    "wrapcauchy": {"x": (_x(-1, 7), _x(0.05, 0.95))},
}

Q_FUNCS = ("ppf", "isf")


def _cases():
    out = []
    for dist in DISTS:
        for f in _jax_funcs(dist):
            for group, args in ARGS[dist].items():
                if group == "q" and f not in Q_FUNCS:
                    continue
                if group != "q" and f in Q_FUNCS and "q" in ARGS[dist]:
                    continue
                if group == "entropy" and f != "entropy":
                    continue
                if f == "entropy" and group != "entropy":
                    continue
                if group == "cdf" and f not in ("cdf",):
                    continue
                if dist == "bernoulli" and f == "cdf" and group == "x":
                    continue
                out.append((dist, f, group, args))
    return out


CASES = _cases()
IDS = [f"{d}.{f}-{g}" for d, f, g, _ in CASES]

# Where XLA's and NumPy's transcendental functions round differently, float32 results can
# differ in the last bits; a few functions amplify that (log of a cancellation, tails).
RTOL = {"betabinom": 1e-4, "beta": 5e-5, "gamma": 1e-4, "chi2": 1e-4, "poisson": 5e-5,
        "gennorm": 5e-5, "truncnorm": 5e-5, "nbinom": 5e-5, "binom": 5e-5, "t": 2e-5,
        "vonmises": 2e-5, "multivariate_normal": 2e-5, "pareto": 2e-5}


def _cmp(out, ref, rtol, atol=1e-6):
    out, ref = np.asarray(out), np.asarray(ref)
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dist,func,group,args", CASES, ids=IDS)
def test_value_parity(dist, func, group, args):
    kf, jf = getattr(getattr(kst, dist), func), getattr(getattr(jst, dist), func)
    ref = jax_result(f"value.{dist}.{func}-{group}", lambda: jf(*args), args)
    _cmp(kf(*args), ref, RTOL.get(dist, 5e-6))


# x64: the main argument group of each function.
X64_CASES = [c for c in CASES if c[2] in ("x", "q", "entropy", "cdf", "tails")]


@pytest.mark.parametrize("dist,func,group,args", X64_CASES,
                         ids=[f"{d}.{f}-{g}" for d, f, g, _ in X64_CASES])
def test_value_parity_x64(dist, func, group, args):
    args = tuple(a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype == f32 else a
                 for a in args)
    kf, jf = getattr(getattr(kst, dist), func), getattr(getattr(jst, dist), func)
    def ref():
        with jax.enable_x64(True):
            return jf(*args)
    ref = jax_result(f"x64.{dist}.{func}-{group}", ref, args)
    with kiln.enable_x64(True):
        _cmp(kf(*args), ref, 1e-9, 1e-12)


@pytest.mark.parametrize("dist", ["norm", "expon", "laplace", "logistic", "cauchy", "uniform",
                                  "gumbel_r", "t", "poisson", "binom", "bernoulli", "gamma"])
def test_python_scalar_dtypes(dist):
    mod_k, mod_j = getattr(kst, dist), getattr(jst, dist)
    f = "logpdf" if hasattr(mod_j, "logpdf") else "logpmf"
    nparams = len([p for p in inspect.signature(getattr(mod_j, f)).parameters.values()
                   if p.default is inspect.Parameter.empty])
    args = (1,) + (2,) * (nparams - 1)
    if dist in ("binom",):
        args = (1, 3, 0.5)
    if dist == "bernoulli":
        args = (1, 0.3)
    ref = jax_result(f"scalars.{dist}.{f}{args}", lambda: getattr(mod_j, f)(*args))
    _cmp(getattr(mod_k, f)(*args), ref, 2e-6)


# ----------------------------------------------------------------------------------------------
# gradients

GRADS = [
    ("norm", "logpdf", (0.3, 0.1, 1.5), (0, 1, 2)),
    ("norm", "logcdf", (-12.0, 0.0, 1.0), (0,)),
    ("norm", "logcdf", (0.7, 0.0, 1.0), (0,)),
    ("norm", "ppf", (0.3, 0.0, 1.0), (0,)),
    ("norm", "cdf", (0.3, 0.2, 2.0), (0, 1, 2)),
    ("beta", "logpdf", (0.3, 2.0, 3.0), (0, 1, 2)),
    ("beta", "cdf", (0.3, 2.0, 3.0), (0,)),
    ("gamma", "logpdf", (1.3, 2.0), (0, 1)),
    ("gamma", "cdf", (1.3, 2.0), (0, 1)),
    ("chi2", "logpdf", (1.3, 3.0), (0, 1)),
    ("t", "logpdf", (0.4, 3.0, 0.1, 1.2), (0, 1, 2, 3)),
    ("laplace", "logpdf", (0.4, 0.1, 1.2), (0, 1, 2)),
    ("logistic", "logpdf", (0.4, 0.1, 1.2), (0, 1, 2)),
    ("logistic", "logpdf", (0.0, 0.0, 1.0), (0,)),
    ("cauchy", "logpdf", (0.4, 0.1, 1.2), (0, 1, 2)),
    ("expon", "logpdf", (0.4, 0.1, 1.2), (0, 1, 2)),
    ("gumbel_r", "logsf", (0.4, 0.1, 1.2), (0, 1, 2)),
    ("gumbel_l", "logcdf", (0.4, 0.1, 1.2), (0, 1, 2)),
    ("poisson", "logpmf", (3.0, 2.5), (1,)),
    ("binom", "logpmf", (3.0, 5.0, 0.4), (2,)),
    ("bernoulli", "logpmf", (1.0, 0.3), (1,)),
    ("bernoulli", "logpmf", (0.0, 0.0), (1,)),
    ("geom", "logpmf", (3.0, 0.3), (1,)),
    ("nbinom", "logpmf", (3.0, 2.0, 0.4), (1, 2)),
    ("betabinom", "logpmf", (2.0, 5.0, 1.5, 2.5), (2, 3)),
    ("truncnorm", "logpdf", (0.3, -1.0, 2.0), (0, 1, 2)),
    ("truncnorm", "logcdf", (0.3, -1.0, 2.0), (0,)),
    ("pareto", "logpdf", (2.0, 1.5), (0, 1)),
    ("vonmises", "logpdf", (0.3, 2.0), (0, 1)),
    ("wrapcauchy", "logpdf", (0.3, 0.4), (0, 1)),
    ("gennorm", "logpdf", (0.3, 1.5), (0, 1)),
    ("uniform", "logpdf", (0.3, 0.0, 2.0), (2,)),
]


@pytest.mark.parametrize("dist,func,args,argnums", GRADS,
                         ids=[f"{d}.{f}-{i}" for i, (d, f, _, _) in enumerate(GRADS)])
def test_grad_parity(dist, func, args, argnums):
    kf, jf = getattr(getattr(kst, dist), func), getattr(getattr(jst, dist), func)
    out = kiln.grad(kf, argnums)(*args)
    ref = jax_result(f"grad.{dist}.{func}{args}{argnums}",
                     lambda: jax.grad(jf, argnums)(*args))
    for o, r in zip(out, ref):
        _cmp(o, r, 2e-4, 1e-6)


def test_grad_vector_distributions():
    x, mean, cov = ARGS["multivariate_normal"]["x"]
    kf = lambda x, m, c: kst.multivariate_normal.logpdf(x, m, c).sum()  # noqa: E731
    jf = lambda x, m, c: jst.multivariate_normal.logpdf(x, m, c).sum()  # noqa: E731
    ref = jax_result("grad.mvn", lambda: jax.grad(jf, (0, 1, 2))(x, mean, cov), (x, mean, cov))
    for o, r in zip(kiln.grad(kf, (0, 1, 2))(x, mean, cov), ref):
        _cmp(o, r, 1e-4, 1e-5)
    xd, alpha = ARGS["dirichlet"]["x"]
    ref = jax_result("grad.dirichlet", lambda: jax.grad(jst.dirichlet.logpdf, (0, 1))(xd, alpha),
                     (xd, alpha))
    for o, r in zip(kiln.grad(kst.dirichlet.logpdf, (0, 1))(xd, alpha), ref):
        _cmp(o, r, 1e-5, 1e-6)
    xm, n, p = ARGS["multinomial"]["x"]
    ref = jax_result("grad.multinomial", lambda: jax.grad(jst.multinomial.logpmf, 2)(xm, n, p),
                     (xm, n, p))
    _cmp(kiln.grad(kst.multinomial.logpmf, 2)(xm, n, p), ref, 1e-5, 1e-6)


# ----------------------------------------------------------------------------------------------
# jit and vmap

ELEMENTWISE_CASES = [c for c in CASES if c[0] not in ("dirichlet", "multinomial",
                                                      "multivariate_normal")
                     and c[1] != "entropy"]


@pytest.mark.parametrize("dist,func,group,args", ELEMENTWISE_CASES,
                         ids=[f"{d}.{f}-{g}" for d, f, g, _ in ELEMENTWISE_CASES])
def test_jit_vmap(dist, func, group, args):
    kf = getattr(getattr(kst, dist), func)
    eager = np.asarray(kf(*args))
    # The compiled code's transcendentals differ from NumPy's in the last bit; where a
    # formula cancels (log1p(-cdf), differences of logs) that is a larger relative error
    # of a small value, hence an absolute floor.
    np.testing.assert_allclose(np.asarray(kiln.jit(kf)(*args)), eager, rtol=1e-6, atol=1e-6,
                               equal_nan=True)
    in_axes = tuple(0 if np.ndim(a) else None for a in args)
    np.testing.assert_allclose(np.asarray(kiln.vmap(kf, in_axes)(*args)), eager, rtol=1e-6,
                               atol=1e-30, equal_nan=True)


def test_vector_distributions_jit_vmap():
    x, mean, cov = ARGS["multivariate_normal"]["x"]
    f = kst.multivariate_normal.logpdf
    eager = np.asarray(f(x, mean, cov))
    np.testing.assert_allclose(kiln.jit(f)(x, mean, cov), eager, rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(f, (0, None, None))(x, mean, cov), eager, rtol=1e-6)
    covs = np.stack([cov, 2 * cov])
    jf = jst.multivariate_normal.logpdf
    xs = np.abs(np.random.default_rng(283).normal(size=(3, 4))).astype(f32)
    xs = xs / xs.sum(0, keepdims=True)
    alpha = np.array([1.0, 2.0, 3.0], f32)
    refs = jax_result("vector_jit_vmap", lambda: (
        jax.vmap(jf, (None, None, 0))(x, mean, covs), jf(x[:2], mean, covs), jf(x, mean, 1.7),
        jf(x[:, 0], 0.2, 1.7), jst.dirichlet.logpdf(xs, alpha),
        jst.dirichlet.logpdf(xs[:2], alpha)), (x, mean, covs, xs, alpha))
    _cmp(kiln.vmap(f, (None, None, 0))(x, mean, covs), refs[0], 2e-5)
    # batched covariance and scalar/isotropic forms
    _cmp(f(x[:2], mean, covs), refs[1], 2e-5)
    _cmp(f(x, mean, 1.7), refs[2], 2e-5)
    _cmp(f(x[:, 0], 0.2, 1.7), refs[3], 2e-5)
    _cmp(kst.dirichlet.logpdf(xs, alpha), refs[4], 2e-5)
    _cmp(kst.dirichlet.logpdf(xs[:2], alpha), refs[5], 2e-5)
    _cmp(kiln.vmap(kst.dirichlet.logpdf, (1, None))(xs, alpha), refs[4], 2e-5)


def test_multinomial_errors():
    with pytest.raises(ValueError, match="integer"):
        kst.multinomial.logpmf(np.array([1.0, 2.0]), 3, np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="one-dimensional"):
        kst.dirichlet.logpdf(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(NotImplementedError):
        kst.multivariate_normal.logpdf(np.ones(2), np.ones(2), np.eye(2), allow_singular=True)


# ----------------------------------------------------------------------------------------------
# mode, rankdata, sem

MODE_CASES = [
    (np.array([[1, 2, 2, 3], [3, 3, 1, 1], [5, 4, 4, 5]], np.int32), {}),
    (np.array([[1, 2, 2, 3], [3, 3, 1, 1], [5, 4, 4, 5]], np.int32), {"axis": 1}),
    (np.array([[1, 2, 2, 3], [3, 3, 1, 1], [5, 4, 4, 5]], np.int32), {"axis": None}),
    (np.array([[1, 2, 2, 3], [3, 3, 1, 1], [5, 4, 4, 5]], np.int32),
     {"axis": 1, "keepdims": True}),
    (np.array([[1, 2, 2, 3], [3, 3, 1, 1]], np.int32), {"axis": None, "keepdims": True}),
    (np.array([2.5, 1.0, 2.5, -1.0, -1.0, np.nan, np.nan, np.nan], f32), {}),
    (np.array([2.5, 1.0, 2.5, -1.0, -1.0, np.nan], f32), {}),
    (np.array([np.inf, np.inf, 1.0, 1.0], f32), {}),
    (np.array([True, False, True]), {}),
    (np.array(7.0, f32), {}),
    (R.integers(0, 4, size=(3, 4, 5)).astype(np.int32), {"axis": -2}),
]


@pytest.mark.parametrize("a,kw", MODE_CASES, ids=[str(i) for i in range(len(MODE_CASES))])
def test_mode(a, kw):
    out = kst.mode(a, **kw)
    ref = jax_result(f"mode{kw}", lambda: tuple(jst.mode(a, **kw)), a)
    assert isinstance(out, kst.ModeResult)
    _cmp(out.mode, ref[0], 0, 0)
    _cmp(out.count, ref[1], 0, 0)


def test_mode_jit_and_errors():
    a = np.random.default_rng(338).integers(0, 3, size=(4, 6)).astype(np.int32)
    out = kiln.jit(lambda x: kst.mode(x, axis=1))(a)
    ref = jax_result("mode_jit", lambda: tuple(jst.mode(a, axis=1)), a)
    _cmp(out.mode, ref[0], 0, 0)
    _cmp(out.count, ref[1], 0, 0)
    with pytest.raises(ValueError, match="nan_policy"):
        kst.mode(a, nan_policy="bad")
    with pytest.raises(NotImplementedError):
        kst.mode(a, nan_policy="omit")


RANK_DATA = [
    np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0], f32),
    np.array([2, 2, 2, 1], np.int32),
    np.array([1.0, np.nan, 0.5], f32),
    R.integers(0, 5, size=(3, 6)).astype(np.int32),
]


@pytest.mark.parametrize("method", ["average", "min", "max", "dense", "ordinal"])
@pytest.mark.parametrize("idx", range(len(RANK_DATA)))
def test_rankdata(method, idx):
    a = RANK_DATA[idx]
    axes = (0, 1, -1) if a.ndim == 2 else ()
    refs = jax_result(f"rankdata.{method}", lambda: (
        jst.rankdata(a, method), *(jst.rankdata(a, method, axis=ax) for ax in axes)), a)
    _cmp(kst.rankdata(a, method), refs[0], 0, 0)
    for axis, ref in zip(axes, refs[1:]):
        _cmp(kst.rankdata(a, method, axis=axis), ref, 0, 0)


def test_rankdata_jit_and_errors():
    a = RANK_DATA[0]
    _cmp(kiln.jit(kst.rankdata)(a), jax_result("rankdata", lambda: jst.rankdata(a), a), 0, 0)
    with pytest.raises(ValueError, match="unknown method"):
        kst.rankdata(a, "nope")


@pytest.mark.parametrize("kw", [{}, {"axis": 1}, {"axis": None}, {"ddof": 0},
                                {"axis": 0, "keepdims": True}, {"nan_policy": "omit"}])
def test_sem(kw):
    a = np.random.default_rng(379).normal(size=(4, 5)).astype(f32)
    if kw.get("nan_policy") == "omit":
        a[1, 2] = np.nan
    _cmp(kst.sem(a, **kw), jax_result(f"sem{kw}", lambda: jst.sem(a, **kw), a), 2e-6)


def test_sem_ints():
    a = np.arange(12).reshape(3, 4)
    _cmp(kst.sem(a), jax_result("sem_ints", lambda: jst.sem(a), a), 2e-6)
    _ = jjnp  # (jax.numpy imported for parity helpers)


def test_multivariate_normal_without_lax_linalg(monkeypatch):
    # The unrolled Cholesky/forward-substitution fallback agrees with the lax.linalg path.
    x, mean, cov = ARGS["multivariate_normal"]["x"]
    covs = np.stack([cov, 2 * cov])
    with_linalg = np.asarray(kst.multivariate_normal.logpdf(x[:2], mean, covs))
    monkeypatch.setattr(kiln.lax, "linalg", None, raising=False)
    without = kst.multivariate_normal.logpdf(x[:2], mean, covs)
    np.testing.assert_allclose(np.asarray(without), with_linalg, rtol=1e-5)
    refs = jax_result("mvn_without_linalg", lambda: (
        jst.multivariate_normal.logpdf(x[:2], mean, covs),
        jax.grad(lambda c: jst.multivariate_normal.logpdf(x, mean, c).sum())(cov)),
        (x, mean, covs))
    _cmp(without, refs[0], 2e-5)
    g = kiln.grad(lambda c: kst.multivariate_normal.logpdf(x, mean, c).sum())(cov)
    _cmp(g, refs[1], 1e-4, 1e-5)


_WEAK_CASES = {
    "norm.logpdf": lambda st, x: st.norm.logpdf(x),
    "norm.pdf": lambda st, x: st.norm.pdf(x),
    "t.logpdf": lambda st, x: st.t.logpdf(x, 3.0),
    "gamma.logpdf": lambda st, x: st.gamma.logpdf(x, 2.0),
    "beta.logpdf": lambda st, x: st.beta.logpdf(x * 0.1, 2.0, 3.0),
    "cauchy.logpdf": lambda st, x: st.cauchy.logpdf(x),
    "laplace.logpdf": lambda st, x: st.laplace.logpdf(x),
    "logistic.logpdf": lambda st, x: st.logistic.logpdf(x),
    "expon.logpdf": lambda st, x: st.expon.logpdf(x),
    "poisson.logpmf": lambda st, x: st.poisson.logpmf(x, 2.0),
    "chi2.logpdf": lambda st, x: st.chi2.logpdf(x, 3.0),
}


@pytest.mark.parametrize("name", sorted(_WEAK_CASES))
def test_weak_scalar_inputs_give_weak_results_as_jax(name):
    # JAX's constants follow a weakly typed scalar argument (lax._const), so a log-density
    # of a Python float stays weak: BlackJAX's jitted step then keeps one trace per run.
    jax = pytest.importorskip("jax")
    f = _WEAK_CASES[name]
    xs = (1.0, 2, np.float32(1.5))
    wants = jax_result(f"weak.{name}", lambda: (
        tuple(f(jax.scipy.stats, x) for x in xs),
        tuple(jax.value_and_grad(lambda x: f(jax.scipy.stats, x))(1.0))))
    for x, want in zip(xs, wants[0]):
        got = f(kiln.scipy.stats, x)
        assert (got.dtype, got.weak_type) == (want.dtype, want.weak_type), x
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-6, atol=2e-6)
    g = kiln.value_and_grad(lambda x: f(kiln.scipy.stats, x))(1.0)
    assert [v.weak_type for v in g] == [v.weak_type for v in wants[1]]
