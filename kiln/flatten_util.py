"""``jax.flatten_util``: ravel a pytree of arrays into one flat vector and back."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln import dtypes, lax
from kiln.tree_util import tree_flatten, tree_unflatten

__all__ = ["ravel_pytree"]


class _HashablePartial:
    """``functools.partial`` that compares (and hashes) by function and bound arguments, so
    an unravel function can be a static argument of ``jit``."""

    __slots__ = ("func", "args")

    def __init__(self, func, *args):
        self.func = func
        self.args = args

    def __eq__(self, other):
        return (type(other) is _HashablePartial and self.func is other.func
                and self.args == other.args)

    def __hash__(self):
        return hash((self.func, self.args))

    def __call__(self, *args):
        return self.func(*self.args, *args)


def ravel_pytree(pytree: Any) -> tuple[Any, Callable[[Any], Any]]:
    """Ravel (flatten) a pytree of arrays down to a 1D array.

    Args:
      pytree: a pytree of arrays and scalars to ravel.

    Returns:
      A pair ``(flat, unravel)``: ``flat`` is a 1D array holding the raveled leaves one
      after another, of the dtype the leaves' dtypes promote to; ``unravel`` maps a 1D
      vector of the same length back to a pytree of ``pytree``'s structure (each leaf cast
      back to its own dtype when the leaves' dtypes differ). A pytree without leaves gives
      an empty ``float32`` vector.
    """
    leaves, treedef = tree_flatten(pytree)
    flat, unravel_list = _ravel_list(leaves)
    return flat, _HashablePartial(_unravel_pytree, treedef, unravel_list)


def _unravel_pytree(treedef, unravel_list, flat):
    return tree_unflatten(treedef, unravel_list(flat))


def _no_leaves(_flat):
    return []


def _ravel_list(leaves):
    if not leaves:
        return lax.full([0], 0, "float32"), _no_leaves
    leaf_dtypes = tuple(dtypes.dtype(x) for x in leaves)
    common = dtypes.result_type(*leaf_dtypes)
    sizes = tuple(int(np.size(x)) for x in leaves)
    shapes = tuple(tuple(np.shape(x)) for x in leaves)
    if all(dt == common for dt in leaf_dtypes):
        # One dtype: the unravel function accepts a vector of any dtype (as JAX's).
        flat = lax.concatenate([lax.reshape(x, (n,)) for x, n in zip(leaves, sizes)], 0)
        return flat, _HashablePartial(_unravel_same_dtype, sizes, shapes)
    flat = lax.concatenate(
        [lax.reshape(lax.convert_element_type(x, common), (n,)) for x, n in zip(leaves, sizes)],
        0)
    return flat, _HashablePartial(_unravel_cast, sizes, shapes, leaf_dtypes, common)


def _unravel_same_dtype(sizes, shapes, flat):
    pieces = lax.split(flat, sizes)
    return [p.reshape(s) for p, s in zip(pieces, shapes)]


def _unravel_cast(sizes, shapes, leaf_dtypes, common, flat):
    got = dtypes.dtype(flat)
    if got != common:
        raise TypeError(f"unravel function given array of dtype {got}, "
                        f"but expected dtype {common}")
    pieces = lax.split(flat, sizes)
    return [lax.convert_element_type(p.reshape(s), dt)
            for p, s, dt in zip(pieces, shapes, leaf_dtypes)]
