"""``jit``'s ``static_argnums``/``static_argnames`` inference against JAX: each is inferred
from the other through the signature only when the other is not given (Flax's ``nn.jit``
passes both, with argnames of a wrapped function that the argnums must not pick up)."""
from __future__ import annotations

import functools

import pytest

import kiln

jax = pytest.importorskip("jax")

SPECS = [(0, None), (None, "c"), ((0,), ("c",)), ((2,), None), (None, ("d",)), (0, "d"),
         ((), ()), ((), ("c",)), ((2,), ())]


def _static_pattern(m, nums, names):
    seen = []

    def g(a, b, c, d=1):
        seen.append("".join("S" if type(x) is float else "T" for x in (a, b, c, d)))
        return a

    gj = m.jit(g, static_argnums=nums, static_argnames=names)
    gj(1.0, 2.0, 3.0, d=4.0)
    gj(1.0, 2.0, c=3.0, d=4.0)
    return seen


@pytest.mark.parametrize("nums, names", SPECS)
def test_static_pattern_matches_jax(nums, names):
    assert _static_pattern(kiln, nums, names) == _static_pattern(jax, nums, names)


def test_wrapped_function_argnames_not_inferred_when_both_given():
    """As Flax's ``lift.jit``: a wrapper whose ``__wrapped__`` has a parameter named like
    the static argname; with argnums also given, the wrapper's own positions stay
    dynamic (here an unhashable dict)."""
    def user(scope, a, b):
        return a

    def run(m):
        @functools.partial(m.jit, static_argnums=(0,), static_argnames=["b"])
        @functools.wraps(user)
        def jitted(fingerprint, variables, *args, **kwargs):
            assert kwargs["b"] == "hi"
            return args[0] * 2
        return float(jitted("fp", {"w": 1.0}, 3.0, b="hi"))

    assert run(kiln) == run(jax) == 6.0
