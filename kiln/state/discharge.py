"""State discharge: a jaxpr that uses mutable references becomes a pure one, for the
compiler.

``discharge(closed)`` returns a jaxpr that takes the *values* of the references the
original takes (same argument order; a reference argument's value in its place) and
returns the original outputs followed by the final value of each reference argument.
References created inside (``new_ref``) become ordinary values; ``get``/``swap``/
``addupdate`` become reads and functional updates of those values (``kiln.state.apply``:
the same functions the eager implementations run, so both paths agree).

Calls (``jit``, ``closed_call``, custom derivatives, ``checkpoint``) are inlined;
``cond`` branches, ``while`` and ``scan`` bodies that use references of the enclosing
program carry those references' values (extra branch outputs, extra loop carries).

``run(closed, args, name, run_pure)`` is the backend's entry point: it discharges the
program once (cached), runs the pure program on the references' current values and
stores the final values back into the ``Ref`` objects, so mutation is visible after the
call as in JAX. A program the discharge cannot handle runs on the reference backend,
whose interpreter executes the reference primitives on the ``Ref`` objects themselves.
"""
from __future__ import annotations

import weakref

from kiln.array import make_array
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal
from kiln.core.ref import (
    AbstractRef,
    Ref,
    addupdate_p,
    empty_ref_p,
    free_ref_p,
    freeze_p,
    get_p,
    new_ref_p,
    ref_primitives,
    swap_p,
)
from kiln.core.trace import get_aval
from kiln.interpreters import staging
from kiln.state import apply
from kiln.tree_util import tree_unflatten

__all__ = ["has_refs", "discharge", "run"]


class _Cell:
    """A reference during discharge: its current (traced) value, always of the reference's
    value type ``aval`` (weak type included, so loop carries keep their types)."""

    __slots__ = ("_value", "aval")

    def __init__(self, value, aval=None):
        self.aval = get_aval(value) if aval is None else aval
        self._value = value

    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, v):
        a = get_aval(v)
        if a.weak_type != self.aval.weak_type or a.dtype != self.aval.dtype:
            from kiln.lax.structural import _convert_element_type
            v = _convert_element_type(v, self.aval.dtype, self.aval.weak_type)
        self._value = v


# ----------------------------------------------------------------------------------------------
# Which jaxprs use references

_has_refs_cache: dict = {}


def _sub_jaxprs(params):
    for p in params.values():
        for sub in (p if isinstance(p, (tuple, list)) else (p,)):
            if isinstance(sub, ClosedJaxpr):
                yield sub.jaxpr
            elif isinstance(sub, Jaxpr):
                yield sub


def jaxpr_has_refs(jaxpr: Jaxpr) -> bool:
    hit = _has_refs_cache.get(id(jaxpr))
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    result = (any(type(v.aval) is AbstractRef for v in jaxpr.invars)
              or any(type(v.aval) is AbstractRef for v in jaxpr.constvars)
              or any(eqn.primitive in ref_primitives
                     or any(jaxpr_has_refs(s) for s in _sub_jaxprs(eqn.params))
                     for eqn in jaxpr.eqns))
    if len(_has_refs_cache) > 1024:    # it holds the jaxprs: keep distinct programs bounded
        _has_refs_cache.clear()
    _has_refs_cache[id(jaxpr)] = (jaxpr, result)
    return result


def has_refs(closed) -> bool:
    """Whether ``closed`` (a ClosedJaxpr) takes, creates or uses mutable references."""
    return jaxpr_has_refs(closed.jaxpr)


# ----------------------------------------------------------------------------------------------
# The discharging interpreter

def _is_cell(x) -> bool:
    return type(x) is _Cell


def eval_discharged(jaxpr: Jaxpr, consts, args):
    """Evaluate ``jaxpr`` under the current trace with references as ``_Cell`` objects
    (updated in place); returns the outputs."""
    env = {}

    def read(v):
        return v.val if type(v) is Literal else env[v]

    for v, c in zip(jaxpr.constvars, consts):
        if type(c) is Ref:      # references are operands, never constants (see staging)
            raise NotImplementedError("kiln: a mutable reference as a jaxpr constant")
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _eval_eqn(eqn, ins)
        if eqn.primitive.multiple_results:
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
        else:
            env[eqn.outvars[0]] = outs
    return [read(v) for v in jaxpr.outvars]


def _eval_eqn(eqn, ins):
    prim, params = eqn.primitive, eqn.params
    if prim is get_p:
        cell, *idx = ins
        return apply.read_transformed(cell.value, tree_unflatten(params["tree"], idx))
    if prim is swap_p:
        cell, val, *idx = ins
        old, cell.value = apply.write_transformed(
            cell.value, tree_unflatten(params["tree"], idx), val)
        return old
    if prim is addupdate_p:
        cell, val, *idx = ins
        cell.value = apply.accumulate_transformed(
            cell.value, tree_unflatten(params["tree"], idx), val)
        return []
    if prim is new_ref_p:
        return _Cell(ins[0], eqn.outvars[0].aval.inner_aval)
    if prim is empty_ref_p:
        from kiln.interpreters.ad import zeros_like_aval
        return _Cell(zeros_like_aval(params["ty"]))
    if prim is freeze_p:
        return ins[0].value
    if prim is free_ref_p:
        return []
    rule = discharge_rules.get(prim)
    if rule is not None and (any(_is_cell(x) for x in ins)
                             or any(jaxpr_has_refs(s) for s in _sub_jaxprs(params))):
        return rule(ins, **params)
    if any(_is_cell(x) for x in ins) or any(jaxpr_has_refs(s) for s in _sub_jaxprs(params)):
        raise NotImplementedError(
            f"kiln: state discharge of '{prim.name}' with mutable references inside is not "
            "implemented (the program runs on the reference backend)")
    return prim.bind(*ins, **params)


# ----------------------------------------------------------------------------------------------
# Discharge rules of primitives with sub-jaxprs: rule(ins, **params) -> outs

discharge_rules: dict = {}


def _inline(key):
    def rule(ins, **params):
        closed = params[key]
        return eval_discharged(closed.jaxpr, closed.consts, ins)
    return rule


def _register_calls():
    from kiln.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p, remat_p
    from kiln.interpreters.calls import closed_call_p
    from kiln.interpreters.pjit import jit_p
    discharge_rules[jit_p] = _inline("jaxpr")
    discharge_rules[closed_call_p] = _inline("call_jaxpr")
    discharge_rules[custom_jvp_call_p] = _inline("call_jaxpr")
    discharge_rules[custom_vjp_call_p] = _inline("call_jaxpr")
    discharge_rules[remat_p] = _inline("jaxpr")


def _cells_of(ins):
    """The distinct cells among ``ins``, in order, and each input's cell index (or None)."""
    cells, where = [], []
    for x in ins:
        if _is_cell(x):
            for k, c in enumerate(cells):
                if c is x:
                    where.append(k)
                    break
            else:
                where.append(len(cells))
                cells.append(x)
        else:
            where.append(None)
    return cells, where


def _trace_pure(fn, avals):
    from kiln.lax.control import common
    return common.trace_jaxpr(fn, avals)


def _cond_rule(ins, *, branches):
    from kiln.lax.control.cond import cond_p
    index, *ops = ins
    cells, where = _cells_of(ops)
    plain = [x for x, w in zip(ops, where) if w is None]
    n_out = len(branches[0].out_avals)

    def make(br):
        def fn(*args):
            vals, refvals = args[:len(plain)], args[len(plain):]
            inner = [_Cell(v, c.aval) for v, c in zip(refvals, cells)]
            it = iter(vals)
            call_args = [next(it) if w is None else inner[w] for w in where]
            outs = eval_discharged(br.jaxpr, br.consts, call_args)
            return list(outs) + [c.value for c in inner]
        return fn

    avals = [get_aval(x) for x in plain] + [c.aval for c in cells]
    traced = [_trace_pure(make(br), avals) for br in branches]
    # Hoisted consts of every branch become leading operands of all branches.
    all_consts = []
    for _, consts in traced:
        all_consts.extend(consts)
    new_branches = []
    offset = 0
    for closed, consts in traced:
        new_branches.append(_with_extra_leading(closed, all_consts, offset, len(consts)))
        offset += len(consts)
    outs = cond_p.bind(index, *all_consts, *plain, *[c.value for c in cells],
                       branches=tuple(new_branches))
    for c, v in zip(cells, outs[n_out:]):
        c.value = v
    return outs[:n_out]


def _with_extra_leading(closed: ClosedJaxpr, all_consts, offset: int, n: int) -> ClosedJaxpr:
    """``closed`` takes its own ``n`` hoisted consts first; make it take all branches'
    consts (``all_consts``), its own at ``offset``."""
    from kiln.core.jaxpr import Var
    j = closed.jaxpr
    extra_before = [Var(get_aval(c)) for c in all_consts[:offset]]
    extra_after = [Var(get_aval(c)) for c in all_consts[offset + n:]]
    invars = extra_before + j.invars[:n] + extra_after + j.invars[n:]
    return ClosedJaxpr(Jaxpr(j.constvars, invars, j.outvars, j.eqns, j.effects, j.debug_info),
                       closed.consts)


def _while_rule(ins, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    from kiln.lax.control.loops import while_p
    cc = ins[:cond_nconsts]
    bc = ins[cond_nconsts:cond_nconsts + body_nconsts]
    carry = ins[cond_nconsts + body_nconsts:]
    cells, where = _cells_of(list(cc) + list(bc))
    cwhere, bwhere = where[:cond_nconsts], where[cond_nconsts:]
    cc_plain = [x for x, w in zip(cc, cwhere) if w is None]
    bc_plain = [x for x, w in zip(bc, bwhere) if w is None]
    n_carry, n_ref = len(carry), len(cells)

    def call_args(consts, wh, refcells):
        it = iter(consts)
        return [next(it) if w is None else refcells[w] for w in wh]

    def new_cond(*args):
        consts, rest = args[:len(cc_plain)], args[len(cc_plain):]
        car, refvals = rest[:n_carry], rest[n_carry:]
        inner = [_Cell(v, c.aval) for v, c in zip(refvals, cells)]
        return eval_discharged(cond_jaxpr.jaxpr, cond_jaxpr.consts,
                               call_args(consts, cwhere, inner) + list(car))

    def new_body(*args):
        consts, rest = args[:len(bc_plain)], args[len(bc_plain):]
        car, refvals = rest[:n_carry], rest[n_carry:]
        inner = [_Cell(v, c.aval) for v, c in zip(refvals, cells)]
        outs = eval_discharged(body_jaxpr.jaxpr, body_jaxpr.consts,
                               call_args(consts, bwhere, inner) + list(car))
        return list(outs) + [c.value for c in inner]

    carry_avals = [get_aval(x) for x in carry] + [c.aval for c in cells]
    cj, cjc = _trace_pure(new_cond, [get_aval(x) for x in cc_plain] + carry_avals)
    bj, bjc = _trace_pure(new_body, [get_aval(x) for x in bc_plain] + carry_avals)
    outs = while_p.bind(*cjc, *cc_plain, *bjc, *bc_plain, *carry, *[c.value for c in cells],
                        cond_jaxpr=cj, body_jaxpr=bj, cond_nconsts=len(cjc) + len(cc_plain),
                        body_nconsts=len(bjc) + len(bc_plain))
    for c, v in zip(cells, outs[n_carry:n_carry + n_ref]):
        c.value = v
    return outs[:n_carry]


def _scan_rule(ins, *, jaxpr, length, reverse, num_consts, num_carry, linear, unroll,
               _split_transpose=False):
    from kiln.lax.control.loops import scan_p
    consts = ins[:num_consts]
    carry = ins[num_consts:num_consts + num_carry]
    xs = ins[num_consts + num_carry:]
    cells, where = _cells_of(consts)
    c_plain = [x for x, w in zip(consts, where) if w is None]
    n_ref = len(cells)

    def body(*args):
        cs, rest = args[:len(c_plain)], args[len(c_plain):]
        refvals, rest = rest[:n_ref], rest[n_ref:]
        car, x = rest[:num_carry], rest[num_carry:]
        inner = [_Cell(v, c.aval) for v, c in zip(refvals, cells)]
        it = iter(cs)
        call = [next(it) if w is None else inner[w] for w in where]
        outs = eval_discharged(jaxpr.jaxpr, jaxpr.consts, call + list(car) + list(x))
        return [c.value for c in inner] + list(outs)

    x_avals = [_unstacked(get_aval(x)) for x in xs]
    avals = ([get_aval(x) for x in c_plain] + [c.aval for c in cells]
             + [get_aval(x) for x in carry] + x_avals)
    bj, bjc = _trace_pure(body, avals)
    nc = len(bjc) + len(c_plain)
    outs = scan_p.bind(*bjc, *c_plain, *[c.value for c in cells], *carry, *xs,
                       jaxpr=bj, length=length, reverse=reverse, num_consts=nc,
                       num_carry=num_carry + n_ref,
                       linear=tuple([False] * len(bj.in_avals)), unroll=unroll,
                       _split_transpose=_split_transpose)
    for c, v in zip(cells, outs[:n_ref]):
        c.value = v
    return outs[n_ref:]


def _unstacked(aval):
    return aval.update(shape=aval.shape[1:])


def _register_control():
    from kiln.interpreters import ad
    from kiln.lax.control.cond import cond_p
    from kiln.lax.control.loops import scan_p, while_p
    discharge_rules[cond_p] = _cond_rule
    discharge_rules[while_p] = _while_rule
    discharge_rules[scan_p] = _scan_rule
    for p in (cond_p, while_p, scan_p):
        ad.ref_discharging[p] = apply_discharged


def apply_discharged(prim, args, params):
    """Apply ``prim`` (control flow) to ``args`` under the current trace in discharged
    form: each reference operand's value is read, the pure primitive runs with those
    values threaded through, and the final values are written back. Under ``jvp``/``grad``
    the reads and writes are differentiated by the reference rules, the pure primitive by
    its own."""
    from kiln.state.primitives import ref_get, ref_set
    refs, cells, ins = [], [], []
    for a in args:
        if type(get_aval(a)) is AbstractRef:
            for r, c in zip(refs, cells):
                if r is a:
                    ins.append(c)
                    break
            else:
                c = _Cell(ref_get(a, ()), get_aval(a).inner_aval)
                refs.append(a)
                cells.append(c)
                ins.append(c)
        else:
            ins.append(a)
    outs = discharge_rules[prim](ins, **params)
    for r, c in zip(refs, cells):
        ref_set(r, (), c.value)
    return outs


_register_calls()
_register_control()


# ----------------------------------------------------------------------------------------------
# Whole programs

def discharge(closed: ClosedJaxpr) -> ClosedJaxpr:
    """The pure version of ``closed``: reference arguments become value arguments, and the
    final value of each reference argument is appended to the outputs."""
    in_avals = closed.in_avals
    ref_pos = [k for k, a in enumerate(in_avals) if type(a) is AbstractRef]

    def fn(*args):
        cells = {k: _Cell(args[k], in_avals[k].inner_aval) for k in ref_pos}
        call = [cells[k] if k in cells else a for k, a in enumerate(args)]
        outs = eval_discharged(closed.jaxpr, closed.consts, call)
        for o in outs:
            if _is_cell(o):
                raise ValueError("a mutable array reference cannot be returned from a "
                                 "jit-compiled function")
        return list(outs) + [cells[k].value for k in ref_pos]

    avals = [a.inner_aval if type(a) is AbstractRef else a for a in in_avals]
    jaxpr, consts = staging.trace_to_jaxpr(fn, avals)
    return ClosedJaxpr(jaxpr, consts)


_discharged: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _discharged_for(closed):
    hit = _discharged.get(closed)
    if hit is None:
        try:
            hit = (discharge(closed),)
        except NotImplementedError:
            hit = (None,)
        _discharged[closed] = hit
    return hit[0]


def run(closed, args, name, run_pure):
    """Run ``closed`` on ``args`` (NumPy values and ``Ref`` objects) with the references
    updated in place; ``run_pure(closed, vals, name)`` runs a pure program."""
    from kiln.config import config
    if config.kiln_backend == "reference":
        return _run_reference(closed, args)
    pure = _discharged_for(closed)
    if pure is None:
        return _run_reference(closed, args)
    refs = [a for a in args if type(a) is Ref]
    vals = [a._buf._value if type(a) is Ref else a for a in args]
    outs = run_pure(pure, vals, name)
    n = len(outs) - len(refs)
    for r, v in zip(refs, outs[n:]):
        r._buf = make_array(v, r._aval.inner_aval.weak_type)
    return outs[:n]


def _run_reference(closed, args):
    from kiln.backends import reference
    return reference.run_jaxpr(closed.jaxpr, closed.consts, args)
