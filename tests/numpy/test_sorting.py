"""Parity of sorting and searching with ``jax``: ``jnp.sort``/``argsort``/``lexsort``/
``partition``/``argpartition``/``sort_complex``/``searchsorted``/``digitize`` and
``lax.sort``/``sort_key_val``/``top_k``: values and dtypes, NaNs and signed zeros,
stability, descending order, and the same under ``jit``, ``vmap`` and ``grad``."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.numpy as knp
from kiln import lax as klax

jax = pytest.importorskip("jax")
jnp = jax.numpy
jlax = jax.lax

pytestmark = pytest.mark.parity

RNG = np.random.default_rng(0)
F = RNG.normal(size=(4, 7)).astype(np.float32)
NANS = np.array([3., np.nan, -np.nan, 1., -0., 0., -np.inf, 1., np.inf, -2.], np.float32)
TIES = RNG.integers(-2, 3, size=(3, 9)).astype(np.float32)
I = RNG.integers(-5, 5, size=(3, 6)).astype(np.int32)
U = RNG.integers(0, 5, size=(8,)).astype(np.uint8)
B = RNG.random(size=(2, 5)) < 0.5
C = (RNG.integers(-2, 2, size=(6,)) + 1j * RNG.integers(-2, 2, size=(6,))).astype(np.complex64)
C[2] = np.nan + 1j
W9 = RNG.normal(size=(3, 9)).astype(np.float32)
SORTED = np.array([-1., 0., 0., 2., 2., 2., 5., np.nan], np.float32)
Q = np.array([[2., -0.], [np.nan, 7.], [-3., 0.5]], np.float32)


def _assert_same(k, j, what):
    k_leaves = kiln.tree_util.tree_leaves(k)
    j_leaves = jax.tree_util.tree_leaves(j)
    assert len(k_leaves) == len(j_leaves), what
    for a, b in zip(k_leaves, j_leaves):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{what}: shape {a.shape} vs jax {b.shape}"
        assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs jax {b.dtype}"
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True,
                                       err_msg=what)
            # signed zeros and NaN positions agree exactly
            np.testing.assert_array_equal(np.signbit(a.real), np.signbit(b.real), err_msg=what)
        else:
            np.testing.assert_array_equal(a, b, err_msg=what)


# (expression, args): the expression is evaluated with np_=kiln.numpy / jax.numpy and
# lax_=kiln.lax / jax.lax.
CASES = [
    ("np_.sort(x)", (F,)),
    ("np_.sort(x, axis=0)", (F,)),
    ("np_.sort(x, axis=None)", (F,)),
    ("np_.sort(x)", (NANS,)),
    ("np_.sort(x, descending=True)", (NANS,)),
    ("np_.sort(x, stable=False)", (TIES,)),
    ("np_.sort(x)", (I,)),
    ("np_.sort(x)", (U,)),
    ("np_.sort(x)", (B,)),
    ("np_.sort(x)", (C,)),
    ("np_.argsort(x)", (NANS,)),
    ("np_.argsort(x)", (TIES,)),
    ("np_.argsort(x, axis=0)", (TIES,)),
    ("np_.argsort(x, descending=True)", (TIES,)),
    ("np_.argsort(x, descending=True)", (NANS,)),
    ("np_.argsort(x, axis=None)", (I,)),
    ("np_.argsort(x, dtype=np.int16)", (I,)),
    ("np_.argsort(x)", (C,)),
    ("np_.lexsort((x, y))", (TIES[0], TIES[1])),
    ("np_.lexsort((x, y, z))", (TIES[0], TIES[1], TIES[2])),
    ("np_.lexsort((x, y), axis=0)", (I, I[::-1])),
    ("np_.lexsort([x])", (NANS,)),
    ("np_.partition(x, 2)", (np.array([5., 1., 4., 2., 3.], np.float32),)),
    ("np_.partition(x, 3, axis=0)", (F.T,)),
    ("np_.partition(x, -2)", (I,)),
    ("np_.partition(x, 1)", (U,)),
    ("np_.argpartition(x, 2)", (np.array([5., 1., 4., 2., 3.], np.float32),)),
    ("np_.argpartition(x, 3, axis=0)", (F.T,)),
    ("np_.argpartition(x, 1)", (U,)),
    ("np_.sort_complex(x)", (I,)),
    ("np_.sort_complex(x)", (C,)),
    ("np_.searchsorted(x, y)", (SORTED, Q)),
    ("np_.searchsorted(x, y, side='right')", (SORTED, Q)),
    ("np_.searchsorted(x, y, method='compare_all')", (SORTED, Q)),
    ("np_.searchsorted(x, y, side='right', method='sort')", (SORTED, Q)),
    ("np_.searchsorted(x, y, method='scan_unrolled')", (SORTED, Q)),
    ("np_.searchsorted(x, y)", (np.arange(10, dtype=np.int32), np.array([-1, 0, 3, 9, 10]))),
    ("np_.searchsorted(x, y, sorter=z)", (np.array([3., 1., 2.], np.float32),
                                          np.array([2.5, 0.], np.float32),
                                          np.array([1, 2, 0]))),
    ("np_.searchsorted(x, 2)", (np.arange(5, dtype=np.int32),)),
    ("np_.searchsorted(x, y)", (np.zeros(0, np.float32), Q)),
    ("np_.digitize(x, y)", (np.array([0.5, 1., 2.5, -1.], np.float32),
                            np.array([0., 1., 2.], np.float32))),
    ("np_.digitize(x, y, right=True)", (np.array([0.5, 1., 2.5, -1.], np.float32),
                                        np.array([0., 1., 2.], np.float32))),
    ("np_.digitize(x, y)", (np.array([0.5, 1., 2.5, -1.], np.float32),
                            np.array([2., 1., 0.], np.float32))),
    ("np_.digitize(x, y)", (np.array([0.5, 1.], np.float32), np.zeros(0, np.float32))),
    ("lax_.sort(x)", (NANS,)),
    ("lax_.sort(x, dimension=0)", (TIES,)),
    ("lax_.sort((x, y), num_keys=1)", (TIES, W9)),
    ("lax_.sort((x, y, z), dimension=1, num_keys=2)", (TIES, TIES[::-1], I[:, :1] * TIES)),
    ("lax_.sort_key_val(x, y)", (TIES, np.arange(27, dtype=np.float32).reshape(3, 9))),
    ("lax_.sort(x)", (C,)),
    ("lax_.top_k(x, 3)", (F,)),
    ("lax_.top_k(x, 10)", (NANS,)),
    ("lax_.top_k(x, 4)", (TIES,)),
    ("lax_.top_k(x, 2)", (I,)),
    ("lax_.top_k(x, 0)", (F,)),
]
_ARGNAMES = {1: "x", 2: "xy", 3: "xyz"}


def _fun(expr, nargs, mod, lmod):
    src = f"lambda {', '.join(_ARGNAMES[nargs])}: {expr}"
    return eval(src, {"np_": mod, "lax_": lmod, "np": np})


def _ids():
    return [f"{e}-{i}" for i, (e, _) in enumerate(CASES)]


@pytest.mark.parametrize("expr,args", CASES, ids=_ids())
def test_parity(expr, args):
    kf = _fun(expr, len(args), knp, klax)
    jf = _fun(expr, len(args), jnp, jlax)
    _assert_same(kf(*args), jax_result(f"eager.{expr}", lambda: jf(*args), args), expr)


@pytest.mark.parametrize("expr,args", CASES, ids=_ids())
def test_parity_jit(expr, args):
    kf = _fun(expr, len(args), knp, klax)
    jf = _fun(expr, len(args), jnp, jlax)
    _assert_same(kiln.jit(kf)(*args), jax_result(f"eager.{expr}", lambda: jf(*args), args),
                 f"jit {expr}")


VMAP_CASES = [
    ("np_.sort(x)", (F,)),
    ("np_.sort(x, descending=True)", (np.stack([NANS, NANS[::-1]]),)),
    ("np_.argsort(x)", (TIES,)),
    ("np_.argsort(x, descending=True)", (TIES,)),
    ("np_.lexsort((x, y))", (TIES, TIES[::-1])),
    ("np_.partition(x, 2)", (F,)),
    ("np_.argpartition(x, 2)", (F,)),
    ("lax_.top_k(x, 3)", (F,)),
    ("lax_.sort_key_val(x, y)", (TIES, W9)),
]


@pytest.mark.parametrize("expr,args", VMAP_CASES, ids=[e for e, _ in VMAP_CASES])
def test_vmap_parity(expr, args):
    kf = _fun(expr, len(args), knp, klax)
    jf = _fun(expr, len(args), jnp, jlax)
    ref = jax_result(f"vmap.{expr}", lambda: (
        jax.vmap(jf)(*args),
        jax.vmap(jf, in_axes=1, out_axes=1)(*[np.asarray(a).T for a in args])
        if all(np.ndim(a) == 2 for a in args) else jax.vmap(jf)(*args)), args)
    _assert_same(kiln.vmap(kf)(*args), ref[0], f"vmap {expr}")
    _assert_same(kiln.vmap(kf, in_axes=1, out_axes=1)(*[np.asarray(a).T for a in args])
                 if all(np.ndim(a) == 2 for a in args) else kiln.vmap(kf)(*args),
                 ref[1], f"vmap axis1 {expr}")


def test_vmap_searchsorted_batched_both():
    rng = np.random.default_rng(166)
    a = np.sort(rng.normal(size=(3, 6)).astype(np.float32), axis=1)
    v = rng.normal(size=(3, 4)).astype(np.float32)
    for side in ("left", "right"):
        for method in ("scan", "compare_all"):
            def ref(side=side, method=method):
                return (jax.vmap(lambda a, v: jnp.searchsorted(a, v, side=side,
                                                                method=method))(a, v),
                        jax.vmap(lambda v: jnp.searchsorted(a[0], v, side=side,
                                                            method=method))(v))
            ref = jax_result(f"vmap_searchsorted.{side}.{method}", ref, (a, v))
            kf = kiln.vmap(lambda a, v: knp.searchsorted(a, v, side=side, method=method))
            _assert_same(kf(a, v), ref[0], f"vmap searchsorted {side} {method}")
            kf = kiln.vmap(lambda v: knp.searchsorted(a[0], v, side=side, method=method))
            _assert_same(kf(v), ref[1], f"vmap searchsorted query only {side} {method}")


GRAD_CASES = [
    ("np_.sort(x) * w", F),
    ("np_.sort(x, axis=0) * w", F),
    ("np_.sort(x, descending=True) * w", F),
    ("lax_.top_k(x, 3)[0] * w[..., :3]", F),
    ("lax_.sort_key_val(x, x * x)[1] * w", F),
    ("np_.partition(x, 3) * w", F),
]


@pytest.mark.parametrize("expr,x", GRAD_CASES, ids=[e for e, _ in GRAD_CASES])
def test_grad_parity(expr, x):
    # (a generator seeded per case: the inputs, hence the oracle's keys, do not depend on
    # which tests ran before)
    rng = np.random.default_rng(zlib.crc32(expr.encode()))
    w = rng.normal(size=x.shape).astype(np.float32)
    t = rng.normal(size=x.shape).astype(np.float32)
    xs = np.stack([x, x[::-1]])
    kf = eval(f"lambda x: ({expr}).sum()", {"np_": knp, "lax_": klax, "w": w})
    jf = eval(f"lambda x: ({expr}).sum()", {"np_": jnp, "lax_": jlax, "w": w})
    ref = jax_result(f"grad.{expr}", lambda: (jax.grad(jf)(x), jax.vmap(jax.grad(jf))(xs),
                                              jax.jvp(jf, (x,), (t,))), (x, w, t))
    _assert_same(kiln.grad(kf)(x), ref[0], f"grad {expr}")
    _assert_same(kiln.jit(kiln.grad(kf))(x), ref[0], f"jit grad {expr}")
    _assert_same(kiln.vmap(kiln.grad(kf))(xs), ref[1], f"vmap grad {expr}")
    _assert_same(kiln.jvp(kf, (x,), (t,)), ref[2], f"jvp {expr}")


def test_grad_searchsorted_is_zero():
    a = SORTED[:-1]
    g = kiln.grad(lambda a, v: knp.searchsorted(a, v).astype(np.float32).sum(),
                  argnums=(0, 1))(a, Q)
    for gi in g:
        np.testing.assert_array_equal(np.asarray(gi), 0)


def test_sort_stability_of_payload():
    keys = np.array([1, 0, 1, 0, 1, 0], np.int32)
    vals = np.arange(6, dtype=np.int32)
    k, v = klax.sort_key_val(keys, vals)
    np.testing.assert_array_equal(np.asarray(v), [1, 3, 5, 0, 2, 4])
    np.testing.assert_array_equal(np.asarray(knp.argsort(keys, descending=True)),
                                  [0, 2, 4, 1, 3, 5])


def test_x64_index_dtypes():
    with kiln.enable_x64():
        assert knp.argsort(np.arange(3)).dtype == np.int64
        assert knp.searchsorted(np.arange(3), 1).dtype == np.int32
        assert klax.top_k(np.arange(3.0), 2)[1].dtype == np.int32


def test_errors():
    with pytest.raises(TypeError, match="'kind' argument to sort"):
        knp.sort(F, kind="stable")
    with pytest.raises(TypeError, match="'order' argument to argsort"):
        knp.argsort(F, order="x")
    with pytest.raises(ValueError, match="a should be 1-dimensional"):
        knp.searchsorted(F, 1.0)
    with pytest.raises(ValueError, match="invalid argument side"):
        knp.searchsorted(SORTED, 1.0, side="middle")
    with pytest.raises(ValueError, match="invalid argument method"):
        knp.searchsorted(SORTED, 1.0, method="bisect")
    with pytest.raises(ValueError, match="k argument to top_k must be no larger"):
        klax.top_k(F, 8)
    with pytest.raises(ValueError, match="top_k is not compatible with complex"):
        klax.top_k(C, 2)
    with pytest.raises(TypeError, match="Arguments to sort must have equal shapes"):
        klax.sort((F, F[:2]))
    with pytest.raises(ValueError, match="num_keys"):
        klax.sort(F, num_keys=2)
    with pytest.raises(NotImplementedError, match="complex"):
        knp.partition(C, 1)
    with pytest.raises(TypeError, match="need sequence of keys"):
        knp.lexsort(())
    with pytest.raises(ValueError, match="all keys need to be the same shape"):
        knp.lexsort((F, F[0]))


def test_array_methods():
    x = knp.asarray(TIES)
    ref = jax_result("array_methods", lambda: (
        jnp.asarray(TIES).sort(), jnp.asarray(TIES).argsort(axis=0),
        jnp.asarray(SORTED).searchsorted(Q), jnp.asarray(TIES).argpartition(3)),
        (TIES, SORTED, Q))
    _assert_same(x.sort(), ref[0], "x.sort()")
    _assert_same(x.argsort(axis=0), ref[1], "x.argsort(axis=0)")
    _assert_same(knp.asarray(SORTED).searchsorted(Q), ref[2], "x.searchsorted")
    _assert_same(x.argpartition(3), ref[3], "x.argpartition")


def test_jaxpr_uses_sort_primitive():
    text = str(kiln.make_jaxpr(lambda x: knp.sort(x))(F))
    assert "sort[dimension=1 is_stable=True num_keys=1]" in text
