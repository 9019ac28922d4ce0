"""``linearize``'s JVP function is a pytree (``Partial``) whose leaves are the
residuals, as JAX's: it can be returned from ``jit`` and ``vmap`` and called later."""
import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.tree_util import Partial, tree_leaves


def f(x):
    return jnp.sin(x) * x


def test_f_jvp_is_a_partial_of_residuals():
    x = jnp.arange(3.0)
    y, f_jvp = kiln.linearize(f, x)
    assert isinstance(f_jvp, Partial)
    assert all(hasattr(leaf, "shape") for leaf in tree_leaves(f_jvp))
    t = jnp.ones(3)
    np.testing.assert_allclose(np.asarray(f_jvp(t)), np.asarray(kiln.jvp(f, (x,), (t,))[1]),
                               rtol=1e-6)


def test_f_jvp_out_of_jit_and_vmap():
    xs = jnp.arange(6.0).reshape(2, 3)
    y, f_jvp = kiln.jit(kiln.vmap(lambda x: kiln.linearize(f, x)))(xs)
    np.testing.assert_allclose(np.asarray(y), np.asarray(f(xs)), rtol=1e-6)
    t = jnp.ones((2, 3))
    got = kiln.vmap(lambda fj, t: fj(t))(f_jvp, t)
    want = np.cos(np.asarray(xs)) * np.asarray(xs) + np.sin(np.asarray(xs))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
