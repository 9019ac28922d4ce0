"""``jax.extend.core``: primitives, jaxprs and the current trace, for libraries.

The names are JAX's; the objects are kiln's own (``Primitive``, ``Jaxpr``, ``ClosedJaxpr``,
``JaxprEqn``, ``Var``, ``Literal`` from :mod:`kiln.core`), so a jaxpr from
``kiln.make_jaxpr`` can be inspected, checked and evaluated with them.
"""
from __future__ import annotations

import contextlib
import warnings
import weakref
from typing import Any, Union

import numpy as np

import kiln.core as _core_package
from kiln.core import trace as _core_trace
from kiln.core.avals import AbstractToken, ShapedArray, abstract_token  # noqa: F401
from kiln.core.jaxpr import (  # noqa: F401
    ClosedJaxpr,
    DropVar,
    Effect,
    Jaxpr,
    JaxprEqn,
    Literal,
    Var,
    check_jaxpr,
    eval_jaxpr,
    jaxpr_as_fun,
)
from kiln.core.trace import Primitive as _CorePrimitive
from kiln.core.trace import (
    Trace,
    Tracer,
    current_trace,
    eval_trace,
    get_aval,
)
from kiln.core.trace import set_current_trace as _set_current_trace
from kiln.errors import (  # noqa: F401
    ConcretizationTypeError,
    InconclusiveDimensionOperation,
    JaxprTypeError,
)
from kiln.extend.linear_util import DebugInfo  # noqa: F401

__all__ = [
    "AbstractToken", "Atom", "CallPrimitive", "ClosedJaxpr", "DebugInfo", "DropVar", "Effect",
    "Effects", "InconclusiveDimensionOperation", "Jaxpr", "JaxprEqn", "JaxprTypeError",
    "Literal", "ParamDict", "Primitive", "Token", "TraceTag", "Value", "Var", "array_types",
    "call_impl", "check_jaxpr", "concrete_or_error", "eval_context", "eval_jaxpr",
    "find_top_trace", "gensym", "get_opaque_trace_state", "jaxpr_as_fun", "jaxprs_in_params",
    "mapped_aval", "max_dim", "min_dim", "new_jaxpr_eqn", "no_effects",
    "primal_dtype_to_tangent_dtype", "primitives", "set_current_trace", "subjaxprs",
    "take_current_trace", "unmapped_aval", "unsafe_am_i_under_a_jit_DO_NOT_USE",
    "unsafe_am_i_under_a_vmap_DO_NOT_USE", "unsafe_get_axis_names_DO_NOT_USE",
    "valid_jaxtype",
]

Atom = Union[Var, Literal]
Value = Any
ParamDict = dict


Effects = set
no_effects: frozenset = frozenset()


# ----------------------------------------------------------------------------------------------
# Primitives defined by libraries.

class _PrimitiveType(type):
    """In JAX every primitive (``add_p`` as much as a library's) is an instance of
    ``jax.extend.core.Primitive``; kiln's own primitives are instances of the core class,
    so the check looks at that class (Equinox type-checks equations' primitives with it)."""

    def __instancecheck__(cls, obj):
        if cls is Primitive:
            return isinstance(obj, _CorePrimitive)
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub):
        if cls is Primitive:
            return isinstance(sub, type) and issubclass(sub, _CorePrimitive)
        return super().__subclasscheck__(sub)


class Primitive(_CorePrimitive, metaclass=_PrimitiveType):
    """A primitive defined through JAX's API (``jax.extend.core.Primitive``).

    As in JAX: ``def_impl`` gives the eager implementation, which receives and returns
    kiln Arrays (it may call any kiln function: ``x.at[i].set(...)``, ``jnp.where``);
    ``def_abstract_eval`` (or ``def_effectful_abstract_eval``) its shape rule; the
    transformation rules go into the JAX-named registries (``ad.primitive_jvps``,
    ``ad.primitive_transposes``, ``batching.primitive_batchers``, ...), which are the
    tables kiln's interpreters read; ``mlir.register_lowering(prim, mlir.lower_fun(fn))``
    lets ``jit`` compile it natively from ``fn`` (without one it runs its impl as a host
    island).
    """

    array_impl = True

    def def_effectful_abstract_eval(self, fn):
        """Register ``fn(*avals, **params) -> (out_avals, effects)``. A primitive that
        reports effects is never removed from a jaxpr as dead code."""
        prim = self

        def abstract_eval(*avals, **params):
            out, effects = fn(*avals, **params)
            if effects:
                from kiln.interpreters.staging import always_stage
                always_stage.add(prim)
            return out
        self.abstract_eval = abstract_eval
        return fn

    def def_effectful_abstract_eval2(self, fn):
        """As :meth:`def_effectful_abstract_eval` (JAX 0.10's second spelling)."""
        return self.def_effectful_abstract_eval(fn)

    def is_effectful(self, params) -> bool:
        from kiln.interpreters.staging import always_stage
        return self in always_stage

    def def_bind_with_trace(self, bind_with_trace):
        """Replace how this primitive is applied under a given trace."""
        self.bind_with_trace = bind_with_trace
        return bind_with_trace


def _call_primitives():
    from kiln.interpreters import calls
    return calls


# ----------------------------------------------------------------------------------------------
# The current trace, as JAX 0.10's ``take_current_trace``/``set_current_trace``.

class TraceTag:
    """Identifies the tracers a user-defined transformation owns (compared by identity)."""

    __slots__ = ()

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


@contextlib.contextmanager
def take_current_trace():
    """Yield the current trace, with the eval trace current inside the block (so code in
    it runs eagerly unless it re-enters the taken trace with :func:`set_current_trace`)."""
    prev = current_trace()
    with _set_current_trace(eval_trace):
        yield prev


def set_current_trace(trace: Trace, check_leaks: bool = False):
    """A context manager making ``trace`` the current trace (``check_leaks`` is accepted;
    kiln checks leaks with ``jax.checking_leaks``)."""
    del check_leaks
    return _set_current_trace(trace)


class Token:
    """A value that orders effects (it carries no data)."""

    def __init__(self, buf=None):
        self._buf = buf

    @property
    def aval(self):
        return abstract_token

    def block_until_ready(self):
        return self


def _array_types() -> frozenset:
    from kiln.array import ArrayImpl
    return frozenset({np.ndarray, np.bool_, np.number, ArrayImpl, bool, int, float, complex})


array_types = _array_types()


# ----------------------------------------------------------------------------------------------
# The current trace.

def __getattr__(name):
    # The call primitives live with the interpreters, which import this package's parents.
    if name in ("CallPrimitive", "call_impl", "call_p", "closed_call_p"):
        return getattr(_call_primitives(), name)
    if name == "primitives":
        import importlib
        return importlib.import_module("kiln.extend.core.primitives")
    raise AttributeError(f"module 'jax.extend.core' (kiln.extend.core) has no attribute "
                         f"{name!r}")


def find_top_trace(xs=()) -> Trace:
    """The current trace (JAX 0.10's meaning: ``xs`` is ignored, since the trace that
    processes an operation is always the current one)."""
    del xs
    return current_trace()


class OpaqueTraceState:
    """An identity token of the current trace: equal to another one exactly when both were
    taken under the same trace (its liveness is not kept)."""

    __slots__ = ("_ref",)

    def __init__(self, trace: Trace):
        self._ref = weakref.ref(trace)

    def __eq__(self, other):
        return isinstance(other, OpaqueTraceState) and self._ref == other._ref

    def __hash__(self):
        return hash(self._ref)


def get_opaque_trace_state(convention=None) -> OpaqueTraceState:
    """A token of the current trace (Flax compares them to detect transformation
    boundaries)."""
    del convention
    return OpaqueTraceState(current_trace())


@contextlib.contextmanager
def eval_context():
    """Within this context the current trace is the eager one: operations on concrete
    values run right away, even inside a transformation."""
    with set_current_trace(eval_trace):
        yield


def _trace_chain():
    t = current_trace()
    while t is not None:
        yield t
        t = t.parent


def unsafe_am_i_under_a_jit_DO_NOT_USE() -> bool:
    """Whether some enclosing transformation is staging a jaxpr (``jit``, ``scan`` ...)."""
    from kiln.interpreters.staging import JaxprTrace
    return any(isinstance(t, JaxprTrace) and not t.forward_known for t in _trace_chain())


def unsafe_am_i_under_a_vmap_DO_NOT_USE() -> bool:
    """Whether some enclosing transformation is a ``vmap``."""
    from kiln.interpreters.batching import BatchTrace
    return any(isinstance(t, BatchTrace) for t in _trace_chain())


def unsafe_get_axis_names_DO_NOT_USE() -> list:
    """The names of the mapped axes in scope (``vmap``/``pmap`` ``axis_name``s)."""
    from kiln.interpreters.batching import axis_env
    return [name for name, _ in axis_env]


def nonempty_axis_env_DO_NOT_USE() -> bool:
    """Whether any named mapped axis is in scope."""
    return bool(unsafe_get_axis_names_DO_NOT_USE())


# ----------------------------------------------------------------------------------------------
# Jaxprs.

def new_jaxpr_eqn(invars, outvars, primitive, params, effects=no_effects, source_info=None,
                  ctx=None) -> JaxprEqn:
    """A jaxpr equation ``outvars = primitive[params] invars`` (kiln keeps no per-equation
    effects, source info or context)."""
    del effects, source_info, ctx
    return JaxprEqn(primitive, list(invars), list(outvars), dict(params))


def gensym(suffix: str = ""):
    """A function making fresh :class:`Var` s of the given abstract values."""
    del suffix
    return Var


def _param_jaxprs(value):
    items = value if isinstance(value, (tuple, list)) else (value,)
    for v in items:
        if isinstance(v, ClosedJaxpr):
            yield v.jaxpr
        elif isinstance(v, Jaxpr):
            yield v


def jaxprs_in_params(params) -> list[Jaxpr]:
    """The jaxprs among the values of an equation's ``params`` (closed ones opened)."""
    return [j for v in params.values() for j in _param_jaxprs(v)]


def subjaxprs(jaxpr: Jaxpr):
    """The jaxprs directly inside the equations of ``jaxpr``."""
    for eqn in jaxpr.eqns:
        yield from jaxprs_in_params(eqn.params)


# ----------------------------------------------------------------------------------------------
# Values and abstract values.

def concrete_or_error(force: Any, val: Any, context: str = ""):
    """``force(val)`` if ``val`` has a concrete value (``val`` itself when ``force`` is
    None); ``ConcretizationTypeError`` for a tracer whose value is not known."""
    from kiln.core.trace import concretize
    v = concretize(val)
    if isinstance(v, Tracer):
        raise ConcretizationTypeError(val, context)
    if force is None:
        return v
    return force(v)


def valid_jaxtype(x) -> bool:
    """Whether ``x`` has an abstract value (is an array, tracer or array-like scalar)."""
    try:
        aval = get_aval(x)
    except (TypeError, ValueError):
        return False
    return np.dtype(aval.dtype).kind not in "OSUTV" or aval.dtype == _float0()


def _float0():
    from kiln import dtypes
    return dtypes.float0


def primal_dtype_to_tangent_dtype(primal_dtype):
    """The dtype of tangents of a value of ``primal_dtype``: ``float0`` for booleans and
    integers, the dtype itself otherwise."""
    from kiln import dtypes
    dt = np.dtype(primal_dtype)
    if dt.kind in "biu":
        return dtypes.float0
    return dt


def mapped_aval(size: int, axis: int | None, aval: ShapedArray) -> ShapedArray:
    """``aval`` without its mapped axis ``axis`` (of size ``size``)."""
    if axis is None:
        return aval
    if aval.shape[axis] != size:
        raise ValueError(f"mapped axis of size {aval.shape[axis]}, expected {size}")
    return aval.update(shape=aval.shape[:axis] + aval.shape[axis + 1:])


def unmapped_aval(size: int, axis: int | None, aval: ShapedArray) -> ShapedArray:
    """``aval`` with a new axis of size ``size`` inserted at ``axis``."""
    if axis is None:
        return aval
    return aval.update(shape=aval.shape[:axis] + (size,) + aval.shape[axis:])


def max_dim(d1, d2):
    """The larger of two dimension sizes."""
    return max(d1, d2)


def min_dim(d1, d2):
    """The smaller of two dimension sizes."""
    return min(d1, d2)


def is_concrete(x) -> bool:
    """Whether ``x``'s value is known now (not an abstract tracer)."""
    from kiln.core.trace import concretize
    return not isinstance(concretize(x), Tracer)


# ----------------------------------------------------------------------------------------------
# ``jax.core`` attributes that JAX 0.10.2 deprecates (a warning) or has removed (an error).

_MOVED_TO_EXTEND = frozenset({
    "CallPrimitive", "DebugInfo", "DropVar", "Effect", "Effects", "check_jaxpr",
    "concrete_or_error", "find_top_trace", "gensym", "get_opaque_trace_state",
    "jaxprs_in_params", "new_jaxpr_eqn", "no_effects", "primal_dtype_to_tangent_dtype",
    "valid_jaxtype",
})
_MOVED_TO_ERRORS = frozenset({"InconclusiveDimensionOperation", "JaxprTypeError"})
pytype_aval_mappings = _core_trace.pytype_aval_mappings

_DEPRECATED_ONLY = frozenset({
    "pytype_aval_mappings",
    "unsafe_am_i_under_a_jit_DO_NOT_USE", "unsafe_am_i_under_a_vmap_DO_NOT_USE",
    "unsafe_get_axis_names_DO_NOT_USE", "nonempty_axis_env_DO_NOT_USE", "abstract_token",
    "is_concrete",
})
_REMOVED = {
    "get_aval": "use jax.typeof instead",
    "mapped_aval": "use jax.extend.core.mapped_aval",
    "unmapped_aval": "use jax.extend.core.unmapped_aval",
    "set_current_trace": "use jax.extend.core.set_current_trace",
    "take_current_trace": "use jax.extend.core.take_current_trace",
    "traverse_jaxpr_params": "",
    "TraceTag": "use jax.extend.core.TraceTag",
    "call_impl": "use jax.extend.core.call_impl",
    "subjaxprs": "use jax.extend.core.subjaxprs",
    "AbstractToken": "use jax.extend.core.AbstractToken",
}


def _core_deprecated_attr(name: str):
    """``kiln.core.<name>`` for the names JAX 0.10.2's ``jax.core`` deprecates or removed."""
    if name in _REMOVED:
        hint = _REMOVED[name]
        raise AttributeError(f"jax.core.{name} was deprecated in JAX v0.8.2 and removed in "
                             f"JAX v0.10.0{'; ' + hint if hint else ''}.")
    if name in _MOVED_TO_EXTEND or name in _MOVED_TO_ERRORS or name in _DEPRECATED_ONLY:
        where = ("jax.extend.core" if name in _MOVED_TO_EXTEND
                 else "jax.errors" if name in _MOVED_TO_ERRORS else None)
        msg = f"jax.core.{name} is deprecated." + (f" Use {where}.{name}." if where else "")
        warnings.warn(msg, DeprecationWarning, stacklevel=3)
        value = globals().get(name)
        if value is None:
            raise AttributeError(f"module 'kiln.core' has no attribute {name!r} (kiln does "
                                 f"not provide jax.core.{name})")
        return value
    raise AttributeError(f"module 'kiln.core' has no attribute {name!r}")


# ``jax.core``'s names that live here (``kiln.core`` sits below this module and resolves them
# through what it installs).
_core_package.install_public(eval_context=eval_context, Atom=Atom, Value=Value,
                             ParamDict=ParamDict, max_dim=max_dim, min_dim=min_dim,
                             _deprecated_attr=_core_deprecated_attr)
