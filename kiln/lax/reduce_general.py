"""The general ``lax.reduce``: the ``reduce`` primitive (JAX's ``reduce_p``), for several
operands (an argmax over ``(values, indices)``) or any reducer that is not one of the
monoids ``lax.reduce`` maps to ``reduce_sum``/``reduce_max``/... .

Parameters as JAX's: ``computation`` (the Python reducer), ``jaxpr`` (a ``ClosedJaxpr`` of
it on two trees of scalars) and ``dimensions``.

Semantics. JAX (and XLA) require the reducer to be associative with the init values its
identities, and leave the result undefined otherwise, so any order of combination is
valid. kiln combines in a balanced tree: the reduced dimensions are moved to the front and
flattened, the first half of the elements is combined with the second half (an odd half
padded with the init values) until one is left, then the init values are combined in
once (``computation(init, result)``; an empty reduction gives the init values). That is
``log2(n)`` vectorized applications of the reducer, on the reference backend and inside
``jit`` (a host step), and its JVP differentiates the same tree (JAX's forward-mode rule
is a tree too), so values with and without differentiation agree. A nonzero tangent of
an init value is JAX's ``NotImplementedError``; ``vmap`` with batched init values too.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval, set_current_trace
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax._factory import as_dtype, standard_primitive


def _split(args):
    n = len(args) // 2
    return list(args[:n]), list(args[n:])


def _abstract_eval(*avals, computation, jaxpr, dimensions):
    ops, inits = _split(avals)
    if any(i.shape != () for i in inits):
        raise ValueError(f"reduce found non-scalar initial value: {[i.shape for i in inits]}")
    if [o.dtype for o in ops] != [i.dtype for i in inits]:
        raise TypeError("reduce operand dtypes should match corresponding initial value "
                        f"dtypes, got operands={[o.str_short() for o in ops]} and "
                        f"initial_values={[i.str_short() for i in inits]}")
    if any(o.shape != ops[0].shape for o in ops):
        raise ValueError("reduce operands must all have the same shape, got "
                         f"{[o.shape for o in ops]}")
    ndim = ops[0].ndim
    if len(set(dimensions)) != len(dimensions) or any(not 0 <= d < ndim for d in dimensions):
        raise ValueError(f"reduce dimensions {tuple(dimensions)} must be distinct and in "
                         f"[0, {ndim}) for operands of shape {ops[0].shape}")
    outs = [v.aval for v in jaxpr.jaxpr.outvars]
    if len(outs) != len(ops) or any(a.shape != () or a.dtype != o.dtype
                                    for a, o in zip(outs, ops)):
        raise TypeError("reduce: the computation must map two trees of scalars of the "
                        "operands' dtypes to one such tree, got outputs "
                        f"{[a.str_short() for a in outs]} for operands "
                        f"{[o.dtype.name for o in ops]}")
    keep = tuple(n for d, n in enumerate(ops[0].shape) if d not in dimensions)
    return [ShapedArray(keep, o.dtype, o.weak_type and i.weak_type)
            for o, i in zip(ops, inits)]


def _tree_reduce(jaxpr, ops, inits, dimensions):
    """The reduction written with primitives that all have rules (see the module
    docstring): used by the impl and differentiated by the JVP."""
    from kiln.lax.slicing import pad, slice_in_dim
    from kiln.lax.structural import broadcast_in_dim, reshape, squeeze, transpose
    from kiln.lax.windowed import _apply_reducer
    shape = get_aval(ops[0]).shape
    dims = sorted(dimensions)
    rest = [d for d in range(len(shape)) if d not in dims]
    keep = tuple(shape[d] for d in rest)
    n = math.prod(shape[d] for d in dims)
    xs = [reshape(transpose(x, tuple(dims + rest)), (n,) + keep) for x in ops]
    body, consts = jaxpr.jaxpr, jaxpr.consts
    if n == 0:
        return [broadcast_in_dim(i, keep, ()) for i in inits]
    while n > 1:
        h = (n + 1) // 2
        lo = [slice_in_dim(x, 0, h) for x in xs]
        hi = [slice_in_dim(x, h, n) for x in xs]
        if n - h != h:          # odd: the second half padded with the init values
            cfg = ((0, 1, 0),) + ((0, 0, 0),) * len(keep)
            hi = [pad(x, i, cfg) for x, i in zip(hi, inits)]
        xs = _apply_reducer(body, consts, lo, hi)
        n = h
    xs = [squeeze(x, (0,)) for x in xs]
    if not keep:
        xs = [reshape(x, (1,)) for x in xs]
        out = _apply_reducer(body, consts, [reshape(i, (1,)) for i in inits], xs)
        return [reshape(o, ()) for o in out]
    return _apply_reducer(body, consts, [broadcast_in_dim(i, keep, ()) for i in inits], xs)


def _impl(*args, computation, jaxpr, dimensions):
    from kiln.array import make_array
    from kiln.core import trace as core
    vals = [np.asarray(a) for a in args]
    ops, inits = _split([make_array(v) for v in vals])
    with set_current_trace(core.eval_trace):
        outs = _tree_reduce(jaxpr, ops, inits, dimensions)
    return [as_dtype(np.asarray(o), v.dtype) for o, v in zip(outs, vals)]


reduce_p = standard_primitive(
    "reduce", _abstract_eval, _impl,
    weak_type_rule=lambda *ws, **_: [a and b for a, b in zip(*_split(ws))],
    multiple_results=True)


def _jvp(primals, tangents, *, computation, jaxpr, dimensions):
    ops, inits = _split(primals)
    t_ops, t_inits = _split(tangents)
    if any(type(t) is not Zero for t in t_inits):
        raise NotImplementedError("Gradient of general lax.reduce with non-zero tangents for "
                                  "initial values to reduction not implemented")
    outs = reduce_p.bind(*primals, computation=computation, jaxpr=jaxpr,
                         dimensions=dimensions)
    if all(type(t) is Zero for t in t_ops):
        return outs, [Zero.from_primal_value(o) for o in outs]
    n = len(ops)
    _, t_out = ad.jvp_flat(lambda *a: _tree_reduce(jaxpr, list(a), inits, dimensions),
                           list(ops), list(t_ops), instantiate=False)
    t_out = [t if ad.is_differentiable_dtype(get_aval(o).dtype) and type(t) is not Zero
             else Zero.from_primal_value(o) for o, t in zip(outs, t_out)]
    assert len(t_out) == n
    return outs, t_out


def _batch(axis_data, vals, dims, *, computation, jaxpr, dimensions):
    ops, inits = _split(vals)
    op_dims, init_dims = _split(dims)
    if any(d is not None for d in init_dims):
        raise NotImplementedError("vmap of lax.reduce with batched init values (JAX does not "
                                  "batch them either): pass unbatched scalars")
    ops = [batching.bdim_at_front(v, d, axis_data.size) for v, d in zip(ops, op_dims)]
    outs = reduce_p.bind(*ops, *inits, computation=computation, jaxpr=jaxpr,
                         dimensions=tuple(d + 1 for d in dimensions))
    return outs, [0] * len(outs)


ad.jvp_rules[reduce_p] = _jvp
batching.batch_rules[reduce_p] = _batch


def reduce_general(flat_ops, flat_inits, computation, tree, dimensions) -> list:
    """``lax.reduce``'s general case: bind ``reduce_p`` on flat operands and init values
    (``tree`` is their common structure)."""
    from kiln.core.jaxpr import ClosedJaxpr
    from kiln.lax.windowed import _reducer_jaxpr
    init_avals = tuple(ShapedArray((), a.dtype, a.weak_type)
                       for a in (get_aval(i) for i in flat_inits))
    body, consts, out_tree = _reducer_jaxpr(computation, init_avals, tree)
    if out_tree != tree:
        raise TypeError("reduce: the computation must return the same tree structure as "
                        f"the operands, got {out_tree} for {tree}")
    return reduce_p.bind(*flat_ops, *flat_inits, computation=computation,
                         jaxpr=ClosedJaxpr(body, list(consts)),
                         dimensions=tuple(int(d) for d in dimensions))


__all__ = ["reduce_p"]
