"""Shape manipulation: reshape, transpose, squeeze, expand_dims, broadcasting,
concatenation/stacking/splitting, tile/repeat, flips and rolls, diagonal/trace,
``shape``/``ndim``/``size``.

Shapes, axes, split points and (static) repeat counts must be concrete; array contents
may be traced. Only ``lax`` structural ops are used on operands.
"""
from __future__ import annotations

import math
import operator
import warnings

import numpy as np

from kiln import lax
from kiln.array import Array
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util
from kiln.numpy._util import (
    as_operand,
    canonicalize_axes,
    canonicalize_axis,
    check_arraylike,
    ensure_arraylike,
)

__all__ = ["reshape", "ravel", "transpose", "permute_dims", "swapaxes", "moveaxis",
           "matrix_transpose", "expand_dims", "squeeze", "broadcast_to", "broadcast_arrays",
           "broadcast_shapes", "concatenate", "concat", "stack", "hstack", "vstack", "dstack",
           "column_stack", "split", "array_split", "hsplit", "vsplit", "dsplit",
           "unstack", "tile", "repeat", "flip", "fliplr", "flipud", "roll", "rot90",
           "atleast_1d", "atleast_2d", "atleast_3d", "shape", "ndim", "size", "diagonal",
           "trace", "flatten", "rollaxis", "append"]


def _shape(x):
    return get_aval(x).shape


# ----------------------------------------------------------------------------------------------
# reshape / transpose


def _compute_newshape(shape, newshape):
    """``newshape`` with its -1 resolved; TypeError (as JAX) when it does not fit ``shape``."""
    orig = newshape
    size = math.prod(shape)
    newshape = _util.canonicalize_shape(newshape, "The new shape of jnp.reshape must be static.")
    neg = [i for i, d in enumerate(newshape) if d == -1]
    if len(neg) > 1:
        raise TypeError("can only specify one unknown axis size with a `-1` value, "
                        f"got {orig}")
    if neg:
        i, = neg
        known = math.prod(newshape[:i] + newshape[i + 1:])
        if size % known:  # ZeroDivisionError for a 0 beside the -1, as JAX
            raise TypeError(f"cannot reshape array of shape {shape} (size {size}) into shape "
                            f"{orig} because the product of specified axis sizes ({known}) "
                            f"does not evenly divide {size}")
        newshape = tuple(size // known if d == -1 else d for d in newshape)
    elif math.prod(newshape) != size:
        raise TypeError(f"cannot reshape array of shape {shape} (size {size}) into shape "
                        f"{orig} (size {math.prod(newshape)})")
    if any(d < 0 for d in newshape):
        raise TypeError(f"reshape new_sizes must all be positive, got {newshape}.")
    return newshape


def reshape(a, shape=None, order="C", *, newshape=None, copy=None, out_sharding=None):
    """Give ``a`` a new shape (one entry may be -1); ``order`` 'C' or 'F'; laid out as
    ``out_sharding`` when given."""
    if out_sharding is not None:
        return _util.laid_out(reshape(a, shape, order, newshape=newshape, copy=copy),
                              out_sharding)
    if shape is None:
        if newshape is None:
            raise TypeError("reshape() missing required argument 'shape'")
        shape = newshape
    _util.check_arraylike("reshape", a)
    if isinstance(a, (np.ndarray, np.generic)):
        # As JAX: NumPy input goes to ndarray.reshape (a NumPy result, even under jit;
        # NumPyro's sample validation relies on it staying concrete).
        return a.reshape(shape, order=order)
    a = ensure_arraylike("reshape", a)
    aval = get_aval(a)
    new = _compute_newshape(aval.shape, shape)
    if order == "C":
        return lax.reshape(a, new)
    if order == "F":
        rev = tuple(range(aval.ndim - 1, -1, -1))
        out = lax.reshape(a, new[::-1], rev if aval.ndim > 1 else None)
        return lax.transpose(out, tuple(range(len(new) - 1, -1, -1))) if len(new) > 1 else out
    if order == "A":
        raise NotImplementedError("np.reshape order=A is not implemented.")
    raise ValueError(f"Unexpected value for 'order' argument: {order}.")


def ravel(a, order="C"):
    """Flatten to 1-D."""
    a = ensure_arraylike("ravel", a)
    if order == "K":
        raise NotImplementedError("Ravel not implemented for order='K'.")
    return reshape(a, (get_aval(a).size,), order=order)


def flatten(a, order="C"):
    """``ravel`` (the ``Array.flatten`` method)."""
    return ravel(a, order)


def transpose(a, axes=None):
    """Permute axes (reverse them when ``axes`` is None)."""
    a = ensure_arraylike("transpose", a)
    nd = get_aval(a).ndim
    if axes is None:
        perm = tuple(range(nd - 1, -1, -1))
    else:
        axes = tuple(axes)
        if len(axes) != nd:
            raise ValueError(f"axes {axes} don't match array of dimension {nd}")
        perm = tuple(canonicalize_axis(i, nd) for i in axes)
        if sorted(perm) != list(range(nd)):
            raise TypeError("transpose permutation isn't a permutation of operand dimensions, "
                            f"got permutation {axes} for operand shape {get_aval(a).shape}.")
    return lax.transpose(a, perm)


def permute_dims(a, /, axes):
    """Array-API name of ``transpose``."""
    return transpose(a, axes)


def matrix_transpose(x, /):
    """Swap the last two axes."""
    x = ensure_arraylike("matrix_transpose", x)
    nd = get_aval(x).ndim
    if nd < 2:
        raise ValueError(f"x must be at least two-dimensional for matrix_transpose; got "
                         f"ndim={nd}")
    perm = tuple(range(nd - 2)) + (nd - 1, nd - 2)
    return lax.transpose(x, perm)


def swapaxes(a, axis1, axis2):
    """Exchange two axes."""
    a = ensure_arraylike("swapaxes", a)
    nd = get_aval(a).ndim
    perm = list(range(nd))
    i, j = canonicalize_axis(axis1, nd), canonicalize_axis(axis2, nd)
    perm[i], perm[j] = perm[j], perm[i]
    return lax.transpose(a, tuple(perm))


def moveaxis(a, source, destination):
    """Move axes to new positions, keeping the order of the others."""
    a = ensure_arraylike("moveaxis", a)
    nd = get_aval(a).ndim
    src = canonicalize_axes(source if isinstance(source, (tuple, list)) else (source,), nd)
    dst = canonicalize_axes(destination if isinstance(destination, (tuple, list))
                            else (destination,), nd)
    if len(src) != len(dst):
        raise ValueError(f"Inconsistent number of elements: {len(src)} vs {len(dst)}")
    perm = [i for i in range(nd) if i not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return lax.transpose(a, tuple(perm))


def rollaxis(a, axis, start=0):
    """Roll ``axis`` backwards until it lies before ``start``."""
    a = ensure_arraylike("rollaxis", a)
    nd = get_aval(a).ndim
    axis = canonicalize_axis(axis, nd)
    if not -nd <= start <= nd:
        raise ValueError(f"start={start} must satisfy {-nd}<=start<={nd}")
    if start < 0:
        start += nd
    if start > axis:
        start -= 1
    return moveaxis(a, axis, start)


def expand_dims(a, axis):
    """Insert size-1 axes at the positions ``axis`` (of the result)."""
    a = ensure_arraylike("expand_dims", a)
    try:
        axes = (operator.index(axis),)
    except TypeError:
        axes = tuple(operator.index(i) for i in axis)    # any sequence: range, array, ...
    return lax.expand_dims(a, axes)


def squeeze(a, axis=None):
    """Remove size-1 axes (all of them, or those in ``axis``)."""
    a = ensure_arraylike("squeeze", a)
    shape = get_aval(a).shape
    if axis is None:
        axes = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        axes = canonicalize_axes(axis, len(shape))
        for i in axes:
            if shape[i] != 1:
                raise ValueError("cannot select an axis to squeeze out which has size not "
                                 f"equal to one, got shape={shape} and dimensions={axes}")
    if not axes:
        return a
    return lax.reshape(a, tuple(d for i, d in enumerate(shape) if i not in axes))


# ----------------------------------------------------------------------------------------------
# broadcasting


def broadcast_shapes(*shapes):
    """The broadcast of static shapes (ints count as 1-D shapes)."""
    if not shapes:
        return ()
    shapes = [(s,) if isinstance(s, int) else tuple(s) for s in shapes]
    return _util.broadcast_shapes(*shapes)


def broadcast_to(array, shape, *, out_sharding=None):
    """Broadcast ``array`` to ``shape`` (NumPy rules)."""
    array = ensure_arraylike("broadcast_to", array)
    shape = _util.canonicalize_shape(shape, "The shape argument of broadcast_to must be static.")
    return _util.broadcast_to(array, shape)


def broadcast_arrays(*args):
    """Broadcast all arguments to their common shape."""
    check_arraylike("broadcast_arrays", *args)
    return _util.broadcast_arrays(*args)


# ----------------------------------------------------------------------------------------------
# joining


def _operands(name, arrays):
    if isinstance(arrays, (Array, Tracer, np.ndarray)):
        n = _shape(as_operand(arrays))
        if not n:
            raise ValueError(f"Zero-dimensional arrays cannot be {name}d.")
        return [a for a in as_operand(arrays)]
    arrays = list(arrays)
    check_arraylike(name, *arrays)
    return arrays


def concatenate(arrays, axis=0, dtype=None):
    """Join arrays along an existing axis (flattened first when ``axis`` is None)."""
    arrays = _operands("concatenate", arrays)
    if not arrays:
        raise ValueError("Need at least one array to concatenate.")
    ops = [as_operand(a) for a in arrays]
    if axis is None:
        ops = [lax.reshape(o, (get_aval(o).size,)) for o in ops]
        axis = 0
    if get_aval(ops[0]).ndim == 0:
        raise ValueError("Zero-dimensional arrays cannot be concatenated.")
    nd = get_aval(ops[0]).ndim
    if any(get_aval(o).ndim != nd for o in ops[1:]):
        raise TypeError("Cannot concatenate arrays with different numbers of dimensions: got "
                        f"{', '.join(str(get_aval(o).shape) for o in ops)}.")
    axis = canonicalize_axis(axis, nd)
    if dtype is not None:
        dt = _util.user_dtype(dtype, "concatenate")
        ops = [lax.convert_element_type(o, dt) for o in ops]
    else:
        ops = _util.promote_dtypes(*ops)
    if len(ops) == 1:
        return ops[0]
    return lax.concatenate(ops, axis)


def concat(arrays, /, *, axis=0):
    """Array-API name of ``concatenate``."""
    return concatenate(arrays, axis)


def stack(arrays, axis=0, out=None, dtype=None):
    """Join equally shaped arrays along a new axis."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.stack is not supported.")
    arrays = _operands("stack", arrays) if not isinstance(arrays, (Array, Tracer, np.ndarray)) \
        else [a for a in as_operand(arrays)]
    if not arrays:
        raise ValueError("Need at least one array to stack.")
    ops = [as_operand(a) for a in arrays]
    shape0 = _shape(ops[0])
    for o in ops[1:]:
        if _shape(o) != shape0:
            raise ValueError("All input arrays must have the same shape.")
    axis = canonicalize_axis(axis, len(shape0) + 1)
    new_shape = shape0[:axis] + (1,) + shape0[axis:]
    ops = [lax.reshape(o, new_shape) for o in ops]
    return concatenate(ops, axis, dtype=dtype)


def atleast_1d(*arys):
    """Views with at least one dimension (a list for several inputs)."""
    check_arraylike("atleast_1d", *arys)
    out = [as_operand(a) if get_aval(as_operand(a)).ndim >= 1
           else lax.reshape(as_operand(a), (1,)) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """Views with at least two dimensions (``(n,)`` becomes ``(1, n)``)."""
    check_arraylike("atleast_2d", *arys)
    out = []
    for a in arys:
        a = as_operand(a)
        s = _shape(a)
        if len(s) == 0:
            a = lax.reshape(a, (1, 1))
        elif len(s) == 1:
            a = lax.reshape(a, (1,) + s)
        out.append(a)
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """Views with at least three dimensions (``(n,)`` → ``(1, n, 1)``, ``(m, n)`` →
    ``(m, n, 1)``)."""
    check_arraylike("atleast_3d", *arys)
    out = []
    for a in arys:
        a = as_operand(a)
        s = _shape(a)
        if len(s) == 0:
            a = lax.reshape(a, (1, 1, 1))
        elif len(s) == 1:
            a = lax.reshape(a, (1,) + s + (1,))
        elif len(s) == 2:
            a = lax.reshape(a, s + (1,))
        out.append(a)
    return out[0] if len(out) == 1 else out


def _as_list(name, tup):
    if isinstance(tup, (Array, Tracer, np.ndarray)):
        return [a for a in as_operand(tup)]
    tup = list(tup)
    check_arraylike(name, *tup)
    return tup


def hstack(tup, dtype=None):
    """Stack horizontally (along axis 1, or 0 for 1-D inputs)."""
    arrs = [atleast_1d(a) for a in _as_list("hstack", tup)]
    axis = 0 if arrs and get_aval(arrs[0]).ndim == 1 else 1
    return concatenate(arrs, axis, dtype=dtype)


def vstack(tup, dtype=None):
    """Stack vertically (rows), 1-D inputs becoming rows."""
    arrs = [atleast_2d(a) for a in _as_list("vstack", tup)]
    return concatenate(arrs, 0, dtype=dtype)


def dstack(tup, dtype=None):
    """Stack along the third axis."""
    arrs = [atleast_3d(a) for a in _as_list("dstack", tup)]
    return concatenate(arrs, 2, dtype=dtype)


def column_stack(tup):
    """Stack 1-D arrays as columns (2-D arrays are joined along axis 1)."""
    arrs = []
    for a in _as_list("column_stack", tup):
        a = as_operand(a)
        s = _shape(a)
        if len(s) < 2:
            a = lax.reshape(a, (get_aval(a).size, 1))
        arrs.append(a)
    return concatenate(arrs, 1)


def append(arr, values, axis=None):
    """Concatenate ``values`` to the end of ``arr`` (flattened when ``axis`` is None)."""
    check_arraylike("append", arr, values)
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], 0)
    return concatenate([arr, values], axis)


# ----------------------------------------------------------------------------------------------
# splitting


def _slice_axis(x, start, stop, axis):
    shape = _shape(x)
    starts = [0] * len(shape)
    limits = list(shape)
    starts[axis], limits[axis] = start, stop
    return lax.slice(x, tuple(starts), tuple(limits))


def _split(name, ary, indices_or_sections, axis, even):
    # JAX's rule: the pieces' sizes are the differences of [0, *indices, n] (so indices
    # must be in order and within the axis: a negative size is lax.split's ValueError),
    # and one ``split`` equation gives them all.
    ary = ensure_arraylike(name, ary)
    shape = _shape(ary)
    axis = canonicalize_axis(axis, len(shape))
    n = shape[axis]
    if isinstance(indices_or_sections, (Tracer,)):
        raise ConcretizationTypeError(indices_or_sections,
                                      f"The indices_or_sections argument of jnp.{name} must "
                                      "be static.")
    if np.ndim(indices_or_sections) == 0:
        k = operator.index(indices_or_sections)
        if k == 0:
            raise ZeroDivisionError(f"jnp.{name}: the number of sections must be larger "
                                    "than 0, got 0.")
        q, r = divmod(n, k)
        if r and even:
            raise ValueError(f"array split does not result in an equal division: rest is {r}")
        sizes = [q + 1] * r + [q] * (k - r)
    else:
        points = [operator.index(i) for i in np.asarray(
            indices_or_sections._value if type(indices_or_sections) is Array
            else indices_or_sections).tolist()]
        sizes = list(np.diff(np.asarray([0] + points + [n], dtype=np.int64)))
    return list(lax.split(ary, [np.int64(s) for s in sizes], axis=axis))


def split(ary, indices_or_sections, axis=0):
    """Split into equal sections, or at the given indices."""
    return _split("split", ary, indices_or_sections, axis, True)


def array_split(ary, indices_or_sections, axis=0):
    """Split into possibly unequal sections."""
    return _split("array_split", ary, indices_or_sections, axis, False)


def hsplit(ary, indices_or_sections):
    """Split along axis 1 (axis 0 for 1-D)."""
    ary = ensure_arraylike("hsplit", ary)
    return split(ary, indices_or_sections, axis=1 if get_aval(ary).ndim > 1 else 0)


def vsplit(ary, indices_or_sections):
    """Split along axis 0."""
    ary = ensure_arraylike("vsplit", ary)
    if get_aval(ary).ndim < 1:          # JAX splits 1-D arrays too; a scalar has no axis 0
        raise IndexError("vsplit needs an array of 1 or more dimensions, got a scalar")
    return split(ary, indices_or_sections, axis=0)


def dsplit(ary, indices_or_sections):
    """Split along axis 2."""
    ary = ensure_arraylike("dsplit", ary)
    if get_aval(ary).ndim < 3:          # JAX: IndexError (axis 2 does not exist)
        raise IndexError("dsplit only works on arrays of 3 or more dimensions")
    return split(ary, indices_or_sections, axis=2)


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis`` as a tuple."""
    x = ensure_arraylike("unstack", x)
    shape = _shape(x)
    if not shape:
        raise ValueError("Unstack requires arrays with rank > 0, however a scalar array was "
                         "passed.")
    axis = canonicalize_axis(axis, len(shape))
    out_shape = shape[:axis] + shape[axis + 1:]
    return tuple(lax.reshape(_slice_axis(x, i, i + 1, axis), out_shape)
                 for i in range(shape[axis]))


# ----------------------------------------------------------------------------------------------
# tile / repeat / flip / roll


def tile(A, reps):
    """Repeat the whole array ``reps`` times along each axis."""
    A = ensure_arraylike("tile", A)
    reps = (reps,) if np.ndim(reps) == 0 else tuple(reps)
    reps = tuple(_util.core_int(r, "The reps argument of jnp.tile must be static.")
                 for r in reps)
    shape = _shape(A)
    nd = max(len(reps), len(shape))
    reps = (1,) * (nd - len(reps)) + reps
    shape = (1,) * (nd - len(shape)) + shape
    A = lax.reshape(A, shape)
    big = []
    for r, s in zip(reps, shape):
        big.extend((r, s))
    A = lax.broadcast_in_dim(A, tuple(big), tuple(range(1, 2 * nd, 2)))
    return lax.reshape(A, tuple(r * s for r, s in zip(reps, shape)))


def repeat(a, repeats, axis=None, *, total_repeat_length=None, out_sharding=None):
    """Repeat each element of an array.

    JAX implementation of :func:`numpy.repeat`.

    Args:
      a: the array.
      repeats: a count for every element along ``axis`` (broadcast), or one count.
      axis: the axis to repeat along; None repeats the flattened array.
      total_repeat_length: the static length of the output along ``axis``. Needed when
        ``repeats`` is traced (under ``jit``); the result is cut to this length, or padded
        by repeating the last element.
      out_sharding: accepted for compatibility; kiln runs on one device.

    Returns:
      The repeated array.
    """
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, bool):
        a = ensure_arraylike("repeat", a)
    else:
        a, repeats = ensure_arraylike("repeat", a, repeats)
    if axis is None:
        a = ravel(a)
        axis = 0
    shape = _shape(a)
    axis = canonicalize_axis(axis, max(len(shape), 1))
    if total_repeat_length is None:
        repeats = _util.concretize(repeats)
        if isinstance(repeats, Tracer):
            raise ConcretizationTypeError(
                repeats,
                "When jit-compiling jnp.repeat, the total number of repeats must be static. "
                "To fix this, either specify a static value for `repeats`, or pass a static "
                "value to `total_repeat_length`.")
        reps = np.asarray(repeats._value if type(repeats) is Array else repeats)
        if np.any(reps < 0):
            raise TypeError(f"jnp.repeat: repeats may not contain negative values, got "
                            f"{reps.tolist()}.")
        if reps.ndim == 0 and len(shape):
            r = int(reps)
            big = shape[:axis + 1] + (r,) + shape[axis + 1:]
            dims = tuple(i for i in range(len(big)) if i != axis + 1)
            out = lax.broadcast_in_dim(a, big, dims)
            return lax.reshape(out, shape[:axis] + (shape[axis] * r,) + shape[axis + 1:])
        reps = reps.ravel()
        if len(shape):
            if reps.size not in (1, shape[axis]):
                raise ValueError(f"repeats shape {reps.shape} does not match the size of "
                                 f"axis {axis} ({shape[axis]})")
            reps = np.broadcast_to(reps, (shape[axis],))
        total = int(reps.sum())
        if not len(shape):
            return _repeat_scalar(a, reps.size, total)
        if total == 0:
            return lax.full(shape[:axis] + (0,) + shape[axis + 1:], 0, get_aval(a).dtype)
        from kiln.numpy._indexing import take
        return take(a, np.repeat(np.arange(shape[axis]), reps), axis=axis, mode="clip")
    total = _util.core_int(total_repeat_length, "The total_repeat_length argument of jnp.repeat "
                                          "must be static.")
    repeats = ravel(repeats)
    if len(shape):
        repeats = broadcast_to(repeats, (shape[axis],))
    else:
        return _repeat_scalar(a, get_aval(repeats).size, total)
    if total == 0:
        return lax.full(shape[:axis] + (0,) + shape[axis + 1:], 0, get_aval(a).dtype)
    if shape[axis] == 0:
        return a
    return _repeat_traced(a, repeats, axis, total)


def _repeat_scalar(a, n_counts, total):
    """``repeat`` of a 0-d ``a``: only a single count is meaningful."""
    if n_counts != 1:
        raise ValueError("`repeat` with a scalar parameter `a` is only implemented for "
                         "scalar values of the parameter `repeats`.")
    return lax.broadcast_in_dim(a, (total,), ())


def _repeat_traced(a, repeats, axis, total):
    """``repeat`` with counts known only at run time and a static output length.

    Output position ``j`` takes input element ``k`` where ``k`` is the number of blocks
    that start at or before ``j``, minus one: mark each block start (the exclusive cumsum
    of the counts) with a scatter-add into a zero vector of length ``total``, then a
    cumulative sum turns the marks into gather indices. Starts beyond ``total`` are
    dropped, so the output is cut at ``total`` or, when longer than the counts' sum, ends
    with copies of the last element that has a nonzero count.
    """
    import kiln.numpy as jnp
    from kiln.numpy._indexing import take
    starts = jnp.cumsum(repeats) - repeats
    marks = jnp.zeros((total,), np.int32).at[starts].add(1, mode="drop")
    return take(a, jnp.cumsum(marks) - 1, axis=axis, mode="clip")


def flip(m, axis=None):
    """Reverse the order of elements along ``axis`` (all axes when None)."""
    m = ensure_arraylike("flip", m)
    nd = get_aval(m).ndim
    axes = canonicalize_axes(axis, nd)
    if not axes:
        return m
    return lax.rev(m, axes)


def fliplr(m):
    """Reverse along axis 1."""
    m = ensure_arraylike("fliplr", m)
    if get_aval(m).ndim < 2:
        raise ValueError("fliplr requires an array of at least 2 dimensions")
    return lax.rev(m, (1,))


def flipud(m):
    """Reverse along axis 0."""
    m = ensure_arraylike("flipud", m)
    if get_aval(m).ndim < 1:
        raise ValueError("flipud requires an array of at least 1 dimension")
    return lax.rev(m, (0,))


def _roll_static(a, shift, axis):
    n = _shape(a)[axis]
    if n == 0:
        return a
    shift %= n
    if shift == 0:
        return a
    return lax.concatenate([_slice_axis(a, n - shift, n, axis),
                            _slice_axis(a, 0, n - shift, axis)], axis)


def _roll_dynamic(a, shift, axis):
    n = _shape(a)[axis]
    if n == 0:
        return a
    from kiln.numpy import _indexing
    from kiln.numpy._ufuncs import remainder
    s = remainder(lax.convert_element_type(shift, _indexing._index_dtype()), n)
    doubled = lax.concatenate([a, a], axis)
    start = lax.sub(_util.scalar_const(n, _indexing._index_dtype()), s)
    zero = _util.scalar_const(0, _indexing._index_dtype())
    starts = [start if i == axis else zero for i in range(get_aval(a).ndim)]
    return lax.dynamic_slice(doubled, starts, _shape(a))


def roll(a, shift, axis=None):
    """Shift elements cyclically along ``axis`` (flattened when None); shifts may be traced."""
    a = ensure_arraylike("roll", a)
    shape = _shape(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), shape)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = [canonicalize_axis(ax, len(shape)) for ax in axes]
    if isinstance(shift, (tuple, list)) or np.ndim(shift) == 1:
        shifts = list(shift) if not isinstance(shift, (Array, Tracer)) else [
            s for s in as_operand(shift)]
    else:
        shifts = [shift]
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError("shift and axis must have the same number of elements")
    for s, ax in zip(shifts, axes):
        s = _util.concretize(s)
        if isinstance(s, Tracer):
            a = _roll_dynamic(a, s, ax)
        else:
            a = _roll_static(a, int(s), ax)
    return a


def rot90(m, k=1, axes=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``axes``."""
    m = ensure_arraylike("rot90", m)
    nd = get_aval(m).ndim
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    ax1, ax2 = canonicalize_axis(axes[0], nd), canonicalize_axis(axes[1], nd)
    if ax1 == ax2:
        raise ValueError("Axes must be different")
    k = _util.core_int(k, "The k argument of jnp.rot90 must be static.") % 4
    if k == 0:
        return m
    if k == 2:
        return lax.rev(m, (ax1, ax2))
    perm = list(range(nd))
    perm[ax1], perm[ax2] = perm[ax2], perm[ax1]
    if k == 1:
        return lax.transpose(lax.rev(m, (ax2,)), tuple(perm))
    return lax.rev(lax.transpose(m, tuple(perm)), (ax2,))


# ----------------------------------------------------------------------------------------------
# shape queries


def _check_arraylike_warn(fun_name: str, a) -> None:
    # JAX deprecates (warns about, rather than refuses) non-array inputs to these queries.
    if not _util.is_arraylike(a):
        warnings.warn(f"{fun_name} requires ndarray or scalar arguments, got {type(a)} at "
                      "position 0. In a future JAX release this will be an error.",
                      DeprecationWarning, stacklevel=3)


def shape(a):
    """The shape of an array-like, or of any object with a ``shape`` attribute.

    As in JAX, other inputs (lists, tuples, ``None``) still get NumPy's answer, with a
    ``DeprecationWarning``.
    """
    if hasattr(a, "shape"):
        return tuple(a.shape) if isinstance(a, np.ndarray) else a.shape
    _check_arraylike_warn("shape", a)
    m = getattr(a, "__jax_array__", None)
    if m is not None:
        a = m()
    return np.shape(a)


def ndim(a):
    """The number of dimensions of an array-like, or of any object with an ``ndim``
    attribute (other inputs: NumPy's answer and a ``DeprecationWarning``, as in JAX)."""
    if hasattr(a, "ndim"):
        return a.ndim
    _check_arraylike_warn("ndim", a)
    m = getattr(a, "__jax_array__", None)
    if m is not None:
        a = m()
    return np.ndim(a)


def size(a, axis=None):
    """The number of elements (along ``axis`` when given) of an array-like, or of any object
    with a ``size`` (``shape`` with ``axis``) attribute; other inputs: NumPy's answer and a
    ``DeprecationWarning``, as in JAX."""
    _check_arraylike_warn("size", a)
    if axis is None and hasattr(a, "size"):
        return a.size
    s = shape(a)
    try:
        axes = (operator.index(axis),)
    except TypeError:
        axes = tuple(range(len(s))) if axis is None else tuple(operator.index(i) for i in axis)
    canon = []
    for i in axes:
        if not -len(s) <= i < len(s):
            raise ValueError(f"axis {i} is out of bounds for array of dimension {len(s)}")
        canon.append(i % len(s))
    if len(set(canon)) != len(canon):
        raise ValueError(f"repeated axis: {axis}")
    return math.prod(s[i] for i in canon)


def _check_arraylike_warn(name: str, a) -> None:
    """JAX's DeprecationWarning for a non-array argument of shape/ndim/size (NumPy scalars,
    strings included, count as array-likes there)."""
    if not np.isscalar(a):
        check_arraylike(name, a, emit_warning=True, stacklevel=4)


# ----------------------------------------------------------------------------------------------
# diagonals


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The ``offset`` diagonal of the (axis1, axis2) planes, appended as the last axis."""
    a = ensure_arraylike("diagonal", a)
    nd = get_aval(a).ndim
    if nd < 2:
        raise ValueError("diagonal requires an array of at least two dimensions.")
    offset = _util.core_int(offset, "The offset argument of jnp.diagonal must be static.")
    ax1, ax2 = canonicalize_axis(axis1, nd), canonicalize_axis(axis2, nd)
    if ax1 == ax2:
        raise ValueError("axis1 and axis2 must not be equal")
    perm = tuple(i for i in range(nd) if i not in (ax1, ax2)) + (ax1, ax2)
    a = lax.transpose(a, perm)
    s = _shape(a)
    lead, n, m = s[:-2], s[-2], s[-1]
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    d = max(0, min(n - r0, m - c0))
    k = len(lead)
    if d == 0:
        return lax.reshape(lax.slice(a, (0,) * (k + 2), lead + (0, 0)), lead + (0,))
    # The d x d block starting at (r0, c0), flattened: its diagonal is every (d+1)-th element.
    block = lax.slice(a, (0,) * k + (r0, c0), lead + (r0 + d, c0 + d))
    flat = lax.reshape(block, lead + (d * d,))
    return lax.slice(flat, (0,) * (k + 1), lead + (d * d,), (1,) * k + (d + 1,))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """Sum along a diagonal."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.trace is not supported.")
    a = ensure_arraylike("trace", a)
    from kiln.numpy._reductions import sum as _sum
    return _sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)
