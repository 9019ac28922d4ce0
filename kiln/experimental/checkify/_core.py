"""The checkify transformation, the ``check`` primitive and the rules that add checks.

``checkify(f)(*args)`` traces ``f`` (its arguments closed over, so outer tracers become
constants of the trace) to a jaxpr, then *interprets* that jaxpr equation by equation,
binding every primitive again under the current trace, while threading an ``Error`` value
through: rules in ``error_checks`` add checks around primitives (NaN outputs, division by
zero, out-of-bounds indices) and merge the errors of ``check`` equations. Control flow is
rebuilt with checkified sub-jaxprs (their error is threaded through ``cond`` branches and
loop carries), so the error value is functional: ``jit``, ``vmap`` and ``grad`` of a
checkified function work as with any other function.

``check_p`` is the primitive of ``check``: evaluated eagerly (or through ``vmap``/``grad``)
it raises ``JaxRuntimeError`` when its error is set; staged out (``jit``, loop bodies)
without ``checkify`` around it, it raises JAX's "not functionalized" ``ValueError``.
"""
from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

import numpy as np

from kiln import _compile_log
from kiln._physical_tree import tree_flatten, tree_leaves, tree_unflatten
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal, pp_param_rules
from kiln.core.trace import Primitive, get_aval, set_current_trace
from kiln.experimental.checkify._errors import (
    DivisionByZeroError,
    Error,
    ErrorCategory,
    FailedCheckError,
    JaxException,
    JaxRuntimeError,
    NaNError,
    OOBError,
    assert_func,
    init_error,
    update_error,
)
from kiln.interpreters import ad, batching, staging

Out = TypeVar("Out")

# ----------------------------------------------------------------------------------------------
# Functionalization state: while checkify traces or interprets, ``check`` may be staged.


class _State(threading.local):
    depth = 0


_state = _State()


@contextmanager
def _functionalizing():
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1


# A jit trace made inside checkify may hold ``check`` equations: it must not be reused by a
# call outside (where staging a check is an error), so the state is part of jit's cache key.
_compile_log.register_trace_context("checkify", lambda: _state.depth > 0)

_FUNCTIONALIZATION_ERROR = (
    "Cannot abstractly evaluate a checkify.check which was not functionalized. This "
    "probably means you tried to stage (jit/scan/pmap/...) a `check` without functionalizing "
    "it through `checkify.checkify`.")

# ----------------------------------------------------------------------------------------------
# check_p

check_p = Primitive("check")
check_p.multiple_results = True


def _check_impl(*args, err_tree, debug):
    if debug:       # debug_check: does nothing unless functionalized
        return []
    from kiln.callbacks import host_values
    error = tree_unflatten(err_tree, host_values(args))
    exc = error.get_exception()
    if exc is not None:
        err = JaxRuntimeError(str(exc))
        if exc.traceback_info is not None:
            err.add_note(f"The check that failed is at {exc.traceback_info}.")
        raise err from exc
    return []


def _check_abstract_eval(*avals, err_tree, debug):
    # As JAX: staging a check is fine (make_jaxpr, eval_shape); compiling a program that
    # still holds one outside checkify is the error (``_check_lowering_error``).
    return []


def _check_lowering_error(params):
    if params["debug"]:         # debug_check: dropped unless functionalized
        return None
    return ValueError(_FUNCTIONALIZATION_ERROR)


check_p.lowering_error = _check_lowering_error
# A jaxpr's effects list the kinds of error its checks raise (JAX's ErrorEffect).
check_p.named_effects = lambda params, avals: set(
    tree_unflatten(params["err_tree"], list(avals))._pred)


def _check_jvp(primals, tangents, *, err_tree, debug):
    check_p.bind(*primals, err_tree=err_tree, debug=debug)
    return [], []


def _check_batch(axis_data, vals, dims, *, err_tree, debug):
    size = axis_data.size
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    _check_error(tree_unflatten(err_tree, vals), debug=debug)
    return [], []


check_p.impl = _check_impl
check_p.abstract_eval = _check_abstract_eval
check_p.weak_type_rule = lambda *w, **_: []
ad.jvp_rules[check_p] = _check_jvp
ad.transpose_rules[check_p] = lambda cts, *args, **_: [None] * len(args)
batching.batch_rules[check_p] = _check_batch
staging.always_stage.add(check_p)
pp_param_rules["check"] = lambda params: {"debug": params["debug"]}


def _reduce_any_error(error: Error) -> Error:
    """A batched error (``vmap``) as one error: per kind, the last batch element where it
    happened (JAX's choice), else the last element."""
    from kiln import numpy as jnp
    out = init_error
    for effect, pred in error._pred.items():
        nb = np.ndim(pred)
        flat_pred = jnp.reshape(pred, (-1,))
        idx = flat_pred.shape[0] - 1 - jnp.argmax(flat_pred[::-1])

        def pick(x, idx=idx, nb=nb):
            x = jnp.reshape(x, (-1,) + tuple(np.shape(x)[nb:]))
            return x[idx]
        out = out._update(effect, pick(pred), pick(error._code[effect]), {},
                          [pick(p) for p in error._payload[effect]])
    return out._replace(_metadata=error._metadata)


def _check_error(error: Error, *, debug: bool = False):
    if any(np.shape(v) for v in error._pred.values()):
        error = _reduce_any_error(error)
    leaves, tree = tree_flatten(error)
    return check_p.bind(*leaves, err_tree=tree, debug=debug)


# ----------------------------------------------------------------------------------------------
# The interpreter

# error_checks[prim](error, enabled_errors, eqn, *invals, **params) -> (error, outvals)
error_checks: dict[Primitive, Callable] = {}


def checkify_jaxpr_flat(jaxpr: Jaxpr, consts, enabled_errors, error: Error, args):
    """Evaluate ``jaxpr`` under the current trace with ``error`` threaded through;
    returns ``(error, outputs)``."""
    env = {}

    def read(v):
        return v.val if type(v) is Literal else env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        rule = error_checks.get(eqn.primitive)
        if rule is None:
            outs = _default_rule(eqn, invals)
        else:
            error, outs = rule(error, enabled_errors, eqn, *invals, **eqn.params)
        if eqn.primitive.multiple_results:
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
        else:
            env[eqn.outvars[0]] = outs
    return error, [read(v) for v in jaxpr.outvars]


def _sub_jaxprs(params):
    for p in params.values():
        for j in (p if isinstance(p, (tuple, list)) else (p,)):
            if isinstance(j, ClosedJaxpr):
                yield j.jaxpr
            elif isinstance(j, Jaxpr):
                yield j


def _contains_check(jaxpr: Jaxpr) -> bool:
    return any(e.primitive is check_p or any(_contains_check(j) for j in _sub_jaxprs(e.params))
               for e in jaxpr.eqns)


def _default_rule(eqn, invals):
    if any(_contains_check(j) for j in _sub_jaxprs(eqn.params)):
        raise NotImplementedError(
            f"checkify of a `checkify.check` inside `{eqn.primitive.name}` is not "
            "implemented in kiln (checks inside jit, cond, switch, while_loop, fori_loop, "
            "scan, checkpoint, custom_jvp and custom_vjp are).")
    return eqn.primitive.bind(*invals, **eqn.params)


def _trace_no_dce(fun, in_avals):
    """``staging.trace_to_jaxpr`` keeping unused equations (their checks still run)."""
    trace = staging.JaxprTrace()
    args = [trace.new_arg(a) for a in in_avals]
    try:
        with set_current_trace(trace):
            outs = fun(*args)
        return trace.to_jaxpr(outs, dce=False)
    finally:
        trace.alive = False


def _avals(xs):
    return [get_aval(x) for x in xs]


# Checkified sub-jaxprs, by original jaxpr: {(enabled, err_tree, in_avals): result}.
_sub_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _checkify_closed(closed: ClosedJaxpr, enabled_errors, err_tree, in_avals):
    """``closed`` as a jaxpr taking ``(*error_leaves, *args)`` and returning
    ``(*error_leaves, *outs)``; returns ``(new ClosedJaxpr, out error treedef, effects)``."""
    key = (enabled_errors, err_tree, tuple(in_avals))
    try:
        per = _sub_cache.setdefault(closed, {})
    except TypeError:
        per = {}
    hit = per.get(key)
    if hit is not None:
        return hit
    n_err = err_tree.num_leaves
    store = {}

    def fun(*xs):
        error = tree_unflatten(err_tree, list(xs[:n_err]))
        error, outs = checkify_jaxpr_flat(closed.jaxpr, closed.consts, enabled_errors, error,
                                          list(xs[n_err:]))
        leaves, tree = tree_flatten(error)
        store["tree"], store["effects"] = tree, set(error._pred)
        return [*leaves, *outs]

    with _functionalizing():
        jaxpr, consts = staging.trace_to_jaxpr(fun, list(in_avals))
    new, tconsts = staging.split_concrete_consts(jaxpr, consts)
    if tconsts:     # every value comes from the arguments or is a concrete constant
        raise AssertionError("checkify: a checkified sub-jaxpr closed over a traced value")
    result = (new, store["tree"], store["effects"])
    if len(per) < 64:
        per[key] = result
    return result


def _merged_error(error, enabled_errors, closeds, args):
    """``error`` with placeholders for every kind of error ``closeds`` can add, so that it
    has the same structure on the way in and out (loops, branches)."""
    err_vals, err_tree = tree_flatten(error)
    effects = set()
    for closed in closeds:
        effects |= _checkify_closed(closed, enabled_errors, err_tree,
                                    _avals([*err_vals, *args]))[2]
    return error._add_placeholder_effects(effects)


# ----------------------------------------------------------------------------------------------
# Automatic checks: NaN outputs, division by zero, out-of-bounds indices.

def _is_inexact(x) -> bool:
    try:
        return np.dtype(get_aval(x).dtype).kind in "fc"
    except TypeError:
        return False


def _check_nans(error, enabled_errors, eqn, out):
    if NaNError not in enabled_errors:
        return error
    from kiln import numpy as jnp
    outs = out if eqn.primitive.multiple_results else [out]
    flags = [jnp.any(jnp.isnan(o)) for o in outs if _is_inexact(o)]
    if not flags:
        return error
    any_nan = flags[0] if len(flags) == 1 else jnp.any(jnp.stack(flags))
    return assert_func(error, any_nan, NaNError(eqn.source_info, eqn.primitive.name))


def _nan_rule(error, enabled_errors, eqn, *invals, **params):
    out = eqn.primitive.bind(*invals, **params)
    return _check_nans(error, enabled_errors, eqn, out), out


def _div_rule(error, enabled_errors, eqn, x, y):
    if DivisionByZeroError in enabled_errors:
        from kiln import numpy as jnp
        error = assert_func(error, jnp.any(jnp.equal(y, 0)),
                            DivisionByZeroError(eqn.source_info))
    return _nan_rule(error, enabled_errors, eqn, x, y)


def _oob_payload(mask, indices, dims_map, operand_shape):
    """int32 ``[index, axis, axis size]`` of the first out-of-bounds entry of ``indices``
    (whose last axis runs over ``dims_map``)."""
    from kiln import numpy as jnp
    flat = jnp.argmin(jnp.logical_not(mask))
    multi = jnp.unravel_index(flat, np.shape(indices))
    axis = jnp.asarray(np.asarray(dims_map, np.int32))[multi[-1]]
    size = jnp.asarray(np.asarray(operand_shape, np.int32))[axis]
    index = jnp.ravel(indices)[flat]
    return jnp.stack([index.astype(np.int32), axis, size])


def _add_oob(error, mask, indices, dims_map, operand_shape, name, eqn):
    from kiln import numpy as jnp
    if np.size(indices) == 0 or len(dims_map) == 0:
        return error
    payload = _oob_payload(mask, indices, dims_map, operand_shape)
    return assert_func(error, jnp.any(mask),
                       OOBError(eqn.source_info, name, tuple(operand_shape), payload))


def _start_vector(starts):
    from kiln import numpy as jnp
    dt = np.result_type(*[np.dtype(get_aval(s).dtype) for s in starts])
    return jnp.stack([jnp.asarray(s).astype(dt) for s in starts])


def _dynamic_slice_rule(error, enabled_errors, eqn, operand, *starts, slice_sizes):
    out = eqn.primitive.bind(operand, *starts, slice_sizes=slice_sizes)
    if OOBError not in enabled_errors or not starts:
        return error, out
    shape = get_aval(operand).shape
    idx = _start_vector(starts)
    dt = np.dtype(get_aval(idx).dtype)
    mask = (idx < 0) | (idx + np.asarray(slice_sizes, dt) > np.asarray(shape, dt))
    return _add_oob(error, mask, idx, range(len(shape)), shape, "dynamic_slice", eqn), out


def _dynamic_update_slice_rule(error, enabled_errors, eqn, operand, update, *starts):
    out = eqn.primitive.bind(operand, update, *starts)
    if OOBError not in enabled_errors or not starts:
        return error, out
    shape = get_aval(operand).shape
    idx = _start_vector(starts)
    dt = np.dtype(get_aval(idx).dtype)
    mask = (idx < 0) | (idx + np.asarray(get_aval(update).shape, dt) > np.asarray(shape, dt))
    return (_add_oob(error, mask, idx, range(len(shape)), shape, "dynamic_update_slice", eqn),
            out)


def _at_rank(bounds, indices):
    """Per-index-vector bounds shaped to ``indices``' rank (its last axis), so the
    comparison never relies on rank promotion (``jax_numpy_rank_promotion='raise'``)."""
    return bounds.reshape((1,) * (np.ndim(indices) - 1) + bounds.shape)


def _gather_rule(error, enabled_errors, eqn, operand, indices, **params):
    out = eqn.primitive.bind(operand, indices, **params)
    if OOBError not in enabled_errors:
        return error, out
    dn = params["dimension_numbers"]
    shape = get_aval(operand).shape
    sim = list(dn.start_index_map)
    if not sim:
        return error, out
    dt = np.dtype(get_aval(indices).dtype)
    upper = (np.asarray(shape, np.int64)[sim]
             - np.asarray(params["slice_sizes"], np.int64)[sim])
    upper = np.minimum(upper, np.iinfo(dt).max).astype(dt)
    mask = (indices < 0) | (indices > _at_rank(upper, indices))
    return _add_oob(error, mask, indices, sim, shape, "gather", eqn), out


def _scatter_rule(error, enabled_errors, eqn, operand, indices, updates, **params):
    out = eqn.primitive.bind(operand, indices, updates, **params)
    if OOBError in enabled_errors:
        dn = params["dimension_numbers"]
        shape = get_aval(operand).shape
        ushape = get_aval(updates).shape
        unit = set(dn.inserted_window_dims) | set(getattr(dn, "operand_batching_dims", ()))
        sizes, pos = [], 0
        for i in range(len(shape)):
            if i in unit:
                sizes.append(1)
            else:
                sizes.append(ushape[dn.update_window_dims[pos]])
                pos += 1
        sdo = list(dn.scatter_dims_to_operand_dims)
        if sdo:
            dt = np.dtype(get_aval(indices).dtype)
            upper = np.asarray([shape[i] - sizes[i] for i in sdo], np.int64)
            upper = np.minimum(upper, np.iinfo(dt).max).astype(dt)
            mask = (indices < 0) | (indices > _at_rank(upper, indices))
            error = _add_oob(error, mask, indices, sdo, shape, eqn.primitive.name, eqn)
    return _check_nans(error, enabled_errors, eqn, out), out


def _check_discharge_rule(error, enabled_errors, eqn, *args, err_tree, debug):
    """A ``check`` equation: its error joins the threaded one (kinds that are not enabled
    are dropped, as in JAX)."""
    new = tree_unflatten(err_tree, list(args))
    for effect, pred in new._pred.items():
        if effect.error_type in enabled_errors:
            error = update_error(error, pred, new._code[effect], {}, new._payload[effect],
                                 effect)
    return error._replace(_metadata={**new._metadata, **error._metadata}), []


# ----------------------------------------------------------------------------------------------
# Control flow and calls: checkified sub-jaxprs thread the error.

def _cond_rule(error, enabled_errors, eqn, index, *ops, branches, **params):
    from kiln.lax.control.cond import cond_p
    error = _merged_error(error, enabled_errors, branches, ops)
    err_vals, err_tree = tree_flatten(error)
    in_avals = _avals([*err_vals, *ops])
    results = [_checkify_closed(br, enabled_errors, err_tree, in_avals) for br in branches]
    outs = cond_p.bind(index, *err_vals, *ops, branches=tuple(r[0] for r in results),
                       **params)
    n = len(err_vals)
    metadata = {}
    for _, tree, _ in results:
        metadata.update(tree_unflatten(tree, outs[:n])._metadata)
    out_err = tree_unflatten(results[0][1], outs[:n])._replace(_metadata=metadata)
    return out_err, outs[n:]


def _hoisted(fun, in_avals):
    from kiln.lax.control import common
    return common.trace_jaxpr(fun, in_avals)


def _while_rule(error, enabled_errors, eqn, *args, cond_jaxpr, body_jaxpr, cond_nconsts,
                body_nconsts):
    from kiln.lax.control.loops import batched_predicates, while_p
    if cond_jaxpr.out_avals[0].shape or cond_jaxpr in batched_predicates:
        raise ValueError("Checkify does not support batched while-loops "
                         "(checkify-of-vmap-of-while). \nHint: if possible, move the vmap to "
                         "the outer level to get vmap-of-checkify-of-while.")
    nc, nb = cond_nconsts, body_nconsts
    cc, bc, carry = list(args[:nc]), list(args[nc:nc + nb]), list(args[nc + nb:])
    # The predicate's checks on the initial carry ...
    error, _ = checkify_jaxpr_flat(cond_jaxpr.jaxpr, cond_jaxpr.consts, enabled_errors,
                                   error, [*cc, *carry])

    def body_for(err_tree, store):
        n_err = err_tree.num_leaves

        def body(*xs):   # (*cc, *bc, *err, *carry): the body, then the next predicate
            c, b = xs[:nc], xs[nc:nc + nb]
            err = tree_unflatten(err_tree, list(xs[nc + nb:nc + nb + n_err]))
            err, new_carry = checkify_jaxpr_flat(body_jaxpr.jaxpr, body_jaxpr.consts,
                                                 enabled_errors, err,
                                                 [*b, *xs[nc + nb + n_err:]])
            err, _ = checkify_jaxpr_flat(cond_jaxpr.jaxpr, cond_jaxpr.consts, enabled_errors,
                                         err, [*c, *new_carry])
            leaves, tree = tree_flatten(err)
            store["tree"], store["effects"] = tree, set(err._pred)
            return [*leaves, *new_carry]
        return body

    # ... then the body's, with an error that has every kind the body can add.
    err_vals, err_tree = tree_flatten(error)
    probe = {}
    with _functionalizing():
        staging.trace_to_jaxpr(body_for(err_tree, probe), _avals([*cc, *bc, *err_vals, *carry]))
    error = error._add_placeholder_effects(probe["effects"])
    err_vals, err_tree = tree_flatten(error)
    store = {}
    with _functionalizing():
        body, body_hoisted = _hoisted(body_for(err_tree, store),
                                      _avals([*cc, *bc, *err_vals, *carry]))
    n_err = len(err_vals)

    def cond(*xs):      # (*cc, *err, *carry): the predicate, its checks dropped (the body
        # ran them on the carry it made, so their errors are in the carry's error)
        err = tree_unflatten(err_tree, list(xs[nc:nc + n_err]))
        _, outs = checkify_jaxpr_flat(cond_jaxpr.jaxpr, cond_jaxpr.consts, enabled_errors,
                                      err, [*xs[:nc], *xs[nc + n_err:]])
        return outs
    with _functionalizing():
        cond_closed, cond_hoisted = _hoisted(cond, _avals([*cc, *err_vals, *carry]))
    outs = while_p.bind(*cond_hoisted, *cc, *body_hoisted, *cc, *bc, *err_vals, *carry,
                        cond_jaxpr=cond_closed, body_jaxpr=body,
                        cond_nconsts=len(cond_hoisted) + nc,
                        body_nconsts=len(body_hoisted) + nc + nb)
    return tree_unflatten(store["tree"], outs[:n_err]), outs[n_err:]


def _scan_rule(error, enabled_errors, eqn, *args, jaxpr, length, reverse, num_consts,
               num_carry, linear, unroll, _split_transpose=False):
    from kiln.core.avals import ShapedArray
    from kiln.lax.control.loops import scan_p
    nc, ncar = num_consts, num_carry
    consts, carry, xs = list(args[:nc]), list(args[nc:nc + ncar]), list(args[nc + ncar:])
    x_avals = [ShapedArray(a.shape[1:], a.dtype, a.weak_type) for a in _avals(xs)]

    def body_for(err_tree, store):
        n_err = err_tree.num_leaves

        def body(*vals):   # (*consts, *err, *carry, *x)
            err = tree_unflatten(err_tree, list(vals[nc:nc + n_err]))
            err, outs = checkify_jaxpr_flat(jaxpr.jaxpr, jaxpr.consts, enabled_errors, err,
                                            [*vals[:nc], *vals[nc + n_err:]])
            leaves, tree = tree_flatten(err)
            store["tree"], store["effects"] = tree, set(err._pred)
            return [*leaves, *outs]
        return body

    err_vals, err_tree = tree_flatten(error)
    probe = {}
    with _functionalizing():
        staging.trace_to_jaxpr(body_for(err_tree, probe),
                               _avals([*consts, *err_vals, *carry]) + x_avals)
    error = error._add_placeholder_effects(probe["effects"])
    err_vals, err_tree = tree_flatten(error)
    store = {}
    with _functionalizing():
        body, hoisted = _hoisted(body_for(err_tree, store),
                                 _avals([*consts, *err_vals, *carry]) + x_avals)
    n_err = len(err_vals)
    n_in = len(hoisted) + nc + n_err + ncar + len(xs)
    outs = scan_p.bind(*hoisted, *consts, *err_vals, *carry, *xs, jaxpr=body, length=length,
                       reverse=reverse, num_consts=len(hoisted) + nc,
                       num_carry=n_err + ncar, linear=(False,) * n_in, unroll=unroll,
                       _split_transpose=False)
    return tree_unflatten(store["tree"], outs[:n_err]), outs[n_err:]


def _call_rule(prim_getter, jaxpr_param):
    """Rule of a call-like primitive whose sub-jaxpr is the param ``jaxpr_param``
    (``jit``, ``checkpoint``): call the checkified sub-jaxpr instead."""
    def rule(error, enabled_errors, eqn, *args, **params):
        closed = params[jaxpr_param]
        err_vals, err_tree = tree_flatten(error)
        new, out_tree, _ = _checkify_closed(closed, enabled_errors, err_tree,
                                            _avals([*err_vals, *args]))
        outs = prim_getter().bind(*err_vals, *args, **{**params, jaxpr_param: new})
        n = out_tree.num_leaves
        return tree_unflatten(out_tree, outs[:n]), outs[n:]
    return rule


def _custom_jvp_rule(error, enabled_errors, eqn, *args, call_jaxpr, jvp_jaxpr_fun, num_consts,
                     symbolic_zeros):
    """The function is checkified; its JVP rule is not (the input error is passed on),
    as in JAX."""
    from kiln.custom_derivatives import _copy_display, custom_jvp_call_p
    in_error = error
    error = _merged_error(error, enabled_errors, [call_jaxpr], args)
    err_vals, err_tree = tree_flatten(error)
    new, out_tree, _ = _checkify_closed(call_jaxpr, enabled_errors, err_tree,
                                        _avals([*err_vals, *args]))
    n = len(err_vals)
    ran_rule = []

    def jvp(primals, tangents):
        ran_rule.append(True)
        outs, t_outs = jvp_jaxpr_fun(list(primals[n:]), list(tangents[n:]))
        zeros = [ad.Zero(ad.tangent_aval(get_aval(e))) for e in primals[:n]]
        return [*primals[:n], *outs], [*zeros, *t_outs]
    _copy_display(jvp, jvp_jaxpr_fun)
    outs = custom_jvp_call_p.bind(*err_vals, *args, call_jaxpr=new, jvp_jaxpr_fun=jvp,
                                  num_consts=num_consts, symbolic_zeros=symbolic_zeros)
    if ran_rule:    # the JVP rule ran now (jvp-of-checkify): no checks added, the input
        return in_error, outs[n:]   # error passes through unchanged
    return tree_unflatten(out_tree, outs[:n]), outs[n:]


def _custom_vjp_rule(error, enabled_errors, eqn, *args, call_jaxpr, fwd_jaxpr_thunk, bwd,
                     num_consts, symbolic_zeros):
    """The function is checkified; ``fwd``/``bwd`` are not (the input error is passed
    on), as in JAX. The error leaves travel as leading constants."""
    from kiln.custom_derivatives import _copy_display, custom_vjp_call_p
    in_error = error
    error = _merged_error(error, enabled_errors, [call_jaxpr], args)
    err_vals, err_tree = tree_flatten(error)
    new, out_tree, _ = _checkify_closed(call_jaxpr, enabled_errors, err_tree,
                                        _avals([*err_vals, *args]))
    n = len(err_vals)
    ran_rule = []

    def fwd(primals, perturbed=None):
        ran_rule.append(True)
        p_out, res = fwd_jaxpr_thunk(list(primals[n:]),
                                     None if perturbed is None else list(perturbed[n:]))
        return [*primals[:n], *p_out], res
    _copy_display(fwd, fwd_jaxpr_thunk)

    def bwd_(res, cts):
        return bwd(res, list(cts[n:]))

    outs = custom_vjp_call_p.bind(*err_vals, *args, call_jaxpr=new, fwd_jaxpr_thunk=fwd,
                                  bwd=bwd_, num_consts=num_consts + n,
                                  symbolic_zeros=symbolic_zeros)
    if ran_rule:    # fwd ran now (vjp-of-checkify): the input error passes through
        return in_error, outs[n:]
    return tree_unflatten(out_tree, outs[:n]), outs[n:]


def _register_rules():
    from kiln import lax
    from kiln.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p, remat_p
    from kiln.interpreters.pjit import jit_p
    nan_names = [
        "acos", "acosh", "add", "asin", "asinh", "atan2", "atan", "atanh", "bessel_i0e",
        "bessel_i1e", "cbrt", "conv_general_dilated", "cos", "cosh", "cumlogsumexp",
        "cummax", "cummin", "cumprod", "cumsum", "digamma", "dot_general", "erf_inv", "erf",
        "erfc", "exp", "expm1", "fft", "igamma_grad_a", "igamma", "igammac", "integer_pow",
        "lgamma", "linear_solve", "log1p", "log", "logistic", "mul", "pad", "pow", "psum",
        "reduce", "reduce_prod", "reduce_sum", "reduce_window", "reduce_window_sum",
        "regularized_incomplete_beta", "rem", "rng_uniform", "rsqrt", "sin", "sinh", "sqrt",
        "sub", "tan", "tanh"]
    for name in nan_names:
        prim = getattr(lax, name + "_p", None)
        if isinstance(prim, Primitive):
            error_checks[prim] = _nan_rule
    error_checks[lax.div_p] = _div_rule
    error_checks[lax.dynamic_slice_p] = _dynamic_slice_rule
    error_checks[lax.dynamic_update_slice_p] = _dynamic_update_slice_rule
    error_checks[lax.gather_p] = _gather_rule
    for name in ("scatter", "scatter_add", "scatter_sub", "scatter_mul", "scatter_min",
                 "scatter_max"):
        error_checks[getattr(lax, name + "_p")] = _scatter_rule
    error_checks[check_p] = _check_discharge_rule
    error_checks[lax.cond_p] = _cond_rule
    error_checks[lax.while_p] = _while_rule
    error_checks[lax.scan_p] = _scan_rule
    error_checks[jit_p] = _call_rule(lambda: jit_p, "jaxpr")
    error_checks[remat_p] = _call_rule(lambda: remat_p, "jaxpr")
    error_checks[custom_jvp_call_p] = _custom_jvp_rule
    error_checks[custom_vjp_call_p] = _custom_vjp_rule


_register_rules()

# ----------------------------------------------------------------------------------------------
# Public API

user_checks = frozenset({FailedCheckError})
nan_checks = frozenset({NaNError})
index_checks = frozenset({OOBError})
div_checks = frozenset({DivisionByZeroError})
float_checks = nan_checks | div_checks
automatic_checks = float_checks | index_checks
all_checks = automatic_checks | user_checks


def checkify(f: Callable[..., Out], errors: frozenset[ErrorCategory] = user_checks
             ) -> Callable[..., tuple[Error, Out]]:
    """Functionalize ``check`` calls in ``f`` and optionally add run-time error checks.

    Args:
      f: the function to check; it may call :func:`check`.
      errors: the enabled checks: a set of error categories, e.g. ``user_checks`` (the
        default: the ``check`` calls), ``nan_checks`` (an operation produced a NaN),
        ``div_checks`` (a division by zero), ``index_checks`` (an index out of bounds),
        or unions of them (``float_checks``, ``automatic_checks``, ``all_checks``).

    Returns:
      A function taking ``f``'s arguments and returning ``(error, out)``: ``out`` is what
      ``f`` returns, ``error`` an :class:`Error` whose ``get()`` is the message of the
      first error that happened (or None) and whose ``throw()`` raises it. The returned
      function works under ``jit``, ``vmap`` (one error per batch element) and ``grad``.

    Example::

        def f(x):
            checkify.check(x > 0, "{x} needs to be positive!", x=x)
            return 1 / x
        err, out = jax.jit(checkify.checkify(f))(-3.)
        err.throw()   # JaxRuntimeError: -3.0 needs to be positive! (`check` failed)
    """
    enabled = frozenset(errors)

    @functools.wraps(f)
    def checked_fun(*args, **kwargs):
        store = {}

        def flat():
            out = f(*args, **kwargs)
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return leaves

        with _functionalizing():
            jaxpr, consts = _trace_no_dce(flat, [])
            error, outs = checkify_jaxpr_flat(jaxpr, consts, enabled, init_error, [])
        return error, tree_unflatten(store["tree"], outs)

    return checked_fun


def _is_scalar_pred(pred) -> bool:
    from kiln.array import PublicArray
    return isinstance(pred, bool) or (isinstance(pred, PublicArray) and pred.shape == ()
                                      and np.dtype(pred.dtype) == np.dtype(bool))


def _check(pred, msg, debug, *fmt_args, **fmt_kwargs):
    from kiln import numpy as jnp
    from kiln.array import PublicArray
    from kiln.core.source_info import current
    if not _is_scalar_pred(pred):
        name = "debug_check" if debug else "check"
        raise TypeError(f"{name} takes a scalar pred as argument, got {pred}")
    for arg in tree_leaves((fmt_args, fmt_kwargs)):
        if not isinstance(arg, (PublicArray, np.ndarray)):
            raise TypeError("Formatting arguments to checkify.check need to be PyTrees of "
                            f"arrays, but got {arg!r} of type {type(arg)}.")
    new_error = FailedCheckError(current(), msg, *fmt_args, **fmt_kwargs)
    error = assert_func(init_error, jnp.logical_not(pred), new_error)
    _check_error(error, debug=debug)


def check(pred, msg: str, *fmt_args, debug: bool = False, **fmt_kwargs) -> None:
    """Check ``pred``; if it is False, an error with message ``msg`` happened.

    ``msg`` is a format string filled with ``fmt_args``/``fmt_kwargs`` (pytrees of
    arrays, so run-time values can be shown). Outside :func:`checkify` a failed check
    raises :class:`JaxRuntimeError` when evaluated eagerly (also under ``vmap`` and
    ``grad``); staged out by ``jit`` or a loop without ``checkify`` it is an error
    ("Cannot abstractly evaluate a checkify.check which was not functionalized").
    With ``debug=True`` it is dropped unless functionalized.

    Example::

        checkify.check(x > 0, "{x} needs to be positive!", x=x)
    """
    _check(pred, msg, debug, *fmt_args, **fmt_kwargs)


def debug_check(pred, msg: str, *fmt_args, **fmt_kwargs) -> None:
    """A :func:`check` that only does something when functionalized by :func:`checkify`
    (otherwise, eagerly or under ``jit``, it is dropped)."""
    _check(pred, msg, True, *fmt_args, **fmt_kwargs)


def check_error(error: Error) -> None:
    """Raise :class:`JaxRuntimeError` if ``error`` holds an error; functionalized by
    :func:`checkify` (the inverse of ``checkify``: an error value back to a check).

    Example::

        err, out = jax.jit(checkify.checkify(f))(x)
        checkify.check_error(err)      # raises if a check in f failed
    """
    if not isinstance(error, Error):
        raise TypeError("check_error takes an Error as argument, got type "
                        f"{type(error)} instead.")
    _check_error(error, debug=False)


__all__ = [
    "DivisionByZeroError", "Error", "ErrorCategory", "FailedCheckError", "JaxException",
    "JaxRuntimeError", "NaNError", "OOBError", "all_checks", "automatic_checks", "check",
    "check_error", "check_p", "checkify", "checkify_jaxpr_flat", "debug_check", "div_checks",
    "error_checks", "float_checks", "index_checks", "init_error", "nan_checks",
    "user_checks",
]
