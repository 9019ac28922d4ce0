"""``ufunc.reduce`` with a tuple of axes: the built-in ufuncs against ``jax.numpy`` (keepdims,
initial, where, dtypes), and ufuncs reduced by a loop (``subtract``, ``frompyfunc``), which JAX
0.10 rejects with NotImplementedError, against JAX's single-axis reduction of the array with
the reduced axes merged into one (NumPy's order)."""
from __future__ import annotations

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
jjnp = pytest.importorskip("jax.numpy")

rs = np.random.RandomState(0)
X = (rs.rand(2, 3, 4).astype(np.float32) + 0.5)
XI = rs.randint(-5, 6, size=(2, 3, 4)).astype(np.int32)
XB = rs.rand(2, 3, 4) > 0.4
MASK = rs.rand(2, 3, 4) > 0.3


def _check(k, j, rtol=2e-6, atol=2e-6):
    k_arr, j_arr = np.asarray(k), np.asarray(j)
    assert k_arr.shape == j_arr.shape
    assert k_arr.dtype == j_arr.dtype
    assert bool(getattr(k, "weak_type", False)) == bool(getattr(j, "weak_type", False))
    np.testing.assert_allclose(k_arr, j_arr, rtol=rtol, atol=atol)


BUILTINS = ["add", "multiply", "maximum", "minimum", "logical_and", "logical_or",
            "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "logaddexp",
            "logaddexp2"]
AXES = [(0, 2), (2, 0), (-1,), (), (0, 1, 2), (1, -1)]


def _inputs(name):
    if name.startswith("bitwise"):
        return [XI, XB]
    return [X, XI, XB]


def _jax_batch(fns, *args):
    """JAX's results of ``fns(*args)`` traced into one ``jax.jit`` (one compilation, not one
    per static ``axis``)."""
    return jax.jit(lambda *a: [f(*a) for f in fns])(*args)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_tuple_axes(name):
    for x in _inputs(name):
        cases = [(axis, kw) for axis in AXES for kw in ({}, {"keepdims": True})]
        ref = jax_result(f"tuple_axes.{name}", lambda x=x, cases=cases: _jax_batch(
            [lambda x, a=a, kw=kw: getattr(jjnp, name).reduce(x, axis=a, **kw)
             for a, kw in cases], x), x)
        for (axis, kw), j in zip(cases, ref):
            _check(getattr(knp, name).reduce(x, axis=axis, **kw), j, rtol=2e-5)


@pytest.mark.parametrize("name", ["add", "multiply", "maximum", "minimum", "logical_or",
                                  "bitwise_or", "logaddexp"])
def test_builtin_initial_where(name):
    x = XI if name.startswith("bitwise") else X
    init = {"logical_or": False, "bitwise_or": 8}.get(name, 1.5)
    cases = [(axis, kw) for axis in [(0, 2), (1,), ()]
             for kw in ({"initial": init}, {"initial": init, "where": MASK},
                        {"initial": init, "where": MASK, "keepdims": True})]
    ref = jax_result(f"initial_where.{name}", lambda: _jax_batch(
        [lambda x, a=a, kw=kw: getattr(jjnp, name).reduce(x, axis=a, **kw)
         for a, kw in cases], x), (x, MASK))
    for (axis, kw), j in zip(cases, ref):
        _check(getattr(knp, name).reduce(x, axis=axis, **kw), j, rtol=2e-5)


def test_builtin_transforms():
    ref = jax_result("builtin_transforms", lambda: [
        jjnp.multiply.reduce(X, axis=(0, 2)),
        jax.grad(lambda x: jjnp.maximum.reduce(x, axis=(0, 2)).sum())(X),
        jax.vmap(lambda x: jjnp.add.reduce(x, axis=(0, 1), keepdims=True))(X)], X)
    k = kiln.jit(lambda x: knp.multiply.reduce(x, axis=(0, 2)))(X)
    _check(k, ref[0], rtol=2e-5)
    g = kiln.grad(lambda x: knp.maximum.reduce(x, axis=(0, 2)).sum())(X)
    _check(g, ref[1])
    v = kiln.vmap(lambda x: knp.add.reduce(x, axis=(0, 1), keepdims=True))(X)
    _check(v, ref[2])


def _pyfunc_jnp(jnp_, identity=0.0):
    # not associative, so the reduction order shows
    return jnp_.frompyfunc(lambda a, b: a * 0.5 + b, 2, 1, identity=identity)


def _merged(x, axes):
    """``x`` with ``axes`` moved to the front (ascending) and merged into one."""
    nd = x.ndim
    axes = sorted(a % nd for a in axes)
    kept = [d for d in range(nd) if d not in axes]
    x = np.transpose(x, axes + kept)
    return x.reshape((-1,) + tuple(x.shape[len(axes):]))


@pytest.mark.parametrize("axis", AXES, ids=[str(a) for a in AXES])
def test_frompyfunc_tuple_axes(axis):
    kf, jf = _pyfunc_jnp(knp), _pyfunc_jnp(jjnp)
    cases = [(x, where, kw) for x, where in ((X, None), (XI, None), (X, MASK))
             for kw in ({}, {"keepdims": True}, {"initial": 2.0})]

    def ref():
        out = []
        for x, where, kw in cases:
            j = jf.reduce(_merged(x, axis), axis=0, initial=kw.get("initial"),
                          where=None if where is None else _merged(where, axis))
            if kw.get("keepdims"):
                j = jjnp.expand_dims(j, tuple(a % x.ndim for a in axis))
            out.append(j)
        if len(axis) == 3:
            out.append(jf.reduce(X, axis=None))
        return out
    ref = jax_result(f"frompyfunc.{axis}", ref, (X, XI, MASK))
    for (x, where, kw), j in zip(cases, ref):
        k = kf.reduce(x, axis=axis, where=where, **kw)
        _check(k, j, rtol=2e-5)
    # all axes reduce as axis=None does
    if len(axis) == 3:
        _check(kf.reduce(X, axis=axis), ref[-1], rtol=2e-5)


def test_frompyfunc_transforms_and_dtypes():
    kf, jf = _pyfunc_jnp(knp), _pyfunc_jnp(jjnp)
    ji = jjnp.frompyfunc(lambda a, b: a + 2 * b, 2, 1, identity=0)
    e = np.zeros((2, 0, 3), np.float32)
    ref = jax_result("frompyfunc_transforms_dtypes", lambda: [
        jf.reduce(_merged(X, (0, 2)), axis=0),
        jax.vmap(lambda x: jf.reduce(_merged(x, (0, 1)), axis=0))(X),
        jax.grad(lambda x: jf.reduce(x.transpose(0, 2, 1).reshape(8, 3), axis=0).sum())(X),
        [ji.reduce(_merged(XI, (0, 1)), axis=0, dtype=dt)
         for dt in (None, np.float32, np.int32)],
        ji.reduce(_merged(XI, (1, 2)), axis=0), ji.reduce(_merged(XB, (0, 2)), axis=0),
        jf.reduce(_merged(e, (0, 1)), axis=0), jjnp.full((2, 1, 1), 3.0, np.float32)],
        (X, XI, XB))
    _check(kiln.jit(lambda x: kf.reduce(x, axis=(0, 2)))(X), ref[0], rtol=2e-5)
    _check(kiln.vmap(lambda x: kf.reduce(x, axis=(0, 1)))(X), ref[1], rtol=2e-5)
    g = kiln.grad(lambda x: kf.reduce(x, axis=(2, 0)).sum())(X)
    _check(g, ref[2], rtol=2e-5)
    # dtype= and the result dtype of the Python function
    ki = knp.frompyfunc(lambda a, b: a + 2 * b, 2, 1, identity=0)
    for dt, j in zip((None, np.float32, np.int32), ref[3]):
        _check(ki.reduce(XI, axis=(0, 1), dtype=dt), j)
    with pytest.raises(TypeError):   # float results do not fit an int32 accumulator (JAX too)
        kf.reduce(XI, axis=(0, 1), dtype=np.int32)
    _check(ki.reduce(XI, axis=(1, 2)), ref[4])
    _check(ki.reduce(XB, axis=(0, 2)), ref[5])
    # an empty reduced axis gives the identity (or initial)
    _check(kf.reduce(e, axis=(0, 1)), ref[6])
    _check(kf.reduce(e, axis=(1, 2), keepdims=True, initial=3.0), ref[7])


def test_subtract_single_and_empty_tuple():
    for axis in [(1,), (-1,)]:
        ref = jax_result(f"subtract.{axis}", lambda axis=axis: [
            jjnp.subtract.reduce(X, axis=axis[0]),
            jjnp.subtract.reduce(XI, axis=axis[0], keepdims=True)], (X, XI))
        _check(knp.subtract.reduce(X, axis=axis), ref[0])
        _check(knp.subtract.reduce(XI, axis=axis, keepdims=True), ref[1])
    # axis=(): nothing reduced (NumPy gives the array back)
    np.testing.assert_array_equal(knp.subtract.reduce(X, axis=()),
                                  np.subtract.reduce(X, axis=()))
    nf = np.frompyfunc(lambda a, b: a * 0.5 + b, 2, 1)
    kf = knp.frompyfunc(lambda a, b: a * 0.5 + b, 2, 1)
    np.testing.assert_allclose(kf.reduce(X, axis=()), nf.reduce(X, axis=()).astype(np.float32))


ERRORS = [
    ("jnp.subtract.reduce(x, axis=(0, 1))", ValueError,
     "reduction operation 'subtract' is not reorderable, so at most one axis may be specified"),
    ("jnp.frompyfunc(lambda a, b: a - b, 2, 1).reduce(x, axis=(0, 2))", ValueError,
     "is not reorderable"),
    ("f.reduce(x, axis=(0, 5))", ValueError, "axis 5 is out of bounds for array of dimension 3"),
    ("f.reduce(x, axis=(0, -4))", ValueError, "out of bounds"),
    ("f.reduce(x, axis=(0, 0))", ValueError, r"duplicate value in 'axis': \(0, 0\)"),
    ("f.reduce(x, axis=(1, -2))", ValueError, r"duplicate value in 'axis': \(1, -2\)"),
    ("jnp.add.reduce(x, axis=(0, 5))", ValueError, "out of bounds"),
    ("jnp.maximum.reduce(x, axis=(0, 0))", ValueError, None),
    ("jnp.bitwise_or.reduce(x, axis=(0, 1))", ValueError,
     "integer argument required; got dtype=float32"),
    ("jnp.bitwise_and.reduce(x)", ValueError, "integer argument required; got dtype=float32"),
    ("jnp.frompyfunc(lambda a, b: a - b, 2, 1).reduce(x, axis=(0,), where=x > 1)", ValueError,
     "does not have an identity, so to use a where mask one has to specify 'initial'"),
    ("jnp.frompyfunc(lambda a, b: a - b, 2, 1).reduce(np.zeros((2, 0)), axis=(1,))",
     ValueError, "zero-size array to reduction operation"),
]


@pytest.mark.parametrize("expr,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(expr, exc, match):
    env = dict(jnp=knp, np=np, x=X, f=_pyfunc_jnp(knp))
    with pytest.raises(exc, match=match):
        eval(expr, env)
    # JAX raises the same, except where it has no multi-axis loop reduction at all
    env = dict(jnp=jjnp, np=np, x=X, f=_pyfunc_jnp(jjnp))
    with pytest.raises((exc, NotImplementedError)):
        eval(expr, env)
