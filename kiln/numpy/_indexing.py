"""NumPy indexing for kiln arrays: ``x[idx]`` (``_rewriting_take``), ``take``, ``nonzero``.

Basic indices (ints, slices of any step, ``None``, ``...``) become ``lax.slice`` /
``lax.rev`` / ``lax.reshape``; a traced scalar int becomes ``lax.dynamic_slice``.
Integer-array (advanced) indices follow NumPy's placement rules. Until kiln has a gather
primitive they are computed as:

* concrete operand and concrete indices: NumPy ``take`` (a constant);
* concrete indices, traced operand: strided ``lax.slice`` runs + ``lax.concatenate``,
  or a one-hot ``select`` + ``reduce_sum`` when the runs are many;
* traced indices: the one-hot ``select`` + ``reduce_sum`` (memory ``M*N*rest``) or, when
  that is too big, one ``dynamic_slice`` per index; beyond both limits a
  ``NotImplementedError`` names the missing gather.

Out-of-bound indices are clamped (JAX's behaviour for ``x[idx]``). Boolean masks must be
concrete (``NonConcreteBooleanIndexError`` otherwise).

This module also holds the index *parser* shared with ``_indexing_at`` (``.at[]``).
"""
from __future__ import annotations

import math
import operator

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array, make_array
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError, NonConcreteBooleanIndexError
from kiln.numpy import _util

# Size limits of the gather fallbacks (elements of the one-hot intermediate; loop length).
ONE_HOT_LIMIT = 1 << 24
LOOP_LIMIT = 512
RUNS_LIMIT = 256

# Entry kinds of a parsed index.
SLICE, INT, TRACED_INT, ARRAY = "slice", "int", "traced_int", "array"


def _index_dtype():
    return dtypes.default_int_dtype()


# ----------------------------------------------------------------------------------------------
# parsing


def _non_tuple_error(idx):
    unpack = any(isinstance(i, (slice, list, tuple, type(Ellipsis))) or i is None for i in idx)
    hint = "arr[tuple(seq)]" if unpack else "arr[array(seq)]"
    raise TypeError("Using a non-tuple sequence for multidimensional indexing is not allowed; "
                    f"use `{hint}` instead of `arr[seq]`. "
                    "See https://github.com/jax-ml/jax/issues/4564 for more information.")


def _as_index_tuple(idx):
    if isinstance(idx, tuple):
        return idx
    if isinstance(idx, list):
        _non_tuple_error(idx)
    return (idx,)


def _slice_part(v, s):
    if v is None:
        return None
    if isinstance(v, Tracer):
        raise IndexError(
            "Array slice indices must have static start/stop/step to be used with NumPy "
            f"indexing syntax. Found slice({s.start}, {s.stop}, {s.step}). To index a "
            "statically sized array at a dynamic position, try lax.dynamic_slice/"
            "dynamic_update_slice (JAX does not support dynamically sized arrays within JIT "
            "compiled functions).")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"slice indices must be integers or None or have an __index__ "
                        f"method, got {v!r}") from None


def _classify(e):
    """(kind, value) for one index entry; kind in {None, Ellipsis, 'slice', 'int',
    'traced_int', 'array', 'bool'} ('bool' holds a concrete NumPy bool array)."""
    if e is None:
        return None, None
    if e is Ellipsis:
        return Ellipsis, None
    if isinstance(e, slice):
        s = slice(_slice_part(e.start, e), _slice_part(e.stop, e), _slice_part(e.step, e))
        if s.step == 0:
            raise ValueError("slice step cannot be zero")
        return SLICE, s
    if isinstance(e, (bool, np.bool_)):
        return "bool", np.asarray(e)
    if isinstance(e, (int, np.integer)):
        return INT, int(e)
    if isinstance(e, list):
        if any(isinstance(v, Tracer) for v in _flat(e)):
            from kiln.numpy._creation import array
            e = array(e)
        else:
            e = np.asarray(e)
            if e.size == 0:
                e = e.astype(np.int32)
    if isinstance(e, (Array, Tracer, np.ndarray, np.generic)):
        aval = get_aval(e) if isinstance(e, (Array, Tracer)) else None
        dt = aval.dtype if aval is not None else np.asarray(e).dtype
        nd = aval.ndim if aval is not None else np.ndim(e)
        if dt == np.bool_:
            if isinstance(e, Tracer):
                raise NonConcreteBooleanIndexError(e)
            return "bool", np.asarray(e._value if type(e) is Array else e)
        if not dtypes.issubdtype(dt, np.integer):
            raise TypeError(f"Indexer must have integer or boolean type, got indexer with "
                            f"type {np.dtype(dt).name}")
        if isinstance(e, Tracer):
            return (TRACED_INT if nd == 0 else ARRAY), e
        v = np.asarray(e._value if type(e) is Array else e)
        if nd == 0:
            return INT, int(v)
        return ARRAY, v
    if isinstance(e, (float, complex, np.floating, np.complexfloating)):
        raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                        f"{np.dtype(type(e)).name}")
    raise IndexError("Indexing mode not yet supported. Only integers, slices, ellipsis, None, "
                     f"and integer or boolean arrays are valid indices. Got {e!r}")


def _flat(seq):
    for v in seq:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


class ParsedIndex:
    """An index aligned with the axes of the operand after inserting the ``None`` axes.

    ``newaxes``: positions (in the expanded operand) of inserted size-1 axes;
    ``entries``: one ``(kind, value)`` per expanded axis (kinds: slice/int/traced_int/array);
    ``expanded_shape``: the operand's shape with the new axes.
    """

    __slots__ = ("newaxes", "entries", "expanded_shape")

    def __init__(self, newaxes, entries, expanded_shape):
        self.newaxes = newaxes
        self.entries = entries
        self.expanded_shape = expanded_shape

    @property
    def has_array(self):
        return any(k == ARRAY for k, _ in self.entries)


def parse_index(shape, idx) -> ParsedIndex:
    """Normalize ``idx`` against an operand of static ``shape`` (NumPy semantics)."""
    items = [_classify(e) for e in _as_index_tuple(idx)]
    if sum(1 for k, _ in items if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    # Expand boolean arrays into integer arrays (scalar bools into a new axis + array).
    expanded = []
    consumed = 0
    for k, v in items:
        if k == "bool":
            if v.ndim == 0:
                # A scalar bool adds an axis of length 1 (True) or 0 (False).
                expanded.append(("bool0", np.arange(int(bool(v)), dtype=np.int64)))
                continue
            where = consumed
            if where + v.ndim > len(shape) or any(
                    s != t for s, t in zip(v.shape, shape[where:where + v.ndim])):
                raise IndexError("boolean index did not match shape of indexed array in index "
                                 f"{len(expanded)}: got {v.shape}, expected "
                                 f"{tuple(shape[where:where + v.ndim])}")
            for arr in np.nonzero(v):
                expanded.append((ARRAY, arr))
            consumed += v.ndim
            continue
        if k in (SLICE, INT, TRACED_INT, ARRAY):
            consumed += 1
        expanded.append((k, v))
    n_consumed = sum(1 for k, _ in expanded if k in (SLICE, INT, TRACED_INT, ARRAY))
    if n_consumed > len(shape):
        raise IndexError(f"Too many indices: array is {len(shape)}-dimensional, but "
                         f"{n_consumed} were indexed")
    full = (SLICE, slice(None, None, None))
    entries, newaxes, eshape = [], [], []
    dims = iter(shape)
    for k, v in expanded:
        if k is Ellipsis:
            for _ in range(len(shape) - n_consumed):
                entries.append(full)
                eshape.append(next(dims))
        elif k is None or k == "bool0":
            newaxes.append(len(entries))
            entries.append(full if k is None else (ARRAY, v))
            eshape.append(1)
        else:
            entries.append((k, v))
            eshape.append(next(dims))
    for d in dims:
        entries.append(full)
        eshape.append(d)
    return ParsedIndex(tuple(newaxes), entries, tuple(eshape))


def insert_newaxes(x, parsed: ParsedIndex):
    if not parsed.newaxes:
        return x
    return lax.reshape(x, parsed.expanded_shape)


def slice_plan(entry, n):
    """(start, limit, stride, count, reverse) of a static slice over an axis of size ``n``."""
    _, s = entry
    start, stop, step = s.indices(n)
    count = len(range(start, stop, step))
    if count == 0:
        return 0, 0, 1, 0, False
    if step > 0:
        return start, start + (count - 1) * step + 1, step, count, False
    lo = start + (count - 1) * step
    return lo, start + 1, -step, count, True


def clamp_static_int(i, n):
    """JAX's clamping of a static integer index into ``[0, n)``."""
    if n == 0:
        raise IndexError("index is out of bounds for axis with size 0")
    i = i + n if i < 0 else i
    return min(max(i, 0), n - 1)


# ----------------------------------------------------------------------------------------------
# basic indexing


def _basic_take(x, parsed: ParsedIndex):
    shape = parsed.expanded_shape
    starts, limits, strides, rev, squeeze, dyn = [], [], [], [], [], {}
    for ax, (k, v) in enumerate(parsed.entries):
        n = shape[ax]
        if k == SLICE:
            lo, hi, st, _, r = slice_plan((k, v), n)
            starts.append(lo)
            limits.append(hi)
            strides.append(st)
            if r:
                rev.append(ax)
        elif k == INT:
            i = clamp_static_int(v, n)
            starts.append(i)
            limits.append(i + 1)
            strides.append(1)
            squeeze.append(ax)
        else:  # TRACED_INT
            starts.append(0)
            limits.append(n)
            strides.append(1)
            squeeze.append(ax)
            dyn[ax] = v
    y = x
    if tuple(starts) != (0,) * len(shape) or tuple(limits) != tuple(shape) \
            or any(s != 1 for s in strides):
        y = lax.slice(y, tuple(starts), tuple(limits),
                      None if all(s == 1 for s in strides) else tuple(strides))
    if dyn:
        ys = get_aval(y).shape
        zero = _util.scalar_const(0, _index_dtype())
        # dynamic_slice wraps negative starts itself (and clamps, as JAX does).
        dstarts = [lax.convert_element_type(dyn[ax], _index_dtype()) if ax in dyn else zero
                   for ax in range(len(ys))]
        sizes = [1 if ax in dyn else ys[ax] for ax in range(len(ys))]
        y = lax.dynamic_slice(y, dstarts, sizes)
    if rev:
        y = lax.rev(y, tuple(rev))
    if squeeze:
        ys = get_aval(y).shape
        y = lax.reshape(y, tuple(d for i, d in enumerate(ys) if i not in squeeze))
    return y


def _fast_numpy_basic(x, idx):
    """Eager NumPy view for a concrete Array and an in-bounds static basic index, or None."""
    items = _as_index_tuple(idx)
    nd = x._value.ndim
    if sum(1 for e in items if e is not None and e is not Ellipsis) > nd:
        return None
    ax = 0
    for e in items:
        t = type(e)
        if t is int:
            if ax >= nd or not -x._value.shape[ax] <= e < x._value.shape[ax]:
                return None
            ax += 1
        elif t is slice:
            if not all(type(p) is int or p is None for p in (e.start, e.stop, e.step)):
                return None
            if e.step == 0:
                return None
            ax += 1
        elif e is None:
            continue
        elif e is Ellipsis:
            ax = nd - sum(1 for f in items if f is not None and f is not Ellipsis) + ax
            if ax > nd:
                return None
        else:
            return None
    if ax > nd:
        return None
    out = x._value[idx if isinstance(idx, tuple) else (idx,)]
    return make_array(out if type(out) is np.ndarray else np.asarray(out), x.weak_type)


# ----------------------------------------------------------------------------------------------
# gathers of rows


def _arith_runs(idx):
    """Split a 1-D int array into (start, stride, count) arithmetic runs."""
    runs = []
    i, m = 0, len(idx)
    while i < m:
        if i + 1 == m:
            runs.append((int(idx[i]), 1, 1))
            break
        step = int(idx[i + 1] - idx[i])
        j = i + 1
        if step <= 0:
            runs.append((int(idx[i]), 1, 1))
            i += 1
            continue
        while j + 1 < m and int(idx[j + 1] - idx[j]) == step:
            j += 1
        runs.append((int(idx[i]), step, j - i + 1))
        i = j + 1
    return runs


def _one_hot_gather(y, flat):
    """rows ``y[flat]`` as ``reduce_sum(select(flat[:,None] == iota, y, 0))``."""
    ya = get_aval(y)
    n, rest = ya.shape[0], ya.shape[1:]
    m = get_aval(flat).shape[0]
    idt = get_aval(flat).dtype
    full = (m, n) + rest
    hot = lax.eq(lax.broadcast_in_dim(flat, (m, n), (0,)),
                 lax.broadcast_in_dim(lax.iota(idt, n), (m, n), (1,)))
    hot = lax.broadcast_in_dim(hot, full, (0, 1))
    yb = lax.broadcast_in_dim(y, full, tuple(range(1, len(full))))
    picked = lax.select(hot, yb, _util.full_const(full, 0, ya.dtype))
    if ya.dtype == np.bool_:
        return lax.reduce_or(picked, (1,))
    return lax.reduce_sum(picked, (1,))


def gather_rows(y, flat):
    """``y[flat]`` along axis 0, ``flat`` a 1-D in-range int index (NumPy array or tracer)."""
    ya = get_aval(y)
    n, rest = ya.shape[0], ya.shape[1:]
    if isinstance(flat, np.ndarray):
        m = flat.shape[0]
        if type(y) is Array:
            return make_array(np.take(y._value, flat, axis=0), y.weak_type)
        if m == 0:
            return lax.slice(y, (0,) * ya.ndim, (0,) + rest)
        runs = _arith_runs(flat)
        if len(runs) <= RUNS_LIMIT or m * n * math.prod(rest) > ONE_HOT_LIMIT:
            if len(runs) > LOOP_LIMIT * 4:
                raise NotImplementedError(
                    f"gather of {m} scattered rows from a traced operand is not implemented "
                    "yet (needs a gather primitive)")
            pieces = []
            for start, step, count in runs:
                pieces.append(lax.slice(y, (start,) + (0,) * len(rest),
                                        (start + (count - 1) * step + 1,) + rest,
                                        (step,) + (1,) * len(rest) if step != 1 else None))
            return pieces[0] if len(pieces) == 1 else lax.concatenate(pieces, 0)
        flat = make_array(flat.astype(_index_dtype()))
        return _one_hot_gather(y, flat)
    m = get_aval(flat).shape[0]
    if m * n * math.prod(rest) <= ONE_HOT_LIMIT:
        return _one_hot_gather(y, flat)
    if m <= LOOP_LIMIT:
        zero = _util.scalar_const(0, get_aval(flat).dtype)
        pieces = []
        for j in range(m):
            s = lax.reshape(lax.slice(flat, (j,), (j + 1,)), ())
            pieces.append(lax.dynamic_slice(y, [s] + [zero] * len(rest), (1,) + rest))
        return lax.concatenate(pieces, 0)
    raise NotImplementedError(
        f"gather with traced index arrays of {m} indices into {n} rows is not implemented yet "
        "(needs a gather primitive)")


def _normalize_array_index(v, n, mode="clip"):
    """Wrap negatives and clamp into [0, n); NumPy arrays stay NumPy (lax ops for tracers).
    Returns (index, out_of_bounds mask or None)."""
    if isinstance(v, np.ndarray):
        v = v.astype(np.int64)
        oob = (v < -n) | (v >= n)
        v = np.where(v < 0, v + n, v)
        if mode == "wrap":
            v = np.mod(v, max(n, 1))
        v = np.clip(v, 0, max(n - 1, 0))
        return v, (oob if mode == "fill" else None)
    v = lax.convert_element_type(v, _index_dtype())
    shape = get_aval(v).shape
    zero = _util.full_const(shape, 0, _index_dtype())
    nn = _util.full_const(shape, n, _index_dtype())
    oob = lax.bitwise_or(lax.lt(v, lax.neg(nn)), lax.ge(v, nn)) if mode == "fill" else None
    v = lax.select(lax.lt(v, zero), lax.add(v, nn), v)
    if mode == "wrap":
        from kiln.numpy._ufuncs import remainder
        v = remainder(v, n)
    v = lax.max(lax.min(v, _util.full_const(shape, max(n - 1, 0), _index_dtype())), zero)
    return v, oob


def flat_index(arrays, sizes, mode="clip"):
    """Broadcast the index arrays and combine them into one flat (C-order) index.

    Returns (flat index of shape B, B, out-of-bounds mask or None); NumPy when all inputs
    are concrete, else a traced int array.
    """
    shapes = [np.shape(a) if isinstance(a, np.ndarray) else get_aval(a).shape for a in arrays]
    bshape = _util.broadcast_shapes(*shapes)
    norm = [_normalize_array_index(a, n, mode) for a, n in zip(arrays, sizes)]
    strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    if all(isinstance(v, np.ndarray) for v, _ in norm):
        flat = np.zeros(bshape, np.int64)
        oob = None
        for (v, o), st in zip(norm, strides):
            flat = flat + np.broadcast_to(v, bshape) * st
            if o is not None:
                oob = np.broadcast_to(o, bshape) if oob is None else (oob | o)
        return flat, bshape, oob
    idt = _index_dtype()
    flat = _util.full_const(bshape, 0, idt)
    oob = None
    for (v, o), st in zip(norm, strides):
        v = _util.broadcast_to(v if not isinstance(v, np.ndarray) else make_array(v.astype(idt)),
                               bshape)
        flat = lax.add(flat, lax.mul(v, _util.full_const(bshape, st, idt)))
        if o is not None:
            o = _util.broadcast_to(o if not isinstance(o, np.ndarray) else make_array(o), bshape)
            oob = o if oob is None else lax.bitwise_or(oob, o)
    return flat, bshape, oob


def _advanced_take(x, parsed: ParsedIndex, mode="clip", fill_value=None):
    shape = parsed.expanded_shape
    entries = list(parsed.entries)
    # Ints join the advanced indices (NumPy's rule for mixing ints and arrays).
    for ax, (k, v) in enumerate(entries):
        if k == INT:
            entries[ax] = (ARRAY, np.asarray(v))
        elif k == TRACED_INT:
            entries[ax] = (ARRAY, v)
    adv = [ax for ax, (k, _) in enumerate(entries) if k == ARRAY]
    # Apply the slices first, keeping the advanced axes whole.
    starts, limits, strides, rev = [], [], [], []
    for ax, (k, v) in enumerate(entries):
        if k == SLICE:
            lo, hi, st, _, r = slice_plan((k, v), shape[ax])
            starts.append(lo)
            limits.append(hi)
            strides.append(st)
            if r:
                rev.append(ax)
        else:
            starts.append(0)
            limits.append(shape[ax])
            strides.append(1)
    y = x
    if tuple(starts) != (0,) * len(shape) or tuple(limits) != tuple(shape) \
            or any(s != 1 for s in strides):
        y = lax.slice(y, tuple(starts), tuple(limits),
                      None if all(s == 1 for s in strides) else tuple(strides))
    if rev:
        y = lax.rev(y, tuple(rev))
    ys = get_aval(y).shape
    sizes = [ys[ax] for ax in adv]
    flat, bshape, oob = flat_index([entries[ax][1] for ax in adv], sizes, mode)
    others = [ax for ax in range(len(ys)) if ax not in adv]
    rest = tuple(ys[ax] for ax in others)
    n = math.prod(sizes)
    m = math.prod(bshape)
    if n == 0 and m > 0:
        raise IndexError("index is out of bounds for an axis of size 0")
    y = lax.transpose(y, tuple(adv) + tuple(others))
    y = lax.reshape(y, (n,) + rest)
    if isinstance(flat, np.ndarray):
        g = gather_rows(y, flat.reshape(-1))
    else:
        g = gather_rows(y, lax.reshape(flat, (m,)))
    g = lax.reshape(g, tuple(bshape) + rest)
    if oob is not None:
        g = _fill_oob(g, oob, bshape, rest, fill_value)
    contiguous = adv == list(range(adv[0], adv[-1] + 1))
    p = adv[0]
    if contiguous and p > 0:
        nb = len(bshape)
        perm = ([nb + j for j in range(p)] + list(range(nb))
                + [nb + j for j in range(p, len(rest))])
        g = lax.transpose(g, tuple(perm))
    return g


def _default_fill(dt):
    if dtypes.issubdtype(dt, np.inexact):
        return np.nan
    if dtypes.issubdtype(dt, np.signedinteger):
        return dtypes.iinfo(dt).min
    if dtypes.issubdtype(dt, np.unsignedinteger):
        return dtypes.iinfo(dt).max
    return True


def _fill_oob(g, oob, bshape, rest, fill_value):
    ga = get_aval(g)
    fv = _default_fill(ga.dtype) if fill_value is None else fill_value
    full = tuple(bshape) + tuple(rest)
    if isinstance(oob, np.ndarray):
        if not oob.any():
            return g
        oob = make_array(oob)
    mask = lax.broadcast_in_dim(oob, full, tuple(range(len(bshape))))
    if isinstance(fv, (Array, Tracer)):
        fill = _util.broadcast_to(lax.convert_element_type(fv, ga.dtype), full)
    else:
        fill = _util.full_const(full, fv, ga.dtype)
    return lax.select(mask, fill, g)


# ----------------------------------------------------------------------------------------------
# public entry points


def _rewriting_take(arr, idx, indices_are_sorted=False, unique_indices=False, mode=None,
                    fill_value=None, out_sharding=None):
    """``arr[idx]`` with NumPy semantics (out-of-bound indices clamp, as in JAX)."""
    if type(arr) is Array:
        fast = _fast_numpy_basic(arr, idx)
        if fast is not None:
            return fast
    x = _util.as_operand(arr)
    parsed = parse_index(get_aval(x).shape, idx)
    x = insert_newaxes(x, parsed)
    if mode is not None and mode not in ("clip", "promise_in_bounds", "fill"):
        raise ValueError(f"Invalid mode {mode!r} for indexing")
    if parsed.has_array:
        return _advanced_take(x, parsed, "fill" if mode == "fill" else "clip", fill_value)
    return _basic_take(x, parsed)


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (flattened when None).

    ``mode``: 'fill' (default: out-of-bound indices give ``fill_value``, NaN for floats),
    'clip' / 'promise_in_bounds' (clamp) or 'wrap'.
    """
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.take is not supported.")
    _util.check_arraylike("take", a, indices)
    a = _util.as_operand(a)
    if axis is None:
        a = lax.reshape(a, (get_aval(a).size,))
        axis = 0
    nd = get_aval(a).ndim
    axis = _util.canonicalize_axis(axis, nd)
    mode = "fill" if mode is None else mode
    if mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.take is not supported.")
    if mode not in ("fill", "clip", "wrap", "promise_in_bounds"):
        raise ValueError(f"Invalid mode '{mode}' for np.take")
    kind, v = _classify(indices)
    if kind == "bool":
        raise TypeError("jnp.take: indices must be integers, got a boolean array")
    if kind in (INT, TRACED_INT):
        v = np.asarray(v) if kind == INT else v
    if get_aval(a).shape[axis] == 0 and (np.size(v) if isinstance(v, np.ndarray)
                                         else get_aval(v).size):
        raise IndexError("Cannot do a non-empty jnp.take() from an empty axis.")
    entries = [(SLICE, slice(None))] * nd
    entries[axis] = (ARRAY, v)
    parsed = ParsedIndex((), entries, get_aval(a).shape)
    m = "clip" if mode == "promise_in_bounds" else mode
    return _advanced_take(a, parsed, m, fill_value)


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
    """``arr`` gathered along ``axis`` at ``indices`` (same rank; other axes broadcast).

    ``mode``: 'fill' (default; out-of-bound indices give ``fill_value``, NaN for floats) or
    'clip'. Concrete operands use NumPy; otherwise a one-hot ``select`` + ``reduce_sum``
    over the indexed axis (memory: the broadcast result times the axis length).
    """
    _util.check_arraylike("take_along_axis", arr, indices)
    arr, indices = _util.as_operand(arr), _util.as_operand(indices)
    if not dtypes.issubdtype(indices.dtype, np.integer):
        raise TypeError(f"take_along_axis indices must be of integer type, got "
                        f"{indices.dtype}")
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(f"when axis=None, `indices` must have a single dimension, got "
                             f"{indices.shape}")
        arr = lax.reshape(arr, (arr.size,))
        axis = 0
    nd = arr.ndim
    if indices.ndim != nd:
        raise ValueError("indices and arr must have the same number of dimensions; "
                         f"{indices.ndim} vs. {nd}")
    axis = _util.canonicalize_axis(axis, nd)
    mode = "fill" if mode is None else mode
    if mode not in ("fill", "clip", "promise_in_bounds"):
        raise ValueError(f"Invalid mode {mode!r} for take_along_axis")
    n = arr.shape[axis]
    other = [i for i in range(nd) if i != axis]
    bshape = _util.broadcast_shapes(tuple(arr.shape[i] for i in other),
                                    tuple(indices.shape[i] for i in other))
    m = indices.shape[axis]
    # Work with the indexed axis last: arr (B, n), indices (B, m).
    perm = tuple(other) + (axis,)
    a_t = _util.broadcast_to(lax.transpose(arr, perm), bshape + (n,))
    i_t = _util.broadcast_to(lax.transpose(indices, perm), bshape + (m,))
    idx, oob = _normalize_array_index(
        np.asarray(i_t._value) if type(i_t) is Array else i_t, n,
        "fill" if mode == "fill" else "clip")
    if type(a_t) is Array and isinstance(idx, np.ndarray):
        out = make_array(np.take_along_axis(np.asarray(a_t._value), idx, axis=-1), a_t.weak_type)
    else:
        if isinstance(idx, np.ndarray):
            idx = make_array(idx.astype(_index_dtype()))
        full = bshape + (m, n)
        k = len(bshape)
        hot = lax.eq(lax.broadcast_in_dim(idx, full, tuple(range(k + 1))),
                     lax.broadcast_in_dim(lax.iota(idx.dtype, n), full, (k + 1,)))
        vals = lax.broadcast_in_dim(a_t, full, tuple(range(k)) + (k + 1,))
        picked = lax.select(hot, vals, _util.full_const(full, 0, a_t.dtype))
        out = (lax.reduce_or(picked, (k + 1,)) if a_t.dtype == np.bool_
               else lax.reduce_sum(picked, (k + 1,)))
    if oob is not None:
        out = _fill_oob(out, oob, bshape + (m,), (), fill_value)
    inv = tuple(int(i) for i in np.argsort(perm))
    return lax.transpose(out, inv)


def nonzero(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements (a concrete input, or a static ``size``)."""
    a = _util.ensure_arraylike("nonzero", a)
    if isinstance(a, Tracer):
        raise ConcretizationTypeError(
            a, "The size argument of jnp.nonzero must be static and the input concrete; "
               "data-dependent output shapes cannot be traced.")
    v = np.asarray(a._value)
    if v.ndim == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use jnp.atleast_1d(scalar)"
                         ".nonzero() instead.")
    out = np.nonzero(v)
    idt = _index_dtype()
    if size is not None:
        size = operator.index(size)
        fills = fill_value if isinstance(fill_value, tuple) else (fill_value,) * v.ndim
        res = []
        for arr, f in zip(out, fills):
            arr = arr[:size]
            if len(arr) < size:
                arr = np.concatenate([arr, np.full(size - len(arr), 0 if f is None else f)])
            res.append(arr)
        out = tuple(res)
    return tuple(make_array(np.asarray(o, idt)) for o in out)


def flatnonzero(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements of the flattened array."""
    a = _util.ensure_arraylike("flatnonzero", a)
    return nonzero(lax.reshape(a, (get_aval(a).size,)), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    """Indices of nonzero elements, one row per element."""
    a = _util.ensure_arraylike("argwhere", a)
    nd = get_aval(a).ndim
    if nd == 0:
        a = lax.reshape(a, (1,))
    res = nonzero(a, size=size, fill_value=fill_value)
    cols = [lax.reshape(r, (get_aval(r).shape[0], 1)) for r in res]
    out = cols[0] if len(cols) == 1 else lax.concatenate(cols, 1)
    if nd == 0:
        out = lax.slice(out, (0, 0), (get_aval(out).shape[0], 0))
    return out


__all__ = ["take", "take_along_axis", "nonzero", "flatnonzero", "argwhere"]
