"""The eager fast paths (``Array.__getitem__``, ``jnp.sum``/``mean``/``dot``/``where``) give
what the general path gives under ``jit`` and what ``jax.numpy`` gives: values (sums to
within a few ulps: the compiled code adds in another order), shapes, dtypes, weak types,
errors; and their results are always ndarray-backed."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

V = np.arange(24, dtype=np.float32).reshape(4, 6)
IA = np.array([0, 3, -1, 7, -9])

INDICES = [
    1, -1, 5, -7, slice(1, 3), slice(None, None, -1), slice(-10, 10), (1, 2), (1, ...),
    (..., 2), (None, 1), (slice(None), 1), (1, slice(2, None), None), (...,), (), (1, 9),
    (-5, 0), np.int64(2), (slice(np.int64(1), None),), (True,), True, (1, True),
    IA, np.array([1, 2], np.uint8), np.array([[0, -4], [3, 2]]), np.array([], np.int32),
    np.array(2), np.array(-9), np.array([2**40, -2**40]), V[:, 0] > 5, V > 5,
    (IA, slice(None)), (slice(None), IA), (IA[:2, None], np.array([1, 2, 3])), (IA,),
    (0, np.array([1, 7])),
]
BAD = [(..., None, 1, ...), (1, 2, 3), slice(1.5, 3), slice(None, None, 0), [1, 2], 1.0,
       (1.0,), np.array([1.0])]


def _to(mod, i):
    return mod.asarray(i) if isinstance(i, np.ndarray) else i


def _check(k, j):
    assert type(k._value) is np.ndarray
    assert k.shape == j.shape and k.dtype == j.dtype and k.weak_type == j.weak_type
    np.testing.assert_array_equal(np.asarray(k), np.asarray(j))


@pytest.mark.parametrize("i", range(len(INDICES)))
def test_getitem_matches_jax(i):
    idx = INDICES[i]
    _check(knp.asarray(V)[_to(knp, idx)], jnp.asarray(V)[_to(jnp, idx)])


@pytest.mark.parametrize("i", range(len(INDICES)))
def test_getitem_fast_equals_jit(i):
    idx = INDICES[i]
    if isinstance(idx, np.ndarray) and idx.dtype == np.bool_:
        pytest.skip("boolean masks need concrete values")
    k = knp.asarray(V)[_to(knp, idx)]
    if isinstance(idx, np.ndarray):
        j = kiln.jit(lambda x, i: x[i])(V, idx)
    else:
        j = kiln.jit(lambda x: x[idx])(V)
    np.testing.assert_array_equal(np.asarray(k), np.asarray(j))
    assert k.dtype == j.dtype


@pytest.mark.parametrize("i", range(len(BAD)))
def test_getitem_errors_match_jax(i):
    idx = BAD[i]
    with pytest.raises(Exception) as ej:
        jnp.asarray(V)[_to(jnp, idx)]
    with pytest.raises(type(ej.value)):
        knp.asarray(V)[_to(knp, idx)]


def test_getitem_keeps_weak_type_and_scalar_results_are_arrays():
    w = knp.asarray(V) * 1.0
    x = kiln.lax.full((3,), 2.0)        # weakly typed (Python scalar fill)
    assert x.weak_type and x[1].weak_type and x[1:].weak_type
    assert not w[1, 2].weak_type
    for r in (knp.arange(5.0)[knp.asarray(np.array(2))], knp.asarray(V)[1, 2]):
        assert type(r._value) is np.ndarray and r.shape == ()


@pytest.mark.parametrize("args", [
    (V > 5, V, -V), (V > 5, V, 2.0), (V > 5, 3, V), (V[0] > 2, V, V[:1]),
    (V > 5, V.astype(np.int32), 7), (V > 5, V.astype(np.int32), 2.5),
    (V > 5, V, V.astype(np.int32)), (V > 5, 1.0, 2.0),
])
def test_where_matches_jax(args):
    _check(knp.where(*[_to(knp, a) for a in args]), jnp.where(*[_to(jnp, a) for a in args]))


def test_where_weak_operands():
    c = knp.asarray(V > 5)
    a, b = kiln.lax.full(V.shape, 1.0), kiln.lax.full(V.shape, 2.0)
    assert knp.where(c, a, b).weak_type
    assert not knp.where(c, a, knp.asarray(V)).weak_type


@pytest.mark.parametrize("fn,kw", [
    ("sum", {}), ("sum", {"axis": 0}), ("sum", {"axis": (0, 1), "keepdims": True}),
    ("sum", {"axis": -1}), ("mean", {}), ("mean", {"axis": 1}),
    ("mean", {"axis": 0, "keepdims": True}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_reductions_fast_equals_jit(fn, kw, dtype):
    x = (np.random.default_rng(0).standard_normal((5, 7)) * 10).astype(dtype)
    k = getattr(knp, fn)(knp.asarray(x), **kw)
    j = kiln.jit(lambda v: getattr(knp, fn)(v, **kw))(knp.asarray(x))
    assert type(k._value) is np.ndarray
    assert k.dtype == j.dtype and k.shape == j.shape
    _same_up_to_summation_order(k, j, x)


def _same_up_to_summation_order(k, j, x):
    """Eager (NumPy's pairwise order) vs compiled (vectorized chunks): each order gives
    a correctly rounded partial sums' result, so they agree to a few ulps of sum(|x|)."""
    eps = np.finfo(np.asarray(k).real.dtype).eps
    scale = float(np.abs(np.asarray(x)).sum())
    np.testing.assert_allclose(np.asarray(k), np.asarray(j), rtol=0, atol=4 * eps * scale)


@pytest.mark.parametrize("sa,sb", [((5,), (5,)), ((3, 4), (4,)), ((4,), (4, 2)),
                                   ((3, 3), (3, 3))])
def test_dot_fast_equals_jit_and_jax(sa, sb):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    k = knp.dot(knp.asarray(a), knp.asarray(b))
    j = kiln.jit(knp.dot)(a, b)
    assert type(k._value) is np.ndarray
    _same_up_to_summation_order(k, j, np.abs(a).max() * np.abs(b).max() * a.shape[-1])
    ref = jnp.dot(a, b)
    assert k.dtype == ref.dtype and k.shape == ref.shape
    np.testing.assert_allclose(np.asarray(k), np.asarray(ref), rtol=1e-5)


def test_floating_point_warnings_silenced_only_inside_kiln():
    import warnings

    x = knp.asarray(np.array([1.0, 0.0, -1.0], np.float32))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")       # in front of kiln's filter: error state used
        _ = (x / 0, knp.log(x), knp.sqrt(x), x * np.inf, kiln.jit(lambda a: a / 0)(x))
        assert not rec, [str(r.message) for r in rec]
        _ = np.array([1.0]) / 0               # the user's own NumPy still warns
        assert any("divide by zero" in str(r.message) for r in rec)


def test_quantile_of_empty_axis_is_nan():
    for r in (knp.median(np.ones((0, 3)), axis=0), knp.quantile(np.ones((0,)), 0.3),
              knp.nanmedian(np.ones((0, 2)), axis=0)):
        assert np.isnan(np.asarray(r)).all()
    assert knp.median(np.ones((0, 3)), axis=0, keepdims=True).shape == (1, 3)
