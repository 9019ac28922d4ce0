"""``jax.interpreters.xla``: the registries of array-like Python types, and eager
application of a primitive.

``canonicalize_dtype_handlers`` maps a Python type to the function making a canonical
array of one of its values (the very table :func:`kiln.dtypes.coerce_to_array` reads);
libraries register their own array-like types in it (TensorFlow Probability's JAX
substrate registers its variables with the ``np.ndarray`` handler). kiln runs no XLA; the
name is JAX's.
"""
from __future__ import annotations

from kiln.core.trace import Primitive, eval_trace, set_current_trace
from kiln.dtypes import canonicalize_value_handlers as canonicalize_dtype_handlers

__all__ = ["apply_primitive", "canonicalize_dtype_handlers"]


def apply_primitive(prim: Primitive, *args, **params):
    """Apply ``prim`` to concrete ``args`` eagerly (what ``bind`` does outside any
    transformation)."""
    with set_current_trace(eval_trace):
        return prim.bind(*args, **params)


def __getattr__(name):
    raise AttributeError(
        f"module 'jax.interpreters.xla' (kiln.interpreters.xla) has no attribute {name!r}: "
        "kiln runs no XLA; it provides canonicalize_dtype_handlers and apply_primitive")
