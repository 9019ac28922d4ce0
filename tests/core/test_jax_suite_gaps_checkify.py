"""checkify as JAX's ``checkify_test`` expects it (issue 26): staging a check is fine and
lowering it is the error; index checks see indexing by concrete arrays and out-of-bounds
static integers (which JAX stages as ``dynamic_slice``)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.experimental import checkify


def test_staged_check_is_an_error_only_when_compiled():
    def f():
        checkify.check(False, "hi")

    assert kiln.eval_shape(f) is None
    assert "check[" in str(kiln.make_jaxpr(f)())
    with pytest.raises(ValueError, match="Cannot abstractly evaluate a checkify.check which "
                                         "was not functionalized"):
        kiln.jit(f)()
    with pytest.raises(ValueError, match="not functionalized"):
        lax.cond(True, lambda x: (checkify.check(x > 0, "c"), x)[1], lambda x: x, 1.)
    kiln.jit(lambda: checkify.debug_check(False, "dropped"))()      # debug: no error


def test_index_checks_with_concrete_index_arrays_and_static_ints():
    x = jnp.ones((2, 3))
    two = checkify.checkify(lambda x, i, j: x[i, j], errors=checkify.index_checks)
    err, _ = two(x, jnp.array([0, 5]), jnp.array([1, 1]))
    assert "index 5 is out of bounds for axis 0 with size 2" in err.get()
    err, _ = two(x, jnp.array([0, 1]), jnp.array([1, 7]))
    assert "index 7 is out of bounds for axis 1 with size 3" in err.get()
    err, _ = two(x, jnp.array([0, 1]), jnp.array([1, 2]))
    assert err.get() is None
    err, _ = checkify.checkify(lambda x: x[jnp.array([0, 5])],
                               errors=checkify.index_checks)(x)
    assert "index 5" in err.get()
    err, _ = checkify.checkify(lambda x: x[5] + x[6], errors=checkify.index_checks)(jnp.ones(2))
    assert "index 5" in err.get()
    # the values are JAX's (clamped), eagerly and staged
    np.testing.assert_array_equal(jnp.arange(3.)[7], 2.)
    np.testing.assert_array_equal(kiln.jit(lambda a: a[7])(jnp.arange(3.)), 2.)
    np.testing.assert_array_equal(kiln.jit(lambda: x[jnp.array([1, 0])])(), np.ones((2, 3)))


def test_checks_in_a_while_predicate_are_functionalized():
    def cond(val):
        checkify.check(val[0] < 0, "i must be negative")
        return val[0] < 2

    def body(val):
        checkify.check(val[1] < 0, "x must be negative")
        return val[0] + 1., val[1] + 1

    cf = checkify.checkify(kiln.jit(lambda a, b: lax.while_loop(cond, body, (a, b))))
    assert cf(0, 1)[0].get().startswith("i must be negative")
    assert cf(-1, 0)[0].get().startswith("x must be negative")
    err, out = cf(-1., -5.)
    assert err.get().startswith("i must be negative")     # the last predicate, at i = 0
    np.testing.assert_array_equal(out[0], 2.)


def test_jaxpr_effects_list_the_checks_error_kinds():
    from kiln.experimental.checkify._errors import ErrorEffect, FailedCheckError

    def g(x, y):
        checkify.check(False, "hi: {} {}", x, y)

    want = {ErrorEffect(FailedCheckError,
                        (kiln.ShapeDtypeStruct((4,), np.int32),
                         kiln.ShapeDtypeStruct((2,), np.float32)))}
    args = (jnp.ones(4, np.int32), jnp.ones(2, np.float32))
    assert kiln.make_jaxpr(g)(*args).effects == want
    assert kiln.make_jaxpr(lambda *a: kiln.jit(g)(*a))(*args).effects == want
    assert kiln.make_jaxpr(lambda x: x + 1)(1.).effects == frozenset()
