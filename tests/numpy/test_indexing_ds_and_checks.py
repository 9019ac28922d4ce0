"""Indexing gaps JAX's ``lax_numpy_indexing_test`` found: ``jax.ds`` slices inside ``x[...]``
and ``x.at[...]`` (JAX's semantics, recorded below from JAX 0.10.2), empty boolean masks,
string indices, ``jax_check_static_indices``, ``squeeze`` in the jaxpr of basic indexing,
traced indices into an empty axis, and ``jax._src.numpy.indexing.rewriting_take``."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln._src.numpy import indexing as jindexing
from kiln.config import config_context

X = np.arange(10, dtype=np.int32)
Y = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

# (name, function of (kiln module, x, i), operand, {start: JAX 0.10.2's result}).
DS_CASES = [
    ("get", lambda x, i: x[kiln.ds(i, 3)], X,
     {0: [0, 1, 2], 8: [7, 8, 9], -2: [7, 8, 9], -20: [0, 1, 2]}),
    ("get5", lambda x, i: x[kiln.ds(i, 5)], X,
     {8: [5, 6, 7, 8, 9], -2: [5, 6, 7, 8, 9], -20: [0, 1, 2, 3, 4]}),
    ("get_strided", lambda x, i: x[kiln.ds(i, 3, 2)], X,
     {1: [1, 3, 5], 8: [8, 9, 9], -3: [0, 0, 1]}),
    ("get_fill", lambda x, i: x.at[kiln.ds(i, 3)].get(mode="fill", fill_value=-1), X,
     {7: [7, 8, 9], 8: [-1, -1, -1], -3: [-1, -1, -1]}),
    ("get_fill_strided", lambda x, i: x.at[kiln.ds(i, 3, 2)].get(mode="fill", fill_value=-1),
     X, {6: [6, 8, -1], -1: [-1, 1, 3]}),
    ("set", lambda x, i: x.at[kiln.ds(i, 3)].set(0), X,
     {7: [0, 1, 2, 3, 4, 5, 6, 0, 0, 0], 8: list(range(10)), -3: list(range(10))}),
    ("set_clip", lambda x, i: x.at[kiln.ds(i, 3)].set(0, mode="clip"), X,
     {8: [0, 1, 2, 3, 4, 5, 6, 0, 0, 0], -2: [0, 0, 0, 3, 4, 5, 6, 7, 8, 9]}),
    ("add_strided", lambda x, i: x.at[kiln.ds(i, 2, 3)].add(100), X,
     {1: [0, 101, 2, 3, 104, 5, 6, 7, 8, 9], 7: [0, 1, 2, 3, 4, 5, 6, 107, 8, 9],
      -3: [100, 1, 2, 3, 4, 5, 6, 7, 8, 9]}),
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("name,fn,operand,want", DS_CASES, ids=[c[0] for c in DS_CASES])
def test_ds_slices_as_jax(name, fn, operand, want, jit):
    f = kiln.jit(fn) if jit else fn
    for i, w in want.items():
        np.testing.assert_array_equal(np.asarray(f(jnp.asarray(operand), i)), w)


def test_ds_slices_place_their_axis_like_a_slice():
    f = kiln.jit(lambda y, i: (y[..., kiln.ds(i, 2)], y[None, kiln.ds(i, 1), 0],
                               y[np.array([0, 1]), kiln.ds(i, 2), np.array([1, 2])]))
    a, b, c = f(Y, 1)
    assert (a.shape, b.shape, c.shape) == ((2, 3, 2), (1, 1, 4), (2, 2))
    np.testing.assert_array_equal(np.asarray(a), Y[..., 1:3])
    np.testing.assert_array_equal(np.asarray(c), Y[np.array([0, 1]), 1:3, np.array([1, 2])])
    got = kiln.jit(lambda y, i: y.at[0, kiln.ds(i, 2), kiln.ds(1, 2)].multiply(2.0))(Y, 1)
    want = Y.copy()
    want[0, 1:3, 1:3] *= 2
    np.testing.assert_array_equal(np.asarray(got), want)


def test_empty_boolean_masks_index_nothing_whatever_their_shape():
    for xs, ms, want in [((3,), (0,), (0,)), ((3, 4), (0,), (0, 4)), ((3, 4), (0, 4), (0,)),
                         ((3, 4), (3, 0), (0,)), ((3, 4, 5), (3, 0), (0, 5))]:
        m = np.empty(ms, bool)
        assert jnp.zeros(xs)[m].shape == want == np.zeros(xs)[m].shape
    with pytest.raises(IndexError, match="did not match"):
        jnp.zeros((3,))[np.ones(2, bool)]


def test_string_indices_are_jaxs_type_error():
    with pytest.raises(TypeError, match="JAX does not support string indexing"):
        jnp.zeros(2)["abc"]
    with pytest.raises(TypeError, match="JAX does not support string indexing"):
        jnp.zeros((2, 3))[:, "abc"]


@pytest.mark.parametrize("shape,idx,msg", [
    ((2,), -4, "index -4 out of bounds for axis 0 with size 2"),
    ((2, 3), np.index_exp[..., -4], "index -4 out of bounds for axis 1 with size 3"),
    ((2, 3, 5), np.index_exp[:, [1, 2], 6], "index 6 out of bounds for axis 2 with size 5"),
    ((2, 3, 5), np.index_exp[np.arange(3), 6, None],
     "index 6 out of bounds for axis 1 with size 3"),
])
def test_check_static_indices(shape, idx, msg):
    x = jnp.zeros(shape)
    with config_context(jax_check_static_indices=True):
        for f in (lambda a: a[idx], kiln.jit(lambda a: a[idx]), lambda a: a.at[idx].get()):
            with pytest.raises(IndexError, match=msg):
                f(x)
        assert x[(0,) * len(shape)].shape == ()        # in bounds: fine
    x[idx]                                              # off (the default): clamped


def test_basic_indexing_stages_slice_and_squeeze():
    eqns = kiln.make_jaxpr(lambda x: x[0, :2, 1])(jnp.ones((3, 4, 5))).jaxpr.eqns
    assert [e.primitive.name for e in eqns] == ["slice", "squeeze"]
    assert eqns[1].params["dimensions"] == (0, 2)


def test_integer_into_an_empty_axis_names_it():
    x = jnp.ones((2, 0))
    with pytest.raises(IndexError, match="index 0 is out of bounds for axis 1 with size 0"):
        x[0, 0]
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 0"):
        kiln.jit(lambda i: x[0, i])(0)


def test_rewriting_take_strategies():
    S = jindexing.IndexingStrategy
    x = jnp.asarray(Y)
    for strategy in S:
        got = jindexing.rewriting_take(x, (1, slice(0, 2)), strategy=strategy)
        np.testing.assert_array_equal(np.asarray(got), Y[1, 0:2])
    with pytest.raises(TypeError, match="Expected strategy to be IndexingStrategy"):
        jindexing.rewriting_take(x, 0, strategy="gather")
    with pytest.raises(TypeError, match="static_slice: indices must be static"):
        jindexing.rewriting_take(x, (np.arange(2), 0), strategy=S.STATIC_SLICE)
    with pytest.raises(IndexError, match="index 3 out of bounds for axis 0 with size 2"):
        jindexing.rewriting_take(x, (3, 0), strategy=S.STATIC_SLICE)
    # normalize_indices=False: a negative index is not wrapped (clip mode clamps it to 0).
    got = jindexing.rewriting_take(x, (-1,), normalize_indices=False, mode="clip")
    np.testing.assert_array_equal(np.asarray(got), Y[0])


def test_ds_window_larger_than_the_axis_is_jaxs_type_error():
    x = jnp.arange(10)
    with pytest.raises(TypeError, match="slice_sizes must be less than or equal"):
        x[kiln.ds(0, 12)]
    with pytest.raises(TypeError, match="slice_sizes must be less than or equal"):
        kiln.jit(lambda x, i: x[kiln.ds(i, 12)])(x, 1)
    with pytest.raises(TypeError, match="Bounds of the window dimensions"):
        x.at[kiln.ds(0, 12)].set(0)


Z = np.arange(24, dtype=np.int32).reshape(4, 6)
# A strided jax.ds beside array indices stays a slice (JAX 0.10.2's results); out-of-range
# strided rows are dropped.
STRIDED_WITH_ARRAYS = [
    (lambda z, i: z.at[kiln.ds(i, 2, 2), jnp.array([1, 3])].set(-1),
     {0: [(0, 1), (0, 3), (2, 1), (2, 3)], 3: [(3, 1), (3, 3)], -1: [(1, 1), (1, 3)]}),
    (lambda z, i: z.at[jnp.array([0, 3]), kiln.ds(i, 3, 2)].set(-1),
     {1: [(0, 1), (0, 3), (0, 5), (3, 1), (3, 3), (3, 5)], 4: [(0, 4), (3, 4)]}),
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("k", range(len(STRIDED_WITH_ARRAYS)))
def test_strided_ds_beside_array_indices_updates_a_block(k, jit):
    fn, want = STRIDED_WITH_ARRAYS[k]
    f = kiln.jit(fn) if jit else fn
    for i, cells in want.items():
        expect = Z.copy()
        for r, c in cells:
            expect[r, c] = -1
        np.testing.assert_array_equal(np.asarray(f(jnp.asarray(Z), i)), expect)


def test_strided_ds_beside_array_indices_accumulates_and_differentiates():
    # repeated array indices inside the block accumulate (add), as JAX
    got = jnp.asarray(Z).at[kiln.ds(1, 3, 2), jnp.array([1, 3, 3])].add(1)
    want = Z.copy()
    want[[1, 3], 1] += 1
    want[[1, 3], 3] += 2
    np.testing.assert_array_equal(np.asarray(got), want)
    zf = Z.astype(np.float32)
    g = kiln.grad(lambda z: jnp.sum(z.at[kiln.ds(0, 2, 2), jnp.array([1, 3])].mul(3.0) ** 2))(zf)
    expect = 2 * zf
    expect[np.ix_([0, 2], [1, 3])] *= 9
    np.testing.assert_allclose(np.asarray(g), expect)
    v = kiln.vmap(lambda z: z.at[kiln.ds(0, 2, 2), jnp.array([1])].add(1.0))(np.stack([zf, zf]))
    assert float(v[1, 2, 1]) == zf[2, 1] + 1 and float(v[1, 1, 1]) == zf[1, 1]


def test_strided_ds_beside_array_indices_with_clip_is_refused():
    with pytest.raises(NotImplementedError, match="mode='clip'"):
        jnp.asarray(Z).at[kiln.ds(1, 3, 2), jnp.array([1])].add(1, mode="clip")
