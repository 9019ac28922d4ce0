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


# -- while -----------------------------------------------------------------------------------

def _while(spenv, *spvalues, cond_jaxpr, cond_nconsts, body_jaxpr, body_nconsts):
    from kiln.core.trace import get_aval
    from kiln.lax.control import common
    from kiln.lax.control.loops import while_p
    from kiln.tree_util import tree_flatten
    cconsts = spvalues[:cond_nconsts]
    bconsts = spvalues[cond_nconsts:cond_nconsts + body_nconsts]
    init = spvalues[cond_nconsts + body_nconsts:]
    init_flat, init_tree = tree_flatten(spvalues_to_arrays(spenv, list(init)))
    init_avals = [get_aval(x) for x in init_flat]

    cfun, c_flat, cstore = sparsify_jaxpr(spenv, cond_jaxpr, [*cconsts, *init])
    c_closed, c_hoisted = common.trace_jaxpr(cfun, cstore["avals"])
    bfun, b_flat, bstore = sparsify_jaxpr(spenv, body_jaxpr, [*bconsts, *init])

    def body(*xs):
        outs = bfun(*xs)
        _check_tree_and_avals("sparsified body_fun output", bstore["trees"][0],
                              [get_aval(o) for o in outs], "sparsified body_fun input",
                              init_tree, init_avals)
        return [common.match_aval(o, a) for o, a in zip(outs, init_avals)]
    b_closed, b_hoisted = common.trace_jaxpr(body, bstore["avals"])
    n_cc = _leaves_of(cconsts)
    n_bc = _leaves_of(bconsts)
    outs = while_p.bind(*c_hoisted, *c_flat[:n_cc], *b_hoisted, *b_flat[:n_bc], *init_flat,
                        cond_jaxpr=c_closed, cond_nconsts=len(c_hoisted) + n_cc,
                        body_jaxpr=b_closed, body_nconsts=len(b_hoisted) + n_bc)
    return arrays_to_spvalues(spenv, _unflatten(init_tree, outs))


# -- scan ------------------------------------------------------------------------------------

def _scan(spenv, *spvalues, jaxpr, num_consts, num_carry, length, reverse, unroll=1,
          **_):
    from kiln.core.trace import get_aval
    from kiln.lax.control import common
    from kiln.lax.control.loops import _scan_params, scan_p
    from kiln.tree_util import tree_flatten
    consts = spvalues[:num_consts]
    carry = spvalues[num_consts:num_consts + num_carry]
    xs = spvalues[num_consts + num_carry:]
    if any(v.is_sparse() for v in xs):
        raise NotImplementedError("sparse rule for scan with sparse x values is not "
                                  "implemented.")
    carry_flat, carry_tree = tree_flatten(spvalues_to_arrays(spenv, list(carry)))
    carry_avals = [get_aval(x) for x in carry_flat]
    n_c = _leaves_of(consts)
    x_avals = [get_aval(spenv.data(v)) for v in xs]
    x_avals = [a.update(shape=a.shape[1:]) for a in x_avals]
    fun, flat, store = sparsify_jaxpr(spenv, jaxpr, [*consts, *carry, *xs],
                                      split=num_carry)
    avals = store["avals"][:n_c + len(carry_flat)] + x_avals

    def body(*args):
        outs = fun(*args)
        carry_out = outs[:len(carry_flat)]
        _check_tree_and_avals("sparsified scan carry output", store["trees"][0],
                              [get_aval(o) for o in carry_out], "sparsified scan carry input",
                              carry_tree, carry_avals)
        return ([common.match_aval(o, a) for o, a in zip(carry_out, carry_avals)]
                + list(outs[len(carry_flat):]))
    closed, hoisted = common.trace_jaxpr(body, avals)
    outs = scan_p.bind(*hoisted, *flat, **_scan_params(
        closed, length, reverse, len(hoisted) + n_c, len(carry_flat), unroll))
    carry_out = _unflatten(carry_tree, outs[:len(carry_flat)])
    ys = _unflatten(store["trees"][1], outs[len(carry_flat):])
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
