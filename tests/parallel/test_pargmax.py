"""``pargmax``/``pargmin`` of ``jax._src.lax.parallel`` (issue 26): the index along a named
axis of the extreme value, per element (first on ties), under vmap/jit/pmap, as JAX."""
import numpy as np
import pytest

import kiln
import kiln.lax as lax
from kiln.lax.parallel import pargmax, pargmin


@pytest.mark.parametrize("fn,ref", [(pargmax, np.argmax), (pargmin, np.argmin)])
def test_against_numpy_vmap_and_jit(fn, ref):
    x = np.random.RandomState(0).randn(5, 3).astype(np.float32)
    x[3, 1] = x[1, 1] = x[:, 1].max() + 1 if fn is pargmax else x[:, 1].min() - 1   # tie
    out = kiln.vmap(lambda v: fn(v, "i"), axis_name="i")(x)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.broadcast_to(ref(x, 0), (5, 3)))
    out_jit = kiln.jit(kiln.vmap(lambda v: fn(v, "i"), axis_name="i"))(x)
    np.testing.assert_array_equal(out_jit, out)
    assert not hasattr(lax, "pargmax")     # JAX has them in jax._src.lax.parallel only


def test_pmap_and_errors():
    n = min(kiln.local_device_count(), 4)
    x = np.random.RandomState(1).randn(n, 2).astype(np.float32)
    out = kiln.pmap(lambda v: pargmax(v, "i"), axis_name="i")(x)
    np.testing.assert_array_equal(out, np.broadcast_to(x.argmax(0), (n, 2)))
    with pytest.raises(TypeError, match="single axis"):
        kiln.vmap(lambda v: pargmin(v, ("i",)), axis_name="i")(x)
