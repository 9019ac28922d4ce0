"""``jnp.put``, ``jnp.put_along_axis`` and ``jnp.repeat`` (static and traced counts) against
``jax.numpy``: values, dtypes, errors, and their behaviour under jit, grad and vmap."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.errors import ConcretizationTypeError

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

A = np.arange(12, dtype=np.float32).reshape(3, 4)


def same(k, j):
    assert k.shape == j.shape and k.dtype == j.dtype
    np.testing.assert_array_equal(np.asarray(k), np.asarray(j))


@pytest.mark.parametrize("mode", [None, "clip", "wrap"])
@pytest.mark.parametrize("ind,v", [
    (np.array([0, 7, 11]), np.array([10.0, 20.0, 30.0], np.float32)),
    (np.array([0, 7, 14, -1, 30]), np.array([1, 2])),        # out of bounds, tiled values
    (np.array([[1, 2], [3, 4]]), 5.0),
    (np.array([], np.int32), 5.0),
])
def test_put_matches_jax(mode, ind, v):
    same(knp.put(A, ind, v, mode=mode, inplace=False),
         jnp.put(A, ind, v, mode=mode, inplace=False))


def test_put_errors():
    with pytest.raises(ValueError, match="inplace=False"):
        knp.put(A, np.array([0]), 1.0)
    with pytest.raises(ValueError, match="mode should be one of"):
        knp.put(A, np.array([0]), 1.0, mode="bogus", inplace=False)
    with pytest.raises(NotImplementedError, match="raise"):
        knp.put(A, np.array([0]), 1.0, mode="raise", inplace=False)


def test_put_under_transforms():
    ind = np.array([1, 5, 6])
    f = kiln.jit(lambda a, v: knp.put(a, ind, v, inplace=False))
    same(f(A, np.float32(-1)), jnp.put(A, ind, np.float32(-1), inplace=False))
    gk = kiln.grad(lambda a, v: (knp.put(a, ind, v, inplace=False) ** 2).sum(), (0, 1))
    gj = jax.grad(lambda a, v: (jnp.put(a, ind, v, inplace=False) ** 2).sum(), (0, 1))
    v = np.array([1.0, 2.0, 3.0], np.float32)
    for x, y in zip(gk(A, v), gj(A, v)):
        same(x, y)
    rows = kiln.vmap(lambda r, i: knp.put(r, i, 0.0, inplace=False))(A, np.array([0, 1, 2]))
    same(rows, jax.vmap(lambda r, i: jnp.put(r, i, 0.0, inplace=False))(A, np.array([0, 1, 2])))


@pytest.mark.parametrize("indices,values,axis", [
    (np.array([[0], [2], [1]]), 99.0, 1),
    (np.array([[0], [2], [1]]), np.array([[1.0], [2.0], [3.0]], np.float32), -1),
    (np.array([[0, 2, 1, 1]]), np.array([7.0, 8.0, 9.0, 6.0], np.float32), 0),
    (np.array([[0], [1]]), 5.0, 0),                      # indices broadcast over arr's axis
    (np.array([0, 5, 11]), np.array([1.0, 2.0, 3.0], np.float32), None),
    (np.array([[0], [9], [1]]), 99.0, 1),                # out of bounds: dropped
])
def test_put_along_axis_matches_jax(indices, values, axis):
    same(knp.put_along_axis(A, indices, values, axis, inplace=False),
         jnp.put_along_axis(A, indices, values, axis, inplace=False))


def test_put_along_axis_errors_and_grad():
    with pytest.raises(ValueError, match="inplace=False"):
        knp.put_along_axis(A, np.array([[0]]), 1.0, 1)
    with pytest.raises(ValueError, match="same ndim"):
        knp.put_along_axis(A, np.array([0]), 1.0, 1, inplace=False)
    with pytest.raises(ValueError, match="broadcastable"):
        knp.put_along_axis(A, np.array([[0], [1], [2]]), np.ones(5), 1, inplace=False)
    idx = np.array([[1], [0], [3]])
    gk = kiln.grad(lambda a, v: knp.put_along_axis(a, idx, v, 1, inplace=False).sum(), (0, 1))
    gj = jax.grad(lambda a, v: jnp.put_along_axis(a, idx, v, 1, inplace=False).sum(), (0, 1))
    v = np.ones((3, 1), np.float32)
    for x, y in zip(gk(A, v), gj(A, v)):
        same(x, y)
    same(kiln.jit(lambda a: knp.put_along_axis(a, idx, 0.0, 1, inplace=False))(A),
         jnp.put_along_axis(A, idx, 0.0, 1, inplace=False))


REPEAT_CASES = [
    (A, 2, None, None),
    (A, np.array([1, 0, 3, 2]), 1, None),
    (A, np.array([1, 0, 3, 2]), 1, 9),        # longer than the sum: last element repeats
    (A, np.array([1, 0, 3, 2]), 1, 3),        # shorter: cut
    (A, np.array([2, 1, 0]), 0, 4),
    (A, np.array([2]), 1, None),              # one count broadcast
    (A, 0, None, None),
    (np.float32(3), 3, None, None),
    (np.float32(3), np.array([2]), None, 4),
    (np.arange(5), np.array([1, 2, 0, 1, 3]), 0, 7),
]


@pytest.mark.parametrize("case", range(len(REPEAT_CASES)))
def test_repeat_matches_jax(case):
    x, r, axis, total = REPEAT_CASES[case]
    same(knp.repeat(x, r, axis=axis, total_repeat_length=total),
         jnp.repeat(x, r, axis=axis, total_repeat_length=total))


@pytest.mark.parametrize("case", [2, 3, 4, 9])
def test_repeat_traced_counts(case):
    x, r, axis, total = REPEAT_CASES[case]
    f = kiln.jit(lambda x, r: knp.repeat(x, r, axis=axis, total_repeat_length=total))
    same(f(x, r), jnp.repeat(x, r, axis=axis, total_repeat_length=total))


def test_repeat_traced_needs_total_length():
    f = kiln.jit(lambda r: knp.repeat(A, r, axis=1))
    with pytest.raises(ConcretizationTypeError, match="total_repeat_length"):
        f(np.array([1, 2, 3, 4]))


def test_repeat_negative_and_mismatch():
    with pytest.raises(TypeError, match="negative"):      # JAX: TypeError
        knp.repeat(A, -1)
    with pytest.raises(ValueError, match="does not match"):
        knp.repeat(A, np.array([1, 2]), axis=1)


def test_repeat_grad_and_vmap():
    r = np.array([1, 0, 3, 2])
    gk = kiln.grad(lambda x: (knp.repeat(x, r, axis=1, total_repeat_length=7) ** 2).sum())(A)
    gj = jax.grad(lambda x: (jnp.repeat(x, r, axis=1, total_repeat_length=7) ** 2).sum())(A)
    same(gk, gj)
    counts = np.array([[1, 1, 2], [0, 4, 0], [3, 0, 0]])
    row = np.array([5.0, 6.0, 7.0], np.float32)
    same(kiln.vmap(lambda c: knp.repeat(row, c, total_repeat_length=4))(counts),
         jax.vmap(lambda c: jnp.repeat(row, c, total_repeat_length=4))(counts))
