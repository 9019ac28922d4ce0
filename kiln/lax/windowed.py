"""``lax.reduce_window``: windowed reductions as primitives, as in JAX.

With one operand, ``lax.add``/``lax.max``/``lax.min`` and a concrete scalar ``init_value``
equal to the monoid's identity, ``reduce_window`` binds ``reduce_window_sum`` /
``reduce_window_max`` / ``reduce_window_min`` (defined with their rules and the pooling
gradients ``select_and_gather_add`` / ``select_and_scatter_add`` in
:mod:`kiln.lax.window_rules`). Everything else (``lax.mul``, bitwise reducers, a traced or
non-identity ``init_value``, any Python reducer, pytrees of operands) binds the generic
``reduce_window`` primitive, whose parameters carry the reducer as a jaxpr on scalars
(``jaxpr``, ``consts``) plus the window parameters.

Generic semantics (XLA on CPU): each window starts from ``init_value`` and folds in its
elements in row-major window order as ``acc = computation(acc, element)``; padding and
base-dilation holes are skipped. The impl runs the reducer vectorised over all windows
(``vmap`` of the jaxpr) once per window offset. Its JVP is the forward-mode derivative of
that same fold written with ``pad``/``slice``/``select`` (so the tangent is linear in the
input tangents and ``grad`` works, where JAX's variadic formulation has no transpose).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import eval_jaxpr
from kiln.core.trace import Tracer, concretize, get_aval, set_current_trace
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax import arith
from kiln.lax._factory import as_dtype, standard_primitive
from kiln.lax.convolution import padtype_to_pads
from kiln.lax.window_rules import (
    _dilate_shape,
    _reduce_window_max,
    _reduce_window_min,
    _reduce_window_sum,
    common_shape_rule,
    max_identity,
    min_identity,
    pad_np,
    reduce_window_max_p,
    reduce_window_min_p,
    reduce_window_shape_tuple,
    reduce_window_sum_p,
    select_and_gather_add_p,
    select_and_scatter_add_p,
    valid_view,
    window_offsets,
    window_view,
)

Array = Any

# ----------------------------------------------------------------------------------------------
# The generic reduce_window primitive.


def _split(args):
    n = len(args) // 2
    return list(args[:n]), list(args[n:])


def _generic_abstract_eval(*avals, jaxpr, consts, window_dimensions, window_strides, padding,
                           base_dilation, window_dilation):
    ops, inits = _split(avals)
    if any(o.dtype != i.dtype for o, i in zip(ops, inits)):
        raise TypeError("reduce_window got inconsistent dtypes for operands and init_values: "
                        f"got operand dtypes {[o.dtype for o in ops]} and init_value dtypes "
                        f"{[i.dtype for i in inits]}.")
    if any(i.shape != () for i in inits):
        raise TypeError("reduce_window expected init_values to be scalars but init_values "
                        f"have shapes {[i.shape for i in inits]}.")
    if any(o.shape != ops[0].shape for o in ops):
        raise ValueError("reduce_window operands must all have the same shape, got "
                         f"{[o.shape for o in ops]}.")
    outs = [v.aval for v in jaxpr.outvars]
    if len(jaxpr.invars) != 2 * len(ops) or len(outs) != len(ops) or any(
            a.shape != () or a.dtype != o.dtype for a, o in zip(outs, ops)):
        raise ValueError("reduce_window: the computation must map two trees of scalars of the "
                         "operands' dtypes to one such tree, got outputs "
                         f"{[a.str_short() for a in outs]} for operands "
                         f"{[o.dtype.name for o in ops]}.")
    shape = common_shape_rule(ops[0], window_dimensions, window_strides, padding,
                              base_dilation, window_dilation)
    return [ShapedArray(shape, o.dtype, False) for o in ops]


def _apply_reducer(jaxpr, consts, accs, elems):
    """The reducer applied elementwise to equal-shape arrays (vmapped over a flat axis)."""
    from kiln.lax.structural import reshape
    shape = get_aval(accs[0]).shape
    size = math.prod(shape)
    flat = [reshape(a, (size,)) for a in accs + elems]
    outs, _ = batching.batch_flat(lambda *a: eval_jaxpr(jaxpr, consts, *a), flat,
                                  [0] * len(flat), batching.AxisData(None, size),
                                  [0] * len(accs))
    return [reshape(o, shape) for o in outs]


def _generic_impl(*args, jaxpr, consts, window_dimensions, window_strides, padding,
                  base_dilation, window_dilation):
    from kiln.core import trace as core
    ops, inits = _split([np.asarray(a) for a in args])
    shape = ops[0].shape
    out_shape = reduce_window_shape_tuple(shape, window_dimensions, window_strides, padding,
                                          base_dilation, window_dilation)
    accs = [np.full(out_shape, i, o.dtype).reshape(-1) for o, i in zip(ops, inits)]
    if math.prod(out_shape) and math.prod(shape):
        mv = valid_view(shape, out_shape, window_dimensions, window_strides, padding,
                        base_dilation, window_dilation)
        views = [window_view(pad_np(o, np.zeros((), o.dtype), padding, base_dilation),
                             out_shape, window_dimensions, window_strides, window_dilation)
                 for o in ops]
        with set_current_trace(core.eval_trace):
            for off in window_offsets(window_dimensions):
                key = (Ellipsis,) + tuple(off)
                m = mv[key].reshape(-1)
                if not m.any():
                    continue
                elems = [v[key].reshape(-1) for v in views]
                if m.all():
                    new = _apply_reducer(jaxpr, consts, accs, elems)
                    accs = [as_dtype(np.asarray(n), a.dtype) for n, a in zip(new, accs)]
                else:
                    new = _apply_reducer(jaxpr, consts, [a[m] for a in accs],
                                         [e[m] for e in elems])
                    accs = [a.copy() for a in accs]
                    for a, n in zip(accs, new):
                        a[m] = np.asarray(n)
    return [as_dtype(a.reshape(out_shape), o.dtype) for a, o in zip(accs, ops)]


reduce_window_p = standard_primitive("reduce_window", _generic_abstract_eval, _generic_impl,
                                     weak_type_rule=lambda *w, **p: [False] * (len(w) // 2),
                                     multiple_results=True)


def _fold(jaxpr, consts, ops, inits, window_dimensions, window_strides, padding,
          base_dilation, window_dilation):
    """The generic reduction written with primitives that all have rules: one strided
    ``slice`` of the padded operands per window offset, folded in with the reducer (masked
    by a ``select`` where a window position is padding or a hole)."""
    from kiln.array import make_array
    from kiln.lax.slicing import _zero_scalar, pad
    from kiln.lax.slicing import slice as _slice
    from kiln.lax.structural import broadcast_in_dim, select
    shape = get_aval(ops[0]).shape
    out_shape = reduce_window_shape_tuple(shape, window_dimensions, window_strides, padding,
                                          base_dilation, window_dilation)
    accs = [broadcast_in_dim(i, out_shape, ()) for i in inits]
    if not (math.prod(out_shape) and math.prod(shape)):
        return accs
    cfg = tuple((lo, hi, b - 1) for (lo, hi), b in zip(padding, base_dilation))
    if any(lo or hi or i for lo, hi, i in cfg):
        ops = [pad(o, _zero_scalar(get_aval(o).dtype), cfg) for o in ops]
    mv = valid_view(shape, out_shape, window_dimensions, window_strides, padding,
                    base_dilation, window_dilation)
    for off in window_offsets(window_dimensions):
        m = np.ascontiguousarray(mv[(Ellipsis,) + tuple(off)])
        if not m.any():
            continue
        starts = tuple(k * r for k, r in zip(off, window_dilation))
        limits = tuple(st + (n - 1) * s + 1
                       for st, n, s in zip(starts, out_shape, window_strides))
        elems = [_slice(o, starts, limits, window_strides) for o in ops]
        new = _apply_reducer(jaxpr, consts, accs, elems)
        if m.all():
            accs = new
        else:
            mask = make_array(m)
            accs = [select(mask, n, a) for n, a in zip(new, accs)]
    return accs


def _generic_jvp(primals, tangents, *, jaxpr, consts, **win):
    outs = reduce_window_p.bind(*primals, jaxpr=jaxpr, consts=consts, **win)
    if all(type(t) is Zero for t in tangents):
        return outs, [Zero.from_primal_value(o) for o in outs]
    ops, inits = _split(primals)
    n = len(ops)
    _, t_out = ad.jvp_flat(lambda *a: _fold(jaxpr, consts, list(a[:n]), list(a[n:]), **win),
                           list(primals), list(tangents), instantiate=False)
    t_out = [t if ad.is_differentiable_dtype(get_aval(o).dtype) and type(t) is not Zero
             else Zero.from_primal_value(o) for o, t in zip(outs, t_out)]
    return outs, t_out


def _generic_batch(axis_data, vals, dims, *, jaxpr, consts, window_dimensions, window_strides,
                   padding, base_dilation, window_dilation):
    n = len(vals) // 2
    win = dict(window_dimensions=window_dimensions, window_strides=window_strides,
               padding=padding, base_dilation=base_dilation, window_dilation=window_dilation)
    if any(d is not None for d in dims[n:]):
        # Per-example initial values (JAX raises here): vmap the primitive-level fold.
        outs, _ = batching.batch_flat(
            lambda *a: _fold(jaxpr, consts, list(a[:n]), list(a[n:]), **win), list(vals),
            list(dims), axis_data, [0] * n)
        return outs, [0] * n
    ops = [batching.bdim_at_front(v, d, axis_data.size) for v, d in zip(vals[:n], dims[:n])]
    outs = reduce_window_p.bind(
        *ops, *vals[n:], jaxpr=jaxpr, consts=consts,
        window_dimensions=(1,) + window_dimensions, window_strides=(1,) + window_strides,
        padding=((0, 0),) + padding, base_dilation=(1,) + base_dilation,
        window_dilation=(1,) + window_dilation)
    return outs, [0] * n


ad.jvp_rules[reduce_window_p] = _generic_jvp
batching.batch_rules[reduce_window_p] = _generic_batch


# ----------------------------------------------------------------------------------------------
# The public wrapper.


def _reducer_jaxpr_uncached(computation, init_avals, tree):
    from kiln._physical_tree import tree_flatten, tree_unflatten
    from kiln.interpreters.staging import trace_to_jaxpr
    n = len(init_avals)
    out_trees = []

    def flat(*args):
        xs = tree_unflatten(tree, list(args[:n]))
        ys = tree_unflatten(tree, list(args[n:]))
        out = computation(xs, ys)
        leaves, out_tree = tree_flatten(out)
        for leaf in leaves:
            if not (isinstance(leaf, Tracer) or hasattr(leaf, "dtype")
                    or type(leaf) in (bool, int, float, complex)):
                raise TypeError(f"function {getattr(computation, '__name__', computation)} "
                                "traced for reduce_window comp returned a value of type "
                                f"{type(leaf)}, which is not a valid JAX type")
        out_trees.append(out_tree)
        return leaves

    jaxpr, consts = trace_to_jaxpr(flat, list(init_avals) * 2)
    if any(isinstance(c, Tracer) for c in consts):
        raise NotImplementedError(
            "Reduction computations can't close over Tracers. Please open an issue at "
            "https://github.com/jax-ml/jax.")
    return jaxpr, tuple(consts), out_trees[0]


@functools.lru_cache(maxsize=256)
def _reducer_jaxpr_cached(computation, init_avals, tree):
    return _reducer_jaxpr_uncached(computation, init_avals, tree)


def _reducer_jaxpr(computation, init_avals, tree):
    try:
        hash((computation, init_avals, tree))
    except TypeError:
        return _reducer_jaxpr_uncached(computation, init_avals, tree)
    return _reducer_jaxpr_cached(computation, init_avals, tree)


def _monoid_reducer(computation, flat_inits):
    """JAX's choice: reduce_window_sum/max/min for a single concrete scalar identity."""
    if len(flat_inits) != 1:
        return None
    v = concretize(flat_inits[0])
    if isinstance(v, Tracer):
        return None
    aval = get_aval(v)
    if aval.shape != ():
        return None
    val = np.asarray(getattr(v, "_value", v))
    if computation is arith.add:
        return _reduce_window_sum if val == 0 else None
    if computation is arith.max:
        return _reduce_window_max if val == max_identity(aval.dtype) else None
    if computation is arith.min:
        return _reduce_window_min if val == min_identity(aval.dtype) else None
    return None


def reduce_window(operand: Any, init_value: Any, computation: Callable,
                  window_dimensions: Sequence[int],
                  window_strides: Sequence[int] | None = None,
                  padding: str | Sequence[tuple[int, int]] = "VALID",
                  base_dilation: Sequence[int] | None = None,
                  window_dilation: Sequence[int] | None = None) -> Any:
    """Reduction over padded windows (XLA's ReduceWindowWithGeneralPadding).

    Args:
      operand: an array, or a pytree of arrays of one shape.
      init_value: a scalar, or a pytree of scalars of the same structure and dtypes as
        ``operand``; each window's reduction starts from it (padding and base-dilation
        holes do not contribute).
      computation: the reducer: maps two trees like ``operand`` (of scalars) to one.
        ``lax.add``/``lax.max``/``lax.min`` with an identity ``init_value`` use the
        ``reduce_window_sum``/``_max``/``_min`` primitives, anything else the generic
        ``reduce_window`` primitive.
      window_dimensions: the window size, one positive integer per operand axis.
      window_strides: the window strides (default: all 1).
      padding: ``'VALID'`` (default), ``'SAME'``, ``'SAME_LOWER'`` or ``(low, high)``
        pairs (negative values crop).
      base_dilation: the dilation of the operand (default: all 1).
      window_dilation: the dilation of the window (default: all 1).

    Returns:
      A pytree like ``operand`` with one reduced value per window position.

    Raises:
      ValueError: if the trees of ``operand``, ``init_value`` and the reducer's output
        differ, or there is no operand.
      TypeError: for inconsistent window parameters, dtypes or non-scalar init values.
    """
    from kiln._physical_tree import tree_flatten, tree_unflatten
    flat_ops, op_tree = tree_flatten(operand)
    flat_inits, init_tree = tree_flatten(init_value)
    if op_tree != init_tree:
        raise ValueError("Operands must have the same tree structure as init_values: "
                         f"{op_tree} vs. {init_tree}")
    if len(flat_ops) != len(flat_inits):
        raise ValueError("Must have same total number of operands as init_values:  "
                         f"{len(flat_ops)} vs. {len(flat_inits)}")
    if not flat_ops:
        raise ValueError("reduce_window must have at least one operand.")
    window_dimensions = tuple(window_dimensions)
    nd = len(window_dimensions)
    if window_strides is None:
        window_strides = (1,) * nd
    if isinstance(padding, str):
        window = window_dimensions if window_dilation is None else \
            _dilate_shape(window_dimensions, window_dilation)
        padding = tuple(padtype_to_pads(get_aval(flat_ops[0]).shape, window, window_strides,
                                        padding))
    else:
        padding = tuple((lo, hi) for lo, hi in padding)
    win = dict(window_dimensions=window_dimensions, window_strides=tuple(window_strides),
               padding=padding,
               base_dilation=(1,) * nd if base_dilation is None else tuple(base_dilation),
               window_dilation=(1,) * nd if window_dilation is None else
               tuple(window_dilation))
    # JAX's checks first, so bad (e.g. non-integer) parameters raise its errors.
    common_shape_rule(get_aval(flat_ops[0]), **win)
    win = {k: (tuple((int(lo), int(hi)) for lo, hi in v) if k == "padding"
               else tuple(int(d) for d in v)) for k, v in win.items()}
    reducer = _monoid_reducer(computation, flat_inits)
    if reducer is not None:
        return tree_unflatten(op_tree, [reducer(flat_ops[0], **win)])
    init_avals = tuple(ShapedArray((), a.dtype, a.weak_type)
                       for a in (get_aval(i) for i in flat_inits))
    jaxpr, consts, out_tree = _reducer_jaxpr(computation, init_avals, init_tree)
    if out_tree != op_tree:
        raise ValueError("reduce_window output must have the same tree structure as the "
                         f"operands {op_tree} vs. {out_tree}")
    outs = reduce_window_p.bind(*flat_ops, *flat_inits, jaxpr=jaxpr, consts=consts, **win)
    return tree_unflatten(op_tree, outs)


__all__ = ["reduce_window", "reduce_window_shape_tuple", "reduce_window_p",
           "reduce_window_sum_p", "reduce_window_max_p", "reduce_window_min_p",
           "select_and_gather_add_p", "select_and_scatter_add_p"]
