"""Mutable array references: the user API (``new_ref``, ``ref_get``, ``ref_set``,
``ref_swap``, ``ref_addupdate``, ``freeze``, ``empty_ref``, ``free_ref``) and the
primitives' abstract evaluation and implementations.

The primitives are those of JAX 0.10.2 (``new_ref``, ``get``, ``swap``, ``addupdate``,
``freeze``, ``empty_ref``, ``free_ref``; defined in ``kiln.core.ref``). ``get``, ``swap`` and
``addupdate`` take the reference, then (``swap``/``addupdate``) the value, then the
flattened indexers, with the indexers' tree structure as the ``tree`` parameter.

Eagerly a reference is a ``Ref`` object and the implementations read or replace its value;
the reference backend (and the loop interpreters) run the same implementations on ``Ref``
objects held in their environments. Transformation rules: ``kiln.state.rules``; the
compiled path: ``kiln.state.discharge``.
"""
from __future__ import annotations

import sys as _sys

import numpy as np

from kiln import dtypes
from kiln.array import Array, make_array, to_array
from kiln.core import ref as core_ref
from kiln.core import trace as core_trace
from kiln.core.avals import ShapedArray
from kiln.core.ref import (
    AbstractRef,
    Ref,
    addupdate_p,
    empty_ref_p,
    free_ref_p,
    freeze_p,
    get_p,
    new_ref_p,
    swap_p,
)
from kiln.core.trace import Tracer, eval_trace, get_aval, set_current_trace
from kiln.state import apply
from kiln.state.indexing import NDIndexer
from kiln.state.types import TransformedRef
from kiln.tree_util import tree_flatten, tree_unflatten

__all__ = ["new_ref", "empty_ref", "free_ref", "freeze", "ref_get", "ref_set", "ref_swap",
           "ref_addupdate", "get_ref_and_transforms"]


# ----------------------------------------------------------------------------------------------
# The user API.

def new_ref(init_val, *, memory_space=None, kind=None) -> Ref:
    """A new mutable array reference holding (a copy of) ``init_val`` (``jax.new_ref``).

    Args:
      init_val: an array (or scalar) giving the buffer's initial value.
      memory_space: accepted as in JAX; kiln has one memory space.
      kind: ``None`` or ``'no_grad_no_remat'`` (JAX's mutation kind under remat).

    Returns:
      A ``Ref``: read it with ``ref[idx]``, write with ``ref[idx] = v``.
    """
    if isinstance(init_val, Ref) or (isinstance(init_val, Tracer)
                                     and type(init_val.aval) is AbstractRef):
        raise TypeError("new_ref: the initial value is itself a Ref; pass its value "
                        "(ref[...]) to create a second reference")
    if not isinstance(init_val, (Array, Tracer)):
        if isinstance(init_val, (list, tuple, dict)) or not _array_like(init_val):
            raise TypeError(
                "Error interpreting argument to new_ref as a JAX value. The problematic "
                f"value is of type {type(init_val)} and was passed to new_ref at position 0.")
        init_val = to_array(init_val)
    return new_ref_p.bind(init_val, memory_space=memory_space, kind=kind)


def _array_like(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic, int, float, complex, bool))


def empty_ref(ty, memory_space=None) -> Ref:
    """A new reference of type ``ty`` (a ``ShapeDtypeStruct`` or ``ShapedArray``) whose
    contents are unspecified (kiln fills it with zeros)."""
    aval = ShapedArray(tuple(ty.shape), dtypes.canonicalize_dtype(ty.dtype),
                       getattr(ty, "weak_type", False))
    return empty_ref_p.bind(ty=aval, memory_space=memory_space)


def free_ref(ref) -> tuple:
    """Declare that ``ref`` is no longer used (``jax.ref.free_ref``)."""
    free_ref_p.bind(ref)
    return ()


def freeze(ref):
    """The final value of ``ref`` as an array (``jax.ref.freeze``); the reference must not
    be used afterwards."""
    return freeze_p.bind(ref)


def get_ref_and_transforms(ref_or_view, idx, function_name: str):
    """``(ref, transforms)``: the underlying reference and the indexers of ``ref_or_view``
    followed by the one for ``idx``."""
    if isinstance(ref_or_view, TransformedRef):
        ref, transforms = ref_or_view.ref, ref_or_view.transforms
    else:
        ref, transforms = ref_or_view, ()
    aval = get_aval(ref) if isinstance(ref, (Ref, Tracer)) else None
    if type(aval) is not AbstractRef:
        raise ValueError(f"Can only call `{function_name}` on a `Ref`: {ref}.")
    if idx is None or idx is Ellipsis:
        idx = ()
    elif not isinstance(idx, tuple):
        idx = (idx,)
    if not idx:
        return ref, tuple(transforms)
    shape = ref_or_view.shape
    return ref, (*transforms, NDIndexer.from_indices_shape(idx, shape))


def ref_get(ref, idx=None):
    """Read ``ref[idx]`` (``jax.ref.get``): an array, not a reference."""
    ref, transforms = get_ref_and_transforms(ref, idx, "ref_get")
    flat, tree = tree_flatten(transforms)
    return get_p.bind(ref, *flat, tree=tree)


def ref_swap(ref, idx, value, _function_name: str = "ref_swap"):
    """Write ``value`` into ``ref[idx]`` and return the previous contents
    (``jax.ref.swap``)."""
    if hasattr(ref, "dtype"):
        value = _maybe_implicit_cast(ref.dtype, value)
    ref, transforms = get_ref_and_transforms(ref, idx, _function_name)
    flat, tree = tree_flatten(transforms)
    return swap_p.bind(ref, value, *flat, tree=tree)


def ref_set(ref, idx, value) -> None:
    """Write ``value`` into ``ref[idx]`` (``jax.ref.set``; ``ref[idx] = value``)."""
    ref_swap(ref, idx, value, _function_name="ref_set")


def ref_addupdate(ref, idx, x) -> None:
    """Add ``x`` to ``ref[idx]`` in place (``jax.ref.addupdate``)."""
    ref, transforms = get_ref_and_transforms(ref, idx, "ref_addupdate")
    flat, tree = tree_flatten(transforms)
    addupdate_p.bind(ref, x, *flat, tree=tree)


def _maybe_implicit_cast(dtype, value):
    """Python scalars (weak types) and integers take the reference's dtype, as in JAX."""
    if isinstance(value, (Ref, TransformedRef)):
        return value
    try:
        aval = get_aval(value)
    except (TypeError, ValueError):
        return value
    if type(aval) is not ShapedArray:
        return value
    if ((aval.weak_type and dtypes.issubdtype(dtype, np.floating)
         and dtypes.issubdtype(aval.dtype, np.floating))
            or (dtypes.issubdtype(dtype, np.integer)
                and dtypes.issubdtype(aval.dtype, np.integer))):
        from kiln.lax.structural import convert_element_type
        if isinstance(value, Tracer):
            return convert_element_type(value, dtype)
        with set_current_trace(eval_trace):      # a constant stays a constant, as in JAX
            return convert_element_type(value, dtype)
    return value


# ----------------------------------------------------------------------------------------------
# Abstract evaluation (JAX's checks and messages).

def _transforms(tree, idx):
    return tree_unflatten(tree, list(idx))


def _check_ref(aval, name):
    if type(aval) is not AbstractRef:
        raise ValueError(f"`{name}` must be called on `Ref` types: {aval}.")


def _get_abstract_eval(ref_aval, *idx, tree):
    _check_ref(ref_aval, "get")
    out = ref_aval.inner_aval
    for t in _transforms(tree, idx):
        out = t.transform_type(out)
    return out


def _swap_abstract_eval(ref_aval, val_aval, *idx, tree):
    _check_ref(ref_aval, "swap")
    if type(val_aval) is AbstractRef:
        raise ValueError("Cannot store a Ref into another Ref. "
                         "Did you forget to load from it using `[...]`?")
    transforms = _transforms(tree, idx)
    expected = ref_aval.inner_aval
    for t in transforms:
        expected = t.transform_type(expected)
    if expected.shape != val_aval.shape:
        raise ValueError("Invalid shape for `swap`. "
                         f"Ref shape: {ref_aval.shape}. "
                         f"Expected shape: {expected.shape}. "
                         f"Value shape: {val_aval.shape}. "
                         f"Transforms: {transforms}. ")
    if expected.dtype != val_aval.dtype:
        raise ValueError("Invalid dtype for `swap`. "
                         f"Ref dtype: {expected.dtype}. "
                         f"Value dtype: {val_aval.dtype}. ")
    return expected


def _addupdate_abstract_eval(ref_aval, val_aval, *idx, tree):
    _check_ref(ref_aval, "addupdate")
    transforms = _transforms(tree, idx)
    expected = ref_aval.inner_aval
    for t in transforms:
        expected = t.transform_type(expected)
    if expected.shape != val_aval.shape:
        raise ValueError("Invalid shape for `addupdate`. "
                         f"Ref shape: {ref_aval.shape}. "
                         f"Expected shape: {expected.shape}. "
                         f"Value shape: {val_aval.shape}. "
                         f"Transforms: {transforms}. ")
    if expected.dtype != val_aval.dtype:
        raise ValueError("Invalid dtype for `addupdate`. "
                         f"Ref dtype: {ref_aval.dtype}. "
                         f"Value shape: {val_aval.dtype}. ")
    return []


def _new_ref_abstract_eval(init_aval, *, memory_space, kind):
    if type(init_aval) is AbstractRef:
        raise TypeError("new_ref: the initial value is itself a Ref")
    return AbstractRef(init_aval, memory_space=memory_space, kind=kind)


def _freeze_abstract_eval(ref_aval):
    _check_ref(ref_aval, "freeze")
    return ref_aval.inner_aval


def _empty_ref_abstract_eval(*, ty, memory_space):
    return AbstractRef(ty, memory_space=memory_space)


get_p.abstract_eval = _get_abstract_eval
swap_p.abstract_eval = _swap_abstract_eval
addupdate_p.abstract_eval = _addupdate_abstract_eval
new_ref_p.abstract_eval = _new_ref_abstract_eval
freeze_p.abstract_eval = _freeze_abstract_eval
empty_ref_p.abstract_eval = _empty_ref_abstract_eval
free_ref_p.abstract_eval = lambda ref_aval: []

get_p.weak_type_rule = None


# ----------------------------------------------------------------------------------------------
# Implementations: on ``Ref`` objects, indices and values as NumPy values or Arrays; the
# results are NumPy values (a ``Ref`` for new_ref), as every kiln impl's.

def _as_array(x, weak=False):
    if type(x) is Array:
        return x
    return make_array(np.asarray(x), weak)


def _check_concrete_ref(ref, name):
    if type(ref) is not Ref:
        raise TypeError(f"`{name}` needs a Ref, got {type(ref).__name__}")


def _get_impl(ref, *idx, tree):
    _check_concrete_ref(ref, "get")
    transforms = _transforms(tree, [_as_array(i) for i in idx])
    with set_current_trace(eval_trace):
        out = apply.read_transformed(ref._buf, transforms)
    return out._value


def _swap_impl(ref, val, *idx, tree):
    _check_concrete_ref(ref, "swap")
    transforms = _transforms(tree, [_as_array(i) for i in idx])
    weak = ref._aval.inner_aval.weak_type
    with set_current_trace(eval_trace):
        old, new = apply.write_transformed(ref._buf, transforms, _as_array(val, weak))
    ref._buf = make_array(new._value, weak)
    return old._value


def _addupdate_impl(ref, val, *idx, tree):
    _check_concrete_ref(ref, "addupdate")
    transforms = _transforms(tree, [_as_array(i) for i in idx])
    weak = ref._aval.inner_aval.weak_type
    with set_current_trace(eval_trace):
        new = apply.accumulate_transformed(ref._buf, transforms, _as_array(val, weak))
    ref._buf = make_array(new._value, weak)
    return []


def _new_ref_impl(init, *, memory_space, kind):
    init = _as_array(init)
    aval = AbstractRef(ShapedArray(init._value.shape, init._value.dtype, init.weak_type),
                       kind=kind)
    return Ref(aval, make_array(np.array(init._value, copy=True), init.weak_type))


def _freeze_impl(ref):
    _check_concrete_ref(ref, "freeze")
    return ref._buf._value


def _empty_ref_impl(*, ty, memory_space):
    buf = make_array(np.zeros(ty.shape, ty.dtype), ty.weak_type)
    return Ref(AbstractRef(ty, memory_space=memory_space), buf)


get_p.impl = _get_impl
swap_p.impl = _swap_impl
addupdate_p.impl = _addupdate_impl
new_ref_p.impl = _new_ref_impl
freeze_p.impl = _freeze_impl
empty_ref_p.impl = _empty_ref_impl
free_ref_p.impl = lambda ref: []


def _eager(prim, args, params):
    """Eager application (the eval trace): Refs stay Refs, everything else becomes an
    Array; the abstract evaluation runs first, so bad arguments raise JAX's errors."""
    vals = []
    avals = []
    for x in args:
        if type(x) is Ref:
            vals.append(x)
            avals.append(x._aval)
        else:
            a = x if type(x) is Array else to_array(x)
            vals.append(a)
            avals.append(ShapedArray(a._value.shape, a._value.dtype, a.weak_type))
    out_aval = prim.abstract_eval(*avals, **params)
    out = prim.impl(*vals, **params)
    if prim.multiple_results:
        return [make_array(o, a.weak_type) for o, a in zip(out, out_aval)]
    if type(out) is Ref:
        return out
    return make_array(np.asarray(out), out_aval.weak_type)


core_trace.set_ref_eager_rule(_eager)


# ----------------------------------------------------------------------------------------------
# JAX's jaxpr syntax for reads and writes: ``b:f32[3] <- a[...]``, ``c:f32[], a[0] <- a[0], x``,
# ``a[1:3] += y``.

def _pp_index(eqn, namer, idx_vars) -> str:
    from kiln.state.indexing import Slice
    transforms = tree_unflatten(eqn.params["tree"], [namer(v) for v in idx_vars])
    if not transforms:
        return "[...]"
    out = ""
    for t in transforms:
        parts = []
        for i, dim in zip(t.indices, t.shape):
            if type(i) is Slice:
                if i.is_dynamic_start:
                    parts.append(f"{i.start}:{i.start}+{i.size}")
                else:
                    start = "" if i.start == 0 else str(i.start)
                    end = i.start + (i.size - 1) * i.stride + 1 if i.size else i.start
                    stop = "" if end == dim else str(end)
                    step = "" if i.stride == 1 else f":{i.stride}"
                    parts.append(f"{start}:{stop}{step}")
            else:
                parts.append(str(i))
        out += "[" + ",".join(parts) + "]"
    return out


def _pp_get(eqn, namer):
    ref, *idx = eqn.invars
    o = eqn.outvars[0]
    return f"{namer(o)}:{o.aval.str_short()} <- {namer(ref)}{_pp_index(eqn, namer, idx)}"


def _pp_swap(eqn, namer):
    ref, val, *idx = eqn.invars
    o = eqn.outvars[0]
    at = f"{namer(ref)}{_pp_index(eqn, namer, idx)}"
    return f"{namer(o)}:{o.aval.str_short()}, {at} <- {at}, {namer(val)}"


def _pp_addupdate(eqn, namer):
    ref, val, *idx = eqn.invars
    return f"{namer(ref)}{_pp_index(eqn, namer, idx)} += {namer(val)}"


def _register_pp():
    from kiln.core.jaxpr import pp_eqn_rules
    pp_eqn_rules["get"] = _pp_get
    pp_eqn_rules["swap"] = _pp_swap
    pp_eqn_rules["addupdate"] = _pp_addupdate


_register_pp()


core_ref.set_state_api(_sys.modules[__name__])      # Ref's indexing methods
