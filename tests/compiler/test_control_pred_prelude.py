"""A while loop's predicate and a branch index that read a carry both directly and
through a dynamic index: the index symbol's definition (the prelude) and the predicate's
lines each declare the carry's load, which must compile (``render/control.py``; Diffrax's
``ClipStepSizeController`` search loop under ``grad`` met it)."""
import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference
from kiln.compiler.lower.program import Island, Loop, walk_steps

XS = np.array([0.5, 1.5, 2.5, 3.5], np.float64)


def _native_run(f, *args):
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    assert exe is not None
    assert not any(isinstance(s, Island) for s in walk_steps(exe.prog.steps))
    got = exe([np.asarray(a) for a in args])
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, [np.asarray(a) for a in args])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    return exe, [np.asarray(g) for g in got]


def test_while_predicate_reads_carry_directly_and_by_index():
    def f(xs, t):
        def cond(i):
            return (i > 0) & (xs[i - 1] > t)        # i's load before the index's
        return lax.while_loop(cond, lambda i: i - 1, jnp.int32(xs.shape[0]))
    for t, want in ((2.0, 2), (0.0, 0), (9.0, 4)):
        exe, (got,) = _native_run(f, XS, np.float64(t))
        assert any(isinstance(s, Loop) for s in exe.prog.steps)
        assert int(got) == want


def test_branch_index_reads_value_directly_and_by_index():
    idx = np.array([1, 0, 2, 1], np.int32)

    def f(i, x):
        k = jnp.where(i > 1, jnp.asarray(idx)[i - 1], 0)
        return lax.switch(k, [lambda v: v + 1.0, lambda v: v * 2.0, lambda v: v - 3.0], x)
    for i, want in ((0, 5.0), (2, 5.0), (3, 1.0), (4, 8.0)):
        _, (got,) = _native_run(f, np.int32(i), np.float64(4.0))
        assert float(got) == want
