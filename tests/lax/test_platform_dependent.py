"""``lax.platform_dependent``: kiln's platform is 'cpu' (else ``default``); only the chosen
branch is traced; eager, jit, vmap, grad; JAX's errors."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def _f(x):
    return lax.platform_dependent(x, cpu=jnp.sin, tpu=jnp.tan, default=jnp.cos)


def test_cpu_branch_everywhere():
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(_f(x), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(_f)(x), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(_f)(x), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(kiln.grad(lambda v: _f(v).sum())(x), np.cos(x), rtol=1e-6)
    eqns = kiln.make_jaxpr(_f)(x).eqns
    assert [e.primitive.name for e in eqns] == ["sin"]


def test_default_and_no_args():
    x = np.float32(0.5)
    assert float(lax.platform_dependent(x, tpu=jnp.sin, default=jnp.cos)) == \
        pytest.approx(np.cos(0.5))
    assert float(lax.platform_dependent(cpu=lambda: jnp.sin(x))) == pytest.approx(np.sin(0.5))


def test_errors():
    with pytest.raises(NotImplementedError, match="translation rule .* not found for "
                                                  "platform cpu"):
        lax.platform_dependent(3.0, tpu=lambda x: x + 2.0)
    with pytest.raises(ValueError, match="Use 'cuda' or 'rocm'"):
        lax.platform_dependent(3.0, gpu=jnp.sin)
    with pytest.raises(TypeError, match="'cpu' branch must be a callable"):
        lax.platform_dependent(3.0, cpu=1)
