"""The general ``lax.reduce`` (``reduce_p``): several operands and reducers that are not
one of the monoids, eagerly, under ``jit`` (also in a loop body), ``vmap``, ``jvp`` and
``grad``, its errors, and JAX's results."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

R = np.random.default_rng(0)
X = R.standard_normal((3, 5, 4)).astype(np.float32)
TIES = np.array([[3., 7., 7., 1.], [2., 0., 9., 9.], [5., 5., 5., 5.]], np.float32)


def _argmax(a, b):
    """Max of (value, index) pairs, the lowest index on ties: associative, commutative."""
    (av, ai), (bv, bi) = a, b
    pick = (av > bv) | ((av == bv) & (ai < bi))
    return lax.select(pick, av, bv), lax.select(pick, ai, bi)


def _variadic_argmax(x, axis):
    idx = lax.broadcasted_iota(np.int32, x.shape, axis)
    return lax.reduce((x, idx), (np.float32(-np.inf), np.int32(0)), _argmax, (axis,))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_variadic_argmax(jit, axis):
    f = kiln.jit(_variadic_argmax, static_argnums=1) if jit else _variadic_argmax
    v, i = f(X, axis)
    np.testing.assert_array_equal(np.asarray(v), X.max(axis))
    np.testing.assert_array_equal(np.asarray(i), X.argmax(axis))
    assert v.dtype == np.float32 and i.dtype == np.int32
    _, i = f(TIES, 1)       # ties: the lowest index, whatever the combination order
    np.testing.assert_array_equal(np.asarray(i), [1, 2, 0])


def test_one_reduce_equation_with_jaxs_params():
    closed = kiln.make_jaxpr(lambda x: _variadic_argmax(x, 1))(X)
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "reduce"]
    assert eqn.primitive is lax.reduce_p
    assert eqn.params["dimensions"] == (1,) and eqn.params["computation"] is _argmax
    assert [v.aval.shape for v in eqn.outvars] == [(3, 4), (3, 4)]
    assert len(eqn.params["jaxpr"].jaxpr.invars) == 4
    from kiln.extend.core import primitives
    assert primitives.reduce_p is lax.reduce_p


def test_other_reducers_and_empty_reductions():
    # Not a monoid kiln maps to reduce_sum & co (a product of two things): reduce_p.
    def hypot_sum(a, b):
        return lax.sqrt(a * a + b * b)
    x = np.abs(X)
    got = lax.reduce(x, np.float32(0), hypot_sum, (0, 2))
    np.testing.assert_allclose(np.asarray(got), np.sqrt((x * x).sum((0, 2))), rtol=1e-5)
    assert "reduce" in [e.primitive.name for e in
                        kiln.make_jaxpr(lambda x: lax.reduce(x, 0., hypot_sum, (0,)))(x).jaxpr.eqns]
    v, i = _variadic_argmax(np.zeros((0, 3), np.float32), 0)
    np.testing.assert_array_equal(np.asarray(v), [-np.inf] * 3)
    np.testing.assert_array_equal(np.asarray(i), [0, 0, 0])


def test_full_reduction_to_a_scalar_and_odd_lengths():
    for n in (1, 2, 3, 7, 64, 1001):
        x = R.standard_normal(n).astype(np.float32)
        v, i = _variadic_argmax(x, 0)
        assert v.shape == () and int(i) == int(np.argmax(x)) and float(v) == float(x.max())


def test_vmap_moves_the_batch_axis():
    for in_axis in (0, 1, 2):
        got_v, got_i = kiln.vmap(lambda x: _variadic_argmax(x, 0), in_axes=in_axis)(X)
        xs = np.moveaxis(X, in_axis, 0)
        np.testing.assert_array_equal(np.asarray(got_i), xs.argmax(1))
        np.testing.assert_array_equal(np.asarray(got_v), xs.max(1))
    with pytest.raises(NotImplementedError, match="batched init values"):
        kiln.vmap(lambda x, z: lax.reduce((x, x), (z, z), lambda a, b: (
            lax.max(a[0], b[0]), lax.min(a[1], b[1])), (0,)))(X, np.zeros(3, np.float32))


def test_grad_and_jvp():
    def f(x):
        return jnp.sum(_variadic_argmax(x, 1)[0] ** 2)
    want = np.zeros_like(X)
    am = X.argmax(1)
    for a in range(3):
        for c in range(4):
            want[a, am[a, c], c] = 2 * X[a, am[a, c], c]
    for g in (kiln.grad(f)(X), kiln.jit(kiln.grad(f))(X)):
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)
    t = R.standard_normal(X.shape).astype(np.float32)
    (v, i), (tv, ti) = kiln.jvp(lambda x: _variadic_argmax(x, 2), (X,), (t,))
    np.testing.assert_array_equal(np.asarray(tv), np.take_along_axis(
        t, X.argmax(2)[..., None], 2)[..., 0])
    assert ti.dtype == kiln.dtypes.float0
    with pytest.raises(NotImplementedError, match="non-zero tangents for initial values"):
        kiln.jvp(lambda z: lax.reduce((X, X), (z, z), lambda a, b: (
            lax.max(a[0], b[0]), lax.min(a[1], b[1])), (0,)), (np.float32(0),),
            (np.float32(1),))


def test_errors():
    with pytest.raises(ValueError, match="non-scalar initial value"):
        lax.reduce((X, X), (np.zeros(2, np.float32), np.float32(0)), _argmax, (0,))
    with pytest.raises(TypeError, match="operand dtypes should match"):
        lax.reduce((X, X), (np.float32(0), np.int32(0)), _argmax, (0,))
    with pytest.raises(ValueError, match="same tree structure"):
        lax.reduce((X, X), [np.float32(0), np.float32(0)], _argmax, (0,))
    with pytest.raises(ValueError, match="must be distinct and in"):
        lax.reduce((X, X), (np.float32(0), np.float32(0)),
                   lambda a, b: (a[0] + b[0], a[1] + b[1]), (3,))


def test_matches_jax():
    jax = pytest.importorskip("jax")

    def jargmax(a, b):
        (av, ai), (bv, bi) = a, b
        pick = (av > bv) | ((av == bv) & (ai < bi))
        return jax.lax.select(pick, av, bv), jax.lax.select(pick, ai, bi)
    for axis in (0, 2):
        idx = np.broadcast_to(np.arange(X.shape[axis], dtype=np.int32).reshape(
            [-1 if d == axis else 1 for d in range(3)]), X.shape)
        want = jax.lax.reduce((X, idx), (np.float32(-np.inf), np.int32(0)), jargmax, (axis,))
        got = _variadic_argmax(X, axis)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
            assert np.asarray(g).dtype == np.asarray(w).dtype
    jx = jax.make_jaxpr(lambda x, i: jax.lax.reduce((x, i), (np.float32(0), np.int32(0)),
                                                     jargmax, (1,)))(X, X.astype(np.int32))
    (je,) = jx.jaxpr.eqns
    kx = kiln.make_jaxpr(lambda x, i: lax.reduce((x, i), (np.float32(0), np.int32(0)),
                                                 _argmax, (1,)))(X, X.astype(np.int32))
    (ke,) = kx.jaxpr.eqns
    assert ke.primitive.name == je.primitive.name == "reduce"
    assert sorted(ke.params) == sorted(je.params)
