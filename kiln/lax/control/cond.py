"""``lax.cond`` and ``lax.switch``: the ``cond`` primitive with its rules.

``cond[branches=(...)] index *operands`` runs ``branches[clamp(index)]``. Consts of the
branch functions are hoisted into the operands. A batched index turns into evaluating
every branch and selecting (``select_n``), as in JAX.
"""
from __future__ import annotations

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.trace import Primitive, Tracer, get_aval, set_current_trace
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax.control import common
from kiln.tree_util import tree_flatten, tree_unflatten

cond_p = Primitive("cond")
cond_p.multiple_results = True


def _cond_impl(index, *ops, branches):
    from kiln.backends import reference
    i = int(np.clip(int(index), 0, len(branches) - 1))
    br = branches[i]
    return reference.run_jaxpr(br.jaxpr, br.consts, ops)


def _cond_abstract_eval(index, *ops, branches):
    if index.shape != () or index.dtype.kind not in "iu":
        raise TypeError(f"cond index must be a scalar integer, got {index.str_short()}")
    return list(branches[0].out_avals)


cond_p.impl = _cond_impl
cond_p.abstract_eval = _cond_abstract_eval
cond_p.weak_type_rule = lambda *w, branches: [a.weak_type for a in branches[0].out_avals]


# -- construction ------------------------------------------------------------------------------

def _trace_branches(funs, ops_tree, op_avals, what):
    traced = [common.trace_pytree_fun(f, ops_tree, op_avals) for f in funs]
    out_trees = [t[2] for t in traced]
    for i, t in enumerate(out_trees[1:], 1):
        if t != out_trees[0]:
            if what == "cond":
                raise TypeError("true_fun and false_fun output must have same type structure, "
                                f"got {out_trees[0]} and {t}.")
            raise TypeError(f"branch 0 and {i} outputs must have same type structure, got "
                            f"{out_trees[0]} and {t}.")
    avals0 = traced[0][0].out_avals
    weak_fix = [False] * len(avals0)
    for i, (closed, _, _) in enumerate(traced[1:], 1):
        for j, (a, b) in enumerate(zip(avals0, closed.out_avals)):
            if not common.same_type(a, b, check_weak=False):
                if what == "cond":
                    raise TypeError(
                        "true_fun and false_fun output must have identical types, got\n"
                        f"{tree_unflatten(out_trees[0], [common.aval_str(x) for x in avals0])}"
                        f"\nand\n{tree_unflatten(out_trees[0], [common.aval_str(x) for x in closed.out_avals])}.")
                raise TypeError(f"branch 0 and {i} outputs must have identical types, got "
                                f"{common.aval_str(a)} and {common.aval_str(b)} at output {j}.")
            if a.weak_type != b.weak_type:
                weak_fix[j] = True
    if any(weak_fix):
        # Outputs that are weakly typed in some branches only become strongly typed.
        def strong(f):
            def g(*args):
                out = f(*args)
                leaves, tree = tree_flatten(out)
                leaves = [common.match_aval(x, get_aval(x).update(weak_type=False)) if fix
                          else x for x, fix in zip(leaves, weak_fix)]
                return tree_unflatten(tree, leaves)
            return g
        traced = [common.trace_pytree_fun(strong(f), ops_tree, op_avals) for f in funs]
    # Hoist all consts: branch i takes (*all_consts, *ops) and ignores the others' consts.
    all_consts = [c for t in traced for c in t[1]]
    const_avals = common.avals_of(all_consts)
    branches = []
    offset = 0
    total = len(all_consts)
    for closed, consts, _ in traced:
        n_own = len(consts)

        def fun(*args, closed=closed, offset=offset, n=n_own):
            return common.jaxpr_fun(closed)(*args[offset:offset + n], *args[total:])
        jaxpr, jconsts = staging.trace_to_jaxpr(fun, const_avals + list(op_avals))
        branches.append(ClosedJaxpr(jaxpr, jconsts))
        offset += len(consts)
    return tuple(branches), all_consts, out_trees[0]


def _bind_cond(index, branches, consts, ops):
    return cond_p.bind(index, *consts, *ops, branches=branches)


def _index_of_pred(pred):
    from kiln import lax
    a = get_aval(pred)
    if a.shape != ():
        raise TypeError(f"Pred must be a scalar, got {pred} of shape {a.shape}.")
    if a.dtype != np.bool_ and a.dtype.kind not in "iuf":
        raise TypeError(f"Pred type must be either boolean or number, got {a.dtype.name}.")
    if a.dtype == np.bool_:
        return lax.convert_element_type(pred, np.int32)
    return lax.convert_element_type(lax.ne(pred, 0 if a.dtype.kind in "iu" else 0.0), np.int32)


def cond(pred, true_fun, false_fun, *operands, operand=None):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, as a primitive that
    works under jit/grad/vmap (both branches are traced; their output types must match)."""
    if operand is not None:
        if operands:
            raise TypeError("cond() got an unexpected keyword argument 'operand' together with "
                            "positional operands; pass operands positionally.")
        operands = (operand,)
    if not callable(true_fun) or not callable(false_fun):
        raise TypeError("lax.cond: true_fun and false_fun arguments should be callable.")
    ops_flat, ops_tree = tree_flatten(tuple(operands))
    index = _index_of_pred(pred)
    branches, consts, out_tree = _trace_branches(
        [false_fun, true_fun], ops_tree, common.avals_of(ops_flat), "cond")
    outs = _bind_cond(index, branches, consts, ops_flat)
    return tree_unflatten(out_tree, outs)


def switch(index, branches, *operands, operand=None):
    """``branches[clamp(index, 0, len(branches) - 1)](*operands)``."""
    from kiln import lax
    if operand is not None:
        operands = (operand,)
    branches = list(branches)
    if not branches:
        raise ValueError("Empty branch sequence")
    for b in branches:
        if not callable(b):
            raise TypeError("lax.switch: branches must be callable.")
    a = get_aval(index)
    if a.shape != ():
        raise TypeError(f"Branch index must be scalar, got {index} of shape {a.shape}.")
    if a.dtype.kind not in "iu":
        raise TypeError(f"Index type must be an integer, got {index} of type {a.dtype.name}")
    index = lax.convert_element_type(index, np.int32)
    index = lax.max(lax.min(index, np.int32(len(branches) - 1)), np.int32(0))
    ops_flat, ops_tree = tree_flatten(tuple(operands))
    if len(branches) == 1:
        return branches[0](*operands)
    brs, consts, out_tree = _trace_branches(branches, ops_tree, common.avals_of(ops_flat),
                                            "switch")
    outs = _bind_cond(index, brs, consts, ops_flat)
    return tree_unflatten(out_tree, outs)


# -- jvp ------------------------------------------------------------------------------------------

def _cond_jvp(primals, tangents, *, branches):
    index, *ops = primals
    nz = [type(t) is not Zero for t in tangents[1:]]
    inst = [ad.is_differentiable_dtype(a.dtype) for a in branches[0].out_avals]
    new = []
    out_nz = None
    for br in branches:
        jb, onz = common.jvp_jaxpr(br, nz, inst)
        new.append(jb)
        out_nz = onz
    nz_t = [t for t in tangents[1:] if type(t) is not Zero]
    outs = cond_p.bind(index, *ops, *nz_t, branches=tuple(new))
    n = len(branches[0].out_avals)
    p_out = outs[:n]
    it = iter(outs[n:])
    t_out = [next(it) if z else Zero.from_primal_value(p) for p, z in zip(p_out, out_nz)]
    return p_out, t_out


ad.jvp_rules[cond_p] = _cond_jvp


# -- partial evaluation (for linearize / grad) -----------------------------------------------------

def _cond_partial_eval(trace, args, params):
    from kiln.interpreters.pjit import partial_eval_jaxpr
    branches = params["branches"]
    index, *ops = args
    if trace.is_own(index):
        return trace.stage(cond_p, args, params)
    unknowns = [trace.is_own(x) for x in ops]
    # First pass: which outputs are unknown in any branch.
    out_uk = [False] * len(branches[0].out_avals)
    for br in branches:
        _, _, ou, _ = partial_eval_jaxpr(br, unknowns)
        out_uk = [a or b for a, b in zip(out_uk, ou)]
    splits = [partial_eval_jaxpr(br, unknowns, instantiate=out_uk) for br in branches]
    res_avals = []
    for known, _, _, num_res in splits:
        res_avals.append(known.out_avals[len(known.out_avals) - num_res:])
    all_res = [a for ra in res_avals for a in ra]
    n_known_out = sum(1 for u in out_uk if not u)
    # Known branches: known outputs + all residual slots (zeros for other branches').
    known_brs = []
    offset = 0
    for known, _, _, num_res in splits:
        k_in = [a for a, u in zip(br_in_avals(branches[0]), unknowns) if not u]

        def kfun(*xs, known=known, offset=offset, num_res=num_res):
            outs = common.jaxpr_fun(known)(*xs)
            kout, res = outs[:n_known_out], outs[n_known_out:]
            slots = [common.zeros(a) for a in all_res]
            slots[offset:offset + num_res] = res
            return list(kout) + slots

        kb, kconsts = staging.trace_to_jaxpr(kfun, k_in)
        known_brs.append(ClosedJaxpr(kb, kconsts))
        offset += num_res
    known_ops = [x for x, u in zip(ops, unknowns) if not u]
    with set_current_trace(trace.parent):
        kouts = cond_p.bind(index, *known_ops, branches=tuple(known_brs))
    known_outs, res = kouts[:n_known_out], kouts[n_known_out:]
    # Unknown branches: take (all residuals, unknown ops), use their own slice.
    unk_brs = []
    offset = 0
    uk_in = [a for a, u in zip(br_in_avals(branches[0]), unknowns) if u]
    for (_, unknown, _, num_res) in splits:
        def ufun(*xs, unknown=unknown, offset=offset, num_res=num_res):
            r, u = xs[:len(all_res)], xs[len(all_res):]
            outs = common.jaxpr_fun(unknown)(*r[offset:offset + num_res], *u)
            return [common.match_aval(o, a) for o, a in
                    zip(outs, [a for a, uk in zip(branches[0].out_avals, out_uk) if uk])]
        ub, uconsts = staging.trace_to_jaxpr(ufun, list(all_res) + uk_in)
        unk_brs.append(ClosedJaxpr(ub, uconsts))
        offset += num_res
    unknown_ops = [x for x, u in zip(ops, unknowns) if u]
    uouts = trace.stage(cond_p, [index, *res, *unknown_ops], dict(branches=tuple(unk_brs)),
                        out_avals=unk_brs[0].out_avals)
    ki, ui = iter(known_outs), iter(uouts)
    return [next(ui) if u else next(ki) for u in out_uk]


def br_in_avals(br):
    return br.in_avals


staging.partial_eval_rules[cond_p] = _cond_partial_eval


# -- transpose ------------------------------------------------------------------------------------

def _cond_transpose(cts, index, *ops, branches):
    if is_undefined_primal(index):
        raise ValueError("cond index cannot be linear")
    linear = [is_undefined_primal(x) for x in ops]
    ct_avals = branches[0].out_avals
    cts = [common.zeros(a) if type(c) is Zero else c for c, a in zip(cts, ct_avals)]
    t_brs = tuple(common.transpose_jaxpr(br, linear, ct_avals) for br in branches)
    nl = [x for x, lin in zip(ops, linear) if not lin]
    outs = cond_p.bind(index, *nl, *cts, branches=t_brs)
    it = iter(outs)
    return [None] + [next(it) if lin else None for lin in linear]


ad.transpose_rules[cond_p] = _cond_transpose


# -- batching -------------------------------------------------------------------------------------

def _cond_batch(axis_data, vals, dims, *, branches):
    from kiln import lax
    index, *ops = vals
    idim, *odims = dims
    ops = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(ops, odims)]
    in_dims = [None if d is None else 0 for d in odims]
    if idim is not None:
        # Batched predicate: evaluate every branch, then select per lane.
        index = batching.moveaxis(index, idim, 0)
        outs_per_branch = []
        for br in branches:
            bb, _ = common.batch_jaxpr(br, axis_data, in_dims, [True] * len(br.out_avals))
            outs_per_branch.append(common.jaxpr_fun(bb)(*ops))
        index = lax.max(lax.min(index, np.int32(len(branches) - 1)), np.int32(0))
        res = []
        for outs in zip(*outs_per_branch):
            shape = get_aval(outs[0]).shape
            which = lax.broadcast_in_dim(index, shape, (0,)) if len(shape) > 1 else index
            res.append(lax.select_n(which, *outs))
        return res, [0] * len(res)
    # Unbatched predicate: one cond of batched branches (outputs batched in any branch).
    out_b = [False] * len(branches[0].out_avals)
    for br in branches:
        _, ob = common.batch_jaxpr(br, axis_data, in_dims, [False] * len(out_b))
        out_b = [a or b for a, b in zip(out_b, ob)]
    new = tuple(common.batch_jaxpr(br, axis_data, in_dims, out_b)[0] for br in branches)
    outs = cond_p.bind(index, *ops, branches=new)
    return outs, [0 if b else None for b in out_b]


batching.batch_rules[cond_p] = _cond_batch
_ = (ShapedArray, Tracer)
