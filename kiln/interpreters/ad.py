"""Automatic differentiation: JVP, linearize (JVP + partial evaluation) and transpose.

Every differentiable primitive has one JVP rule (``jvp_rules``); reverse mode is
``linearize`` followed by ``backward_pass`` over the linear jaxpr, which uses the
transpose rules (``transpose_rules``) of the linear primitives. Tangents that are
known to be zero are represented symbolically by ``Zero`` and cost nothing.
"""
from __future__ import annotations

import numpy as np

from kiln import _extended, dtypes
from kiln.core import source_info as _si
from kiln.core import trace as core
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import Jaxpr, Literal, Var, sub_jaxprs
from kiln.core.ref import AbstractRef, empty_ref_p, new_ref_p
from kiln.core.source_info import _override as _source_override
from kiln.core.trace import Primitive, Trace, Tracer, check_foreign_tracer, get_aval
from kiln.core.trace import set_current_trace as _set_trace
from kiln.interpreters import custom_rules, lax_ops
from kiln.interpreters.staging import JaxprTrace

jvp_rules: dict = {}
transpose_rules: dict = {}
#: ``prim -> predicate(eqn)``: primitives whose transpose must run even when every output
#: cotangent is zero (``backward_pass`` skips other such equations, whose transposes would
#: only produce zeros). ``custom_lin`` calls a user's ``bwd`` rule, which JAX calls with
#: zeros (the rule may have effects, or return nonzero cotangents, as Flax's fp8 state
#: does); ``scan``'s transpose instantiates zero cotangents and so calls such rules in its
#: body. See ``needs_zero_cotangent_transpose``.
zero_cotangent_transposes: dict = {}


# ----------------------------------------------------------------------------------------------
# Symbolic zeros and tangent types.

class Zero:
    """A symbolic zero tangent/cotangent of abstract value ``aval``."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return f"Zero({self.aval.str_short()})"

    @staticmethod
    def from_primal_value(x):
        return Zero(tangent_aval(get_aval(x)))


class UndefinedPrimal:
    """Marks a linear input of an equation being transposed."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return f"UndefinedPrimal({self.aval.str_short()})"


def is_undefined_primal(x) -> bool:
    return type(x) is UndefinedPrimal


def is_differentiable_dtype(dtype) -> bool:
    return np.dtype(dtype).kind in "fc" or dtype == dtypes.bfloat16 or \
        np.issubdtype(dtype, np.inexact) or dtypes.issubdtype(dtype, np.inexact)


def tangent_dtype(dtype):
    """The tangent dtype of a primal dtype: itself for inexact dtypes, ``float0`` for
    others; an extended dtype's ``_rules.tangent_dtype`` decides its own (``float0`` when
    it has none, as PRNG keys)."""
    if isinstance(dtype, dtypes.ExtendedDType):
        rules = getattr(dtype, "_rules", None)
        if rules is not None and hasattr(rules, "tangent_dtype"):
            return rules.tangent_dtype(dtype)
        return dtypes.float0
    return dtype if is_differentiable_dtype(dtype) else dtypes.float0


def tangent_aval(aval: ShapedArray) -> ShapedArray:
    if type(aval) is AbstractRef:
        return AbstractRef(tangent_aval(aval.inner_aval), aval.memory_space, aval.kind)
    dt = aval.dtype
    if isinstance(dt, dtypes.ExtendedDType):
        td = tangent_dtype(dt)
        return aval if td == dt else ShapedArray(aval.shape, td, False)
    if is_differentiable_dtype(dt):
        return aval
    return ShapedArray(aval.shape, dtypes.float0, False)


def zeros_like_aval(aval) -> object:
    """A concrete array of zeros (a constant to every trace); for a reference type, a new
    reference holding zeros (as JAX's ``zeros_like_abstract_ref``)."""
    if type(aval) is AbstractRef:
        return new_ref_p.bind(zeros_like_aval(aval.inner_aval), memory_space=None,
                              kind=aval.kind)
    if _extended.has_rules(aval.dtype):
        return _extended_zeros(aval)
    return core.make_array(np.zeros(aval.shape, aval.dtype), aval.weak_type)


def _extended_zeros(aval):
    dt = aval.dtype
    with _set_trace(core.eval_trace):
        z = dt._rules.zero(dt)
        return lax_ops.broadcast_in_dim(z, aval.shape, ())


def instantiate_zeros(t):
    return zeros_like_aval(t.aval) if type(t) is Zero else t


def add_tangents(a, b):
    if type(a) is Zero:
        return b
    if type(b) is Zero:
        return a
    return add_any_p.bind(a, b)


class _AddAny(Primitive):
    """``add_any``: tangent/cotangent accumulation (no promotion or broadcasting). Values
    of an extended dtype with rules accumulate with their dtype's ``_rules.add`` (Flax's
    fp8 meta dtype takes the maximum), as JAX's ``add_jaxvals``."""

    def bind(self, *args, **params):
        dt = getattr(args[0], "dtype", None)
        if dt is not None and not isinstance(dt, np.dtype) and _extended.has_rules(dt):
            return dt._rules.add(dt, *args)
        return core._state.trace.process_primitive(self, args, params)


add_any_p = _AddAny("add_any")
add_any_p.def_impl(lambda x, y: x + y)
add_any_p.def_abstract_eval(lambda x, y: x)
add_any_p.weak_type_rule = lambda wx, wy: wx and wy
jvp_rules[add_any_p] = lambda primals, tangents: (
    add_any_p.bind(*primals), add_tangents(*tangents))
transpose_rules[add_any_p] = lambda ct, x, y: [ct, ct]


def _add_any_batch(axis_data, vals, dims):
    from kiln.interpreters.batching import bdim_at_front
    (x, y), (dx, dy) = vals, dims
    if dx == dy:
        return add_any_p.bind(x, y), dx
    size = axis_data.size
    return add_any_p.bind(bdim_at_front(x, dx, size), bdim_at_front(y, dy, size)), 0


def _register_add_any_batching():
    from kiln.interpreters import batching
    batching.batch_rules[add_any_p] = _add_any_batch


_register_add_any_batching()


# ----------------------------------------------------------------------------------------------
# The JVP interpreter.

# Reference allocations go through their JVP rule even with zero tangents (as in JAX): the
# new reference gets a tangent reference, so differentiated values may be written to it.
_allocating = frozenset({new_ref_p, empty_ref_p})
# ``prim -> apply(prim, args, params)``: primitives (control flow) that, given reference
# operands, are differentiated by applying their discharged form under the JVP trace
# (installed by ``kiln.state.discharge``); ``apply`` returns the primitive's outputs.
ref_discharging: dict = {}

class JVPTracer(Tracer):
    __slots__ = ("primal", "tangent")

    def __init__(self, trace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent

    @property
    def aval(self):
        return get_aval(self.primal)

    def to_concrete_value(self):
        return self.primal

    def _in_linearize(self):
        """True under ``grad``/``vjp``/``linearize`` (JAX's GradTracer), not ``jvp``."""
        parent = self._trace.parent
        return type(parent) is JaxprTrace and parent.forward_known

    def _short_repr(self):
        primal = core.short_repr(self.primal)
        if self._in_linearize():
            return (f"GradTracer(primal={primal}, "
                    f"typeof(tangent)={get_aval(self.tangent).str_short(True)})")
        return f"JVPTracer(primal={primal}, tangent={core.short_repr(self.tangent)})"

    def _jax_type_name(self):
        return "LinearizeTracer" if self._in_linearize() else "JVPTracer"


class JVPTrace(Trace):
    __slots__ = ()

    def to_primal_tangent(self, x):
        if isinstance(x, JVPTracer) and x._trace is self:
            return x.primal, x.tangent
        if isinstance(x, Tracer):
            check_foreign_tracer(self, x)
        return x, None

    def process_primitive(self, prim, args, params):
        primals, tangents = [], []
        nonzero = False
        for x in args:
            p, t = self.to_primal_tangent(x)
            primals.append(p)
            tangents.append(t)
            if t is not None and type(t) is not Zero:
                nonzero = True
        parent = self.parent
        if (nonzero and prim.ref_operands and prim in ref_discharging
                and any(type(get_aval(p)) is AbstractRef for p in primals)):
            # Control flow with references: differentiated as its discharged form (the
            # references' values threaded through as carries / extra outputs).
            return ref_discharging[prim](prim, args, params)
        if not nonzero and prim not in _allocating:
            with _set_trace(parent):
                return prim.bind(*primals, **params)
        tangents = [Zero.from_primal_value(p) if t is None else t
                    for p, t in zip(primals, tangents)]
        rule = jvp_rules.get(prim)
        if rule is None:
            raise NotImplementedError(
                f"Differentiation rule for '{prim.name}' not implemented")
        if prim.array_impl:     # a library's rule: JAX passes tuples
            primals, tangents = tuple(primals), tuple(tangents)
        with _set_trace(parent):
            p_out, t_out = rule(primals, tangents, **params)
        if prim.multiple_results:
            return [self.wrap(p, t) for p, t in zip(p_out, t_out)]
        return self.wrap(p_out, t_out)

    def wrap(self, p, t):
        if type(t) is Zero:
            return p
        return JVPTracer(self, p, t)

    def process_custom_jvp_call(self, fun, jvp, args, *, symbolic_zeros=False):
        primals, tangents = zip(*(self.to_primal_tangent(x) for x in args)) if args else ((), ())
        if all(t is None or type(t) is Zero for t in tangents):
            return core.custom_jvp_call(self.parent, fun, jvp, list(primals),
                                        symbolic_zeros=symbolic_zeros)
        tangents = [Zero.from_primal_value(p) if t is None else t
                    for p, t in zip(primals, tangents)]
        if not symbolic_zeros:
            tangents = [instantiate_zeros(t) for t in tangents]
        with _set_trace(self.parent):
            p_out, t_out = jvp(list(primals), tangents)
        return [self.wrap(p, t) for p, t in zip(p_out, t_out)]

    def process_custom_vjp_call(self, fun, fwd, bwd, args, out_trees, *, symbolic_zeros=False):
        primals, tangents = zip(*(self.to_primal_tangent(x) for x in args)) if args else ((), ())
        if all(t is None or type(t) is Zero for t in tangents):
            return core.custom_vjp_call(self.parent, fun, fwd, bwd, list(primals),
                                        out_trees, symbolic_zeros=symbolic_zeros)
        perturbed = [t is not None and type(t) is not Zero for t in tangents]
        tangents = [instantiate_zeros(Zero.from_primal_value(p)) if t is None else
                    instantiate_zeros(t) for p, t in zip(primals, tangents)]
        with _set_trace(self.parent):
            p_out, res = fwd(list(primals), perturbed)
            out_avals = [tangent_aval(get_aval(p)) for p in p_out]
            in_avals = [get_aval(p) for p in primals]
            t_out = custom_rules.rule("bind_custom_lin")(
                res, tangents, bwd=bwd, out_avals=out_avals, in_avals=in_avals,
                symbolic_zeros=symbolic_zeros)
        return [self.wrap(p, t) for p, t in zip(p_out, t_out)]


def _unzip_outputs(trace, outs):
    primals, tangents = [], []
    for o in outs:
        if isinstance(o, JVPTracer) and o._trace is trace:
            primals.append(o.primal)
            tangents.append(o.tangent)
        else:
            if isinstance(o, Tracer):
                check_foreign_tracer(trace, o)
            primals.append(o)
            tangents.append(Zero.from_primal_value(o))
    return primals, tangents


def jvp_flat(fun, primals, tangents, *, instantiate=True):
    """Forward mode on a flat function. ``tangents`` entries may be ``Zero``."""
    trace = JVPTrace()
    ins = [p if type(t) is Zero else JVPTracer(trace, p, t) for p, t in zip(primals, tangents)]
    try:
        with _set_trace(trace), _si.transform_name_stack("jvp"):
            outs = fun(*ins)
        p_out, t_out = _unzip_outputs(trace, outs)
    finally:
        trace.alive = False
    if instantiate:
        t_out = [instantiate_zeros(t) for t in t_out]
    return p_out, t_out


# ----------------------------------------------------------------------------------------------
# Linearize: JVP over an online partial evaluator.

class LinearFunction:
    """The linear map produced by ``linearize``: a jaxpr over tangents plus residuals."""

    def __init__(self, jaxpr: Jaxpr, consts, in_avals, out_avals):
        self.jaxpr = jaxpr
        self.consts = consts
        self.in_avals = in_avals
        self.out_avals = out_avals

    def __call__(self, *tangents):
        from kiln.core.jaxpr import eval_jaxpr
        return eval_jaxpr(self.jaxpr, self.consts, *tangents)

    def transpose(self, cts):
        """Cotangents of the tangent inputs for output cotangents ``cts`` (entries may be Zero).

        A reference input has no cotangent type: if a cotangent reaches one, JAX's
        ValueError (for the last such input, as JAX reports it)."""
        undefined = [UndefinedPrimal(a) for a in self.in_avals]
        out = backward_pass(self.jaxpr, self.consts, undefined, cts)
        for a, ct in zip(reversed(self.in_avals), reversed(out)):
            if type(ct) is CtRef:
                raise ValueError(f"Expected cotangent type {a.str_short(False)} but got "
                                 f"{a.inner_aval.str_short(False)}")
        return [Zero(a) if type(a) is AbstractRef else ct
                for a, ct in zip(self.in_avals, out)]


def scalars_to_arrays(primals):
    """Python-scalar primals as weakly typed 0-d Arrays. ``vjp``/``grad`` give their
    inputs this form on entry, as JAX's ``vjp`` makes them typed scalars (values with a
    dtype); ``jvp`` and ``linearize`` pass Python scalars on unchanged, as JAX does, so a
    custom rule sees what the caller passed."""
    return [core.to_array(p) if type(p) in (int, float, complex, bool) else p
            for p in primals]


def linearize_flat(fun, primals):
    """Returns ``(primals_out, LinearFunction)`` for a flat function."""
    pe = JaxprTrace(forward_known=True)
    jt = JVPTrace(parent=pe)
    in_avals = [tangent_aval(get_aval(p)) for p in primals]
    ins = []
    for p, a in zip(primals, in_avals):
        t = pe.new_arg(a)
        ins.append(JVPTracer(jt, p, t) if a.dtype != dtypes.float0 else p)
    try:
        with _set_trace(jt), _si.transform_name_stack("jvp"):
            outs = fun(*ins)
        p_out, t_out = _unzip_outputs(jt, outs)
    finally:
        jt.alive = False
    for p in p_out:
        if isinstance(p, Tracer) and p._trace is pe:
            # As JAX: an operation with no partial-evaluation rule (``custom_vmap``) left
            # a primal output unknown.
            raise ValueError(
                "Linearization failed to produce known values for all output primals. "
                "This is typically caused by attempting to differentiate a function "
                "uses an operation that does not support reverse-mode autodiff.")
    out_avals = [tangent_aval(get_aval(p)) for p in p_out]
    t_out = [instantiate_zeros(t) for t in t_out]
    jaxpr, consts = pe.to_jaxpr(t_out)
    from kiln.config import config
    if config.jax_enable_checks:
        from kiln.core.jaxpr import check_jaxpr
        check_jaxpr(jaxpr)
    return p_out, LinearFunction(jaxpr, consts, in_avals, out_avals)


# ----------------------------------------------------------------------------------------------
# Transposition.

class CtRef(UndefinedPrimal):
    """The cotangent of a linear mutable reference in a backward pass: a reference
    accumulating cotangents (created, holding zeros, when first needed). Transpose rules of
    reference primitives receive it where the reference was; the reverse pass shares one
    per reference (a call's inner backward pass gets the caller's)."""

    __slots__ = ("_ref",)

    def __init__(self, aval):
        self.aval = aval
        self._ref = None

    @property
    def ref(self):
        """The cotangent reference (allocated on first use)."""
        if self._ref is None:
            self._ref = new_ref_p.bind(zeros_like_aval(tangent_aval(self.aval.inner_aval)),
                                       memory_space=None, kind=None)
        return self._ref

    @property
    def used(self) -> bool:
        return self._ref is not None

    def __repr__(self):
        return f"CtRef({self.aval.str_short()})"


def backward_pass(jaxpr: Jaxpr, consts, args, cts_out):
    """Evaluate the transpose of ``jaxpr`` in its ``UndefinedPrimal`` arguments.

    Non-linear equations (no linear input) are evaluated forward first; linear ones are
    then transposed in reverse order. Returns cotangents for every invar (``Zero`` for
    non-linear inputs or inputs with no cotangent).

    Mutable references: every reference a linear jaxpr allocates, and every reference
    argument given as a ``CtRef``, is linear; its cotangent is a ``CtRef`` (a reference
    accumulating cotangents) that the transpose rules of the reference primitives read and
    write in place. Equations using a linear reference are always transposed.
    """
    primal_env = {}
    linear = set()
    ref_cts = {}        # linear reference var -> CtRef

    def read_primal(v):
        if type(v) is Literal:
            return v.val
        return primal_env[v]

    for v, c in zip(jaxpr.constvars, consts):
        primal_env[v] = c
    for v, a in zip(jaxpr.invars, args):
        if isinstance(a, UndefinedPrimal):
            linear.add(v)
            if type(a) is CtRef:
                ref_cts[v] = a
        else:
            primal_env[v] = a

    lin_eqns = []
    for eqn in jaxpr.eqns:
        if eqn.primitive in _allocating or any(type(v) is Var and v in linear
                                               for v in eqn.invars):
            lin_eqns.append(eqn)
            linear.update(eqn.outvars)
        else:
            si = eqn.source_info
            if si is None or not si.name_stack.stack:
                outs = eqn.primitive.bind(*[read_primal(v) for v in eqn.invars], **eqn.params)
            else:
                with _si.set_name_stack(_si.current_name_stack() + si.name_stack):
                    outs = eqn.primitive.bind(*[read_primal(v) for v in eqn.invars],
                                              **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
            for v, o in zip(eqn.outvars, outs):
                primal_env[v] = o

    ct_env = {}

    def write_ct(v, ct):
        if ct is None or type(ct) is Zero or type(v) is not Var or v not in linear:
            return
        if type(v.aval) is AbstractRef:
            return      # a reference's cotangent is accumulated in place (its CtRef)
        prev = ct_env.get(v)
        ct_env[v] = ct if prev is None else add_any_p.bind(prev, ct)

    def ct_ref(v):
        c = ref_cts.get(v)
        if c is None:
            c = ref_cts[v] = CtRef(v.aval)
        return c

    for v, ct in zip(jaxpr.outvars, cts_out):
        write_ct(v, ct)

    # Equations staged by the transpose rules are named ``transpose(<forward name stack>)``.
    transposed = _si.current_name_stack().transform("transpose")
    for eqn in reversed(lin_eqns):
        uses_ref = any(type(v) is Var and v in linear and type(v.aval) is AbstractRef
                       for v in eqn.invars)
        if eqn.primitive in _allocating:
            c = ref_cts.pop(eqn.outvars[0], None)
            cts_in = eqn.primitive.transpose_ref(c, *[
                UndefinedPrimal(v.aval) if (type(v) is Var and v in linear) else read_primal(v)
                for v in eqn.invars], **eqn.params)
            for v, ct in zip(eqn.invars, cts_in):
                write_ct(v, ct)
            continue
        cts = [None if type(v.aval) is AbstractRef else ct_env.pop(v, None)
               for v in eqn.outvars]
        if all(c is None for c in cts) and not uses_ref:
            must = zero_cotangent_transposes.get(eqn.primitive)
            if must is None or not must(eqn):
                continue
        cts = [Zero(tangent_aval(v.aval)) if c is None else c for v, c in zip(eqn.outvars, cts)]
        invals = []
        for v in eqn.invars:
            if type(v) is Var and v in linear:
                invals.append(ct_ref(v) if type(v.aval) is AbstractRef
                              else UndefinedPrimal(v.aval))
            else:
                invals.append(read_primal(v))
        rule = transpose_rules.get(eqn.primitive)
        if rule is None:
            raise NotImplementedError(
                f"Transpose rule (for reverse-mode differentiation) for "
                f"'{eqn.primitive.name}' not implemented")
        ct_arg = cts if eqn.primitive.multiple_results else cts[0]
        si = eqn.source_info
        # Equations the rule stages (and the accumulation of its cotangents) carry the
        # forward equation's line and transposed name stack, as in JAX.
        prev = _source_override.value
        if si is not None:
            _source_override.value = si
        try:
            with _si.set_name_stack(transposed if si is None else transposed + si.name_stack):
                cts_in = rule(ct_arg, *invals, **eqn.params)
                for v, ct in zip(eqn.invars, cts_in):
                    write_ct(v, ct)
        finally:
            _source_override.value = prev

    # A reference input's entry: its CtRef when a cotangent reached it (callers that own the
    # reference read it there), else a Zero.
    return [(_ref_ct_result(ref_cts.get(v), v.aval) if type(v.aval) is AbstractRef
             else ct_env.get(v, Zero(v.aval))) if v in linear else Zero(v.aval)
            for v in jaxpr.invars]


def _ref_ct_result(c, aval):
    return c if c is not None and c.used else Zero(tangent_aval(aval))


def needs_zero_cotangent_transpose(jaxpr) -> bool:
    """Whether transposing ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``) with zero
    cotangents runs a transpose of ``zero_cotangent_transposes`` anywhere (also in
    sub-jaxprs): a loop transposing its body with instantiated zeros must then run."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        must = zero_cotangent_transposes.get(eqn.primitive)
        if must is not None and must(eqn):
            return True
        if any(needs_zero_cotangent_transpose(j) for j in sub_jaxprs(eqn.params)):
            return True
    return False


# ----------------------------------------------------------------------------------------------
# Rule helpers used by primitive definitions.

def defjvp2(prim: Primitive, *jvp_fns):
    """JVP from one function per argument: ``fn(g, ans, *primals, **params)`` gives the
    output tangent contributed by that argument's tangent ``g`` (JAX's ``defjvp2``).
    ``None`` means that argument is not differentiable (its tangent is ignored). Rank-0
    contributions are broadcast to the output (elementwise primitives broadcast scalars)."""
    def rule(primals, tangents, **params):
        ans = prim.bind(*primals, **params)
        out = None
        for fn, t in zip(jvp_fns, tangents):
            if fn is None or type(t) is Zero:
                continue
            contrib = fn(t, ans, *primals, **params)
            if not prim.multiple_results:
                contrib = _broadcast_to_ans(contrib, ans)
            out = contrib if out is None else add_any_p.bind(out, contrib)
        if out is None or not is_differentiable_dtype(get_aval(ans).dtype):
            out = Zero.from_primal_value(ans)
        return ans, out
    jvp_rules[prim] = rule
    return rule


def defjvp(prim: Primitive, *jvp_fns):
    """JAX's ``ad.defjvp``: one function per argument, ``fn(g, *primals, **params)``, giving
    the output tangent contributed by that argument's tangent ``g`` (``None``: the argument
    is not differentiable). The contributions are summed."""
    if prim.multiple_results:
        raise ValueError(f"ad.defjvp: primitive '{prim.name}' has multiple results; register "
                         "a rule in ad.primitive_jvps instead")

    def rule(primals, tangents, **params):
        ans = prim.bind(*primals, **params)
        out = Zero.from_primal_value(ans)
        for fn, t in zip(jvp_fns, tangents):
            if fn is not None and type(t) is not Zero:
                out = add_tangents(out, fn(t, *primals, **params))
        return ans, out
    jvp_rules[prim] = rule
    return rule


def _broadcast_to_ans(t, ans):
    # Rank-0 operands and size-1 dimensions broadcast in elementwise primitives; so must
    # their tangents. A tangent passed through as given (``add``'s) that is a Python
    # scalar becomes an array, as JAX's broadcast of it to the output does.
    if type(t) in (int, float, complex, bool):
        t = core.to_array(t)
    ts, shape = get_aval(t).shape, get_aval(ans).shape
    if ts != shape and len(ts) in (0, len(shape)):    # rank 0 or size-1 dimensions
        return lax_ops.broadcast_in_dim(t, shape, tuple(range(len(ts))))
    return t


def defjvp_zero(prim: Primitive):
    """The output does not depend differentiably on the inputs (integer/boolean results)."""
    def rule(primals, tangents, **params):
        ans = prim.bind(*primals, **params)
        if prim.multiple_results:
            return ans, [Zero.from_primal_value(a) for a in ans]
        return ans, Zero.from_primal_value(ans)
    jvp_rules[prim] = rule


def _linear_jvp(prim, primals, tangents, **params):
    ans = prim.bind(*primals, **params)
    if all(type(t) is Zero for t in tangents):
        out = ([Zero.from_primal_value(a) for a in ans] if prim.multiple_results
               else Zero.from_primal_value(ans))
        return ans, out
    ts = [instantiate_zeros(t) for t in tangents]
    return ans, prim.bind(*ts, **params)


def _zero_cts(args):
    return [Zero(tangent_aval(a.aval)) if type(a) is UndefinedPrimal else None for a in args]


def deflinear2(prim: Primitive, transpose_rule):
    """A primitive linear in its array inputs (JAX's ``deflinear2``): its JVP applies it to
    the tangents; ``transpose_rule(ct, *args, **params)`` gives the input cotangents, with
    ``UndefinedPrimal`` for the linear inputs."""
    def transpose(ct, *args, **params):
        if type(ct) is Zero:
            return _zero_cts(args)
        return transpose_rule(ct, *args, **params)
    jvp_rules[prim] = lambda primals, tangents, **params: _linear_jvp(
        prim, primals, tangents, **params)
    transpose_rules[prim] = transpose


def deflinear(prim: Primitive, transpose_rule):
    """JAX's ``ad.deflinear``: as :func:`deflinear2`, but ``transpose_rule(ct, **params)``
    does not see the arguments."""
    deflinear2(prim, lambda ct, *args, **params: transpose_rule(ct, **params))


def defbilinear(prim: Primitive, lhs_rule, rhs_rule):
    """A primitive linear in each of its two arguments separately (a product):
    ``lhs_rule(ct, x, y, **params)`` is the cotangent of ``x`` given ``y`` (``x`` an
    ``UndefinedPrimal``), ``rhs_rule`` that of ``y``."""
    defjvp(prim, lambda g, x, y, **params: prim.bind(g, y, **params),
           lambda g, x, y, **params: prim.bind(x, g, **params))

    def transpose(ct, x, y, **params):
        if type(x) is UndefinedPrimal:
            return [None if type(ct) is Zero else lhs_rule(ct, x, y, **params), None]
        return [None, None if type(ct) is Zero else rhs_rule(ct, x, y, **params)]
    transpose_rules[prim] = transpose


# JAX's names for the registries and helpers above (``jax.interpreters.ad``): the same
# tables kiln's interpreters read, so a rule registered the JAX way is used by kiln.
primitive_jvps = jvp_rules
primitive_transposes = transpose_rules
add_jaxvals_p = add_any_p


def add_jaxvals(x, y):
    """The sum of two tangents or cotangents of the same type (``add_any``)."""
    return add_any_p.bind(x, y)


def get_primitive_transpose(prim: Primitive):
    """The transpose rule of ``prim``; ``NotImplementedError`` naming it when it has none."""
    try:
        return transpose_rules[prim]
    except KeyError:
        raise NotImplementedError(
            f"Transpose rule (for reverse-mode differentiation) for '{prim.name}' not "
            "implemented") from None
