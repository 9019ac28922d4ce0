"""Behaviours Flax NNX relies on, each found by running Flax's ``tests/nnx`` on kiln:
JAX 0.10.2's answers (hard-coded from JAX, or computed by JAX when installed)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.random as kr


# -- random.* accept a Python int as a shape (JAX's canonicalize_shape) ----------------------

@pytest.mark.parametrize("fn", [
    lambda k: kr.normal(k, 4), lambda k: kr.uniform(k, 4),
    lambda k: kr.bernoulli(k, 0.5, 4), lambda k: kr.randint(k, 4, 0, 5)])
def test_random_int_shape(fn):
    k = kr.key(0)
    out = fn(k)
    assert out.shape == (4,)


def test_random_int_shape_matches_tuple():
    k = kr.key(3)
    np.testing.assert_array_equal(kr.normal(k, 4), kr.normal(k, (4,)))


def test_random_bad_shape_still_raises():
    with pytest.raises(TypeError, match="Shapes must be 1D sequences"):
        kr.normal(kr.key(0), 4.0)
