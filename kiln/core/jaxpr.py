"""The jaxpr IR: typed variables, literals, equations, (closed) jaxprs.

Also the pretty printer (JAX's text format), a type checker that every staged
jaxpr can be run through, and ``eval_jaxpr`` which re-binds each equation under
the current trace (so evaluating a jaxpr inside ``grad`` differentiates it).
"""
from __future__ import annotations

import contextlib
import itertools
import weakref

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer
from kiln.errors import JaxprTypeError  # noqa: F401  (re-exported; jax.errors.JaxprTypeError)


class Var:
    """A jaxpr variable. Names are assigned when printing."""

    __slots__ = ("aval", "count")
    _counter = itertools.count()

    def __init__(self, aval: ShapedArray):
        self.aval = aval
        self.count = next(Var._counter)

    def __repr__(self):
        return f"Var({self.count}:{self.aval.str_short()})"


class DropVar(Var):
    """An equation output nobody reads (printed as ``_``)."""

    __slots__ = ()


class Literal:
    """A scalar constant inlined into an equation."""

    __slots__ = ("val", "aval")

    def __init__(self, val, aval: ShapedArray):
        self.val = val
        self.aval = aval

    def __repr__(self):
        return f"Literal({self.val})"


class Effect:
    """Base class of the side effects a jaxpr equation may have (``jax.core.Effect``)."""


class _SideEffect(Effect):
    def __repr__(self):
        return "SideEffect"


#: The effect of kiln's effectful equations (callbacks, ``debug.print``, effectful
#: primitives of libraries): they run in program order and are never removed.
side_effect = _SideEffect()

# Whether an equation has effects; the staging interpreter installs its rule (this module
# knows no primitives).
_has_effects = [lambda eqn: False]


def set_effects_rule(rule) -> None:
    """Install ``rule(eqn) -> bool`` deciding :attr:`JaxprEqn.effects`."""
    _has_effects[0] = rule


class JaxprEqn:
    """``outvars = primitive[params] invars``; ``source_info`` is the user's line that
    staged it (``kiln.core.source_info.SourceInfo``) or ``None``."""

    __slots__ = ("primitive", "invars", "outvars", "params", "source_info", "__weakref__")

    def __init__(self, primitive, invars, outvars, params, source_info=None):
        self.primitive = primitive
        self.invars = invars
        self.outvars = outvars
        self.params = params
        self.source_info = source_info

    @property
    def effects(self) -> frozenset:
        """The equation's effects, as JAX's ``eqn.effects``: empty for a pure equation."""
        return frozenset((side_effect,)) if _has_effects[0](self) else frozenset()

    def replace(self, **kw):
        d = dict(primitive=self.primitive, invars=self.invars, outvars=self.outvars,
                 params=self.params, source_info=self.source_info)
        d.update(kw)
        return JaxprEqn(**d)

    def __repr__(self):
        return pp_eqn(self, _Namer(), 0)


class Jaxpr:
    """A function in SSA form: ``constvars; invars -> eqns -> outvars``."""

    # ``_physical``: the jaxpr with extended dtypes replaced by their storage dtypes, once
    # asked for (``kiln.core.physical.physical_jaxpr``; the jaxpr itself when it has none).
    __slots__ = ("constvars", "invars", "outvars", "eqns", "effects", "debug_info",
                 "_physical", "__weakref__")

    def __init__(self, constvars, invars, outvars, eqns, effects=frozenset(), debug_info=None):
        self.constvars = list(constvars)
        self.invars = list(invars)
        self.outvars = list(outvars)
        self.eqns = list(eqns)
        self.effects = effects
        self.debug_info = debug_info
        self._physical = None

    @property
    def in_avals(self):
        return [v.aval for v in self.invars]

    @property
    def out_avals(self):
        return [v.aval for v in self.outvars]

    def __str__(self):
        return pp_jaxpr(self)

    __repr__ = __str__

    def pretty_print(self, *, source_info: bool = False, **_kw) -> str:
        """The jaxpr's text; with ``source_info=True`` each equation ends with a
        ``# file:line:col (function)`` comment naming the user's line that staged it."""
        return pp_jaxpr(self, source_info=source_info)


class ClosedJaxpr:
    """A jaxpr together with the values of its constvars."""

    __slots__ = ("jaxpr", "consts", "__weakref__")

    def __init__(self, jaxpr: Jaxpr, consts):
        self.jaxpr = jaxpr
        self.consts = list(consts)

    @property
    def in_avals(self):
        return self.jaxpr.in_avals

    @property
    def out_avals(self):
        return self.jaxpr.out_avals

    @property
    def eqns(self):
        return self.jaxpr.eqns

    @property
    def effects(self):
        return self.jaxpr.effects

    def __str__(self):
        return pp_jaxpr(self.jaxpr)

    __repr__ = __str__

    def pretty_print(self, *, source_info: bool = False, **_kw) -> str:
        """See :meth:`Jaxpr.pretty_print`."""
        return pp_jaxpr(self.jaxpr, source_info=source_info)


# ----------------------------------------------------------------------------------------------
# Pretty printing in JAX's format.

class _Namer:
    def __init__(self, source_info: bool = False):
        self.names = {}
        self.source_info = source_info

    def __call__(self, v) -> str:
        if isinstance(v, Literal):
            return pp_literal(v)
        if isinstance(v, DropVar):
            return "_"
        name = self.names.get(v)
        if name is None:
            name = self.names[v] = _encode(len(self.names))
        return name


def _encode(n: int) -> str:
    s = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(ord("a") + r) + s
    return s


def pp_literal(lit: Literal) -> str:
    v = np.asarray(lit.val)
    if v.dtype == bool:
        txt = "True" if v.item() else "False"
    elif np.issubdtype(v.dtype, np.floating) or v.dtype.name == "bfloat16":
        f = float(v)
        txt = repr(f) if np.isfinite(f) else ("nan" if np.isnan(f) else ("inf" if f > 0 else "-inf"))
    else:
        txt = str(v.item())
    return f"{txt}:{lit.aval.str_short()}"


def sub_jaxprs(params):
    """The jaxprs among an equation's ``params`` (a ``ClosedJaxpr``'s jaxpr, a ``Jaxpr``,
    also inside tuples and lists), in order."""
    for v in params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(x, ClosedJaxpr):
                yield x.jaxpr
            elif isinstance(x, Jaxpr):
                yield x


_lowerable: weakref.WeakSet = weakref.WeakSet()


def check_lowerable(jaxpr: Jaxpr) -> None:
    """Raise what a primitive's ``lowering_error(params)`` gives for an equation of
    ``jaxpr`` (sub-jaxprs included): the errors JAX raises when it lowers a program (a
    ``checkify.check`` that was not functionalized), not when it traces one. ``jit``'s
    backend and the eager ``cond``/``while``/``scan`` (which JAX lowers too) call it; a
    jaxpr that passed is remembered."""
    if jaxpr in _lowerable:
        return
    for eqn in jaxpr.eqns:
        rule = getattr(eqn.primitive, "lowering_error", None)
        if rule is not None:
            err = rule(eqn.params)
            if err is not None:
                raise err
        for sub in sub_jaxprs(eqn.params):
            check_lowerable(sub)
    _lowerable.add(jaxpr)


def _is_jaxpr(v) -> bool:
    return isinstance(v, (ClosedJaxpr, Jaxpr))


def _inner(v):
    return v.jaxpr if isinstance(v, ClosedJaxpr) else v


def _pp_value(v) -> str:
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, type) and issubclass(v, np.generic):
        return np.dtype(v).name
    if callable(v) and hasattr(v, "__name__"):
        return v.__name__
    return str(v)


# Parameters JAX leaves out of the printed form, per primitive (when they have these values).
_HIDDEN = {
    "convert_element_type": {"sharding": (None,)},
    "broadcast_in_dim": {"shape": "any", "sharding": (None,), "broadcast_dimensions": ((),)},
    "iota": {"sharding": (None,)},
    "reshape": {"sharding": (None,)},
}
_FIRST = ("name",)
# Primitives with a ``name`` parameter that JAX still prints in plain alphabetical order.
_NAME_NOT_FIRST = frozenset({"composite"})


# Primitives whose printed parameters are not their stored ones (custom_jvp_call shows the
# user's function names where it stores internal wrappers): name -> params -> shown dict.
pp_param_rules: dict = {}


def _shown_params(eqn):
    hidden = _HIDDEN.get(eqn.primitive.name, {})
    rule = pp_param_rules.get(eqn.primitive.name)
    out = []
    for k, v in (rule(eqn.params) if rule else eqn.params).items():
        if k.startswith("_") and k != "_split_transpose":
            continue
        h = hidden.get(k)
        if h == "any" or (h is not None and any(v == x for x in h
                                                if not isinstance(v, np.ndarray))):
            continue
        out.append((k, v))
    first = () if eqn.primitive.name in _NAME_NOT_FIRST else _FIRST
    out.sort(key=lambda kv: (kv[0] not in first, kv[0]))
    return out


#: ``name -> rule(eqn, namer) -> str``: primitives printed in their own syntax (JAX prints
#: reference reads and writes as ``b:f32[3] <- a[...]``; ``kiln.state`` registers them).
pp_eqn_rules: dict = {}


def pp_eqn(eqn: JaxprEqn, namer, indent: int) -> str:
    """One equation; multi-line (params one per line) when a parameter is a jaxpr."""
    rule = pp_eqn_rules.get(eqn.primitive.name)
    if rule is not None:
        return rule(eqn, namer)
    outs = " ".join(f"{namer(v)}:{v.aval.str_short()}" for v in eqn.outvars)
    args = " ".join(namer(v) for v in eqn.invars)
    params = _shown_params(eqn)
    name = eqn.primitive.name
    has_jaxpr = any(_is_jaxpr(v) or (isinstance(v, (tuple, list)) and v and
                                     all(_is_jaxpr(e) for e in v)) for _, v in params)
    if not has_jaxpr:
        ptxt = ("[" + " ".join(f"{k}={_pp_value(v)}" for k, v in params) + "]") if params else ""
        # JAX's printer keeps the parameter group on one line when it fits in 80 columns
        # from where it starts; otherwise one parameter per line.
        if not params or indent + len(outs) + 3 + len(name) + len(ptxt) <= 80:
            return f"{outs} = {name}{ptxt} {args}".rstrip()
    pad = " " * (indent + 2)
    lines = [f"{outs} = {name}["]
    fresh = name == "jit"   # a jit's body is printed with its own names, as JAX does
    for k, v in params:
        inner_namer = _Namer(namer.source_info) if fresh else namer
        if _is_jaxpr(v):
            body = _pp_jaxpr_body(_inner(v), inner_namer, indent + 2, prefix=len(k) + 1)
            lines.append(f"{pad}{k}={body}")
        elif isinstance(v, (tuple, list)) and v and all(_is_jaxpr(e) for e in v):
            lines.append(f"{pad}{k}=(")
            for e in v:
                body = _pp_jaxpr_body(_inner(e), inner_namer, indent + 4)
                lines.append(f"{pad}  {body}")
            lines.append(f"{pad})")
        else:
            lines.append(f"{pad}{k}={_pp_value(v)}")
    lines.append(f"{' ' * indent}] {args}".rstrip())
    return "\n".join(lines)


def _pp_jaxpr_body(jaxpr: Jaxpr, namer, indent: int, nested: bool = False,
                   prefix: int = 0) -> str:
    consts = " ".join(f"{namer(v)}:{v.aval.str_short()}" for v in jaxpr.constvars)
    ins = " ".join(f"{namer(v)}:{v.aval.str_short()}" for v in jaxpr.invars)
    head = f"{{ lambda {consts}; {ins}. let"
    eqn_strs = [pp_eqn(e, namer, indent + 4) for e in jaxpr.eqns]
    outs = ", ".join(namer(v) for v in jaxpr.outvars)
    out_txt = f"({outs},)" if len(jaxpr.outvars) == 1 else f"({outs})"
    if getattr(namer, "source_info", False):
        eqn_strs = [_with_source(s, e) for s, e in zip(eqn_strs, jaxpr.eqns)]
    if not any("\n" in e for e in eqn_strs) and not getattr(namer, "source_info", False):
        one_line = f"{head} {'; '.join(eqn_strs)} in {out_txt} }}"
        if indent + prefix + len(one_line) <= 80:
            return one_line
    pad = " " * (indent + 4)
    body = "\n".join(pad + e for e in eqn_strs)
    return f"{head}\n{body}\n{' ' * (indent + 2)}in {out_txt} }}"


def _with_source(text: str, eqn) -> str:
    """``text`` (an equation) with the user's line as a comment on its first line."""
    si = getattr(eqn, "source_info", None)
    if si is None:
        return text
    first, *rest = text.split("\n")
    return "\n".join([f"{first}  # {si}", *rest])


def pp_jaxpr(jaxpr: Jaxpr, source_info: bool = False) -> str:
    return _pp_jaxpr_body(jaxpr, _Namer(source_info), 0)


# ----------------------------------------------------------------------------------------------
# Type checking.



def _same_type(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.weak_type == b.weak_type


def check_jaxpr(jaxpr: Jaxpr) -> None:
    """Check that every variable is defined once before use and every equation's
    output types are what its primitive's abstract evaluation says."""
    defined = set()

    def define(v):
        if isinstance(v, DropVar):
            return
        if v in defined:
            raise JaxprTypeError(f"variable {v} defined twice")
        defined.add(v)

    def read(v):
        if isinstance(v, Literal):
            return v.aval
        if v not in defined:
            raise JaxprTypeError(f"variable {v} used before definition")
        return v.aval

    for v in jaxpr.constvars:
        define(v)
    for v in jaxpr.invars:
        define(v)
    for eqn in jaxpr.eqns:
        in_avals = [read(v) for v in eqn.invars]
        prim = eqn.primitive
        out = prim.abstract_eval(*in_avals, **eqn.params)
        outs = out if prim.multiple_results else [out]
        if len(outs) != len(eqn.outvars):
            raise JaxprTypeError(f"{prim.name}: expected {len(outs)} outputs, "
                                 f"equation has {len(eqn.outvars)}")
        for expected, v in zip(outs, eqn.outvars):
            if not _same_type(expected, v.aval):
                raise JaxprTypeError(
                    f"{prim.name}: output type {v.aval.str_short()} (weak={v.aval.weak_type}) "
                    f"differs from abstract eval {expected.str_short()} "
                    f"(weak={expected.weak_type}) in equation {pp_eqn(eqn, _Namer(), 0)}")
        body_context = getattr(prim, "body_context", None)   # shard_map: axes bound
        with body_context(eqn.params) if body_context else contextlib.nullcontext():
            for p in eqn.params.values():
                if isinstance(p, ClosedJaxpr):
                    check_jaxpr(p.jaxpr)
                elif isinstance(p, Jaxpr):
                    check_jaxpr(p)
        for v in eqn.outvars:
            define(v)
    for v in jaxpr.outvars:
        read(v)


# ----------------------------------------------------------------------------------------------
# Evaluation under the current trace.

def eval_jaxpr(jaxpr: Jaxpr, consts, *args):
    """Evaluate ``jaxpr`` by binding each equation's primitive under the current trace.

    Equations staged meanwhile (when the current trace stages) keep the source position
    of the equation they come from, as in JAX, not the position of this call."""
    from kiln.core.source_info import _override
    env = {}

    def read(v):
        return v.val if type(v) is Literal else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    if len(args) != len(jaxpr.invars):
        raise TypeError(f"jaxpr expects {len(jaxpr.invars)} arguments, got {len(args)}")
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    prev, prev_ns = _override.value, _override.name_stack
    try:
        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            src = eqn.source_info
            if src is None:
                _override.value, _override.name_stack = prev, prev_ns
            else:    # the equation's position, its name stack under the current one
                _override.value, _override.name_stack = src, prev_ns + src.name_stack
            outs = eqn.primitive.bind(*ins, **eqn.params)
            if eqn.primitive.multiple_results:
                for v, o in zip(eqn.outvars, outs):
                    env[v] = o
            else:
                env[eqn.outvars[0]] = outs
    finally:
        _override.value, _override.name_stack = prev, prev_ns
    return [read(v) for v in jaxpr.outvars]


def jaxpr_as_fun(closed: ClosedJaxpr):
    def fun(*args):
        return eval_jaxpr(closed.jaxpr, closed.consts, *args)
    return fun


def is_tracer(x) -> bool:
    return isinstance(x, Tracer)


# The reference evaluator: a jaxpr on NumPy values, each equation by its primitive's impl
# (``kiln.backends.reference.run_jaxpr``, which installs it here when imported). The eager
# impls of primitives with sub-jaxprs (``cond``, the custom calls, ``checkpoint``) run it;
# they sit below the backends, so they reach it through this hook.
_reference_runner = None


def set_reference_runner(run) -> None:
    """Install ``run(jaxpr, consts, args) -> list of NumPy values``."""
    global _reference_runner
    _reference_runner = run


def run_reference(jaxpr: Jaxpr, consts, args) -> list:
    """Evaluate ``jaxpr`` with the reference backend (see :func:`set_reference_runner`)."""
    if _reference_runner is None:
        raise RuntimeError("no reference evaluator is installed: import kiln "
                           "(kiln.backends.reference installs it)")
    return _reference_runner(jaxpr, consts, args)
