"""Name stacks (``jax.named_scope``, ``jax.named_call`` and the transformations around
them) recorded in ``eqn.source_info.name_stack``, compared with JAX's."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.core.source_info import NameStack
from kiln.extend import source_info_util as siu


def _fn(jax, jnp):
    def f(x):
        with jax.named_scope("outer"):
            y = jnp.sin(x)
            with jax.named_scope("inner"):
                z = y * 2.0
        return jax.named_call(lambda a: jnp.cos(a) + z, name="nc")(x).sum()
    return f


def _names(jaxpr, out, depth=0):
    for e in jaxpr.eqns:
        out.append((depth, e.primitive.name, str(e.source_info.name_stack)))
        for k in ("jaxpr", "call_jaxpr"):
            if k in e.params:
                sub = e.params[k]
                _names(getattr(sub, "jaxpr", sub), out, depth + 1)
    return out


def _cases(jax, jnp):
    f = _fn(jax, jnp)
    x, xs = np.ones(3, np.float32), np.ones((2, 3), np.float32)

    def in_scope(x):
        with jax.named_scope("s"):
            return jax.jit(f)(x)
    return {
        "plain": (f, x),
        "grad_aux": (jax.grad(lambda x: (f(x), f(x)), has_aux=True), x),
        "vmap": (jax.vmap(f), xs),
        "jit_in_scope": (in_scope, x),
        "decorator": (jax.named_scope("deco")(lambda x: jnp.exp(x)), x),
    }


@pytest.mark.parametrize("case", ["plain", "grad_aux", "vmap", "jit_in_scope", "decorator"])
def test_name_stacks_match_jax(case):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    kf, kx = _cases(kiln, knp)[case]
    jf, jx = _cases(jax, jnp)[case]
    ours = _names(kiln.make_jaxpr(kf)(kx).jaxpr, [])
    theirs = _names(jax.make_jaxpr(jf)(jx).jaxpr, [])
    if case == "grad_aux":
        # kiln orders equations differently and stages f's primal once (JAX: twice).
        ours, theirs = set(ours), set(theirs)
    assert ours == theirs


def test_jvp_name_stacks_match_jax():
    """Forward mode names every equation ``jvp(...)`` (primitives aside: kiln adds
    tangents with ``add_any`` where JAX uses ``add``)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    def names(jx, np_):
        f = _fn(jx, np_)
        j = jx.make_jaxpr(lambda x: jx.jvp(f, (x,), (x,)))(np.ones(3, np.float32)).jaxpr
        return [n for _, _, n in _names(j, [])]
    assert names(kiln, knp) == names(jax, jnp)


def test_name_stack_strings_and_helpers():
    ns = NameStack().extend("model").transform("jvp").extend("linear")
    assert str(ns) == "model/jvp(linear)"      # a transformation wraps the scopes inside it
    assert str(NameStack().transform("jvp")) == "jvp()"
    assert str(NameStack().transform("transpose").transform("jvp").extend("m")) == \
        "transpose(jvp(m))"
    assert str(siu.new_name_stack("a").extend("b")) == "a/b"
    with siu.transform_name_stack("vmap"), siu.extend_name_stack("a"):
        assert str(siu.current_name_stack()) == "vmap(a)"
        with siu.reset_name_stack():
            assert str(siu.current_name_stack()) == ""
        assert str(siu.current().name_stack) == "vmap(a)"
    assert str(siu.current_name_stack()) == ""
    with siu.user_context(None, name_stack=siu.new_name_stack("u")):
        eqn = kiln.make_jaxpr(lambda x: x + 1)(1.0).jaxpr.eqns[0]
    # make_jaxpr starts its program with an empty name stack
    assert str(eqn.source_info.name_stack) == ""


def test_named_call_default_name_and_values():
    def double(x):
        return 2 * x
    j = kiln.make_jaxpr(kiln.named_call(double))(1.0)
    assert str(j.jaxpr.eqns[0].source_info.name_stack) == "double"
    assert float(kiln.named_call(double)(3.0)) == 6.0
    assert float(kiln.grad(kiln.named_call(double, name="d"))(3.0)) == 2.0
