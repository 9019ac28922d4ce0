"""``float0`` values that reach the user (cotangents of integer inputs, ``jit`` outputs of
``float0`` dtype) are NumPy arrays, as JAX's are (``np.ndarray`` subclasses), so code such
as Equinox's ``tree_equal`` compares them with NumPy; under ``grad``, ``vjp``, ``jvp``,
``jit`` and their compositions."""
import numpy as np
import pytest

import kiln
from kiln import dtypes


def _f(a, b):
    return a * 2.0 + b


def _cases(jax):
    f = jax.jit(lambda x, y: jax.vjp(_f, x, y)[1](1.0))
    return {
        "grad": jax.grad(_f, argnums=(0, 1), allow_int=True)(1, 2.0),
        "jit_grad": jax.jit(jax.grad(_f, argnums=(0, 1), allow_int=True))(1, 2.0),
        "jit_vjp": f(1, 2.0),
        "vjp": jax.vjp(_f, 1, 2.0)[1](1.0),
        "jvp": jax.jvp(lambda a, b: (a, b * 2.0), (1, 2.0),
                       (np.zeros((), dtypes.float0), 1.0))[1],
    }


@pytest.mark.parametrize("how", ["grad", "jit_grad", "jit_vjp", "vjp", "jvp"])
def test_float0_results_are_numpy_arrays(how):
    got = _cases(kiln)[how]
    z, other = got
    assert isinstance(z, np.ndarray) and z.dtype == dtypes.float0 and z.shape == ()
    assert isinstance(other, kiln.Array)
    assert np.all(z == z)
    jax = pytest.importorskip("jax")
    jz, jother = _cases(jax)[how]
    assert isinstance(jz, np.ndarray) and not isinstance(jother, np.ndarray)


def test_jit_returning_float0_and_feeding_it_back():
    f = kiln.jit(lambda x: (x, np.zeros((2,), dtypes.float0)))
    out, z = f(kiln.numpy.ones(3))
    assert isinstance(z, np.ndarray) and z.dtype == dtypes.float0 and z.shape == (2,)
    out, z = f(kiln.numpy.ones(3))          # the cached fast path
    assert isinstance(z, np.ndarray) and z.dtype == dtypes.float0
    _, t = kiln.jvp(lambda i: i * 2, (np.arange(2),), (z,))
    assert t.dtype == dtypes.float0
