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
    lambda d: jnp.linspace(5, 6, 7, device=d),
    lambda d: jnp.linspace(5, 6, 7, retstep=True, device=d)[0],
    lambda d: jnp.array([1, 2], device=d),
    lambda d: jnp.asarray([1., 2.], device=d),
    lambda d: jnp.asarray(jnp.ones(2), device=d),
])
def test_result_is_on_the_requested_device(make):
    devs = kiln.devices()
    if len(devs) < 2:
        pytest.skip("needs 2 devices")
    out = make(devs[-1])
    assert out.devices() == {devs[-1]}
    assert make(None).devices() == {devs[0]}
    np.testing.assert_array_equal(np.asarray(out), np.asarray(make(None)))


def test_a_sharding_is_a_device_too():
    devs = kiln.devices()
    s = kiln.sharding.SingleDeviceSharding(devs[-1])
    assert jnp.arange(5, dtype=np.float32, device=s).sharding == s
    assert jnp.eye(5, 6, device=s).sharding == s


def test_array_none_and_tracer_sizes():
    with pytest.raises(ValueError, match="None is not a valid value for jnp.array"):
        jnp.array([0.0, None])
    with pytest.raises(ValueError, match="None is not a valid value for jnp.array"):
        jnp.array(None)
    assert kiln.jit(lambda x: x.nbytes)(jnp.ones((3, 2))) == 24
    assert kiln.jit(lambda x: x.itemsize)(jnp.ones(2, np.int8)) == 1


def test_tri_with_a_traced_offset():
    for k in (-2, 0, 1, 3):
        np.testing.assert_array_equal(kiln.jit(lambda k: jnp.tri(3, M=4, k=k))(k),
                                      np.tri(3, M=4, k=k))


def test_arange_rejects_complex_bounds_and_convert_returns_arrays():
    for args in [(1 + 2j, 5 + 3j), (0j, 5 + 0j), (0, 5, 1 + 1j)]:
        with pytest.raises(ValueError, match="Passing complex start/stop/step to jnp.arange "
                                             "is no longer supported"):
            jnp.arange(*args)
    assert jnp.arange(4, dtype=jnp.complex64).dtype == np.complex64
    from kiln import lax
    x = lax._convert_element_type(np.ones(3, np.float32), weak_type=False)
    assert isinstance(x, kiln.Array) and not x.weak_type
    assert isinstance(lax.convert_element_type(1.0, np.float32), kiln.Array)


def test_float0_zeros_are_numpy_float0_arrays():
    from kiln.dtypes import float0
    z = jnp.zeros((2,), dtype=float0)
    assert isinstance(z, np.ndarray) and z.dtype == float0 and z.shape == (2,)

    @kiln.custom_vjp
    def f(x):
        return x

    f.defvjp(lambda x: (x, None), lambda _, ct: ((2., jnp.zeros((), dtype=float0)),))

    def foo(x, y):
        return kiln.lax.scan(lambda c, _: (f(c), None), (x, y), None, length=1)[0][0]

    gx, gy = kiln.grad(foo, allow_int=True, argnums=(0, 1))(2., 3)
    assert float(gx) == 2. and gy.dtype == float0
