"""Building jaxprs: the staging trace and its partial-evaluation variant.

``JaxprTrace`` records every primitive applied to its tracers as an equation.
Values that are not its own tracers (concrete arrays, or tracers of an enclosing
trace) become constvars; scalars become literals.

With ``forward_known=True`` the same trace is an online partial evaluator:
a primitive none of whose inputs are this trace's tracers ("known") is bound
under the parent trace right away; only "unknown" work is staged. This is how
``linearize`` splits a JVP into the primal computation (run now) and the linear
tangent map (a jaxpr), and how jaxprs with sub-jaxprs are split.
"""
from __future__ import annotations

import weakref

from kiln.core import jaxpr as _jaxpr_module
from kiln.core import leaks
from kiln.core import physical as _physical  # noqa: F401  (installs EvalTrace's rewrite)
from kiln.core import trace as core
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var, sub_jaxprs
from kiln.core.ref import AbstractRef, Ref
from kiln.core.source_info import current as _source_info
from kiln.core.source_info import current_name_stack as _current_name_stack
from kiln.core.trace import Trace, Tracer, check_foreign_tracer, get_aval, set_current_trace
from kiln.interpreters import custom_rules

# partial_eval_rules[prim](trace, args, params) -> outputs; used when some inputs are known.
partial_eval_rules: dict = {}
# Effectful primitives (debug callbacks, io callbacks): never removed by dead-code
# elimination. With all-known inputs, partial evaluation still runs them right away.
always_stage: set = set()


#: Types whose values a traced function may return or close over as constants of their
#: abstract value only (they hold no data): ``kiln.shape_eval`` registers
#: ``ShapeDtypeStruct`` (JAX maps it to its aval), so ``eval_shape(lambda: struct)`` gives it
#: back.
aval_only_const_types: set = set()


# Set by ``kiln.parallel.shard_map`` while it traces an eager body: ``rule(eqn)`` gives
# the new equation's output variables abstract values carrying their varying manual axes
# (``aval.mat``, inferred as ``kiln.parallel.vma`` does).
vma_rule: list = [None]
# Set with it when the body's types are checked (``check_vma``): ``hook(trace, prim,
# args)`` gives the operands to stage, an elementwise operation's less varying ones
# ``pvary``-ed first (JAX's implicit pcast).
vma_args: list = [None]
# Installed by ``kiln.parallel.type_rules``: ``rule(eqn)`` gives the new equation's outputs
# the shardings of their types (JAX's sharding rules) when an operand's type has one.
type_rule: list = [None]


class JaxprTracer(Tracer):
    # ``_var``, not ``var``: a slot named ``var`` would hide the ``x.var()`` array method.
    __slots__ = ("_aval", "_var")

    def __init__(self, trace, aval, var):
        self._trace = trace
        self._aval = aval
        self._var = var

    @property
    def aval(self):
        return self._aval

    def _short_repr(self):
        return f"JitTracer({core.aval_str(self._aval)})"

    def _jax_type_name(self):
        return "DynamicJaxprTracer"


class JaxprTrace(Trace):
    """Stages primitive applications into a jaxpr."""

    __slots__ = ("eqns", "invars", "const_vars", "const_vals", "forward_known", "_lit_ok",
                 "ref_mirrors", "hi_state", "name_base")

    def __init__(self, parent=None, forward_known: bool = False):
        super().__init__(parent)
        # Equations record the name stack relative to the one current here (JAX's).
        self.name_base = _current_name_stack()
        self.eqns = []
        self.invars = []
        self.const_vars = {}   # id(value) -> Var
        self.const_vals = []   # (value, var) in order of first use
        self.forward_known = forward_known
        # Partial evaluation of mutable references (kiln.state.partial_eval): the staged
        # copy of a known reference that unknown work used.
        self.ref_mirrors = None
        # Hijax values met while tracing (kiln._hijax): created here, or captured.
        self.hi_state = None

    # -- inputs -----------------------------------------------------------------------------
    def new_arg(self, aval) -> JaxprTracer:
        v = Var(aval)
        self.invars.append(v)
        return JaxprTracer(self, aval, v)

    def is_own(self, x) -> bool:
        return isinstance(x, JaxprTracer) and x._trace is self

    def to_atom(self, x):
        """The Var or Literal standing for ``x`` in this trace's jaxpr."""
        if isinstance(x, JaxprTracer) and x._trace is self:
            return x._var
        if isinstance(x, Tracer):
            check_foreign_tracer(self, x)
            return self._const_var(x)
        if type(x) is Ref:
            return self._const_var(x)
        if type(x) in aval_only_const_types:   # a const of its aval, as JAX (no value)
            return self._const_var(x)
        if type(x) is not core.Array:
            x = core.to_array(x)
        if x._value.ndim == 0 and x._value.dtype.kind in "biufc":
            return Literal(x, ShapedArray((), x._value.dtype, x.weak_type))
        return self._const_var(x)

    def _const_var(self, x):
        v = self.const_vars.get(id(x))
        if v is None:
            v = Var(get_aval(x))
            self.const_vars[id(x)] = v
            self.const_vals.append((x, v))
        return v

    # -- primitives ---------------------------------------------------------------------------
    def process_primitive(self, prim, args, params):
        if core._state.eager_folding and not any(isinstance(x, Tracer) for x in args):
            return core.eval_trace.process_primitive(prim, args, params)
        if self.forward_known:
            if prim.ref_primitive:
                return partial_eval_rules[prim](self, args, params)
            own = [self.is_own(x) for x in args]
            if not any(own):
                with set_current_trace(self.parent):
                    return prim.bind(*args, **params)
            rule = partial_eval_rules.get(prim)
            if rule is not None:
                return rule(self, args, params)
        return self.stage(prim, args, params)

    def _name_stack(self):
        ns, base = _current_name_stack(), self.name_base
        if base.stack and ns.stack[:len(base.stack)] == base.stack:
            return ns[len(base.stack):]
        return ns

    def stage(self, prim, args, params, out_avals=None):
        if vma_args[0] is not None and out_avals is None:
            args = vma_args[0](self, prim, args)
        invars = [self.to_atom(x) for x in args]
        if out_avals is None:
            in_avals = [v.aval for v in invars]
            if not prim.ref_operands:
                for a in in_avals:
                    if type(a) is AbstractRef:
                        core.raise_ref_operand(prim)
            out = prim.abstract_eval(*in_avals, **params)
            out_avals = out if prim.multiple_results else [out]
        outvars = [Var(a) for a in out_avals]
        eqn = JaxprEqn(prim, invars, outvars, params,
                       _source_info(name_stack=self._name_stack()))
        if vma_rule[0] is not None:     # tracing an eager shard_map's body: aval.mat
            vma_rule[0](eqn)
        if type_rule[0] is not None and any(getattr(getattr(v, "aval", None), "_tsh", None)
                                            is not None for v in invars):
            type_rule[0](eqn)
        self.eqns.append(eqn)
        tracers = [JaxprTracer(self, v.aval, v) for v in outvars]
        return tracers if prim.multiple_results else tracers[0]

    def process_custom_jvp_call(self, fun, jvp, args, *, symbolic_zeros=False):
        if core._state.eager_folding and not any(isinstance(x, Tracer) for x in args):
            return core.eval_trace.process_custom_jvp_call(fun, jvp, args,
                                                           symbolic_zeros=symbolic_zeros)
        if self.forward_known and not any(self.is_own(x) for x in args):
            return core.custom_jvp_call(self.parent, fun, jvp, args,
                                        symbolic_zeros=symbolic_zeros)
        return custom_rules.rule("stage_custom_jvp")(self, fun, jvp, args, symbolic_zeros)

    def process_custom_vjp_call(self, fun, fwd, bwd, args, out_trees, *, symbolic_zeros=False):
        if core._state.eager_folding and not any(isinstance(x, Tracer) for x in args):
            return core.eval_trace.process_custom_vjp_call(fun, fwd, bwd, args, out_trees,
                                                           symbolic_zeros=symbolic_zeros)
        if self.forward_known and not any(self.is_own(x) for x in args):
            return core.custom_vjp_call(self.parent, fun, fwd, bwd, args, out_trees,
                                        symbolic_zeros=symbolic_zeros)
        return custom_rules.rule("stage_custom_vjp")(self, fun, fwd, bwd, args, out_trees,
                                                     symbolic_zeros)

    # -- output -------------------------------------------------------------------------------
    def to_jaxpr(self, outs, *, dce: bool = True):
        """Finish: returns ``(jaxpr, consts)``; ``consts`` are the values (concrete arrays or
        tracers of enclosing traces) that the jaxpr's constvars stand for."""
        outvars = [self.to_atom(x) for x in outs]
        outvars = [_literal_to_var(self, v) if isinstance(v, Literal) else v for v in outvars]
        constvars = [v for _, v in self.const_vals]
        consts = [x for x, _ in self.const_vals]
        jaxpr = Jaxpr(constvars, self.invars, outvars, self.eqns, _named_effects(self.eqns))
        if dce:
            jaxpr, used_consts = dce_jaxpr_consts(jaxpr)
            consts = [c for c, u in zip(consts, used_consts) if u]
        self.alive = False
        return jaxpr, consts


def _named_effects(eqns) -> frozenset:
    """The jaxpr's ``effects`` as JAX lists them: what primitives with a
    ``named_effects(params, in_avals)`` rule declare (checkify's ``ErrorEffect`` of a
    ``check``), and those of sub-jaxprs. Ordering and the dead-code rules use
    :func:`has_effects` instead."""
    out = set()
    for eqn in eqns:
        rule = getattr(eqn.primitive, "named_effects", None)
        if rule is not None:
            out |= set(rule(eqn.params, [v.aval for v in eqn.invars]))
        for sub in sub_jaxprs(eqn.params):
            out |= set(sub.effects)
    return frozenset(out)


def _literal_to_var(trace, lit):
    return trace._const_var(lit.val)


def has_effects(eqn) -> bool:
    """Whether ``eqn`` is effectful: its primitive is, or a sub-jaxpr contains such an eqn."""
    if eqn.primitive in always_stage:
        return True
    for p in eqn.params.values():
        for j in (p if isinstance(p, (tuple, list)) else (p,)):
            inner = getattr(j, "jaxpr", j)
            if isinstance(inner, Jaxpr) and _jaxpr_has_effects(inner):
                return True
    return False


_jaxpr_module.set_effects_rule(has_effects)


def _jaxpr_has_effects(jaxpr: Jaxpr) -> bool:
    cached = _effects_cache.get(id(jaxpr))
    if cached is not None and cached[0] is jaxpr:
        return cached[1]
    result = any(has_effects(e) for e in jaxpr.eqns)
    _effects_cache[id(jaxpr)] = (jaxpr, result)
    if len(_effects_cache) > 10000:
        _effects_cache.clear()
    return result


_effects_cache: dict = {}


def dce_jaxpr_consts(jaxpr: Jaxpr):
    """Drop equations whose outputs are unused (and effect-free) and unused constvars."""
    live = {v for v in jaxpr.outvars if isinstance(v, Var)}
    new_eqns = []
    for eqn in reversed(jaxpr.eqns):
        if any(v in live for v in eqn.outvars) or has_effects(eqn):
            new_eqns.append(eqn)
            for v in eqn.invars:
                if isinstance(v, Var):
                    live.add(v)
    new_eqns.reverse()
    used = [v in live for v in jaxpr.constvars]
    constvars = [v for v, u in zip(jaxpr.constvars, used) if u]
    return Jaxpr(constvars, jaxpr.invars, jaxpr.outvars, new_eqns, jaxpr.effects,
                 jaxpr.debug_info), used


def trace_to_jaxpr(fun, in_avals, *, parent=None):
    """Trace ``fun`` (flat args -> flat list of outputs) on abstract inputs.

    Returns ``(jaxpr, consts)``. ``consts`` may include tracers of enclosing traces
    (closed-over values); callers that bind a call primitive pass them as arguments.
    """
    trace = JaxprTrace(parent)
    args = [trace.new_arg(a) for a in in_avals]
    try:
        with set_current_trace(trace):
            outs = fun(*args)
        if trace.hi_state is not None:     # hijax values met (``kiln._hijax``'s state)
            trace.hi_state.finish()
        result = trace.to_jaxpr(outs)
    finally:
        trace.alive = False
    if leaks.enabled():
        ref = weakref.ref(trace)
        del trace, args, outs
        leaks.check_leaks(ref)
    return result


def closed_call_jaxpr(fun, in_avals):
    """Trace ``fun`` to a jaxpr whose consts are turned into leading invars.

    Returns ``(jaxpr_with_consts_as_invars, consts)``: bind it with ``*consts, *args``.
    """
    jaxpr, consts = trace_to_jaxpr(fun, in_avals)
    return convert_constvars_jaxpr(jaxpr), consts


def convert_constvars_jaxpr(jaxpr: Jaxpr) -> Jaxpr:
    return Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns, jaxpr.effects,
                 jaxpr.debug_info)


def close_jaxpr(jaxpr: Jaxpr, consts=()) -> ClosedJaxpr:
    return ClosedJaxpr(jaxpr, consts)


def split_concrete_consts(jaxpr: Jaxpr, consts):
    """Keep concrete consts closed over; turn tracer consts and mutable references into
    leading invars (a reference is an operand of every call that uses it, never a constant
    of a closed jaxpr, as in JAX).

    Returns ``(closed_jaxpr, tracer_consts)``: bind with ``*tracer_consts, *args``.
    """
    closed_vars, closed_vals, open_vars, open_vals = [], [], [], []
    for v, c in zip(jaxpr.constvars, consts):
        if isinstance(c, Tracer) or type(c) is Ref:
            open_vars.append(v)
            open_vals.append(c)
        else:
            closed_vars.append(v)
            closed_vals.append(c)
    new = Jaxpr(closed_vars, open_vars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns, jaxpr.effects,
                jaxpr.debug_info)
    return ClosedJaxpr(new, closed_vals), open_vals
