"""Typed PRNG keys at the boundaries of transformations that expose tangent spaces or
abstract values.

Transformations flatten with ``kiln._physical_tree``, so a key crosses them as its
``uint32`` data and comes back as a key. What the user gives or gets *beside* the
primal values must still look like JAX's:

* tangents and cotangents of keys are ``float0`` arrays of the key array's shape (not of
  its data's shape): :func:`key_tangents_to_float0` turns cotangents (``grad``,
  ``vjp``, tangents of ``jvp`` outputs, the tangents a ``custom_jvp`` rule receives) into
  that form, and :func:`physical_key_tangent` checks a user's key tangent (``jvp``,
  ``linearize``, ``vjp`` cotangents) and gives the symbolic zero for the key data;
* ``ShapeDtypeStruct``s with a key dtype (``eval_shape``, ``jit(...).lower``/``trace``)
  stand for keys: :func:`specs_to_keys` wraps them as keys over a ``uint32`` spec of
  their data, :func:`keys_to_specs` turns such keys (or traced key outputs) back into
  key-typed specs.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln import dtypes
from kiln import tree_util as _public
from kiln._physical_tree import is_transform_node


def _keys():
    from kiln.random import _keys
    return _keys


def has_keys(tree: Any) -> bool:
    """True if the pytree ``tree`` holds a typed key array."""
    return any(is_transform_node(x) for x in _public.tree_leaves(tree))


def key_tangents_to_float0(tree: Any) -> Any:
    """``tree`` with every key leaf (a key over its data's tangent) made a ``float0`` zero
    array of the key array's shape, as JAX's tangents of keys."""
    from kiln.array import make_array

    def conv(x):
        if is_transform_node(x):
            return make_array(np.zeros(x.shape, dtypes.float0), False)
        return x
    return _public.tree_map(conv, tree)


def physical_key_tangent(primal: Any, tangent: Any, what: str):
    """The symbolic zero tangent of the data of key ``primal``, after checking that the
    user's ``tangent`` is JAX's: ``float0`` of the key array's shape."""
    from kiln.core.trace import get_aval
    from kiln.interpreters.ad import Zero, tangent_aval
    t_dtype = getattr(tangent, "dtype", None)
    if t_dtype is None:
        t_dtype = get_aval(tangent).dtype
    if t_dtype != dtypes.float0:
        name = t_dtype.name if hasattr(t_dtype, "name") else str(t_dtype)
        raise TypeError(
            f"primal and tangent arguments to {what} do not match; dtypes must be equal, "
            "or in case of int/bool primal dtype the tangent dtype must be float0. Got "
            f"primal dtype {primal.dtype.name} and so expected tangent dtype float0, but got "
            f"tangent dtype {name} instead.")
    t_shape = tuple(np.shape(tangent))
    if t_shape != primal.shape:
        raise ValueError(f"{what} called with different primal and tangent shapes;Got primal "
                         f"shape {primal.shape} and tangent shape as {t_shape}")
    return Zero(tangent_aval(get_aval(primal._base_array)))


def _is_key_spec(x) -> bool:
    return (not is_transform_node(x) and hasattr(x, "shape")
            and isinstance(getattr(x, "dtype", None), _keys().KeyTy)
            and not hasattr(x, "__array__"))


def specs_to_keys(tree: Any) -> Any:
    """``tree`` with each key-typed ``ShapeDtypeStruct`` (or abstract value) made a key
    array over a ``uint32`` ``ShapeDtypeStruct`` of its data."""
    leaves = _public.tree_leaves(tree)
    if not any(_is_key_spec(x) for x in leaves):
        return tree
    from kiln.shape_eval import ShapeDtypeStruct
    keys = _keys()

    def conv(x):
        if not _is_key_spec(x):
            return x
        impl = x.dtype._impl
        data = ShapeDtypeStruct(tuple(x.shape) + tuple(impl.key_shape), np.uint32,
                                sharding=getattr(x, "sharding", None))
        return keys.PRNGKeyArray(impl, data)
    return _public.tree_map(conv, tree)


def keys_to_specs(tree: Any) -> Any:
    """``tree`` with every key leaf made a ``ShapeDtypeStruct`` of the key dtype."""
    from kiln.shape_eval import ShapeDtypeStruct

    def conv(x):
        if is_transform_node(x):
            return ShapeDtypeStruct(x.shape, x.dtype)
        return x
    return _public.tree_map(conv, tree)
