"""The residuals of a partially evaluated ``cond``/``switch`` share slots across branches
(as JAX's do): a branch's residual reuses a slot of its type that the branch does not use
yet, so ``grad`` of a ``switch`` passes as many residuals as its greediest branch, not
the sum over branches. Values are checked against the derivatives."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

BRANCHES = [jnp.sin, jnp.cos, jnp.sinh, lambda x: jnp.sin(x) + jnp.cos(x)]
DERIVS = [np.cos, lambda x: -np.sin(x), np.cosh, lambda x: np.cos(x) - np.sin(x)]


def _conds(k):
    jaxpr = kiln.make_jaxpr(kiln.grad(lambda x, i: lax.switch(i, BRANCHES[:k], x)))(0.0, 0)
    return [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "cond"]


@pytest.mark.parametrize("k, n_res", [(2, 1), (3, 1), (4, 2)])
def test_residual_slots_are_shared(k, n_res):
    fwd, bwd = _conds(k)
    for br in fwd.params["branches"]:
        assert len(br.jaxpr.outvars) == 1 + n_res
    for br in bwd.params["branches"]:
        assert len(br.jaxpr.invars) == n_res + 1


@pytest.mark.parametrize("i", range(4))
def test_values_with_shared_slots(i):
    g = kiln.grad(lambda x, i: lax.switch(i, BRANCHES, x))
    np.testing.assert_allclose(float(g(0.7, i)), DERIVS[i](0.7), rtol=1e-6)
    np.testing.assert_allclose(float(kiln.jit(g)(0.7, i)), DERIVS[i](0.7), rtol=1e-6)


def test_slots_of_different_types_are_not_shared():
    def f(x, i):
        return lax.switch(i, [lambda x: jnp.sum(jnp.sin(x)),
                              lambda x: jnp.sum(jnp.cos(x[:2]))], x)
    x = np.linspace(0.1, 0.9, 3).astype(np.float32)
    for i, want in ((0, np.cos(x)), (1, np.r_[-np.sin(x[:2]), 0.0])):
        np.testing.assert_allclose(np.asarray(kiln.grad(f)(x, i)), want, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(kiln.vmap(kiln.grad(f), (0, None))(
            np.stack([x, x]), i))[1], want, rtol=1e-6)
