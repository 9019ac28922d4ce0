"""``kiln.scipy.interpolate.RegularGridInterpolator`` against SciPy and JAX: 1-D and 2-D
grids, linear and nearest, points outside (fill value, extrapolation), trailing value
dimensions, errors, and the interpolator as a pytree through jit/grad/vmap."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.scipy.interpolate import RegularGridInterpolator

si = pytest.importorskip("scipy.interpolate")
R = np.random.default_rng(0)
SPACES = [((0., 10., 10),), ((-15., 20., 12), (3., 4., 24))]


def _case(spaces):
    pts = tuple(np.linspace(*s) for s in spaces)
    vals = R.standard_normal(tuple(len(p) for p in pts))
    q = np.squeeze(np.stack([np.linspace(s[0] - 0.2 * (s[1] - s[0]),
                                         s[1] + 0.2 * (s[1] - s[0]), 50) for s in spaces], 1))
    return pts, vals, q


@pytest.mark.parametrize("method", ["linear", "nearest"])
@pytest.mark.parametrize("spaces", SPACES, ids=["1d", "2d"])
@pytest.mark.parametrize("fill", [np.nan, None, -7.0])
def test_matches_scipy(spaces, method, fill):
    pts, vals, q = _case(spaces)
    want = si.RegularGridInterpolator(pts, vals, method, False, fill)(q)
    got = RegularGridInterpolator(pts, vals, method, False, fill)(q)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_tuple_queries_and_trailing_dimensions():
    pts = (np.linspace(0, 1, 4), np.linspace(0, 2, 5))
    vals = R.standard_normal((4, 5, 3))
    xs, ys = np.meshgrid(np.linspace(0, 1, 6), np.linspace(0, 2, 7), indexing="ij")
    got = RegularGridInterpolator(pts, vals)((xs, ys))
    want = si.RegularGridInterpolator(pts, vals)((xs, ys))
    assert got.shape == (6, 7, 3)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_errors():
    pts, vals = (np.linspace(0, 1, 4),), np.arange(4.0)
    with pytest.raises(ValueError, match="method 'cubic' is not defined"):
        RegularGridInterpolator(pts, vals, method="cubic")
    with pytest.raises(NotImplementedError, match="bounds_error"):
        RegularGridInterpolator(pts, vals, bounds_error=True)
    with pytest.raises(ValueError, match="2 point arrays, but values has 1 dimensions"):
        RegularGridInterpolator(pts * 2, vals)
    with pytest.raises(ValueError, match="fill_value must be either 'None'"):
        RegularGridInterpolator(pts, vals, fill_value=1j)
    with pytest.raises(ValueError, match="sample points xi have dimension"):
        RegularGridInterpolator(pts, vals)(np.zeros((3, 2)))


def test_pytree_through_transformations():
    r = RegularGridInterpolator((np.linspace(0, 1, 5),), np.arange(5.0))
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda r, q: r(q))(r, np.array([0.1, 1.2]))),
                               [0.4, np.nan])
    g = kiln.grad(lambda v: jnp.sum(RegularGridInterpolator(
        (np.linspace(0, 1, 5),), v)(np.array([0.1, 0.5]))))(jnp.arange(5.0))
    np.testing.assert_allclose(np.asarray(g), [0.6, 0.4, 1.0, 0.0, 0.0], rtol=1e-6)
    v = kiln.vmap(lambda q: r(q))(np.array([[0.1], [0.9]]))
    np.testing.assert_allclose(np.asarray(v).ravel(), [0.4, 3.6], rtol=1e-6)


def test_matches_jax_bits():
    ji = pytest.importorskip("jax.scipy.interpolate")
    for spaces in SPACES:
        pts, vals, q = _case(spaces)
        for method in ("linear", "nearest"):
            want = np.asarray(ji.RegularGridInterpolator(pts, vals, method)(q))
            got = np.asarray(RegularGridInterpolator(pts, vals, method)(q))
            np.testing.assert_array_equal(got, want)
