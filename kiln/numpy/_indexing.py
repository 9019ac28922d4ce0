"""NumPy indexing for kiln arrays: ``x[idx]`` (``_rewriting_take``), ``take``,
``take_along_axis``, ``nonzero``, ``flatnonzero``, ``argwhere``; and the index parser and
gather plan shared with ``_indexing_at`` (``x.at[idx]``).

JAX's semantics:

* basic indices (ints, slices of any step, ``None``, ``...``) become ``lax.slice`` /
  ``lax.rev`` / ``lax.reshape``; a traced scalar int becomes ``lax.dynamic_slice``; static
  and dynamic starts clamp, as in JAX;
* integer-array (advanced) indices follow NumPy's rules (broadcast together; the result
  axes go where the advanced indices are when they are adjacent, in front otherwise; ints
  count as advanced indices then). The slices are applied first, then one ``lax.gather``
  reads the advanced axes. Negative indices wrap; out-of-bound ones clamp (``mode=None``,
  ``'clip'``, ``'promise_in_bounds'``) or give ``fill_value`` (``mode='fill'``);
* boolean masks must be concrete (they become integer arrays); a traced mask raises
  ``NonConcreteBooleanIndexError``.

Concrete operands with concrete indices take NumPy fast paths (same results, no tracing).
Gradients come from the gather's transpose (a scatter-add), so they are exact.
"""
from __future__ import annotations

import operator

import numpy as np

from kiln import _compile_log, dtypes, lax
from kiln.array import Array, make_array
from kiln.config import config
from kiln.core.trace import Tracer, current_trace, eval_trace, get_aval
from kiln.errors import ConcretizationTypeError, NonConcreteBooleanIndexError
from kiln.lax.gather_scatter import GatherDimensionNumbers, GatherScatterMode
from kiln.numpy import _ds_index, _util

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
    if isinstance(e, (list, tuple)):
        e = _sequence_index(e)
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
    if isinstance(e, (str, bytes)):
        raise TypeError(f"JAX does not support string indexing; got idx={e!r}")
    raise IndexError("Indexing mode not yet supported. Only integers, slices, ellipsis, None, "
                     f"and integer or boolean arrays are valid indices. Got {e!r}")


def _sequence_index(e):
    """A list or tuple index entry as an index array, as JAX converts it with
    ``jnp.asarray``: ``x[(0, 1, 0), (3, 3, 2)]`` is ``x[array([0, 1, 0]), array([3, 3, 2])]``
    (eagerly and under every transformation). A list of booleans is a mask; as in JAX, a
    tuple of booleans is not a valid index."""
    leaves = list(_flat(e))
    if any(v is None for v in leaves):
        raise ValueError("None is not a valid value for jnp.array")
    if any(isinstance(v, Tracer) for v in leaves):
        from kiln.numpy._creation import array
        arr = array(e)
        dt = get_aval(arr).dtype
    else:
        for v in leaves:
            if not isinstance(v, (Array, np.ndarray, np.generic, bool, int, float, complex)):
                raise TypeError(f"Value {v!r} with dtype {np.asarray(v).dtype} is not a valid "
                                "JAX array type. Only arrays of numeric types are supported by "
                                "JAX.")
        try:
            arr = np.asarray(e)
        except ValueError:
            raise TypeError(f"Cannot use the ragged sequence {e!r} as an index: its elements "
                            "have different shapes.") from None
        if arr.size == 0:
            arr = arr.astype(np.int32)
        dt = arr.dtype
    if isinstance(e, tuple) and dt == np.bool_:
        # JAX accepts boolean masks as arrays or lists only (a tuple fails an assertion).
        raise AssertionError(f"a tuple of booleans {e!r} is not a valid index; use a list or "
                             "an array as a boolean mask")
    if dt != np.bool_ and not dtypes.issubdtype(dt, np.integer):
        raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                        f"{np.dtype(dtypes.canonicalize_dtype(dt)).name}")
    return arr


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
            if v.size == 0 and where + v.ndim <= len(shape):
                # An empty mask indexes nothing whatever its shape (NumPy's rule, which
                # JAX follows: jax-ml/jax#22886): its nonzero() is empty integer arrays.
                for arr in np.nonzero(v):
                    expanded.append((ARRAY, arr))
                consumed += v.ndim
                continue
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
    return lax.expand_dims(x, parsed.newaxes)     # broadcast_in_dim, as JAX stages it


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


def clamp_static_int(i, n, axis=None):
    """JAX's clamping of a static integer index into ``[0, n)``."""
    if n == 0:
        where = "" if axis is None else f" for axis {axis}"
        raise IndexError(f"index {i} is out of bounds{where} with size 0")
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
        elif k == INT and n > 0 and not -n <= v < n:
            # Out of bounds: a dynamic_slice at that (clamped) position, as JAX stages it,
            # so that checkify's index checks see it.
            starts.append(0)
            limits.append(n)
            strides.append(1)
            squeeze.append(ax)
            dyn[ax] = v
        elif k == INT:
            i = clamp_static_int(v, n, ax - sum(1 for a in parsed.newaxes if a < ax))
            starts.append(i)
            limits.append(i + 1)
            strides.append(1)
            squeeze.append(ax)
        else:  # TRACED_INT
            if n == 0:
                axis = ax - sum(1 for a in parsed.newaxes if a < ax)
                raise IndexError(f"index is out of bounds for axis {axis} with size 0")
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
        y = lax.squeeze(y, tuple(squeeze))      # as JAX stages it
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
# advanced indexing: the gather plan


def _concrete_index(v, n, wrap):
    """A concrete index array as int64, negatives wrapped (when ``wrap``)."""
    v = np.asarray(v)
    signed = v.dtype.kind != "u"
    v = v.astype(np.int64) if v.dtype != np.uint64 else np.minimum(
        v, np.iinfo(np.int64).max).astype(np.int64)
    if wrap and signed:
        v = np.where(v < 0, v + n, v)
    return v


def _fit_index(v, idt):
    """int64 indices as ``idt``; values outside its range are saturated (they stay out of
    bounds instead of wrapping around)."""
    if v.size and idt != np.int64:
        info = np.iinfo(idt)
        if v.min() < info.min or v.max() > info.max:
            v = np.minimum(np.maximum(v, info.min), info.max)
    return v.astype(idt)


def _traced_index(v, n, wrap, idt):
    dt = get_aval(v).dtype
    signed = dtypes.issubdtype(dt, np.signedinteger)
    if dt != idt:
        v = lax.convert_element_type(v, idt)
    if wrap and signed:
        v = lax.select(lax.lt(v, _util.scalar_const(0, idt)),
                       lax.add(v, _util.scalar_const(n, idt)), v)
    return v


def index_array(arrays, sizes, wrap=True):
    """The gather indices for advanced index ``arrays`` into axes of ``sizes``: broadcast
    together, negatives wrapped, stacked in a last axis. Returns ``(indices, bshape)``;
    ``indices`` is a constant Array when every index is concrete."""
    shapes = [np.shape(a) if isinstance(a, np.ndarray) else get_aval(a).shape for a in arrays]
    bshape = _util.broadcast_shapes(*shapes)
    idt = _index_dtype()
    if all(isinstance(a, np.ndarray) for a in arrays):
        cols = [np.broadcast_to(_fit_index(_concrete_index(a, n, wrap), idt), bshape)
                for a, n in zip(arrays, sizes)]
        idx = np.stack(cols, -1) if cols else np.zeros(bshape + (0,), idt)
        return make_array(idx), bshape
    cols = []
    nb = len(bshape)
    for a, n in zip(arrays, sizes):
        if isinstance(a, np.ndarray):
            a = make_array(_fit_index(_concrete_index(a, n, wrap), idt))
        else:
            a = _traced_index(a, n, wrap, idt)
        s = get_aval(a).shape
        cols.append(lax.broadcast_in_dim(a, bshape + (1,),
                                         tuple(range(nb - len(s), nb))))
    return (cols[0] if len(cols) == 1 else lax.concatenate(cols, nb)), bshape


class GatherPlan:
    """``x[idx]`` for an index with advanced entries, as: static slices of ``x`` (giving
    ``region``, reversed along ``rev``), then one gather of ``region`` at ``indices``.

    The gather output (``indexed_shape``) is NumPy's ``x[idx]`` layout; its scatter mirror
    updates ``region``, which ``starts``/``counts``/``strides`` place back into ``x``.
    """

    __slots__ = ("region", "rev", "starts", "counts", "strides", "whole", "indices", "bshape",
                 "dnums", "slice_sizes", "indexed_shape", "concrete_idx")

    def __init__(self, x, parsed, wrap=True, read_region=True):
        shape = parsed.expanded_shape
        entries = list(parsed.entries)
        for ax, (k, v) in enumerate(entries):
            if k == INT:
                entries[ax] = (ARRAY, np.asarray(v))
            elif k == TRACED_INT:
                entries[ax] = (ARRAY, v)
        adv = [ax for ax, (k, _) in enumerate(entries) if k == ARRAY]
        starts, counts, strides, rev = [], [], [], []
        for ax, (k, v) in enumerate(entries):
            if k == SLICE:
                lo, _, st, cnt, r = slice_plan((k, v), shape[ax])
                starts.append(lo)
                counts.append(cnt)
                strides.append(st)
                if r:
                    rev.append(ax)
            else:
                starts.append(0)
                counts.append(shape[ax])
                strides.append(1)
        limits = [lo + (c - 1) * st + 1 if c else lo
                  for lo, c, st in zip(starts, counts, strides)]
        self.starts, self.counts, self.strides = starts, counts, strides
        self.rev = tuple(rev)
        self.whole = tuple(starts) == (0,) * len(shape) and tuple(limits) == tuple(shape) \
            and all(s == 1 for s in strides)
        region = x
        if read_region and x is not None:
            if not self.whole:
                region = lax.slice(x, tuple(starts), tuple(limits),
                                   None if all(s == 1 for s in strides) else tuple(strides))
            if rev:
                region = lax.rev(region, tuple(rev))
        self.region = region
        sizes = [counts[ax] for ax in adv]
        arrays = [entries[ax][1] for ax in adv]
        self.concrete_idx = all(isinstance(a, np.ndarray) for a in arrays)
        self.indices, bshape = index_array(arrays, sizes, wrap)
        self.bshape = bshape
        others = [ax for ax in range(len(shape)) if ax not in adv]
        rest = tuple(counts[ax] for ax in others)
        nb = len(bshape)
        contiguous = adv == list(range(adv[0], adv[-1] + 1))
        p = adv[0] if contiguous else 0
        self.dnums = GatherDimensionNumbers(
            offset_dims=tuple(range(p)) + tuple(range(p + nb, nb + len(rest))),
            collapsed_slice_dims=tuple(adv), start_index_map=tuple(adv))
        self.slice_sizes = tuple(1 if ax in adv else counts[ax] for ax in range(len(shape)))
        self.indexed_shape = rest[:p] + tuple(bshape) + rest[p:]


def _gather_mode(mode):
    """The gather mode of an indexing ``mode`` (None: clamp, as JAX's indexing does)."""
    if mode is None:
        return GatherScatterMode.PROMISE_IN_BOUNDS
    return GatherScatterMode.from_any(mode)


def _check_fill_value(fill_value):
    if fill_value is None:
        return None
    if isinstance(fill_value, Tracer):
        raise ConcretizationTypeError(fill_value, "fill_value argument to indexed get()")
    v = fill_value._value if type(fill_value) is Array else fill_value
    if np.ndim(v) != 0:
        raise ValueError("fill_value argument to indexed get() must be a scalar")
    return np.asarray(v).item() if isinstance(v, (np.ndarray, np.generic)) else v


def _advanced_take(x, parsed, mode=None, fill_value=None, unique_indices=False,
                   indices_are_sorted=False, wrap=True):
    plan = GatherPlan(x, parsed, wrap)
    if 0 in plan.indexed_shape:
        return lax.full_like(x, 0, shape=plan.indexed_shape)
    return lax.gather(plan.region, plan.indices, plan.dnums, plan.slice_sizes,
                      unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                      mode=_gather_mode(mode), fill_value=fill_value)


def _numpy_take(x, parsed, mode, fill_value, wrap):
    """Eager ``x[idx]`` on a concrete Array with concrete indices (NumPy indexing), or None
    when an edge case (an empty indexed axis) needs the general path."""
    shape = parsed.expanded_shape
    v = x._value.reshape(shape) if parsed.newaxes else x._value
    basic, adv = [], []
    for ax, (k, e) in enumerate(parsed.entries):
        if k == SLICE:
            basic.append(e)
        else:
            if shape[ax] == 0:
                return None
            basic.append(slice(None))
            adv.append(ax)
    _util.broadcast_shapes(*[np.shape(parsed.entries[ax][1]) for ax in adv])  # JAX's error
    y = v[tuple(basic)] if any(b != slice(None) for b in basic) else v
    fill = mode == "fill" or mode == "drop" or mode is GatherScatterMode.FILL_OR_DROP
    idx, oob = [], None
    for ax in adv:
        n = shape[ax]
        a = _concrete_index(parsed.entries[ax][1], n, wrap)
        if fill:
            o = (a < 0) | (a >= n)
            oob = o if oob is None else (oob | o)
        idx.append(np.minimum(np.maximum(a, 0), n - 1))
    full = [slice(None)] * len(shape)
    for ax, a in zip(adv, idx):
        full[ax] = a
    out = y[tuple(full)]
    if oob is not None and oob.any():
        bshape = np.broadcast_shapes(*[np.shape(a) for a in idx])
        oob = np.broadcast_to(oob, bshape)
        contiguous = adv == list(range(adv[0], adv[-1] + 1))
        p = adv[0] if contiguous else 0
        nrest = out.ndim - len(bshape)
        mask = oob.reshape((1,) * p + bshape + (1,) * (nrest - p))
        fv = lax.gather_scatter._default_fill_value(out.dtype) if fill_value is None \
            else fill_value
        with np.errstate(invalid="ignore", over="ignore"):
            out = np.where(mask, np.asarray(fv).astype(out.dtype), out)
    return make_array(np.asarray(out), x.weak_type)


# ----------------------------------------------------------------------------------------------
# public entry points


def _rewriting_take(arr, idx, indices_are_sorted=False, unique_indices=False, mode=None,
                    fill_value=None, out_sharding=None, wrap_negative_indices=True):
    """``arr[idx]`` with NumPy semantics (out-of-bound indices clamp, as in JAX; ``mode=
    'fill'`` gives ``fill_value`` for them instead)."""
    # NumPy fast paths for a concrete operand and concrete indices: eagerly only (staged,
    # as JAX, the indexing is equations: make_jaxpr shows them and checkify checks them).
    if _ds_index.has_slice_objects(idx):      # jax.ds slices: applied first, each on its axis
        arr, idx = _ds_index.take_slices(arr, idx, mode, fill_value)
    if config.jax_check_static_indices and (
            mode is None or _gather_mode(mode) == GatherScatterMode.PROMISE_IN_BOUNDS):
        _check_static_indices(get_aval(_util.as_operand(arr)).shape, idx,
                              wrap_negative_indices)
    eager = current_trace() is eval_trace
    if eager and type(arr) is Array and mode is None and wrap_negative_indices and \
            not arr._committed and \
            config.jax_error_checking_behavior_oob == "ignore":    # (else: checks below)
        fast = _fast_numpy_basic(arr, idx)
        if fast is not None:
            return fast
    if mode is not None:
        _gather_mode(mode)                      # validates
    fill_value = _check_fill_value(fill_value)
    x = _util.as_operand(arr)
    parsed = parse_index(get_aval(x).shape, idx)
    fill = mode is not None and _gather_mode(mode) == GatherScatterMode.FILL_OR_DROP
    has_int = any(k in (INT, TRACED_INT) for k, _ in parsed.entries)
    if parsed.has_array or ((fill or not wrap_negative_indices) and has_int):
        if config.jax_error_checking_behavior_oob == "raise":
            _check_gather_bounds(parsed, wrap_negative_indices)
        if eager and type(x) is Array and all(k != TRACED_INT and (k != ARRAY or isinstance(v, np.ndarray))
                                    for k, v in parsed.entries):
            out = _numpy_take(x, parsed, "fill" if fill else None, fill_value,
                              wrap_negative_indices)
            if out is not None:
                return out
        x = insert_newaxes(x, parsed)
        return _advanced_take(x, parsed, mode, fill_value, unique_indices, indices_are_sorted,
                              wrap_negative_indices)
    x = insert_newaxes(x, parsed)
    return _basic_take(x, parsed)


def _check_gather_bounds(parsed, normalize):
    """``jax_error_checking_behavior_oob``: set the error state (``error_check``) when an
    index of a gather is out of bounds."""
    from kiln.numpy._error import _check_precondition_oob_gather
    axes = [ax for ax, (k, _) in enumerate(parsed.entries) if k in (ARRAY, INT, TRACED_INT)]
    _check_precondition_oob_gather([parsed.expanded_shape[ax] for ax in axes],
                                   [parsed.entries[ax][1] for ax in axes], normalize)


def _check_static_indices(shape, idx, normalize):
    """``jax_check_static_indices``: a static integer index outside its axis is JAX's
    ``IndexError`` (naming the index, the operand's axis and its size)."""
    parsed = parse_index(shape, idx)
    for ax, (k, v) in enumerate(parsed.entries):
        if k != INT or ax in parsed.newaxes:
            continue
        n = parsed.expanded_shape[ax]
        if not (-n if normalize else 0) <= v < n:
            axis = ax - sum(1 for a in parsed.newaxes if a < ax)
            raise IndexError(f"index {v} out of bounds for axis {axis} with size {n} "
                             f"(normalize_indices={normalize})")


_compile_log.register_trace_context("jax_check_static_indices",
                                    lambda: config.jax_check_static_indices)


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (flattened when None).

    ``mode``: 'fill' (default: out-of-bound indices give ``fill_value``, NaN for inexact
    types), 'clip' / 'promise_in_bounds' (clamp; negative indices are not wrapped) or 'wrap'
    (indices taken modulo the axis size).
    """
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.take is not supported.")
    a, indices = _util.ensure_arraylike("take", a, indices)
    if axis is None:
        a = lax.reshape(a, (get_aval(a).size,))
        axis = 0
    nd = get_aval(a).ndim
    axis = _util.canonicalize_axis(axis, nd)
    ia = get_aval(indices)
    if not dtypes.issubdtype(ia.dtype, np.integer):
        raise ValueError(f"jnp.take: indices must have an integer type, got "
                         f"{np.dtype(ia.dtype).name}")
    n = get_aval(a).shape[axis]
    if mode is None or mode == "fill":
        gmode, wrap = GatherScatterMode.FILL_OR_DROP, True
    elif mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.take is not supported.")
    elif mode == "wrap":
        gmode, wrap = GatherScatterMode.PROMISE_IN_BOUNDS, False
        if n:
            from kiln.numpy._ufuncs import remainder
            indices = remainder(indices, _util.scalar_const(n, ia.dtype))
    elif mode == "clip":
        gmode, wrap = GatherScatterMode.CLIP, False
    else:
        raise ValueError(f"Invalid mode '{mode}' for np.take")
    shape = get_aval(a).shape
    if n == 0:
        if ia.size != 0:
            raise IndexError("Cannot do a non-empty jnp.take() from an empty axis.")
        return a
    out_shape = shape[:axis] + ia.shape + shape[axis + 1:]
    if ia.size == 0:
        return _util.full_const(out_shape, 0, get_aval(a).dtype)
    v = np.asarray(indices._value) if type(indices) is Array else indices
    idx, bshape = index_array([v], [n], wrap)
    nb = len(bshape)
    dn = GatherDimensionNumbers(
        offset_dims=tuple(range(axis)) + tuple(range(axis + nb, nd + nb - 1)),
        collapsed_slice_dims=(axis,), start_index_map=(axis,))
    sizes = tuple(1 if d == axis else s for d, s in enumerate(shape))
    return lax.gather(a, idx, dn, sizes, mode=gmode, fill_value=_check_fill_value(fill_value),
                      unique_indices=unique_indices, indices_are_sorted=indices_are_sorted)


def _take_one_hot(a_t, i_t, n, k, wrap_negative_indices):
    """``take_along_axis(mode='one_hot')``: ``a_t`` (``B + (n,)``) contracted with the
    one-hot encoding of ``i_t`` (``B + (m,)``) over ``n``, as JAX (an out-of-range index
    selects nothing and gives 0)."""
    if wrap_negative_indices:
        i_t = lax.select(lax.lt(i_t, lax.full_like(i_t, 0)),
                         lax.add(i_t, lax.full_like(i_t, n)), i_t)
    ishape = tuple(i_t.shape)
    iota = lax.broadcasted_iota(i_t.dtype, ishape + (n,), k + 1)
    hot = lax.eq(lax.broadcast_in_dim(i_t, ishape + (n,), tuple(range(k + 1))), iota)
    dt = a_t.dtype
    work = np.dtype(np.int32) if dt == np.bool_ else dt
    batch = tuple(range(k))
    out = lax.dot_general(lax.convert_element_type(hot, work),
                          lax.convert_element_type(a_t, work),
                          (((k + 1,), (k,)), (batch, batch)),
                          precision=lax.Precision.HIGHEST, preferred_element_type=work)
    return lax.ne(out, lax.full_like(out, 0)) if dt == np.bool_ else out


def take_along_axis(arr, indices, axis=-1, mode=None, fill_value=None, *,
                    wrap_negative_indices=None):
    """``arr`` gathered along ``axis`` at ``indices`` (same rank; other axes broadcast).

    ``mode``: 'fill' (default; out-of-bound indices give ``fill_value``, NaN for floats),
    'clip' or 'promise_in_bounds' (clamp), 'one_hot' (a contraction with the indices'
    one-hot encoding; out-of-range indices give 0). Negative indices wrap unless
    ``wrap_negative_indices`` is False (default: all modes but 'promise_in_bounds').
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
    if mode is not None and mode not in ("fill", "clip", "promise_in_bounds", "one_hot"):
        _gather_mode(mode)
    gmode = GatherScatterMode.FILL_OR_DROP if mode is None else _gather_mode(mode)
    if wrap_negative_indices is None:
        wrap_negative_indices = mode != "promise_in_bounds"
    n = arr.shape[axis]
    other = [i for i in range(nd) if i != axis]
    bshape = _util.broadcast_shapes(tuple(arr.shape[i] for i in other),
                                    tuple(indices.shape[i] for i in other))
    m = indices.shape[axis]
    out_shape = list(bshape)
    out_shape.insert(axis, m)
    if n == 0:
        return _util.full_const(tuple(out_shape), 0, arr.dtype)
    # Work with the indexed axis last: arr (B, n), indices (B, m).
    perm = tuple(other) + (axis,)
    a_t = _util.broadcast_to(lax.transpose(arr, perm), bshape + (n,))
    i_t = _util.broadcast_to(lax.transpose(indices, perm), bshape + (m,))
    k = len(bshape)
    if gmode == GatherScatterMode.ONE_HOT:
        out = _take_one_hot(a_t, i_t, n, k, wrap_negative_indices)
        return lax.transpose(out, tuple(int(i) for i in np.argsort(perm)))
    v = np.asarray(i_t._value) if type(i_t) is Array else i_t
    idx, _ = index_array([v], [n], wrap_negative_indices)
    batch = tuple(range(k))
    dn = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(k,),
                                start_index_map=(k,), operand_batching_dims=batch,
                                start_indices_batching_dims=batch)
    out = lax.gather(a_t, idx, dn, (1,) * (k + 1), mode=gmode,
                     fill_value=_check_fill_value(fill_value))
    inv = tuple(int(i) for i in np.argsort(perm))
    return lax.transpose(out, inv)


def nonzero(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements (a concrete input, or a static ``size``)."""
    a = _util.concretize(_util.ensure_arraylike("nonzero", a))
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
