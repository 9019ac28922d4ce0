"""Transformation rules of the reference primitives: JVP, transpose, batching and online
partial evaluation (JAX 0.10.2's semantics).

JVP: a reference created under differentiation gets a *tangent reference* (created from
zeros when the initial value has no tangent); reads, writes and accumulations act on both;
writing a differentiated value into a reference that has no tangent reference (one created
outside the differentiated function) raises JAX's error.

Transpose (reverse mode): a linear reference's cotangent is a reference accumulating
cotangents (``ad.CtRef``). ``get`` transposes to an accumulation into it, ``swap`` to a
swap (the overwritten part's cotangent goes to the written value), ``addupdate`` to a read,
``freeze`` to an accumulation, ``new_ref`` to the final read.

Batching: a reference created from a batched value is batched; reads and writes of a
batched reference index each example's slice (the batch axis becomes an integer indexer);
writing a batched value (or at batched indices) into an unbatched reference raises JAX's
error, reading one with batched indices gathers.

Partial evaluation (linearize): known work on references runs at once; the first time
unknown work touches a known reference, a staged copy of it is made (its current value a
residual) and from then on work that must see the unknown writes goes to the copy.
"""
from __future__ import annotations

import numpy as np

from kiln.core.ref import (
    addupdate_p,
    empty_ref_p,
    free_ref_p,
    freeze_p,
    get_p,
    new_ref_p,
    ref_primitives,
    swap_p,
)
from kiln.core.trace import get_aval, set_current_trace
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import CtRef, Zero
from kiln.state.indexing import NDIndexer
from kiln.tree_util import tree_flatten, tree_unflatten

# -- effects: never removed as dead code, never hoisted out of loops -------------------------
staging.always_stage.update(ref_primitives)
for _p in ref_primitives:
    _p.ref_operands = True


def _calls_take_refs():
    """Calls and control flow take references as operands (their bodies use them)."""
    from kiln.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p, remat_p
    from kiln.interpreters.calls import closed_call_p
    from kiln.interpreters.pjit import jit_p
    from kiln.lax.control.cond import cond_p
    from kiln.lax.control.loops import scan_p, while_p
    for p in (jit_p, closed_call_p, custom_jvp_call_p, custom_vjp_call_p, remat_p, cond_p,
              while_p, scan_p):
        p.ref_operands = True


_calls_take_refs()


# ----------------------------------------------------------------------------------------------
# JVP

def _new_ref_jvp(primals, tangents, *, memory_space, kind):
    (x,), (t,) = primals, tangents
    ref = new_ref_p.bind(x, memory_space=memory_space, kind=kind)
    t = ad.instantiate_zeros(t) if type(t) is Zero else t
    tref = new_ref_p.bind(t, memory_space=memory_space, kind=kind)
    return ref, tref


def _empty_ref_jvp(primals, tangents, *, ty, memory_space):
    ref = empty_ref_p.bind(ty=ty, memory_space=memory_space)
    tref = new_ref_p.bind(ad.zeros_like_aval(ad.tangent_aval(ty)), memory_space=memory_space,
                          kind=None)
    return ref, tref


def _get_jvp(primals, tangents, *, tree):
    ref, *idx = primals
    tref = tangents[0]
    out = get_p.bind(ref, *idx, tree=tree)
    if type(tref) is Zero:
        return out, Zero.from_primal_value(out)
    return out, get_p.bind(tref, *idx, tree=tree)


def _no_tangent_ref_error(ref):
    return Exception("performing a set/swap operation with a differentiated value on a "
                     "non-differentiated array reference of type "
                     f"{get_aval(ref).str_short(False)}. Move the array reference to be an "
                     "argument of the differentiated function?")


def _swap_jvp(primals, tangents, *, tree):
    ref, val, *idx = primals
    tref, tval = tangents[0], tangents[1]
    out = swap_p.bind(ref, val, *idx, tree=tree)
    if type(tref) is Zero and type(tval) is Zero:
        return out, Zero.from_primal_value(out)
    if type(tref) is Zero:
        raise _no_tangent_ref_error(ref)
    if get_aval(ref).kind == "no_grad_no_remat":
        return out, Zero.from_primal_value(out)
    tval = ad.instantiate_zeros(tval)
    return out, swap_p.bind(tref, tval, *idx, tree=tree)


def _addupdate_jvp(primals, tangents, *, tree):
    ref, val, *idx = primals
    tref, tval = tangents[0], tangents[1]
    addupdate_p.bind(ref, val, *idx, tree=tree)
    if type(tref) is Zero:
        if type(tval) is not Zero:
            raise _no_tangent_ref_error(ref)
    elif type(tval) is not Zero and get_aval(ref).kind != "no_grad_no_remat":
        addupdate_p.bind(tref, tval, *idx, tree=tree)
    return [], []


def _freeze_jvp(primals, tangents):
    (ref,), (tref,) = primals, tangents
    out = freeze_p.bind(ref)
    if type(tref) is Zero:
        return out, Zero.from_primal_value(out)
    return out, freeze_p.bind(tref)


def _free_ref_jvp(primals, tangents):
    (ref,), (tref,) = primals, tangents
    free_ref_p.bind(ref)
    if type(tref) is not Zero:
        free_ref_p.bind(tref)
    return [], []


ad.jvp_rules[new_ref_p] = _new_ref_jvp
ad.jvp_rules[empty_ref_p] = _empty_ref_jvp
ad.jvp_rules[get_p] = _get_jvp
ad.jvp_rules[swap_p] = _swap_jvp
ad.jvp_rules[addupdate_p] = _addupdate_jvp
ad.jvp_rules[freeze_p] = _freeze_jvp
ad.jvp_rules[free_ref_p] = _free_ref_jvp


# ----------------------------------------------------------------------------------------------
# Transpose (the reference operand is an ``ad.CtRef``)

def _ct_ref_of(x, prim):
    if type(x) is not CtRef:
        raise NotImplementedError(
            f"Transpose of '{prim.name}' on a reference that is not linear: kiln (as JAX) "
            "differentiates writes only into references created inside the differentiated "
            "function")
    return x


def _get_transpose(ct, ref, *idx, tree):
    c = _ct_ref_of(ref, get_p)
    if type(ct) is not Zero:
        addupdate_p.bind(c.ref, ct, *idx, tree=tree)
    return [None] * (1 + len(idx))


def _swap_transpose(ct, ref, val, *idx, tree):
    c = _ct_ref_of(ref, swap_p)
    if type(ct) is Zero:
        ct = ad.instantiate_zeros(ct)
    val_ct = swap_p.bind(c.ref, ct, *idx, tree=tree)
    return [None, val_ct if ad.is_undefined_primal(val) else None] + [None] * len(idx)


def _addupdate_transpose(cts, ref, val, *idx, tree):
    c = _ct_ref_of(ref, addupdate_p)
    val_ct = None
    if ad.is_undefined_primal(val) and c.used:
        val_ct = get_p.bind(c.ref, *idx, tree=tree)
    return [None, val_ct] + [None] * len(idx)


def _freeze_transpose(ct, ref):
    c = _ct_ref_of(ref, freeze_p)
    if type(ct) is not Zero:
        addupdate_p.bind(c.ref, ct, tree=tree_flatten(())[1])
    return [None]


def _new_ref_transpose(c, x, *, memory_space, kind):
    """``c``: the new reference's ``CtRef`` (None if no cotangent reached it)."""
    if c is None or not c.used or not ad.is_undefined_primal(x):
        return [None]
    return [freeze_p.bind(c.ref)]


ad.transpose_rules[get_p] = _get_transpose
ad.transpose_rules[swap_p] = _swap_transpose
ad.transpose_rules[addupdate_p] = _addupdate_transpose
ad.transpose_rules[freeze_p] = _freeze_transpose
ad.transpose_rules[free_ref_p] = lambda cts, ref: [None]
new_ref_p.transpose_ref = _new_ref_transpose
empty_ref_p.transpose_ref = lambda c, **params: []


# ----------------------------------------------------------------------------------------------
# Batching

def _lax():
    from kiln import lax
    return lax


def _new_ref_batch(axis_data, vals, dims, *, memory_space, kind):
    (x,), (d,) = vals, dims
    # Batched at axis 0 (loops and conds take batched references there), and even when the
    # initial value is not: a batched value may be written to it later (as in JAX).
    x = batching.bdim_at_front(x, d, axis_data.size)
    return new_ref_p.bind(x, memory_space=memory_space, kind=kind), 0


def _freeze_batch(axis_data, vals, dims):
    (ref,), (d,) = vals, dims
    return freeze_p.bind(ref), d


def _free_ref_batch(axis_data, vals, dims):
    free_ref_p.bind(vals[0])
    return [], []


def _batched_transforms(axis_data, ref, ref_dim, idx_vals, idx_dims, tree):
    """An access with a batched reference and/or batched indices as one gather-form
    indexer over the (batched) reference: every dimension, the batch axis included, gets
    an integer index array of shape ``(size, *result)``, so the result's batch axis is 0.
    Returns ``(flat operands, tree)`` of that indexer."""
    from kiln import numpy as jnp
    size = axis_data.size
    transforms = tree_unflatten(tree, _example_placeholders(idx_vals, idx_dims))
    if len(transforms) > 1:
        raise NotImplementedError("kiln: vmap of chained reference views (ref.at[...].at"
                                  "[...]) is not supported")
    ref_shape = get_aval(ref).shape
    ex_shape = (ref_shape[:ref_dim] + ref_shape[ref_dim + 1:]
                if ref_dim is not None else ref_shape)
    ix = transforms[0] if transforms else NDIndexer.make_trivial_indexer(ex_shape)
    out_shape = ix.get_indexer_shape()
    arrays = _example_arrays(ix, idx_vals, idx_dims, out_shape)
    if ref_dim is not None:
        batch = _lax().iota(np.int32, size).reshape((size,) + (1,) * len(out_shape))
        arrays.insert(ref_dim, batch)
    full = tuple(jnp.broadcast_to(a, (size,) + out_shape) for a in arrays)
    new_ix = NDIndexer(full, ref_shape, (size,) + out_shape)
    return tree_flatten((new_ix,))


def _example_placeholders(vals, dims):
    """Index operands of one example's shape (only the indexer's structure is used)."""
    from kiln.array import make_array
    out = []
    for v, d in zip(vals, dims):
        if d is None:
            out.append(v)
        else:
            a = get_aval(v)
            out.append(make_array(np.zeros(a.shape[:d] + a.shape[d + 1:], a.dtype)))
    return out


def _example_arrays(ix, idx_vals, idx_dims, out_shape):
    """One index array per dimension of an example's reference, each of shape
    ``(1 or size, ...)`` broadcasting to ``(size, *out_shape)`` (leading axis: the batch),
    built with NumPy's placement of integer-indexed dimensions. ``idx_vals``/``idx_dims``
    are the indexer's (batched) operands in flattening order."""
    from kiln import numpy as jnp
    nd = len(out_shape)
    flags = ix.is_int_indexing()
    p = ix.int_block_position()
    n_int = len(ix.int_indexer_shape)
    operands = iter(zip(idx_vals, idx_dims))

    def batched(v, d):
        v = jnp.asarray(v)
        return v[None] if d is None else batching.moveaxis(v, d, 0)

    arrays = []
    slice_pos = 0
    for i, dim, is_int in zip(ix.indices, ix.shape, flags):
        if is_int:
            if isinstance(i, (int, np.integer)):
                v = jnp.asarray(np.int32(i))[None]
            else:
                v = batched(*next(operands))
            v = jnp.broadcast_to(v, (v.shape[0],) + ix.int_indexer_shape)
            arrays.append(v.reshape((v.shape[0],) + (1,) * p + ix.int_indexer_shape
                                    + (1,) * (nd - p - n_int)))
            continue
        q = slice_pos if slice_pos < p or not any(flags) else slice_pos + n_int
        slice_pos += 1
        start = i.start
        if i.is_dynamic_start:      # a window is clamped to fit, as dynamic_slice
            hi = max(dim - ((i.size - 1) * i.stride + 1), 0)
            start = jnp.clip(batched(*next(operands)).astype(np.int32), 0, hi)
            start = start.reshape((-1,) + (1,) * nd)
        shape = [1] * (nd + 1)
        shape[q + 1] = i.size
        a = (_lax().iota(np.int32, i.size) * np.int32(i.stride)).reshape(tuple(shape))
        arrays.append(a + start)
    return arrays


def _unbatched_ref_error(ref, op: str = "a set/swap"):
    return Exception(f"performing {op} operation with vmapped value on an unbatched "
                     f"array reference of type {get_aval(ref).str_short(False)}. Move the "
                     "array reference to be an argument to the vmapped function?")


def _is_trivial_access(tree, idx_dims):
    return all(d is None for d in idx_dims) and (
        tree.num_leaves == 0 and all(t.is_trivial() for t in tree_unflatten(tree, [])))


def _get_batch(axis_data, vals, dims, *, tree):
    ref, *idx = vals
    rd, *idims = dims
    if rd is not None and _is_trivial_access(tree, idims):
        return get_p.bind(ref, *idx, tree=tree), rd
    flat, new_tree = _batched_transforms(axis_data, ref, rd, idx, idims, tree)
    return get_p.bind(ref, *flat, tree=new_tree), 0


def _swap_batch(axis_data, vals, dims, *, tree):
    ref, val, *idx = vals
    rd, vd, *idims = dims
    if rd is None:
        raise _unbatched_ref_error(ref)
    if _is_trivial_access(tree, idims):
        val = batching.matchaxis(val, vd, rd, axis_data.size)
        return swap_p.bind(ref, val, *idx, tree=tree), rd
    flat, new_tree = _batched_transforms(axis_data, ref, rd, idx, idims, tree)
    val = batching.bdim_at_front(val, vd, axis_data.size)
    return swap_p.bind(ref, val, *flat, tree=new_tree), 0


def _addupdate_batch(axis_data, vals, dims, *, tree):
    ref, val, *idx = vals
    rd, vd, *idims = dims
    if rd is None:
        raise _unbatched_ref_error(ref, "an addupdate")
    if _is_trivial_access(tree, idims):
        val = batching.matchaxis(val, vd, rd, axis_data.size)
        addupdate_p.bind(ref, val, *idx, tree=tree)
        return [], []
    flat, new_tree = _batched_transforms(axis_data, ref, rd, idx, idims, tree)
    val = batching.bdim_at_front(val, vd, axis_data.size)
    addupdate_p.bind(ref, val, *flat, tree=new_tree)
    return [], []


batching.batch_rules[new_ref_p] = _new_ref_batch
batching.always_batch.add(new_ref_p)
batching.batch_rules[freeze_p] = _freeze_batch
batching.batch_rules[free_ref_p] = _free_ref_batch
batching.batch_rules[get_p] = _get_batch
batching.batch_rules[swap_p] = _swap_batch
batching.batch_rules[addupdate_p] = _addupdate_batch


# ----------------------------------------------------------------------------------------------
# Online partial evaluation (``JaxprTrace(forward_known=True)``: linearize)

class _Mirror:
    __slots__ = ("known", "staged", "dirty")

    def __init__(self, known, staged):
        self.known = known
        self.staged = staged
        self.dirty = False


def _mirror_of(trace, ref, create: bool):
    mirrors = trace.ref_mirrors
    m = mirrors.get(id(ref)) if mirrors else None
    if m is not None and m.known is ref:
        return m
    if not create:
        return None
    with set_current_trace(trace.parent):
        snapshot = get_p.bind(ref, tree=tree_flatten(())[1])
    aval = get_aval(ref)
    staged = trace.stage(new_ref_p, [snapshot], dict(memory_space=aval.memory_space,
                                                     kind=aval.kind))
    if trace.ref_mirrors is None:
        trace.ref_mirrors = {}
    m = trace.ref_mirrors[id(ref)] = _Mirror(ref, staged)
    return m


def _pe_ref_op(trace, args, params, prim):
    if not args:
        with set_current_trace(trace.parent):
            return prim.bind(**params)
    if prim is new_ref_p:
        if trace.is_own(args[0]):
            return trace.stage(prim, list(args), params)
        with set_current_trace(trace.parent):
            return prim.bind(*args, **params)
    ref, rest = args[0], args[1:]
    if trace.is_own(ref):
        return trace.stage(prim, list(args), params)
    unknown = any(trace.is_own(a) for a in rest)
    m = _mirror_of(trace, ref, create=unknown)
    writes = prim is swap_p or prim is addupdate_p
    if m is not None and (unknown or m.dirty):
        out = trace.stage(prim, [m.staged, *rest], params)
        if writes:
            m.dirty = True
        return out
    with set_current_trace(trace.parent):
        out = prim.bind(*args, **params)
    if m is not None and writes:        # keep the staged copy's contents the same
        trace.stage(prim, [m.staged, *rest], params)
    return out


for _p in ref_primitives:
    staging.partial_eval_rules[_p] = (lambda p: lambda trace, args, params:
                                      _pe_ref_op(trace, args, params, p))(_p)

