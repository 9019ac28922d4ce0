"""``kiln.scipy.ndimage.map_coordinates`` against SciPy (and JAX when installed): orders 0
and 1, every mode, integer and float inputs, errors, jit/grad/vmap."""
import itertools

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.scipy import ndimage

scipy_ndimage = pytest.importorskip("scipy.ndimage")
R = np.random.default_rng(0)
SCIPY_MODE = {"constant": "grid-constant", "nearest": "nearest", "wrap": "grid-wrap",
              "mirror": "mirror", "reflect": "reflect"}


@pytest.mark.parametrize("shape,order,mode", list(itertools.product(
    [(5,), (4, 6), (3, 4, 2)], [0, 1], sorted(SCIPY_MODE))))
def test_matches_scipy(shape, order, mode):
    x = R.standard_normal(shape).astype(np.float32)
    coords = [R.uniform(-3, n + 2, (9,)).astype(np.float32) for n in shape]
    if order == 0:      # away from the .5 ties (SciPy rounds them its own way)
        coords = [np.round(c) + 0.25 for c in coords]
    got = ndimage.map_coordinates(x, coords, order, mode, cval=1.5)
    want = scipy_ndimage.map_coordinates(x.astype(np.float64), np.asarray(coords, np.float64),
                                         order=order, mode=SCIPY_MODE[mode], cval=1.5)
    assert got.dtype == np.float32 and got.shape == (9,)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_integer_input_rounds_half_away_from_zero():
    x = np.array([0, 1, 2, 3], np.int32)
    got = ndimage.map_coordinates(x, [np.array([0.5, 1.5, 2.25, -0.5], np.float32)], 1)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), [1, 2, 2, 0])   # 0.5, 1.5 -> 1, 2


def test_errors():
    x = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="sequence of length input.ndim"):
        ndimage.map_coordinates(x, [np.zeros(2)], 1)
    with pytest.raises(NotImplementedError, match="requires order<=1"):
        ndimage.map_coordinates(x, [np.zeros(2)] * 2, 3)
    with pytest.raises(NotImplementedError, match="does not yet support mode"):
        ndimage.map_coordinates(x, [np.zeros(2)] * 2, 1, mode="grid-wrap")


def test_transformations():
    x = R.standard_normal((4, 5)).astype(np.float32)
    c = [np.array([1.5, 2.2], np.float32), np.array([0.3, 3.7], np.float32)]
    f = lambda x, c: jnp.sum(ndimage.map_coordinates(x, c, 1, "nearest"))  # noqa: E731
    gx, gc = kiln.grad(f, argnums=(0, 1))(x, c)
    eps = 1e-3
    fd = (f(x, [c[0] + np.float32(eps), c[1]]) - f(x, [c[0] - np.float32(eps), c[1]])) / (2 * eps)
    np.testing.assert_allclose(np.asarray(gc[0]).sum(), float(fd), rtol=1e-2)
    assert float(np.asarray(gx).sum()) == pytest.approx(2.0)          # weights sum to 1
    v = kiln.vmap(lambda c0: ndimage.map_coordinates(x, [c0, c[1]], 1))(
        np.stack([c[0], c[0] + 1]))
    np.testing.assert_allclose(np.asarray(v[0]), np.asarray(
        ndimage.map_coordinates(x, c, 1)), rtol=1e-6)


def test_matches_jax():
    jax_ndimage = pytest.importorskip("jax.scipy.ndimage")
    for mode in sorted(SCIPY_MODE):
        x = R.standard_normal((4, 6)).astype(np.float32)
        coords = [R.uniform(-3, n + 2, (50,)).astype(np.float32) for n in x.shape]
        want = np.asarray(jax_ndimage.map_coordinates(x, coords, 1, mode, 0.5))
        got = np.asarray(ndimage.map_coordinates(x, coords, 1, mode, 0.5))
        # Within one rounding: where XLA contracts the corner sum into an FMA kiln may
        # contract the other product (docs/compatibility.md, "FMA contraction").
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=3e-7)
