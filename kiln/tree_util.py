"""Pytrees: the node registry, flattening to ``(leaves, PyTreeDef)``, and the
``jax.tree_util`` helpers built on them.

What it holds: the registry of container types (tuple, list, dict, None,
namedtuples, OrderedDict, defaultdict, registered classes and dataclasses),
``PyTreeDef`` with JAX's equality, hashing, repr and ``flatten_up_to`` errors,
key paths (``SequenceKey``, ``DictKey``, ``GetAttrKey``, ``FlattenedIndexKey``),
``Partial``, and the ``tree_*`` functions.

What it must not hold: anything that knows about arrays, tracers or
transformations. Every other part of kiln imports this module, so it imports
nothing from kiln.

Performance notes. Flattening runs on every call of every transformation, so
the hot paths (``tree_flatten``, ``tree_leaves``, ``tree_unflatten``,
``tree_map`` without ``is_leaf``) test ``type(x)`` against the built-in node
types by identity and fall back to one dict lookup for everything else; leaf
children are handled inline, without a recursive call. A treedef is a nested
tuple ``(entry, aux, children)`` with ``None`` standing for a leaf, so
equality is CPython's tuple comparison and hashing is tuple hashing.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import functools
import operator
import textwrap
from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import islice
from typing import Any, TypeVar

T = TypeVar("T")
Typ = TypeVar("Typ", bound=type)
H = TypeVar("H", bound=Hashable)

Leaf = Any
PyTree = Any
KeyEntry = TypeVar("KeyEntry", bound=Any)
KeyLeafPair = tuple[KeyEntry, Any]
KeyLeafPairs = Iterable[KeyLeafPair]
KeyPath = tuple[KeyEntry, ...]

# ---------------------------------------------------------------------------
# Key path entries
# ---------------------------------------------------------------------------


class SequenceKey:
    """Key of a child of a tuple, list or namedtuple-like sequence node."""

    __slots__ = ("_idx",)
    __match_args__ = ("idx",)

    def __init__(self, idx: int):
        self._idx = operator.index(idx)

    @property
    def idx(self) -> int:
        return self._idx

    def __str__(self):
        return f"[{self._idx!r}]"

    def __repr__(self):
        return f"SequenceKey(idx={self._idx!r})"

    def __eq__(self, other):
        return isinstance(other, SequenceKey) and self._idx == other._idx

    def __hash__(self):
        return hash(("SequenceKey", self._idx))

    def __reduce__(self):
        return (type(self), (self._idx,))


class DictKey:
    """Key of a child of a dict-like node."""

    __slots__ = ("_key",)
    __match_args__ = ("key",)

    def __init__(self, key: Hashable):
        self._key = key

    @property
    def key(self) -> Hashable:
        return self._key

    def __str__(self):
        return f"[{self._key!r}]"

    def __repr__(self):
        return f"DictKey(key={self._key!r})"

    def __eq__(self, other):
        return isinstance(other, DictKey) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __reduce__(self):
        return (type(self), (self._key,))


class GetAttrKey:
    """Key of a child stored as an attribute (namedtuples, dataclasses)."""

    __slots__ = ("_name",)
    __match_args__ = ("name",)

    def __init__(self, name: str):
        if not isinstance(name, str):
            raise TypeError(f"GetAttrKey name must be a str, got {type(name)}")
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def __str__(self):
        return f".{self._name}"

    def __repr__(self):
        return f"GetAttrKey(name={self._name!r})"

    def __eq__(self, other):
        return isinstance(other, GetAttrKey) and self._name == other._name

    def __hash__(self):
        return hash(("GetAttrKey", self._name))

    def __reduce__(self):
        return (type(self), (self._name,))


class FlattenedIndexKey:
    """Key of a child of a custom node registered without key paths."""

    __slots__ = ("_key",)
    __match_args__ = ("key",)

    def __init__(self, key: int):
        self._key = operator.index(key)

    @property
    def key(self) -> int:
        return self._key

    def __str__(self):
        return f"[<flat index {self._key}>]"

    def __repr__(self):
        return f"FlattenedIndexKey(key={self._key!r})"

    def __eq__(self, other):
        return isinstance(other, FlattenedIndexKey) and self._key == other._key

    def __hash__(self):
        return hash(("FlattenedIndexKey", self._key))

    def __reduce__(self):
        return (type(self), (self._key,))


def keystr(keys: KeyPath, *, simple: bool = False, separator: str = "") -> str:
    """Render a key path as a string, e.g. ``"['a'][0].x"``.

    With ``simple=True`` each entry is rendered as its bare key (``a``, ``0``,
    ``x``) and the entries are joined with ``separator``.
    """
    if separator is None:  # JAX would fail here; we treat it as ''.
        separator = ""
    if simple:
        return separator.join(_simple_entrystr(k) for k in keys)
    return separator.join(str(k) for k in keys)


def _simple_entrystr(key: Any) -> str:
    if isinstance(key, SequenceKey):
        return str(key.idx)
    if isinstance(key, DictKey | FlattenedIndexKey):
        return str(key.key)
    if isinstance(key, GetAttrKey):
        return key.name
    return str(key)


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------

# Node kinds. Tuples, lists, dicts and None are matched by type identity in
# the hot paths; the kind drives the slower generic paths and the repr.
_K_TUPLE, _K_LIST, _K_DICT, _K_NONE, _K_NAMEDTUPLE, _K_CUSTOM, _K_DATACLASS = range(7)


class _Entry:
    """How to take apart and rebuild one node type.

    ``flatten(x) -> (children, aux)``; ``unflatten(aux, children_tuple) -> x``;
    ``flatten_with_keys(x) -> (((key, child), ...), aux)`` or None when the
    type was registered without keys (children then get FlattenedIndexKey).
    Entries compare by identity: one entry per registered type.
    """

    __slots__ = ("type", "kind", "flatten", "unflatten", "flatten_with_keys",
                 "data_fields", "meta_fields")

    def __init__(self, typ, kind, flatten, unflatten, flatten_with_keys=None,
                 data_fields=(), meta_fields=()):
        self.type = typ
        self.kind = kind
        self.flatten = flatten
        self.unflatten = unflatten
        self.flatten_with_keys = flatten_with_keys
        self.data_fields = data_fields
        self.meta_fields = meta_fields

    def __reduce__(self):
        return (_entry_for_type, (self.type,))

    def __repr__(self):
        return f"_Entry({self.type.__name__})"


# Explicitly registered types (built-ins included): used for duplicate checks.
_registry: dict[type, _Entry] = {}
# _registry plus every namedtuple type seen so far: the node lookup.
_lookup: dict[type, _Entry] = {}
# Namedtuple types flattened as plain tuples of their fields (no custom registration):
# the native walk of jit's fast path (``kiln_rt.tree_sig``) may take them apart too.
native_walk_types: dict[type, bool] = {}
_lookup_get = _lookup.get
# Types already classified as leaves. Lets the hot paths decide "all children
# are leaves" with one C-level set operation. Registration removes the type;
# the set is cleared if it grows large (types created in a loop).
_leaf_types: set[type] = set()
_all_leaf_types = _leaf_types.issuperset
_MAX_LEAF_TYPES = 4096


def _is_namedtuple_instance(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _namedtuple_entry(t: type) -> _Entry:
    e = _lookup.get(t)
    if e is None:
        fields = tuple(t._fields)
        e = _Entry(
            t, _K_NAMEDTUPLE,
            lambda x: (x, None),
            lambda aux, ch: t(*ch),
            lambda x: (tuple((GetAttrKey(f), c) for f, c in zip(fields, x)), None),
        )
        _lookup[t] = e
        native_walk_types[t] = True
    return e


def _classify(t: type) -> _Entry | None:
    """Entry of a type missing from ``_lookup``: a namedtuple entry, or None
    (and the type is remembered as a leaf type)."""
    if issubclass(t, tuple) and hasattr(t, "_fields"):
        return _namedtuple_entry(t)
    if len(_leaf_types) >= _MAX_LEAF_TYPES:
        _leaf_types.clear()
    _leaf_types.add(t)
    return None


def _entry_of(x) -> _Entry | None:
    """The entry of node ``x`` or None if ``x`` is a leaf."""
    t = type(x)
    e = _lookup_get(t)
    if e is None and t not in _leaf_types:
        e = _classify(t)
    return e


# Types that are leaves of pytrees but that transformations take apart into one
# child (typed PRNG key arrays over their key data): see ``kiln._physical_tree``.
_transform_entries: dict[type, _Entry] = {}


def _entry_for_type(t: type) -> _Entry:
    """Entry of a node type (used when unpickling treedefs)."""
    e = _lookup.get(t) or _transform_entries.get(t)
    if e is None:
        if isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields"):
            return _namedtuple_entry(t)
        raise ValueError(f"{t} is not a registered pytree node type.")
    return e


def _add_entry(e: _Entry, what: str = "custom") -> None:
    if e.type in _registry:
        raise ValueError(f"Duplicate {what} PyTreeDef type registration for {e.type}.")
    _registry[e.type] = e
    _lookup[e.type] = e  # overrides a cached namedtuple entry of the same type
    native_walk_types.pop(e.type, None)
    _leaf_types.discard(e.type)


def _sorted_keys(d) -> list:
    try:
        return sorted(d)
    except Exception as err:
        raise ValueError(
            "Comparator raised exception while sorting pytree dictionary keys.") from err


def _flatten_dict(d):
    keys = _sorted_keys(d)
    return list(map(d.__getitem__, keys)), tuple(keys)


def _flatten_dict_with_keys(d):
    keys = _sorted_keys(d)
    return tuple((DictKey(k), d[k]) for k in keys), tuple(keys)


_TUPLE_E = _Entry(
    tuple, _K_TUPLE, lambda x: (x, None), lambda aux, ch: tuple(ch),
    lambda x: (tuple((SequenceKey(i), c) for i, c in enumerate(x)), None))
_LIST_E = _Entry(
    list, _K_LIST, lambda x: (x, None), lambda aux, ch: list(ch),
    lambda x: (tuple((SequenceKey(i), c) for i, c in enumerate(x)), None))
_DICT_E = _Entry(
    dict, _K_DICT, _flatten_dict, lambda aux, ch: dict(zip(aux, ch)), _flatten_dict_with_keys)
_NONE_E = _Entry(
    type(None), _K_NONE, lambda x: ((), None), lambda aux, ch: None, lambda x: ((), None))
for _e in (_TUPLE_E, _LIST_E, _DICT_E, _NONE_E):
    _add_entry(_e)
del _e

# A node is ``(entry, aux, children)``. ``children`` is a tuple of child nodes
# (``None`` for a leaf) or, when every child is a leaf, just their number: the
# canonical form (so equality stays structural) that lets the hot paths move
# runs of leaves with C-level list operations.
_NONE_NODE = (_NONE_E, None, 0)


def _kids(children) -> tuple:
    """Children of a node as a tuple of nodes."""
    return (None,) * children if type(children) is int else children


def _mknode(e, aux, nodes) -> tuple:
    """Node in canonical form from a sequence of child nodes."""
    if nodes.count(None) == len(nodes):
        return (e, aux, len(nodes))
    return (e, aux, tuple(nodes))


def register_pytree_node(
    nodetype: type[T],
    flatten_func: Callable[[T], tuple[Iterable[Any], Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], T],
    flatten_with_keys_func: Callable[[T], tuple[KeyLeafPairs, Hashable]] | None = None,
) -> None:
    """Make ``nodetype`` a pytree node type.

    ``flatten_func(x)`` returns ``(children, aux_data)``; ``aux_data`` is kept
    in the treedef, must be hashable, and takes part in treedef equality.
    ``unflatten_func(aux_data, children)`` rebuilds the node (children come as
    a tuple). Only exact instances of ``nodetype`` are nodes, not subclasses.
    """
    _add_entry(_Entry(nodetype, _K_CUSTOM, flatten_func, unflatten_func,
                      flatten_with_keys_func))


def register_pytree_with_keys(
    nodetype: type[T],
    flatten_with_keys: Callable[[T], tuple[Iterable[KeyLeafPair], Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], T],
    flatten_func: Callable[[T], tuple[Iterable[Any], Hashable]] | None = None,
) -> None:
    """Like :func:`register_pytree_node`, with a flatten function that also names
    each child with a key (used by the ``*_with_path`` functions)."""
    if not flatten_func:
        def flatten_func(x):
            pairs, aux = flatten_with_keys(x)
            return [c for _, c in pairs], aux
    register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys)


def register_pytree_node_class(cls: Typ) -> Typ:
    """Class decorator: register ``cls`` using its ``tree_flatten`` method and
    ``tree_unflatten`` classmethod. Returns ``cls``."""
    register_pytree_node(cls, operator.methodcaller("tree_flatten"), cls.tree_unflatten)
    return cls


def register_pytree_with_keys_class(cls: Typ) -> Typ:
    """Class decorator: register ``cls`` using its ``tree_flatten_with_keys``
    method (and ``tree_flatten`` when present) and ``tree_unflatten``."""
    flatten = operator.methodcaller("tree_flatten") if hasattr(cls, "tree_flatten") else None
    register_pytree_with_keys(cls, operator.methodcaller("tree_flatten_with_keys"),
                              cls.tree_unflatten, flatten)
    return cls


def register_static(cls: type[H]) -> type[H]:
    """Register ``cls`` as a node without children: instances live entirely in
    the treedef (so they must be hashable) and are static under ``jit``."""
    register_pytree_with_keys(cls, lambda x: ((), x), lambda aux, _: aux)
    return cls


def register_dataclass(
    nodetype: Typ,
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
    drop_fields: Sequence[str] = (),
) -> Typ:
    """Register a dataclass-like type: ``data_fields`` are children,
    ``meta_fields`` go to the treedef, and the node is rebuilt by calling
    ``nodetype(**fields)``. For a dataclass both lists may be omitted; fields
    with ``metadata=dict(static=True)`` are then meta fields. Returns
    ``nodetype`` so it can be used as a decorator."""
    if data_fields is None or meta_fields is None:
        if (data_fields is None) != (meta_fields is None):
            raise TypeError(
                "register_dataclass: data_fields and meta_fields must both be specified"
                f" when either is specified. Got {data_fields=} {meta_fields=}.")
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(
                "register_dataclass: data_fields and meta_fields are required when"
                f" nodetype is not a dataclass. Got {nodetype=}.")
        fields = [f for f in dataclasses.fields(nodetype) if f.name not in drop_fields]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    data_fields = tuple(data_fields)
    meta_fields = tuple(meta_fields)

    if dataclasses.is_dataclass(nodetype):
        init_fields = {f.name for f in dataclasses.fields(nodetype) if f.init}
        init_fields.difference_update(drop_fields)
        given = {*meta_fields, *data_fields}
        if given != init_fields:
            msg = ("data_fields and meta_fields must include all dataclass fields with"
                   " ``init=True`` and only them.")
            missing = init_fields - given
            if missing:
                msg += (f" Missing fields: {missing}. Add them to drop_fields to suppress"
                        " this error.")
            unexpected = given - init_fields
            if unexpected:
                msg += f" Unexpected fields: {unexpected}."
            raise ValueError(msg)
    overlap = set(data_fields) & set(meta_fields)
    if overlap:
        raise ValueError(
            f"data_fields and meta_fields must not overlap. Overlapping fields: {overlap}.")

    def flatten(x):
        return ([getattr(x, n) for n in data_fields],
                tuple([getattr(x, n) for n in meta_fields]))

    def flatten_with_keys(x):
        return (tuple((GetAttrKey(n), getattr(x, n)) for n in data_fields),
                tuple([getattr(x, n) for n in meta_fields]))

    def unflatten(meta, data):
        kwargs = dict(zip(meta_fields, meta))
        kwargs.update(zip(data_fields, data))
        return nodetype(**kwargs)

    _add_entry(_Entry(nodetype, _K_DATACLASS, flatten, unflatten, flatten_with_keys,
                      data_fields, meta_fields), "custom dataclass")
    return nodetype


def is_tree_node(typ: type) -> bool:
    """True if instances of ``typ`` are pytree nodes (registered or namedtuple)."""
    if typ in _lookup:
        return True
    return isinstance(typ, type) and issubclass(typ, tuple) and hasattr(typ, "_fields")


# ---------------------------------------------------------------------------
# Flattening (hot paths)
# ---------------------------------------------------------------------------


def _flat(x, leaves):
    """Append the leaves of ``x`` to ``leaves``; return the node of ``x``."""
    t = type(x)
    if t is tuple:
        e, aux, children = _TUPLE_E, None, x
    elif t is list:
        e, aux, children = _LIST_E, None, x
    elif t is dict:
        keys = _sorted_keys(x)
        e, aux, children = _DICT_E, tuple(keys), list(map(x.__getitem__, keys))
    elif x is None:
        return _NONE_NODE
    else:
        e = _lookup_get(t)
        if e is None:
            if t in _leaf_types or _classify(t) is None:
                leaves.append(x)
                return None
            e = _lookup[t]
        children, aux = e.flatten(x)
        if type(children) is not tuple and type(children) is not list:
            children = tuple(children)
    # Many children: one C-level check moves a run of leaves at once.
    if len(children) > 4 and _all_leaf_types(map(type, children)):
        leaves.extend(children)
        return (e, aux, len(children))
    nodes = []
    append = nodes.append
    leaf_append = leaves.append
    only_leaves = True
    for c in children:
        if type(c) in _leaf_types:
            leaf_append(c)
            append(None)
        elif c is None:
            only_leaves = False
            append(_NONE_NODE)
        else:
            n = _flat(c, leaves)
            if n is not None:
                only_leaves = False
            append(n)
    if only_leaves:
        return (e, aux, len(nodes))
    return (e, aux, tuple(nodes))


def _leaves(x, out):
    """Append the leaves of ``x`` to ``out`` (no treedef is built)."""
    t = type(x)
    if t is tuple or t is list:
        children = x
    elif t is dict:
        children = list(map(x.__getitem__, _sorted_keys(x)))
    elif x is None:
        return
    else:
        e = _lookup_get(t)
        if e is None:
            if t in _leaf_types or _classify(t) is None:
                out.append(x)
                return
            e = _lookup[t]
        children = e.flatten(x)[0]
        if type(children) is not tuple and type(children) is not list:
            children = tuple(children)
    if len(children) > 4 and _all_leaf_types(map(type, children)):
        out.extend(children)
        return
    for c in children:
        if type(c) in _leaf_types:
            out.append(c)
        elif c is not None:
            _leaves(c, out)


def _unflat(node, it):
    """Rebuild the subtree ``node`` taking leaves from the iterator ``it``."""
    e, aux, children = node
    if type(children) is int:
        if e is _TUPLE_E:
            return tuple(islice(it, children))
        vals = list(islice(it, children))
    else:
        vals = []
        append = vals.append
        for c in children:
            append(next(it) if c is None else _unflat(c, it))
    if e is _TUPLE_E:
        return tuple(vals)
    if e is _LIST_E:
        return vals
    if e is _DICT_E:
        return dict(zip(aux, vals))
    if e is _NONE_E:
        return None
    return e.unflatten(aux, tuple(vals))


def _map1(f, x):
    """``tree_map(f, x)`` for one tree and no is_leaf, in a single walk."""
    t = type(x)
    if t is tuple or t is list:
        if _all_leaf_types(map(type, x)):
            return t(map(f, x))
        out = []
        for c in x:
            out.append(f(c) if type(c) in _leaf_types else _map1(f, c))
        return out if t is list else tuple(out)
    if t is dict:
        keys = _sorted_keys(x)
        vals = list(map(x.__getitem__, keys))
        if _all_leaf_types(map(type, vals)):
            return dict(zip(keys, map(f, vals)))
        return dict(zip(keys, [_map1(f, c) for c in vals]))
    if x is None:
        return None
    e = _lookup_get(t)
    if e is None:
        if t in _leaf_types or _classify(t) is None:
            return f(x)
        e = _lookup[t]
    children, aux = e.flatten(x)
    return e.unflatten(aux, tuple([_map1(f, c) for c in children]))


def _flat_is_leaf(x, leaves, is_leaf):
    """Like :func:`_flat`, asking ``is_leaf`` first at every subtree."""
    if is_leaf(x):
        leaves.append(x)
        return None
    e = _entry_of(x)
    if e is None:
        leaves.append(x)
        return None
    if e is _NONE_E:
        return _NONE_NODE
    children, aux = e.flatten(x)
    return _mknode(e, aux, [_flat_is_leaf(c, leaves, is_leaf) for c in children])


def _keyed_children(e, x):
    """``(((key, child), ...), aux)`` for node ``x`` of entry ``e``."""
    if e.flatten_with_keys is not None:
        pairs, aux = e.flatten_with_keys(x)
        return tuple(pairs), aux
    children, aux = e.flatten(x)
    return tuple((FlattenedIndexKey(i), c) for i, c in enumerate(children)), aux


def _flat_path(x, path, pairs, is_leaf):
    """Append ``(path, leaf)`` pairs; ``is_leaf`` takes ``(path, x)`` or is None."""
    if is_leaf is not None and is_leaf(path, x):
        pairs.append((path, x))
        return None
    e = _entry_of(x)
    if e is None:
        pairs.append((path, x))
        return None
    if e is _NONE_E:
        return _NONE_NODE
    kcs, aux = _keyed_children(e, x)
    return _mknode(e, aux, [_flat_path(c, (*path, k), pairs, is_leaf) for k, c in kcs])


# ---------------------------------------------------------------------------
# PyTreeDef
# ---------------------------------------------------------------------------


def _count_nodes(node) -> int:
    if node is None:
        return 1
    ch = node[2]
    if type(ch) is int:
        return 1 + ch
    return 1 + sum([_count_nodes(c) for c in ch])


def _count_leaves(node) -> int:
    if node is None:
        return 1
    ch = node[2]
    if type(ch) is int:
        return ch
    return sum([_count_leaves(c) for c in ch])


def _safe_hash(x) -> int:
    try:
        return hash(x)
    except TypeError:
        return 0


def _hash_skeleton(node):
    if node is None:
        return None
    e, aux, children = node
    if type(children) is not int:
        children = tuple([_hash_skeleton(c) for c in children])
    return (e, _safe_hash(aux), children)


def _node_repr(node) -> str:
    if node is None:
        return "*"
    e, aux, children = node
    k = e.kind
    if k == _K_NONE:
        return "None"
    parts = [_node_repr(c) for c in _kids(children)]
    if k == _K_TUPLE:
        return "(" + parts[0] + ",)" if len(parts) == 1 else "(" + ", ".join(parts) + ")"
    if k == _K_LIST:
        return "[" + ", ".join(parts) + "]"
    if k == _K_DICT:
        return "{" + ", ".join(f"{key!r}: {p}" for key, p in zip(aux, parts)) + "}"
    if k == _K_NAMEDTUPLE:
        head = f"namedtuple[{e.type.__name__}]"
    else:
        head = f"{e.type.__name__}[{aux}]"
    return f"CustomNode({head}, [{', '.join(parts)}])"


def _make_treedef(node, num_leaves: int) -> PyTreeDef:
    td = object.__new__(PyTreeDef)
    td._node = node
    td._num_leaves = num_leaves
    td._hash = None
    td._fn = 0
    return td


# A treedef that is unflattened repeatedly (jit's output treedef is, once per
# call) gets a generated function that builds the whole tree in one Python
# expression, several times faster than walking the nodes. Fresh treedefs
# (tree_map, vmap, grad) never reach the threshold and pay nothing.
_COMPILE_AFTER = 2
_COMPILE_MAX_NODES = 1000


def _compile_unflatten(node) -> Callable[[Sequence[Any]], Any]:
    """A function ``leaves -> tree`` for ``node``, or the interpreter when
    the tree is too big or too deep for one expression."""
    if _count_nodes(node) > _COMPILE_MAX_NODES:
        return lambda leaves: _unflat(node, iter(leaves))
    consts: list = []
    next_leaf = iter(range(1 << 62))

    def const(obj) -> str:
        consts.append(obj)
        return f"c{len(consts) - 1}"

    def gen(nd) -> str:
        if nd is None:
            return f"l[{next(next_leaf)}]"
        e, aux, ch = nd
        parts = [gen(c) for c in _kids(ch)]
        if e is _TUPLE_E:
            return "(" + "".join(p + ", " for p in parts) + ")"
        if e is _LIST_E:
            return "[" + ", ".join(parts) + "]"
        if e is _DICT_E:
            keys = const(aux)
            return "{" + ", ".join(f"{keys}[{j}]: {p}" for j, p in enumerate(parts)) + "}"
        if e is _NONE_E:
            return "None"
        if e.kind == _K_NAMEDTUPLE:
            return f"{const(e.type)}({', '.join(parts)})"
        return f"{const(e.unflatten)}({const(aux)}, (" + "".join(p + ", " for p in parts) + "))"

    try:
        body = gen(node)
        names = ", ".join(f"c{i}" for i in range(len(consts)))
        src = f"def make({names}):\n    def unflatten(l):\n        return {body}\n    return unflatten\n"
        namespace: dict = {}
        exec(compile(src, "<kiln.tree_util unflatten>", "exec"), namespace)  # noqa: S102
        return namespace["make"](*consts)
    except (SyntaxError, RecursionError, MemoryError):  # e.g. too deeply nested
        return lambda leaves: _unflat(node, iter(leaves))


_NONE_PREFIX_HINT = (
    "\n\nIn previous releases of JAX, flatten-up-to used to consider None to be a "
    "tree-prefix of non-None values. To obtain the previous behavior, you can usually "
    "write:\n  jax.tree.map(lambda x, y: None if x is None else f(x, y), a, b, "
    "is_leaf=lambda x: x is None)")


def _up_to(node, x, out):
    """Append to ``out`` the subtrees of ``x`` at the leaves of ``node``."""
    if node is None:
        out.append(x)
        return
    e, aux, children = node
    n = children if type(children) is int else len(children)
    k = e.kind
    if k == _K_TUPLE:
        if type(x) is not tuple:
            raise ValueError(f"Expected tuple, got {x!r}.")
        if len(x) != n:
            raise ValueError(f"Tuple arity mismatch: {len(x)} != {n}; tuple: {x!r}.")
        vals = x
    elif k == _K_LIST:
        if type(x) is not list:
            raise ValueError(f"Expected list, got {x!r}.")
        if len(x) != n:
            raise ValueError(f"List arity mismatch: {len(x)} != {n}; list: {x!r}.")
        vals = x
    elif k == _K_DICT:
        if type(x) is not dict:
            raise ValueError(f"Expected dict, got {x!r}.")
        keys = _sorted_keys(x)
        if tuple(keys) != aux:
            raise ValueError(f"Dict key mismatch; expected keys: {list(aux)!r}; "
                             f"present keys: {keys!r}.")
        vals = list(map(x.__getitem__, keys))
    elif k == _K_NONE:
        if x is not None:
            raise ValueError(f"Expected None, got {x!r}." + _NONE_PREFIX_HINT)
        return
    elif k == _K_NAMEDTUPLE:
        if not _is_namedtuple_instance(x):
            raise ValueError(f"Expected named tuple, got {x!r}.")
        if len(x) != n:
            raise ValueError(
                f"Named tuple arity mismatch: {len(x)} != {n}; tuple: {x!r}.")
        if type(x) is not e.type:
            raise ValueError(
                f"Named tuple type mismatch: expected type: {e.type!r}, tuple: {x!r}.")
        vals = x
    else:
        what = "dataclass " if k == _K_DATACLASS else ""
        if type(x) is not e.type:
            raise ValueError(
                f"Custom {what}node type mismatch: expected type: {e.type!r}, value: {x!r}.")
        vals, xaux = e.flatten(x)
        vals = tuple(vals)
        if xaux != aux:
            raise ValueError(
                f"Mismatch custom {what}node data: {aux!r} != {xaux!r}; value: {x!r}.")
        if len(vals) != n:
            raise ValueError(
                f"Custom {'dataclass' if what else 'type'} arity mismatch: "
                f"{len(vals)} != {n}; value: {x!r}.")
    if type(children) is int:
        out.extend(vals)
        return
    for c, v in zip(children, vals):
        if c is None:
            out.append(v)
        else:
            _up_to(c, v, out)


class PyTreeDef:
    """The structure of a pytree: its node types, their aux data, and where
    the leaves go. Immutable, hashable, comparable and picklable."""

    # _fn: how many times unflatten ran, until it becomes the compiled
    # unflatten function (see _compile_unflatten).
    __slots__ = ("_node", "_num_leaves", "_hash", "_fn", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("No constructor defined for PyTreeDef; use tree_structure.")

    # -- basic properties --------------------------------------------------

    @property
    def num_leaves(self) -> int:
        return self._num_leaves

    @property
    def num_nodes(self) -> int:
        return _count_nodes(self._node)

    def children(self) -> list[PyTreeDef]:
        node = self._node
        if node is None:
            return []
        return [_make_treedef(c, _count_leaves(c)) for c in _kids(node[2])]

    def node_data(self):
        """``(type, aux_data)`` of the root node, or None for a leaf."""
        node = self._node
        if node is None:
            return None
        e, aux, _ = node
        if e is _DICT_E:
            return (dict, list(aux))
        return (e.type, aux)

    # -- flatten / unflatten ------------------------------------------------

    def unflatten(self, leaves: Iterable[Leaf]) -> Any:
        if type(leaves) is not list and type(leaves) is not tuple:
            leaves = list(leaves)
        n = self._num_leaves
        if len(leaves) != n:
            if len(leaves) < n:
                raise ValueError(
                    f"Too few leaves for PyTreeDef; expected {n}, got {len(leaves)}")
            raise ValueError(f"Too many leaves for PyTreeDef; expected {n}.")
        fn = self._fn
        if type(fn) is not int:
            return fn(leaves)
        node = self._node
        if node is None:
            return leaves[0]
        if fn >= _COMPILE_AFTER:
            fn = self._fn = _compile_unflatten(node)
            return fn(leaves)
        self._fn = fn + 1
        return _unflat(node, iter(leaves))

    def flatten_up_to(self, tree: Any) -> list:
        """Leaves of ``self`` matched to subtrees of ``tree``; raises ValueError
        when ``self`` is not a prefix of ``tree``'s structure."""
        out: list = []
        _up_to(self._node, tree, out)
        return out

    def compose(self, inner: PyTreeDef) -> PyTreeDef:
        """The treedef of ``self`` with every leaf replaced by ``inner``."""
        inner_node = inner._node

        def sub(node):
            if node is None:
                return inner_node
            e, aux, ch = node
            return _mknode(e, aux, [sub(c) for c in _kids(ch)])

        return _make_treedef(sub(self._node), self._num_leaves * inner._num_leaves)

    def walk(self, f_node: Callable[[Any, Any], Any], f_leaf: Callable[[Any], Any] | None,
             leaves: Iterable[Any]) -> Any:
        """Fold the tree: ``f_leaf`` at leaves, ``f_node(children_results,
        node_aux)`` at nodes."""
        leaves = list(leaves)
        n = self._num_leaves
        if len(leaves) < n:
            raise ValueError(f"Too few leaves for PyTreeDef; expected {n}, got {len(leaves)}")
        if len(leaves) > n:
            raise ValueError(f"Too many leaves for PyTreeDef; expected {n}.")
        it = iter(leaves)

        def go(node):
            if node is None:
                x = next(it)
                return x if f_leaf is None else f_leaf(x)
            e, aux, ch = node
            if e is _DICT_E:
                aux = list(aux)
            return f_node(tuple([go(c) for c in _kids(ch)]), aux)

        return go(self._node)

    def from_iterable_tree(self, tree: Any) -> Any:
        """Rebuild this structure from a tree of plain iterables."""

        def go(node, x):
            if node is None:
                return x
            e, aux, ch = node
            ch = _kids(ch)
            xs = list(x)
            if len(xs) != len(ch):
                raise ValueError("Arity mismatch between trees")
            vals = tuple([go(c, v) for c, v in zip(ch, xs)])
            return _unflat((e, aux, len(vals)), iter(vals))

        return go(self._node, tree)

    @staticmethod
    def from_node_data_and_children(registry, node_data, children) -> PyTreeDef:
        """Inverse of :meth:`node_data` and :meth:`children`."""
        children = list(children)
        if node_data is None:
            if children:
                raise ValueError("Leaf node cannot have children.")
            return _make_treedef(None, 1)
        typ, aux = node_data
        e = _entry_for_type(typ)
        if e is _DICT_E:
            aux = tuple(aux)
        node = _mknode(e, aux, [c._node for c in children])
        return _make_treedef(node, sum(c._num_leaves for c in children))

    # -- comparison, hashing, printing, pickling -----------------------------

    def __eq__(self, other):
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return self._num_leaves == other._num_leaves and _nodes_equal(self._node, other._node)

    def __ne__(self, other):
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return not self.__eq__(other)

    def __hash__(self):
        h = self._hash
        if h is None:
            try:
                h = hash(self._node)
            except TypeError:  # some aux data is unhashable
                h = hash(_hash_skeleton(self._node))
            self._hash = h
        return h

    def __repr__(self):
        return f"PyTreeDef({_node_repr(self._node)})"

    __str__ = __repr__

    def __reduce__(self):
        return (_make_treedef, (self._node, self._num_leaves))


PyTreeDef.__module__ = "kiln.tree_util"


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None
                 ) -> tuple[list[Leaf], PyTreeDef]:
    """Flatten ``tree`` into its leaves and a :class:`PyTreeDef`."""
    leaves: list = []
    if is_leaf is None:
        node = _flat(tree, leaves)
    else:
        node = _flat_is_leaf(tree, leaves, is_leaf)
    td = object.__new__(PyTreeDef)
    td._node = node
    td._num_leaves = len(leaves)
    td._hash = None
    td._fn = 0
    return leaves, td


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Leaf]) -> Any:
    """Rebuild a pytree of structure ``treedef`` from ``leaves``."""
    return treedef.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Leaf]:
    """The leaves of ``tree`` in flattening order."""
    out: list = []
    if is_leaf is None:
        _leaves(tree, out)
    else:
        _flat_is_leaf(tree, out, is_leaf)
    return out


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
    """The :class:`PyTreeDef` of ``tree``."""
    return tree_flatten(tree, is_leaf)[1]


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
    """The treedef of a tuple whose elements have the given structures."""
    treedefs = list(treedefs)
    node = _mknode(_TUPLE_E, None, [t._node for t in treedefs])
    return _make_treedef(node, sum(t._num_leaves for t in treedefs))


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """Treedefs of the immediate children of ``treedef``'s root."""
    return treedef.children()


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """True if ``treedef`` has a single node (a leaf, or a childless node)."""
    return treedef.num_nodes == 1


def treedef_is_strict_leaf(treedef: PyTreeDef) -> bool:
    return treedef._node is None


def all_leaves(iterable: Iterable[Any], is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """True if every element of ``iterable`` is a leaf."""
    if is_leaf is None:
        return all(_entry_of(x) is None for x in iterable)
    items = list(iterable)
    leaves = tree_leaves(items, is_leaf)
    return len(leaves) == len(items) and all(a is b for a, b in zip(items, leaves))


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any,
             is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Apply ``f`` to the leaves of ``tree`` (and the matching subtrees of each
    tree in ``rest``, which must have ``tree``'s structure as a prefix)."""
    if not rest:
        if is_leaf is None:
            return _map1(f, tree)
        leaves, treedef = tree_flatten(tree, is_leaf)
        return treedef.unflatten([f(x) for x in leaves])
    leaves, treedef = tree_flatten(tree, is_leaf)
    all_leaves_ = [leaves]
    for r in rest:
        try:
            all_leaves_.append(treedef.flatten_up_to(r))
        except Exception as e:
            err = next(_prefix_error((), tree, r, is_leaf), None)
            raise (err("tree_map tree") if err is not None else e) from None
    return treedef.unflatten([f(*xs) for xs in zip(*all_leaves_)])


def tree_flatten_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                           is_leaf_takes_path: bool = False
                           ) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef]:
    """Like :func:`tree_flatten`, pairing each leaf with its key path."""
    if is_leaf is not None and not is_leaf_takes_path:
        pred = is_leaf
        is_leaf = lambda _, x: pred(x)  # noqa: E731
    pairs: list = []
    node = _flat_path(tree, (), pairs, is_leaf)
    return pairs, _make_treedef(node, len(pairs))


def tree_leaves_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                          is_leaf_takes_path: bool = False) -> list[tuple[KeyPath, Any]]:
    """``(key_path, leaf)`` pairs of ``tree``."""
    return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


generate_key_paths = tree_leaves_with_path


def tree_map_with_path(f: Callable[..., Any], tree: Any, *rest: Any,
                       is_leaf: Callable[..., bool] | None = None,
                       is_leaf_takes_path: bool = False) -> Any:
    """Like :func:`tree_map`, with ``f(key_path, leaf, *rest_leaves)``."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    cols = [[p for p, _ in pairs], [x for _, x in pairs]]
    for r in rest:
        try:
            cols.append(treedef.flatten_up_to(r))
        except Exception as e:
            pred = is_leaf
            if pred is not None and is_leaf_takes_path:
                pred = None  # _prefix_error has no paths; best effort
            err = next(_prefix_error((), tree, r, pred), None)
            raise (err("tree_map_with_path tree") if err is not None else e) from None
    return treedef.unflatten([f(*xs) for xs in zip(*cols)])


class Unspecified:
    """Marker for an omitted ``initializer``/``identity`` argument."""


_UNSPECIFIED = Unspecified()


def tree_reduce(function: Callable[[T, Any], T], tree: Any,
                initializer: T | Unspecified = _UNSPECIFIED,
                is_leaf: Callable[[Any], bool] | None = None) -> T:
    """``functools.reduce`` over the leaves of ``tree``."""
    if isinstance(initializer, Unspecified):
        return functools.reduce(function, tree_leaves(tree, is_leaf=is_leaf))
    return functools.reduce(function, tree_leaves(tree, is_leaf=is_leaf), initializer)


def _tree_fold(seq: list, op: Callable, identity: Any) -> Any:
    if not seq:
        if isinstance(identity, Unspecified):
            raise TypeError("Must specify identity for parallel reduction of empty sequence.")
        return identity
    if len(seq) == 1:
        return seq[0]
    mid = len(seq) // 2
    return op(_tree_fold(seq[:mid], op, identity), _tree_fold(seq[mid:], op, identity))


def tree_reduce_associative(operation: Callable[[T, T], T], tree: Any, *,
                            identity: T | Unspecified = _UNSPECIFIED,
                            is_leaf: Callable[[Any], bool] | None = None) -> T:
    """Reduce the leaves of ``tree`` with an associative ``operation`` in a
    balanced binary tree of calls (splitting each range at its midpoint)."""
    return _tree_fold(tree_leaves(tree, is_leaf=is_leaf), operation, identity)


def tree_all(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """True if all leaves of ``tree`` are truthy."""
    return all(tree_leaves(tree, is_leaf=is_leaf))


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
                   pytree_to_transpose: Any) -> Any:
    """Turn an outer-of-inner pytree into an inner-of-outer pytree. With
    ``inner_treedef=None`` the inner structure is inferred from the first
    outer leaf."""
    flat, treedef = tree_flatten(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = tree_structure(outer_treedef.flatten_up_to(pytree_to_transpose)[0])
    inner_size = inner_treedef.num_leaves
    outer_size = outer_treedef.num_leaves
    if treedef.num_leaves != inner_size * outer_size:
        expected = outer_treedef.compose(inner_treedef)
        raise TypeError(f"Mismatch\n{treedef}\n != \n{expected}")
    rows = [flat[i * inner_size:(i + 1) * inner_size] for i in range(outer_size)]
    subtrees = [outer_treedef.unflatten(col) for col in zip(*rows)] if rows else \
        [outer_treedef.unflatten([]) for _ in range(inner_size)]
    return inner_treedef.unflatten(subtrees)


def broadcast_prefix(prefix_tree: Any, full_tree: Any,
                     is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    """Leaves of ``prefix_tree`` each repeated once per leaf of the matching
    subtree of ``full_tree``."""
    result: list = []

    def add(x, subtree):
        result.extend([x] * tree_structure(subtree).num_leaves)

    try:
        tree_map(add, prefix_tree, full_tree, is_leaf=is_leaf)
    except ValueError:
        errs = prefix_errors(prefix_tree, full_tree)
        if errs:
            raise errs[0]("broadcast_prefix prefix_tree") from None
        raise
    return result


def broadcast_flattened_prefix_with_treedef(prefix_leaves: list[Any], prefix_treedef: Any,
                                           full_treedef: Any) -> list[Any]:
    """:func:`broadcast_prefix` on flattened trees: each of ``prefix_leaves`` (the leaves
    of a tree of structure ``prefix_treedef``) repeated once per leaf of the matching
    subtree of ``full_treedef`` (JAX's private helper of the same name). ValueError when
    ``prefix_treedef`` is not a prefix of ``full_treedef``."""
    prefix_leaves = list(prefix_leaves)
    if len(prefix_leaves) != prefix_treedef.num_leaves:
        raise ValueError(f"expected {prefix_treedef.num_leaves} prefix leaves, got "
                         f"{len(prefix_leaves)}")
    # Stand-in leaves that are plain objects (a prefix leaf may itself be a pytree node's
    # value such as None, which must stay a leaf here).
    slots = [object() for _ in prefix_leaves]
    where = {id(o): i for i, o in enumerate(slots)}
    full = full_treedef.unflatten([object() for _ in range(full_treedef.num_leaves)])
    picked = broadcast_prefix(prefix_treedef.unflatten(slots), full)
    return [prefix_leaves[where[id(o)]] for o in picked]


def tree_broadcast(prefix_tree: Any, full_tree: Any,
                   is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """``prefix_tree`` with each leaf broadcast over the matching subtree of
    ``full_tree``; the result has ``full_tree``'s structure."""
    leaves = broadcast_prefix(prefix_tree, full_tree, is_leaf=is_leaf)
    return tree_structure(full_tree).unflatten(leaves)


def flatten_one_level(tree: Any) -> tuple[Iterable[Any], Hashable]:
    """``(children, aux_data)`` of the root node of ``tree``; ValueError on a leaf."""
    e = _entry_of(tree)
    if e is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    if e is _TUPLE_E:
        return tree, None
    if e is _LIST_E:
        return tree, None
    if e is _DICT_E:
        children, aux = _flatten_dict(tree)
        return tuple(children), aux
    if e.kind == _K_NAMEDTUPLE:
        return list(tree), type(tree)        # JAX's: the fields as a list, the type
    return e.flatten(tree)


def flatten_one_level_with_keys(tree: Any) -> tuple[Iterable[KeyLeafPair], Hashable]:
    """``(((key, child), ...), aux_data)`` of the root node of ``tree``."""
    e = _entry_of(tree)
    if e is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return _keyed_children(e, tree)


# ---------------------------------------------------------------------------
# Explaining structure mismatches
# ---------------------------------------------------------------------------


def _child_keys(tree: Any) -> tuple:
    return tuple(k for k, _ in flatten_one_level_with_keys(tree)[0])


def _is_strict_leaf(x, is_leaf) -> bool:
    if is_leaf is not None and is_leaf(x):
        return True
    return _entry_of(x) is None


def prefix_errors(prefix_tree: Any, full_tree: Any,
                  is_leaf: Callable[[Any], bool] | None = None
                  ) -> list[Callable[[str], ValueError]]:
    """Factories (taking the prefix tree's name) of errors that explain why
    ``prefix_tree`` is not a prefix of ``full_tree``."""
    return list(_prefix_error((), prefix_tree, full_tree, is_leaf))


def _prefix_error(key_path, prefix_tree, full_tree, is_leaf=None):
    if _is_strict_leaf(prefix_tree, is_leaf):
        return
    if type(prefix_tree) is not type(full_tree):
        p, f = type(prefix_tree), type(full_tree)

        def different_types(name):
            return ValueError(
                "pytree structure error: different types at key path\n"
                f"    {name}{keystr(key_path)}\n"
                f"At that key path, the prefix pytree {name} has a subtree of type\n"
                f"    {p}\n"
                "but at the same key path the full pytree has a subtree of different type\n"
                f"    {f}.")
        yield different_types
        return
    p_children, p_meta = flatten_one_level(prefix_tree)
    f_children, f_meta = flatten_one_level(full_tree)
    p_children, f_children = tuple(p_children), tuple(f_children)
    p_keys, f_keys = _child_keys(prefix_tree), _child_keys(full_tree)
    if isinstance(prefix_tree, list | tuple):
        if len(prefix_tree) != len(full_tree):
            ty = type(prefix_tree).__name__
            np_, nf = len(prefix_tree), len(full_tree)

            def different_lengths(name):
                return ValueError(
                    f"pytree structure error: different lengths of {ty} at key path\n"
                    f"    {name}{keystr(key_path)}\n"
                    f"At that key path, the prefix pytree {name} has a subtree of type "
                    f"{ty} of length {np_}, but the full pytree has a subtree of the same "
                    f"type but of length {nf}.")
            yield different_lengths
            return
    else:
        try:
            diff = set(p_keys).symmetric_difference(set(f_keys))
        except Exception:
            diff = None
        if len(p_children) != len(f_children):
            ty = type(prefix_tree)

            def different_arity(name):
                return ValueError(
                    "pytree structure error: different numbers of pytree children at "
                    f"key path\n    {name}{keystr(key_path)}\n"
                    f"At that key path, the prefix pytree {name} has a subtree of type\n"
                    f"    {ty}\n"
                    f"with {len(p_children)} child keys\n"
                    f"    {' '.join(_simple_entrystr(k) for k in p_keys)}\n"
                    "but at the same key path the full pytree has a subtree of the same "
                    f"type but with {len(f_children)} child keys\n"
                    f"    {' '.join(_simple_entrystr(k) for k in f_keys)}\n"
                    + ("" if diff is None else
                       "so the symmetric difference on key sets is\n"
                       f"    {' '.join(_simple_entrystr(k) for k in diff)}"))
            yield different_arity
            return
    if p_meta != f_meta:
        ty = type(prefix_tree)
        p_str, f_str = str(p_meta), str(f_meta)
        meta_diff = textwrap.indent(
            "\n".join(difflib.ndiff(p_str.splitlines(), f_str.splitlines())), prefix="    ")

        def different_meta(name):
            return ValueError(
                "pytree structure error: different pytree metadata at key path\n"
                f"    {name}{keystr(key_path)}\n"
                f"At that key path, the prefix pytree {name} has a subtree of type\n"
                f"    {ty}\n"
                "with metadata\n"
                f"    {p_str}\n"
                "but at the same key path the full pytree has a subtree of the same "
                "type but with metadata\n"
                f"    {f_str}\n"
                "so the diff in the metadata at these pytree nodes is\n"
                f"{meta_diff}")
        yield different_meta
        return
    for k, c1, c2 in zip(p_keys, p_children, f_children):
        yield from _prefix_error((*key_path, k), c1, c2, is_leaf)


def equality_errors(tree1: Any, tree2: Any, is_leaf: Callable[[Any], bool] | None = None
                    ) -> Iterable[tuple[KeyPath, str, str, str]]:
    """Describe structural differences of two pytrees as
    ``(key_path, thing1, thing2, explanation)`` tuples."""
    yield from _equality_errors((), tree1, tree2, is_leaf)


def _equality_errors(path, t1, t2, is_leaf):
    if _is_strict_leaf(t1, is_leaf) and _is_strict_leaf(t2, is_leaf):
        return
    if type(t1) is not type(t2):
        yield path, str(type(t1)), str(type(t2)), "their Python types differ"
        return
    if isinstance(t1, list | tuple) and len(t1) != len(t2):
        yield (path, f"{type(t1).__name__} of length {len(t1)}",
               f"{type(t2).__name__} of length {len(t2)}", "the lengths do not match")
        return
    c1, m1 = flatten_one_level(t1)
    c2, m2 = flatten_one_level(t2)
    c1, c2 = tuple(c1), tuple(c2)
    k1, k2 = _child_keys(t1), _child_keys(t2)
    if len(c1) != len(c2):
        try:
            diff = " ".join(repr(getattr(k, "key", k)) for k in set(k1) ^ set(k2))
        except Exception:
            diff = ""
        plural = lambda n: "ren" if n > 1 else ""  # noqa: E731
        yield (path, f"{type(t1)} with {len(c1)} child{plural(len(c1))}",
               f"{type(t2)} with {len(c2)} child{plural(len(c2))}",
               "the numbers of children do not match"
               + (diff and f", with the symmetric difference of key sets: {{{diff}}}"))
        return
    if m1 != m2:
        yield (path, f"{type(t1)} with pytree metadata {m1}",
               f"{type(t2)} with pytree metadata {m2}",
               "the pytree node metadata does not match")
        return
    for k, a, b in zip(k1, c1, c2):
        yield from _equality_errors((*path, k), a, b, is_leaf)


# ---------------------------------------------------------------------------
# Partial
# ---------------------------------------------------------------------------


class _HashableCallableShim:
    """Box around a ``functools.partial`` given to :class:`Partial`, so that its
    bound arguments stay static instead of being merged into the pytree's
    children. Calls, hashing and equality go to the boxed callable."""

    def __init__(self, fun):
        self.fun = fun

    def __call__(self, *args, **kwargs):
        return self.fun(*args, **kwargs)

    def __hash__(self):
        return hash(self.fun)

    def __eq__(self, other):
        if isinstance(other, _HashableCallableShim):
            return self.fun == other.fun
        return self.fun == other

    def __repr__(self):
        return f"_HashableCallableShim({self.fun!r})"


class Partial(functools.partial):
    """A ``functools.partial`` that is a pytree: the function is static (part of
    the treedef) and the bound positional and keyword arguments are children.
    ``Partial(f)`` with no arguments makes any callable passable through
    transformations."""

    def __new__(cls, func, *args, **kwargs):
        if isinstance(func, functools.partial):
            # functools.partial would merge func's own bound arguments into
            # ours, making them children; box it to keep them static. The
            # attributes are set after construction so that partial's
            # flattening of nested partials cannot see them.
            inner = func
            func = _HashableCallableShim(inner)
            out = super().__new__(cls, func, *args, **kwargs)
            func.func = inner.func
            func.args = inner.args
            func.keywords = inner.keywords
            return out
        return super().__new__(cls, func, *args, **kwargs)


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, xs: Partial(func, *xs[0], **xs[1]),
)

# ---------------------------------------------------------------------------
# OrderedDict and defaultdict
# ---------------------------------------------------------------------------

register_pytree_with_keys(
    collections.OrderedDict,
    lambda x: (tuple((DictKey(k), v) for k, v in x.items()), tuple(x.keys())),
    lambda keys, values: collections.OrderedDict(zip(keys, values)),
    lambda x: (tuple(x.values()), tuple(x.keys())),
)


def _flatten_defaultdict(d):
    keys = tuple(_sorted_keys(d))
    return tuple([d[k] for k in keys]), (d.default_factory, keys)


def _flatten_defaultdict_with_keys(d):
    keys = tuple(_sorted_keys(d))
    return tuple((DictKey(k), d[k]) for k in keys), (d.default_factory, keys)


register_pytree_with_keys(
    collections.defaultdict,
    _flatten_defaultdict_with_keys,
    lambda aux, values: collections.defaultdict(aux[0], zip(aux[1], values)),
    _flatten_defaultdict,
)


# ---------------------------------------------------------------------------
# A registry object with the method names of JAX's ``default_registry``
# ---------------------------------------------------------------------------


def _nodes_equal(a, b) -> bool:
    """Treedef nodes compared; an exception from a node's metadata ``==`` (an array
    passed as a static dataclass field: its ``==`` is elementwise) becomes JAX's
    ValueError naming the cause."""
    try:
        return bool(a == b)
    except Exception as err:
        raise ValueError(
            "Exception raised while checking equality of metadata fields of pytree. Make "
            "sure that metadata fields are hashable and have simple equality semantics. "
            "(Note: arrays cannot be passed as metadata fields!)") from err


class PyTreeRegistry:
    """Facade over the module's single registry (JAX has several; kiln has one)."""

    def flatten(self, tree, leaf_predicate=None):
        return tree_flatten(tree, leaf_predicate)

    def flatten_one_level(self, tree):
        try:
            return flatten_one_level(tree)
        except ValueError:
            return None

    def flatten_one_level_with_keys(self, tree):
        try:
            return flatten_one_level_with_keys(tree)
        except ValueError:
            return None

    def flatten_with_path(self, tree, leaf_predicate=None):
        return tree_flatten_with_path(tree, leaf_predicate, is_leaf_takes_path=True)

    def is_node(self, typ):
        return is_tree_node(typ)

    def register_node(self, nodetype, flatten_func, unflatten_func,
                      flatten_with_keys_func=None):
        register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys_func)

    def register_dataclass_node(self, nodetype, data_fields, meta_fields):
        register_dataclass(nodetype, data_fields, meta_fields)


default_registry = PyTreeRegistry()

for _obj in (SequenceKey, DictKey, GetAttrKey, FlattenedIndexKey, Partial, PyTreeRegistry):
    _obj.__module__ = "kiln.tree_util"
del _obj
