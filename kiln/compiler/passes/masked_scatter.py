"""Scatters selected under a batched predicate become masked scatters
(``kiln.compiler.passes.passes.mask_selected_scatters``).

The pattern, found in the bodies of vmapped loops whose predicate is batched (Equinox's
checkpointed ``while_loop`` selects its carry with the per-lane predicate itself)::

    new = scatter[operand_batching_dims=(0,), scatter_indices_batching_dims=(0,)] old idx upd
    out = select_n (broadcast_in_dim[broadcast_dimensions=(0,)] pred) old new

reads and writes the whole of ``old`` on every iteration (the select), where only the
scattered elements change. It becomes one scatter whose lanes with a false ``pred`` get
out-of-bounds indices (``FILL_OR_DROP`` drops their updates, so their rows keep ``old``'s
values, as the select keeps them): the compiled loop then updates the carry in place and
touches only the updated elements. ``copy`` equations between the values are looked
through. The original scatter must have no other use (it is then removed by ``dce``); the
select may pick the scatter on either side (``pred`` or its negation masks).
"""
from __future__ import annotations

from kiln.compiler.passes.common import Subst, rebuild, same_aval
from kiln.core.jaxpr import ClosedJaxpr, Literal, Var


def _prims():
    from kiln.lax import gather_scatter as gs
    from kiln.lax.copying import copy_p
    from kiln.lax.structural import broadcast_in_dim_p, select_n_p
    scatters = (gs.scatter_p, gs.scatter_add_p, gs.scatter_sub_p, gs.scatter_mul_p,
                gs.scatter_min_p, gs.scatter_max_p)
    return scatters, copy_p, broadcast_in_dim_p, select_n_p


def mask_selected_scatters(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Rewrite ``select_n(broadcast(pred), old, scatter(old, ...))`` (batched at axis 0)
    into a scatter masked by ``pred`` (see the module docstring); other equations are kept.

    Returns ``closed`` itself when nothing matches.
    """
    scatters, copy_p, bcast_p, select_p = _prims()
    eqns = closed.jaxpr.eqns
    if not any(e.primitive is select_p for e in eqns) or not any(
            e.primitive in scatters for e in eqns):
        return closed
    producer, uses = {}, {}
    for e in eqns:
        for v in e.outvars:
            producer[v] = e
        for a in e.invars:
            if isinstance(a, Var):
                uses[a] = uses.get(a, 0) + 1
    for a in closed.jaxpr.outvars:
        if isinstance(a, Var):
            uses[a] = uses.get(a, 0) + 1

    def root(a, single_use=False):
        """``a`` with ``copy`` chains looked through (each link used once if asked)."""
        while isinstance(a, Var):
            e = producer.get(a)
            if e is None or e.primitive is not copy_p:
                break
            if single_use and uses.get(a, 0) != 1:
                break
            a = e.invars[0]
        return a

    def match(eqn):
        """``(pred_atom, negate, scatter_eqn)`` for a select of the pattern, else None."""
        if len(eqn.invars) != 3:
            return None
        which = root(eqn.invars[0])
        b = producer.get(which) if isinstance(which, Var) else None
        if b is None or b.primitive is not bcast_p:
            return None
        pred = root(b.invars[0])
        if (not isinstance(pred, Var) or pred.aval.ndim != 1
                or tuple(b.params["broadcast_dimensions"]) != (0,)):
            return None
        out_aval = eqn.outvars[0].aval
        for k_new, negate in ((2, False), (1, True)):
            k_old = 3 - k_new
            new = eqn.invars[k_new]
            if not isinstance(new, Var) or uses.get(new, 0) != 1:
                continue
            new = root(new, single_use=True)
            s = producer.get(new) if isinstance(new, Var) else None
            if s is None or s.primitive not in scatters or uses.get(new, 0) != 1:
                continue
            dn = s.params["dimension_numbers"]
            if (tuple(dn.operand_batching_dims) != (0,)
                    or tuple(dn.scatter_indices_batching_dims) != (0,)):
                continue
            if root(s.invars[0]) is not root(eqn.invars[k_old]):
                continue
            if not same_aval(s.outvars[0].aval, out_aval):
                continue
            if pred.aval.shape[0] != out_aval.shape[0]:
                continue
            return pred, negate, s
        return None

    sub = Subst()
    out_eqns = []
    new_constvars, new_consts = [], []
    changed = False
    for eqn in eqns:
        m = match(eqn) if eqn.primitive is select_p else None
        if m is None:
            out_eqns.append(sub.eqn(eqn))
            continue
        pred, negate, s = m
        traced = _masked_scatter_jaxpr(s, pred, negate)
        if traced is None:
            out_eqns.append(sub.eqn(eqn))
            continue
        jaxpr, consts = traced
        inner = Subst()
        for v, a in zip(jaxpr.invars, [pred, *s.invars]):
            inner.bind(v, sub(a))
        new_constvars.extend(jaxpr.constvars)
        new_consts.extend(consts)
        for e in jaxpr.eqns:
            out_eqns.append(inner.eqn(e))
        res = inner(jaxpr.outvars[0])
        if isinstance(res, Literal) or not same_aval(res.aval, eqn.outvars[0].aval):
            return closed          # not expected: leave the jaxpr as it was
        sub.bind(eqn.outvars[0], res)
        changed = True
    if not changed:
        return closed
    return rebuild(closed, out_eqns, sub.atoms(closed.jaxpr.outvars),
                   constvars=list(closed.jaxpr.constvars) + new_constvars,
                   consts=list(closed.consts) + new_consts)


def _masked_scatter_jaxpr(s, pred, negate):
    """The jaxpr of ``(pred, operand, indices, updates) -> masked scatter`` (``s``'s
    primitive and parameters, ``FILL_OR_DROP``), or None when it cannot be traced."""
    from kiln import lax
    from kiln.interpreters import staging
    from kiln.lax.control.masked_scatter import _masked_indices
    from kiln.lax.gather_scatter import GatherScatterMode
    params = dict(s.params)

    def fn(p, operand, indices, updates):
        if negate:
            p = lax.bitwise_not(p)
        idx = _masked_indices(operand, indices, updates, params, p)
        return [s.primitive.bind(operand, idx, updates,
                                 **dict(params, mode=GatherScatterMode.FILL_OR_DROP))]
    try:
        jaxpr, consts = staging.trace_to_jaxpr(
            fn, [pred.aval] + [a.aval for a in s.invars])
    except Exception:
        return None
    if len(jaxpr.invars) != 4 or len(jaxpr.outvars) != 1:
        return None
    return jaxpr, list(consts)
