"""The few ``kiln.lax`` operations the interpreters apply themselves.

Moving or inserting a batch axis (``batching``), broadcasting a tangent or the zero of an
extended dtype (``ad``), summing per-lane cotangents (``custom_calls``): the primitives
live in ``kiln.lax``, above the interpreters, which installs them here when imported
(``kiln.lax.structural``, ``kiln.lax.reductions``; ``import kiln`` imports them).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_ops: dict[str, Callable] = {}


def install(**ops: Callable) -> None:
    """Install lax operations by name (``transpose``, ``broadcast_in_dim``, ``reduce_sum``)."""
    _ops.update(ops)


def _op(name: str) -> Callable:
    f = _ops.get(name)
    if f is None:
        raise RuntimeError(f"kiln.lax.{name} is not installed for the interpreters: import "
                           f"kiln (kiln.lax installs it)")
    return f


def transpose(operand: Any, permutation: Sequence[int]) -> Any:
    """``kiln.lax.transpose``."""
    return _op("transpose")(operand, permutation)


def broadcast_in_dim(operand: Any, shape: Sequence[int],
                     broadcast_dimensions: Sequence[int]) -> Any:
    """``kiln.lax.broadcast_in_dim``."""
    return _op("broadcast_in_dim")(operand, shape, broadcast_dimensions)


def convert_element_type(operand: Any, new_dtype: Any, weak_type: bool = False) -> Any:
    """``kiln.lax``'s internal cast that can also set the weak-type flag."""
    return _op("convert_element_type")(operand, new_dtype, weak_type)


def reduce_sum(operand: Any, axes: Sequence[int]) -> Any:
    """``kiln.lax.reduce_sum``."""
    return _op("reduce_sum")(operand, axes)
