"""``x.at[idx].set/add/multiply/min/max/get/apply/divide/power(...)``: functional updates.

Until kiln has scatter primitives, updates are built from ``lax`` ops:

* basic indices (ints, slices, ``None``, ``...``, traced scalar ints): the region is read
  with ``lax.slice``/``dynamic_slice``, combined with the values, and written back with
  ``lax.dynamic_update_slice`` (unit strides) or ``lax.pad`` + ``lax.select`` (strides);
* a boolean mask covering leading axes with a scalar value: ``lax.select``;
* integer-array indices: NumPy's ``ufunc.at`` when everything is concrete, else a
  one-hot ``select`` + reduction (``NotImplementedError`` naming the missing scatter when
  that would be too large).

Out-of-bound indices are dropped (JAX's default for updates); ``mode='clip'`` clamps them.
With repeated indices ``set`` keeps the last value and ``add``/``multiply``/``min``/``max``
accumulate, as JAX does on CPU.
"""
from __future__ import annotations

import math

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array, make_array
from kiln.core.trace import Tracer, get_aval
from kiln.numpy import _indexing as _ix
from kiln.numpy import _util
from kiln.numpy._indexing import ARRAY, INT, SLICE, TRACED_INT

_OPS = ("set", "add", "multiply", "min", "max")


def _combine(op, a, b):
    """``op`` on operands of one dtype (booleans: add → or, multiply → and)."""
    if op == "set":
        return b
    is_bool = get_aval(a).dtype == np.bool_
    if op == "add":
        return lax.bitwise_or(a, b) if is_bool else lax.add(a, b)
    if op == "multiply":
        return lax.bitwise_and(a, b) if is_bool else lax.mul(a, b)
    if op == "min":
        return lax.min(a, b)
    if op == "max":
        return lax.max(a, b)
    raise ValueError(op)


def _identity(op, dt):
    if op == "add":
        return False if dt == np.bool_ else 0
    if op == "multiply":
        return True if dt == np.bool_ else 1
    kind_f = dtypes.issubdtype(dt, np.inexact)
    if op == "min":
        if dt == np.bool_:
            return True
        return np.inf if kind_f else dtypes.iinfo(dt).max
    if dt == np.bool_:
        return False
    return -np.inf if kind_f else dtypes.iinfo(dt).min


def _fit_values(values, shape):
    """Broadcast update values to the indexed ``shape`` (extra leading 1-dims dropped)."""
    vshape = get_aval(values).shape
    if len(vshape) > len(shape):
        extra = len(vshape) - len(shape)
        if any(d != 1 for d in vshape[:extra]):
            raise ValueError(f"Incompatible shapes for broadcasting: {vshape} and requested "
                             f"shape {tuple(shape)}")
        values = lax.reshape(values, vshape[extra:])
    return _util.broadcast_to(values, shape)


# ----------------------------------------------------------------------------------------------
# basic-index updates


def _write_region(x, new, starts, counts, strides, dyn):
    """Write ``new`` (shape = counts) into ``x`` at the strided box given per axis."""
    shape = get_aval(x).shape
    if any(c == 0 for c in counts):
        return x
    idt = dtypes.default_int_dtype()
    if all(s == 1 for s in strides):
        start_ops = [dyn[ax] if ax in dyn else _util.scalar_const(st, idt)
                     for ax, st in enumerate(starts)]
        return lax.dynamic_update_slice(x, new, start_ops)
    if dyn:
        raise NotImplementedError("updates combining traced integer indices with strided "
                                  "slices are not implemented yet (needs a scatter primitive)")
    config = [(lo, n - (lo + (c - 1) * st + 1), st - 1)
              for lo, n, c, st in zip(starts, shape, counts, strides)]
    dt = get_aval(x).dtype
    padded = lax.pad(new, _util.scalar_const(0, dt), config)
    mask = lax.pad(_util.full_const(tuple(counts), True, np.bool_),
                   _util.scalar_const(False, np.bool_), config)
    return lax.select(mask, padded, x)


def _basic_update(x, parsed, values, op, mode):
    shape = parsed.expanded_shape
    starts, counts, strides, rev, dyn, indexed = [], [], [], [], {}, []
    for ax, (k, v) in enumerate(parsed.entries):
        n = shape[ax]
        if k == SLICE:
            lo, _, st, cnt, r = _ix.slice_plan((k, v), n)
            starts.append(lo)
            counts.append(cnt)
            strides.append(st)
            indexed.append(cnt)
            if r:
                rev.append(ax)
        elif k == INT:
            i = v + n if v < 0 else v
            if not 0 <= i < n:
                if mode == "clip" and n > 0:
                    i = min(max(i, 0), n - 1)
                else:
                    return None  # dropped: nothing changes
            starts.append(i)
            counts.append(1)
            strides.append(1)
        else:
            starts.append(0)
            counts.append(1)
            strides.append(1)
            # dynamic_(update_)slice wrap negative starts themselves.
            dyn[ax] = lax.convert_element_type(v, dtypes.default_int_dtype())
    vals = _fit_values(values, tuple(indexed))
    vals = lax.reshape(vals, tuple(counts))
    if rev:
        vals = lax.rev(vals, tuple(rev))
    if op == "set":
        new = vals
    else:
        limits = [lo + (c - 1) * st + 1 if c else lo for lo, c, st in zip(starts, counts,
                                                                           strides)]
        if dyn:
            idt = dtypes.default_int_dtype()
            region = lax.dynamic_slice(
                x, [dyn[ax] if ax in dyn else _util.scalar_const(s, idt)
                    for ax, s in enumerate(starts)], tuple(counts))
        else:
            region = lax.slice(x, tuple(starts), tuple(limits),
                               None if all(s == 1 for s in strides) else tuple(strides))
        new = _combine(op, region, vals)
    return _write_region(x, new, starts, counts, strides, dyn)


# ----------------------------------------------------------------------------------------------
# advanced-index updates


def _one_hot_update(y, flat, oob, vals, op):
    """Rows of ``y`` (N, rest) updated at ``flat`` (M,) with ``vals`` (M, rest)."""
    ya = get_aval(y)
    n, rest = ya.shape[0], ya.shape[1:]
    m = get_aval(flat).shape[0]
    if m * n * math.prod(rest) > _ix.ONE_HOT_LIMIT:
        raise NotImplementedError(f"scatter of {m} indexed rows into {n} rows with traced "
                                  "operands is not implemented yet (needs a scatter primitive)")
    idt = get_aval(flat).dtype
    hot = lax.eq(lax.broadcast_in_dim(flat, (m, n), (0,)),
                 lax.broadcast_in_dim(lax.iota(idt, n), (m, n), (1,)))
    if oob is not None:
        hot = lax.bitwise_and(hot, lax.broadcast_in_dim(lax.bitwise_not(oob), (m, n), (0,)))
    full = (m, n) + rest
    vb = lax.broadcast_in_dim(vals, full, (0,) + tuple(range(2, len(full))))
    dt = ya.dtype
    if op == "set":
        mi = lax.broadcast_in_dim(lax.iota(idt, m), (m, n), (0,))
        neg = _util.full_const((m, n), -1, idt)
        last = lax.reduce_max(lax.select(hot, mi, neg), (0,))
        hit = lax.ge(last, _util.full_const((n,), 0, idt))
        sel = lax.bitwise_and(hot, lax.eq(mi, lax.broadcast_in_dim(last, (m, n), (1,))))
        selb = lax.broadcast_in_dim(sel, full, (0, 1))
        picked = lax.select(selb, vb, _util.full_const(full, 0, dt))
        val = lax.reduce_or(picked, (0,)) if dt == np.bool_ else lax.reduce_sum(picked, (0,))
        return lax.select(lax.broadcast_in_dim(hit, ya.shape, (0,)), val, y)
    hotb = lax.broadcast_in_dim(hot, full, (0, 1))
    picked = lax.select(hotb, vb, _util.full_const(full, _identity(op, dt), dt))
    if op == "add":
        contrib = lax.reduce_or(picked, (0,)) if dt == np.bool_ else lax.reduce_sum(picked, (0,))
    elif op == "multiply":
        contrib = (lax.reduce_and(picked, (0,)) if dt == np.bool_
                   else lax.reduce_prod(picked, (0,)))
    elif op == "min":
        contrib = lax.reduce_min(picked, (0,))
    else:
        contrib = lax.reduce_max(picked, (0,))
    return _combine(op, y, contrib)


_NP_AT = {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}


def _numpy_update(y, flat, oob, vals, op):
    out = np.array(y._value)
    v = np.asarray(vals._value)
    if oob is not None:
        keep = ~oob
        flat, v = flat[keep], v[keep]
    if op == "set":
        out[flat] = v
    else:
        ufunc = _NP_AT[op]
        if out.dtype == np.bool_:
            ufunc = {"add": np.logical_or, "multiply": np.logical_and}.get(op, ufunc)
        ufunc.at(out, flat, v)
    return make_array(out, y.weak_type)


def _advanced_update(x, parsed, values, op, mode):
    shape = parsed.expanded_shape
    entries = list(parsed.entries)
    for ax, (k, v) in enumerate(entries):
        if k == INT:
            entries[ax] = (ARRAY, np.asarray(v))
        elif k == TRACED_INT:
            entries[ax] = (ARRAY, v)
    adv = [ax for ax, (k, _) in enumerate(entries) if k == ARRAY]
    others = [ax for ax in range(len(shape)) if ax not in adv]
    starts, counts, strides, rev = [], [], [], []
    for ax, (k, v) in enumerate(entries):
        if k == SLICE:
            lo, _, st, cnt, r = _ix.slice_plan((k, v), shape[ax])
            starts.append(lo)
            counts.append(cnt)
            strides.append(st)
            if r:
                rev.append(ax)
        else:
            starts.append(0)
            counts.append(shape[ax])
            strides.append(1)
    if any(c == 0 for c in counts):
        return x
    limits = [lo + (c - 1) * st + 1 for lo, c, st in zip(starts, counts, strides)]
    whole = tuple(starts) == (0,) * len(shape) and tuple(limits) == tuple(shape) \
        and all(s == 1 for s in strides)
    region = x if whole else lax.slice(
        x, tuple(starts), tuple(limits), None if all(s == 1 for s in strides) else tuple(strides))
    if rev:
        region = lax.rev(region, tuple(rev))
    sizes = [counts[ax] for ax in adv]
    flat, bshape, oob = _ix.flat_index([entries[ax][1] for ax in adv], sizes,
                                       "clip" if mode == "clip" else "fill")
    rest = tuple(counts[ax] for ax in others)
    nb = len(bshape)
    # The values come in the layout of x[idx]: B at the first advanced axis when the advanced
    # axes are adjacent, else in front. Bring B to the front.
    contiguous = adv == list(range(adv[0], adv[-1] + 1))
    p = adv[0] if contiguous else 0
    indexed_shape = rest[:p] + tuple(bshape) + rest[p:]
    vals = _fit_values(values, indexed_shape)
    if p:
        perm = list(range(p, p + nb)) + list(range(p)) + list(range(p + nb, len(indexed_shape)))
        vals = lax.transpose(vals, tuple(perm))
    m, n = math.prod(bshape), math.prod(sizes)
    vals = lax.reshape(vals, (m,) + rest)
    perm_y = tuple(adv) + tuple(others)
    y = lax.reshape(lax.transpose(region, perm_y), (n,) + rest)
    if isinstance(flat, np.ndarray):
        flat1 = flat.reshape(-1)
        oob1 = None if oob is None else np.asarray(oob).reshape(-1)
        if type(y) is Array and type(vals) is Array:
            new_y = _numpy_update(y, flat1, oob1, vals, op)
        else:
            idt = dtypes.default_int_dtype()
            new_y = _one_hot_update(y, make_array(flat1.astype(idt)),
                                    None if oob1 is None else make_array(oob1), vals, op)
    else:
        oob1 = None if oob is None else (make_array(np.asarray(oob).reshape(-1))
                                         if isinstance(oob, np.ndarray)
                                         else lax.reshape(oob, (m,)))
        new_y = _one_hot_update(y, lax.reshape(flat, (m,)), oob1, vals, op)
    new_region = lax.reshape(new_y, tuple(counts[ax] for ax in perm_y))
    inv = tuple(int(i) for i in np.argsort(perm_y))
    new_region = lax.transpose(new_region, inv)
    if rev:
        new_region = lax.rev(new_region, tuple(rev))
    if whole:
        return new_region
    return _write_region(x, new_region, starts, counts, strides, {})


# ----------------------------------------------------------------------------------------------
# driver


def _is_mask_update(x, idx, values):
    """A lone boolean mask over leading axes with a single value: a plain select."""
    if isinstance(idx, tuple):
        if len(idx) != 1:
            return None
        idx = idx[0]
    if not isinstance(idx, (Array, Tracer, np.ndarray)):
        return None
    a = get_aval(idx) if isinstance(idx, (Array, Tracer)) else None
    dt = a.dtype if a is not None else idx.dtype
    mshape = a.shape if a is not None else idx.shape
    if dt != np.bool_ or not mshape:
        return None
    xs = get_aval(x).shape
    if tuple(mshape) != tuple(xs[:len(mshape)]):
        return None
    if get_aval(values).size != 1:
        return None
    return idx


def scatter(x, idx, values, op, mode=None):
    """The functional update ``x.at[idx].<op>(values)``; returns the new array."""
    if op not in _OPS:
        raise ValueError(f"unknown update {op}")
    if mode not in (None, "drop", "promise_in_bounds", "clip", "fill"):
        raise ValueError(f"Invalid scatter mode {mode!r}")
    x = _util.as_operand(x)
    xa = get_aval(x)
    _util.check_arraylike(f"scatter_{op}", values)
    values = lax._convert_element_type(_util.as_operand(values), xa.dtype, xa.weak_type)
    mask = _is_mask_update(x, idx, values)
    if mask is not None:
        mask = _util.as_operand(mask) if not isinstance(mask, np.ndarray) else make_array(mask)
        m = lax.broadcast_in_dim(mask, xa.shape, tuple(range(get_aval(mask).ndim)))
        v = _util.broadcast_to(lax.reshape(values, ()), xa.shape)
        return lax.select(m, _combine(op, x, v), x)
    parsed = _ix.parse_index(xa.shape, idx)
    xe = _ix.insert_newaxes(x, parsed)
    if parsed.has_array:
        out = _advanced_update(xe, parsed, values, op, mode)
    else:
        out = _basic_update(xe, parsed, values, op, mode)
        if out is None:
            return x
    if parsed.newaxes:
        out = lax.reshape(out, xa.shape)
    return out


class _IndexUpdateRef:
    """``x.at[idx]``: call ``get``, ``set``, ``add``, ... to get an updated copy."""

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array = array
        self.index = index

    def __repr__(self):
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None, out_sharding=None):
        """``x[idx]`` (``mode='fill'`` returns ``fill_value`` for out-of-bound indices)."""
        return _ix._rewriting_take(self.array, self.index, mode=mode, fill_value=fill_value)

    def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] = values``, functionally."""
        return scatter(self.array, self.index, values, "set", mode)

    def add(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] += values`` (repeated indices accumulate)."""
        return scatter(self.array, self.index, values, "add", mode)

    def subtract(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] -= values``."""
        from kiln.numpy._ufuncs import negative
        return scatter(self.array, self.index, negative(values), "add", mode)

    def multiply(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] *= values`` (repeated indices accumulate)."""
        return scatter(self.array, self.index, values, "multiply", mode)

    mul = multiply

    def divide(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] /= values``."""
        from kiln.numpy._ufuncs import true_divide
        return self.apply(lambda r: true_divide(r, values), mode=mode)

    def power(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] **= values``."""
        from kiln.numpy._ufuncs import power
        return self.apply(lambda r: power(r, values), mode=mode)

    def min(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] = minimum(x[idx], values)``."""
        return scatter(self.array, self.index, values, "min", mode)

    def max(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] = maximum(x[idx], values)``."""
        return scatter(self.array, self.index, values, "max", mode)

    def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """``x[idx] = func(x[idx])`` (indices assumed unique)."""
        region = _ix._rewriting_take(self.array, self.index,
                                     mode="clip" if mode == "clip" else None)
        return scatter(self.array, self.index, func(region), "set", mode)


class _IndexUpdateHelper:
    """The object behind ``x.at``: index it to choose the elements to update."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return _IndexUpdateRef(self.array, index)

    def __repr__(self):
        return f"_IndexUpdateHelper({self.array!r})"
