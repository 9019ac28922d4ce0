"""Op factories: one call defines a primitive with impl, abstract eval, weak-type
rule and batching rule; the caller adds the JVP/transpose rules beside it.

Conventions for every primitive in ``kiln.lax``:
- ``impl(*numpy_values, **params)`` gets NumPy arrays (or NumPy scalars) whose dtypes
  already agree with the abstract evaluation and must return a NumPy value of exactly
  the dtype/shape that ``abstract_eval`` promises (cast if NumPy would differ).
- ``abstract_eval(*avals, **params)`` checks shapes/dtypes (raising ``TypeError`` /
  ``ValueError`` as JAX does) and returns a ``ShapedArray`` (list if multiple results).
- Static parameters are hashable (tuples, not lists) so jaxprs can be cached.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import Primitive, standard_weak_type_rule
from kiln.interpreters import batching

# Dtype categories used in argument checks.
_bool = ("bool",)
_int = ("signedinteger", "unsignedinteger")
_signedint = ("signedinteger",)
_uint = ("unsignedinteger",)
_float = ("floating",)
_complex = ("complexfloating",)
_inexact = _float + _complex
_num = _int + _inexact
_any = _bool + _num
_int_or_bool = _int + _bool

_KIND_TYPES = {
    "bool": np.bool_, "signedinteger": np.signedinteger, "unsignedinteger": np.unsignedinteger,
    "floating": np.floating, "complexfloating": np.complexfloating,
}


def dtype_in(dtype, kinds) -> bool:
    return any(dtypes.issubdtype(dtype, _KIND_TYPES[k]) for k in kinds)


def check_dtype(name: str, dtype, kinds) -> None:
    if not dtype_in(dtype, kinds):
        accepted = ", ".join(kinds)
        raise TypeError(f"{name} does not accept dtype {np.dtype(dtype).name}. "
                        f"Accepted dtypes are subtypes of {accepted}.")


def check_dtype_at(name: str, dtype, kinds, pos: int) -> None:
    """``check_dtype`` for operand ``pos`` of an n-ary op, naming the position as JAX does."""
    if not dtype_in(dtype, kinds):
        words = [_KIND_WORDS.get(k, k) for k in kinds]
        if "signedinteger" in kinds and "unsignedinteger" in kinds:   # JAX: "integer"
            words.remove("unsigned integer")
        accepted = ", ".join(words)
        raise TypeError(f"{name} does not accept dtype {np.dtype(dtype).name} at position "
                        f"{pos}. Accepted dtypes at position {pos} are subtypes of {accepted}.")


_KIND_WORDS = {"signedinteger": "integer", "unsignedinteger": "unsigned integer"}


def check_same_dtypes(name: str, avals) -> None:
    dts = [a.dtype for a in avals]
    if any(d != dts[0] for d in dts[1:]):
        raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                        f"{', '.join(np.dtype(d).name for d in dts)}. (Tip: jnp.{name} "
                        "is a similar function that does automatic type promotion on inputs).")


def check_same_shapes(name: str, avals) -> tuple:
    """The result shape of an elementwise op: operands of equal rank whose dimensions
    agree or are 1 (size-1 dimensions broadcast, as JAX's lax ops do: ``mul a:f32[1,2]
    b:f32[2,1]`` is ``f32[2,2]``); rank-0 operands broadcast to any shape (``mul b 2.0``)."""
    shapes = [a.shape for a in avals if a.shape != ()]
    if not shapes:
        return ()
    first = shapes[0]
    if all(s == first for s in shapes[1:]):
        return first
    ranks = {len(s) for s in shapes}
    if len(ranks) > 1:
        raise TypeError(f"{name}: arrays must have the same number of dimensions, got "
                        f"{ranks}")
    out = []
    for dims in zip(*shapes):
        big = {d for d in dims if d != 1}
        if len(big) > 1:
            raise TypeError(f"{name} got incompatible shapes for broadcasting: "
                            f"{', '.join(str(a.shape) for a in avals)}.")
        out.append(big.pop() if big else 1)
    return tuple(out)


def standard_primitive(name, abstract_eval, impl, weak_type_rule=standard_weak_type_rule,
                       multiple_results=False) -> Primitive:
    prim = Primitive(name)
    prim.multiple_results = multiple_results
    prim.impl = impl
    prim.abstract_eval = abstract_eval
    prim.weak_type_rule = weak_type_rule
    return prim


def unop(name, impl, kinds, *, result_dtype=None, weak_type_rule=standard_weak_type_rule):
    """Elementwise unary primitive. ``result_dtype(dtype)`` for dtype-changing ops."""
    def abstract_eval(x, **params):
        check_dtype(name, x.dtype, kinds)
        dt = result_dtype(x.dtype) if result_dtype else x.dtype
        return ShapedArray(x.shape, dt, weak_type_rule(x.weak_type, **params))
    prim = standard_primitive(name, abstract_eval, impl, weak_type_rule)
    prim.accepted_dtype_kinds = kinds
    batching.vectorized_batcher(prim)
    return prim


def naryop(name, impl, kinds, *, result_dtype=None, weak_type_rule=standard_weak_type_rule,
           same_dtypes=True):
    """Elementwise n-ary primitive: operands of equal shape (and dtype, unless told)."""
    def abstract_eval(*avals, **params):
        for i, a in enumerate(avals):
            check_dtype_at(name, a.dtype, kinds, i)
        if same_dtypes:
            check_same_dtypes(name, avals)
        shape = check_same_shapes(name, avals)
        dt = result_dtype(*[a.dtype for a in avals]) if result_dtype else avals[0].dtype
        return ShapedArray(shape, dt, weak_type_rule(*[a.weak_type for a in avals], **params))
    prim = standard_primitive(name, abstract_eval, impl, weak_type_rule)
    prim.accepted_dtype_kinds = kinds
    prim.nary = True
    batching.broadcast_batcher(prim)
    return prim


def false_weak_type_rule(*_args, **_params) -> bool:
    return False


def bool_result(*_dtypes):
    return np.dtype(bool)


def as_dtype(value, dtype):
    """Cast a NumPy result to ``dtype`` if NumPy produced another one (or a Python scalar)."""
    if type(value) is not np.ndarray and not isinstance(value, np.generic):
        return np.asarray(value, dtype)
    if value.dtype != dtype:
        return value.astype(dtype)
    return value
