"""Statistical checks of every kiln.random sampler: Kolmogorov-Smirnov tests against
SciPy's distributions, chi-square tests for discrete ones, and moments.

The samples are deterministic (fixed keys), so these tests cannot flake; the
thresholds are loose enough (p > 1e-4) that a correct sampler passes for any key.
"""
import numpy as np
import pytest
from scipy import stats

import kiln
import kiln.random as kr

N = 20_000
P_MIN = 1e-4


def key(i=0):
    return kr.key(100 + i)


def ks(samples, cdf, *args):
    res = stats.kstest(np.asarray(samples, np.float64).ravel(), cdf, args=args)
    assert res.pvalue > P_MIN, res


def chi2_discrete(samples, pmf, support):
    s = np.asarray(samples).ravel().astype(np.int64)
    counts = np.array([(s == v).sum() for v in support], np.float64)
    probs = np.array([pmf(v) for v in support])
    keep = probs * s.size >= 5
    other = s.size - counts[keep].sum()
    p_other = 1 - probs[keep].sum()
    obs = np.append(counts[keep], other)
    exp = np.append(probs[keep], p_other) * s.size
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1]
        exp = exp * obs.sum() / exp.sum()
    res = stats.chisquare(obs, exp)
    assert res.pvalue > P_MIN, res


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_uniform(dtype):
    x = np.asarray(kr.uniform(key(), (N,), dtype, -2., 3.)).astype(np.float64)
    assert x.min() >= -2 and x.max() < 3
    ks(x, stats.uniform(-2, 5).cdf)


def test_uniform_f64():
    with kiln.enable_x64():
        x = np.asarray(kr.uniform(key(), (N,)))
        assert x.dtype == np.float64
    ks(x, stats.uniform.cdf)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_normal(dtype):
    x = np.asarray(kr.normal(key(1), (N,), dtype)).astype(np.float64)
    ks(x, stats.norm.cdf)
    assert abs(x.mean()) < 0.05 and abs(x.std() - 1) < 0.05


def test_normal_complex():
    z = np.asarray(kr.normal(key(2), (N,), np.complex64))
    ks(z.real * np.sqrt(2), stats.norm.cdf)
    ks(z.imag * np.sqrt(2), stats.norm.cdf)


def test_bits():
    b = np.asarray(kr.bits(key(3), (N,), np.uint8))
    chi2_discrete(b, lambda v: 1 / 256, range(256))
    b32 = np.asarray(kr.bits(key(3), (N,)))
    ks(b32 / 2.0 ** 32, stats.uniform.cdf)


def test_randint():
    x = np.asarray(kr.randint(key(4), (N,), -3, 7))
    assert x.min() == -3 and x.max() == 6
    chi2_discrete(x, lambda v: 0.1, range(-3, 7))


def test_bernoulli_rademacher():
    for mode in ("low", "high"):
        b = np.asarray(kr.bernoulli(key(5), 0.3, (N,), mode=mode))
        assert b.dtype == bool and abs(b.mean() - 0.3) < 0.015
    r = np.asarray(kr.rademacher(key(6), (N,)))
    assert set(np.unique(r)) == {-1, 1} and abs(r.mean()) < 0.03


def test_permutation_and_shuffle_uniformity():
    # Every position equally likely to receive element 0.
    keys = kr.split(key(7), 2000)
    pos = np.array([int(np.argmax(np.asarray(kr.permutation(k, 5)) == 0)) for k in keys])
    chi2_discrete(pos, lambda v: 0.2, range(5))
    p = np.asarray(kr.permutation(key(8), 1000))
    assert sorted(p.tolist()) == list(range(1000))


def test_choice():
    x = np.asarray(kr.choice(key(9), 5, (N,), p=np.array([0.1, 0.2, 0.3, 0.4, 0.0],
                                                          np.float32)))
    chi2_discrete(x, lambda v: [0.1, 0.2, 0.3, 0.4, 0.0][v], range(4))
    assert (x != 4).all()
    y = np.asarray(kr.choice(key(10), 20, (10,), replace=False))
    assert len(set(y.tolist())) == 10


def test_categorical():
    logits = np.log(np.array([0.1, 0.2, 0.7], np.float32))
    x = np.asarray(kr.categorical(key(11), logits, shape=(N,)))
    chi2_discrete(x, lambda v: [0.1, 0.2, 0.7][v], range(3))


@pytest.mark.parametrize("name,sample,dist", [
    ("cauchy", lambda k: kr.cauchy(k, (N,)), stats.cauchy()),
    ("exponential", lambda k: kr.exponential(k, (N,)), stats.expon()),
    ("gumbel", lambda k: kr.gumbel(k, (N,)), stats.gumbel_r()),
    ("gumbel_high", lambda k: kr.gumbel(k, (N,), mode="high"), stats.gumbel_r()),
    ("gumbel_highest", lambda k: kr.gumbel(k, (N,), mode="highest"), stats.gumbel_r()),
    ("laplace", lambda k: kr.laplace(k, (N,)), stats.laplace()),
    ("logistic", lambda k: kr.logistic(k, (N,)), stats.logistic()),
    ("pareto", lambda k: kr.pareto(k, 3.0, (N,)), stats.pareto(3.0)),
    ("maxwell", lambda k: kr.maxwell(k, (N,)), stats.maxwell()),
    ("double_sided_maxwell", lambda k: np.abs(np.asarray(
        kr.double_sided_maxwell(k, 0.0, 1.0, (N,)))), stats.maxwell()),
    ("weibull_min", lambda k: kr.weibull_min(k, 2.0, 1.5, (N,)),
     stats.weibull_min(1.5, scale=2.0)),
    ("rayleigh", lambda k: kr.rayleigh(k, 2.0, (N,)), stats.rayleigh(scale=2.0)),
    ("wald", lambda k: kr.wald(k, 1.5, (N,)), stats.invgauss(1.5)),
    ("triangular", lambda k: kr.triangular(k, -1.0, 0.5, 2.0, (N,)),
     stats.triang(0.5, loc=-1.0, scale=3.0)),
    ("lognormal", lambda k: kr.lognormal(k, 0.5, (N,)), stats.lognorm(0.5)),
    ("truncated_normal", lambda k: kr.truncated_normal(k, -1.0, 2.0, (N,)),
     stats.truncnorm(-1.0, 2.0)),
    ("gamma", lambda k: kr.gamma(k, 2.5, (N,)), stats.gamma(2.5)),
    ("gamma_small", lambda k: kr.gamma(k, 0.3, (N,)), stats.gamma(0.3)),
    ("loggamma", lambda k: kiln.numpy.exp(kr.loggamma(k, 0.3, (N,)))
     if hasattr(kiln.numpy, "exp") else np.exp(np.asarray(kr.loggamma(k, 0.3, (N,)))),
     stats.gamma(0.3)),
    ("beta", lambda k: kr.beta(k, 2.0, 5.0, (N,)), stats.beta(2.0, 5.0)),
    ("t", lambda k: kr.t(k, 4.0, (N,)), stats.t(4.0)),
    ("chisquare", lambda k: kr.chisquare(k, 3.0, (N,)), stats.chi2(3.0)),
    ("f", lambda k: kr.f(k, 4.0, 7.0, (N,)), stats.f(4.0, 7.0)),
    ("generalized_normal", lambda k: kr.generalized_normal(k, 1.5, (N,)), stats.gennorm(1.5)),
])
def test_continuous_ks(name, sample, dist):
    ks(sample(key(12)), dist.cdf)


def test_dirichlet():
    alpha = np.array([0.5, 1.5, 3.0], np.float32)
    x = np.asarray(kr.dirichlet(key(13), alpha, (N,)))
    np.testing.assert_allclose(x.sum(-1), 1, rtol=1e-5)
    ks(x[:, 0], stats.beta(0.5, 4.5).cdf)
    np.testing.assert_allclose(x.mean(0), alpha / alpha.sum(), atol=0.01)


def test_multivariate_normal():
    cov = np.array([[2.0, 0.5], [0.5, 1.0]], np.float32)
    mean = np.array([1.0, -2.0], np.float32)
    for method in ("cholesky", "eigh", "svd"):
        x = np.asarray(kr.multivariate_normal(key(14), mean, cov, (N,), method=method))
        np.testing.assert_allclose(x.mean(0), mean, atol=0.05)
        np.testing.assert_allclose(np.cov(x.T), cov, atol=0.07)


def test_orthogonal():
    q = np.asarray(kr.orthogonal(key(15), 5, (10,)), np.float64)
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), np.broadcast_to(np.eye(5),
                                                                            (10, 5, 5)),
                               atol=1e-5)
    r = np.asarray(kr.orthogonal(key(16), 3, m=5), np.float64)
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-5)
    # Haar measure: the (0, 0) entry of O(n) has the law of a coordinate of a uniform
    # point on the sphere: x = 2 * Beta((n-1)/2, (n-1)/2) - 1.
    qs = np.asarray(kr.orthogonal(key(17), 3, (4000,)))[:, 0, 0]
    ks((qs + 1) / 2, stats.beta(1.0, 1.0).cdf)


def test_ball():
    x = np.asarray(kr.ball(key(18), 3, 2, (N,)), np.float64)
    r = np.linalg.norm(x, axis=-1)
    assert r.max() <= 1 + 1e-6
    ks(r, stats.powerlaw(3).cdf)
    y = np.asarray(kr.ball(key(19), 2, 1.0, (N,)), np.float64)
    assert np.abs(y).sum(-1).max() <= 1 + 1e-6


def test_poisson():
    for lam in (3.0, 40.0):
        x = np.asarray(kr.poisson(key(20), lam, (N,)))
        assert x.dtype == np.int32
        support = range(int(lam + 6 * np.sqrt(lam)) + 1)
        chi2_discrete(x, stats.poisson(lam).pmf, support)
    assert (np.asarray(kr.poisson(key(21), 0.0, (10,))) == 0).all()


def test_binomial():
    for n, p in ((10, 0.3), (500, 0.2), (500, 0.9)):
        x = np.asarray(kr.binomial(key(22), n, p, (N,)))
        assert x.dtype == np.float32
        chi2_discrete(x, stats.binom(n, p).pmf, range(n + 1))
    bad = np.asarray(kr.binomial(key(23), np.array([-1.0, 5.0], np.float32),
                                 np.array([0.5, np.nan], np.float32)))
    assert np.isnan(bad).all()


def test_multinomial():
    p = np.array([0.2, 0.3, 0.5], np.float32)
    x = np.asarray(kr.multinomial(key(24), 50.0, p, shape=(N, 3)))
    assert (x.sum(-1) == 50).all()
    np.testing.assert_allclose(x.mean(0), 50 * p, rtol=0.02)
    np.testing.assert_allclose(np.cov(x.T)[0, 1], -50 * 0.2 * 0.3, rtol=0.1)


def test_geometric():
    x = np.asarray(kr.geometric(key(25), 0.3, (N,)))
    assert x.min() >= 1
    chi2_discrete(x, stats.geom(0.3).pmf, range(1, 40))
