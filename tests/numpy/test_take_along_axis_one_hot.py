"""``jnp.take_along_axis(mode='one_hot')``: a contraction with the indices' one-hot
encoding (JAX's mode): in-range (and negative, wrapped) indices as NumPy, out-of-range
ones give 0; eager and jit; bool, int, complex."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


@pytest.mark.parametrize("xs,ish,axis,dt", [((3, 4), (3, 12), 1, np.float32),
                                            ((5,), (7,), 0, np.int32),
                                            ((2, 3, 4), (2, 6, 4), 1, np.bool_),
                                            ((2, 3), (1, 3), 0, np.complex64),
                                            ((3, 4), (12,), None, np.float32)])
def test_one_hot_matches_numpy(xs, ish, axis, dt):
    rng = np.random.default_rng(0)
    x = rng.normal(size=xs)
    x = (x > 0) if dt == np.bool_ else (x * 3).astype(dt)
    n = int(np.prod(xs)) if axis is None else xs[axis]
    i = rng.integers(-n, n, size=ish).astype(np.int32)
    want = np.take_along_axis(x, i, axis=axis)
    f = lambda x, i: jnp.take_along_axis(x, i, axis=axis, mode="one_hot")  # noqa: E731
    for g in (f, kiln.jit(f)):
        out = g(x, i)
        assert out.dtype == want.dtype
        np.testing.assert_allclose(out, want, rtol=1e-6)


def test_one_hot_out_of_range_is_zero():
    x = np.arange(1.0, 5.0, dtype=np.float32)
    out = jnp.take_along_axis(x, np.array([0, 4, -5, 3], np.int32), axis=0, mode="one_hot")
    np.testing.assert_array_equal(out, [1.0, 0.0, 0.0, 4.0])
