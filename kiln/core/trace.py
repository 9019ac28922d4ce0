"""Primitives, traces and tracers: the stackless tracing machinery.

There is always exactly one *current trace*. ``Primitive.bind`` hands the
primitive application to it. Every trace except the root ``EvalTrace`` has a
``parent`` and runs its rules with the parent as the current trace, so nesting
in any order works and tangents of different ``grad``s never mix (a value that
is not one of a trace's own tracers is a constant to that trace).

The root trace is an ``EvalTrace``: it calls the primitive's NumPy ``impl``.
"""
from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager

import numpy as np

from kiln import _extended
from kiln._fp_warnings import IGNORE as _FP_IGNORE
from kiln._fp_warnings import enter as _fp_enter
from kiln._fp_warnings import leave as _fp_leave
from kiln.core.avals import ShapedArray
from kiln.errors import (
    ConcretizationTypeError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerIntegerConversionError,
    UnexpectedTracerError,
)

#: Types of arrays of an extended dtype whose values are arrays of NumPy dtype underneath
#: (typed PRNG key arrays, registered by ``kiln.random._keys``). The core never sees them:
#: ``Primitive.bind`` hands a primitive applied to one to ``extended_bind[0](prim, args,
#: params)`` (``kiln.random._key_rules``), which applies it to their data or raises JAX's
#: error for a primitive that does not accept keys.
extended_types: set = set()
extended_bind: list = [None]


class Primitive:
    """A named operation. ``impl`` runs it on NumPy values; ``abstract_eval`` on avals.

    Transformation rules (jvp, transpose, batching, partial evaluation) live in the
    registries of their interpreters, registered next to the primitive's definition.
    """

    multiple_results = False
    # JAX's primitive kinds (``call_p``/``closed_call_p`` are call primitives, ``xla_pmap``
    # a map primitive); kiln's own call primitives carry closed jaxprs in their params.
    call_primitive = False
    map_primitive = False
    # Primitives of mutable array references (``kiln.core.ref``): eagerly they take and
    # give ``Ref`` objects. ``ref_operands``: the primitive accepts references as operands
    # (the reference primitives and the call / control-flow primitives, whose bodies use
    # them); any other primitive given one raises TypeError.
    ref_primitive = False
    ref_operands = False
    # True for primitives defined through JAX's API (``jax.extend.core.Primitive``): their
    # ``impl`` takes and returns kiln Arrays, as JAX's do, and may call any kiln function.
    # kiln's own primitives have NumPy impls (``array_impl`` False); the machinery calls
    # either kind through :func:`apply_impl`.
    array_impl = False
    # ``lay_out(outs, args, params)``, after an eager application made its output Arrays:
    # sets their layouts (``sharding_constraint``, and a ``jit`` equation whose outputs
    # end in constraints, lay their results out as those say).
    eager_layout = None

    def __init__(self, name: str):
        self.name = name
        self.impl = None
        self.abstract_eval = None
        # weak_type_rule(*in_weak_flags, **params) -> bool (or list for multiple results)
        self.weak_type_rule = None
        # Signatures (shapes, dtypes, params) whose abstract evaluation already passed
        # eagerly: bad arguments raise JAX's errors, good ones are checked only once.
        self._eager_ok = set()

    def bind(self, *args, **params):
        for x in args:
            if type(x) in extended_types:    # a typed key array: see ``extended_types``
                return extended_bind[0](self, args, params)
        return _state.trace.process_primitive(self, args, params)

    def bind_with_trace(self, trace: Trace, args, avals=None, params=None, /):
        """Apply this primitive under ``trace`` (not the current trace), as JAX's
        ``bind_with_trace(trace, args, avals, params)``; the older form without ``avals``
        (``bind_with_trace(trace, args, params)``) is accepted too."""
        if params is None and isinstance(avals, dict):
            avals, params = None, avals
        args = tuple(args)
        if any(type(x) in extended_types for x in args):
            with set_current_trace(trace):
                return extended_bind[0](self, args, dict(params or {}))
        return trace.process_primitive(self, args, dict(params or {}))

    def get_bind_params(self, params):
        """The parameters to re-bind an equation of this primitive with (JAX 0.10's
        protocol: a dict; primitives whose equations hold functions return them under
        ``subfuns``). kiln's call primitives keep their jaxprs in ``params``."""
        return dict(params)

    def def_impl(self, impl):
        self.impl = impl
        return impl

    def def_abstract_eval(self, fn):
        self.abstract_eval = fn
        return fn

    def __repr__(self):
        return self.name


def standard_weak_type_rule(*weak_flags, **_params) -> bool:
    return bool(weak_flags) and all(weak_flags)


class _TraceState(threading.local):
    """The current trace, per thread (as in JAX): a transformation running in one thread
    never sees tracers of another. A new thread starts at the eval trace."""

    def __init__(self):
        self.trace = globals().get("eval_trace")
        # ``ensure_compile_time_eval``: staging traces evaluate operations whose operands
        # are all concrete right away instead of staging them (JAX's eager constant folding).
        self.eager_folding = False


_state = _TraceState()
_trace_ids = itertools.count()


def current_trace() -> Trace:
    return _state.trace


def eager_folding() -> bool:
    """Whether operations on concrete values are evaluated while staging
    (``ensure_compile_time_eval``)."""
    return _state.eager_folding


@contextmanager
def set_eager_folding(on: bool):
    prev = _state.eager_folding
    _state.eager_folding = on
    try:
        yield
    finally:
        _state.eager_folding = prev


@contextmanager
def set_current_trace(trace: Trace):
    prev = _state.trace
    _state.trace = trace
    try:
        yield trace
    finally:
        _state.trace = prev


class Trace:
    """A transformation's interpreter for primitive applications.

    kiln's trace classes take custom-derivative calls in kiln's form
    (``process_custom_jvp_call(fun, jvp, args, *, symbolic_zeros)``); a trace class defined
    outside kiln (a library's own transformation) follows JAX's protocol (``jax_protocol``
    is True) and is handed JAX's form, and kiln's classes accept JAX's form from it too
    (see :mod:`kiln.interpreters.jax_protocol`).
    """

    __slots__ = ("parent", "id", "alive", "__weakref__")
    jax_protocol = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.jax_protocol = not cls.__module__.startswith("kiln.")
        if cls.jax_protocol:
            return
        for kind in ("jvp", "vjp"):
            name = f"process_custom_{kind}_call"
            if name in cls.__dict__:
                setattr(cls, name, _accepting_jax_form(kind, cls.__dict__[name]))

    def __init__(self, parent: Trace | None = None):
        self.parent = _state.trace if parent is None else parent
        self.id = next(_trace_ids)
        self.alive = True

    def process_primitive(self, prim: Primitive, args, params):
        raise NotImplementedError(f"{type(self).__name__}.process_primitive")

    def process_custom_jvp_call(self, fun, jvp, args, *, symbolic_zeros=False):
        raise NotImplementedError(f"{type(self).__name__}.process_custom_jvp_call")

    def process_custom_vjp_call(self, fun, fwd, bwd, args, out_trees, *, symbolic_zeros=False):
        raise NotImplementedError(f"{type(self).__name__}.process_custom_vjp_call")

    @property
    def main(self):
        """JAX's identity of a trace (its ``tag`` when a library's trace has one): tracers
        ``x`` of this trace satisfy ``x._trace.main is trace.main`` (Equinox checks it)."""
        return getattr(self, "tag", self)

    def is_ancestor_of(self, other: Trace) -> bool:
        t = other
        while t is not None:
            if t is self:
                return True
            t = t.parent
        return False

    def __repr__(self):
        return f"{type(self).__name__}#{self.id}"


# ``kiln.core.physical``'s rewrite of a primitive's parameter (a jaxpr inside it) to physical
# dtypes, installed when that module is imported (it needs the jaxpr IR, above this module).
_physical_param = None


def set_physical_param(rewrite) -> None:
    """Install ``rewrite(param) -> param``: jaxprs in a parameter with extended dtypes
    replaced by their physical form (``EvalTrace`` runs impls on physical data)."""
    global _physical_param
    _physical_param = rewrite


# Custom-derivative calls between kiln's traces and traces written to JAX's protocol
# (``Trace.jax_protocol``): ``kiln.interpreters.jax_protocol`` converts between the two forms
# and installs its converters here when imported (it sits above the interpreters).
_jax_protocol: dict = {}


def set_jax_protocol(*, to_kiln_form, custom_jvp_call, custom_vjp_call) -> None:
    """Install the converters of ``kiln.interpreters.jax_protocol``: ``to_kiln_form(kind,
    args, kwargs)`` (a JAX-form ``process_custom_{kind}_call`` as kiln's form) and
    ``custom_{jvp,vjp}_call(trace, ...)`` (kiln's form handed to a JAX-protocol trace)."""
    _jax_protocol.update(to_kiln_form=to_kiln_form, custom_jvp_call=custom_jvp_call,
                         custom_vjp_call=custom_vjp_call)


def _protocol(name: str):
    f = _jax_protocol.get(name)
    if f is None:
        raise RuntimeError("the JAX-protocol converters of custom calls are not installed: "
                           "import kiln (kiln.interpreters.jax_protocol installs them)")
    return f


def custom_jvp_call(trace, fun, jvp, args, *, symbolic_zeros=False):
    """``trace.process_custom_jvp_call`` with kiln's flat callables, in ``trace``'s form
    (JAX's for a trace of a class defined outside kiln)."""
    if not trace.jax_protocol:
        return trace.process_custom_jvp_call(fun, jvp, args, symbolic_zeros=symbolic_zeros)
    return _protocol("custom_jvp_call")(trace, fun, jvp, args, symbolic_zeros=symbolic_zeros)


def custom_vjp_call(trace, fun, fwd, bwd, args, out_trees, *, symbolic_zeros=False):
    """``trace.process_custom_vjp_call`` with kiln's flat callables, in ``trace``'s form
    (JAX's for a trace of a class defined outside kiln)."""
    if not trace.jax_protocol:
        return trace.process_custom_vjp_call(fun, fwd, bwd, args, out_trees,
                                             symbolic_zeros=symbolic_zeros)
    return _protocol("custom_vjp_call")(trace, fun, fwd, bwd, args, out_trees,
                                        symbolic_zeros=symbolic_zeros)


def _accepting_jax_form(kind: str, method):
    """``method`` (a kiln trace's ``process_custom_{kind}_call``), also accepting JAX's
    form of the call, which starts with the primitive (from traces of libraries)."""
    def process_custom_call(self, *args, **kwargs):
        if args and isinstance(args[0], Primitive):
            args, kwargs = _protocol("to_kiln_form")(kind, args, kwargs)
        return method(self, *args, **kwargs)
    process_custom_call.__name__ = method.__name__
    process_custom_call.__qualname__ = method.__qualname__
    process_custom_call.__doc__ = method.__doc__
    return process_custom_call


def check_foreign_tracer(trace: Trace, x: Tracer) -> None:
    """Raise UnexpectedTracerError if ``x`` cannot legally appear under ``trace``.

    A tracer that is not ``trace``'s own must belong to a live ancestor of it;
    anything else escaped its transformation.
    """
    t = x._trace
    if not t.alive or not t.is_ancestor_of(trace):
        raise UnexpectedTracerError(x)


class EvalTrace(Trace):
    """The root trace: applies primitives to concrete NumPy values."""

    __slots__ = ()

    def __init__(self):
        self.parent = None
        self.id = next(_trace_ids)
        self.alive = True

    def process_primitive(self, prim, args, params):
        vals = []
        weak = []
        refs = False
        for x in args:
            tx = type(x)
            if tx is Array:
                vals.append(x._value)
                weak.append(x.weak_type)
            elif isinstance(x, Tracer):
                raise UnexpectedTracerError(x)
            elif tx is _Ref:
                vals.append(x)
                weak.append(False)
                refs = True
            else:
                x = to_array(x)
                vals.append(x._value)
                weak.append(x.weak_type)
        if prim.ref_primitive:
            return _ref_eager_rule()(prim, args, params)
        if refs and not prim.ref_operands:
            raise_ref_operand(prim)
        if prim.array_impl:
            return _apply_array_impl_eager(prim, args, params)
        try:
            key = (tuple([(v.shape, v.dtype) for v in vals]), tuple(params.items()))
            ok = key in prim._eager_ok
        except TypeError:   # an unhashable parameter: always check
            key, ok = None, False
        if refs:
            key, ok = None, False
        if not ok:
            out_avals = prim.abstract_eval(
                *[v._aval if type(v) is _Ref else ShapedArray(v.shape, v.dtype, w)
                  for v, w in zip(vals, weak)], **params)
            if not refs and _extended.involves_extended(
                    vals, out_avals if prim.multiple_results else [out_avals]):
                # Extended dtypes (never memoized): impls see the physical data.
                return self._process_extended(prim, vals, weak, params, out_avals)
            # Call-like primitives carry jaxprs in their params: don't keep those alive.
            if key is not None and not prim.multiple_results and len(prim._eager_ok) < 4096:
                prim._eager_ok.add(key)
        # NumPy's floating-point warnings off for the impl (and the loop bodies, branches
        # and programs it runs): JAX computes inf/nan silently. See kiln/_fp_warnings.py.
        tok = _fp_enter(_FP_IGNORE)
        try:
            out = prim.impl(*vals, **params)
        finally:
            _fp_leave(tok)
        if _debug_checks[0]:
            _check_finite(prim, out)
        rule = prim.weak_type_rule
        if prim.multiple_results:
            ws = rule(*weak, **params) if rule else [False] * len(out)
            outs = [make_array(o, w) for o, w in zip(out, ws)]
            if prim.eager_layout is not None:
                prim.eager_layout(outs, args, params)
            return outs
        w = rule(*weak, **params) if rule else False
        out = make_array(out, w)
        if prim.eager_layout is not None:
            prim.eager_layout([out], args, params)
        return out

    def _process_extended(self, prim, vals, weak, params, out_avals):
        """An eager application with arrays of extended dtypes: the impl runs on their
        physical data, and outputs of extended abstract dtype are wrapped again."""
        if _physical_param is None:
            raise RuntimeError("no rewrite of jaxpr parameters to physical dtypes is "
                               "installed: import kiln (kiln.core.physical installs it)")
        phys_params = {k: _physical_param(v) for k, v in params.items()}
        out = prim.impl(*[_extended.physical(v) for v in vals], **phys_params)
        rule = prim.weak_type_rule
        if prim.multiple_results:
            ws = rule(*weak, **params) if rule else [False] * len(out)
            return [make_array(_extended.wrap(o, a), w)
                    for o, a, w in zip(out, out_avals, ws)]
        w = rule(*weak, **params) if rule else False
        return make_array(_extended.wrap(out, out_avals), w)

    def process_custom_jvp_call(self, fun, jvp, args, *, symbolic_zeros=False):
        with set_current_trace(self):
            return fun(*args)

    def process_custom_vjp_call(self, fun, fwd, bwd, args, out_trees, *, symbolic_zeros=False):
        with set_current_trace(self):
            return fun(*args)


def raise_ref_operand(prim):
    raise TypeError(f"{prim.name} got a mutable array reference (Ref) as an operand: only "
                    "reads (ref[...]) and writes (ref[...] = x) use references; read the "
                    "value with ref[...] first")


# The eager application of reference primitives (``kiln.state.primitives._eager``, which
# installs it: the state API sits above the core).
_ref_eager = None


def set_ref_eager_rule(rule) -> None:
    """Install ``rule(prim, args, params)``: eager application of reference primitives."""
    global _ref_eager
    _ref_eager = rule


def _ref_eager_rule():
    if _ref_eager is None:
        raise RuntimeError("no eager rule of reference primitives is installed: import kiln "
                           "(kiln.state.primitives installs it)")
    return _ref_eager


def _missing_impl(prim):
    return NotImplementedError(f"Evaluation rule for '{prim.name}' not implemented")


def _apply_array_impl_eager(prim, args, params):
    """Eager application of a primitive defined through JAX's API: its ``impl`` gets the
    kiln Arrays themselves (JAX passes its arrays; libraries call ``x.at[i].set`` on them)
    and runs as ordinary kiln code under the eval trace."""
    if prim.impl is None:
        raise _missing_impl(prim)
    arrays = [x if type(x) is Array else to_array(x) for x in args]
    with set_current_trace(eval_trace):
        out = prim.impl(*arrays, **params)
    if prim.multiple_results:
        return [_as_array(o) for o in out]
    return _as_array(out)


def _as_array(x):
    if type(x) is Array or isinstance(x, Tracer):
        return x
    return to_array(x)


def apply_impl(prim, vals, params):
    """Run ``prim``'s implementation on NumPy values and return NumPy values (one, or a
    list for ``multiple_results``): what the reference backend, host islands and loop
    interpreters call. A primitive defined through JAX's API gets kiln Arrays (weak-typed
    for rank-0 Python scalars), and its results are converted back."""
    if not prim.array_impl:
        return prim.impl(*vals, **params)
    if prim.impl is None:
        raise NotImplementedError(
            f"MLIR translation rule for primitive '{prim.name}' not found for platform cpu "
            f"(kiln: '{prim.name}' has neither an impl nor a lowering given by "
            "mlir.lower_fun)")
    arrays = [x if type(x) is Array else make_array(np.asarray(x), False) for x in vals]
    with set_current_trace(eval_trace):
        out = prim.impl(*arrays, **params)
    if prim.multiple_results:
        return [_numpy_value(o) for o in out]
    return _numpy_value(out)


def _numpy_value(x):
    if type(x) is Array:
        return x._value
    if isinstance(x, Tracer):
        raise UnexpectedTracerError(x)
    return to_array(x)._value


# Set by kiln/__init__ when jax_debug_nans / jax_debug_infs change.
_debug_checks = [False]


def _check_finite(prim, out):
    """``jax_debug_nans``/``jax_debug_infs`` on an eager primitive's output: JAX's
    ``FloatingPointError`` (``invalid value (nan) encountered in log``), with a note
    naming the user's line."""
    from kiln.config import config
    for o in (out if prim.multiple_results else [out]):
        v = np.asarray(o)
        if v.dtype.kind not in "fc":
            continue
        if config.jax_debug_nans and np.isnan(v).any():
            kind = "nan"
        elif config.jax_debug_infs and np.isinf(v).any():
            kind = "inf"
        else:
            continue
        from kiln.core.source_info import current
        err = FloatingPointError(f"invalid value ({kind}) encountered in {prim.name}")
        where = current()
        if where is not None:
            err.add_note(f"The {kind} was produced by `{prim.name}` at {where}.")
        raise err


eval_trace = EvalTrace()
_state.trace = eval_trace


class _NoRef:
    """Stands for ``kiln.core.ref.Ref`` until that module sets ``_Ref``."""


_Ref = _NoRef


class aval_property(tuple):
    """``aval_property(fget)``: a property of an abstract value that a tracer of that type
    exposes, ``fget`` receiving the tracer (JAX's ``core.aval_property``)."""

    __slots__ = ()

    def __new__(cls, fget):
        return tuple.__new__(cls, (fget,))

    fget = property(lambda self: self[0])


class aval_method(tuple):
    """``aval_method(fun)``: a method of an abstract value that a tracer of that type exposes,
    ``fun`` receiving the tracer as ``self`` (JAX's ``core.aval_method``)."""

    __slots__ = ()

    def __new__(cls, fun):
        return tuple.__new__(cls, (fun,))

    fun = property(lambda self: self[0])


# Names a tracer never forwards to its abstract value (its own payload slots).
_NO_FORWARD = frozenset({"aval", "_aval", "_jax_aval", "_trace", "_var", "primal", "tangent",
                         "val", "bdim"})


class Tracer:
    """A stand-in for an array inside a transformation. Subclasses add payload."""

    __slots__ = ("_trace", "_jax_aval", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, trace: Trace, aval=None):
        # JAX's constructor, for tracers that libraries define (``Tracer(trace, aval)``);
        # kiln's own tracer classes set their slots themselves.
        self._trace = trace
        if aval is not None:
            self._jax_aval = aval

    @property
    def aval(self) -> ShapedArray:
        try:
            return self._jax_aval
        except AttributeError:
            raise NotImplementedError(
                f"{type(self).__name__} has no abstract value: a Tracer subclass must "
                "define `aval` or pass it to Tracer.__init__(trace, aval)") from None

    @aval.setter
    def aval(self, value):
        self._jax_aval = value

    def __getattr__(self, name):
        # Only reached when normal lookup fails: the abstract value's ``aval_property`` /
        # ``aval_method`` attributes are the tracer's (libraries' abstract types use them).
        if name in _NO_FORWARD or name.startswith("__"):
            raise AttributeError(name)
        try:
            attr = getattr(self.aval, name)
        except (AttributeError, NotImplementedError):
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name}") from None
        if type(attr) is aval_property:
            return attr.fget(self)
        if type(attr) is aval_method:
            return attr.fun.__get__(self)
        raise AttributeError(f"{type(self).__name__} has no attribute {name}")

    @property
    def mat(self):
        """The manual axis types of the value inside ``shard_map`` (JAX's ``x.mat``,
        ``aval.mat``)."""
        return self.aval.mat

    @property
    def shape(self):
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype

    @property
    def ndim(self):
        return len(self.aval.shape)

    @property
    def size(self):
        return self.aval.size

    @property
    def itemsize(self):
        return self.aval.dtype.itemsize

    @property
    def nbytes(self):
        return self.aval.size * self.aval.dtype.itemsize

    @property
    def weak_type(self):
        return self.aval.weak_type

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def to_concrete_value(self):
        """The value this tracer stands for when it is known while tracing (a JVP tracer of
        a concrete primal, under grad/jvp/jacfwd), else None. As in JAX, such values may be
        used as Python values: control flow, shapes, ``int(x)``."""
        return None

    def __bool__(self):
        v = concretize(self)
        if isinstance(v, Tracer):
            raise TracerBoolConversionError(self)
        return bool(v)

    def __int__(self):
        v = concretize(self)
        if not isinstance(v, Tracer):
            return int(v)
        raise ConcretizationTypeError(self, "The problem arose with the `int` function.")

    def __float__(self):
        raise ConcretizationTypeError(self, "The problem arose with the `float` function.")

    def __complex__(self):
        raise ConcretizationTypeError(self, "The problem arose with the `complex` function.")

    def __index__(self):
        v = concretize(self)
        if not isinstance(v, Tracer):
            return v.__index__()
        raise TracerIntegerConversionError(self)

    def __array__(self, dtype=None, copy=None):
        raise TracerArrayConversionError(self)

    # ``copy.copy``/``deepcopy`` of a traced value is the value (it is immutable), as JAX's
    # tracers forward them to an array copy; pickling one is refused (``__reduce__``).
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise ConcretizationTypeError(
            self, "The error occurred in the __reduce__ method, which may indicate an "
            "attempt to serialize/pickle a traced value.")

    def __hash__(self):
        raise TypeError(f"unhashable type: {type(self).__name__} (traced arrays are unhashable; "
                        "to use an array as a static argument, convert it to a tuple)")

    def item(self, *args):
        v = concretize(self)
        if not isinstance(v, Tracer):
            return v.item(*args)
        raise ConcretizationTypeError(self, "The problem arose with the `item` method.")

    def tolist(self):
        raise ConcretizationTypeError(self, "The problem arose with the `tolist` method.")

    # -- printing, as JAX 0.10: ``JitTracer(float32[3])``, ``VmapTracer(aval=..., batched=...)``,
    # ``JVPTracer(primal=..., tangent=...)``, ``GradTracer(primal=..., typeof(tangent)=...)``.
    # Each tracer class gives its text in ``_short_repr``; ``_jax_type_name`` is the name of
    # JAX's class for the same kind of tracer (it appears in ``__format__``'s error).
    def _short_repr(self) -> str:
        return f"{self._jax_type_name()}<{aval_str(self.aval)}>"

    def _jax_type_name(self) -> str:
        return type(self).__name__

    def __repr__(self):
        return self._short_repr()

    def __str__(self):
        return self._short_repr()

    def __format__(self, spec):
        if spec:
            raise TypeError(f"unsupported format string passed to "
                            f"{self._jax_type_name()}.__format__")
        return self._short_repr()


def aval_str(aval) -> str:
    """``str`` of an abstract value as JAX prints it: ``float32[3]``, ``~float32[]`` (weak)."""
    text = aval.str_short(False)
    return "~" + text if getattr(aval, "weak_type", False) else text


def short_repr(x) -> str:
    """A tracer's short text, or ``str`` of a concrete value (JAX's nested tracer reprs)."""
    return x._short_repr() if isinstance(x, Tracer) else str(x)


# ----------------------------------------------------------------------------------------------
# Concrete values: kiln.Array is defined in kiln.array; it registers itself here.
Array = None  # set by kiln.array
make_array = None
to_array = None


def get_aval(x) -> ShapedArray:
    """The abstract value of any array-like (Array, Tracer, NumPy array or Python scalar)."""
    if isinstance(x, Tracer):
        return x.aval
    if type(x) is Array:
        v = x._value
        return ShapedArray(v.shape, v.dtype, x.weak_type)
    mapping = pytype_aval_mappings.get(type(x))
    if mapping is not None and type(x) not in _BUILTIN_ARRAY_TYPES:
        return mapping(x)
    a = to_array(x)
    return ShapedArray(a._value.shape, a._value.dtype, a.weak_type)


def _aval_of_array_like(x) -> ShapedArray:
    a = to_array(x)
    return ShapedArray(a._value.shape, a._value.dtype, a.weak_type)


_BUILTIN_ARRAY_TYPES = frozenset({np.ndarray, bool, int, float, complex})


def masked_array_error(*_args, **_kwargs):
    """JAX's ValueError for a NumPy masked array given where an array is expected (its
    mask would be silently dropped)."""
    raise ValueError("numpy masked arrays are not supported as direct inputs to JAX "
                     "functions. Use arr.filled() to convert the value to a standard numpy "
                     "array.")

#: ``jax.core.pytype_aval_mappings``: the abstract value of a value of each Python type.
#: kiln's arrays, NumPy arrays and scalars are built in; libraries register their own
#: array-like types (usually with the ``np.ndarray`` entry), which kiln then accepts.
pytype_aval_mappings: dict = {
    np.ndarray: _aval_of_array_like, bool: _aval_of_array_like, int: _aval_of_array_like,
    float: _aval_of_array_like, complex: _aval_of_array_like,
    np.ma.MaskedArray: masked_array_error,
}


def is_concrete(x) -> bool:
    return not isinstance(x, Tracer)


def concretize(x):
    """``x`` itself, or for a tracer whose value is known while tracing (see
    ``Tracer.to_concrete_value``) that value; a tracer without one is returned unchanged."""
    while isinstance(x, Tracer):
        v = x.to_concrete_value()
        if v is None:
            return x
        x = v
    return x


def concrete_value(x):
    """The NumPy value of ``x``, or ConcretizationTypeError for tracers."""
    x = concretize(x)
    if isinstance(x, Tracer):
        raise ConcretizationTypeError(x)
    if type(x) is Array:
        return x._value
    return np.asarray(x)
