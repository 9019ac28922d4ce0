"""``kiln.scipy.stats.gaussian_kde`` against SciPy's and JAX's: bandwidth rules, weights,
densities, integrals, resampling bits, the pytree, ``jit``/``grad``/``vmap``, errors."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.stats as sst

import kiln
import kiln.numpy as knp
from kiln.config import config_context
from kiln.scipy.stats import gaussian_kde

_rng = np.random.default_rng(5)
DATA2 = _rng.standard_normal((2, 40))
DATA1 = _rng.standard_normal(25) * 1.5 + 0.3
W = _rng.uniform(0.2, 1.0, size=40)
PTS2 = _rng.standard_normal((2, 7))
PTS1 = np.linspace(-3, 3, 9)

BWS = [None, "scott", "silverman", 0.35, lambda kde: kde.neff ** -0.25]
BW_IDS = ["default", "scott", "silverman", "scalar", "callable"]


@pytest.mark.parametrize("bw", BWS, ids=BW_IDS)
@pytest.mark.parametrize("weighted", [False, True])
def test_density_against_scipy(bw, weighted):
    w = W if weighted else None
    with config_context(jax_enable_x64=True):
        k = gaussian_kde(DATA2, bw_method=bw, weights=w)
        s = sst.gaussian_kde(DATA2, bw_method=bw, weights=w)
        np.testing.assert_allclose(np.asarray(k.evaluate(PTS2)), s.evaluate(PTS2), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(k(PTS2)), s(PTS2), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(k.pdf(PTS2)), s.pdf(PTS2), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(k.logpdf(PTS2)), s.logpdf(PTS2), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(k.covariance), s.covariance, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(k.inv_cov), s.inv_cov, rtol=1e-10)
        np.testing.assert_allclose(float(k.neff), s.neff, rtol=1e-12)
        assert (k.d, k.n) == (s.d, s.n)


def test_one_dimensional_methods_against_scipy():
    with config_context(jax_enable_x64=True):
        k = gaussian_kde(DATA1)
        s = sst.gaussian_kde(DATA1)
        np.testing.assert_allclose(np.asarray(k.evaluate(PTS1)), s.evaluate(PTS1), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(k.logpdf(PTS1)), s.logpdf(PTS1), rtol=1e-10)
        np.testing.assert_allclose(float(k.integrate_box_1d(-0.5, 1.2)),
                                   s.integrate_box_1d(-0.5, 1.2), rtol=1e-10)
        np.testing.assert_allclose(float(k.integrate_gaussian(0.4, 0.8)),
                                   s.integrate_gaussian(0.4, 0.8), rtol=1e-10)
        other = DATA1[:9] * 0.5
        np.testing.assert_allclose(float(k.integrate_kde(gaussian_kde(other))),
                                   s.integrate_kde(sst.gaussian_kde(other)), rtol=1e-10)
        # A single point given as (d,) for a d-dimensional estimator.
        k2 = gaussian_kde(DATA2)
        s2 = sst.gaussian_kde(DATA2)
        np.testing.assert_allclose(np.asarray(k2.evaluate(PTS2[:, 0])), s2(PTS2[:, 0]),
                                   rtol=1e-10)
        np.testing.assert_allclose(float(k2.integrate_gaussian(np.zeros(2), np.eye(2))),
                                   s2.integrate_gaussian(np.zeros(2), np.eye(2)), rtol=1e-10)
        np.testing.assert_allclose(float(k2.integrate_kde(gaussian_kde(DATA2[:, :5]))),
                                   s2.integrate_kde(sst.gaussian_kde(DATA2[:, :5])), rtol=1e-10)


def test_dtypes_and_pytree():
    k = gaussian_kde(np.arange(10))
    assert k.dataset.dtype == k.weights.dtype == k.covariance.dtype == np.float32
    assert k.pdf(3).dtype == np.float32
    k = gaussian_kde(DATA2.astype(np.float32))
    leaves, tree = kiln.tree_util.tree_flatten(k)
    assert len(leaves) == 5
    back = kiln.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(back, gaussian_kde) and back.n == 40
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.neff = 3.0


def test_resample_shapes_and_statistics():
    k = gaussian_kde(DATA2.astype(np.float32), weights=W)
    s = k.resample(kiln.random.key(0), (2000,))
    assert s.shape == (2, 2000) and s.dtype == np.float32
    mean = np.average(DATA2, axis=1, weights=W)
    np.testing.assert_allclose(np.asarray(s).mean(axis=1), mean, atol=0.12)
    assert gaussian_kde(DATA1).resample(kiln.random.key(1)).shape == (1,)


def test_transformations():
    k = gaussian_kde(DATA2.astype(np.float32))
    pts = PTS2.astype(np.float32)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda kk, p: kk.logpdf(p))(k, pts)),
                               np.asarray(k.logpdf(pts)), rtol=1e-5)
    # vmap over estimators built from a batch of datasets, and over points.
    batch = np.stack([DATA1, DATA1 * 2.0]).astype(np.float32)
    got = kiln.vmap(lambda d: gaussian_kde(d).pdf(0.25))(batch)
    want = [sst.gaussian_kde(b.astype(np.float64)).pdf(0.25)[0] for b in batch]
    np.testing.assert_allclose(np.asarray(got)[:, 0], want, rtol=1e-5)
    kk = gaussian_kde(DATA1.astype(np.float32))
    got = kiln.vmap(kk.logpdf)(PTS1.astype(np.float32))
    np.testing.assert_allclose(np.asarray(got)[:, 0], sst.gaussian_kde(DATA1).logpdf(PTS1),
                               rtol=1e-5)
    kbatch = kiln.vmap(gaussian_kde)(batch)            # an estimator with batched leaves
    assert kbatch.dataset.shape == (2, 1, 25)


def test_grad_against_finite_differences():
    def f(data, pts):
        k = gaussian_kde(data, weights=knp.arange(1.0, 26.0))
        return knp.sum(k.logpdf(pts)) + k.integrate_box_1d(-0.3, 0.9)

    with config_context(jax_enable_x64=True):
        g = np.asarray(kiln.grad(f)(DATA1, PTS1))
        gp = np.asarray(kiln.jit(kiln.grad(f, argnums=1))(DATA1, PTS1))
        eps = 1e-6
        num = np.array([(float(f(DATA1 + eps * e, PTS1)) - float(f(DATA1 - eps * e, PTS1)))
                        / (2 * eps) for e in np.eye(25)])
        nump = np.array([(float(f(DATA1, PTS1 + eps * e)) - float(f(DATA1, PTS1 - eps * e)))
                         / (2 * eps) for e in np.eye(9)])
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gp, nump, rtol=1e-5, atol=1e-7)


def test_errors():
    k = gaussian_kde(DATA2)
    k1 = gaussian_kde(DATA1)
    with pytest.raises(NotImplementedError, match="bandwidth"):
        k.set_bandwidth("scott")
    with pytest.raises(NotImplementedError, match="integrate_box_1d"):
        k.integrate_box(np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="multiple elements"):
        gaussian_kde(np.ones(1))
    with pytest.raises(ValueError, match="bw_method"):
        gaussian_kde(DATA2, bw_method="nope")
    with pytest.raises(ValueError, match="dimension"):
        k.evaluate(np.ones((3, 2)))
    with pytest.raises(ValueError, match="length n"):
        gaussian_kde(DATA2, weights=np.ones(3))
    with pytest.raises(ValueError, match="one-dimensional"):
        gaussian_kde(DATA2, weights=np.ones((40, 2)))
    with pytest.raises(NotImplementedError, match="complex"):
        gaussian_kde(DATA2 + 1j)
    with pytest.raises(NotImplementedError, match="complex"):
        k.logpdf(PTS2 + 1j)
    with pytest.raises(ValueError, match="scalars"):
        k1.integrate_box_1d(np.zeros(2), 1.0)
    with pytest.raises(ValueError, match="1D"):
        k.integrate_box_1d(0.0, 1.0)
    with pytest.raises(ValueError, match="dimensionality"):
        k.integrate_kde(k1)
    with pytest.raises(ValueError, match="mean"):
        k.integrate_gaussian(np.zeros(3), np.eye(2))
    with pytest.raises(TypeError):
        gaussian_kde([1.0, 2.0])


def test_against_jax():
    """Values, dtypes and resampled bits against ``jax.scipy.stats.gaussian_kde``."""
    jax = pytest.importorskip("jax")
    from jax.scipy.stats import gaussian_kde as jkde
    d2, w, p2 = DATA2.astype(np.float32), W.astype(np.float32), PTS2.astype(np.float32)
    d1 = DATA1.astype(np.float32)

    def run(cls, key):
        k = cls(d2, bw_method="silverman", weights=w)
        k1 = cls(d1, bw_method=0.5)
        return [k.evaluate(p2), k.logpdf(p2), k.covariance, k.neff,
                k1.integrate_box_1d(-0.5, 1.0), k1.integrate_gaussian(0.1, 0.6),
                k1.integrate_kde(cls(d1[:7])), k.resample(key(2), (5,))]
    want = jax.jit(lambda: run(jkde, jax.random.key))()
    got = run(gaussian_kde, kiln.random.key)
    for i, (g, wv) in enumerate(zip(got, want)):
        assert g.dtype == wv.dtype and g.shape == wv.shape, i
        np.testing.assert_allclose(np.asarray(g), np.asarray(wv), rtol=2e-5, atol=1e-6,
                                   err_msg=str(i))
