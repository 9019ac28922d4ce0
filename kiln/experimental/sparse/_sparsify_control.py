"""The sparse rules of ``sparsify`` for primitives holding jaxprs: ``jit``, ``while``,
``scan``, ``cond``, custom derivatives and ``checkpoint``.

``jit``, ``while``, ``scan`` and ``cond`` are bound again with their jaxprs rewritten as
functions of the sparse operands' buffers (``sparsify_jaxpr``), so they stay one call or
loop; a loop's carry must keep its structure and types (a BCOO carry its ``nse``).
Scanning over sparse ``xs`` is not implemented (dense ``xs`` are; JAX supports neither).
Custom-derivative calls and ``checkpoint`` are evaluated inline: their function runs on the
sparse values and the custom rule (or remat policy) does not apply to transformations
outside ``sparsify``.
"""
from __future__ import annotations

from kiln import lax
from kiln.experimental.sparse._sparsify_env import arrays_to_spvalues, spvalues_to_arrays
from kiln.experimental.sparse._sparsify_eval import eval_sparse, n_leaves, sparsify_jaxpr
from kiln.experimental.sparse._sparsify_rules import sparse_rules_bcoo, sparse_rules_bcsr

__all__: list = []


def _unflatten(tree, leaves):
    from kiln.tree_util import tree_unflatten
    return tree_unflatten(tree, list(leaves))


def _check_tree_and_avals(what1, tree1, avals1, what2, tree2, avals2):
    """TypeError in JAX's words when two pytrees of abstract values differ."""
    from kiln._physical_tree import keystr
    from kiln.lax.control import common
    if tree1 != tree2:
        lines = [f"{what1} must have same type structure as {what2}, but there are "
                 "differences: "]
        for d in common.structure_diffs(
                tree1, tree2, lambda p, t1, t2, why: (p, t1, t2, why)):
            p, t1, t2, why = d
            lines.append(f"    * at output{keystr(tuple(p))}, {what1} has {t1} and {what2} "
                         f"has {t2}, so {why}")
        raise TypeError("\n".join(lines))
    bad = [(a, b) for a, b in zip(avals1, avals2)
           if not common.same_type(a, b, check_weak=False)]
    if bad:
        diff = ", ".join(f"{a.str_short()} vs {b.str_short()}" for a, b in bad)
        raise TypeError(f"{what1} and {what2} must have identical types, got\n{diff}.")


def _leaves_of(spvalues):
    return sum(n_leaves(v) for v in spvalues)


# -- jit -------------------------------------------------------------------------------------

def _jit(spenv, *spvalues, jaxpr, name, **params):
    from kiln.interpreters.pjit import jit_p, trace_closed
    fun, flat, store = sparsify_jaxpr(spenv, jaxpr, spvalues)
    closed, tconsts = trace_closed(fun, store["avals"])
    outs = jit_p.bind(*tconsts, *flat, jaxpr=closed, name=name, **params)
    return arrays_to_spvalues(spenv, _unflatten(store["trees"][0], outs))


# -- loops ---------------------------------------------------------------------------------

def _weakened(carry, outs):
    """``carry`` with the sortedness/uniqueness flags that the body's outputs ``outs`` lack
    dropped (the loop's carry has either's flags), and whether any changed."""
    new, changed = [], False
    for c, o in zip(carry, outs):
        if c.is_sparse() and o.is_sparse():
            s = bool(c.indices_sorted and o.indices_sorted)
            u = bool(c.unique_indices and o.unique_indices)
            if (s, u) != (bool(c.indices_sorted), bool(c.unique_indices)):
                c = c._replace(indices_sorted=s, unique_indices=u)
                changed = True
        new.append(c)
    return new, changed


def _trace_loop_body(spenv, closed, consts, carry, xs=(), x_avals=(), what="body_fun"):
    """Trace a loop body (a jaxpr of ``(*consts, *carry, *xs)`` returning ``(*carry,
    *ys)``) as a function of flat buffers whose carry output has the carry input's type.

    A sparse carry whose body output is not known sorted/unique is traced again as not
    sorted/unique (the body must be correct for every iteration's carry).

    Returns ``(closed, hoisted, flat_args, carry_tree, ys_tree)``: bind the loop with
    ``(*hoisted, *flat_args)`` (consts, carry, xs buffers, in order)."""
    from kiln.core.trace import get_aval
    from kiln.lax.control import common
    from kiln.tree_util import tree_flatten
    carry = list(carry)
    n_carry = len(carry)
    for _ in range(3):
        carry_flat, carry_tree = tree_flatten(spvalues_to_arrays(spenv, carry))
        carry_avals = [get_aval(x) for x in carry_flat]
        fun, flat, store = sparsify_jaxpr(spenv, closed, [*consts, *carry, *xs],
                                          split=n_carry)
        n_in = _leaves_of(consts) + len(carry_flat)
        avals = store["avals"][:n_in] + list(x_avals)

        def body(*args, fun=fun, carry_avals=carry_avals):
            outs = fun(*args)
            k = len(carry_avals)
            head = outs[:k]
            if all(common.same_type(get_aval(o), a, check_weak=False)
                   for o, a in zip(head, carry_avals)):
                head = [common.match_aval(o, a) for o, a in zip(head, carry_avals)]
            return list(head) + list(outs[k:])
        traced, hoisted = common.trace_jaxpr(body, avals)
        out_tree = store["trees"][0]
        if out_tree == carry_tree:
            break
        carry, changed = _weakened(carry, store["outs"][:n_carry])
        if not changed:
            break
    out_avals = traced.out_avals[:len(carry_flat)]
    _check_tree_and_avals(f"sparsified {what} output", out_tree, out_avals,
                          f"sparsified {what} input", carry_tree, carry_avals)
    return traced, hoisted, flat, carry_tree, store["trees"][1]


def _while(spenv, *spvalues, cond_jaxpr, cond_nconsts, body_jaxpr, body_nconsts):
    from kiln.lax.control import common
    from kiln.lax.control.loops import while_p
    cconsts = spvalues[:cond_nconsts]
    bconsts = spvalues[cond_nconsts:cond_nconsts + body_nconsts]
    init = spvalues[cond_nconsts + body_nconsts:]
    b_closed, b_hoisted, b_flat, carry_tree, _ = _trace_loop_body(
        spenv, body_jaxpr, bconsts, init)
    n_bc = _leaves_of(bconsts)
    init_flat = b_flat[n_bc:]
    # The cond function sees the carry as the body leaves it (flags possibly weakened).
    carry = arrays_to_spvalues(spenv, _unflatten(carry_tree, init_flat))
    cfun, c_flat, cstore = sparsify_jaxpr(spenv, cond_jaxpr, [*cconsts, *carry])
    c_closed, c_hoisted = common.trace_jaxpr(cfun, cstore["avals"])
    n_cc = _leaves_of(cconsts)
    outs = while_p.bind(*c_hoisted, *c_flat[:n_cc], *b_hoisted, *b_flat,
                        cond_jaxpr=c_closed, cond_nconsts=len(c_hoisted) + n_cc,
                        body_jaxpr=b_closed, body_nconsts=len(b_hoisted) + n_bc)
    return arrays_to_spvalues(spenv, _unflatten(carry_tree, outs))


def _scan(spenv, *spvalues, jaxpr, num_consts, num_carry, length, reverse, unroll=1,
          **_):
    from kiln.core.trace import get_aval
    from kiln.lax.control.loops import _scan_params, scan_p
    consts = spvalues[:num_consts]
    carry = spvalues[num_consts:num_consts + num_carry]
    xs = spvalues[num_consts + num_carry:]
    if any(v.is_sparse() for v in xs):
        raise NotImplementedError("sparse rule for scan with sparse x values is not "
                                  "implemented.")
    x_avals = [get_aval(spenv.data(v)) for v in xs]
    x_avals = [a.update(shape=a.shape[1:]) for a in x_avals]
    closed, hoisted, flat, carry_tree, ys_tree = _trace_loop_body(
        spenv, jaxpr, consts, carry, xs, x_avals, what="scan carry")
    n_carry = carry_tree.num_leaves
    outs = scan_p.bind(*hoisted, *flat, **_scan_params(
        closed, length, reverse, len(hoisted) + _leaves_of(consts), n_carry, unroll))
    carry_out = _unflatten(carry_tree, outs[:n_carry])
    ys = _unflatten(ys_tree, outs[n_carry:])
    return arrays_to_spvalues(spenv, [*carry_out, *ys])


# -- cond ------------------------------------------------------------------------------------

def _cond(spenv, index, *ops, branches):
    from kiln.core.jaxpr import ClosedJaxpr
    from kiln.core.trace import get_aval
    from kiln.interpreters.staging import trace_to_jaxpr
    from kiln.lax.control import common
    from kiln.lax.control.cond import cond_p
    if index.is_sparse():
        raise NotImplementedError("sparse rule for cond with a sparse index is not "
                                  "implemented.")
    traced = []
    for br in branches:
        fun, flat, store = sparsify_jaxpr(spenv, br, ops)
        closed, hoisted = common.trace_jaxpr(fun, store["avals"])
        traced.append((closed, hoisted, store["trees"][0]))
    names = ["sparsified true_fun output", "sparsified false_fun output"]
    for i in range(1, len(traced)):
        what2 = names[1] if len(traced) == 2 else f"sparsified branch {i} output"
        what1 = names[0] if len(traced) == 2 else "sparsified branch 0 output"
        _check_tree_and_avals(what1, traced[0][2], traced[0][0].out_avals,
                              what2, traced[i][2], traced[i][0].out_avals)
    targets = list(traced[0][0].out_avals)
    all_consts = [c for _, hoisted, _ in traced for c in hoisted]
    op_avals = store["avals"]
    avals = [get_aval(c) for c in all_consts] + list(op_avals)
    total = len(all_consts)
    new_branches = []
    offset = 0
    for closed, hoisted, _ in traced:
        lo, hi = offset, offset + len(hoisted)
        offset = hi

        def run(*args, closed=closed, lo=lo, hi=hi):
            outs = common.jaxpr_fun(closed)(*args[lo:hi], *args[total:])
            return [common.match_aval(o, a) for o, a in zip(outs, targets)]
        jaxpr, jconsts = trace_to_jaxpr(run, avals)
        new_branches.append(ClosedJaxpr(jaxpr, jconsts))
    outs = cond_p.bind(spenv.data(index), *all_consts, *flat, branches=tuple(new_branches))
    return arrays_to_spvalues(spenv, _unflatten(traced[0][2], outs))


# -- calls evaluated inline ------------------------------------------------------------------

def _inline(param):
    def rule(spenv, *spvalues, **params):
        closed = params[param]
        return eval_sparse(closed.jaxpr, closed.consts, list(spvalues), spenv)
    return rule


def _register_all():
    from kiln.interpreters.custom_calls import custom_jvp_call_p, custom_vjp_call_p
    from kiln.interpreters.pjit import jit_p
    from kiln.interpreters.remat import remat_p
    for prim, rule in [(jit_p, _jit), (lax.while_p, _while), (lax.scan_p, _scan),
                       (lax.cond_p, _cond), (custom_jvp_call_p, _inline("call_jaxpr")),
                       (custom_vjp_call_p, _inline("call_jaxpr")),
                       (remat_p, _inline("jaxpr"))]:
        sparse_rules_bcoo[prim] = rule
        sparse_rules_bcsr[prim] = rule


_register_all()
