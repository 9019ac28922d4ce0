"""``jit``'s partial evaluation forwards residuals that are known results or operands
(not output twice), and its dce rule drops unused results and operands (JAX's pjit)."""
import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.interpreters import partial_eval as pe


def test_residual_that_is_a_result_is_not_output_twice():
    f = kiln.jit(lambda x: jnp.exp(x))
    j = kiln.make_jaxpr(kiln.grad(lambda x: f(x).sum()))(jnp.arange(4.))
    jj, _ = pe.dce_jaxpr(j.jaxpr, [True] * len(j.out_avals))
    e1, *_, e2 = jj.eqns
    assert e1.primitive.name == e2.primitive.name == "jit"
    assert len(e1.outvars) == 1                 # exp(x): the result and the residual
    assert sum(e1.outvars[0] is v for v in e2.invars) == 1
    np.testing.assert_allclose(kiln.grad(lambda x: f(x).sum())(jnp.arange(4.)),
                               np.exp(np.arange(4.)), rtol=1e-6)


def test_residual_that_is_an_operand_is_forwarded():
    f = kiln.jit(lambda x, y: x * y)
    j = kiln.make_jaxpr(kiln.grad(lambda x, y: f(x, y).sum()))(jnp.arange(3.), jnp.ones(3))
    known = [e for e in j.jaxpr.eqns if e.primitive.name == "jit"][0]
    assert len(known.outvars) == 1             # no copy of y as a residual
    np.testing.assert_array_equal(
        kiln.grad(lambda x, y: f(x, y).sum())(jnp.arange(3.), 2 * jnp.ones(3)), 2.)


def test_dce_rule_drops_unused_results_and_operands():
    f = kiln.jit(lambda x, y: (jnp.sin(x), jnp.cos(y)))
    j = kiln.make_jaxpr(lambda x, y: f(x, y)[1])(jnp.ones(2), jnp.ones(2))
    jj, used = pe.dce_jaxpr(j.jaxpr, [True])
    e, = jj.eqns
    assert len(e.outvars) == 1 and len(e.invars) == 1 and used == [False, True]
    assert [x.primitive.name for x in e.params["jaxpr"].eqns] == ["cos"]
