"""Conversions to and from extended dtypes with rules (JAX's ``to_edtype``/``from_edtype``).

``lax.convert_element_type(x, edtype)`` of an array of ``edtype``'s representation dtype
gives an array of the extended dtype over the same data, and back; the dtype's
``_rules.convert_to``/``convert_from`` (or ``allow_conversion``) say which conversions are
allowed. Both primitives are the identity on the physical data (``kiln._extended``), so
their impls, batching and compiled forms are copies; their JVPs convert the tangent to the
result's tangent dtype (an extended dtype's ``_rules.tangent_dtype``), and each transposes
to the other.
"""
from __future__ import annotations

import numpy as np

from kiln import _extended
from kiln.core.avals import ShapedArray
from kiln.dtypes import ExtendedDType
from kiln.interpreters import ad, batching
from kiln.lax._factory import standard_primitive

__all__ = ["convert_extended", "from_edtype_p", "to_edtype_p"]


def _name(dt) -> str:
    return dt.name if isinstance(dt, ExtendedDType) else np.dtype(dt).name


def _allowed(rules, method: str, a, b) -> bool:
    fn = getattr(rules, method, None)
    return fn(a, b) if fn is not None else bool(getattr(rules, "allow_conversion", False))


def _to_edtype_abstract_eval(x, *, edtype):
    if not isinstance(x, ShapedArray):
        raise TypeError(f"can only convert to an extended dtype on an array type, but got "
                        f"{type(x)}")
    if not _allowed(edtype._rules, "convert_to", x.dtype, edtype):
        raise ValueError(f"Cannot convert_element_type from {_name(x.dtype)} to "
                         f"{_name(edtype)}")
    rep = _extended.rep_dtype(edtype)
    if x.dtype != rep:
        raise ValueError(
            "can only convert to extended dtype from its representation dtype, but tried to "
            f"convert from {_name(x.dtype)} to {_name(edtype)} which doesn't match the "
            f"representation type {_name(rep)}.")
    return ShapedArray(x.shape, edtype, x.weak_type)


def _from_edtype_abstract_eval(x, *, dtype):
    if not isinstance(x, ShapedArray):
        raise TypeError(f"can only convert from an extended dtype on an array type, but got "
                        f"{type(x)}")
    if not _allowed(x.dtype._rules, "convert_from", x.dtype, dtype):
        raise ValueError(f"Cannot convert_element_type from {_name(x.dtype)} to "
                         f"{_name(dtype)}")
    rep = _extended.rep_dtype(x.dtype)
    if rep != dtype:
        raise ValueError(
            "can only convert from extended dtype to its representation dtype, but tried to "
            f"convert from {_name(x.dtype)} to {_name(dtype)} which doesn't match the "
            f"representation type {_name(rep)}.")
    return ShapedArray(x.shape, dtype, x.weak_type)


def _identity(x, **_):
    return x


to_edtype_p = standard_primitive("to_edtype", _to_edtype_abstract_eval, _identity)
to_edtype_p.weak_type_rule = lambda w, **_: w
from_edtype_p = standard_primitive("from_edtype", _from_edtype_abstract_eval, _identity)
from_edtype_p.weak_type_rule = lambda w, **_: w


def _to_edtype_jvp(primals, tangents, *, edtype):
    (x,), (t,) = primals, tangents
    out = to_edtype_p.bind(x, edtype=edtype)
    if type(t) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    return out, convert_extended(t, ad.tangent_dtype(edtype))


def _from_edtype_jvp(primals, tangents, *, dtype):
    (x,), (t,) = primals, tangents
    out = from_edtype_p.bind(x, dtype=dtype)
    if type(t) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    return out, convert_extended(t, ad.tangent_dtype(dtype))


def _to_edtype_transpose(ct, x, *, edtype):
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)]
    return [from_edtype_p.bind(ct, dtype=x.aval.dtype)]


def _from_edtype_transpose(ct, x, *, dtype):
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)]
    return [to_edtype_p.bind(ct, edtype=x.aval.dtype)]


ad.jvp_rules[to_edtype_p] = _to_edtype_jvp
ad.jvp_rules[from_edtype_p] = _from_edtype_jvp
ad.transpose_rules[to_edtype_p] = _to_edtype_transpose
ad.transpose_rules[from_edtype_p] = _from_edtype_transpose


def _vectorized(prim):
    def rule(axis_data, vals, dims, **params):
        (x,), (d,) = vals, dims
        return prim.bind(x, **params), d
    batching.batch_rules[prim] = rule


_vectorized(to_edtype_p)
_vectorized(from_edtype_p)


def convert_extended(operand, new_dtype, weak_type: bool = False, sharding=None):
    """``convert_element_type`` where the source or target dtype is extended (JAX's rules:
    the same dtype is a no-op; between two extended dtypes, or with a weak type or a
    sharding, it raises)."""
    from kiln.core.trace import get_aval
    old = get_aval(operand).dtype
    if new_dtype == old:
        return operand
    if sharding is not None or weak_type:
        raise NotImplementedError("convert_element_type to or from an extended dtype with "
                                  "weak_type=True or a sharding")
    if isinstance(new_dtype, ExtendedDType) and isinstance(old, ExtendedDType):
        raise ValueError(
            f"cannot directly convert between extended dtypes: from {_name(old)} to "
            f"{_name(new_dtype)}. Instead, convert to and from their representation dtypes, "
            f"e.g.:\n{_name(old)} -> {_name(_extended.rep_dtype(old))} -> "
            f"{_name(_extended.rep_dtype(new_dtype))} -> {_name(new_dtype)}")
    if isinstance(new_dtype, ExtendedDType):
        if not _extended.has_rules(new_dtype):
            raise TypeError(f"cannot convert_element_type to the extended dtype {new_dtype}")
        return to_edtype_p.bind(operand, edtype=new_dtype)
    if not _extended.has_rules(old):
        raise TypeError(f"cannot convert_element_type from the extended dtype {old}")
    return from_edtype_p.bind(operand, dtype=np.dtype(new_dtype))
