"""``lax.while_loop``, ``lax.fori_loop``, ``lax.scan`` and ``lax.map``: the ``while`` and
``scan`` primitives with their rules.

``while[cond_jaxpr body_jaxpr cond_nconsts body_nconsts] *cond_consts *body_consts *init``
and ``scan[jaxpr length reverse num_consts num_carry linear unroll] *consts *init *xs``.
The body is traced once, so staging cost does not depend on the trip count.
"""
from __future__ import annotations

import weakref

import numpy as np

from kiln._fp_warnings import quiet
from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, check_lowerable
from kiln.core.trace import Primitive, Tracer, get_aval, set_current_trace
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax.control import common
from kiln.lax.control import masked_scatter as _masked


def _carry_component(body_fun):
    """How JAX names a carry component: by the body's first parameter and a key path."""
    import inspect

    from kiln._physical_tree import keystr
    try:
        params = list(inspect.signature(body_fun).parameters)
    except (TypeError, ValueError):
        params = []
    name = params[0] if params else None
    if name:
        return lambda p: (f"the input carry component {name}{keystr(p)}" if p
                          else f"the input carry {name}")
    return lambda p: (f"the input carry at path {keystr(p)}" if p else "the input carry")


def _check_carry_structure(what, body_fun, in_tree, out_tree):
    """TypeError (JAX's text) when the body's carry output has another pytree structure."""
    if in_tree == out_tree:
        return
    component = _carry_component(body_fun)
    diffs = common.structure_diffs(
        in_tree, out_tree,
        lambda p, t1, t2, why: (f"{component(p)} is a {t1} but the corresponding component "
                                f"of the carry output is a {t2}, so {why}"),
        leaf=ShapedArray((), np.float32))
    if not diffs:
        differences = (f"the input tree structure is:\n{in_tree}\n"
                       f"the output tree structure is:\n{out_tree}\n")
    else:
        differences = common.join_differences(diffs)
    raise TypeError(f"{what} function carry input and carry output must have the same pytree "
                    f"structure, but they differ:\n\n{differences}\n"
                    "Revise the function so that the carry output has the same pytree structure "
                    "as the carry input.")


def _check_carry_types(what, body_fun, in_tree, in_avals, out_avals):
    """TypeError (JAX's text) when carry output shapes/dtypes differ from the input's."""
    if all(common.types_match(a, b) for a, b in zip(in_avals, out_avals)):
        return
    component = _carry_component(body_fun)
    paths = common.leaf_paths(in_tree, len(in_avals))
    diffs = [f"{component(p)} has type {a.str_short(False)} but the corresponding output carry "
             f"component has type {b.str_short(False)}{common.mismatch_extra(a, b)}"
             for p, a, b in zip(paths, in_avals, out_avals) if not common.types_match(a, b)]
    raise TypeError(f"{what} function carry input and carry output must have equal types, but "
                    f"they differ:\n\n{common.join_differences(diffs)}\n"
                    "Revise the function so that all output types match the corresponding input "
                    "types.")


def _promote_weak_inputs(init_flat, in_avals, out_avals):
    """Weakly typed initial carries (Python scalars) whose type differs from the body's
    output are promoted to the joined dtype, as JAX does (``0`` carry + float body is fine).
    Returns ``(new_init_flat, changed)``."""
    from kiln import dtypes
    from kiln.lax.structural import convert_element_type
    out, changed = [], False
    for x, a, b in zip(init_flat, in_avals, out_avals):
        if a.weak_type and not common.types_match(a, b):
            x = convert_element_type(x, dtypes.result_type(a, b))
            changed = True
        out.append(x)
    return out, changed


def _weak_fix(in_avals, out_avals):
    """Carries whose weak type differs between input and output become strong."""
    return [a.weak_type != b.weak_type for a, b in zip(in_avals, out_avals)]


def _strengthen(xs, fix):
    return [common.match_aval(x, get_aval(x).update(weak_type=False)) if f else x
            for x, f in zip(xs, fix)]


def _restage_carry(closed, consts, carry_avals, n_carry):
    """``closed`` (taking ``(*consts, *carry, *rest)``) staged again with the carry inputs
    of type ``carry_avals`` and its first ``n_carry`` outputs cast to them, by evaluating
    the traced jaxpr: the user's function is not called again. (JAX traces a loop body a
    second time only to promote a weak carry's dtype; a weak/strong difference alone is
    no retrace, and a body with side effects, e.g. one advancing a key stored on an
    object, sees one trace.) Returns ``(closed, consts)``."""
    n = len(consts)
    in_avals = list(closed.in_avals)
    in_avals[n:n + n_carry] = carry_avals

    def restaged(*args):
        outs = common.jaxpr_fun(closed)(*args)
        return ([common.match_aval(o, a) for o, a in zip(outs[:n_carry], carry_avals)]
                + list(outs[n_carry:]))
    new_closed, new_consts = common.trace_jaxpr(restaged, in_avals)
    return new_closed, [*new_consts, *consts]


# ================================================================================================
# while
# ================================================================================================

while_p = Primitive("while")
while_p.multiple_results = True


def _fp_quiet(impl):
    """Run a loop's impl with NumPy's floating-point warnings off, as the reference backend
    runs programs (JAX is silent; a warning turned into an error must not abort a loop
    midway, whose effects could not be rerun)."""
    def run(*args, **params):
        with quiet():       # remembers the user's error state for callbacks in the body
            return impl(*args, **params)
    run.__name__ = impl.__name__
    return run


@_fp_quiet
def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    check_lowerable(cond_jaxpr.jaxpr)
    check_lowerable(body_jaxpr.jaxpr)
    cc = args[:cond_nconsts]
    bc = args[cond_nconsts:cond_nconsts + body_nconsts]
    carry = list(args[cond_nconsts + body_nconsts:])
    cond = common.LoopBody(cond_jaxpr, cc)
    body = None     # prepared on the first iteration (hoisted work must not run for none)
    while bool(cond(carry)[0]):
        if body is None:
            body = common.LoopBody(body_jaxpr, bc)
        carry = body(carry)
    return carry


while_p.impl = _while_impl
while_p.abstract_eval = lambda *avals, body_jaxpr, **_: list(body_jaxpr.out_avals)
while_p.weak_type_rule = lambda *w, body_jaxpr, **_: [a.weak_type for a in
                                                      body_jaxpr.out_avals]


def _trace_carry_fun(fun, tree, avals):
    """Trace ``fun(carry_pytree)``; returns ``(closed, consts, out_tree)``."""
    store = {}

    def flat(*xs):
        out = fun(tree_unflatten(tree, list(xs)))
        leaves, out_tree = tree_flatten(out)
        store["tree"] = out_tree
        return leaves

    closed, consts = common.trace_jaxpr(flat, avals)
    return closed, consts, store["tree"]


@api_boundary
def while_loop(cond_fun, body_fun, init_val):
    """``while cond_fun(val): val = body_fun(val)`` as a primitive (forward-mode
    differentiable; for reverse mode use ``scan`` or ``fori_loop`` with static bounds)."""
    if not callable(cond_fun) or not callable(body_fun):
        raise TypeError("lax.while_loop: cond_fun and body_fun arguments should be callable.")
    if _jit_disabled():
        # As in JAX: under disable_jit the loop runs in Python when it can.
        from kiln._physical_tree import tree_map
        from kiln.errors import ConcretizationTypeError
        try:
            val = tree_map(_asarray, init_val)
            while cond_fun(val):
                val = body_fun(val)
            return val
        except ConcretizationTypeError:
            pass
    init_flat, in_tree = tree_flatten(init_val)
    in_avals = common.avals_of(init_flat)
    body, body_consts, out_tree = _trace_carry_fun(body_fun, in_tree, in_avals)
    _check_carry_structure("while_loop body", body_fun, in_tree, out_tree)
    init_flat, changed = _promote_weak_inputs(init_flat, in_avals, body.out_avals)
    if changed:
        in_avals = common.avals_of(init_flat)
        body, body_consts, out_tree = _trace_carry_fun(body_fun, in_tree, in_avals)
    _check_carry_types("while_loop body", body_fun, in_tree, in_avals, body.out_avals)
    fix = _weak_fix(in_avals, body.out_avals)
    if any(fix):
        init_flat = _strengthen(init_flat, fix)
        in_avals = common.avals_of(init_flat)
        body, body_consts = _restage_carry(body, body_consts, in_avals, len(in_avals))
    cond, cond_consts, _ = _trace_carry_fun(cond_fun, in_tree, in_avals)
    ca = cond.out_avals
    if len(ca) != 1 or ca[0].shape != () or ca[0].dtype != np.bool_:
        raise TypeError("cond_fun must return a boolean scalar, but got output type(s) "
                        f"[{', '.join(repr(a) for a in ca)}].")
    outs = while_p.bind(*cond_consts, *body_consts, *init_flat, cond_jaxpr=cond,
                        body_jaxpr=body, cond_nconsts=len(cond_consts),
                        body_nconsts=len(body_consts))
    return tree_unflatten(in_tree, outs)


def _jit_disabled() -> bool:
    from kiln.config import config
    return bool(config.jax_disable_jit)


def _asarray(x):
    from kiln.core.trace import to_array
    return x if isinstance(x, Tracer) else to_array(x)


# -- jvp ------------------------------------------------------------------------------------------

def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    nc, nb = cond_nconsts, body_nconsts
    cc, bc, init = primals[:nc], primals[nc:nc + nb], primals[nc + nb:]
    bc_t, init_t = tangents[nc:nc + nb], tangents[nc + nb:]
    bc_nz = [type(t) is not Zero for t in bc_t]
    carry_nz = [type(t) is not Zero for t in init_t]
    # Fixed point: a carry tangent is nonzero if it is initially or the body makes it so.
    while True:
        _, out_nz = common.jvp_jaxpr(body_jaxpr, bc_nz + carry_nz, [False] * len(carry_nz))
        new = [a or b for a, b in zip(carry_nz, out_nz)]
        if new == carry_nz:
            break
        carry_nz = new
    body_jvp, _ = common.jvp_jaxpr(body_jaxpr, bc_nz + carry_nz, carry_nz)
    # Reorder body_jvp: inputs (bc, carry, bc_t, carry_t) -> (bc, bc_t, carry, carry_t).
    n_bc_t = sum(bc_nz)
    n_carry = len(init)
    n_ct = sum(carry_nz)

    def body_fun(*args):
        b, bt = args[:nb], args[nb:nb + n_bc_t]
        c, ct = args[nb + n_bc_t:nb + n_bc_t + n_carry], args[nb + n_bc_t + n_carry:]
        outs = common.jaxpr_fun(body_jvp)(*b, *c, *bt, *ct)
        return outs
    bc_t_nz = [t for t in bc_t if type(t) is not Zero]
    carry_avals = list(body_jaxpr.out_avals)
    t_avals = [ad.tangent_aval(a) for a, z in zip(carry_avals, carry_nz) if z]
    bj, bconsts = staging.trace_to_jaxpr(
        body_fun, common.avals_of(bc) + common.avals_of(bc_t_nz) + carry_avals + t_avals)
    new_body = ClosedJaxpr(bj, bconsts)

    def cond_fun(*args):
        return common.jaxpr_fun(cond_jaxpr)(*args[:nc + n_carry])
    cj, cconsts = staging.trace_to_jaxpr(cond_fun, common.avals_of(cc) + carry_avals + t_avals)
    new_cond = ClosedJaxpr(cj, cconsts)
    init_t_nz = [ad.instantiate_zeros(t) for t, z in zip(init_t, carry_nz) if z]
    outs = while_p.bind(*cc, *bc, *bc_t_nz, *init, *init_t_nz, cond_jaxpr=new_cond,
                        body_jaxpr=new_body, cond_nconsts=nc, body_nconsts=nb + n_bc_t)
    p_out = outs[:n_carry]
    it = iter(outs[n_carry:])
    t_out = [next(it) if z else Zero.from_primal_value(p) for p, z in zip(p_out, carry_nz)]
    del n_ct
    return p_out, t_out


ad.jvp_rules[while_p] = _while_jvp


# -- partial eval: known carries run now; the whole loop is staged for unknown ones -------------

def _while_partial_eval(trace, args, params):
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    body = params["body_jaxpr"]
    unknown = [trace.is_own(x) for x in args]
    if any(unknown[:nc]):
        return trace.stage(while_p, args, params)
    bc_uk = unknown[nc:nc + nb]
    carry_uk = unknown[nc + nb:]
    from kiln.interpreters.pjit import partial_eval_jaxpr
    while True:
        _, _, out_uk, _ = partial_eval_jaxpr(body, bc_uk + carry_uk)
        new = [a or b for a, b in zip(carry_uk, out_uk)]
        if new == carry_uk:
            break
        carry_uk = new
    if not any(carry_uk):
        with set_current_trace(trace.parent):
            return while_p.bind(*args, **params)
    # Known carries: a while over the known part only (the unknown carries never feed them).
    known_idx = [i for i, u in enumerate(carry_uk) if not u]
    # Body consts that are unknown (e.g. tangents of closed-over values) cannot feed the
    # known carries (that is what the fixed point established): they are replaced by zeros.
    bc_known = [j for j, u in enumerate(bc_uk) if not u]
    nkb = len(bc_known)
    outs_known = None
    if known_idx:
        carry_avals = body.out_avals
        bc_avals = body.in_avals[:nb]

        def kbody(*xs):
            kb, c = xs[:nkb], xs[nkb:]
            bfull, it = [], iter(kb)
            for j, a in enumerate(bc_avals):
                bfull.append(next(it) if j in bc_known else common.zeros(a))
            full = []
            it = iter(c)
            for i, a in enumerate(carry_avals):
                full.append(next(it) if i in known_idx else common.zeros(a))
            outs = common.jaxpr_fun(body)(*bfull, *full)
            return [outs[i] for i in known_idx]

        def kcond(*xs):
            cc_, c = xs[:nc], xs[nc:]
            full = []
            it = iter(c)
            for i, a in enumerate(carry_avals):
                full.append(next(it) if i in known_idx else common.zeros(a))
            return common.jaxpr_fun(params["cond_jaxpr"])(*cc_, *full)

        k_avals = [carry_avals[i] for i in known_idx]
        bjx, bjc = staging.trace_to_jaxpr(kbody, [bc_avals[j] for j in bc_known] + k_avals)
        cjx, cjc = staging.trace_to_jaxpr(kcond, list(params["cond_jaxpr"].in_avals[:nc])
                                          + k_avals)
        init = args[nc + nb:]
        body_consts = args[nc:nc + nb]
        with set_current_trace(trace.parent):
            outs_known = while_p.bind(*args[:nc], *[body_consts[j] for j in bc_known],
                                      *[init[i] for i in known_idx],
                                      cond_jaxpr=ClosedJaxpr(cjx, cjc),
                                      body_jaxpr=ClosedJaxpr(bjx, bjc), cond_nconsts=nc,
                                      body_nconsts=nkb)
    staged = trace.stage(while_p, args, params)
    if outs_known is None:
        return staged
    ki = iter(outs_known)
    return [s if u else next(ki) for s, u in zip(staged, carry_uk)]


staging.partial_eval_rules[while_p] = _while_partial_eval


def _while_transpose(cts, *args, **params):
    raise ValueError(
        "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
        "dynamic start/stop values. Try using lax.scan, or using fori_loop with static "
        "start/stop.")


ad.transpose_rules[while_p] = _while_transpose


# -- batching -------------------------------------------------------------------------------------

#: The predicates of loops that ``vmap`` made from a batched predicate (any lane still
#: running): the loop JAX keeps with a batched predicate, which ``checkify`` refuses.
batched_predicates: weakref.WeakSet = weakref.WeakSet()


def _while_batch(axis_data, vals, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    from kiln import lax
    nc, nb = cond_nconsts, body_nconsts
    size = axis_data.size
    vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    b = [d is not None for d in dims]
    cc_b, bc_b, carry_b = b[:nc], b[nc:nc + nb], b[nc + nb:]
    # Fixed point over which carries are batched (through the body and the predicate).
    while True:
        _, out_b = common.batch_jaxpr(body_jaxpr, axis_data,
                                      [0 if x else None for x in bc_b + carry_b],
                                      [False] * len(carry_b))
        new = [x or y for x, y in zip(carry_b, out_b)]
        _, pred_b = common.batch_jaxpr(cond_jaxpr, axis_data,
                                       [0 if x else None for x in cc_b + new], [False])
        if pred_b[0]:
            new = [True] * len(new)   # lanes finish at different times: every carry is per-lane
        if new == carry_b:
            break
        carry_b = new
    pred_batched = common.batch_jaxpr(cond_jaxpr, axis_data,
                                      [0 if x else None for x in cc_b + carry_b], [False])[1][0]
    if pred_batched and common.has_ref_operands(common.avals_of(vals[:nc + nb])):
        raise common.state_under_batched_predicate("while")
    if pred_batched and (common.has_io_callback(body_jaxpr) or common.has_io_callback(cond_jaxpr)):
        # The lanes would run the callback past their own end (JAX refuses too).
        raise NotImplementedError("IO effect not supported in while_loop with batched "
                                  "predicate.")
    init = [batching.broadcast_batched(v, size, 0) if cb and not ob else v
            for v, cb, ob in zip(vals[nc + nb:], carry_b, b[nc + nb:])]
    body_b, _ = common.batch_jaxpr(body_jaxpr, axis_data,
                                   [0 if x else None for x in bc_b + carry_b], carry_b)
    cond_b, _ = common.batch_jaxpr(cond_jaxpr, axis_data,
                                   [0 if x else None for x in cc_b + carry_b], [pred_batched])
    if not pred_batched:
        outs = while_p.bind(*vals[:nc + nb], *init, cond_jaxpr=cond_b, body_jaxpr=body_b,
                            cond_nconsts=nc, body_nconsts=nb)
        return outs, [0 if x else None for x in carry_b]
    # Batched predicate: loop while any lane is active; inactive lanes keep their values.
    n_carry = len(init)
    carry_avals = common.avals_of(init)
    cc_avals = common.avals_of(vals[:nc])
    bc_avals = common.avals_of(vals[nc:nc + nb])

    def new_cond(*xs):
        c_consts, carry = xs[:nc], xs[nc:]
        pred = common.jaxpr_fun(cond_b)(*c_consts, *carry)[0]
        return [lax.reduce_or(pred, (0,))]

    masked = _masked.maskable_outputs(body_b.jaxpr, nb)

    def new_body(*xs):
        c_consts = xs[:nc]
        b_consts = xs[nc:nc + nb]
        carry = xs[nc + nb:]
        pred = common.jaxpr_fun(cond_b)(*c_consts, *carry)[0]
        if masked:     # scatters into a carry: inactive lanes' updates are dropped
            new = _masked.eval_masked(body_b, [*b_consts, *carry], masked, pred)
        else:
            new = common.jaxpr_fun(body_b)(*b_consts, *carry)
        out = []
        done = set(masked.values())
        for k, (old, nw) in enumerate(zip(carry, new)):
            if k in done:
                out.append(nw)
                continue
            shape = get_aval(nw).shape
            which = lax.broadcast_in_dim(pred, shape, (0,)) if len(shape) > 1 else pred
            out.append(lax.select(which, nw, old))
        return out

    cj, cjc = staging.trace_to_jaxpr(new_cond, cc_avals + carry_avals)
    bj, bjc = staging.trace_to_jaxpr(new_body, cc_avals + bc_avals + carry_avals)
    cond_closed = ClosedJaxpr(cj, cjc)
    batched_predicates.add(cond_closed)
    outs = while_p.bind(*vals[:nc], *vals[:nc], *vals[nc:nc + nb], *init,
                        cond_jaxpr=cond_closed, body_jaxpr=ClosedJaxpr(bj, bjc),
                        cond_nconsts=nc, body_nconsts=nc + nb)
    del n_carry
    return outs, [0] * len(outs)


batching.batch_rules[while_p] = _while_batch


# ================================================================================================
# scan
# ================================================================================================

scan_p = Primitive("scan")
scan_p.multiple_results = True


@_fp_quiet
def _scan_impl(*args, jaxpr, length, reverse, num_consts, num_carry, linear, unroll,
               _split_transpose=False):
    check_lowerable(jaxpr.jaxpr)
    consts = args[:num_consts]
    carry = list(args[num_consts:num_consts + num_carry])
    xs = args[num_consts + num_carry:]
    ys_avals = jaxpr.out_avals[num_carry:]
    ys = [np.empty((length,) + a.shape, a.dtype) for a in ys_avals]
    body = common.LoopBody(jaxpr, consts) if length else None
    order = range(length - 1, -1, -1) if reverse else range(length)
    for i in order:
        outs = body([*carry, *[x[i] for x in xs]])
        carry = outs[:num_carry]
        for y, o in zip(ys, outs[num_carry:]):
            y[i] = o
    return list(carry) + ys


def _scan_abstract_eval(*avals, jaxpr, length, num_carry, **_):
    outs = jaxpr.out_avals
    return list(outs[:num_carry]) + [ShapedArray((length,) + a.shape, a.dtype, a.weak_type)
                                     for a in outs[num_carry:]]


scan_p.impl = _scan_impl
scan_p.abstract_eval = _scan_abstract_eval
scan_p.weak_type_rule = lambda *w, jaxpr, num_carry, **_: [a.weak_type for a in
                                                           jaxpr.out_avals]


def _scan_params(jaxpr, length, reverse, num_consts, num_carry, unroll=1):
    return dict(jaxpr=jaxpr, length=int(length), reverse=bool(reverse),
                num_consts=num_consts, num_carry=num_carry,
                linear=tuple([False] * len(jaxpr.in_avals)), unroll=unroll,
                _split_transpose=False)


@api_boundary
def scan(f, init, xs=None, length=None, reverse: bool = False, unroll=1,
         _split_transpose: bool = False):
    """Scan ``f: (carry, x) -> (carry, y)`` over the leading axis of ``xs``.

    Returns ``(final_carry, stacked_ys)``. The body is traced once."""
    if not callable(f):
        raise TypeError("lax.scan: f argument should be a callable.")
    xs_flat, xs_tree = tree_flatten(xs)
    lengths = set()
    for x in xs_flat:
        a = get_aval(x)
        if a.ndim == 0:
            raise ValueError("scan got value with no leading axis to scan over: "
                             f"{a.str_short()}.")
        lengths.add(a.shape[0])
    if length is not None:
        length = int(length)
        if lengths and lengths != {length}:
            raise ValueError(f"scan got `length` argument of {length} which disagrees with "
                             f"leading axis sizes {sorted(lengths)}.")
    else:
        if not lengths:
            raise ValueError("scan got no values to scan over and `length` not provided.")
        if len(lengths) > 1:
            raise ValueError("scan got values with different leading axis sizes: "
                             + ", ".join(str(get_aval(x).shape[0]) for x in xs_flat) + ".")
        length = lengths.pop()
    if isinstance(unroll, bool):
        unroll = max(length, 1) if unroll else 1
    unroll = int(unroll)
    if unroll < 0:
        raise ValueError("`unroll` must be a `bool` or a non-negative `int`.")
    if _jit_disabled():
        return _scan_in_python(f, init, xs_flat, xs_tree, length, reverse)
    from kiln import _hijax
    try:
        return _scan_traced(f, init, xs_flat, xs_tree, length, reverse, unroll)
    except _hijax.CapturedHiWrite as e:
        return _scan_carrying_hijax(f, init, xs, length, reverse, unroll, e.objs)


def _scan_carrying_hijax(f, init, xs, length, reverse, unroll, objs):
    """``scan`` of a body that writes into hijax values it closed over (Flax NNX's hijax
    Variables): those values' low-level contents become extra carries, and their final
    values are written back, as JAX does."""
    from kiln import _hijax
    from kiln.core.trace import current_trace
    lowered = [_hijax.lower(o) for o in objs]

    def body(c2, x):
        c, caps = c2
        snaps = [_hijax.snapshot(o) for o in objs]
        for o, (spec, _), vals in zip(objs, lowered, caps):
            _hijax.mark_owned(current_trace(), o)
            _hijax.write_back(spec, o, spec.qdd, list(vals))
        c_out, y = f(c, x)
        outs = []
        for o, (spec, _) in zip(objs, lowered):
            qdd, vals = _hijax.final(spec, o)
            if qdd != spec.qdd:
                raise TypeError("scan body changed the structure of a hijax value it closed "
                                f"over: {spec.qdd} became {qdd}")
            outs.append(vals)
        for o, snap in zip(objs, snaps):
            _hijax.restore(o, snap)
        return (c_out, outs), y

    (carry, caps), ys = scan(body, (init, [vals for _, vals in lowered]), xs, length=length,
                             reverse=reverse, unroll=unroll)
    for o, (spec, _), vals in zip(objs, lowered, caps):
        _hijax.write_back(spec, o, spec.qdd, list(vals))
    return carry, ys


def _scan_traced(f, init, xs_flat, xs_tree, length, reverse, unroll):
    init_flat, init_tree = tree_flatten(init)
    carry_avals = common.avals_of(init_flat)
    x_avals = [ShapedArray(get_aval(x).shape[1:], get_aval(x).dtype, get_aval(x).weak_type)
               for x in xs_flat]
    n_carry = len(init_flat)

    def trace(carry_avals):
        return common.cached_trace(
            f, ("scan", init_tree, xs_tree, tuple(carry_avals), tuple(x_avals)),
            lambda: _trace(carry_avals))

    def _trace(carry_avals):
        store = {}

        def body(*args):
            c = tree_unflatten(init_tree, list(args[:n_carry]))
            x = tree_unflatten(xs_tree, list(args[n_carry:]))
            out = f(c, x)
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                from kiln._physical_tree import tree_map
                shown = tree_map(lambda v: ("~" if get_aval(v).weak_type else "")
                                 + get_aval(v).str_short(False), out)
                raise TypeError(f"scan body output must be a pair, got {shown}.")
            new_c, y = out
            c_leaves, c_tree = tree_flatten(new_c)
            y_leaves, y_tree = tree_flatten(y)
            store["c_tree"], store["y_tree"] = c_tree, y_tree
            store["c_avals"] = common.avals_of(c_leaves)
            return list(c_leaves) + list(y_leaves)

        closed, consts = common.trace_jaxpr(body, list(carry_avals) + x_avals)
        return closed, consts, store

    closed, consts, store = trace(carry_avals)
    _check_carry_structure("scan body", f, init_tree, store["c_tree"])
    init_flat, changed = _promote_weak_inputs(init_flat, carry_avals, store["c_avals"])
    if changed:
        carry_avals = common.avals_of(init_flat)
        closed, consts, store = trace(carry_avals)
    _check_carry_types("scan body", f, init_tree, carry_avals, store["c_avals"])
    fix = _weak_fix(carry_avals, store["c_avals"])
    if any(fix):
        init_flat = _strengthen(init_flat, fix)
        carry_avals = common.avals_of(init_flat)
        closed, consts = _restage_carry(closed, consts, carry_avals, n_carry)
    outs = scan_p.bind(*consts, *init_flat, *xs_flat,
                       **_scan_params(closed, length, reverse, len(consts), n_carry, unroll))
    carry = tree_unflatten(init_tree, outs[:n_carry])
    ys = tree_unflatten(store["y_tree"], outs[n_carry:])
    return carry, ys


def _scan_in_python(f, init, xs_flat, xs_tree, length, reverse):
    """``scan`` under ``disable_jit``: a Python loop, as in JAX."""
    from kiln import lax
    from kiln._physical_tree import tree_map
    if length == 0:
        raise ValueError("zero-length scan is not supported in disable_jit() mode because the "
                         "output type is unknown.")
    carry, ys = init, []
    order = range(length - 1, -1, -1) if reverse else range(length)
    for i in order:
        x = tree_unflatten(xs_tree, [lax.index_in_dim(v, i, keepdims=False) for v in xs_flat])
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()

    def stack(*leaves):
        return lax.concatenate([lax.expand_dims(v, (0,)) for v in leaves], 0)
    return carry, tree_map(stack, *ys)


# -- jvp ------------------------------------------------------------------------------------------

def _scan_jvp(primals, tangents, *, jaxpr, length, reverse, num_consts, num_carry, linear,
              unroll, _split_transpose=False):
    nc, ncar = num_consts, num_carry
    nz = [type(t) is not Zero for t in tangents]
    const_nz, carry_nz, xs_nz = nz[:nc], nz[nc:nc + ncar], nz[nc + ncar:]
    n_out = len(jaxpr.out_avals)
    while True:
        _, out_nz = common.jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz, [False] * n_out)
        new = [a or b for a, b in zip(carry_nz, out_nz[:ncar])]
        if new == carry_nz:
            break
        carry_nz = new
    # As JAX: the ys' tangents stay symbolic zeros where the body gives zeros.
    inst = carry_nz + [False] * (n_out - ncar)
    jvp_j, out_nz = common.jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz, inst)
    ys_nz = out_nz[ncar:]
    # jvp_j inputs: (consts, carry, xs, consts_t, carry_t, xs_t); reorder to
    # (consts, consts_t, carry, carry_t, xs, xs_t); outputs (carry, ys, carry_t, ys_t) ->
    # (carry, carry_t, ys, ys_t).
    n_ct, n_cart, n_xt = sum(const_nz), sum(carry_nz), sum(xs_nz)
    nx = len(jaxpr.in_avals) - nc - ncar
    n_yt = sum(ys_nz)

    def body(*a):
        i = 0
        c = a[i:i + nc]
        i += nc
        ct = a[i:i + n_ct]
        i += n_ct
        car = a[i:i + ncar]
        i += ncar
        cart = a[i:i + n_cart]
        i += n_cart
        x = a[i:i + nx]
        i += nx
        xt = a[i:i + n_xt]
        outs = common.jaxpr_fun(jvp_j)(*c, *car, *x, *ct, *cart, *xt)
        co, yo = outs[:ncar], outs[ncar:n_out]
        cto, yto = outs[n_out:n_out + n_cart], outs[n_out + n_cart:]
        return list(co) + list(cto) + list(yo) + list(yto)

    in_avals = jaxpr.in_avals
    t = [ad.tangent_aval(a) for a in in_avals]
    avals = (list(in_avals[:nc]) + [a for a, z in zip(t[:nc], const_nz) if z]
             + list(in_avals[nc:nc + ncar]) + [a for a, z in zip(t[nc:nc + ncar], carry_nz) if z]
             + list(in_avals[nc + ncar:]) + [a for a, z in zip(t[nc + ncar:], xs_nz) if z])
    bj, bjc = staging.trace_to_jaxpr(body, avals)
    new_j = ClosedJaxpr(bj, bjc)
    consts, init, xs = primals[:nc], primals[nc:nc + ncar], primals[nc + ncar:]
    ct = [t for t, z in zip(tangents[:nc], const_nz) if z]
    cart = [ad.instantiate_zeros(t) if type(t) is Zero else t
            for t, z in zip(tangents[nc:nc + ncar], carry_nz) if z]
    xt = [t for t, z in zip(tangents[nc + ncar:], xs_nz) if z]
    outs = scan_p.bind(*consts, *ct, *init, *cart, *xs, *xt,
                       **_scan_params(new_j, length, reverse, nc + n_ct, ncar + n_cart, unroll))
    carry_out, carry_t = outs[:ncar], outs[ncar:ncar + n_cart]
    ys, ys_t = outs[ncar + n_cart:ncar + n_cart + (n_out - ncar)], outs[ncar + n_cart +
                                                                       (n_out - ncar):]
    it = iter(carry_t)
    t_carry = [next(it) if z else Zero.from_primal_value(p) for p, z in zip(carry_out, carry_nz)]
    it = iter(ys_t)
    t_ys = [next(it) if z else Zero.from_primal_value(p) for p, z in zip(ys, ys_nz)]
    del n_yt
    return list(carry_out) + list(ys), t_carry + t_ys


ad.jvp_rules[scan_p] = _scan_jvp


# -- partial evaluation: known scan emits residuals as ys; unknown scan consumes them -----------

def _scan_partial_eval(trace, args, params):
    from kiln.interpreters.pjit import partial_eval_jaxpr
    jaxpr = params["jaxpr"]
    nc, ncar = params["num_consts"], params["num_carry"]
    length, reverse = params["length"], params["reverse"]
    unknown = [trace.is_own(x) for x in args]
    const_uk, carry_uk, xs_uk = unknown[:nc], unknown[nc:nc + ncar], unknown[nc + ncar:]
    n_out = len(jaxpr.out_avals)
    while True:
        _, _, out_uk, _ = partial_eval_jaxpr(jaxpr, const_uk + carry_uk + xs_uk)
        new = [a or b for a, b in zip(carry_uk, out_uk[:ncar])]
        if new == carry_uk:
            break
        carry_uk = new
    inst = carry_uk + [False] * (n_out - ncar)
    known, unknown_j, out_uk, num_res = partial_eval_jaxpr(jaxpr, const_uk + carry_uk + xs_uk,
                                                           instantiate=inst)
    if not any(out_uk):
        with set_current_trace(trace.parent):
            return scan_p.bind(*args, **params)
    ys_uk = out_uk[ncar:]
    # Known scan: (known consts, known carry, known xs) -> (known carry, known ys, residuals)
    kc = [x for x, u in zip(args[:nc], const_uk) if not u]
    kcar = [x for x, u in zip(args[nc:nc + ncar], carry_uk) if not u]
    kx = [x for x, u in zip(args[nc + ncar:], xs_uk) if not u]
    n_kcar = len(kcar)
    with set_current_trace(trace.parent):
        kouts = scan_p.bind(*kc, *kcar, *kx, **_scan_params(known, length, reverse, len(kc),
                                                            n_kcar, params["unroll"]))
    n_known_out = len(known.out_avals) - num_res
    k_carry = kouts[:n_kcar]
    k_ys = kouts[n_kcar:n_known_out]
    res = kouts[n_known_out:]
    # Unknown scan: consts = unknown consts; carry = unknown carry; xs = (residuals, unknown xs).
    uc = [x for x, u in zip(args[:nc], const_uk) if u]
    ucar = [x for x, u in zip(args[nc:nc + ncar], carry_uk) if u]
    ux = [x for x, u in zip(args[nc + ncar:], xs_uk) if u]
    n_uc, n_ucar = len(uc), len(ucar)
    res_avals = known.out_avals[n_known_out:]

    def ubody(*a):
        c = a[:n_uc]
        car = a[n_uc:n_uc + n_ucar]
        r = a[n_uc + n_ucar:n_uc + n_ucar + num_res]
        x = a[n_uc + n_ucar + num_res:]
        # unknown_j takes (res, unknown consts, unknown carry, unknown xs) in input order.
        return common.jaxpr_fun(unknown_j)(*r, *c, *car, *x)

    u_in = (common.avals_of(uc) + [a for a, u in zip(jaxpr.in_avals[nc:nc + ncar], carry_uk)
                                   if u]
            + list(res_avals) + [a for a, u in zip(jaxpr.in_avals[nc + ncar:], xs_uk) if u])
    uj, ujc = staging.trace_to_jaxpr(ubody, u_in)
    ujaxpr = ClosedJaxpr(uj, ujc)
    out_avals = _scan_abstract_eval(jaxpr=ujaxpr, length=length, num_carry=n_ucar)
    uouts = trace.stage(scan_p, [*uc, *ucar, *res, *ux],
                        _scan_params(ujaxpr, length, reverse, n_uc, n_ucar, params["unroll"]),
                        out_avals=out_avals)
    u_carry, u_ys = uouts[:n_ucar], uouts[n_ucar:]
    ki, ui = iter(k_carry), iter(u_carry)
    carry = [next(ui) if u else next(ki) for u in carry_uk]
    ki, ui = iter(k_ys), iter(u_ys)
    ys = [next(ui) if u else next(ki) for u in ys_uk]
    return carry + ys


staging.partial_eval_rules[scan_p] = _scan_partial_eval


# -- transpose ------------------------------------------------------------------------------------

def _scan_transpose(cts, *args, jaxpr, length, reverse, num_consts, num_carry, linear, unroll,
                    _split_transpose=False):
    nc, ncar = num_consts, num_carry
    consts, init, xs = args[:nc], args[nc:nc + ncar], args[nc + ncar:]
    c_lin = [is_undefined_primal(x) for x in consts]
    x_lin = [is_undefined_primal(x) for x in xs]
    # Carries of a linear scan are linear; a carry whose initial value is a known
    # constant (an instantiated zero tangent) simply gets no cotangent.
    n_out = len(jaxpr.out_avals)
    ct_carry = [common.zeros(a) if type(c) is Zero else c
                for c, a in zip(cts[:ncar], jaxpr.out_avals[:ncar])]
    ct_ys = [common.zeros(ShapedArray((length,) + a.shape, a.dtype, a.weak_type))
             if type(c) is Zero else c for c, a in zip(cts[ncar:], jaxpr.out_avals[ncar:])]
    res_c = [x for x, lin in zip(consts, c_lin) if not lin]
    res_x = [x for x, lin in zip(xs, x_lin) if not lin]
    lin_c_avals = [a for a, lin in zip(jaxpr.in_avals[:nc], c_lin) if lin]
    carry_avals = list(jaxpr.in_avals[nc:nc + ncar])
    linear_mask = c_lin + [True] * ncar + x_lin
    t_body = common.transpose_jaxpr(jaxpr, linear_mask, jaxpr.out_avals)
    # t_body: (res_c, res_x, ct_carry, ct_y) -> (ct_lin_consts, ct_carry_in, ct_lin_xs)
    n_rc, n_rx, n_lc = len(res_c), len(res_x), len(lin_c_avals)

    def body(*a):
        rc = a[:n_rc]
        acc = a[n_rc:n_rc + n_lc]
        ctc = a[n_rc + n_lc:n_rc + n_lc + ncar]
        rx = a[n_rc + n_lc + ncar:n_rc + n_lc + ncar + n_rx]
        cty = a[n_rc + n_lc + ncar + n_rx:]
        outs = common.jaxpr_fun(t_body)(*rc, *rx, *ctc, *cty)
        d_c, d_car, d_x = outs[:n_lc], outs[n_lc:n_lc + ncar], outs[n_lc + ncar:]
        new_acc = [ad.add_any_p.bind(x, y) for x, y in zip(acc, d_c)]
        return list(new_acc) + list(d_car) + list(d_x)

    res_x_avals = [a for a, lin in zip(jaxpr.in_avals[nc + ncar:], x_lin) if not lin]
    avals = (common.avals_of(res_c) + lin_c_avals + carry_avals + res_x_avals
             + list(jaxpr.out_avals[ncar:]))
    bj, bjc = staging.trace_to_jaxpr(body, avals)
    acc0 = [common.zeros(a) for a in lin_c_avals]
    outs = scan_p.bind(*res_c, *acc0, *ct_carry, *res_x, *ct_ys,
                       **_scan_params(ClosedJaxpr(bj, bjc), length, not reverse, n_rc,
                                      n_lc + ncar, unroll))
    ct_consts, ct_init, ct_xs = outs[:n_lc], outs[n_lc:n_lc + ncar], outs[n_lc + ncar:]
    it = iter(ct_consts)
    res = [next(it) if lin else None for lin in c_lin]
    res += [c if is_undefined_primal(x) else None for c, x in zip(ct_init, init)]
    it = iter(ct_xs)
    res += [next(it) if lin else None for lin in x_lin]
    del n_out
    return res


ad.transpose_rules[scan_p] = _scan_transpose
# With zero cotangents the body is still transposed (with instantiated zeros, as JAX's
# scan does), which matters when it calls a custom_vjp's bwd rule.
ad.zero_cotangent_transposes[scan_p] = \
    lambda eqn: ad.needs_zero_cotangent_transpose(eqn.params["jaxpr"])


# -- batching -------------------------------------------------------------------------------------

def _scan_batch(axis_data, vals, dims, *, jaxpr, length, reverse, num_consts, num_carry,
                linear, unroll, _split_transpose=False):
    nc, ncar = num_consts, num_carry
    size = axis_data.size
    b = [d is not None for d in dims]
    const_b, carry_b, xs_b = b[:nc], b[nc:nc + ncar], b[nc + ncar:]
    while True:
        _, out_b = common.batch_jaxpr(jaxpr, axis_data,
                                      [0 if x else None for x in const_b + carry_b + xs_b],
                                      [False] * len(jaxpr.out_avals))
        new = [x or y for x, y in zip(carry_b, out_b[:ncar])]
        if new == carry_b:
            break
        carry_b = new
    body_b, out_b = common.batch_jaxpr(jaxpr, axis_data,
                                       [0 if x else None for x in const_b + carry_b + xs_b],
                                       carry_b + [False] * (len(jaxpr.out_avals) - ncar))
    consts = [v if d is None else batching.moveaxis(v, d, 0)
              for v, d in zip(vals[:nc], dims[:nc])]
    init = [batching.matchaxis(v, d, 0, size) if cb else v
            for v, d, cb in zip(vals[nc:nc + ncar], dims[nc:nc + ncar], carry_b)]
    # xs: scan axis stays 0, batch axis goes to 1.
    xs = [v if d is None else batching.moveaxis(v, d, 1)
          for v, d in zip(vals[nc + ncar:], dims[nc + ncar:])]
    outs = scan_p.bind(*consts, *init, *xs,
                       **_scan_params(body_b, length, reverse, nc, ncar, unroll))
    ys_b = out_b[ncar:]
    out_dims = [0 if x else None for x in carry_b] + [1 if x else None for x in ys_b]
    return outs, out_dims


batching.batch_rules[scan_p] = _scan_batch


# ================================================================================================
# fori_loop and map
# ================================================================================================

@api_boundary
def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    """``for i in range(lower, upper): val = body_fun(i, val)``.

    With concrete bounds this is a ``scan`` (reverse-mode differentiable); with traced
    bounds a ``while_loop``. As in JAX, concrete bounds give a weakly typed ``int32`` index;
    bounds of different dtypes are allowed only when one of them is a weak (Python) int."""
    from kiln import dtypes, lax
    if not callable(body_fun):
        raise TypeError("lax.fori_loop: body_fun argument should be callable.")
    ldt = dtypes.dtype(lower, canonicalize=True)
    udt = dtypes.dtype(upper, canonicalize=True)
    if ldt == udt:
        dt = ldt
    else:
        dt = None
        if np.issubdtype(ldt, np.signedinteger) and np.issubdtype(udt, np.signedinteger):
            lw, uw = dtypes.is_weakly_typed(lower), dtypes.is_weakly_typed(upper)
            if lw and not uw:
                dt = udt
            elif uw and not lw:
                dt = ldt
        if dt is None:
            raise TypeError("lower and upper arguments to fori_loop must have equal types, "
                            f"got {ldt.name} and {udt.name}")
    if not isinstance(lower, Tracer) and not isinstance(upper, Tracer):
        lo, hi = int(np.asarray(lower)), int(np.asarray(upper))
        length = max(hi - lo, 0)
        if _jit_disabled() and length == 0:
            return init_val

        def loop_body(loop_carry, _):
            i, x = loop_carry
            return (lax.add(i, 1), body_fun(i, x)), None

        (_, out), _ = scan(loop_body, (lo, init_val), None, length=length,
                           unroll=False if unroll is None else unroll)
        return out
    if unroll is not None and unroll is not False and unroll != 1:
        raise ValueError("Can only use `unroll` in `fori_loop` if the loop bounds are "
                         "statically known.")

    def cond_fun(loop_carry):
        return lax.lt(loop_carry[0], loop_carry[1])

    def while_body(loop_carry):
        i, hi, x = loop_carry
        return (lax.add(i, 1), hi, body_fun(i, x))

    if ldt != dt:
        lower = lax.convert_element_type(lower, dt)
    if udt != dt:
        upper = lax.convert_element_type(upper, dt)
    _, _, out = while_loop(cond_fun, while_body, (lower, upper, init_val))
    return out


# ``map`` with a ``batch_size`` vmaps ``f`` over each chunk: ``kiln.api`` (above ``lax``)
# installs its ``vmap`` here when imported.
_api_vmap = None


def set_vmap(vmap) -> None:
    """Install ``kiln.vmap`` (what ``map`` with ``batch_size`` uses)."""
    global _api_vmap
    _api_vmap = vmap


def installed_vmap():
    """``kiln.vmap`` as installed by :func:`set_vmap` (for lax rules that vmap a function)."""
    return _api_vmap


@api_boundary
def map(f, xs, *, batch_size=None):  # noqa: A001
    """``stack([f(x) for x in xs])`` as a scan (``batch_size`` maps a vmapped ``f`` over chunks)."""
    if batch_size is not None:
        from kiln import lax
        from kiln._physical_tree import tree_map
        vmap = _api_vmap
        if vmap is None:
            raise RuntimeError("lax.map with batch_size needs kiln.vmap: import kiln")
        xs_flat, _ = tree_flatten(xs)
        if not xs_flat:
            _, ys = scan(lambda c, x: (c, f(x)), (), xs)
            return ys
        n = get_aval(xs_flat[0]).shape[0]
        bs = int(batch_size)
        nb, rem = divmod(n, bs) if bs else (0, n)
        if nb == 0:     # batch_size 0 or larger than the axis: one vmap of everything (JAX)
            return vmap(f)(xs)

        def chunk(x):
            main = lax.slice_in_dim(x, 0, nb * bs, axis=0)
            return lax.reshape(main, (nb, bs) + get_aval(x).shape[1:])
        main_xs = tree_map(chunk, xs)
        _, ys = scan(lambda c, x: (c, vmap(f)(x)), (), main_xs)
        ys = tree_map(lambda y: lax.reshape(y, (nb * bs,) + get_aval(y).shape[2:]), ys)
        if rem:
            rest = tree_map(lambda x: lax.slice_in_dim(x, nb * bs, n, axis=0), xs)
            ys_rest = vmap(f)(rest)
            ys = tree_map(lambda a, b: lax.concatenate([a, b], 0), ys, ys_rest)
        return ys
    _, ys = scan(lambda c, x: (c, f(x)), (), xs)
    return ys


__all__ = ["while_loop", "fori_loop", "scan", "map", "while_p", "scan_p"]
