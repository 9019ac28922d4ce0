"""Argument handling shared by every ``kiln.numpy`` function.

What this module holds: the array-like check (``check_arraylike``), conversion of
inputs to operands the ``lax`` functions accept (``ensure_arraylike``), JAX's dtype
promotion (``promote_dtypes*``), NumPy broadcasting built from ``lax.broadcast_in_dim``
(``promote_shapes``, ``broadcast_to``), and axis canonicalization.

What it must not hold: any NumPy computation on a traced value. NumPy is used only
on static shapes and on concrete constants.
"""
from __future__ import annotations

import operator
import warnings

import numpy as np

from kiln import _transfer_guard, dtypes, lax
from kiln.array import Array, make_array, to_array
from kiln.config import config
from kiln.core import trace as _core
from kiln.core.trace import Tracer, concretize, get_aval
from kiln.errors import ConcretizationTypeError

_py_scalars = (bool, int, float, complex)
_arraylike_types = (Array, Tracer, np.ndarray, np.generic) + _py_scalars


def is_arraylike(x) -> bool:
    """JAX's notion of an array-like: arrays (typed key arrays too), tracers, NumPy values
    and Python scalars."""
    return isinstance(x, _arraylike_types) or type(x) in _core.extended_types or \
        hasattr(x, "__jax_array__")


def check_arraylike(fun_name: str, *args, emit_warning: bool = False,
                    stacklevel: int = 3) -> None:
    """Raise JAX's TypeError when an argument is a list, tuple, string, ... (with
    ``emit_warning``, JAX's DeprecationWarning instead)."""
    for pos, arg in enumerate(args):
        if not is_arraylike(arg):
            msg = (f"{fun_name} requires ndarray or scalar arguments, got {type(arg)} at "
                   f"position {pos}.")
            if emit_warning:
                warnings.warn(msg + " In a future JAX release this will be an error.",
                              DeprecationWarning, stacklevel=stacklevel)
                return
            raise TypeError(msg)


def check_arraylike_or_none(fun_name: str, *args) -> None:
    for pos, arg in enumerate(args):
        if arg is not None and not is_arraylike(arg):
            raise TypeError(f"{fun_name} requires ndarray, scalar, or None arguments, got "
                            f"{type(arg)} at position {pos}.")


def as_operand(x):
    """An Array or a tracer for any array-like (Python scalars become weak Arrays)."""
    if isinstance(x, (Array, Tracer)) or type(x) in _core.extended_types:
        return x
    m = getattr(x, "__jax_array__", None)
    if m is not None:
        return as_operand(m())
    if isinstance(x, np.ndarray) and x.dtype == object:
        raise TypeError(f"kiln.numpy does not support arrays of dtype object: {x!r}")
    _guard_host_value(x)
    return to_array(x)


def _guard_host_value(x):
    """JAX's host-to-device transfer guard for a host value becoming an operand at top
    level (inside a trace it is a constant of the traced program: no transfer)."""
    if _transfer_guard.active() and type(_core.current_trace()) is _core.EvalTrace:
        _transfer_guard.check_value(x)


def ensure_arraylike(fun_name: str, *args):
    """``check_arraylike`` then ``as_operand``; a single argument is returned bare."""
    check_arraylike(fun_name, *args)
    if len(args) == 1:
        return as_operand(args[0])
    return tuple(as_operand(a) for a in args)


def is_traced(x) -> bool:
    return isinstance(concretize(x), Tracer)


def concrete_value(x, context: str = ""):
    """The NumPy value of a concrete array-like, or ConcretizationTypeError for tracers."""
    x = concretize(x)
    if isinstance(x, Tracer):
        raise ConcretizationTypeError(x, context)
    if type(x) is Array:
        return x._value
    return np.asarray(x)


def concrete_or_none(x):
    """The NumPy value of ``x`` when it is concrete, else None."""
    x = concretize(x)
    if isinstance(x, Tracer):
        return None
    if type(x) is Array:
        return x._value
    return np.asarray(x)


def core_int(x, context: str) -> int:
    """A static Python int from an int-like (raising ConcretizationTypeError for tracers)."""
    x = concretize(x)
    if isinstance(x, Tracer):
        raise ConcretizationTypeError(x, context)
    return operator.index(x)


def shape_of(x) -> tuple:
    if isinstance(x, (Array, Tracer)) or type(x) in _core.extended_types:
        return get_aval(x).shape
    return np.shape(x)


def ndim_of(x) -> int:
    return len(shape_of(x))


def dtype_of(x):
    return dtypes.dtype(x, canonicalize=True)


# ----------------------------------------------------------------------------------------------
# constants


def scalar_const(value, dtype, weak_type: bool = False) -> Array:
    """A concrete zero-dimensional Array of ``dtype`` (no tracing involved)."""
    return make_array(np.asarray(value, dtype), weak_type)


def full_const(shape, value, dtype) -> Array:
    """A concrete broadcast Array filled with ``value`` (a read-only view; never mutated)."""
    if isinstance(dtype, dtypes.ExtendedDType):     # typed keys: the dtype's own rule
        return dtype._rules.full(tuple(shape), value, dtype)
    return make_array(np.broadcast_to(np.asarray(value, dtype), tuple(shape)), False)


def zeros_like_op(x):
    a = get_aval(x)
    return full_const(a.shape, 0, a.dtype)


# ----------------------------------------------------------------------------------------------
# dtype promotion


def _python_int(x: int, dtype) -> np.ndarray:
    """A Python int operand as JAX converts it: it must fit the default integer type
    (int32, or int64 under ``jax_enable_x64``), else ``OverflowError``; then it converts
    to ``dtype`` as ``convert_element_type`` does, wrapping around for a narrower
    integer type (``int8_array + 300`` adds 44, ``uint8_array // -3`` divides by 253)."""
    default = dtypes.canonicalize_dtype(np.int64)
    info = np.iinfo(default)
    if not info.min <= x <= info.max:
        raise OverflowError(
            f"Python int {x} is out of bounds for {default.name}, the default integer type "
            "that JAX gives Python ints (enable jax_enable_x64 for int64, or pass a NumPy "
            "scalar or array of the intended dtype).")
    if dtype.kind in "iu" and not np.iinfo(dtype).min <= x <= np.iinfo(dtype).max:
        return np.asarray(x, default).astype(dtype)
    return np.asarray(x, dtype)


def _convert(x, dtype, weak_type):
    """Convert one operand to (dtype, weak_type); Python scalars and concrete scalars whose
    conversion NumPy does exactly as lax does go straight to ``dtype`` (constant folding)."""
    if type(x) in _py_scalars:
        _guard_host_value(x)
        if type(x) is int:
            return make_array(_python_int(x, dtype), weak_type)
        return make_array(np.asarray(x, dtype), weak_type)
    x = as_operand(x)
    if type(x) is Array and x._value.ndim == 0:
        src = x._value.dtype
        if src == dtype:
            return x if x.weak_type == weak_type else make_array(x._value, weak_type)
        if src.kind in "biu" and dtype.kind in "fc" or src.kind == dtype.kind == "f" \
                or src.kind in "f" and dtype.kind == "c":
            return make_array(x._value.astype(dtype), weak_type)
    return lax._convert_element_type(x, dtype, weak_type)


def _same_type_operands(args) -> bool:
    """True when all args are arrays/tracers of one dtype and one weak type (no promotion)."""
    first = args[0]
    if not isinstance(first, (Array, Tracer)):
        return False
    dt, weak = first.dtype, first.weak_type
    for a in args[1:]:
        if not isinstance(a, (Array, Tracer)) or a.dtype != dt or a.weak_type != weak:
            return False
    # One extended dtype needs no promotion (JAX lets it through).
    return isinstance(dt, dtypes.ExtendedDType) or dtypes.canonicalize_dtype(dt) == dt


def promote_dtypes(*args):
    """Convert all arguments to their common JAX result dtype (weak when all are weak)."""
    if len(args) < 2:
        return [as_operand(a) for a in args]
    if _same_type_operands(args):
        return list(args)
    dt, weak = dtypes.result_type(*args, return_weak_type_flag=True)
    return [_convert(x, dt, weak) for x in args]


def promote_dtypes_inexact(*args):
    """Like ``promote_dtypes``, then integers and bools go to the default float."""
    dt, weak = dtypes.result_type(*args, return_weak_type_flag=True)
    dt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(dt))
    return [_convert(x, dt, weak) for x in args]


def promote_dtypes_numeric(*args):
    """Like ``promote_dtypes``, then bool goes to the default int."""
    dt, weak = dtypes.result_type(*args, return_weak_type_flag=True)
    dt = dtypes.canonicalize_dtype(dtypes.to_numeric_dtype(dt))
    return [_convert(x, dt, weak) for x in args]


def promote_dtypes_complex(*args):
    """Like ``promote_dtypes``, then to the complex type of matching precision."""
    dt, weak = dtypes.result_type(*args, return_weak_type_flag=True)
    dt = dtypes.canonicalize_dtype(dtypes.to_complex_dtype(dt))
    return [_convert(x, dt, weak) for x in args]


# ----------------------------------------------------------------------------------------------
# shapes and broadcasting


def broadcast_shapes(*shapes) -> tuple:
    """NumPy's broadcast of static shapes; ValueError (as NumPy/JAX) when incompatible."""
    shapes = [tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in shapes]
    if not shapes:
        return ()
    if all(s == shapes[0] for s in shapes[1:]):
        return tuple(int(d) for d in shapes[0])
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        size = 1
        for s in shapes:
            j = len(s) - nd + i
            if j < 0:
                continue
            d = int(s[j])
            if d == 1:
                continue
            if size != 1 and d != size:
                raise ValueError("Incompatible shapes for broadcasting: shapes="
                                 f"{[tuple(s) for s in shapes]}")
            size = d
        out.append(size)
    return tuple(out)


def broadcast_to(x, shape):
    """Broadcast operand ``x`` (NumPy rules: leading axes added, size-1 axes stretched)."""
    x = as_operand(x)
    in_shape = x.shape
    if in_shape == shape:
        return x
    shape = tuple(int(d) for d in shape)
    if in_shape == shape:
        return x
    nd = len(shape)
    diff = nd - len(in_shape)
    if diff < 0 or any(d != 1 and d != shape[diff + i] for i, d in enumerate(in_shape)):
        dt = x.dtype
        if isinstance(dt, dtypes.ExtendedDType):     # JAX names the types of key arrays
            raise ValueError(
                f"Incompatible types for broadcasting: input type={dt}"
                f"[{','.join(map(str, in_shape))}] and requested type={dt}"
                f"[{','.join(map(str, shape))}]")
        raise ValueError(f"Incompatible shapes for broadcasting: {in_shape} and requested "
                         f"shape {shape}")
    if type(x) is Array and _core._state.trace is _core.eval_trace:
        # Eager: exactly broadcast_in_dim's impl, without the bind overhead.
        return make_array(np.broadcast_to(x._value, shape), x.weak_type)
    # Squeeze stretched size-1 axes away first so broadcast_in_dim sees exact matches.
    keep = [i for i, d in enumerate(in_shape) if d == shape[diff + i]]
    if len(keep) != len(in_shape):
        x = lax.reshape(x, tuple(in_shape[i] for i in keep))
    return lax.broadcast_in_dim(x, shape, tuple(diff + i for i in keep))


def _rank_promotion_check(fun_name, shapes):
    mode = config.jax_numpy_rank_promotion
    if mode == "allow":
        return
    ranks = {len(s) for s in shapes if len(s)}
    if len(ranks) < 2:
        return
    if mode == "warn":
        warnings.warn(f"Following NumPy automatic rank promotion for {fun_name} on shapes "
                      f"{' '.join(map(str, shapes))}. Set the jax_numpy_rank_promotion config "
                      "option to 'allow' to disable this warning.", stacklevel=4)
    else:
        raise ValueError(f"Operands could not be broadcast together for {fun_name} on shapes "
                         f"{' '.join(map(str, shapes))} and with the config option "
                         "jax_numpy_rank_promotion='raise'.")


def promote_shapes(fun_name: str, *args):
    """Make operands shape-compatible for an elementwise ``lax`` op, as JAX's ``jnp`` does.

    Operands of equal ranks, or whose non-scalar operands have one rank, are returned as
    they are: the lax primitives broadcast rank-0 operands and size-1 dimensions, so the
    jaxpr has no ``broadcast_in_dim`` (``mul a:f32[1,2] b:f32[2,1]``). Otherwise (ranks
    differ; subject to ``jax_numpy_rank_promotion``) leading size-1 axes are added to
    give every operand the result's rank."""
    ops = [as_operand(a) for a in args]
    if len(ops) < 2:
        return ops
    shapes = [o.shape for o in ops]
    ndim = len(shapes[0])
    if all(len(s) == ndim for s in shapes[1:]):
        return ops
    if len({len(s) for s in shapes if s}) < 2:
        return ops
    _rank_promotion_check(fun_name, shapes)
    rank = len(broadcast_shapes(*shapes))
    return [o if o.ndim == rank else
            lax.broadcast_in_dim(o, (1,) * (rank - o.ndim) + o.shape,
                                 tuple(range(rank - o.ndim, rank)))
            for o in ops]


def broadcast_operands(fun_name: str, *args):
    """Operands broadcast to their common shape (for ops that need equal shapes, e.g.
    ``select_n``); ``jax_numpy_rank_promotion`` applies as in :func:`promote_shapes`."""
    ops = [as_operand(a) for a in args]
    if len(ops) < 2:
        return ops
    shapes = [o.shape for o in ops]
    if all(s == shapes[0] for s in shapes[1:]):
        return ops
    _rank_promotion_check(fun_name, shapes)
    try:
        shape = broadcast_shapes(*shapes)
    except ValueError:
        if len({len(s) for s in shapes if s}) > 1:
            raise  # as JAX: nonscalar ranks differ → jnp's ValueError (rank promotion)
        # equal ranks: JAX leaves it to the lax op, which raises TypeError
        raise TypeError(f"{fun_name} got incompatible shapes for broadcasting: "
                        f"{', '.join(str(s) for s in shapes)}.") from None
    return [broadcast_to(o, shape) for o in ops]


def check_for_prngkeys(fun_name: str, *args) -> None:
    """JAX's TypeError for a ``jnp`` function given typed keys mixed with other dtypes."""
    dts = [dtypes.dtype(a) for a in args]
    if len(set(dts)) < 2:
        return      # keys alone: the lax operation's rule says whether it takes them
    if any(dtypes.issubdtype(dt, dtypes.prng_key) for dt in dts):
        raise TypeError(f"{fun_name} does not accept dtypes {', '.join(map(str, dts))}.")


def _promote_checked(fun_name: str, promote, args):
    try:
        return promote(*args)
    except (TypeError, ValueError):
        if any(type(a) in _core.extended_types for a in args):
            check_for_prngkeys(fun_name, *args)
        raise


def promote_args(fun_name: str, *args):
    """check_arraylike + promote_dtypes + promote_shapes."""
    check_arraylike(fun_name, *args)
    return promote_shapes(fun_name, *_promote_checked(fun_name, promote_dtypes, args))


def promote_args_inexact(fun_name: str, *args):
    check_arraylike(fun_name, *args)
    return promote_shapes(fun_name, *_promote_checked(fun_name, promote_dtypes_inexact, args))


def promote_args_numeric(fun_name: str, *args):
    check_arraylike(fun_name, *args)
    return promote_shapes(fun_name, *_promote_checked(fun_name, promote_dtypes_numeric, args))


def broadcast_arrays(*args):
    ops = [as_operand(a) for a in args]
    shape = broadcast_shapes(*[get_aval(o).shape for o in ops])
    return [broadcast_to(o, shape) for o in ops]


# ----------------------------------------------------------------------------------------------
# axes


def canonicalize_axis(axis, ndim: int) -> int:
    """An axis in [-ndim, ndim) as a non-negative int. Out of bounds: NumPy's ``AxisError``,
    which is both a ValueError (what JAX raises for most functions) and an IndexError (what
    it raises for a few, e.g. ``swapaxes``, ``argmax``)."""
    axis = concretize(axis)
    if isinstance(axis, Tracer):
        raise ConcretizationTypeError(axis, "The axis argument must be static.")
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis + ndim if axis < 0 else axis


def canonicalize_axes(axis, ndim: int, allow_duplicate: bool = False) -> tuple:
    """None → all axes; int or sequence → a tuple of non-negative ints (no repeats)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list, range, np.ndarray)):
        axes = tuple(canonicalize_axis(a, ndim) for a in axis)
    else:
        axes = (canonicalize_axis(axis, ndim),)
    if not allow_duplicate and len(set(axes)) != len(axes):
        raise ValueError(f"duplicate value in 'axis': {axis}")
    return axes


def canonicalize_shape(shape, context: str = "") -> tuple:
    """A static shape tuple from an int or a sequence of ints."""
    shape = concretize(shape)
    if isinstance(shape, Tracer):
        raise ConcretizationTypeError(shape, context or "The shape argument must be static.")
    if isinstance(shape, (Array, np.ndarray)) and np.ndim(shape) == 0:
        shape = int(shape)
    if not isinstance(shape, (tuple, list, np.ndarray, Array)):
        # Any other iterable is a sequence of dimensions (as JAX: TensorFlow Probability
        # passes its ``TensorShape``); a non-iterable is one dimension.
        shape = tuple(shape) if hasattr(shape, "__iter__") and not isinstance(
            shape, (str, bytes)) else (shape,)
    out = []
    for d in shape:
        d = concretize(d)
        if isinstance(d, Tracer):
            raise ConcretizationTypeError(d, context or "The shape argument must be static.")
        try:
            out.append(operator.index(d))
        except TypeError:
            raise TypeError(f"Shapes must be 1D sequences of concrete values of integer type, "
                            f"got {tuple(shape)}.") from None
    return tuple(out)


def user_dtype(dtype, fun_name: str | None = None):
    """A user's ``dtype=`` argument, validated and canonicalized (None stays None)."""
    if dtype is None:
        return None
    return dtypes.check_and_canonicalize_user_dtype(dtype, fun_name)


def laid_out(x, out_sharding):
    """``x`` laid out as ``out_sharding`` (a Sharding or a PartitionSpec of the context
    mesh; ``reshard``), or ``x`` when it is None (a creation function's
    ``out_sharding=``)."""
    if out_sharding is None:
        return x
    from kiln.sharding import reshard
    return reshard(x, out_sharding)


def placed(fn):
    """``fn``'s ``device=`` argument honoured as JAX does: the (concrete) result is put on
    that device or sharding (``jnp.zeros(3, device=jax.devices()[1])``); a traced result is
    left as it is (inside ``jit`` placement is the program's)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, device=None, **kwargs):
        out = fn(*args, **kwargs)
        if device is None:
            return out
        if type(out) is tuple:      # linspace(retstep=True)
            return tuple(o.to_device(device) if type(o) is Array else o for o in out)
        return out.to_device(device) if type(out) is Array else out
    return wrapper
