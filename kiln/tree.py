"""The ``jax.tree`` namespace: short names for the pytree functions of
:mod:`kiln.tree_util`. It only delegates; all logic lives in ``tree_util``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from kiln import tree_util
from kiln.tree_util import PyTreeDef

T = TypeVar("T")

__all__ = [
    "all", "broadcast", "flatten", "flatten_with_path", "leaves", "leaves_with_path",
    "map", "map_with_path", "reduce", "reduce_associative", "static", "structure",
    "transpose", "unflatten",
]


def all(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:  # noqa: A001
    """True if every leaf of ``tree`` is truthy."""
    return tree_util.tree_all(tree, is_leaf=is_leaf)


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None
            ) -> tuple[list[Any], PyTreeDef]:
    """Flatten ``tree`` into ``(leaves, treedef)``."""
    return tree_util.tree_flatten(tree, is_leaf)


def leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    """The leaves of ``tree``."""
    return tree_util.tree_leaves(tree, is_leaf)


def map(f: Callable[..., Any], tree: Any, *rest: Any,  # noqa: A001
        is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Apply ``f`` leafwise over ``tree`` and the trees in ``rest``."""
    return tree_util.tree_map(f, tree, *rest, is_leaf=is_leaf)


def reduce(function: Callable[[T, Any], T], tree: Any,
           initializer: Any = tree_util._UNSPECIFIED,
           is_leaf: Callable[[Any], bool] | None = None) -> T:
    """``functools.reduce`` over the leaves of ``tree``."""
    return tree_util.tree_reduce(function, tree, initializer, is_leaf=is_leaf)


def reduce_associative(operation: Callable[[T, T], T], tree: Any, *,
                       identity: Any = tree_util._UNSPECIFIED,
                       is_leaf: Callable[[Any], bool] | None = None) -> T:
    """Reduce the leaves of ``tree`` with an associative ``operation``."""
    return tree_util.tree_reduce_associative(operation, tree, identity=identity,
                                             is_leaf=is_leaf)


def structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
    """The treedef of ``tree``."""
    return tree_util.tree_structure(tree, is_leaf)


def transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
              pytree_to_transpose: Any) -> Any:
    """Swap the outer and inner levels of a pytree of pytrees."""
    return tree_util.tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose)


def unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
    """Rebuild a pytree of structure ``treedef`` from ``leaves``."""
    return tree_util.tree_unflatten(treedef, leaves)


def flatten_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                      is_leaf_takes_path: bool = False):
    """Flatten ``tree`` into ``([(key_path, leaf), ...], treedef)``."""
    return tree_util.tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)


def leaves_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                     is_leaf_takes_path: bool = False):
    """``[(key_path, leaf), ...]`` of ``tree``."""
    return tree_util.tree_leaves_with_path(tree, is_leaf, is_leaf_takes_path)


def map_with_path(f: Callable[..., Any], tree: Any, *rest: Any,
                  is_leaf: Callable[..., bool] | None = None,
                  is_leaf_takes_path: bool = False) -> Any:
    """Like :func:`map`, calling ``f(key_path, leaf, *rest_leaves)``."""
    return tree_util.tree_map_with_path(f, tree, *rest, is_leaf=is_leaf,
                                        is_leaf_takes_path=is_leaf_takes_path)


def broadcast(prefix_tree: Any, full_tree: Any,
              is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Broadcast the leaves of ``prefix_tree`` over ``full_tree``'s structure."""
    return tree_util.tree_broadcast(prefix_tree, full_tree, is_leaf=is_leaf)


def static(**kwargs):
    """``dataclasses.field`` with ``metadata['static'] = True``: marks a field
    as a meta (static) field for :func:`kiln.tree_util.register_dataclass`."""
    metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
    return dataclasses.field(metadata=metadata, **kwargs)
