"""``lax.cond``/``lax.switch`` trace a function given for several branches once (as JAX,
whose tracing is cached per function), and those branches still give its value."""
import numpy as np

import kiln
from kiln import lax


def _counted():
    n = [0]

    def f(x):
        n[0] += 1
        return x + 1
    return f, n


def test_switch_shared_branch_traced_once():
    f, n = _counted()
    out = lax.switch(1, [f, lambda x: x * 2, f, f], 3.0)
    assert float(out) == 6.0 and n[0] == 1
    n[0] = 0
    sw = kiln.jit(lambda i, x: lax.switch(i, [f, f, lambda x: x * 2], x))
    assert [float(sw(i, 3.0)) for i in (0, 1, 2)] == [4.0, 4.0, 6.0]
    assert n[0] == 1


def test_cond_same_function_both_sides():
    f, n = _counted()
    assert float(lax.cond(True, f, f, 3.0)) == 4.0 and n[0] == 1
    n[0] = 0
    out = kiln.vmap(lambda p, x: lax.cond(p, f, f, x))(np.array([True, False]),
                                                         np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(np.asarray(out), [2.0, 3.0])
    assert n[0] == 1


def test_distinct_functions_each_traced():
    f, n = _counted()
    g, m = _counted()
    assert float(lax.switch(2, [f, g, f], 0.0)) == 1.0
    assert (n[0], m[0]) == (1, 1)
