"""Tests of kiln.tree_util and kiln.tree: registry, flattening, treedefs, key
paths, Partial, the tree_* helpers, and parity with jax.tree_util (skipped
when jax is not installed)."""

import collections
import dataclasses
import functools
import operator
import pickle

import numpy as np
import pytest

import kiln.tree as ktree
from kiln import tree_util as tu

# ---------------------------------------------------------------------------
# Node types used by the tests (registered with kiln here, with jax lazily)
# ---------------------------------------------------------------------------

Point = collections.namedtuple("Point", "x y")
Empty = collections.namedtuple("Empty", [])
Point3 = collections.namedtuple("Point3", "x y")


class Box:
    """Custom node: children list, aux = name."""

    def __init__(self, children, name):
        self.children = list(children)
        self.name = name

    def __eq__(self, other):
        return type(other) is Box and self.children == other.children and self.name == other.name

    def __repr__(self):
        return f"Box({self.children!r}, {self.name!r})"


def _box_flatten(b):
    return b.children, b.name


def _box_unflatten(name, children):
    return Box(children, name)


@dataclasses.dataclass
class DC:
    x: object
    y: object
    op: str = dataclasses.field(default="add", metadata=dict(static=True))


@dataclasses.dataclass
class DCExplicit:
    a: object
    b: object
    meta: str


class KeyedNode:
    """Custom node registered with key paths."""

    def __init__(self, p, q):
        self.p, self.q = p, q

    def __eq__(self, other):
        return type(other) is KeyedNode and (self.p, self.q) == (other.p, other.q)

    def __repr__(self):
        return f"KeyedNode({self.p!r}, {self.q!r})"


def _keyed_flatten_with_keys(n):
    key = _KEY_LIB[0].GetAttrKey
    return ((key("p"), n.p), (key("q"), n.q)), "kn"


def _keyed_unflatten(aux, children):
    return KeyedNode(*children)


class ClassNode:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def tree_flatten(self):
        return (self.a, self.b), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    def __eq__(self, other):
        return type(other) is ClassNode and (self.a, self.b) == (other.a, other.b)

    def __repr__(self):
        return f"ClassNode({self.a!r}, {self.b!r})"


class KeyedClassNode:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def tree_flatten_with_keys(self):
        return ((_dict_key_cls()("a"), self.a), (_dict_key_cls()("b"), self.b)), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    def __eq__(self, other):
        return type(other) is KeyedClassNode and (self.a, self.b) == (other.a, other.b)

    def __repr__(self):
        return f"KeyedClassNode({self.a!r}, {self.b!r})"


# KeyedClassNode must build key objects of whichever library flattens it.
_KEY_LIB = [tu]


def _dict_key_cls():
    return _KEY_LIB[0].DictKey


class StaticThing:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return type(other) is StaticThing and self.v == other.v

    def __hash__(self):
        return hash(("StaticThing", self.v))

    def __repr__(self):
        return f"StaticThing({self.v!r})"


def _register_all(lib):
    lib.register_pytree_node(Box, _box_flatten, _box_unflatten)
    lib.register_dataclass(DC)
    lib.register_dataclass(DCExplicit, data_fields=["a", "b"], meta_fields=["meta"])
    lib.register_pytree_with_keys(KeyedNode, _keyed_flatten_with_keys, _keyed_unflatten)
    lib.register_pytree_node_class(ClassNode)
    lib.register_pytree_with_keys_class(KeyedClassNode)
    lib.register_static(StaticThing)


_register_all(tu)


@pytest.fixture(scope="module")
def jtu():
    jtu = pytest.importorskip("jax.tree_util")
    if not getattr(jtu, "_kiln_test_registered", False):
        _register_all(jtu)
        jtu._kiln_test_registered = True
    return jtu


def make_trees(lib):
    """A table of pytrees; Partial comes from ``lib``."""
    arr = np.arange(3.0)
    return [
        1, 2.5, "s", arr, None, (), [], {}, (1,), [1, None, 2],
        (1, (2, [3, {"a": 4, "b": (5,)}])),
        {"b": 1, "a": 2, "c": None},
        {1: "x", 2: "y"},
        {(1, 2): 1, (0, 5): 2},
        Point(1, (2, 3)), Empty(), [Point(Point(1, 2), None)],
        collections.OrderedDict([("b", 1), ("a", [2, 3])]),
        collections.defaultdict(list, {"b": 1, "a": 2}),
        DC(1, [2, 3]), DC(None, {"k": 4}, op="mul"), DCExplicit(a=1, b=(2,), meta="m"),
        Box([1, 2], "n"), Box([], None), [Box([Box([3], "in")], ("t", 1))],
        KeyedNode(1, [2]), ClassNode(1, (2, 3)), KeyedClassNode(3, {"z": 4}),
        StaticThing(5), [StaticThing(1), 2],
        lib.Partial(max, 1, key=None), lib.Partial(max), [lib.Partial(operator.add, 1), 2],
        {"params": {"w": arr, "b": arr * 0}, "state": (None, [1.0])},
    ]


TREES = make_trees(tu)
TREE_IDS = [f"t{i}" for i in range(len(TREES))]


def _eq(a, b):
    """Structural equality that tolerates ndarray leaves and Partial."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and np.array_equal(a, b)
    if isinstance(a, functools.partial):
        return (type(a) is type(b) and a.func == b.func and _eq(a.args, b.args)
                and _eq(a.keywords, b.keywords))
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, collections.OrderedDict):
        return list(a) == list(b) and all(_eq(a[k], b[k]) for k in a)
    if isinstance(a, dict):  # plain dicts come back in sorted-key order
        return set(a) == set(b) and all(_eq(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return all(_eq(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, Box):
        return a.name == b.name and _eq(a.children, b.children)
    if isinstance(a, KeyedNode):
        return _eq(a.p, b.p) and _eq(a.q, b.q)
    if isinstance(a, ClassNode | KeyedClassNode):
        return _eq(a.a, b.a) and _eq(a.b, b.b)
    return a == b


# ---------------------------------------------------------------------------
# Round trips and basic structure
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_round_trip(tree):
    leaves, treedef = tu.tree_flatten(tree)
    assert treedef.num_leaves == len(leaves)
    back = tu.tree_unflatten(treedef, leaves)
    assert _eq(back, tree)
    # Unflatten repeatedly: the compiled path must agree with the interpreter.
    for _ in range(4):
        assert _eq(treedef.unflatten(leaves), tree)
    assert tu.tree_leaves(tree) == leaves or all(a is b for a, b in zip(tu.tree_leaves(tree), leaves))
    assert tu.tree_structure(tree) == treedef
    assert hash(tu.tree_structure(tree)) == hash(treedef)
    assert treedef.flatten_up_to(tree) == leaves or all(
        a is b for a, b in zip(treedef.flatten_up_to(tree), leaves))
    assert _eq(tu.tree_map(lambda x: x, tree), tree)
    assert _eq(tu.tree_map(lambda x, y: x, tree, tree), tree)
    pairs, treedef2 = tu.tree_flatten_with_path(tree)
    assert treedef2 == treedef
    assert all(a is b for (_, a), b in zip(pairs, leaves))
    # Every way of building the same structure gives equal, equally hashed treedefs.
    never = lambda x: False  # noqa: E731
    leaves3, treedef3 = tu.tree_flatten(tree, is_leaf=never)
    assert treedef3 == treedef and hash(treedef3) == hash(treedef)
    assert all(a is b for a, b in zip(leaves3, leaves))
    assert tu.tree_leaves(tree, is_leaf=never) == leaves3 or all(
        a is b for a, b in zip(tu.tree_leaves(tree, is_leaf=never), leaves))
    _, treedef4 = tu.tree_flatten_with_path(tree, is_leaf=never)
    assert treedef4 == treedef

    def rebuild(td):
        return tu.PyTreeDef.from_node_data_and_children(
            tu.default_registry, td.node_data(), [rebuild(c) for c in td.children()])

    rebuilt = rebuild(treedef)
    assert rebuilt == treedef and hash(rebuilt) == hash(treedef)
    assert repr(rebuilt) == repr(treedef)
    assert treedef.num_nodes == rebuilt.num_nodes


@pytest.mark.parametrize("tree", TREES, ids=TREE_IDS)
def test_pickle_treedef(tree):
    treedef = tu.tree_structure(tree)
    if any(isinstance(x, functools.partial) for x in [tree] + (tree if isinstance(tree, list) else [])):
        pass  # builtin functions pickle fine
    td2 = pickle.loads(pickle.dumps(treedef))
    assert td2 == treedef
    assert hash(td2) == hash(treedef)
    assert repr(td2) == repr(treedef)


def test_reprs():
    s = tu.tree_structure
    assert repr(s((1, {"a": 2, "b": None}))) == "PyTreeDef((*, {'a': *, 'b': None}))"
    assert repr(s(1)) == "PyTreeDef(*)"
    assert repr(s(None)) == "PyTreeDef(None)"
    assert repr(s((1,))) == "PyTreeDef((*,))"
    assert repr(s([])) == "PyTreeDef([])"
    assert repr(s(Point(1, 2))) == "PyTreeDef(CustomNode(namedtuple[Point], [*, *]))"
    assert repr(s(DC(1, 2))) == "PyTreeDef(CustomNode(DC[('add',)], [*, *]))"
    assert repr(s(Box([1], "q"))) == "PyTreeDef(CustomNode(Box[q], [*]))"
    assert (repr(s(tu.Partial(print, 1, a=2)))
            == "PyTreeDef(CustomNode(Partial[<built-in function print>], [(*,), {'a': *}]))")
    assert str(s([1])) == repr(s([1]))


def test_dict_keys_sorted_and_unsortable():
    leaves, treedef = tu.tree_flatten({"b": 1, "a": 2})
    assert leaves == [2, 1]
    out = tu.tree_unflatten(treedef, [10, 20])
    assert list(out) == ["a", "b"] and out == {"a": 10, "b": 20}
    assert list(tu.tree_map(lambda x: x, {"b": 1, "a": 2})) == ["a", "b"]
    with pytest.raises(ValueError, match="Comparator raised exception"):
        tu.tree_flatten({1: 1, "a": 2})
    with pytest.raises(ValueError, match="Comparator raised exception"):
        tu.tree_leaves({1: 1, "a": 2})
    with pytest.raises(ValueError, match="Comparator raised exception"):
        tu.tree_map(lambda x: x, {1: 1, "a": 2})
    # A single key of any type needs no comparison.
    assert tu.tree_leaves({object: 1}) == [1]


def test_ordered_and_default_dict():
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    leaves, td = tu.tree_flatten(od)
    assert leaves == [1, 2]
    back = td.unflatten([3, 4])
    assert type(back) is collections.OrderedDict and list(back.items()) == [("b", 3), ("a", 4)]
    assert td != tu.tree_structure(collections.OrderedDict([("a", 1), ("b", 2)]))
    dd = collections.defaultdict(list, {"b": 1, "a": 2})
    leaves, td = tu.tree_flatten(dd)
    assert leaves == [2, 1]
    back = td.unflatten([5, 6])
    assert type(back) is collections.defaultdict and back.default_factory is list
    assert dict(back) == {"a": 5, "b": 6}
    assert td.node_data() == (collections.defaultdict, (list, ("a", "b")))
    assert td != tu.tree_structure(collections.defaultdict(dict, {"b": 1, "a": 2}))


def test_none_is_an_empty_node():
    assert tu.tree_leaves([None, 1, None]) == [1]
    td = tu.tree_structure(None)
    assert td.num_leaves == 0 and td.num_nodes == 1
    assert tu.treedef_is_leaf(td)
    assert tu.tree_unflatten(td, []) is None
    assert tu.tree_map(lambda x: x + 1, [None, 1]) == [None, 2]
    assert tu.tree_leaves([None, 1], is_leaf=lambda x: x is None) == [None, 1]
    assert tu.tree_structure(None, is_leaf=lambda x: x is None) == tu.tree_structure(1)


def test_is_leaf():
    tree = [(1, 2), {"a": (3, 4)}, [5]]
    is_tuple = lambda x: isinstance(x, tuple)  # noqa: E731
    assert tu.tree_leaves(tree, is_leaf=is_tuple) == [(1, 2), (3, 4), 5]
    leaves, td = tu.tree_flatten(tree, is_leaf=is_tuple)
    assert td.num_leaves == 3
    assert td.unflatten(leaves) == tree
    assert tu.tree_map(lambda x: x if is_tuple(x) else -x, tree, is_leaf=is_tuple) == \
        [(1, 2), {"a": (3, 4)}, [-5]]
    # is_leaf is asked before node lookup, at the root too.
    seen = []
    tu.tree_flatten([1, (2,)], is_leaf=lambda x: seen.append(x) or False)
    assert seen == [[1, (2,)], 1, (2,), 2]
    assert tu.tree_structure([1, 2], is_leaf=lambda x: True) == tu.tree_structure(0)
    # A leaf type rejected by is_leaf is still a leaf.
    assert tu.tree_leaves([1, 2], is_leaf=lambda x: False) == [1, 2]
    # tree_map with is_leaf and rest: rest's subtrees match the is_leaf leaves.
    assert tu.tree_map(lambda x, y: (x, y), [(1, 2)], [[3, 4]], is_leaf=is_tuple) == \
        [((1, 2), [3, 4])]


def test_subclasses_are_leaves_but_namedtuples_are_nodes():
    class D(dict):
        pass

    class L(list):
        pass

    class B(Box):
        pass

    class P2(Point):
        pass

    assert tu.tree_leaves(D(a=1)) == [D(a=1)]
    assert tu.tree_leaves(L([1])) == [L([1])]
    b = B([1], "n")
    assert tu.tree_leaves(b) == [b]
    assert tu.tree_leaves(P2(1, 2)) == [1, 2]
    assert repr(tu.tree_structure(P2(1, 2))) == "PyTreeDef(CustomNode(namedtuple[P2], [*, *]))"
    assert tu.tree_structure(P2(1, 2)) != tu.tree_structure(Point(1, 2))
    assert tu.tree_structure(Point(1, 2)) != tu.tree_structure((1, 2))
    assert tu.tree_map(lambda x: x * 2, P2(1, 2)) == P2(2, 4)
    assert type(tu.tree_map(lambda x: x * 2, P2(1, 2))) is P2
    assert tu.is_tree_node(Point) and tu.is_tree_node(dict) and tu.is_tree_node(type(None))
    assert not tu.is_tree_node(int) and not tu.is_tree_node(D)


def test_registering_a_type_already_seen_as_leaf():
    class Late:
        def __init__(self, v):
            self.v = v

    x = Late(3)
    assert tu.tree_leaves([x, x]) == [x, x]
    assert tu.tree_map(lambda y: 1, [x]) == [1]
    tu.register_pytree_node(Late, lambda n: ((n.v,), None), lambda _, c: Late(*c))
    assert tu.tree_leaves([x, x]) == [3, 3]
    assert tu.tree_leaves(x) == [3]
    assert tu.tree_map(lambda y: y + 1, [x])[0].v == 4
    assert tu.tree_structure([x]).num_leaves == 1


def test_registering_a_namedtuple_overrides_namedtuple_handling():
    NT = collections.namedtuple("NT", "a b")
    assert tu.tree_leaves(NT(1, 2)) == [1, 2]
    tu.register_pytree_node(NT, lambda t: ((t.a,), t.b), lambda aux, c: NT(c[0], aux))
    assert tu.tree_leaves(NT(1, 2)) == [1]
    assert repr(tu.tree_structure(NT(1, 2))) == "PyTreeDef(CustomNode(NT[2], [*]))"
    assert tu.tree_leaves_with_path(NT(1, 2)) == [((tu.FlattenedIndexKey(0),), 1)]


def test_leaf_type_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(tu, "_MAX_LEAF_TYPES", 4)
    classes = [type(f"C{i}", (), {}) for i in range(10)]
    objs = [c() for c in classes]
    assert tu.tree_leaves(objs) == objs
    assert len(tu._leaf_types) <= 4
    assert tu.tree_leaves([1, 2.0, "x"]) == [1, 2.0, "x"]


def test_custom_flatten_may_return_generators():
    class G:
        def __init__(self, a):
            self.a = a

    tu.register_pytree_node(G, lambda g: ((x for x in g.a), len(g.a)),
                            lambda n, c: G(list(c)))
    leaves, td = tu.tree_flatten(G([1, 2, 3]))
    assert leaves == [1, 2, 3]
    assert repr(td) == "PyTreeDef(CustomNode(G[3], [*, *, *]))"
    assert td.unflatten([4, 5, 6]).a == [4, 5, 6]
    assert tu.tree_leaves(G([1, [2]])) == [1, 2]
    assert tu.tree_map(lambda x: -x, G([1, 2])).a == [-1, -2]


def test_unflatten_receives_tuple_of_children():
    got = []

    class U:
        pass

    tu.register_pytree_node(U, lambda u: ([1, 2], "aux"),
                            lambda aux, ch: got.append((aux, ch)) or U())
    td = tu.tree_structure(U())
    for _ in range(4):  # interpreted, then compiled
        td.unflatten([5, 6])
    assert got == [("aux", (5, 6))] * 4


# ---------------------------------------------------------------------------
# PyTreeDef API
# ---------------------------------------------------------------------------


def test_treedef_properties():
    td = tu.tree_structure((1, {"a": 2}))
    assert td.num_leaves == 2
    assert td.num_nodes == 4
    assert td.children() == [tu.tree_structure(1), tu.tree_structure({"a": 2})]
    assert tu.treedef_children(td) == td.children()
    assert td.node_data() == (tuple, None)
    assert tu.tree_structure({"a": 1}).node_data() == (dict, ["a"])
    assert tu.tree_structure(None).node_data() == (type(None), None)
    assert tu.tree_structure(1).node_data() is None
    assert tu.tree_structure(1).children() == []
    assert tu.tree_structure(Point(1, 2)).node_data() == (Point, None)
    assert tu.tree_structure(DC(1, 2)).node_data() == (DC, ("add",))
    assert tu.treedef_is_leaf(tu.tree_structure(1))
    assert tu.treedef_is_leaf(tu.tree_structure(()))
    assert not tu.treedef_is_leaf(td)
    assert tu.treedef_tuple([td, tu.tree_structure(1)]) == tu.tree_structure(((1, {"a": 2}), 3))
    assert tu.treedef_tuple([]) == tu.tree_structure(())
    assert tu.treedef_tuple([tu.tree_structure(1)] * 2) == tu.tree_structure((1, 1))


def test_treedef_equality_and_hash():
    a = tu.tree_structure([1, {"x": (2, None)}])
    b = tu.tree_structure([3, {"x": (4, None)}])
    assert a == b and hash(a) == hash(b) and not (a != b)
    assert a != tu.tree_structure([1, {"y": (2, None)}])
    assert a != tu.tree_structure((1, {"x": (2, None)}))
    assert tu.tree_structure(Box([1], "n")) == tu.tree_structure(Box([2], "n"))
    assert tu.tree_structure(Box([1], "n")) != tu.tree_structure(Box([1], "m"))
    assert tu.tree_structure(DC(1, 2)) != tu.tree_structure(DC(1, 2, op="mul"))
    assert tu.tree_structure(DC(1, 2)) != tu.tree_structure((1, 2))
    assert tu.tree_structure(1) != 1
    # Unhashable aux data still gives a hashable treedef.
    ub = tu.tree_structure(Box([1], ["unhashable"]))
    assert hash(ub) == hash(tu.tree_structure(Box([2], ["unhashable"])))
    assert ub == tu.tree_structure(Box([2], ["unhashable"]))
    cache = {a: "hit"}
    assert cache[b] == "hit"


def test_treedef_compose_walk_and_friends():
    outer = tu.tree_structure([0, 0])
    inner = tu.tree_structure((0, {"a": 0}))
    comp = outer.compose(inner)
    assert comp == tu.tree_structure([(0, {"a": 0}), (0, {"a": 0})])
    assert comp.num_leaves == 4
    td = tu.tree_structure([1, (2, {"a": 3})])
    walked = td.walk(lambda ch, aux: ("node", ch, aux), lambda x: x * 10, [1, 2, 3])
    assert walked == ("node", (10, ("node", (20, ("node", (30,), ["a"])), None)), None)
    with pytest.raises(ValueError, match="Too few leaves"):
        td.walk(lambda ch, aux: ch, None, [1])
    assert td.from_iterable_tree([1, [2, [3]]]) == [1, (2, {"a": 3})]
    rebuilt = tu.PyTreeDef.from_node_data_and_children(
        tu.default_registry, td.node_data(), td.children())
    assert rebuilt == td
    assert tu.PyTreeDef.from_node_data_and_children(tu.default_registry, None, []) == \
        tu.tree_structure(1)
    dc = tu.PyTreeDef.from_node_data_and_children(
        tu.default_registry, (DC, ("mul",)), [tu.tree_structure(1)] * 2)
    assert dc.unflatten([5, 6]) == DC(5, 6, "mul")
    with pytest.raises(TypeError):
        tu.PyTreeDef()


def test_unflatten_errors():
    td = tu.tree_structure((1, {"a": 2}))
    with pytest.raises(ValueError, match=r"Too few leaves for PyTreeDef; expected 2, got 1"):
        td.unflatten([1])
    with pytest.raises(ValueError, match=r"Too many leaves for PyTreeDef; expected 2\."):
        tu.tree_unflatten(td, [1, 2, 3])
    with pytest.raises(ValueError, match="Too many leaves"):
        tu.tree_unflatten(tu.tree_structure(None), [1])
    with pytest.raises(ValueError, match="Too few leaves"):
        tu.tree_unflatten(tu.tree_structure(1), [])
    assert tu.tree_unflatten(td, iter([5, 6])) == (5, {"a": 6})
    assert tu.tree_unflatten(td, (x for x in [5, 6])) == (5, {"a": 6})
    # leaves may themselves be trees
    assert tu.tree_unflatten(tu.tree_structure((1, 2)), [(1, 2), None]) == ((1, 2), None)


def test_compiled_unflatten_deep_and_wide_trees():
    deep = 1
    for _ in range(300):
        deep = [deep]
    leaves, td = tu.tree_flatten(deep)
    for _ in range(4):
        assert td.unflatten(leaves) == deep
    wide = {f"k{i}": (i, [i, None]) for i in range(600)}
    leaves, td = tu.tree_flatten(wide)
    for _ in range(4):
        assert td.unflatten(leaves) == wide
    weird_keys = {(1, "a"): 1, (2, "b"): [2]}
    leaves, td = tu.tree_flatten(weird_keys)
    for _ in range(4):
        assert td.unflatten(leaves) == weird_keys


# ---------------------------------------------------------------------------
# flatten_up_to and tree_map with several trees
# ---------------------------------------------------------------------------


def test_flatten_up_to():
    td = tu.tree_structure((1, [2, 3]))
    assert td.flatten_up_to(((1, 2), [{"a": 3}, None])) == [(1, 2), {"a": 3}, None]
    assert tu.tree_structure({"a": 1, "b": 2}).flatten_up_to({"b": 3, "a": 4}) == [4, 3]
    assert tu.tree_structure(1).flatten_up_to(None) == [None]


MISMATCHES = [
    ((1, 2), (1, 2, 3), r"Tuple arity mismatch: 3 != 2; tuple: \(1, 2, 3\)\."),
    ((1, 2), [1, 2], r"Expected tuple, got \[1, 2\]\."),
    ((1, 2), Point(1, 2), r"Expected tuple, got Point\(x=1, y=2\)\."),
    ([1], [1, 2], r"List arity mismatch: 2 != 1; list: \[1, 2\]\."),
    ([1], 5, r"Expected list, got 5\."),
    ({"a": 1}, {"b": 1}, r"Dict key mismatch; expected keys: \['a'\]; present keys: \['b'\]\."),
    ({"a": 1}, {"a": 1, "b": 2}, r"present keys: \['a', 'b'\]"),
    ({"a": 1}, collections.OrderedDict(a=1), r"Expected dict, got OrderedDict"),
    (collections.OrderedDict(a=1), {"a": 1}, r"Custom node type mismatch: expected type: "
     r"<class 'collections.OrderedDict'>, value: \{'a': 1\}\."),
    (collections.OrderedDict(a=1), collections.OrderedDict(b=1),
     r"Mismatch custom node data: \('a',\) != \('b',\); value: OrderedDict"),
    (Point(1, 2), (1, 2), r"Expected named tuple, got \(1, 2\)\."),
    (Point(1, 2), Empty(), r"Named tuple arity mismatch: 0 != 2; tuple: Empty\(\)\."),
    (Point(1, 2), Point3(1, 2), r"Named tuple type mismatch: expected type: .*Point.>, tuple: Point3"),
    (None, 1, r"Expected None, got 1\.\n\nIn previous releases"),
    ([None], [(1,)], r"Expected None, got \(1,\)\."),
    (Box([1], "n"), Box([1], "m"), r"Mismatch custom node data: 'n' != 'm'; value: Box"),
    (Box([1], "n"), Box([1, 2], "n"), r"Custom type arity mismatch: 2 != 1; value: Box"),
    (Box([1], "n"), (1,), r"Custom node type mismatch: expected type: .*Box'>, value: \(1,\)\."),
    (DC(1, 2), DC(1, 2, op="mul"), r"Mismatch custom dataclass node data: \('add',\) != \('mul',\)"),
    (DC(1, 2), (1, 2), r"Custom dataclass node type mismatch: expected type: .*DC'>"),
    (collections.defaultdict(list, a=1), collections.defaultdict(dict, a=1),
     r"Mismatch custom node data: \(<class 'list'>, \('a',\)\) != \(<class 'dict'>"),
    ((1, {"a": [1, 2]}), (1, {"a": [1, 2, 3]}), r"List arity mismatch: 3 != 2"),
]
MISMATCH_IDS = [f"m{i}" for i in range(len(MISMATCHES))]


@pytest.mark.parametrize("prefix,full,msg", MISMATCHES, ids=MISMATCH_IDS)
def test_flatten_up_to_errors(prefix, full, msg):
    with pytest.raises(ValueError, match=msg):
        tu.tree_structure(prefix).flatten_up_to(full)
    with pytest.raises(ValueError, match="pytree structure error"):
        tu.tree_map(lambda *xs: None, prefix, full)


def test_tree_map_multiple_trees():
    assert tu.tree_map(lambda *x: sum(x), (1, 2), (3, 4), (5, 6)) == (9, 12)
    # Leaves of the first tree may correspond to subtrees of the others.
    assert tu.tree_map(lambda x, y: (x, y), [1, 2], [{"a": 3}, (4, 5)]) == \
        [(1, {"a": 3}), (2, (4, 5))]
    with pytest.raises(ValueError) as err:
        tu.tree_map(lambda x, y: x, (1, 2), (1, 2, 3))
    assert str(err.value).startswith(
        "pytree structure error: different lengths of tuple at key path\n    tree_map tree\n")
    with pytest.raises(ValueError, match=r"different types at key path\n    tree_map tree\[1\]"):
        tu.tree_map(lambda x, y: x, [1, None], [1, 2])
    with pytest.raises(ValueError, match="different numbers of pytree children"):
        tu.tree_map(lambda x, y: x, [1, {"a": 1}], [1, {"a": 1, "b": 2}])
    with pytest.raises(ValueError, match="different pytree metadata"):
        tu.tree_map(lambda x, y: x, Box([1], "n"), Box([1], "m"))
    # f is never called when the structures do not match.
    calls = []
    with pytest.raises(ValueError):
        tu.tree_map(lambda x, y: calls.append(x), [1, 2], [1, (2, 3), 4])
    assert calls == []


def test_tree_map_order_and_types():
    calls = []
    tree = {"b": [1, 2], "a": (3, Point(4, 5)), "c": None}
    out = tu.tree_map(lambda x: calls.append(x) or x * 2, tree)
    assert calls == [3, 4, 5, 1, 2]
    assert out == {"a": (6, Point(8, 10)), "b": [2, 4], "c": None}
    assert type(out["a"][1]) is Point


# ---------------------------------------------------------------------------
# Key paths
# ---------------------------------------------------------------------------


def test_key_classes():
    assert str(tu.SequenceKey(0)) == "[0]"
    assert repr(tu.SequenceKey(0)) == "SequenceKey(idx=0)"
    assert str(tu.DictKey("a")) == "['a']"
    assert repr(tu.DictKey("a")) == "DictKey(key='a')"
    assert str(tu.DictKey(1)) == "[1]"
    assert str(tu.GetAttrKey("x")) == ".x"
    assert repr(tu.GetAttrKey("x")) == "GetAttrKey(name='x')"
    assert str(tu.FlattenedIndexKey(3)) == "[<flat index 3>]"
    assert repr(tu.FlattenedIndexKey(3)) == "FlattenedIndexKey(key=3)"
    assert tu.SequenceKey(0) == tu.SequenceKey(0) != tu.FlattenedIndexKey(0)
    assert tu.DictKey(0) != tu.SequenceKey(0)
    assert tu.SequenceKey(0) != 0
    assert hash(tu.DictKey("a")) == hash(tu.DictKey("a"))
    assert len({tu.SequenceKey(1), tu.SequenceKey(1), tu.GetAttrKey("a")}) == 2
    for k in [tu.SequenceKey(1), tu.DictKey((1, "a")), tu.GetAttrKey("n"), tu.FlattenedIndexKey(2)]:
        assert pickle.loads(pickle.dumps(k)) == k
    assert tu.SequenceKey(idx=2).idx == 2
    assert tu.DictKey(key="k").key == "k"
    assert tu.GetAttrKey(name="n").name == "n"
    assert tu.FlattenedIndexKey(key=1).key == 1
    with pytest.raises(AttributeError):
        tu.SequenceKey(0).idx = 1
    with pytest.raises(TypeError):
        tu.SequenceKey("a")
    with pytest.raises(TypeError):
        tu.GetAttrKey(1)
    assert tu.SequenceKey(np.int64(3)).idx == 3
    match tu.DictKey("z"):
        case tu.DictKey(key=k):
            assert k == "z"


def test_keystr():
    path = (tu.DictKey("a"), tu.SequenceKey(0), tu.GetAttrKey("x"), tu.FlattenedIndexKey(2))
    assert tu.keystr(path) == "['a'][0].x[<flat index 2>]"
    assert tu.keystr(path, simple=True, separator="/") == "a/0/x/2"
    assert tu.keystr(path, simple=True) == "a0x2"
    assert tu.keystr((tu.DictKey("a"), tu.SequenceKey(0))) == "['a'][0]"
    assert tu.keystr(()) == ""
    assert tu.keystr(("a", 1)) == "a1"
    assert tu.keystr((tu.DictKey("a"),), separator=None) == "['a']"


def test_paths():
    tree = (1, {"a": [2, Point(3, 4)], "b": collections.OrderedDict(z=5)}, None,
            tu.Partial(print, 6, k=7), DC(8, 9), KeyedNode(10, 11), ClassNode(12, 13))
    pairs, td = tu.tree_flatten_with_path(tree)
    assert [x for _, x in pairs] == tu.tree_leaves(tree)
    assert td == tu.tree_structure(tree)
    assert [tu.keystr(p) for p, _ in pairs] == [
        "[0]", "[1]['a'][0]", "[1]['a'][1].x", "[1]['a'][1].y", "[1]['b']['z']",
        "[3][<flat index 0>][0]", "[3][<flat index 1>]['k']", "[4].x", "[4].y",
        "[5].p", "[5].q", "[6][<flat index 0>]", "[6][<flat index 1>]"]
    assert tu.tree_leaves_with_path(tree) == pairs
    assert ktree.leaves_with_path(tree) == pairs
    assert tu.tree_leaves_with_path(None) == []
    assert tu.tree_flatten_with_path(5) == ([((), 5)], tu.tree_structure(5))
    out = tu.tree_map_with_path(lambda p, x, y: (tu.keystr(p), x + y),
                                {"a": 1, "b": [2]}, {"a": 10, "b": [20]})
    assert out == {"a": ("['a']", 11), "b": [("['b'][0]", 22)]}
    # is_leaf with and without the path argument
    assert tu.tree_leaves_with_path([1, [2, 3]], is_leaf=lambda x: isinstance(x, list)
                                    and len(x) == 2 and x[0] == 2) == \
        [((tu.SequenceKey(0),), 1), ((tu.SequenceKey(1),), [2, 3])]
    assert tu.tree_leaves_with_path([1, 2], is_leaf=lambda p, x: len(p) == 0,
                                    is_leaf_takes_path=True) == [((), [1, 2])]
    with pytest.raises(ValueError, match="tree_map_with_path tree"):
        tu.tree_map_with_path(lambda p, x, y: x, [1, 2], [1, 2, 3])


# ---------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------


def test_duplicate_registration():
    for typ in (tuple, list, dict, type(None), collections.OrderedDict,
                collections.defaultdict, Box, tu.Partial):
        with pytest.raises(ValueError, match="Duplicate custom PyTreeDef type registration"):
            tu.register_pytree_node(typ, lambda x: ((), None), lambda a, c: None)
    with pytest.raises(ValueError, match="Duplicate custom dataclass PyTreeDef type registration"):
        tu.register_dataclass(DC)


def test_register_dataclass():
    @functools.partial(tu.register_dataclass, drop_fields=["c"])
    @dataclasses.dataclass
    class D1:
        a: int
        b: int = ktree.static(default=3)
        c: int = dataclasses.field(default=0, init=False)

    assert D1.__name__ == "D1"
    leaves, td = tu.tree_flatten(D1(1))
    assert leaves == [1] and td.node_data() == (D1, (3,))
    assert td.unflatten([7]) == D1(7, 3)

    @dataclasses.dataclass
    class D0:
        a: int
        c: int = dataclasses.field(default=0, init=False)

    # Like JAX: an inferred init=False field must be listed in drop_fields.
    with pytest.raises(ValueError, match="Unexpected fields: {'c'}"):
        tu.register_dataclass(D0)

    @functools.partial(tu.register_dataclass, data_fields=["x"], meta_fields=["y"])
    @dataclasses.dataclass
    class D2:
        x: int
        y: str

    assert tu.tree_map(lambda v: v + 1, D2(1, "m")) == D2(2, "m")

    @dataclasses.dataclass
    class D3:
        x: int
        y: int

    with pytest.raises(ValueError, match=r"Missing fields: \{'y'\}"):
        tu.register_dataclass(D3, data_fields=["x"], meta_fields=[])
    with pytest.raises(ValueError, match="Unexpected fields"):
        tu.register_dataclass(D3, data_fields=["x", "y", "z"], meta_fields=[])
    with pytest.raises(ValueError, match="must not overlap"):
        tu.register_dataclass(D3, data_fields=["x", "y"], meta_fields=["y"])
    with pytest.raises(TypeError, match="must both be specified"):
        tu.register_dataclass(D3, data_fields=["x"])
    tu.register_dataclass(D3, data_fields=["x"], meta_fields=[], drop_fields=["y"])

    class NotDC:
        def __init__(self, a, b):
            self.a, self.b = a, b

    with pytest.raises(TypeError, match="required when nodetype is not a dataclass"):
        tu.register_dataclass(NotDC)
    tu.register_dataclass(NotDC, data_fields=["a"], meta_fields=["b"])
    n = tu.tree_map(lambda v: v * 2, NotDC(1, "s"))
    assert (n.a, n.b) == (2, "s")
    assert tu.tree_leaves_with_path(NotDC(1, "s")) == [((tu.GetAttrKey("a"),), 1)]


def test_register_static_and_classes():
    assert tu.tree_leaves([StaticThing(1), 2]) == [2]
    assert tu.tree_structure(StaticThing(1)) != tu.tree_structure(StaticThing(2))
    assert tu.tree_structure(StaticThing(1)) == tu.tree_structure(StaticThing(1))
    assert tu.tree_map(lambda x: x, StaticThing(4)) == StaticThing(4)
    assert tu.tree_map(lambda x: x + 1, ClassNode(1, 2)) == ClassNode(2, 3)
    assert tu.tree_map(lambda x: x + 1, KeyedClassNode(1, 2)) == KeyedClassNode(2, 3)
    assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(KeyedClassNode(1, 2))] == \
        ["['a']", "['b']"]


def test_registry_facade_and_one_level():
    reg = tu.default_registry
    assert reg.flatten([1, (2,)])[0] == [1, 2]
    assert reg.is_node(list) and not reg.is_node(int)
    assert reg.flatten_one_level(1) is None
    assert tu.flatten_one_level({"a": [1, 2], "b": 3}) == (([1, 2], 3), ("a", "b"))
    assert tu.flatten_one_level((1, 2)) == ((1, 2), None)
    assert tu.flatten_one_level(None) == ((), None)
    with pytest.raises(ValueError, match="can't tree-flatten type: <class 'int'>"):
        tu.flatten_one_level(1)
    assert tu.flatten_one_level_with_keys({"a": 1}) == (((tu.DictKey("a"), 1),), ("a",))


# ---------------------------------------------------------------------------
# Partial
# ---------------------------------------------------------------------------


def test_partial():
    p = tu.Partial(operator.add, 1)
    assert p(2) == 3
    assert isinstance(p, functools.partial)
    leaves, td = tu.tree_flatten(p)
    assert leaves == [1]
    assert td.unflatten([10])(2) == 12
    assert tu.tree_map(lambda x: x * 5, p)(1) == 6
    # no bound arguments
    q = tu.Partial(max)
    assert q(1, 3) == 3 and tu.tree_leaves(q) == []
    assert tu.tree_structure(q).num_nodes == 3
    # the function is static: compared in treedef equality
    assert tu.tree_structure(tu.Partial(max)) == tu.tree_structure(tu.Partial(max))
    assert tu.tree_structure(tu.Partial(max)) != tu.tree_structure(tu.Partial(min))
    assert tu.tree_structure(tu.Partial(max, 1)) != tu.tree_structure(tu.Partial(max, k=1))
    # keywords are children
    r = tu.Partial(lambda a, *, b: a - b, b=1)
    assert tu.tree_leaves(r) == [1] and r(5) == 4
    assert tu.tree_map(lambda x: x * 3, r)(5) == 2


def test_partial_of_partial_keeps_inner_arguments_static():
    inner = functools.partial(max, 1)
    p = tu.Partial(inner, 2)
    assert p.args == (2,)
    assert tu.tree_leaves(p) == [2]
    assert p(0) == 2 and p(5) == 5
    assert p.func.func is max and p.func.args == (1,)
    assert tu.tree_structure(p) == tu.tree_structure(tu.Partial(inner, 3))
    # functools.partial objects compare by identity, like in JAX.
    assert tu.tree_structure(p) != tu.tree_structure(tu.Partial(functools.partial(max, 1), 3))
    assert tu.tree_structure(p) != tu.tree_structure(tu.Partial(functools.partial(max, 0), 3))
    nested = tu.Partial(tu.Partial(max, 1), 2)
    assert tu.tree_leaves(nested) == [2]
    assert nested(0) == 2
    assert tu.tree_map(lambda x: x * 10, nested)(0) == 20


# ---------------------------------------------------------------------------
# Other helpers
# ---------------------------------------------------------------------------


def test_reduce_all_transpose_broadcast():
    assert tu.tree_reduce(operator.add, [1, (2, 3)]) == 6
    assert tu.tree_reduce(operator.add, [1, (2, 3)], 10) == 16
    assert tu.tree_reduce(operator.add, [], 0) == 0
    with pytest.raises(TypeError):
        tu.tree_reduce(operator.add, [])
    assert tu.tree_reduce(lambda a, b: a + [b], [(1,), 2], [],
                          is_leaf=lambda x: isinstance(x, tuple)) == [(1,), 2]
    assert tu.tree_reduce_associative(operator.add, [1, (2, 3), {"a": 4}]) == 10
    assert tu.tree_reduce_associative(lambda a, b: f"({a}{b})", [1, 2, 3, 4, 5]) == \
        "((12)(3(45)))"
    assert tu.tree_reduce_associative(operator.add, [], identity=0) == 0
    with pytest.raises(TypeError, match="Must specify identity"):
        tu.tree_reduce_associative(operator.add, [])
    assert tu.tree_all([1, True, None]) and not tu.tree_all([1, 0])
    assert tu.tree_all([]) is True
    assert tu.tree_all([(), 1], is_leaf=lambda x: x == ()) is False

    outer = tu.tree_structure([0, 0])
    inner = tu.tree_structure((0, 0, 0))
    tree = [(1, 2, 3), (4, 5, 6)]
    assert tu.tree_transpose(outer, inner, tree) == ([1, 4], [2, 5], [3, 6])
    assert tu.tree_transpose(outer, None, tree) == ([1, 4], [2, 5], [3, 6])
    with pytest.raises(TypeError, match="Mismatch"):
        tu.tree_transpose(outer, tu.tree_structure((0, 0)), tree)

    assert tu.tree_broadcast([1, 2], [(3, 4), {"a": 5}]) == [(1, 1), {"a": 2}]
    assert tu.tree_broadcast(1, [(3, 4), {"a": 5}]) == [(1, 1), {"a": 1}]
    with pytest.raises(ValueError, match="broadcast_prefix prefix_tree"):
        tu.tree_broadcast([1, 2, 3], [(3, 4), {"a": 5}])
    assert tu.broadcast_prefix([1, None], [(3, 4), None]) == [1, 1]

    assert tu.all_leaves([1, 2.0, "a", np.ones(2)])
    assert not tu.all_leaves([1, (2,)])
    assert not tu.all_leaves([None])
    assert tu.all_leaves([None], is_leaf=lambda x: x is None)
    assert tu.all_leaves([(1,)], is_leaf=lambda x: isinstance(x, tuple))


def test_equality_and_prefix_errors_helpers():
    errs = list(tu.equality_errors([1, (2, 3)], [1, (2,)]))
    assert errs == [((tu.SequenceKey(1),), "tuple of length 2", "tuple of length 1",
                     "the lengths do not match")]
    assert list(tu.equality_errors([1, 2], [3, 4])) == []
    errs = list(tu.equality_errors({"a": 1}, [1]))
    assert errs[0][3] == "their Python types differ"
    assert tu.prefix_errors([1, 2], [3, (4, 5)]) == []
    (e,) = tu.prefix_errors({"a": 1}, {"b": 2})
    assert "different pytree metadata" in str(e("in_axes"))


def test_tree_module():
    tree = {"b": [1, 2], "a": (3,)}
    leaves, td = ktree.flatten(tree)
    assert leaves == [3, 1, 2]
    assert ktree.leaves(tree) == leaves
    assert ktree.structure(tree) == td
    assert ktree.unflatten(td, leaves) == tree
    assert ktree.map(lambda x: x + 1, tree) == {"a": (4,), "b": [2, 3]}
    assert ktree.map(lambda x, y: x * y, tree, tree) == {"a": (9,), "b": [1, 4]}
    assert ktree.all(tree) and not ktree.all([0])
    assert ktree.reduce(operator.add, tree) == 6
    assert ktree.reduce(operator.add, tree, 1) == 7
    assert ktree.reduce_associative(operator.add, tree) == 6
    assert ktree.transpose(ktree.structure([0, 0]), None, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
    assert ktree.broadcast(1, [2, (3,)]) == [1, (1,)]
    pairs, td2 = ktree.flatten_with_path(tree)
    assert td2 == td and [tu.keystr(p) for p, _ in pairs] == ["['a'][0]", "['b'][0]", "['b'][1]"]
    assert ktree.map_with_path(lambda p, x: len(p), tree) == {"a": (2,), "b": [2, 2]}
    f = ktree.static(default=1)
    assert f.metadata["static"] is True and f.default == 1
    assert ktree.static(metadata={"k": 2}).metadata == {"static": True, "k": 2}


# ---------------------------------------------------------------------------
# Parity with jax.tree_util
# ---------------------------------------------------------------------------


def _keys_repr(paths):
    return [[repr(k) for k in p] for p in paths]


@pytest.mark.parity
@pytest.mark.parametrize("index", range(len(TREES)), ids=TREE_IDS)
def test_parity_flatten(jtu, index):
    ktree_ = make_trees(tu)[index]
    jtree = make_trees(jtu)[index]
    _KEY_LIB[0] = jtu
    try:
        jleaves, jtd = jtu.tree_flatten(jtree)
        jpairs = jtu.tree_leaves_with_path(jtree)
    finally:
        _KEY_LIB[0] = tu
    kleaves, ktd = tu.tree_flatten(ktree_)
    kpairs = tu.tree_leaves_with_path(ktree_)
    assert len(kleaves) == len(jleaves)
    assert all(_eq(a, b) for a, b in zip(kleaves, jleaves))
    assert repr(ktd) == repr(jtd)
    assert ktd.num_leaves == jtd.num_leaves
    assert ktd.num_nodes == jtd.num_nodes
    assert [repr(c) for c in ktd.children()] == [repr(c) for c in jtd.children()]
    assert tu.treedef_is_leaf(ktd) == jtu.treedef_is_leaf(jtd)
    knd, jnd = ktd.node_data(), jtd.node_data()
    if knd is None or jnd is None:
        assert knd is None and jnd is None
    elif knd[0] is tu.Partial:
        assert jnd[0] is jtu.Partial and knd[1] == jnd[1]
    else:
        assert knd == jnd
    assert [tu.keystr(p) for p, _ in kpairs] == [jtu.keystr(p) for p, _ in jpairs]
    assert [tu.keystr(p, simple=True, separator="/") for p, _ in kpairs] == \
        [jtu.keystr(p, simple=True, separator="/") for p, _ in jpairs]
    assert _keys_repr(p for p, _ in kpairs) == _keys_repr(p for p, _ in jpairs)
    assert tu.all_leaves([ktree_]) == jtu.all_leaves([jtree])
    kmapped = tu.tree_map(lambda x: x, ktree_)
    jmapped = jtu.tree_map(lambda x: x, jtree)
    assert repr(tu.tree_structure(kmapped)) == repr(jtu.tree_structure(jmapped))


@pytest.mark.parity
@pytest.mark.parametrize("prefix,full,msg", MISMATCHES, ids=MISMATCH_IDS)
def test_parity_mismatch_errors(jtu, prefix, full, msg):
    with pytest.raises(Exception) as jerr:
        jtu.tree_structure(prefix).flatten_up_to(full)
    with pytest.raises(Exception) as kerr:
        tu.tree_structure(prefix).flatten_up_to(full)
    assert type(kerr.value) is type(jerr.value)
    assert str(kerr.value) == str(jerr.value)
    with pytest.raises(Exception) as jerr:
        jtu.tree_map(lambda *xs: None, prefix, full)
    with pytest.raises(Exception) as kerr:
        tu.tree_map(lambda *xs: None, prefix, full)
    assert type(kerr.value) is type(jerr.value)
    assert str(kerr.value) == str(jerr.value)


@pytest.mark.parity
def test_parity_misc(jtu):
    with pytest.raises(ValueError) as jerr:
        jtu.tree_flatten({1: 1, "a": 2})
    with pytest.raises(ValueError) as kerr:
        tu.tree_flatten({1: 1, "a": 2})
    assert str(kerr.value) == str(jerr.value)
    for tree in [[1, (2, 3)], {"a": 1}]:
        jtd, ktd = jtu.tree_structure(tree), tu.tree_structure(tree)
        for leaves in ([], [1, 2, 3, 4]):
            with pytest.raises(ValueError) as jerr:
                jtd.unflatten(leaves)
            with pytest.raises(ValueError) as kerr:
                ktd.unflatten(leaves)
            assert str(kerr.value) == str(jerr.value)
    outer_j, outer_k = jtu.tree_structure([0, 0]), tu.tree_structure([0, 0])
    tree = [(1, 2, 3), (4, 5, 6)]
    assert tu.tree_transpose(outer_k, None, tree) == jtu.tree_transpose(outer_j, None, tree)
    with pytest.raises(TypeError) as jerr:
        jtu.tree_transpose(outer_j, jtu.tree_structure((0, 0)), tree)
    with pytest.raises(TypeError) as kerr:
        tu.tree_transpose(outer_k, tu.tree_structure((0, 0)), tree)
    assert str(kerr.value) == str(jerr.value)
    assert tu.tree_broadcast([1, 2], [(3, 4), {"a": 5}]) == \
        jtu.tree_broadcast([1, 2], [(3, 4), {"a": 5}])
    with pytest.raises(ValueError) as jerr:
        jtu.tree_broadcast([1, 2, 3], [(3, 4), {"a": 5}])
    with pytest.raises(ValueError) as kerr:
        tu.tree_broadcast([1, 2, 3], [(3, 4), {"a": 5}])
    assert str(kerr.value) == str(jerr.value)
    path = (tu.DictKey("a"), tu.SequenceKey(0), tu.GetAttrKey("x"), tu.FlattenedIndexKey(2))
    jpath = (jtu.DictKey("a"), jtu.SequenceKey(0), jtu.GetAttrKey("x"), jtu.FlattenedIndexKey(2))
    assert tu.keystr(path) == jtu.keystr(jpath)
    assert [repr(k) for k in path] == [repr(k) for k in jpath]
    td = tu.tree_structure([1, (2, {"a": 3})])
    jtd = jtu.tree_structure([1, (2, {"a": 3})])
    f_node = lambda ch, aux: ("node", ch, aux)  # noqa: E731
    assert td.walk(f_node, str, [1, 2, 3]) == jtd.walk(f_node, str, [1, 2, 3])
    assert repr(td.compose(tu.tree_structure((1, None)))) == \
        repr(jtd.compose(jtu.tree_structure((1, None))))
    assert td.from_iterable_tree([1, [2, [3]]]) == jtd.from_iterable_tree([1, [2, [3]]])
    for reg in (tu, jtu):
        with pytest.raises(ValueError) as err:
            reg.register_pytree_node(Box, _box_flatten, _box_unflatten)
        assert str(err.value).startswith("Duplicate custom PyTreeDef type registration")
    assert tu.tree_reduce_associative(lambda a, b: f"({a}{b})", list(range(7))) == \
        jtu.tree_reduce_associative(lambda a, b: f"({a}{b})", list(range(7)))


@pytest.mark.parity
def test_parity_tree_module(jtu):
    import jax

    tree = {"b": [1, None, (2, Point(3, 4))], "a": collections.OrderedDict(y=5, x=6)}
    assert repr(ktree.structure(tree)) == repr(jax.tree.structure(tree))
    assert ktree.leaves(tree) == jax.tree.leaves(tree)
    assert ktree.map(lambda x: x * 2, tree) == jax.tree.map(lambda x: x * 2, tree)
    kp = ktree.map_with_path(lambda p, x: tu.keystr(p), tree)
    jp = jax.tree.map_with_path(lambda p, x: jtu.keystr(p), tree)
    assert kp == jp


def _same_message(a, b):
    """Equal error messages, up to the (hash-dependent) order of the keys in
    a "symmetric difference on key sets" line."""
    a_lines, b_lines = a.splitlines(), b.splitlines()
    if "symmetric difference" in a and len(a_lines) == len(b_lines):
        return a_lines[:-1] == b_lines[:-1] and \
            sorted(a_lines[-1].split()) == sorted(b_lines[-1].split())
    return a == b


def _random_tree(rng, depth=0):
    kind = rng.integers(0, 10) if depth < 4 else 0
    counter = int(rng.integers(0, 1000))
    if kind <= 2:
        return counter if kind < 2 else None
    n = int(rng.integers(0, 4))
    kids = [_random_tree(rng, depth + 1) for _ in range(n)]
    if kind == 3:
        return tuple(kids)
    if kind == 4:
        return kids
    if kind == 5:
        return {f"k{int(rng.integers(0, 50))}": k for k in kids}
    if kind == 6:
        return Point(_random_tree(rng, depth + 1), _random_tree(rng, depth + 1))
    if kind == 7:
        return collections.OrderedDict((f"o{i}", k) for i, k in reversed(list(enumerate(kids))))
    if kind == 8:
        return Box(kids, f"n{n}")
    return DC(_random_tree(rng, depth + 1), _random_tree(rng, depth + 1), op=f"op{n}")


def test_random_trees_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(300):
        tree = _random_tree(rng)
        leaves, td = tu.tree_flatten(tree)
        for _ in range(4):
            assert _eq(td.unflatten(leaves), tree)
        assert td == tu.tree_structure(tree, is_leaf=lambda x: False)
        assert pickle.loads(pickle.dumps(td)) == td
        assert _eq(tu.tree_map(lambda x: x, tree), tree)
        assert tu.tree_leaves(tree) == leaves
        assert td.num_leaves == len(leaves)


@pytest.mark.parity
def test_parity_random_trees(jtu):
    rng = np.random.default_rng(1)
    for _ in range(300):
        tree = _random_tree(rng)
        kleaves, ktd = tu.tree_flatten(tree)
        jleaves, jtd = jtu.tree_flatten(tree)
        assert kleaves == jleaves
        assert repr(ktd) == repr(jtd)
        assert ktd.num_nodes == jtd.num_nodes
        assert [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(tree)] == \
            [jtu.keystr(p) for p, _ in jtu.tree_leaves_with_path(tree)]
        other = _random_tree(rng)
        assert (tu.tree_structure(other) == ktd) == (jtu.tree_structure(other) == jtd)
        try:
            jout = jtu.tree_map(lambda x, y: (x, y), tree, other)
        except ValueError as e:
            with pytest.raises(ValueError) as kerr:
                tu.tree_map(lambda x, y: (x, y), tree, other)
            assert _same_message(str(kerr.value), str(e))
        else:
            assert _eq(tu.tree_map(lambda x, y: (x, y), tree, other), jout)
        # tree is a prefix of a tree whose leaves were replaced by subtrees
        full = jtu.tree_map(lambda x: [x, {"z": x}], tree)
        assert _eq(tu.tree_map(lambda x, y: y, tree, full), jtu.tree_map(lambda x, y: y, tree, full))
        assert tu.tree_structure(tree).flatten_up_to(full) == jtd.flatten_up_to(full)


def test_flatten_one_level_of_a_namedtuple_is_a_list_and_its_type():
    import collections

    from kiln.tree_util import flatten_one_level
    A = collections.namedtuple("A", "x y")
    children, meta = flatten_one_level(A(1, [2]))
    assert children == [1, [2]] and type(children) is list and meta is A
    assert flatten_one_level((1, 2)) == ((1, 2), None)
    assert flatten_one_level({"b": 1, "a": 2}) == ((2, 1), ("a", "b"))


def test_treedef_equality_with_array_metadata_raises_jax_valueerror():
    import dataclasses

    import pytest

    import kiln
    import kiln.numpy as jnp
    from kiln import tree_util

    @tree_util.register_dataclass
    @dataclasses.dataclass
    class Tree:
        x: jnp.ndarray = dataclasses.field(metadata={"static": True})

    f = kiln.jit(lambda t: t)
    f(Tree(jnp.arange(4)))
    with pytest.raises(ValueError, match="checking equality of metadata fields of pytree"):
        f(Tree(jnp.arange(4)))
