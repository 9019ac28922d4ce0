"""Reduction primitives (reduce_sum, reduce_max, ...) with their rules."""
from __future__ import annotations

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching, lax_ops
from kiln.interpreters.ad import Zero
from kiln.lax._factory import _any, _num, as_dtype, check_dtype, standard_primitive
from kiln.lax.sharding_constraint import apply_out_sharding


def _reduce_shape(name, x, axes):
    for a in axes:
        if not 0 <= a < x.ndim:
            raise ValueError(f"{name}: reduction axis {a} is out of bounds for array of "
                             f"rank {x.ndim}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"duplicate value in 'axes' of reduction: {axes}")
    return tuple(s for i, s in enumerate(x.shape) if i not in axes)


def reduction_primitive(name, np_fn, kinds, *, out_sharding_param=True):
    def impl(x, *, axes, out_sharding=None):
        return as_dtype(np_fn(x, axis=axes), x.dtype)

    def abstract_eval(x, *, axes, out_sharding=None):
        check_dtype(name, x.dtype, kinds)
        return ShapedArray(_reduce_shape(name, x, axes), x.dtype, x.weak_type)

    prim = standard_primitive(name, abstract_eval, impl,
                              weak_type_rule=lambda w, **_: w)

    def batch(axis_data, vals, dims, *, axes, out_sharding=None):
        (x,), (d,) = vals, dims
        new_axes = tuple(a + (1 if a >= d else 0) for a in axes)
        out_d = d - sum(1 for a in axes if a < d)
        return prim.bind(x, axes=new_axes, out_sharding=None), out_d

    batching.batch_rules[prim] = batch
    return prim


def _sum_impl(x, *, axes, out_sharding=None):
    if x.dtype == np.bool_:
        return np.any(x, axis=axes)
    return as_dtype(np.sum(x, axis=axes, dtype=x.dtype), x.dtype)


reduce_sum_p = reduction_primitive("reduce_sum", np.sum, _any)
reduce_sum_p.impl = _sum_impl


def _reduce_sum_transpose(ct, x, *, axes, out_sharding=None):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    from kiln.lax.structural import broadcast_in_dim
    shape = x.aval.shape
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    return [broadcast_in_dim(ct, shape, kept)]


ad.deflinear2(reduce_sum_p, _reduce_sum_transpose)


def reduce_sum(operand, axes, *, out_sharding=None):
    """Sum over ``axes`` (laid out as ``out_sharding`` when given)."""
    axes = tuple(sorted(int(a) for a in axes))
    out = reduce_sum_p.bind(operand, axes=axes, out_sharding=None)
    return apply_out_sharding(out, out_sharding)


def _minmax_jvp(prim):
    # Tangent of max/min: average of the tangents at the positions attaining the extremum
    # (JAX's convention, which gives symmetric subgradients for ties).
    def rule(primals, tangents, *, axes, out_sharding=None):
        (x,), (t,) = primals, tangents
        ans = prim.bind(x, axes=axes, out_sharding=None)
        if type(t) is Zero:
            return ans, Zero.from_primal_value(ans)
        from kiln import lax
        shape = get_aval(x).shape
        kept = tuple(i for i in range(len(shape)) if i not in axes)
        location = lax.eq(x, lax.broadcast_in_dim(ans, shape, kept))
        location = lax.convert_element_type(location, get_aval(t).dtype)
        counts = reduce_sum(location, axes)
        return ans, lax.div(reduce_sum(lax.mul(t, location), axes), counts)
    ad.jvp_rules[prim] = rule


reduce_max_p = reduction_primitive("reduce_max", np.max, _any)
reduce_min_p = reduction_primitive("reduce_min", np.min, _any)
_minmax_jvp(reduce_max_p)
_minmax_jvp(reduce_min_p)


def reduce_max(operand, axes, *, out_sharding=None):
    """Maximum over ``axes`` (laid out as ``out_sharding`` when given)."""
    out = reduce_max_p.bind(operand, axes=tuple(sorted(int(a) for a in axes)),
                            out_sharding=None)
    return apply_out_sharding(out, out_sharding)


def reduce_min(operand, axes, *, out_sharding=None):
    """Minimum over ``axes`` (laid out as ``out_sharding`` when given)."""
    out = reduce_min_p.bind(operand, axes=tuple(sorted(int(a) for a in axes)),
                            out_sharding=None)
    return apply_out_sharding(out, out_sharding)


_ = _num
__all__ = ["reduce_sum", "reduce_max", "reduce_min", "reduce_sum_p", "reduce_max_p",
           "reduce_min_p", "reduction_primitive"]

# ``custom_vmap``'s batched backward pass (in the interpreters) sums per-lane cotangents.
lax_ops.install(reduce_sum=reduce_sum)
