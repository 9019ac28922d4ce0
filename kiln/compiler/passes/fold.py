"""Constant folding of a jaxpr (``kiln.compiler.passes.passes.fold_constants``).

Known values are literals, small consts and the results of folded equations. A folded
equation's results are represented, by kind of value:

- a scalar: a ``Literal`` (built as staging builds one);
- a non-scalar whose elements are all bitwise equal (a *splat*): the equation
  ``broadcast_in_dim[shape=..., broadcast_dimensions=()] <literal>``, which costs nothing
  in a fused kernel and keeps the value known for later folding;
- any other array: a new constvar, unless every operand was a scalar (``iota``): such a
  value is cheaper to compute in a kernel than to read from a buffer, so the equation
  stays and its result is unknown.
"""
from __future__ import annotations

import numpy as np

from kiln.array import make_array
from kiln.compiler.passes.common import (
    Subst,
    checked_eqn,
    concrete_value,
    has_callable,
    has_subjaxpr,
    is_numpy_aval,
    literal_value,
    make_literal,
    rebuild,
)
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Literal, Var
from kiln.interpreters.batching import collective_prims
from kiln.interpreters.staging import has_effects
from kiln.lax.structural import broadcast_in_dim_p

FOLD_MAX_ELEMENTS = 1024


def _foldable(eqn, max_elements) -> bool:
    # Collectives are never folded: their value depends on the device running them.
    # Primitives defined through JAX's API run user code (maybe with effects): never folded.
    return (len(eqn.outvars) > 0 and eqn.primitive not in collective_prims
            and not eqn.primitive.array_impl
            and not has_effects(eqn) and not has_subjaxpr(eqn.params)
            and not has_callable(eqn.params)
            and all(is_numpy_aval(v.aval) and v.aval.size <= max_elements
                    for v in eqn.outvars))


def _evaluate(eqn, vals):
    """The equation's results as NumPy arrays of exactly the output avals, or ``None``."""
    try:
        with np.errstate(all="ignore"):
            res = eqn.primitive.impl(*vals, **eqn.params)
        res = list(res) if eqn.primitive.multiple_results else [res]
    except Exception:
        return None
    if len(res) != len(eqn.outvars):
        return None
    outs = []
    for r, v in zip(res, eqn.outvars):
        try:
            r = np.array(r)          # a copy: never a view of a const or of an operand
        except Exception:
            return None
        if r.shape != tuple(v.aval.shape) or r.dtype != v.aval.dtype:
            return None
        outs.append(r)
    return outs


def _splat(val):
    """The 0-d value of which ``val`` is a broadcast (all elements bitwise equal), or None."""
    if val.size == 0:
        return None
    flat = np.ascontiguousarray(val).reshape(-1)
    raw = flat.view(np.uint8).reshape(flat.size, -1)
    return flat[0].reshape(()) if (raw == raw[0]).all() else None


def _is_splat_eqn(eqn) -> bool:
    return (eqn.primitive is broadcast_in_dim_p and isinstance(eqn.invars[0], Literal)
            and eqn.params["broadcast_dimensions"] == ())


def fold_constants(closed: ClosedJaxpr, max_elements: int = FOLD_MAX_ELEMENTS) -> ClosedJaxpr:
    """Evaluate at compile time the top-level equations whose operands are all known.

    Known values are literals, consts of at most ``max_elements`` elements, and the
    results of folded equations. An equation is folded with its primitive's NumPy
    ``impl`` (as the reference backend runs it) when it is pure (no primitive of
    ``staging.always_stage``, also not in a sub-jaxpr), has no sub-jaxpr and no callable
    param (calls, control flow, callbacks and custom rules are not evaluated), has only
    NumPy dtypes (no PRNG key dtypes), each result has at most ``max_elements`` elements,
    and its ``impl`` does not raise and returns values of exactly the result avals.

    A scalar result becomes a ``Literal``; a non-scalar result whose elements are all
    equal becomes ``broadcast_in_dim`` of a literal (an equation already of that form is
    kept as it is, its value known); any other result becomes a new constvar, except
    that an equation whose operands are all scalars (``iota``) is kept. Consts that
    become unused are left for :func:`kiln.compiler.passes.passes.dce`.

    Args:
      closed: the jaxpr; not modified.
      max_elements: the largest const read, or result created, by folding.

    Returns:
      A new ``ClosedJaxpr`` with the same invars and output avals; new constvars and
      their values are appended to ``closed``'s.
    """
    known = {}
    for v, c in zip(closed.jaxpr.constvars, closed.consts):
        val = concrete_value(c)
        if val is not None and val.size <= max_elements and is_numpy_aval(v.aval):
            known[v] = val
    constvars, consts = list(closed.jaxpr.constvars), list(closed.consts)
    sub = Subst()
    eqns = []
    for eqn in closed.jaxpr.eqns:
        eqn = sub.eqn(eqn)
        vals = [literal_value(a) if isinstance(a, Literal) else known.get(a)
                for a in eqn.invars]
        outs = None
        if all(x is not None for x in vals) and _foldable(eqn, max_elements):
            outs = _evaluate(eqn, vals)
        if outs is None:
            eqns.append(eqn)
            continue
        if _is_splat_eqn(eqn):
            eqns.append(eqn)
            known[eqn.outvars[0]] = outs[0]
            continue
        scalar_operands = not any(x.ndim for x in vals)
        plan = []
        for v, val in zip(eqn.outvars, outs):
            if isinstance(v, DropVar):
                continue
            lit = make_literal(val, v.aval)
            if lit is not None:
                plan.append((v, val, lit))
                continue
            s = _splat(val)
            lit = None if s is None else make_literal(s, v.aval.update(shape=()))
            new = None if lit is None else checked_eqn(
                broadcast_in_dim_p, [lit], v,
                dict(shape=tuple(v.aval.shape), broadcast_dimensions=(), sharding=None))
            if new is None and scalar_operands:
                plan = None
                break
            plan.append((v, val, new))
        if plan is None:
            eqns.append(eqn)
            continue
        for v, val, atom in plan:
            if atom is None:
                atom = Var(v.aval)
                constvars.append(atom)
                consts.append(make_array(val, v.aval.weak_type))
            elif not isinstance(atom, Literal):
                if atom.source_info is None:
                    atom.source_info = eqn.source_info
                eqns.append(atom)            # a splat equation defining ``v`` itself
                known[v] = val
                continue
            if isinstance(atom, Var):
                known[atom] = val
            sub.bind(v, atom)
    return rebuild(closed, eqns, sub.atoms(closed.jaxpr.outvars), constvars, consts)
