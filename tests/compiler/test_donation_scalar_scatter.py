"""Donated buffers reused by outputs that Equinox's tests check: rank-0 arrays, and an
update of a few elements (``x.at[0].add(1)``: a copy, then a scatter reading only the
element it writes). Updates that read other elements must not be done in place."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.config import config

pytestmark = pytest.mark.skipif(config.kiln_backend == "reference",
                                reason="in-place outputs are the compiled backend's")


def test_scalar_donation_keeps_the_pointer():
    f = kiln.jit(lambda x: x + 1, donate_argnums=0)
    for _ in range(2):
        x = jnp.array(0.0)
        p = x.unsafe_buffer_pointer()
        assert x.unsafe_buffer_pointer() == p          # stable, as on JAX
        y = f(x)
        assert x.is_deleted()
        assert y.unsafe_buffer_pointer() == p
        assert float(y) == 1.0


def test_scalar_donation_second_argument():
    f = kiln.jit(lambda x, y: x + y, donate_argnums=1)
    x, y = jnp.array(0.0), jnp.array(1.0)
    p = y.unsafe_buffer_pointer()
    z = f(x, y)
    assert not x.is_deleted() and y.is_deleted()
    assert z.unsafe_buffer_pointer() == p and float(z) == 1.0


@pytest.mark.parametrize("fn,args,inplace", [
    (lambda x: x.at[0].add(1.0), (), True),
    (lambda x, i: x.at[i].add(1.0), (3,), True),
    (lambda x: x.at[5:10].mul(x[5:10]), (), True),
    (lambda x: x.at[1:].set(x[:-1]), (), False),                  # reads other elements
    (lambda x: x.at[jnp.array([0, 0])].set(x[jnp.array([0, 0])] + 1), (), False),
    (lambda x: kiln.lax.dynamic_update_slice(x, x[2:4] * 2, (3,)), (), False),
])
def test_update_into_donated_buffer(fn, args, inplace):
    want = np.asarray(kiln.jit(fn)(jnp.arange(1000.0) + 0, *args))
    f = kiln.jit(fn, donate_argnums=0)
    x = jnp.arange(1000.0) + 0
    p = x.unsafe_buffer_pointer()
    y = f(x, *args)
    assert x.is_deleted()
    np.testing.assert_array_equal(np.asarray(y), want)
    assert (y.unsafe_buffer_pointer() == p) == inplace
