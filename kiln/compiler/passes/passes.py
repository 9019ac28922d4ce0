"""Optimisation passes over jaxprs, run before a jaxpr is lowered to kernels.

Every pass maps a ``ClosedJaxpr`` to a new ``ClosedJaxpr`` computing the same values:

- :func:`inline_calls` replaces ``jit``, ``custom_jvp_call``, ``custom_vjp_call``,
  ``checkpoint`` and ``composite`` equations by the equations of their bodies, and
  gives elementwise equations that broadcast size-1 dimensions (``mul a:f32[1,2]
  b:f32[2,1]``) explicit ``broadcast_in_dim`` operands (kernels see equal shapes).
- :func:`simplify` applies local algebraic rewrites (movement chains, dtype round trips,
  ``x * 1``, ``x + 0``, ``integer_pow``); see :mod:`kiln.compiler.passes.simplify`.
- :func:`fold_constants` evaluates equations whose operands are all known at compile
  time with the primitives' NumPy ``impl``; see :mod:`kiln.compiler.passes.fold`.
- :func:`cse` merges equations that compute the same thing.
- :func:`dce` removes equations whose results are unused.
- :func:`mask_selected_scatters` turns ``select_n(broadcast(pred), old, scatter(old, ...))``
  (batched at axis 0: the body of a vmapped loop with a batched predicate) into a scatter
  masked by ``pred``; see :mod:`kiln.compiler.passes.masked_scatter`.
- :func:`~kiln.compiler.passes.xla_simplify.xla_simplify` (last) rewrites float arithmetic as
  XLA's simplifier does (``A / Broadcast(B) => A * Broadcast(1 / B)``, ``A / sqrt(B) =>
  A * rsqrt(B)``, ...), for JAX's bits.
- :func:`~kiln.compiler.passes.xla_fma.contract_fma` (after it) fuses a single-use product
  into the add/subtract it feeds (an ``fma`` equation), as XLA's CPU code does.
- :func:`optimize` runs them all to a fixed point; with ``KILN_DUMP=passes`` (a
  comma-separated list, e.g. ``KILN_DUMP=passes,c``) it prints the jaxpr after each pass
  to stderr.

What every pass guarantees: the input is not modified; the result has the same invars
and the same number and avals of outputs and passes ``check_jaxpr``. An output may become
an input variable, a constvar or a ``Literal`` (the printer, ``check_jaxpr``,
``eval_jaxpr`` and the reference backend accept all three). Passes work on the top-level
equations only: sub-jaxprs of ``cond``/``while``/``scan`` (and of calls that are not
inlined) are kept as they are, the very same objects. Effectful equations (primitives in
``staging.always_stage``, or equations whose sub-jaxprs contain one) are never removed,
merged, folded or reordered.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from kiln.compiler.passes.common import (
    Subst,
    fresh_like,
    literal_key,
    rebuild,
    same_aval,
)
from kiln.compiler.passes.fold import FOLD_MAX_ELEMENTS, fold_constants
from kiln.compiler.passes.masked_scatter import mask_selected_scatters
from kiln.compiler.passes.simplify import exact_conversion, simplify
from kiln.compiler.passes.xla_fma import contract_fma
from kiln.compiler.passes.xla_simplify import shared_root_divisions, xla_simplify
from kiln.config import config
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import (
    ClosedJaxpr,
    DropVar,
    Jaxpr,
    JaxprEqn,
    Literal,
    Var,
    check_jaxpr,
    pp_jaxpr,
)
from kiln.interpreters.calls import closed_call_p
from kiln.interpreters.custom_calls import custom_jvp_call_p, custom_vjp_call_p
from kiln.interpreters.custom_vmap import custom_vmap_call_p
from kiln.interpreters.mlir import eqn_lowering
from kiln.interpreters.pjit import jit_p
from kiln.interpreters.remat import remat_p
from kiln.interpreters.remat_opt import remat_opt_p, resolve_remat_opt
from kiln.interpreters.staging import dce_jaxpr_consts, has_effects
from kiln.lax.composite import composite_p
from kiln.lax.structural import broadcast_in_dim_p
from kiln.profiler._recorder import span as _profile_span

__all__ = ["FOLD_MAX_ELEMENTS", "cse", "dce", "exact_conversion", "fold_constants",
           "inline_calls", "mask_selected_scatters", "optimize", "simplify"]

# ----------------------------------------------------------------------------------------------
# Inlining of call primitives.

# Call primitive -> the param holding its body, a ClosedJaxpr whose invars are the
# equation's operands in order (custom_jvp_call/custom_vjp_call pass their num_consts
# closed-over tracers as leading operands, which are leading invars of the body).
_CALL_BODIES = {
    jit_p: "jaxpr",
    closed_call_p: "call_jaxpr",
    composite_p: "jaxpr",
    remat_p: "jaxpr",
    custom_jvp_call_p: "call_jaxpr",
    custom_vjp_call_p: "call_jaxpr",
    custom_vmap_call_p: "call",
    remat_opt_p: "fwd_jaxpr",
}


class _Consts:
    """The constvars of the jaxpr being built; consts of inlined bodies are added once
    per distinct value object (as staging dedupes consts by identity)."""

    def __init__(self, constvars, consts):
        self.vars = list(constvars)
        self.vals = list(consts)
        self.by_id = {}

    def var_for(self, value, var: Var) -> Var:
        hit = self.by_id.get(id(value))
        if hit is not None and same_aval(hit.aval, var.aval):
            return hit
        v = Var(var.aval)
        self.vars.append(v)
        self.vals.append(value)
        self.by_id[id(value)] = v
        return v


def inline_calls(closed: ClosedJaxpr, keep: frozenset = frozenset()) -> ClosedJaxpr:
    """Inline ``jit``, ``custom_jvp_call``, ``custom_vjp_call`` and ``checkpoint`` calls.

    Each such top-level equation is replaced by its body's equations (recursively, so
    calls inside inlined bodies are inlined too), with the body's variables renamed to
    fresh ones (a body may be inlined several times: ``jit`` caches one jaxpr per
    signature) and its invars/outvars substituted by the equation's operands/results.
    The body's consts become constvars of the result (appended to ``closed.consts``,
    once per distinct value object).

    Not inlined: equations inside ``cond``/``while``/``scan`` sub-jaxprs (nor those
    control-flow equations themselves), and a call whose operand or result avals differ
    from its body's (weak type included), which would change types downstream.
    Custom differentiation rules are dropped with the call: run this after autodiff.

    Args:
      closed: the jaxpr; not modified.
      keep: names of call primitives left as equations (``{"composite"}`` for the
        StableHLO rendering, which prints a composite as ``stablehlo.composite``).

    Returns:
      A new ``ClosedJaxpr`` with the same invars and output avals.
    """
    consts = _Consts(closed.jaxpr.constvars, closed.consts)
    sub = Subst()
    eqns = []
    _inline_eqns(closed.jaxpr.eqns, sub, eqns, consts, rename=False, keep=keep)
    return rebuild(closed, eqns, sub.atoms(closed.jaxpr.outvars), consts.vars, consts.vals)


def _body_of(eqn, invars, keep=frozenset()):
    if eqn.primitive.name in keep:
        return None
    key = _CALL_BODIES.get(eqn.primitive)
    expand = getattr(eqn.primitive, "expand", None)
    if key is not None:
        body = eqn.params.get(key)
    elif expand is not None:
        # a primitive computed as a jaxpr over its operands (``shard_map``'s expansion)
        body = expand(eqn)
    elif eqn.primitive.array_impl:
        # A primitive defined through JAX's API with an ``mlir.lower_fun`` rule: its body
        # is that function traced at this equation's operands and parameters.
        body = eqn_lowering(eqn)
    else:
        body = None
    if not isinstance(body, ClosedJaxpr):
        return None
    j = body.jaxpr
    if (len(j.invars) != len(invars) or len(j.outvars) != len(eqn.outvars)
            or len(j.constvars) != len(body.consts)
            or not all(same_aval(a.aval, b.aval) for a, b in zip(j.invars, invars))
            or not all(same_aval(a.aval, b.aval) for a, b in zip(j.outvars, eqn.outvars))):
        return None
    return body


def _inline_eqns(src_eqns, sub: Subst, out: list, consts: _Consts, rename: bool,
                 keep: frozenset = frozenset()) -> None:
    for eqn in src_eqns:
        invars = sub.atoms(eqn.invars)
        body = _body_of(eqn, invars, keep)
        if body is None:
            if getattr(eqn.primitive, "broadcasts_size_one", False):
                invars = _explicit_broadcasts(eqn, invars, out)
            outvars = [fresh_like(v) for v in eqn.outvars] if rename else eqn.outvars
            for old, new in zip(eqn.outvars, outvars):
                if new is not old:
                    sub.bind(old, new)
            out.append(eqn.replace(invars=invars, outvars=list(outvars)))
            continue
        inner = Subst()
        for v, c in zip(body.jaxpr.constvars, body.consts):
            inner.bind(v, consts.var_for(c, v))
        for v, a in zip(body.jaxpr.invars, invars):
            inner.bind(v, a)
        _inline_eqns(body.jaxpr.eqns, inner, out, consts, rename=True, keep=keep)
        for v, b in zip(eqn.outvars, body.jaxpr.outvars):
            sub.bind(v, inner(b))


def _explicit_broadcasts(eqn, invars, out: list) -> list:
    """The operands of an elementwise equation whose operands of the result's rank have
    size-1 dimensions that it broadcasts (``mul a:f32[1,2] b:f32[2,1]``, as JAX stages
    ``jnp`` of equal ranks): each such operand gets a ``broadcast_in_dim`` equation
    appended to ``out`` first, so that the kernels see operands of the result's shape
    (or rank 0), as they always do."""
    shape = eqn.outvars[0].aval.shape
    if all(a.aval.shape in ((), shape) for a in invars):
        return invars
    new = []
    for a in invars:
        s = a.aval.shape
        if s in ((), shape):
            new.append(a)
            continue
        v = Var(ShapedArray(shape, a.aval.dtype, a.aval.weak_type))
        out.append(JaxprEqn(broadcast_in_dim_p, [a], [v],
                            dict(shape=shape, broadcast_dimensions=tuple(range(len(s))),
                                 sharding=None), eqn.source_info))
        new.append(v)
    return new


# ----------------------------------------------------------------------------------------------
# Dead-code elimination.

def dce(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Remove top-level equations none of whose results is used, and unused constvars.

    Kept whatever their uses: effectful equations (primitive in
    ``staging.always_stage``, or a sub-jaxpr containing one; ``staging.has_effects``).
    An equation with several results is kept whole when any result is used. Invars are
    never removed and sub-jaxprs are not entered.

    Args:
      closed: the jaxpr; not modified.

    Returns:
      A new ``ClosedJaxpr``; its consts are those of ``closed`` that are still used.
    """
    jaxpr, used = dce_jaxpr_consts(closed.jaxpr)
    consts = [c for c, u in zip(closed.consts, used) if u]
    return ClosedJaxpr(jaxpr, consts)


# ----------------------------------------------------------------------------------------------
# Common-subexpression elimination.

class _Unkeyable(Exception):
    pass


def _freeze(v):
    """A hashable key for a parameter value that two values share only when they are
    interchangeable: types are part of the key (``1``, ``1.0`` and ``True`` differ)."""
    if isinstance(v, (tuple, list)):
        return (type(v), tuple(_freeze(e) for e in v))
    if isinstance(v, dict):
        return (dict, tuple((k, _freeze(e)) for k, e in v.items()))
    if isinstance(v, np.ndarray):
        raise _Unkeyable
    if isinstance(v, (ClosedJaxpr, Jaxpr)):
        return ("id", id(v))      # alive as long as the equation holding it
    try:
        hash(v)
    except TypeError:
        raise _Unkeyable from None
    return (type(v), v)


def _atom_key(a):
    return literal_key(a) if isinstance(a, Literal) else a


def _cse_key(eqn):
    if has_effects(eqn) or eqn.params.get("prevent_cse") is True:
        return None
    try:
        params = tuple((k, _freeze(eqn.params[k])) for k in sorted(eqn.params))
        key = (eqn.primitive, tuple(_atom_key(a) for a in eqn.invars), params,
               tuple((v.aval.shape, v.aval.dtype, v.aval.weak_type) for v in eqn.outvars))
        hash(key)
    except Exception:
        return None
    return key


def cse(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Merge top-level equations that compute the same values.

    Two equations merge when they have the same primitive, the same operands (the same
    variables, or literals of bitwise-equal value, equal dtype and weak type: ``0.0`` and
    ``-0.0`` differ), equal params (compared by type and value; sub-jaxprs by identity;
    an equation with an unhashable param, e.g. a NumPy array, never merges) and equal
    result types. The later equation is dropped and its results are replaced by the
    earlier one's. Never merged: effectful equations (see :func:`dce`) and ``checkpoint``
    equations with ``prevent_cse=True``. Random-number primitives are pure functions of
    their key and are merged.

    Args:
      closed: the jaxpr; not modified.

    Returns:
      A new ``ClosedJaxpr`` with the same invars, consts and output avals.
    """
    sub = Subst()
    seen = {}
    eqns = []
    for eqn in closed.jaxpr.eqns:
        eqn = sub.eqn(eqn)
        key = _cse_key(eqn)
        try:        # a param's __eq__ may raise on a hash collision: then no merge
            prev = seen.get(key) if key is not None else None
            if prev is None and key is not None and not any(
                    isinstance(v, DropVar) for v in eqn.outvars):
                seen[key] = eqn
        except Exception:
            prev = None
        if prev is not None:
            for v, p in zip(eqn.outvars, prev.outvars):
                sub.bind(v, p)
            continue
        eqns.append(eqn)
    return rebuild(closed, eqns, sub.atoms(closed.jaxpr.outvars))


# ----------------------------------------------------------------------------------------------
# The pipeline.

PASSES = (("mask_selected_scatters", mask_selected_scatters), ("simplify", simplify),
          ("fold_constants", fold_constants), ("cse", cse), ("dce", dce))


def _dump_enabled() -> bool:
    return "passes" in {s.strip() for s in os.environ.get("KILN_DUMP", "").split(",")}


def _signature(closed: ClosedJaxpr):
    """Structure of a jaxpr, to detect a fixed point (passes reuse unchanged objects)."""
    def atom(a):
        return literal_key(a) if isinstance(a, Literal) else a
    j = closed.jaxpr
    return (tuple(j.constvars), tuple(atom(a) for a in j.outvars),
            tuple((e.primitive, tuple(atom(a) for a in e.invars), tuple(e.outvars))
                  for e in j.eqns))


def run_at_compile(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Call the ``at_compile(params)`` hook of each top-level equation whose primitive has
    one (``inspect_sharding``: the layout is known now) and drop those equations (they
    have no outputs). Equations inside loop or branch bodies stay, and run their impl."""
    eqns = closed.jaxpr.eqns
    if not any(hasattr(e.primitive, "at_compile") for e in eqns):
        return closed
    kept = []
    for e in eqns:
        hook = getattr(e.primitive, "at_compile", None)
        if hook is None:
            kept.append(e)
        else:
            hook(e.params)
    return rebuild(closed, kept, closed.jaxpr.outvars)


def optimize(closed: ClosedJaxpr, max_rounds: int = 4, contract: bool = True,
             keep_calls: frozenset = frozenset()) -> ClosedJaxpr:
    """Run :func:`inline_calls`, then ``mask_selected_scatters``, ``simplify``,
    ``fold_constants``, ``cse`` and ``dce``
    in rounds until a round changes nothing (at most ``max_rounds`` rounds).

    With ``KILN_DUMP`` containing ``passes`` (e.g. ``KILN_DUMP=passes,c``) the jaxpr is
    printed to stderr after each pass, under a header line
    ``# kiln passes: after <pass> (round <n>)`` (round 0 is ``inline_calls``). With
    ``jax_enable_checks`` each intermediate jaxpr is type-checked.

    Args:
      closed: the jaxpr to optimise; not modified.
      max_rounds: the most rounds of the four passes after inlining.
      contract: end with :func:`~kiln.compiler.passes.xla_fma.contract_fma` (XLA's FMA
        contraction, ``fma`` equations); off for renderings of the program as HLO text.
      keep_calls: names of call primitives :func:`inline_calls` leaves in place.

    Returns:
      A new ``ClosedJaxpr`` with the same invars and output avals computing the same
      values.
    """
    dump = _dump_enabled()

    def run(name, fn, x, rnd):
        with _profile_span(f"pass {name}", "compile", round=rnd):
            y = fn(x)
        if config.jax_enable_checks:
            check_jaxpr(y.jaxpr)
        if dump:
            print(f"# kiln passes: after {name} (round {rnd})\n{pp_jaxpr(y.jaxpr)}",
                  file=sys.stderr)
        return y

    # ``remat_opt`` equations whose residuals are unused become their function first.
    closed = resolve_remat_opt(closed)
    closed = run("inline_calls", lambda c: inline_calls(c, frozenset(keep_calls)), closed, 0)
    closed = run_at_compile(closed)
    # XLA's A/sqrt(B) rewrite depends on the uses of sqrt(B) before cse merges repeats.
    shared_roots = shared_root_divisions(closed)
    for rnd in range(1, max_rounds + 1):
        before = _signature(closed)
        for name, fn in PASSES:
            closed = run(name, fn, closed, rnd)
        if _signature(closed) == before:
            break
    # Last: XLA's rewrites of divisions (A / Broadcast(B) => A * Broadcast(1 / B), ...),
    # for JAX's bits (after the identities above: ``x / 1`` is gone first, as in XLA).
    rec = run("xla_simplify", lambda c: xla_simplify(c, shared_roots), closed,
              max_rounds + 1)
    if rec is not closed:
        closed = run("dce", dce, run("cse", cse, rec, max_rounds + 1), max_rounds + 1)
    # Then XLA's FMA contraction of a single-use product feeding an add/subtract.
    if contract:
        closed = run("contract_fma", contract_fma, closed, max_rounds + 1)
    return closed
