"""``jax.experimental.hijax``: JAX's API for high-level ("hijax") types.

Defining hijax types and primitives works as in JAX (``HiType``, ``MutableHiType``,
``HiPrimitive``, ``register_hitype``, ``aval_method``/``aval_property``). A hijax
primitive applied eagerly runs its ``impl`` on the high-level values; inside a
transformation kiln lowers it *while tracing*: its ``to_lojax`` runs on the Python
objects, whose contents are then tracers, so staged programs hold only ordinary arrays
(JAX stages the high-level equation and lowers the jaxpr afterwards; the results are the
same). Hijax arguments of ``jit`` and ``eval_shape`` cross the boundary as their low-level
values, mutable ones written back after the call (``kiln._hijax``). Not supported: hijax
values as ``jit`` outputs or loop carries, and mutation of a hijax value captured by a
``jit``ted function or a loop body (``NotImplementedError``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from kiln import _hijax
from kiln._src.effects import control_flow_allowed_effects  # noqa: F401
from kiln.core.avals import AbstractValue, ShapedArray  # noqa: F401
from kiln.core.trace import (
    EvalTrace,
    Primitive,
    aval_method,  # noqa: F401
    aval_property,  # noqa: F401
    current_trace,
    eval_trace,
    pytype_aval_mappings,
    set_current_trace,
)
from kiln.interpreters import ad
from kiln.interpreters.ad import Zero, instantiate_zeros, is_undefined_primal  # noqa: F401
from kiln.state.types import AbstractRef, TransformedRef  # noqa: F401

__all__ = ["AbstractRef", "AbstractValue", "AvalMutableQDD", "AvalQDD", "HiPrimitive",
           "HiPspec", "HiType", "MutableHiType", "ShapedArray", "TransformedRef",
           "VJPHiPrimitive", "Zero", "aval_method", "aval_property",
           "control_flow_allowed_effects", "instantiate_zeros", "is_undefined_primal",
           "register_hitype"]


class QuasiDynamicData:
    """Type information of a mutable hijax value that may change while tracing."""


@dataclasses.dataclass(frozen=True)
class AvalQDD:
    """An abstract value together with its quasi-dynamic data."""

    aval: Any
    qdd: Any
    is_high = True
    has_qdd = True


@dataclasses.dataclass(frozen=True)
class AvalMutableQDD:
    """An abstract value with mutable quasi-dynamic data (what abstract evaluation of a
    primitive that changes a mutable hijax value's type receives)."""

    aval: Any
    mutable_qdd: Any


def _transformations_unsupported(name: str) -> NotImplementedError:
    return NotImplementedError(
        f"kiln: the hijax primitive '{name}' was applied inside a transformation (jit, grad, "
        "vmap, ...) to a value kiln cannot lower there.")


class HiPrimitive(Primitive):
    """A primitive on hijax values: subclasses define ``impl``, ``abstract_eval``,
    ``to_lojax``, ``jvp`` and ``transpose`` as methods (JAX's ``HiPrimitive``)."""

    def __init__(self, name):
        # Not Primitive.__init__: it would hide the subclass's impl/abstract_eval methods.
        self.name = name
        self.weak_type_rule = None
        self._eager_ok = set()
        ad.jvp_rules[self] = self.jvp
        ad.transpose_rules[self] = self.transpose

    def bind(self, *args, **params):
        trace = current_trace()
        if type(trace) is EvalTrace:
            with set_current_trace(eval_trace):
                return self.impl(*args, **params)
        from kiln.interpreters.staging import JaxprTrace
        staged = type(trace) is JaxprTrace and not trace.forward_known
        if staged:
            _hijax.before_bind(trace, args)
        out = self.to_lojax(*args, **params)    # lowered now, on the traced contents
        if staged:
            _hijax.after_bind(trace, out)
        return out

    def is_high(self, *avals, **params) -> bool:
        return True

    def is_effectful(self, params) -> bool:
        return False

    def abstract_eval(self, *arg_avals, **params):
        raise NotImplementedError(f"{type(self).__name__} must define abstract_eval")

    def impl(self, *args, **params):
        raise NotImplementedError(f"{type(self).__name__} must define impl")

    def to_lojax(self, *args, **params):
        raise NotImplementedError(f"{type(self).__name__} must define to_lojax")

    def jvp(self, primals, tangents, **params):
        raise NotImplementedError(f"{type(self).__name__} must define jvp")

    def transpose(self, *args, **params):
        raise NotImplementedError(f"{type(self).__name__} must define transpose")


class HiType(AbstractValue):
    """An immutable high-level type; subclasses define its lowering to ordinary types
    (``lo_ty``, ``lower_val``, ``raise_val``) and its tangent type."""

    is_high = True
    has_qdd = False

    def lo_ty(self):
        raise NotImplementedError(f"{type(self).__name__} must define lo_ty")

    def lower_val(self, hi_val):
        raise NotImplementedError(f"{type(self).__name__} must define lower_val")

    def raise_val(self, *lo_vals):
        raise NotImplementedError(f"{type(self).__name__} must define raise_val")

    def to_tangent_aval(self):
        raise NotImplementedError(f"{type(self).__name__} must define to_tangent_aval")

    def to_ct_aval(self):
        return self.to_tangent_aval()


class MutableHiType(AbstractValue):
    """A mutable high-level type whose lowering depends on quasi-dynamic data."""

    is_high = True
    has_qdd = True
    is_writer = False

    def lo_ty_qdd(self, state, /):
        raise NotImplementedError(f"{type(self).__name__} must define lo_ty_qdd")

    def lo_ty(self):
        raise NotImplementedError("mutable hitypes should use lo_ty_qdd instead")

    def to_tangent_aval(self):
        raise NotImplementedError(f"{type(self).__name__} must define to_tangent_aval")

    def to_ct_aval(self):
        return self.to_tangent_aval()


class HiPspec:
    """A partition spec of a hijax type (its lowering to ordinary specs)."""

    def to_lo(self):
        raise NotImplementedError(f"{type(self).__name__} must define to_lo")


class VJPHiPrimitive:
    """JAX's primitives defined by a forward function and a VJP; kiln does not implement
    them."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("kiln does not implement jax.experimental.hijax."
                                  "VJPHiPrimitive")


def register_hitype(val_cls, typeof_fn) -> None:
    """Register ``typeof_fn`` as the abstract value of ``val_cls``'s instances."""
    pytype_aval_mappings[val_cls] = typeof_fn
    _hijax.hi_types.add(val_cls)


def cur_qdd(x):
    """The current quasi-dynamic data of a mutable hijax value (eager values only)."""
    from kiln.core.trace import Tracer
    if isinstance(x, Tracer):
        raise _transformations_unsupported("cur_qdd")
    return x.cur_qdd()
