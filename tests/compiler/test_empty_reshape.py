"""Compiler edge cases from JAX's suite: a reshape whose result is empty, fused after another
op, compiles (it used to divide by the zero extent while building the index arithmetic);
a convolution without spatial dimensions runs under jit."""
from functools import partial

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


@pytest.mark.parametrize("shape,offset", [((1, 1), 1), ((3, 0), 0), ((0, 3), 2)])
def test_jit_diagonal_empty(shape, offset):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    out = kiln.jit(partial(jnp.linalg.diagonal, offset=offset))(x)
    np.testing.assert_array_equal(out, np.linalg.diagonal(x, offset=offset))


def test_jit_reshape_of_empty_slice():
    f = kiln.jit(lambda x: (x[1:, :0] * 2).reshape(0, 5))
    assert f(jnp.ones((3, 4))).shape == (0, 5)


def test_jit_conv_without_spatial_dims_is_a_dot():
    """A convolution with no spatial dimensions (JAX's testConv0DIsDot) runs under jit (as
    a host island: the native kernel needs a spatial dimension)."""
    from kiln import lax
    a = np.random.default_rng(0).random((10, 5), dtype=np.float32)
    b = np.random.default_rng(1).random((5, 7), dtype=np.float32)
    f = partial(lax.conv_general_dilated, window_strides=(), padding="VALID",
                dimension_numbers=("NC", "IO", "NC"))
    np.testing.assert_allclose(kiln.jit(f)(a, b), a @ b, rtol=1e-5)
