"""Complex ``gamma``/``loggamma``/``erfcx`` against jax.scipy.special and SciPy (branch cut
of loggamma on the negative real axis, poles and NaN, jit/vmap, forward-mode derivative)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.scipy import special as ks

jax = pytest.importorskip("jax")
scipy_special = pytest.importorskip("scipy.special")
from jax.scipy import special as js  # noqa: E402

Z = np.array([1 + 1j, 0.5 - 2j, -2.5 + 0.1j, -3 + 0j, -3.5 + 0j, 10 + 20j, 0.1 + 0j,
              -0.5 - 0.5j, 1e-3 + 1e-3j, -7.2 + 3j, np.nan + 0j, 2 - 0j, -1e-5j, -2.5 - 0.1j],
             np.complex64)


@pytest.mark.parametrize("name", ["loggamma", "gamma", "erfcx"])
def test_values_match_scipy_and_jax(name):
    k = np.asarray(getattr(ks, name)(Z))
    j = np.asarray(getattr(js, name)(Z))
    s = getattr(scipy_special, name)(Z.astype(np.complex128))
    assert k.dtype == j.dtype == np.complex64
    np.testing.assert_array_equal(np.isnan(k), np.isnan(s))
    ok = ~np.isnan(s)
    np.testing.assert_allclose(k[ok], s[ok], rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(k[ok], j[ok], rtol=3e-5, atol=1e-6)


def test_x64_accuracy():
    with kiln.enable_x64():
        z = Z.astype(np.complex128)
        k = np.asarray(ks.loggamma(z))
        s = scipy_special.loggamma(z)
        ok = ~np.isnan(s)
        np.testing.assert_allclose(k[ok], s[ok], rtol=1e-12, atol=1e-13)


def test_transformations():
    z = Z[:3]
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.vmap(ks.gamma))(z)),
                               np.asarray(ks.gamma(z)), rtol=1e-6)
    # Forward mode works (d/dz loggamma = digamma); reverse mode is refused as in JAX
    # (the shift into the right half-plane is a while_loop).
    _, t = kiln.jvp(ks.loggamma, (np.complex64(1.5 + 0.5j),), (np.complex64(1.0),))
    _, tj = jax.jvp(js.loggamma, (np.complex64(1.5 + 0.5j),), (np.complex64(1.0),))
    np.testing.assert_allclose(np.asarray(t), np.asarray(tj), rtol=1e-5)
    with pytest.raises(ValueError, match="while_loop"):
        kiln.grad(lambda z: ks.loggamma(z).real)(np.complex64(1.5 + 0.5j))
