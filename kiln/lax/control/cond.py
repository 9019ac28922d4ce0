"""``lax.cond`` and ``lax.switch``: the ``cond`` primitive with its rules.

``cond[branches=(...)] index *operands`` runs ``branches[clamp(index)]``. Consts of the
branch functions are hoisted into the operands. A batched index turns into evaluating
every branch and selecting (``select_n``), as in JAX.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Var
from kiln.core.trace import Primitive, Tracer, get_aval, set_current_trace
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax.control import common

cond_p = Primitive("cond")
cond_p.multiple_results = True


def _cond_impl(index, *ops, branches):
    from kiln.core.jaxpr import check_lowerable, run_reference
    for br in branches:
        check_lowerable(br.jaxpr)
    i = int(np.clip(int(index), 0, len(branches) - 1))
    br = branches[i]
    return run_reference(br.jaxpr, br.consts, ops)


def _cond_abstract_eval(index, *ops, branches):
    if index.shape != () or index.dtype.kind not in "iu":
        raise TypeError(f"cond index must be a scalar integer, got {index.str_short()}")
    return list(branches[0].out_avals)


cond_p.impl = _cond_impl
cond_p.abstract_eval = _cond_abstract_eval
cond_p.weak_type_rule = lambda *w, branches: [a.weak_type for a in branches[0].out_avals]


def _cond_dce(used_outputs, eqn):
    """``eqn`` computing only its used outputs: each branch dead-code eliminated (with the
    rules of the equations inside it, as JAX's cond DCE rule); the operands are kept."""
    from kiln.interpreters.partial_eval import dce_jaxpr_consts
    branches = []
    for br in eqn.params["branches"]:
        body, used_consts, _ = dce_jaxpr_consts(br.jaxpr, used_outputs, instantiate=True)
        branches.append(ClosedJaxpr(body, [c for c, u in zip(br.consts, used_consts) if u]))
    return eqn.replace(outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
                       params=dict(eqn.params, branches=tuple(branches)))


cond_p.dce_rule = _cond_dce


# -- construction ------------------------------------------------------------------------------

def _trace_branches(funs, ops_tree, op_avals, what):
    # A function given as several branches is traced once (JAX's tracing cache is keyed
    # on the function: ``cond(p, f, f, x)`` calls ``f`` once; Haiku's tests count calls).
    by_id: dict = {}
    traced = []
    for f in funs:
        if id(f) not in by_id:
            by_id[id(f)] = common.trace_pytree_fun(f, ops_tree, op_avals)
        traced.append(by_id[id(f)])
    out_trees = [t[2] for t in traced]
    if what == "cond":   # funs are [false_fun, true_fun]; JAX compares true_fun to false_fun
        pairs = [(1, 0, "true_fun", "false_fun")]
    else:
        pairs = [(0, i, "branch 0", f"branch{i}") for i in range(1, len(funs))]
    for i, j, name1, name2 in pairs:
        _check_branch_outputs(what, name1, name2, funs[i], funs[j], out_trees[i],
                              traced[i][0].out_avals, out_trees[j], traced[j][0].out_avals)
    # Output types as JAX's: an output every branch forwards from the same operand is that
    # operand; any other takes branch 0's type (cond: false_fun's), weak type included.
    # Branches whose weak types differ are cast below, from their traced jaxprs: the
    # user's functions are traced once each, as in JAX.
    targets = list(traced[0][0].out_avals)
    for k in range(len(targets)):
        src = {_forwarded_operand(closed, len(consts), k) for closed, consts, _ in traced}
        if len(src) == 1 and None not in src:
            targets[k] = targets[k].update(weak_type=op_avals[src.pop()].weak_type)
    # Hoist all consts (each distinct value once): branch i takes (*all_consts, *ops).
    all_consts, const_ids = [], {}
    const_pos = []
    for t in traced:
        pos = []
        for c in t[1]:
            if id(c) not in const_ids:
                const_ids[id(c)] = len(all_consts)
                all_consts.append(c)
            pos.append(const_ids[id(c)])
        const_pos.append(pos)
    const_avals = common.avals_of(all_consts)
    branches = []
    total = len(all_consts)
    for (closed, _, _), pos in zip(traced, const_pos):
        def fun(*args, closed=closed, pos=pos):
            outs = common.jaxpr_fun(closed)(*[args[i] for i in pos], *args[total:])
            return [common.match_aval(o, a) for o, a in zip(outs, targets)]
        jaxpr, jconsts = staging.trace_to_jaxpr(fun, const_avals + list(op_avals))
        branches.append(ClosedJaxpr(jaxpr, jconsts))
    return tuple(branches), all_consts, out_trees[0]


def _forwarded_operand(closed, n_consts, k):
    """The operand index that output ``k`` of ``closed`` (taking ``(*consts, *ops)``) returns
    unchanged, or None."""
    v = closed.jaxpr.outvars[k]
    for i, inv in enumerate(closed.jaxpr.invars[n_consts:]):
        if v is inv:
            return i
    return None


def _check_branch_outputs(api_name, name1, name2, f1, f2, tree1, avals1, tree2, avals2):
    """TypeError in JAX's words when two branches' outputs differ in structure or type."""
    info = f"{name1} is {common.fun_sourceinfo(f1)}\n{name2} is {common.fun_sourceinfo(f2)}\n\n"
    paths = common.leaf_paths(tree1, len(avals1))

    def component(p):
        from kiln._physical_tree import keystr
        return f" at path {keystr(p)}" if p else ""

    if tree1 != tree2:
        diffs = common.structure_diffs(
            tree1, tree2, lambda p, t1, t2, why: (f"{name1} output{component(p)} is a {t1} but "
                                                  f"{name2} output{component(p)} is a {t2}, "
                                                  f"so {why}"))
        if not diffs:
            return
        raise TypeError(f"{api_name} branch outputs must have the same pytree structure, but "
                        f"they differ:\n\n{info}"
                        f"{common.join_differences(diffs, capitalize_single=False)}\n"
                        f"Revise {name1} and/or {name2} so that they have the same pytree "
                        "structure.")
    diffs = [f"the output of {name1}{component(p)} has type {a.str_short(False)} but the "
             f"corresponding output of {name2} has type {b.str_short(False)}"
             f"{common.mismatch_extra(a, b)}"
             for p, a, b in zip(paths, avals1, avals2) if not common.types_match(a, b)]
    if diffs:
        if len(diffs) == 1:
            differences = f"{common.capitalize(diffs[0])}.\n"
        else:
            differences = "\n".join(f"  * {d};" for d in diffs[:-1]) + f"\n  * {diffs[-1]}.\n"
        raise TypeError(f"{api_name} branches must have equal output types but they differ.\n\n"
                        f"{info}{differences}\n"
                        f"Revise {name1} and/or {name2} so that all output types match.")


def _bind_cond(index, branches, consts, ops):
    """Bind ``cond``; an output that every branch returns unchanged from the same operand is
    that operand, not an output of the primitive (JAX's forwarding: under ``vmap`` with a
    batched predicate such an output stays unbatched when its operand is)."""
    args = [*consts, *ops]
    fwd = _forwarded_outputs(branches)
    if not any(f is not None for f in fwd):
        return cond_p.bind(index, *args, branches=branches)
    keep = [k for k, f in enumerate(fwd) if f is None]
    new = tuple(ClosedJaxpr(Jaxpr(b.jaxpr.constvars, b.jaxpr.invars,
                                  [b.jaxpr.outvars[k] for k in keep], b.jaxpr.eqns,
                                  b.jaxpr.effects, b.jaxpr.debug_info), b.consts)
                for b in branches)
    # With every output forwarded the cond still runs when a branch has effects.
    effects = any(staging._jaxpr_has_effects(b.jaxpr) for b in branches)
    outs = iter(cond_p.bind(index, *args, branches=new) if keep or effects else [])
    return [next(outs) if f is None else _as_value(args[f]) for f in fwd]


def _as_value(x):
    """A forwarded operand as an array (a Python scalar operand becomes a weak one)."""
    from kiln.core import trace as core
    return x if isinstance(x, (core.Array, Tracer)) else core.to_array(x)


def _forwarded_outputs(branches):
    """Per output: the operand position every branch returns unchanged there, or None."""
    result = []
    for k in range(len(branches[0].out_avals)):
        pos = None
        for b in branches:
            v = b.jaxpr.outvars[k]
            if type(v) is not Var or v not in b.jaxpr.invars:
                pos = None
                break
            j = b.jaxpr.invars.index(v)
            if pos is not None and j != pos:
                pos = None
                break
            pos = j
        result.append(pos)
    return result


_no_operand = object()


def _operands(operands, operand):
    if operand is _no_operand:
        return operands
    if operands:
        raise TypeError("if 'operand' keyword is passed then no positional operands can be "
                        f"passed, got operand={operand!r} and positional operands {operands}")
    return (operand,)


def _index_of_pred(pred):
    from collections.abc import Sequence

    from kiln import dtypes, lax
    if pred is None:
        raise TypeError("cond predicate is None")
    if isinstance(pred, Sequence) or np.ndim(_shape_probe(pred)) != 0:
        raise TypeError(f"Pred must be a scalar, got {pred} of " +
                        (f"type {type(pred)}" if isinstance(pred, Sequence)
                         else f"shape {np.shape(_shape_probe(pred))}."))
    try:
        dt = dtypes.result_type(pred)
    except TypeError as err:
        raise TypeError(f"Pred type must be either boolean or number, got {pred}.") from err
    if dt == np.bool_:
        return lax.convert_element_type(pred, np.int32)
    if dt.kind not in "iuf":
        raise TypeError(f"Pred type must be either boolean or number, got {dt}.")
    return lax.convert_element_type(lax.ne(pred, 0), np.int32)


def _shape_probe(x):
    """Something ``np.shape`` can read without concretizing a tracer."""
    return np.empty(get_aval(x).shape) if isinstance(x, Tracer) else x


def _jit_disabled() -> bool:
    from kiln.config import config
    return bool(config.jax_disable_jit)


@api_boundary
def cond(pred, true_fun, false_fun, *operands, operand=_no_operand):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, as a primitive that
    works under jit/grad/vmap (both branches are traced; their output types must match).

    The deprecated forms ``cond(pred, operand=x, ...)`` and
    ``cond(pred, x_true, f_true, x_false, f_false)`` are accepted, as in JAX."""
    if not (callable(true_fun) and callable(false_fun)):
        if callable(false_fun) and len(operands) == 2 and callable(operands[1]):
            x_true, f_true, x_false, f_false = true_fun, false_fun, *operands
            return cond(pred, lambda x, _: f_true(x), lambda _, x: f_false(x), x_true, x_false)
        raise TypeError("lax.cond: true_fun and false_fun arguments should be callable.")
    operands = _operands(operands, operand)
    index = _index_of_pred(pred)
    if _jit_disabled() and not isinstance(index, Tracer):
        return true_fun(*operands) if int(np.asarray(index)) else false_fun(*operands)
    ops_flat, ops_tree = tree_flatten(tuple(operands))
    branches, consts, out_tree = _trace_branches(
        [false_fun, true_fun], ops_tree, common.avals_of(ops_flat), "cond")
    outs = _bind_cond(index, branches, consts, ops_flat)
    return tree_unflatten(out_tree, outs)


@api_boundary
def switch(index, branches, *operands, operand=_no_operand):
    """``branches[clamp(index, 0, len(branches) - 1)](*operands)``."""
    from kiln import dtypes, lax
    operands = _operands(operands, operand)
    if np.ndim(_shape_probe(index)) != 0:
        raise TypeError(f"Branch index must be scalar, got {index} of shape "
                        f"{np.shape(_shape_probe(index))}.")
    try:
        dt = dtypes.result_type(index)
    except TypeError as err:
        raise TypeError(f"Index type must be an integer, got {index}.") from err
    if dt.kind not in "iu":
        raise TypeError(f"Index type must be an integer, got {index} as {dt}")
    branches = tuple(branches)
    if not branches:
        raise ValueError("Empty branch sequence")
    for b in branches:
        if not callable(b):
            raise TypeError("lax.switch: branches must be callable.")
    if len(branches) == 1:
        return branches[0](*operands)
    index = lax.convert_element_type(index, np.int32)
    index = lax.max(lax.min(index, np.int32(len(branches) - 1)), np.int32(0))
    if _jit_disabled() and not isinstance(index, Tracer):
        return branches[int(np.asarray(index))](*operands)
    ops_flat, ops_tree = tree_flatten(tuple(operands))
    brs, consts, out_tree = _trace_branches(branches, ops_tree, common.avals_of(ops_flat),
                                            "switch")
    outs = _bind_cond(index, brs, consts, ops_flat)
    return tree_unflatten(out_tree, outs)


# -- jvp ------------------------------------------------------------------------------------------

def _cond_jvp(primals, tangents, *, branches):
    index, *ops = primals
    nz = [type(t) is not Zero for t in tangents[1:]]
    # As JAX: an output's tangent is symbolically zero unless some branch makes it
    # nonzero (then every branch instantiates it), so zeros stay symbolic through a cond
    # (rules such as ``custom_jvp``s further on see them as ``Zero``).
    n_out = len(branches[0].out_avals)
    inst = [False] * n_out
    for br in branches:
        _, onz = common.jvp_jaxpr(br, nz, [False] * n_out)
        inst = [a or b for a, b in zip(inst, onz)]
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
    all_res, where = _merge_residual_slots(res_avals)
    n_known_out = sum(1 for u in out_uk if not u)
    # Known branches: known outputs + the residual slots (zeros in the slots a branch
    # does not use).
    known_brs = []
    for (known, _, _, _), to in zip(splits, where):
        k_in = [a for a, u in zip(br_in_avals(branches[0]), unknowns) if not u]

        def kfun(*xs, known=known, to=to):
            outs = common.jaxpr_fun(known)(*xs)
            kout, res = outs[:n_known_out], outs[n_known_out:]
            slots = [None] * len(all_res)
            for r, j in zip(res, to):
                slots[j] = r
            slots = [common.zeros(a) if r is None else r for r, a in zip(slots, all_res)]
            return list(kout) + slots

        kb, kconsts = staging.trace_to_jaxpr(kfun, k_in)
        known_brs.append(ClosedJaxpr(kb, kconsts))
    known_ops = [x for x, u in zip(ops, unknowns) if not u]
    with set_current_trace(trace.parent):
        kouts = cond_p.bind(index, *known_ops, branches=tuple(known_brs))
    known_outs, res = kouts[:n_known_out], kouts[n_known_out:]
    # Unknown branches: take (all residuals, unknown ops), use their own slice.
    unk_brs = []
    uk_in = [a for a, u in zip(br_in_avals(branches[0]), unknowns) if u]
    for (_, unknown, _, _), to in zip(splits, where):
        def ufun(*xs, unknown=unknown, to=to):
            r, u = xs[:len(all_res)], xs[len(all_res):]
            outs = common.jaxpr_fun(unknown)(*[r[j] for j in to], *u)
            return [common.match_aval(o, a) for o, a in
                    zip(outs, [a for a, uk in zip(branches[0].out_avals, out_uk) if uk])]
        ub, uconsts = staging.trace_to_jaxpr(ufun, list(all_res) + uk_in)
        unk_brs.append(ClosedJaxpr(ub, uconsts))
    unknown_ops = [x for x, u in zip(ops, unknowns) if u]
    uouts = trace.stage(cond_p, [index, *res, *unknown_ops], dict(branches=tuple(unk_brs)),
                        out_avals=unk_brs[0].out_avals)
    ki, ui = iter(known_outs), iter(uouts)
    return [next(ui) if u else next(ki) for u in out_uk]


def _merge_residual_slots(res_avals):
    """Shared residual slots for the branches of a partially evaluated ``cond``: a
    branch's residual takes a slot of its type (shape, dtype, weak type) that the branch
    does not use yet, and a new slot only when there is none (as JAX merges them: a
    ``switch`` whose branches each keep one float32 residual passes one, not one per
    branch). Returns the slots' avals and, per branch, the slot of each residual."""
    slots: list = []
    where = []
    for ra in res_avals:
        used: set = set()
        to = []
        for a in ra:
            key = (a.shape, a.dtype, getattr(a, "weak_type", False))
            j = next((j for j, s in enumerate(slots) if j not in used and
                      (s.shape, s.dtype, getattr(s, "weak_type", False)) == key), None)
            if j is None:
                j = len(slots)
                slots.append(a)
            used.add(j)
            to.append(j)
        where.append(to)
    return slots, where


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

def _select_lanes(pred, x, y):
    """``select(pred, x, y)`` with the per-lane ``pred`` (batch axis 0) broadcast to x."""
    from kiln import lax
    shape = get_aval(x).shape
    if len(shape) > 1:
        pred = lax.broadcast_in_dim(pred, shape, (0,))
    return lax.select(pred, x, y)


def _cond_batch(axis_data, vals, dims, *, branches):
    from kiln import lax
    index, *ops = vals
    idim, *odims = dims
    ops = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(ops, odims)]
    in_dims = [None if d is None else 0 for d in odims]
    if idim is not None:
        if common.has_ref_operands(common.avals_of(ops)):
            raise common.state_under_batched_predicate("cond")
        if any(common.has_io_callback(br) for br in branches):
            raise NotImplementedError("IO effect not supported in vmap-of-cond.")
        # Batched predicate: evaluate every branch, then select per lane.
        index = batching.moveaxis(index, idim, 0)
        index = lax.max(lax.min(index, np.int32(len(branches) - 1)), np.int32(0))
        # As JAX: each branch sees its inexact operands through select(taken, x,
        # stop_gradient(x)), so that reverse mode sends no cotangent into the lanes a
        # branch does not take (else 0 * inf = NaN from e.g. sqrt's derivative at 0).
        inexact = [dtypes.issubdtype(get_aval(x).dtype, np.inexact) for x in ops]
        b_ops = [batching.broadcast(x, axis_data.size, 0) if d is None and f else x
                 for x, d, f in zip(ops, in_dims, inexact)]
        b_dims = [0 if f else d for d, f in zip(in_dims, inexact)]
        outs_per_branch = []
        for i, br in enumerate(branches):
            taken = lax.eq(index, np.int32(i))
            br_ops = [_select_lanes(taken, x, lax.stop_gradient(x)) if f else x
                      for x, f in zip(b_ops, inexact)]
            bb, _ = common.batch_jaxpr(br, axis_data, b_dims, [True] * len(br.out_avals))
            outs_per_branch.append(common.jaxpr_fun(bb)(*br_ops))
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


def platform_dependent(*args, default=None, **per_platform):
    """``per_platform[platform](*args)`` for the platform the computation runs on
    (``lax.platform_dependent``), else ``default(*args)``.

    kiln runs everything on its CPU backend, and its compiled and eager code are the
    same platform, so the choice is made when the call is traced: the ``'cpu'`` branch
    (or ``default``) is the one staged, as JAX's lowering for CPU keeps only that branch;
    the others are never called. Platform names are JAX's (``'cpu'``, ``'tpu'``,
    ``'cuda'``, ``'rocm'``, ...).

    Raises:
      TypeError: a branch (or ``default``) is not callable.
      ValueError: a branch is named ``'gpu'`` (use ``'cuda'`` or ``'rocm'``).
      NotImplementedError: neither a ``'cpu'`` branch nor ``default`` is given (JAX's
        error when lowering for a platform without a branch).
    """
    for name, branch in per_platform.items():
        if not callable(branch):
            raise TypeError(f"lax.platform_dependent: the '{name}' branch must be a "
                            "callable.")
        if name == "gpu":
            raise ValueError("Use 'cuda' or 'rocm' for lax.platform_dependent.")
    if default is not None and not callable(default):
        raise TypeError("lax.platform_dependent: the 'default' branch must be a callable.")
    branch = per_platform.get("cpu", default)
    if branch is None:
        groups: list = []
        for name, b in per_platform.items():
            for g in groups:
                if g[1] is b:
                    g[0].append(name)
                    break
            else:
                groups.append(([name], b))
        platforms = tuple(tuple(g[0]) for g in groups)
        raise NotImplementedError(
            f"MLIR translation rule for primitive 'platform_index(platforms={platforms})' "
            "not found for platform cpu")
    return branch(*args)
