"""A ``symbolic_zeros`` ``custom_jvp`` rule under ``vmap``: a zero tangent it returns stays
symbolic, so a rule it feeds sees a ``SymbolicZero`` (JAX's
``test_symbolic_zero_custom_jvp_vmap_doesnt_instantiate``)."""
import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.custom_derivatives import SymbolicZero


def test_zero_tangent_out_of_a_batched_rule_stays_symbolic():
    seen = []

    @kiln.custom_jvp
    def f(x, y):
        return y

    def f_jvp(primals, tangents):
        (_, y), (_, y_dot) = primals, tangents
        seen.append(type(y_dot))
        return y, y_dot

    f.defjvp(f_jvp, symbolic_zeros=True)

    def g(x):
        return f(x, f(x, 1.))

    for run in (lambda x: kiln.jvp(kiln.vmap(g), (x,), (x,)),
                kiln.jit(lambda x: kiln.jvp(kiln.vmap(g), (x,), (x,)))):
        seen.clear()
        out, tan = run(jnp.ones(3))
        assert seen and all(t is SymbolicZero for t in seen)
        np.testing.assert_array_equal(out, np.ones(3))
        np.testing.assert_array_equal(tan, np.zeros(3))
