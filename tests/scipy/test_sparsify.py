"""``sparse.sparsify`` (jaxpr interpreter and ``use_tracer=True``): a table of primitives ×
formats (BCOO, BCSR) eagerly and under ``jit``, checked against the dense NumPy result and
the format JAX returns; JAX's errors for operations that would densify; control flow,
custom derivatives and the ``SparsifyEnv``/``SparsifyValue`` layer.

``jit`` cases of the table run on the reference backend (what is under test is the
staging of sparse rules); ``test_compiled`` runs one program through the compiler.
"""
from __future__ import annotations

import functools
import operator

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.config import config_context
from kiln.experimental import sparse
from kiln.experimental.sparse import BCOO, BCSR, SparseTracer, sparsify
from kiln.experimental.sparse.transform import (
    SparsifyEnv,
    SparsifyValue,
    arrays_to_spvalues,
    sparsify_raw,
    spvalues_to_arrays,
)

X = np.array([[0., 1., 0., 2.], [3., 0., 0., 0.], [0., 0., 4., 5.]], np.float32) / 10
V = np.array([1., 2., 3., 4.], np.float32)
W = np.array([[1., 2., 3., 4.], [5., 6., 7., 8.], [9., 1., 2., 3.]], np.float32)

MODES = [pytest.param(False, id="interp"), pytest.param(True, id="tracer")]


def _mat(fmt):
    return BCOO.fromdense(X) if fmt == "BCOO" else BCSR.fromdense(X)


def _dense(x):
    return np.asarray(x.todense() if isinstance(x, (BCOO, BCSR)) else x)


def _kind(x):
    return type(x).__name__ if isinstance(x, (BCOO, BCSR)) else "dense"


# name, function, NumPy reference of X, result kind for BCOO, for BCSR (None: raises
# "sparse rule for <prim> is not implemented", <prim> the last field).
TABLE = [
    ("neg", operator.neg, lambda x: -x, "BCOO", "BCSR", None),
    ("sin", jnp.sin, np.sin, "BCOO", "BCSR", None),
    ("sinh", jnp.sinh, np.sinh, "BCOO", "BCSR", None),
    ("tan", jnp.tan, np.tan, "BCOO", "BCSR", None),
    ("tanh", jnp.tanh, np.tanh, "BCOO", "BCSR", None),
    ("asin", jnp.arcsin, np.arcsin, "BCOO", "BCSR", None),
    ("asinh", jnp.arcsinh, np.arcsinh, "BCOO", "BCSR", None),
    ("atan", jnp.arctan, np.arctan, "BCOO", "BCSR", None),
    ("atanh", jnp.arctanh, np.arctanh, "BCOO", "BCSR", None),
    ("sqrt", jnp.sqrt, np.sqrt, "BCOO", "BCSR", None),
    ("expm1", jnp.expm1, np.expm1, "BCOO", "BCSR", None),
    ("log1p", jnp.log1p, np.log1p, "BCOO", "BCSR", None),
    ("abs", jnp.abs, np.abs, "BCOO", "BCSR", None),
    ("sign", jnp.sign, np.sign, "BCOO", "BCSR", None),
    ("square", jnp.square, np.square, "BCOO", "BCSR", None),
    ("cube", lambda a: a ** 3, lambda x: x ** 3, "BCOO", "BCSR", None),
    ("copy", jnp.copy, np.copy, "BCOO", "BCSR", None),
    ("astype", lambda a: a.astype(jnp.float16), lambda x: x.astype(np.float16), "BCOO",
     "BCSR", None),
    ("mul_scalar", lambda a: a * 3, lambda x: x * 3, "BCOO", None, "mul"),
    ("mul_dense", lambda a: a * W, lambda x: x * W, "BCOO", None, "mul"),
    ("mul_row", lambda a: a * V, lambda x: x * V, "BCOO", None, "mul"),
    ("mul_sparse", lambda a: a * a, lambda x: x * x, "BCOO", None, "mul"),
    ("div_scalar", lambda a: a / 4, lambda x: x / 4, "BCOO", None, "div"),
    ("div_dense", lambda a: a / W, lambda x: x / W, "BCOO", None, "div"),
    ("add_sparse", lambda a: a + a * 2, lambda x: x + x * 2, "BCOO", None, "mul"),
    ("sub_sparse", lambda a: a - jnp.sin(a), lambda x: x - np.sin(x), "BCOO", None, "sub"),
    ("add_dense", lambda a: a + W, lambda x: x + W, "dense", None, "add"),
    ("matvec", lambda a: a @ V, lambda x: x @ V, "dense", "dense", None),
    ("vecmat", lambda a: V[:3] @ a, lambda x: V[:3] @ x, "dense", "dense", None),
    ("matmat_T", lambda a: a @ W.T, lambda x: x @ W.T, "dense", "dense", None),
    ("sum_all", jnp.sum, np.sum, "dense", None, "reduce_sum"),
    ("sum_0", lambda a: a.sum(0), lambda x: x.sum(0), "BCOO", None, "reduce_sum"),
    ("transpose", lambda a: a.T, lambda x: x.T, "BCOO", None, "transpose"),
    ("reshape", lambda a: a.reshape(4, 3), lambda x: x.reshape(4, 3), "BCOO", None,
     "reshape of a BCSR array"),
    ("expand_dims", lambda a: a[None], lambda x: x[None], "BCOO", "BCSR", None),
    ("broadcast", lambda a: jnp.broadcast_to(a, (2, 3, 4)),
     lambda x: np.broadcast_to(x, (2, 3, 4)), "BCOO", "BCSR", None),
    ("concatenate", lambda a: jnp.concatenate([a, a]), lambda x: np.concatenate([x, x]),
     "BCOO", "BCSR", None),
    ("stack", lambda a: jnp.stack([a, a]), lambda x: np.stack([x, x]), "BCOO", "BCSR",
     None),
    ("slice", lambda a: a[1:, 1:3], lambda x: x[1:, 1:3], "BCOO", None, "slice"),
    ("rev", lambda a: jnp.flip(a, 1), lambda x: np.flip(x, 1), "BCOO", None, "rev"),
    ("dynamic_slice", lambda a: lax.dynamic_slice(a, (1, 2), (2, 2)),
     lambda x: x[1:3, 2:4], "BCOO", None, "dynamic_slice"),
    ("gather", lambda a: a[np.array([2, 0])], lambda x: x[[2, 0]], "BCOO", None, "gather"),
    ("todense", lambda a: sparse.todense(a) + 1, lambda x: x + 1, "dense", "dense", None),
]


@pytest.mark.parametrize("use_tracer", MODES)
@pytest.mark.parametrize("fmt", ["BCOO", "BCSR"])
@pytest.mark.parametrize("name,fn,ref,bcoo_kind,bcsr_kind,prim", TABLE,
                         ids=[t[0] for t in TABLE])
def test_table(name, fn, ref, bcoo_kind, bcsr_kind, prim, fmt, use_tracer):
    want_kind = bcoo_kind if fmt == "BCOO" else bcsr_kind
    f = sparsify(fn, use_tracer=use_tracer)
    if want_kind is None:
        with pytest.raises(NotImplementedError,
                           match=rf"^sparse rule for {prim} is not implemented"):
            f(_mat(fmt))
        return
    want = ref(X)
    out = f(_mat(fmt))
    assert _kind(out) == want_kind
    np.testing.assert_allclose(_dense(out), want, rtol=2e-6, atol=1e-7)
    assert _dense(out).dtype == np.asarray(want).dtype
    with config_context(kiln_backend="reference"):
        out = kiln.jit(f)(_mat(fmt))
    assert _kind(out) == want_kind
    np.testing.assert_allclose(_dense(out), want, rtol=2e-6, atol=1e-7)


def test_compiled():
    """One jitted program of several sparse rules, through the compiler."""
    def f(a, c):
        return jnp.sin(a) * 2, (a + a).sum(1), c @ V, jnp.stack([c, -c])
    a, c = BCOO.fromdense(X), BCSR.fromdense(X)
    for use_tracer in (False, True):
        s, r, mv, st = kiln.jit(sparsify(f, use_tracer=use_tracer))(a, c)
        assert (_kind(s), _kind(r), _kind(mv), _kind(st)) == ("BCOO", "BCOO", "dense", "BCSR")
        np.testing.assert_allclose(_dense(s), np.sin(X) * 2, rtol=1e-6)
        np.testing.assert_allclose(_dense(r), 2 * X.sum(1), rtol=1e-6)
        np.testing.assert_allclose(mv, X @ V, rtol=1e-6)
        np.testing.assert_array_equal(_dense(st), np.stack([X, -X]))


DENSIFY = "is not implemented because it would result in dense output"
ERRORS = [
    ("exp", jnp.exp, rf"^sparse rule for exp {DENSIFY}\."),
    ("cos", jnp.cos, rf"^sparse rule for cos {DENSIFY}\."),
    ("log", jnp.log, rf"^sparse rule for log {DENSIFY}\."),
    ("gt", lambda a: a > 0, rf"^sparse rule for gt {DENSIFY}\."),
    ("eq_method", lambda a: a == a, rf"^sparse rule for eq {DENSIFY}\."),
    ("complex", lambda a: lax.complex(a, a), r"^sparse rule for complex is not implemented\.$"),
    ("max", jnp.max, r"^sparse rule for reduce_max is not implemented\.$"),
    ("pow_float", lambda a: a ** 2.5, r"^sparse rule for pow is not implemented\.$"),
    ("inv", lambda a: a ** -1, r"^sparse rule for integer_pow with non-positive exponent -1"),
    ("sub_dense", lambda a: a - W, r"^Subtraction between sparse and dense array\.$"),
    ("rdiv", lambda a: 1 / a, r"^Division by a sparse array is not implemented"),
    ("add_scalar", lambda a: a + 1, r"^Addition between a sparse array X and a dense array Y"),
    ("add_shapes", lambda a: a + a[:1], r"^Addition between sparse matrices of different"),
    ("scan_sparse_xs", lambda a: lax.scan(lambda c, x: (c, x), 0., a)[1],
     r"^sparse rule for scan with sparse x values"),
]


@pytest.mark.parametrize("use_tracer", MODES)
@pytest.mark.parametrize("name,fn,msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(name, fn, msg, use_tracer):
    with pytest.raises(NotImplementedError, match=msg):
        sparsify(fn, use_tracer=use_tracer)(BCOO.fromdense(X))


def test_operators_through_sparsify():
    m = BCOO.fromdense(X)
    with pytest.raises(NotImplementedError, match=rf"^sparse rule for lt {DENSIFY}"):
        _ = m < 1
    with pytest.raises(NotImplementedError, match="integer_pow with non-positive"):
        _ = m ** 0
    np.testing.assert_allclose(_dense(m ** 2), X ** 2)


@pytest.mark.parametrize("use_tracer", MODES)
def test_control_flow(use_tracer):
    sp = functools.partial(sparsify, use_tracer=use_tracer)
    m = BCOO.fromdense(X)
    # while_loop / fori_loop with a sparse carry and a sparse closed-over matrix.
    out = sp(lambda a: lax.fori_loop(0, 3, lambda i, c: c * 2, a))(m)
    assert _kind(out) == "BCOO"
    np.testing.assert_allclose(_dense(out), X * 8)
    out = sp(lambda a, v: lax.fori_loop(0, 2, lambda i, c: a.T @ (a @ c), v))(m, V)
    np.testing.assert_allclose(out, X.T @ (X @ (X.T @ (X @ V))), rtol=1e-6)
    # a carry whose sortedness the body loses: retraced as unsorted, values exact
    out = sp(lambda a: lax.while_loop(lambda c: c[0] < 2,
                                      lambda c: (c[0] + 1, jnp.sin(c[1].T.T)), (0, a)))(m)
    assert not out[1].indices_sorted
    np.testing.assert_allclose(_dense(out[1]), np.sin(np.sin(X)), rtol=1e-6)
    # scan: sparse carry, dense xs, sparse ys stacked along a new batch dimension
    carry, ys = sp(lambda a: lax.scan(lambda c, x: (c * x, c * x), a,
                                      jnp.array([1., 2., 3.])))(m)
    assert _kind(carry) == "BCOO" and _kind(ys) == "BCOO" and ys.n_batch == 1
    np.testing.assert_allclose(_dense(carry), X * 6, rtol=1e-6)
    np.testing.assert_allclose(_dense(ys), np.stack([X, X * 2, X * 6]), rtol=1e-6)
    # cond with sparse operands, both branches sparse
    for pred, want in [(True, X * 3), (False, -X)]:
        out = sp(lambda a, p: lax.cond(p, lambda a: a * 3., lambda a: -a, a))(m, pred)
        assert _kind(out) == "BCOO"
        np.testing.assert_allclose(_dense(out), want, rtol=1e-6)
    # jit inside: still one call, sparse result
    out = sp(lambda a: kiln.jit(lambda b: jnp.sin(b) * 2)(a))(m)
    assert _kind(out) == "BCOO"
    np.testing.assert_allclose(_dense(out), np.sin(X) * 2, rtol=1e-6)
    # custom_jvp / checkpoint bodies run on the sparse values
    square = kiln.custom_jvp(lambda x: x ** 2)
    square.defjvp(lambda p, t: (p[0] ** 2, 2 * t[0] * p[0]))
    out = sp(square)(m)
    assert _kind(out) == "BCOO"
    np.testing.assert_allclose(_dense(out), X ** 2, rtol=1e-6)
    out = sp(kiln.grad(lambda a: square(a).sum()))(m)
    np.testing.assert_allclose(_dense(out), 2 * X, rtol=1e-6)
    out = sp(kiln.checkpoint(lambda a: a * 2))(m)
    assert _kind(out) == "BCOO"


@pytest.mark.parametrize("use_tracer", MODES)
def test_control_flow_type_errors(use_tracer):
    sp = functools.partial(sparsify, use_tracer=use_tracer)
    m = BCOO.fromdense(X)
    with pytest.raises(TypeError, match="sparsified true_fun output must have same type "
                                        "structure as sparsified false_fun output"):
        sp(lambda a: lax.cond(True, lambda a: a, lambda a: sparse.todense(a), a))(m)
    # a carry whose number of stored elements changes cannot be a loop carry
    with pytest.raises(TypeError, match="sparsified body_fun output must have same type "
                                        "structure as sparsified body_fun input"):
        sp(lambda a, b: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] + b),
                                       (0, a)))(m, m)


@pytest.mark.parametrize("use_tracer", MODES)
def test_transformations_around(use_tracer):
    sp = functools.partial(sparsify, use_tracer=use_tracer)
    m = BCOO.fromdense(X)

    def f(a, w):
        return jnp.sin(a) @ w
    np.testing.assert_allclose(kiln.jit(sp(f))(m, V), np.sin(X) @ V, rtol=1e-6)
    g = kiln.grad(lambda w: sp(f)(m, w).sum())(V)
    np.testing.assert_allclose(g, np.sin(X).sum(0), rtol=1e-6)
    gd = kiln.grad(lambda d: sp(f)(BCOO((d, m.indices), shape=m.shape), V).sum())(m.data)
    rows, cols = np.asarray(m.indices).T
    np.testing.assert_allclose(gd, np.cos(X[rows, cols]) * V[cols], rtol=1e-6)
    out = kiln.vmap(lambda w: sp(f)(m, w))(jnp.stack([V, 2 * V]))
    np.testing.assert_allclose(out, np.stack([np.sin(X) @ V, np.sin(X) @ (2 * V)]),
                               rtol=1e-6)
    # grad inside sparsify: the gradient of a sparse computation is sparse
    out = sp(kiln.grad(lambda a: jnp.sum(a ** 2)))(m)
    assert _kind(out) == "BCOO"
    np.testing.assert_allclose(_dense(out), 2 * X, rtol=1e-6)


def test_tracer_type():
    seen = []
    sparsify(lambda a: seen.append(type(a)), use_tracer=True)(BCOO.fromdense(X))
    sparsify(lambda a: seen.append(type(a)))(BCOO.fromdense(X))
    assert seen[0] is SparseTracer and not issubclass(seen[1], SparseTracer)
    assert sparsify(jnp.exp)(1.0) == pytest.approx(np.e)
    assert sparsify(jnp.exp, use_tracer=True)(1.0) == pytest.approx(np.e)


def test_env_and_values():
    m = BCOO.fromdense(X)
    spenv = SparsifyEnv()
    vals = arrays_to_spvalues(spenv, (V, m))
    assert vals == (SparsifyValue((4,), 0), SparsifyValue((3, 4), 1, 2, indices_sorted=True,
                                                          unique_indices=True))
    assert vals[0].is_dense() and vals[1].is_bcoo() and not vals[1].is_bcsr()
    assert len(spenv._buffers) == 3
    back = spvalues_to_arrays(spenv, vals)
    np.testing.assert_array_equal(back[0], V)
    np.testing.assert_array_equal(_dense(back[1]), X)
    # values sharing their indices add (and multiply) without concatenating
    spenv = SparsifyEnv([m.indices, m.data, 2 * m.data])
    a = spenv.sparse(m.shape, data_ref=1, indices_ref=0, unique_indices=True)
    b = spenv.sparse(m.shape, data_ref=2, indices_ref=0, unique_indices=True)
    for op, want in [(operator.add, 3 * X), (operator.mul, 2 * X * X)]:
        outs, tree = sparsify_raw(op)(spenv, a, b)
        out, = spvalues_to_arrays(spenv, outs)
        assert out.nse == m.nse
        np.testing.assert_allclose(_dense(out), want, rtol=1e-6)
    # distinct patterns concatenate
    assert sparsify(operator.add)(m, BCOO.fromdense(X)).nse == 2 * m.nse
    # linear unary operations keep the pattern buffers of non-unique indices
    dup = BCOO((jnp.array([1., 2.]), jnp.array([[0, 1], [0, 1]])), shape=(2, 2))
    out = sparsify(operator.neg)(dup)
    assert out.nse == 2
    np.testing.assert_array_equal(_dense(out), [[0., -3.], [0., 0.]])
    out = sparsify(jnp.sin)(dup)        # nonlinear: duplicates summed first
    np.testing.assert_allclose(_dense(out), [[0., np.sin(3.)], [0., 0.]], rtol=1e-6)


def test_weak_types_and_integer_division():
    m = BCOO.fromdense(np.array([0, 5, 7, 0, -9], np.int32))
    out = sparsify(operator.mul)(2, m)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(_dense(out), [0, 10, 14, 0, -18])
    np.testing.assert_array_equal(_dense(sparsify(lambda a: lax.div(a, 2))(m)),
                                  [0, 2, 3, 0, -4])
