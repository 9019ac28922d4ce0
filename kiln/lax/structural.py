"""Structural primitives: dtype conversion, broadcasting, reshaping, transposition,
squeeze/expand_dims, select_n. Each beside its jvp/transpose/batching rules."""
from __future__ import annotations

import operator

import numpy as np

from kiln import _extended, dtypes
from kiln.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import ad, batching, lax_ops
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax._factory import _any, check_dtype, standard_primitive
from kiln.lax.sharding_constraint import apply_out_sharding

# ----------------------------------------------------------------------------------------------
# convert_element_type


def _float_to_int(x, new_dtype):
    """JAX (XLA) saturates out-of-range float→int conversions and maps NaN to 0. The bounds
    are compared in the float type: there ``iinfo.max`` may round up (2**31 - 1 becomes
    2**31 in float32), so clipping and then casting would overflow."""
    if x.dtype.kind != "f":          # bfloat16 / float8 (ml_dtypes) go through float32
        x = x.astype(np.float32)
    info = np.iinfo(new_dtype)
    nan = np.isnan(x)
    hi = x >= x.dtype.type(info.max)
    lo = x <= x.dtype.type(info.min)
    out = np.where(nan | hi | lo, x.dtype.type(0), x).astype(new_dtype)
    if hi.any() or lo.any():
        out = np.where(hi, new_dtype.type(info.max), np.where(lo, new_dtype.type(info.min), out))
    return np.asarray(out, new_dtype)


def _convert_impl(x, *, new_dtype, weak_type, sharding=None):
    if x.dtype == new_dtype:
        return x
    if x.dtype.kind == "c" and new_dtype.kind != "c":
        x = np.real(x)
    with np.errstate(invalid="ignore", over="ignore"):
        if new_dtype.kind in "iu" and x.dtype.kind not in "biu":
            return _float_to_int(x, new_dtype)
        if new_dtype == np.bool_ and x.dtype != np.bool_:
            return np.asarray(x != 0)
        return np.asarray(x).astype(new_dtype)


def _convert_abstract_eval(x, *, new_dtype, weak_type, sharding=None):
    return ShapedArray(x.shape, new_dtype, weak_type)


convert_element_type_p = standard_primitive(
    "convert_element_type", _convert_abstract_eval, _convert_impl,
    weak_type_rule=lambda w, *, new_dtype, weak_type, sharding=None: weak_type)
batching.vectorized_batcher(convert_element_type_p)


def _convert_jvp(primals, tangents, *, new_dtype, weak_type, sharding=None):
    (x,), (t,) = primals, tangents
    ans = convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type,
                                      sharding=sharding)
    if type(t) is Zero or not ad.is_differentiable_dtype(new_dtype) \
            or not ad.is_differentiable_dtype(get_aval(x).dtype):
        return ans, Zero.from_primal_value(ans)
    return ans, convert_element_type_p.bind(t, new_dtype=new_dtype, weak_type=weak_type,
                                            sharding=sharding)


def _convert_transpose(ct, x, *, new_dtype, weak_type, sharding=None):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    old = x.aval
    return [convert_element_type_p.bind(ct, new_dtype=old.dtype, weak_type=old.weak_type,
                                        sharding=None)]


ad.jvp_rules[convert_element_type_p] = _convert_jvp
ad.transpose_rules[convert_element_type_p] = _convert_transpose


def _check_extended(aval, new_dtype) -> None:
    """JAX's error for a conversion between an extended dtype (typed keys) and another."""
    if (isinstance(new_dtype, dtypes.ExtendedDType)
            or isinstance(aval.dtype, dtypes.ExtendedDType)) and aval.dtype != new_dtype:
        raise ValueError(f"Cannot convert_element_type from {getattr(aval.dtype, 'name', aval.dtype)}"
                         f" to {getattr(new_dtype, 'name', new_dtype)}")


def convert_element_type(operand, new_dtype):
    """Elementwise cast to ``new_dtype`` (canonicalized), like ``lax.convert_element_type``.

    To or from an extended dtype with rules (such as Flax's fp8 meta dtype), the array's
    data is viewed as the other dtype (see ``kiln.lax.edtype``); typed PRNG keys convert
    only to their own dtype (JAX's error otherwise)."""
    if _extended.has_rules(new_dtype) or \
            _extended.has_rules(getattr(operand, "dtype", None)):
        from kiln.lax.edtype import convert_extended
        return convert_extended(operand, new_dtype)
    if dtypes.explicit_x64_allowed() and not isinstance(new_dtype, dtypes.ExtendedDType):
        new_dtype = dtypes.check_and_canonicalize_user_dtype(new_dtype, "convert_element_type")
    else:
        new_dtype = dtypes.canonicalize_dtype(new_dtype, allow_extended_dtype=True)
    if type(operand) is int and isinstance(new_dtype, np.dtype) and \
            new_dtype != dtypes.float0:
        # A Python int converts with NumPy's (wrapping) cast, as JAX: 2**32 -> int32 is
        # 0 and 2**100 -> float32 is fine (it never becomes a default-int array first)
        from kiln.array import make_array
        return make_array(np.asarray(operand).astype(new_dtype))
    aval = get_aval(operand)
    _check_extended(aval, new_dtype)
    if aval.dtype == new_dtype and not aval.weak_type:
        return operand
    return convert_element_type_p.bind(operand, new_dtype=new_dtype, weak_type=False,
                                       sharding=None)


def _convert_element_type(operand, new_dtype=None, weak_type=False, sharding=None):
    """Internal cast that can set the weak-type flag (and lay the result out as
    ``sharding``, JAX's private signature)."""
    if sharding is not None:
        return apply_out_sharding(_convert_element_type(operand, new_dtype, weak_type),
                                  sharding)
    aval = get_aval(operand)
    if _extended.has_rules(new_dtype) or _extended.has_rules(aval.dtype):
        from kiln.lax.edtype import convert_extended
        return convert_extended(operand, aval.dtype if new_dtype is None else new_dtype,
                                weak_type=weak_type)
    if new_dtype is None:
        new_dtype = aval.dtype
    elif not (isinstance(new_dtype, np.dtype) and dtypes.explicit_x64_allowed()):
        new_dtype = dtypes.canonicalize_dtype(new_dtype, allow_extended_dtype=True)
    _check_extended(aval, new_dtype)
    if aval.dtype == new_dtype and aval.weak_type == weak_type and isinstance(
            operand, (Array, Tracer)):
        return operand      # (a NumPy array or Python scalar still becomes an Array, as JAX)
    return convert_element_type_p.bind(operand, new_dtype=new_dtype, weak_type=weak_type,
                                       sharding=None)


# ----------------------------------------------------------------------------------------------
# broadcast_in_dim


def _bid_impl(x, *, shape, broadcast_dimensions, sharding=None):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(np.reshape(x, expanded), shape)


def _bid_abstract_eval(x, *, shape, broadcast_dimensions, sharding=None):
    # JAX's checks, in JAX's order
    bd = broadcast_dimensions
    if len(bd) != x.ndim:
        raise TypeError(
            "broadcast_in_dim broadcast_dimensions must have length equal to operand ndim; "
            f"got broadcast_dimensions {bd} for operand ndim {x.ndim}.")
    if len(shape) < x.ndim:
        raise TypeError("broadcast_in_dim target broadcast shape must have equal or higher "
                        f"rank to the operand shape; got operand ndim {x.ndim} and target "
                        f"broadcast ndim {len(shape)}.")
    if not all(0 <= d < len(shape) for d in bd):
        raise TypeError("broadcast_in_dim broadcast_dimensions must be a subset of output "
                        f"dimensions, got {bd} for operand ndim {x.ndim} and shape {shape}.")
    for i, d in enumerate(bd):
        if x.shape[i] != 1 and x.shape[i] != shape[d]:
            raise TypeError(
                "broadcast_in_dim operand dimension sizes must either be 1, or be equal to their "
                f"corresponding dimensions in the target broadcast shape; got operand of shape "
                f"{x.shape}, target broadcast shape {shape}, broadcast_dimensions {bd} ")
    if len(set(bd)) != len(bd):
        raise TypeError("broadcast_in_dim broadcast_dimensions must not contain duplicates, "
                        f"got broadcast_dimensions {bd}")
    if list(bd) != sorted(bd):
        # (JAX accepts a permuting broadcast; kiln's implementations need increasing dims)
        raise TypeError("broadcast_in_dim broadcast_dimensions must be strictly increasing; "
                        f"got broadcast_dimensions {bd}")
    return ShapedArray(shape, x.dtype, x.weak_type)


broadcast_in_dim_p = standard_primitive("broadcast_in_dim", _bid_abstract_eval, _bid_impl)


def _bid_transpose(ct, x, *, shape, broadcast_dimensions, sharding=None):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    in_shape = x.aval.shape
    unit = tuple(i for i, d in enumerate(broadcast_dimensions)
                 if in_shape[i] == 1 and shape[d] != 1)
    sum_dims = tuple(i for i in range(len(shape)) if i not in broadcast_dimensions)
    sum_dims += tuple(broadcast_dimensions[i] for i in unit)
    out = reduce_sum(ct, tuple(sorted(sum_dims))) if sum_dims else ct
    if get_aval(out).shape != in_shape:
        out = reshape(out, in_shape)
    return [out]


def _bid_batch(axis_data, vals, dims, *, shape, broadcast_dimensions, sharding=None):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    new_shape = (axis_data.size,) + tuple(shape)
    new_dims = (0,) + tuple(b + 1 for b in broadcast_dimensions)
    return broadcast_in_dim_p.bind(x, shape=new_shape, broadcast_dimensions=new_dims,
                                   sharding=None), 0


ad.deflinear2(broadcast_in_dim_p, _bid_transpose)
batching.batch_rules[broadcast_in_dim_p] = _bid_batch


def broadcast_in_dim(operand, shape, broadcast_dimensions, out_sharding=None):
    """Broadcast ``operand`` into ``shape``; its axis i becomes axis ``broadcast_dimensions[i]``
    (laid out as ``out_sharding`` when given)."""
    shape = tuple(int(s) for s in shape)
    broadcast_dimensions = tuple(int(d) for d in broadcast_dimensions)
    aval = get_aval(operand)
    if aval.shape == shape and broadcast_dimensions == tuple(range(len(shape))):
        return apply_out_sharding(operand, out_sharding)
    if (len(set(broadcast_dimensions)) == len(broadcast_dimensions) == aval.ndim
            and list(broadcast_dimensions) != sorted(broadcast_dimensions)):
        # JAX accepts dimensions out of order (a transpose folded in); kiln stages the
        # transpose, so every rule of the primitive sees increasing dimensions (JAX's
        # primitive does not, and its gradient then fails).
        perm = tuple(sorted(range(aval.ndim), key=lambda i: broadcast_dimensions[i]))
        operand = transpose(operand, perm)
        broadcast_dimensions = tuple(broadcast_dimensions[i] for i in perm)
    out = broadcast_in_dim_p.bind(operand, shape=shape,
                                  broadcast_dimensions=broadcast_dimensions, sharding=None)
    return apply_out_sharding(out, out_sharding)


def broadcast(operand, sizes, *, out_sharding=None):
    """Add leading dimensions of ``sizes`` (laid out as ``out_sharding`` when given)."""
    aval = get_aval(operand)
    sizes = tuple(sizes)
    dims = tuple(range(len(sizes), len(sizes) + aval.ndim))
    return broadcast_in_dim(operand, sizes + aval.shape, dims, out_sharding=out_sharding)


# ----------------------------------------------------------------------------------------------
# reshape


def _reshape_impl(x, *, new_sizes, dimensions, sharding=None):
    if dimensions is not None:
        x = np.transpose(x, dimensions)
    return np.reshape(x, new_sizes)


def _reshape_abstract_eval(x, *, new_sizes, dimensions, sharding=None):
    if any(d < 0 for d in new_sizes):
        raise TypeError(f"reshape new_sizes must all be non-negative, got {new_sizes}.")
    if int(np.prod(new_sizes, dtype=np.int64)) != x.size:
        raise TypeError(f"reshape total size must be unchanged, got new_sizes {new_sizes} for "
                        f"shape {x.shape}.")
    if dimensions is not None and sorted(dimensions) != list(range(x.ndim)):
        raise TypeError(f"reshape dimensions must be a permutation, got {dimensions}")
    return ShapedArray(new_sizes, x.dtype, x.weak_type)


reshape_p = standard_primitive("reshape", _reshape_abstract_eval, _reshape_impl)


def _reshape_transpose(ct, x, *, new_sizes, dimensions, sharding=None):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    if dimensions is None:
        return [reshape(ct, x.aval.shape)]
    permuted = tuple(x.aval.shape[d] for d in dimensions)
    return [transpose(reshape(ct, permuted), tuple(np.argsort(dimensions)))]


def _reshape_batch(axis_data, vals, dims, *, new_sizes, dimensions, sharding=None):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    if dimensions is not None:
        x = transpose(x, (0,) + tuple(p + 1 for p in dimensions))
    return reshape_p.bind(x, new_sizes=(axis_data.size,) + tuple(new_sizes), dimensions=None,
                          sharding=None), 0


ad.deflinear2(reshape_p, _reshape_transpose)
batching.batch_rules[reshape_p] = _reshape_batch


def _static_sizes(sizes) -> tuple[int, ...]:
    """``sizes`` as a tuple of Python ints (each an integer or a concrete integer scalar),
    or JAX's TypeError."""
    if np.ndim(sizes) == 0:
        raise TypeError("Shapes must be 1D sequences of concrete values of integer type, "
                        f"got {sizes!r}.")
    out = []
    for d in sizes:
        if isinstance(d, Tracer):
            from kiln.errors import ConcretizationTypeError
            raise ConcretizationTypeError(d, "The new_sizes argument of lax.reshape must be "
                                             "static.")
        try:
            out.append(operator.index(d))
        except TypeError:
            raise TypeError("Shapes must be 1D sequences of concrete values of integer type, "
                            f"got {tuple(sizes)}.") from None
    return tuple(out)


def reshape(operand, new_sizes, dimensions=None, out_sharding=None):
    """Reshape (after an optional transpose by ``dimensions``) to ``new_sizes`` (laid out
    as ``out_sharding`` when given)."""
    new_sizes = _static_sizes(new_sizes)
    dims = None if dimensions is None else tuple(int(d) for d in dimensions)
    aval = get_aval(operand)
    if dims is not None and dims == tuple(range(aval.ndim)):
        dims = None
    if aval.shape == new_sizes and dims is None:
        return apply_out_sharding(operand, out_sharding)
    out = reshape_p.bind(operand, new_sizes=new_sizes, dimensions=dims, sharding=None)
    return apply_out_sharding(out, out_sharding)


# ----------------------------------------------------------------------------------------------
# transpose


def _transpose_abstract_eval(x, *, permutation):
    if sorted(permutation) != list(range(x.ndim)):
        raise TypeError("transpose permutation isn't a permutation of operand dimensions, got "
                        f"permutation {permutation} for operand shape {x.shape}.")
    return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype, x.weak_type)


transpose_p = standard_primitive("transpose", _transpose_abstract_eval,
                                 lambda x, *, permutation: np.transpose(x, permutation))


def _transpose_transpose(ct, x, *, permutation):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    return [transpose(ct, tuple(int(i) for i in np.argsort(permutation)))]


def _transpose_batch(axis_data, vals, dims, *, permutation):
    (x,), (d,) = vals, dims
    perm = (d,) + tuple(p if p < d else p + 1 for p in permutation)
    return transpose_p.bind(x, permutation=perm), 0


ad.deflinear2(transpose_p, _transpose_transpose)
batching.batch_rules[transpose_p] = _transpose_batch


def transpose(operand, permutation):
    """Permute the axes of ``operand``."""
    permutation = tuple(int(p) for p in permutation)
    if permutation == tuple(range(len(permutation))) and get_aval(operand).ndim == len(permutation):
        return operand
    return transpose_p.bind(operand, permutation=permutation)


# ----------------------------------------------------------------------------------------------
# squeeze / expand_dims


def _squeeze_abstract_eval(x, *, dimensions):
    for d in dimensions:
        if not 0 <= d < x.ndim or x.shape[d] != 1:
            raise ValueError(f"cannot select an axis to squeeze out which has size not equal to "
                             f"one, got shape={x.shape} and dimensions={dimensions}")
    shape = tuple(s for i, s in enumerate(x.shape) if i not in dimensions)
    return ShapedArray(shape, x.dtype, x.weak_type)


squeeze_p = standard_primitive("squeeze", _squeeze_abstract_eval,
                               lambda x, *, dimensions: np.squeeze(x, dimensions))


def _squeeze_transpose(ct, x, *, dimensions):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    return [reshape(ct, x.aval.shape)]


def _squeeze_batch(axis_data, vals, dims, *, dimensions):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    return squeeze_p.bind(x, dimensions=tuple(i + 1 for i in dimensions)), 0


ad.deflinear2(squeeze_p, _squeeze_transpose)
batching.batch_rules[squeeze_p] = _squeeze_batch


def squeeze(array, dimensions):
    """Remove the size-1 axes ``dimensions``."""
    nd = get_aval(array).ndim
    canon = []
    for d in dimensions:
        d = operator.index(d)       # JAX's TypeError for None, floats, ...
        if not -nd <= d < nd:
            raise ValueError(f"axis {d} is out of bounds for array of dimension {nd}")
        canon.append(d % nd)
    if len(set(canon)) != len(canon):
        raise ValueError(f"dimensions are not unique: {tuple(dimensions)}")
    dims = tuple(sorted(canon))
    if not dims:
        return array
    return squeeze_p.bind(array, dimensions=dims)


def expand_dims(array, dimensions):
    """Insert size-1 axes at ``dimensions`` (positions in the result)."""
    dimensions = tuple(dimensions)
    if len(set(dimensions)) != len(dimensions):
        raise ValueError(f"repeated axis in lax.expand_dims: {dimensions}")
    aval = get_aval(array)
    ndim_out = aval.ndim + len(dimensions)
    dims = []
    for d in dimensions:
        d = int(d)
        if not -ndim_out <= d < ndim_out:
            raise ValueError(f"axis {d} is out of bounds for array of dimension {ndim_out}")
        dims.append(d % ndim_out)
    if len(set(dims)) != len(dims):       # again after canonicalizing
        raise ValueError(f"repeated axis in lax.expand_dims: {dims}")
    dims = sorted(dims)
    shape = list(aval.shape)
    for d in dims:
        shape.insert(d, 1)
    bdims = tuple(i for i in range(ndim_out) if i not in dims)
    return broadcast_in_dim(array, tuple(shape), bdims)


# ----------------------------------------------------------------------------------------------
# select_n


def _select_n_abstract_eval(which, *cases):
    if not cases:
        raise TypeError("select_n must have at least one case")
    if any(c.shape != cases[0].shape for c in cases):
        raise TypeError(f"select_n cases must have the same shapes, got "
                        f"{[c.shape for c in cases]}.")
    if any(c.dtype != cases[0].dtype for c in cases):
        raise TypeError(f"select_n cases must have the same dtypes, got "
                        f"{[c.dtype.name for c in cases]}.")
    if which.shape and which.shape != cases[0].shape:
        raise TypeError("select_n `which` must be scalar or have the same shape as cases, got "
                        f"`which` shape {which.shape} but case shape {cases[0].shape}.")
    if which.dtype != np.bool_ and which.dtype.kind not in "iu":
        raise TypeError(f"select_n `which` must be boolean or integer type, got "
                        f"{which.dtype.name}.")
    if which.dtype == np.bool_ and len(cases) > 2:
        raise TypeError("select_n with boolean `which` cannot have more than two cases")
    return ShapedArray(cases[0].shape, cases[0].dtype, all(c.weak_type for c in cases))


def _select_n_impl(which, *cases):
    if len(cases) == 1:
        return cases[0]
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0])
    idx = np.clip(which, 0, len(cases) - 1)
    return np.choose(np.broadcast_to(idx, cases[0].shape), cases)


select_n_p = standard_primitive("select_n", _select_n_abstract_eval, _select_n_impl,
                                weak_type_rule=lambda w, *ws: all(ws))


def _select_n_jvp(primals, tangents):
    which, *cases = primals
    ans = select_n_p.bind(which, *cases)
    ts = tangents[1:]
    if all(type(t) is Zero for t in ts):
        return ans, Zero.from_primal_value(ans)
    ts = [ad.instantiate_zeros(t) for t in ts]
    return ans, select_n_p.bind(which, *ts)


def _select_n_transpose(ct, which, *cases):
    if is_undefined_primal(which):
        raise ValueError("select_n predicate cannot be linear")
    out = [None]
    for i, c in enumerate(cases):
        if not is_undefined_primal(c):
            out.append(None)
        elif type(ct) is Zero:
            out.append(Zero(c.aval))
        else:
            zeros = ad.zeros_like_aval(c.aval)
            branches = [zeros] * len(cases)
            branches[i] = ct
            out.append(select_n_p.bind(which, *branches))
    return out


def _select_n_batch(axis_data, vals, dims):
    which, *cases = vals
    wd, *cds = dims
    size = axis_data.size
    case_shape = None
    for c, d in zip(cases, cds):
        a = get_aval(c)
        case_shape = a.shape if d is None else a.shape[:d] + a.shape[d + 1:]
        break
    if wd is None and get_aval(which).ndim == 0:
        cases = [batching.bdim_at_front(c, d, size) for c, d in zip(cases, cds)]
        return select_n_p.bind(which, *cases), 0
    which = batching.bdim_at_front(which, wd, size)
    if get_aval(which).ndim == 1 and len(case_shape) > 0:
        which = broadcast_in_dim(which, (size,) + tuple(case_shape), (0,))
    cases = [batching.bdim_at_front(c, d, size) for c, d in zip(cases, cds)]
    return select_n_p.bind(which, *cases), 0


ad.jvp_rules[select_n_p] = _select_n_jvp
ad.transpose_rules[select_n_p] = _select_n_transpose
batching.batch_rules[select_n_p] = _select_n_batch


def select_n(which, *cases):
    """``cases[which]`` elementwise (``which`` bool: False→cases[0], True→cases[1])."""
    return select_n_p.bind(which, *cases)


def select(pred, on_true, on_false):
    """``on_true`` where ``pred`` else ``on_false``."""
    return select_n_p.bind(pred, on_false, on_true)


# Reductions are defined in kiln.lax.reductions; imported late to avoid a cycle.
from kiln.lax.reductions import reduce_sum  # noqa: E402


def broadcast_like(x, y):
    """Broadcast ``x`` to the shape of ``y``, aligning trailing dimensions (as NumPy).

    Args:
      x: the array to broadcast.
      y: an array (or a value with ``shape``) whose shape is the target.

    Returns:
      ``x`` broadcast to ``np.shape(y)``.
    """
    shape = tuple(np.shape(y)) if not hasattr(y, "shape") else tuple(y.shape)
    nd = np.ndim(x) if not hasattr(x, "ndim") else x.ndim
    return broadcast_in_dim(x, shape, tuple(range(len(shape) - nd, len(shape))))


def shape_as_value(shape):
    """A shape as an integer array (``lax.shape_as_value``): int32, or int64 when a
    dimension exceeds the int32 range. kiln's shapes are static, so the result is a
    constant: a NumPy array (a kiln array for the empty shape), as JAX gives for static
    shapes."""
    dims = [operator.index(d) for d in shape]
    dt = np.dtype(np.int64) if any(d > np.iinfo(np.int32).max for d in dims) \
        else np.dtype(np.int32)
    if not dims:
        from kiln.lax.slicing import full
        return full((0,), np.array(0, dt))
    return np.asarray(dims, dt)


def asarray(x):
    """``jax._src.lax.lax.asarray``: a kiln array for an array-like, binding no primitive
    (arrays and tracers unchanged; NumPy values strongly typed, Python scalars weakly typed,
    both at their canonical dtype)."""
    from kiln.array import make_array
    if isinstance(x, (Array, Tracer)):
        return x
    if isinstance(x, (bool, np.ndarray, np.generic)):
        return make_array(dtypes.coerce_to_array(x), False)
    if isinstance(x, (int, float, complex)):
        return make_array(dtypes.coerce_to_array(x), True)
    raise TypeError(f"asarray: expected ArrayLike, got {x} of type {type(x)}.")


__all__ = ["convert_element_type", "broadcast_in_dim", "broadcast", "broadcast_like",
           "reshape", "transpose", "shape_as_value",
           "squeeze", "expand_dims", "select_n", "select", "_convert_element_type",
           "convert_element_type_p", "broadcast_in_dim_p", "reshape_p", "transpose_p",
           "squeeze_p", "select_n_p"]
_ = (check_dtype, _any)

# The interpreters (below ``kiln.lax``) move and insert batch axes with these.
lax_ops.install(transpose=transpose, broadcast_in_dim=broadcast_in_dim,
                convert_element_type=_convert_element_type)
