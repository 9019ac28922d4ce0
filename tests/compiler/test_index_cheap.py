"""The cost rule (``lower.py`` ``_should_materialize``) treats integer/boolean arithmetic on
index values and constants (``INDEX_CHEAP``: a causal mask's ``iota <= iota``) as free:
``where(mask, s, -inf)`` read by a softmax's max and exp is recomputed in the row loop,
not stored by a kernel of its own; the results are the same bits as with the mask
stored (and close to the reference backend's: its sums run in NumPy's order)."""
import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu, reference
from kiln.compiler.lower import lower as lower_mod
from kiln.compiler.lower.program import Kernel

R = np.random.default_rng(23)


def _prog(monkeypatch, f, *args):
    closed = kiln.make_jaxpr(f)(*args)
    flat = [np.asarray(a) for a in args]
    exe = cpu.executable_for(closed)
    got = [np.asarray(g) for g in exe(flat)]
    ref = cpu._reference_form(closed)
    for g, w in zip(got, reference.run_jaxpr(ref.jaxpr, ref.consts, flat)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6, atol=1e-7)
    with monkeypatch.context() as m:            # the rule off: the mask stored
        m.setattr(lower_mod, "INDEX_CHEAP", frozenset())
        exe2 = cpu.compile_closed(kiln.make_jaxpr(f)(*args), "jit")   # no cache
        for g, w in zip(got, exe2(flat)):
            np.testing.assert_array_equal(g.view(np.uint8), np.asarray(w).view(np.uint8))
    return exe.prog, exe2.prog


def _stored_selects(prog):
    return [k for k in prog.steps if isinstance(k, Kernel)
            for buf, e in k.outs if buf.kind == "tmp" and e.kind == "op"
            and e.params[0] == "select_n"]


def test_causal_mask_is_recomputed_in_the_softmax_rows(monkeypatch):
    s = R.standard_normal((4, 64, 64)).astype(np.float32)

    def f(s):
        mask = jnp.tril(jnp.ones((64, 64), dtype=bool))
        return kiln.nn.softmax(jnp.where(mask, jnp.abs(s) * 0.125 + 1.0, -jnp.inf), axis=-1)

    new, old = _prog(monkeypatch, f, s)
    assert _stored_selects(new) == [] and len(_stored_selects(old)) == 1


def test_a_select_on_data_is_still_stored(monkeypatch):
    """The rule is about index values: a mask read from memory keeps its cost."""
    s = R.standard_normal((4, 64, 64)).astype(np.float32)
    m = R.standard_normal((4, 64, 64)).astype(np.float32)

    def f(s, m):
        x = jnp.where((m > 0) & (m < 1), jnp.abs(s) * 0.125 + 1.0, -jnp.inf)
        return kiln.nn.softmax(x, axis=-1)

    new, _ = _prog(monkeypatch, f, s, m)
    assert len(_stored_selects(new)) == 1
