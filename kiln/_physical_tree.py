"""Pytrees as transformations see them: typed PRNG key arrays taken apart.

To users a typed key array (``kiln.random.key(0)``, dtype ``key<fry>``) is a pytree
*leaf*, as in JAX: ``kiln.tree_util`` never looks inside it. Transformations (``jit``,
``vmap``, ``grad``, control flow, ``pmap``, ``shard_map``, custom derivatives, ...) trace
only arrays of NumPy dtypes, so they flatten with the functions of this module, which
see such a leaf as a node with exactly one child, its physical data (``uint32`` key
data). The treedef they get rebuilds the key around whatever stands for the data (a
tracer, a batched value, an output array), so a key crosses every transformation as a
key, and the compiled backend only ever sees its ``uint32`` data.

Because every such node has exactly one child, the leaves of a tree are in one-to-one
correspondence here and in ``kiln.tree_util`` (same number, same order): prefix trees
(``in_axes``, ``in_specs``, shardings) match either flattening.

The types are registered with :func:`register_transform_node` (``kiln.random._keys``
registers ``PRNGKeyArray``). Every other name is ``kiln.tree_util``'s, re-exported so a
module can import all of its tree utilities from here.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln import tree_util as _tu
from kiln.tree_util import *  # noqa: F403  (re-exported: this module stands in for tree_util)
from kiln.tree_util import PyTreeDef, _Entry, _kids, _make_treedef, _mknode

_entries = _tu._transform_entries
_types: set = set()


def register_transform_node(typ: type, flatten: Callable, unflatten: Callable) -> None:
    """Make ``typ`` (a pytree leaf for users) a one-child node for transformations.

    ``flatten(x) -> ((child,), aux)`` with ``aux`` hashable; ``unflatten(aux, (child,))``
    rebuilds ``x``.
    """
    if typ in _entries or typ in _tu._registry:
        raise ValueError(f"Duplicate transform node registration for {typ}.")
    _entries[typ] = _Entry(typ, _tu._K_CUSTOM, flatten, unflatten)
    _types.add(typ)


def _has_nodes(leaves) -> bool:
    return bool(_types) and not _types.isdisjoint(map(type, leaves))


def _expand(node, leaves: list, pos: int):
    """``(node', pos')``: ``node`` with each transform-node leaf made a one-child node;
    the leaf in ``leaves`` is replaced by that child."""
    if node is None:
        e = _entries.get(type(leaves[pos]))
        if e is None:
            return None, pos + 1
        children, aux = e.flatten(leaves[pos])
        (child,) = children
        leaves[pos] = child
        return (e, aux, 1), pos + 1
    e, aux, children = node
    new = []
    for c in _kids(children):
        n, pos = _expand(c, leaves, pos)
        new.append(n)
    return _mknode(e, aux, new), pos


def _physical(leaves: list, treedef: PyTreeDef) -> tuple[list, PyTreeDef]:
    if not _has_nodes(leaves):
        return leaves, treedef
    leaves = list(leaves)
    node, _ = _expand(treedef._node, leaves, 0)
    return leaves, _make_treedef(node, len(leaves))


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None
                 ) -> tuple[list, PyTreeDef]:
    """``kiln.tree_util.tree_flatten`` with transform nodes taken apart."""
    return _physical(*_tu.tree_flatten(tree, is_leaf))


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list:
    """The leaves of ``tree``, transform nodes replaced by their one child."""
    leaves = _tu.tree_leaves(tree, is_leaf)
    if not _has_nodes(leaves):
        return leaves
    out = []
    for x in leaves:
        e = _entries.get(type(x))
        out.append(x if e is None else e.flatten(x)[0][0])
    return out


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
    """The treedef of ``tree`` with transform nodes taken apart."""
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any,
             is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """``kiln.tree_util.tree_map`` over the physical leaves (transform nodes rebuilt)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    all_leaves = [leaves] + [treedef.flatten_up_to(r) for r in rest]
    return treedef.unflatten([f(*xs) for xs in zip(*all_leaves)])


def tree_flatten_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                           is_leaf_takes_path: bool = False):
    """``(path, leaf)`` pairs and the physical treedef; a transform node's child keeps
    the node's path."""
    pairs, treedef = _tu.tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    leaves = [x for _, x in pairs]
    if not _has_nodes(leaves):
        return pairs, treedef
    leaves, treedef = _physical(leaves, treedef)
    return [(p, x) for (p, _), x in zip(pairs, leaves)], treedef


def tree_leaves_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                          is_leaf_takes_path: bool = False) -> list:
    """``(path, leaf)`` pairs of the physical leaves."""
    return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_map_with_path(f: Callable[..., Any], tree: Any, *rest: Any,
                       is_leaf: Callable[..., bool] | None = None,
                       is_leaf_takes_path: bool = False) -> Any:
    """``kiln.tree_util.tree_map_with_path`` over the physical leaves."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    rests = [treedef.flatten_up_to(r) for r in rest]
    return treedef.unflatten([f(p, x, *xs) for (p, x), *xs in zip(pairs, *rests)])


def is_transform_node(x: Any) -> bool:
    """True if ``x`` is a leaf for users that transformations take apart (a typed key)."""
    return type(x) in _types
