"""``device=`` of ``jnp`` creation functions and ``jnp.fft.fftfreq``/``rfftfreq``: the result
is on that device, as in JAX (issue 26: JAX's fft_test checks ``out.devices()``)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


@pytest.mark.parametrize("make", [
    lambda d: jnp.zeros(3, device=d),
    lambda d: jnp.ones((2, 2), device=d),
    lambda d: jnp.full(3, 7, device=d),
    lambda d: jnp.empty(2, device=d),
    lambda d: jnp.zeros_like(jnp.ones(2), device=d),
    lambda d: jnp.full_like(jnp.ones(2), 3, device=d),
    lambda d: jnp.eye(2, device=d),
    lambda d: jnp.arange(4, device=d),
    lambda d: jnp.fft.fftfreq(9, d=0.1, device=d, dtype=jnp.complex64),
    lambda d: jnp.fft.rfftfreq(10, device=d),
])
def test_result_is_on_the_requested_device(make):
    devs = kiln.devices()
    if len(devs) < 2:
        pytest.skip("needs 2 devices")
    out = make(devs[-1])
    assert out.devices() == {devs[-1]}
    assert make(None).devices() == {devs[0]}
    np.testing.assert_array_equal(np.asarray(out), np.asarray(make(None)))
