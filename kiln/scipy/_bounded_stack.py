"""A bounded functional stack whose elements are pytrees of arrays (``jax._src.tpu.linalg.
stack.Stack``): the work list of kiln's spectral divide-and-conquer ``eigh``
(:mod:`kiln.scipy._qdwh_eigh`), which turns a recursion into a ``while_loop``.

The stack is a pytree itself (its size and one ``(capacity, ...)`` buffer per element
leaf), so it can be carried through ``lax.while_loop``/``cond``/``switch``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln import lax, tree_util
from kiln.numpy.linalg import jnp  # the lazy kiln.numpy proxy (kiln.numpy sits above)


class Stack:
    """A stack of at most ``capacity`` elements shaped like a prototype pytree."""

    def __init__(self, size, data):
        # private: use Stack.create
        self._size = size
        self._data = data

    def __repr__(self) -> str:
        return f"Stack({self._size}, {self._data})"

    @staticmethod
    def create(capacity: int, prototype: Any) -> Stack:
        """An empty stack of room for ``capacity`` elements with ``prototype``'s structure,
        shapes and dtypes (its values are not read)."""
        buffers = tree_util.tree_map(
            lambda leaf: jnp.zeros((capacity,) + tuple(jnp.shape(leaf)),
                                   jnp.result_type(leaf)), prototype)
        return Stack(jnp.array(0, np.int32), buffers)

    def empty(self):
        """Whether the stack holds no element (a boolean array)."""
        return self._size == 0

    def push(self, elem: Any) -> Stack:
        """The stack with ``elem`` on top."""
        data = tree_util.tree_map(
            lambda buf, leaf: lax.dynamic_update_index_in_dim(buf, leaf, self._size, 0),
            self._data, elem)
        return Stack(self._size + 1, data)

    def pop(self) -> tuple[Any, Stack]:
        """``(top element, the stack without it)``."""
        top = tree_util.tree_map(
            lambda buf: lax.dynamic_index_in_dim(buf, self._size - 1, 0, keepdims=False),
            self._data)
        return top, Stack(self._size - 1, self._data)

    def flatten(self):
        leaves, treedef = tree_util.tree_flatten(self._data)
        return [self._size] + leaves, treedef

    @staticmethod
    def unflatten(treedef, leaves):
        return Stack(leaves[0], tree_util.tree_unflatten(treedef, leaves[1:]))


tree_util.register_pytree_node(Stack, Stack.flatten, Stack.unflatten)
