"""Reductions beyond sums and extrema: reduce_prod, reduce_and/or/xor, argmax/argmin,
and ``lax.reduce`` for the common monoids (add, mul, max, min, and, or, xor).

reduce_prod's JVP uses exclusive prefix/suffix products (``sum_i t_i * prod_{j<i} x_j *
prod_{j>i} x_j``), which stays exact when some factors are zero.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax._factory import as_dtype, false_weak_type_rule, standard_primitive
from kiln.lax.arith import mul
from kiln.lax.cumulative import cumprod
from kiln.lax.reductions import _reduce_shape, reduce_max, reduce_min, reduce_sum
from kiln.lax.slicing import concatenate, eager_checked, full, slice_in_dim
from kiln.lax.structural import reshape, transpose


def _shift_axes_batch(prim):
    def batch(axis_data, vals, dims, **params):
        (x,), (d,) = vals, dims
        axes = params["axes"]
        new_axes = tuple(a + 1 if a >= d else a for a in axes)
        out_d = d - sum(1 for a in axes if a < d)
        return prim.bind(x, **{**params, "axes": new_axes}), out_d
    batching.batch_rules[prim] = batch


# ----------------------------------------------------------------------------------------------
# reduce_prod


def _prod_abstract_eval(x, *, axes):
    if x.dtype == np.bool_ or not dtypes.issubdtype(x.dtype, np.number):
        raise TypeError(f"reduce_prod does not accept dtype {x.dtype.name}. Accepted dtypes are "
                        "subtypes of number.")
    return ShapedArray(_reduce_shape("reduce_prod", x, axes), x.dtype, x.weak_type)


def _prod_impl(x, *, axes):
    x = np.asarray(x)
    work = x.astype(np.float32) if x.dtype == dtypes.bfloat16 else x
    return as_dtype(np.prod(work, axis=axes, dtype=work.dtype), x.dtype)


reduce_prod_p = standard_primitive("reduce_prod", _prod_abstract_eval, _prod_impl,
                                   weak_type_rule=lambda w, **_: w)
_shift_axes_batch(reduce_prod_p)


def _reduce_prod_jvp(primals, tangents, *, axes):
    (x,), (t,) = primals, tangents
    ans = reduce_prod_p.bind(x, axes=axes)
    if type(t) is Zero or not ad.is_differentiable_dtype(get_aval(x).dtype):
        return ans, Zero.from_primal_value(ans)
    aval = get_aval(x)
    kept = tuple(d for d in range(aval.ndim) if d not in axes)
    kept_shape = tuple(aval.shape[d] for d in kept)
    n = int(np.prod([aval.shape[d] for d in axes], dtype=np.int64))
    if n == 0:
        return ans, Zero.from_primal_value(ans)

    def flat(v):
        return reshape(transpose(v, tuple(axes) + kept), (n,) + kept_shape)

    xf, tf = flat(x), flat(t)
    ones = full((1,) + kept_shape, 1, aval.dtype)
    left = cumprod(concatenate([ones, slice_in_dim(xf, 0, n - 1)], 0), 0)
    right = cumprod(concatenate([slice_in_dim(xf, 1, n), ones], 0), 0, reverse=True)
    return ans, reduce_sum(mul(tf, mul(left, right)), (0,))


ad.jvp_rules[reduce_prod_p] = _reduce_prod_jvp


def reduce_prod(operand, axes):
    """Product over ``axes``."""
    return reduce_prod_p.bind(operand, axes=tuple(sorted(int(a) for a in axes)))


# ----------------------------------------------------------------------------------------------
# reduce_and / reduce_or / reduce_xor


def _logical_primitive(name, bool_fn, int_ufunc):
    def abstract_eval(x, *, axes):
        if x.dtype != np.bool_ and x.dtype.kind not in "iu":
            raise TypeError("logical reduction requires operand dtype bool or int, got "
                            f"{x.dtype.name}.")
        return ShapedArray(_reduce_shape(name, x, axes), x.dtype, False)

    def impl(x, *, axes):
        x = np.asarray(x)
        if x.dtype == np.bool_:
            return np.asarray(bool_fn(x, axis=axes))
        return as_dtype(int_ufunc.reduce(x, axis=axes, dtype=x.dtype), x.dtype)

    prim = standard_primitive(name, abstract_eval, impl, weak_type_rule=false_weak_type_rule)
    _shift_axes_batch(prim)
    ad.defjvp_zero(prim)
    return prim


reduce_and_p = _logical_primitive("reduce_and", np.all, np.bitwise_and)
reduce_or_p = _logical_primitive("reduce_or", np.any, np.bitwise_or)
reduce_xor_p = _logical_primitive("reduce_xor", np.bitwise_xor.reduce, np.bitwise_xor)


def reduce_and(operand, axes):
    """Logical (bool) or bitwise (int) AND over ``axes``."""
    return reduce_and_p.bind(operand, axes=tuple(sorted(int(a) for a in axes)))


def reduce_or(operand, axes):
    """Logical (bool) or bitwise (int) OR over ``axes``."""
    return reduce_or_p.bind(operand, axes=tuple(sorted(int(a) for a in axes)))


def reduce_xor(operand, axes):
    """Logical (bool) or bitwise (int) XOR over ``axes``."""
    return reduce_xor_p.bind(operand, axes=tuple(sorted(int(a) for a in axes)))


# ----------------------------------------------------------------------------------------------
# argmax / argmin


def _argminmax_primitive(name, np_fn):
    def abstract_eval(x, *, axes, index_dtype):
        (axis,) = axes
        if not 0 <= axis < x.ndim:
            raise ValueError(f"Invalid axis {axis} for operand shape {x.shape}")
        if x.shape[axis] < 1:
            raise ValueError("argmin and argmax require non-empty reduced dimension. "
                             f"operand.shape={x.shape} axis={axis}")
        if np.dtype(index_dtype).kind not in "iu":
            raise TypeError(f"index_dtype must be an integer type, but got "
                            f"{np.dtype(index_dtype).name}")
        shape = x.shape[:axis] + x.shape[axis + 1:]
        return ShapedArray(shape, index_dtype, False)

    def impl(x, *, axes, index_dtype):
        # NumPy returns the first NaN for both argmax and argmin, as JAX does.
        x = np.asarray(x)
        if x.dtype == dtypes.bfloat16:
            x = x.astype(np.float32)
        return as_dtype(np_fn(x, axis=axes[0]), np.dtype(index_dtype))

    prim = standard_primitive(name, abstract_eval, impl, weak_type_rule=false_weak_type_rule)
    _shift_axes_batch(prim)
    ad.defjvp_zero(prim)
    return prim


argmax_p = _argminmax_primitive("argmax", np.argmax)
argmin_p = _argminmax_primitive("argmin", np.argmin)


def argmax(operand, axis, index_dtype):
    """Index of the maximum along ``axis`` (first one on ties; NaN counts as the max)."""
    return argmax_p.bind(operand, axes=(int(axis),),
                         index_dtype=dtypes.canonicalize_dtype(index_dtype))


def argmin(operand, axis, index_dtype):
    """Index of the minimum along ``axis`` (first one on ties; NaN counts as the min)."""
    return argmin_p.bind(operand, axes=(int(axis),),
                         index_dtype=dtypes.canonicalize_dtype(index_dtype))


# ----------------------------------------------------------------------------------------------
# lax.reduce for monoids


_MONOID_REDUCERS = {
    "add": reduce_sum, "mul": reduce_prod, "max": reduce_max, "min": reduce_min,
    "and": reduce_and, "or": reduce_or, "xor": reduce_xor,
}
_MONOID_FUNCTIONS = {
    "add": "add", "mul": "mul", "max": "max", "min": "min",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
}


def _monoid_name(computation, aval):
    """Which monoid ``computation`` is: by identity with a ``kiln.lax`` function, else by
    tracing it on two scalars and finding a single add/mul/max/min/and/or/xor."""
    from kiln import lax
    for name, fn_name in _MONOID_FUNCTIONS.items():
        fn = getattr(lax, fn_name, None)
        if fn is not None and computation is fn:
            return name
    try:
        from kiln.interpreters.staging import trace_to_jaxpr
        scalar = ShapedArray((), aval.dtype, False)
        jaxpr, consts = trace_to_jaxpr(lambda a, b: [computation(a, b)], [scalar, scalar])
    except Exception:
        return None
    if consts or len(jaxpr.eqns) != 1:
        return None
    (eqn,) = jaxpr.eqns
    if eqn.primitive.name not in _MONOID_REDUCERS or list(eqn.outvars) != list(jaxpr.outvars):
        return None
    if set(map(id, eqn.invars)) != set(map(id, jaxpr.invars)) or len(eqn.invars) != 2:
        return None
    return eqn.primitive.name


def _identity(name, dtype):
    dtype = np.dtype(dtype)
    if name in ("add", "or", "xor"):
        return np.zeros((), dtype)
    if name == "mul":
        return np.ones((), dtype)
    if name == "and":
        return np.asarray(True) if dtype == np.bool_ else np.asarray(-1).astype(dtype)
    big = name == "min"
    if dtype == np.bool_:
        return np.asarray(big)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.asarray(info.max if big else info.min, dtype)
    return np.asarray(np.inf if big else -np.inf, dtype)


def _as_init(v, dtype):
    """A Python scalar init value as a weakly typed scalar of the operand's dtype."""
    if type(v) in (int, float, complex, bool):
        from kiln.array import make_array
        return make_array(np.asarray(v, dtype), True)
    return v


def reduce(operands, init_values, computation, dimensions, out_sharding=None):  # noqa: A001
    """Reduce ``operands`` over ``dimensions`` with ``computation`` (XLA's Reduce).

    Args:
      operands: an array, or a pytree of arrays of one shape.
      init_values: a scalar, or a pytree of scalars like ``operands`` (same dtypes): the
        identity of ``computation``.
      computation: maps two trees like ``init_values`` to one; with ``init_values`` a
        monoid (associative, the init values its identities), as JAX requires (the result
        is undefined otherwise).
      dimensions: the axes to reduce.
      out_sharding: accepted for JAX's signature (no effect on one device).

    Returns:
      A pytree like ``operands`` without the ``dimensions`` axes.

    One operand with ``lax.add``/``mul``/``max``/``min``/``bitwise_and``/``or``/``xor``
    (or a function that is just one of them) uses ``reduce_sum``/``reduce_prod``/...;
    anything else (several operands: an argmax over ``(values, indices)``; any other
    reducer) binds the general ``reduce`` primitive (:mod:`kiln.lax.reduce_general`).
    """
    from kiln import tree_util
    from kiln.core.trace import is_concrete
    from kiln.lax.reduce_general import reduce_general
    flat_ops, tree = tree_util.tree_flatten(operands)
    flat_inits, init_tree = tree_util.tree_flatten(init_values)
    if tree != init_tree:
        raise ValueError("Operands must have the same tree structure as init_values: "
                         f"{tree} vs. {init_tree}")
    if len(flat_ops) != len(flat_inits):
        raise ValueError("reduce: operands and init_values must have the same number of "
                         f"leaves, got {len(flat_ops)} and {len(flat_inits)}")
    init_shapes = [tuple(np.shape(v)) for v in flat_inits]
    if any(sh != () for sh in init_shapes):
        raise ValueError(f"reduce found non-scalar initial value: {init_shapes}")
    dims = tuple(int(d) for d in dimensions)
    flat_inits = [_as_init(v, get_aval(x).dtype) for v, x in zip(flat_inits, flat_ops)]
    name = None
    if len(flat_ops) == 1:
        name = _monoid_name(computation, get_aval(flat_ops[0]))
    if name is None:
        return tree_util.tree_unflatten(
            tree, reduce_general(flat_ops, flat_inits, computation, tree, dims))
    (x,), (init,) = flat_ops, flat_inits
    aval = get_aval(x)
    init_aval = get_aval(init)
    if init_aval.dtype != aval.dtype:
        raise TypeError("reduce operand dtypes should match corresponding initial value "
                        f"dtypes, got operands={aval.str_short()} and "
                        f"initial_values={init_aval.str_short()}")
    out = _MONOID_REDUCERS[name](x, dims)
    if is_concrete(init):
        if np.all(np.asarray(init) == _identity(name, aval.dtype)):
            return tree_util.tree_unflatten(tree, [out])
    from kiln import lax
    combine = getattr(lax, _MONOID_FUNCTIONS[name])
    from kiln.lax.structural import broadcast_in_dim
    out_shape = get_aval(out).shape
    out = combine(out, broadcast_in_dim(init, out_shape, ()))
    return tree_util.tree_unflatten(tree, [out])


eager_checked(reduce_prod_p, reduce_and_p, reduce_or_p, reduce_xor_p, argmax_p, argmin_p)

__all__ = ["reduce_prod", "reduce_and", "reduce_or", "reduce_xor", "argmax", "argmin",
           "reduce", "reduce_prod_p", "reduce_and_p", "reduce_or_p", "reduce_xor_p", "argmax_p",
           "argmin_p"]
