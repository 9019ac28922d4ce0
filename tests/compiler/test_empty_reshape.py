"""A reshape whose result is empty, fused after another op, compiles (it used to divide
by the zero extent while building the index arithmetic)."""
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
