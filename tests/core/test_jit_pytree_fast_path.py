"""The cached-``jit`` fast path for pytree arguments (``kiln_rt.tree_sig``).

A call whose arguments are tuples, lists, dicts, None, plain namedtuples and concrete
Arrays is keyed by one C walk (``kiln.jitting._tree_key``): equal keys must mean equal
tree structures and leaf avals, and every other argument falls back to Python's
flattening with its errors. Each test here would fail if the walk conflated two trees,
took apart a type it must not, or hid an error.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import jitting, tree_util

rt = pytest.importorskip("kiln.compiler.build.runtime")


@pytest.fixture(scope="module")
def walk():
    rt.get_run()
    fn = rt.tree_sig()
    if fn is None:
        pytest.skip("kiln_rt (the runtime extension) is not built on this machine")
    return lambda tree: fn(tree, jitting.Array, tree_util.native_walk_types,
                           jitting._SIG_MARKERS)


def _a(*shape, dtype=np.float32):
    return jnp.asarray(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape))


def test_sig_values_are_the_leaves_values_in_flatten_order(walk):
    tree = ({"b": _a(2), "a": [_a(3), None, (_a(1, 2),)]}, _a(4))
    sig, vals = walk(tree)
    leaves = tree_util.tree_leaves(tree)
    assert len(vals) == len(leaves) == 4
    assert all(v is leaf._value for v, leaf in zip(vals, leaves))


@pytest.mark.parametrize("other", [
    ({"a": _a(2), "b": _a(2)},),                 # a dict vs a tuple of the same leaves
    [_a(2), _a(2)],                              # a list vs a tuple
    (_a(2), (_a(2),)),                           # nesting moved
    ((_a(2), _a(2)),),
    (_a(2), None, _a(2)),                        # a None more
    (_a(2), _a(3)),                              # shape
    (_a(2), _a(2, dtype=np.int32)),              # dtype
])
def test_different_trees_have_different_sigs(walk, other):
    base = walk((_a(2), _a(2)))[0]
    assert walk(other)[0] != base


def test_weak_type_is_part_of_the_sig(walk):
    strong = _a()
    weak = kiln.jit(lambda: 1.0)()          # a weakly typed float32 scalar Array
    assert weak.weak_type and not strong.weak_type and weak.dtype == strong.dtype
    assert walk((weak,))[0] != walk((strong,))[0]


def test_dict_keys_are_sorted_as_flatten_sorts_them(walk):
    a, b = _a(1), _a(2)
    s1, v1 = walk({"x": a, "y": b})
    s2, v2 = walk({"y": b, "x": a})
    assert s1 == s2 and v1[0] is v2[0] is a._value


def test_other_types_fall_back(walk):
    assert walk((np.ones(2),)) is None                     # a NumPy leaf
    assert walk((1.0,)) is None                            # a Python scalar
    assert walk(({1: _a(1), "a": _a(1)},)) is None         # keys that do not sort
    assert walk((jnp.zeros(2),)) is not None


def test_namedtuple_is_walked_only_when_not_registered(walk):
    P = collections.namedtuple("P", "w b")
    tree_util.tree_flatten(P(_a(1), _a(1)))      # classified: a plain namedtuple node
    s = walk((P(_a(1), _a(2)),))
    assert s is not None
    assert s[0] != walk(((_a(1), _a(2)),))[0]    # not confused with a plain tuple

    Q = collections.namedtuple("Q", "w b")
    tree_util.register_pytree_node(Q, lambda q: ((q.b,), None), lambda _, c: Q(None, c[0]))
    assert walk((Q(_a(1), _a(2)),)) is None      # custom flatten: Python's path


def test_jit_calls_with_pytrees_agree_with_the_general_path():
    rt.get_run()
    calls = []

    @kiln.jit
    def f(p, x):
        calls.append(1)
        return {k: v["w"] @ x + v["b"] for k, v in p.items()}

    p = {f"l{i}": {"w": _a(3, 3) + i, "b": _a(3)} for i in range(3)}
    x = _a(3)
    want = {k: np.asarray(v["w"]) @ np.asarray(x) + np.asarray(v["b"]) for k, v in p.items()}
    for _ in range(3):
        got = f(p, x)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_array_equal(np.asarray(got[k]), want[k])
    assert len(calls) == 1
    f({**p, "l9": {"w": _a(3, 3), "b": _a(3)}}, x)            # a new structure retraces
    assert len(calls) == 2
    f(p, _a(3, dtype=np.int32))                               # a new dtype retraces
    assert len(calls) == 3


def test_unsortable_keys_raise_flattens_error():
    rt.get_run()
    f = kiln.jit(lambda d: d[1])
    with pytest.raises(ValueError, match="Comparator raised exception"):
        f({1: _a(1), "a": _a(1)})


def test_static_args_and_pytrees():
    rt.get_run()
    f = kiln.jit(lambda p, n: p["a"] * n, static_argnums=1)
    p = {"a": _a(2)}
    np.testing.assert_array_equal(np.asarray(f(p, 2)), [0, 2])
    np.testing.assert_array_equal(np.asarray(f(p, 3)), [0, 3])


def test_place_rejects_what_the_program_cannot_read():
    rt.get_run()
    place = rt.runtime_place()
    if place is None:
        pytest.skip("kiln_rt is not built on this machine")
    f32 = np.dtype(np.float32)
    bufs = [None, None]
    assert place(bufs, [1], [np.ones(2, np.float32)], [f32]) and bufs[1] is not None
    bufs = [None, None]
    assert not place(bufs, [0], [np.ones((3, 2), np.float32).T], [f32])
    assert not place(bufs, [0], [np.ones(2, np.float64)], [f32])
    assert not place(bufs, [0], [np.broadcast_to(np.float32(1), (3,))], [f32])
    assert bufs == [None, None]                       # unchanged when refused
    with pytest.raises(IndexError):
        place(bufs, [5], [np.ones(2, np.float32)], [f32])
