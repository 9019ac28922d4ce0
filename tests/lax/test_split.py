"""``lax.split`` as one primitive with several results (JAX's ``split_p``): its jaxpr, its
transpose (one ``concatenate``, so a cotangent's -0.0 stays -0.0 as in JAX), batching,
``jnp.split``'s sizes and errors, key arrays, the compiler and the SPMD partitioner."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu
from kiln.compiler.lower.program import Island, walk_steps
from kiln.sharding import NamedSharding
from kiln.sharding import PartitionSpec as P

X = np.arange(24, dtype=np.float32).reshape(4, 6)


def _prims(f, *args):
    return [e.primitive.name for e in kiln.make_jaxpr(f)(*args).jaxpr.eqns]


def test_one_equation_with_the_sizes_as_given():
    closed = kiln.make_jaxpr(lambda x: lax.split(x, (2, 4), axis=-1))(X)
    (eqn,) = closed.jaxpr.eqns
    assert eqn.primitive is lax.split_p
    assert eqn.params == {"sizes": (2, 4), "axis": 1}
    assert [v.aval.shape for v in eqn.outvars] == [(4, 2), (4, 4)]
    # jnp.split passes NumPy integers, as JAX's does (its printed jaxpr shows np.int64).
    (eqn,) = kiln.make_jaxpr(lambda x: jnp.split(x, 3, axis=1))(X).jaxpr.eqns
    assert eqn.params["sizes"] == (2, 2, 2)
    assert all(type(s) is np.int64 for s in eqn.params["sizes"])


@pytest.mark.parametrize("jit", [False, True])
def test_values_and_weak_type(jit):
    def f(x):
        return lax.split(x, (1, 0, 3), axis=0)
    outs = (kiln.jit(f) if jit else f)(X)
    for got, want in zip(outs, (X[:1], X[1:1], X[1:])):
        np.testing.assert_array_equal(np.asarray(got), want)
        assert got.dtype == np.float32
    weak = (kiln.jit(lambda s: lax.split(jnp.full((4,), s), (2, 2)))(2.0))
    assert all(kiln.typeof(w).weak_type for w in weak)


def test_transpose_is_one_concatenate_keeping_negative_zeros():
    def f(x):
        a, b, c = lax.split(x, (1, 2, 3), axis=1)
        return jnp.sum(a * -0.0) + jnp.sum(b * 2.0) + jnp.sum(c * -0.0)
    want_sign = np.array([[1, 0, 0, 1, 1, 1]] * 4, bool)
    for g in (kiln.grad(f)(X), kiln.jit(kiln.grad(f))(X)):
        np.testing.assert_array_equal(np.signbit(np.asarray(g)), want_sign)
        np.testing.assert_array_equal(np.asarray(g), np.where(want_sign, 0.0, [0, 2, 2, 0, 0, 0]))
    assert "concatenate" in _prims(kiln.grad(f), X)
    assert "pad" not in _prims(kiln.grad(f), X)


def test_transpose_instantiates_unused_parts_and_zero_cotangents():
    g = kiln.grad(lambda x: jnp.sum(lax.split(x, (2, 2), axis=0)[1] ** 2))(X)
    want = np.concatenate([np.zeros((2, 6), np.float32), 2 * X[2:]])
    np.testing.assert_array_equal(np.asarray(g), want)
    _, vjp = kiln.vjp(lambda x: lax.split(x, (2, 2)), X)
    (ct,) = vjp([jnp.zeros((2, 6)), jnp.zeros((2, 6))])
    np.testing.assert_array_equal(np.asarray(ct), np.zeros_like(X))
    # jvp: the tangents are split the same way.
    _, t = kiln.jvp(lambda x: lax.split(x, (4, 2), axis=1), (X,), (2 * X,))
    np.testing.assert_array_equal(np.asarray(t[1]), 2 * X[:, 4:])


@pytest.mark.parametrize("in_axis", [0, 1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_vmap(in_axis, axis):
    x = np.arange(2 * 4 * 6, dtype=np.float32).reshape(2, 4, 6)
    x = np.moveaxis(x, 0, in_axis)
    sizes = (1, 3) if axis == 0 else (2, 4)
    outs = kiln.vmap(lambda e: lax.split(e, sizes, axis=axis), in_axes=in_axis)(x)
    for b in range(2):
        want = np.split(np.take(x, b, axis=in_axis), np.cumsum(sizes)[:-1], axis=axis)
        for o, w in zip(outs, want):
            np.testing.assert_array_equal(np.asarray(o)[b], w)


def test_jnp_split_sizes_and_errors_as_jax():
    x = jnp.arange(6)
    assert [a.tolist() for a in jnp.split(x, [0])] == [[], [0, 1, 2, 3, 4, 5]]
    assert [a.tolist() for a in jnp.array_split(x, 4)] == [[0, 1], [2, 3], [4], [5]]
    assert [a.shape for a in jnp.hsplit(jnp.ones((2, 6)), 3)] == [(2, 2)] * 3
    # JAX's sizes are the differences of [0, *indices, n]: indices out of order or out of
    # range are lax.split's ValueError (NumPy would clamp them).
    with pytest.raises(ValueError, match=r"must be nonnegative, got \[np.int64\(-2\)"):
        jnp.split(x, [-2])
    with pytest.raises(ValueError, match="must be nonnegative"):
        jnp.split(x, [3, 1])
    with pytest.raises(ValueError, match="equal division: rest is 2"):
        jnp.split(x, 4)
    with pytest.raises(ZeroDivisionError):
        jnp.split(x, 0)
    with pytest.raises(ValueError, match=r"Sum of sizes 5 must be equal to dimension 0"):
        lax.split(x, (2, 3))
    with pytest.raises(ValueError, match="out of bounds"):
        lax.split(x, (6,), axis=1)


def test_key_arrays():
    keys = kiln.random.split(kiln.random.key(0), 4)
    for f in (lambda k: jnp.split(k, [1]), kiln.jit(lambda k: jnp.split(k, [1]))):
        a, b = f(keys)
        assert a.dtype == keys.dtype and (a.shape, b.shape) == ((1,), (3,))
        np.testing.assert_array_equal(kiln.random.key_data(b), kiln.random.key_data(keys)[1:])


def test_compiled_natively_without_islands():
    def f(x):
        a, b = lax.split(x, (2, 4), axis=1)
        return a * 2.0, jnp.sin(b)
    closed = kiln.make_jaxpr(f)(X)
    exe = cpu.executable_for(closed)
    islands = [s for s in walk_steps(exe.prog.steps) if isinstance(s, Island)]
    assert not islands
    got = exe([X])
    np.testing.assert_array_equal(np.asarray(got[0]), X[:, :2] * 2)
    np.testing.assert_allclose(np.asarray(got[1]), np.sin(X[:, 2:]), rtol=1e-6)
    text = kiln.jit(f).lower(X).as_text(dialect="hlo")
    assert text.count(" slice(") == 2


def test_partitioned_split_keeps_the_other_dimensions_sharded():
    mesh = kiln.make_mesh((2,), ("x",))
    s = NamedSharding(mesh, P("x"))
    outs = kiln.jit(lambda x: jnp.split(x, [2], axis=1), in_shardings=s)(X)
    assert [o.sharding.spec for o in outs] == [P("x"), P("x")]
    np.testing.assert_array_equal(np.asarray(outs[1]), X[:, 2:])
    outs = kiln.jit(lambda x: jnp.split(x, [1], axis=0), in_shardings=s)(X)
    np.testing.assert_array_equal(np.asarray(outs[1]), X[1:])


def test_matches_jax():
    jax = pytest.importorskip("jax")

    def make(L, np_):
        def f(x):
            a, b, c = np_.split(x, [1, 3], axis=1)
            return np_.sum(np_.sin(a) * -0.0) + np_.sum(b * b) + np_.sum(c * -0.0)
        return f
    want = np.asarray(jax.grad(make(jax, jax.numpy))(X))
    got = np.asarray(kiln.jit(kiln.grad(make(kiln, jnp)))(X))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    jx = jax.make_jaxpr(lambda x: jax.numpy.split(x, 3))(np.arange(6))
    kx = kiln.make_jaxpr(lambda x: jnp.split(x, 3))(np.arange(6))
    assert [e.primitive.name for e in kx.jaxpr.eqns] == [e.primitive.name for e in jx.jaxpr.eqns]
    assert kx.jaxpr.eqns[0].params == dict(jx.jaxpr.eqns[0].params)
