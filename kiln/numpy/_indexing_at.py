"""``x.at[idx].set/add/subtract/multiply/divide/power/min/max/apply/get(...)``: functional
indexed updates with JAX's semantics.

* The values are promoted with ``x`` (JAX's rules), combined in the promoted dtype and the
  result is cast back to ``x``'s dtype and weak type (a ``FutureWarning`` flags unsafe casts,
  as JAX does). Values broadcast to the shape of ``x[idx]`` (NumPy rules, never dropping
  leading axes).
* Integer-array indices (and traced scalar ints) become one ``lax.scatter*`` on the region
  the static slices select, written back with ``dynamic_update_slice`` (unit strides) or
  ``pad`` + ``select`` (strides). ``mode=None``/``'drop'``/``'fill'``/``'promise_in_bounds'``
  drop out-of-bound updates, ``'clip'`` clamps them; negative indices wrap.
* Static basic indices (ints, slices, ``None``, ``...``) update the region directly; an
  out-of-bound static int drops the update (clamps with ``mode='clip'``).
* Repeated indices: ``set`` keeps the last value, ``add``/``multiply``/``min``/``max``
  accumulate, ``apply`` applies the function once per occurrence (as XLA on CPU).
* A lone boolean mask with a single value is a ``select`` (this also works with a traced
  mask, where JAX raises ``NonConcreteBooleanIndexError``); other traced masks raise it.

Gradients are exact: the scatters' jvp/transpose rules (scatter-add ↔ gather).
"""
from __future__ import annotations

import warnings

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array, make_array
from kiln.core.trace import Tracer, get_aval
from kiln.lax.gather_scatter import GatherScatterMode, _scatter_dnums_of_gather
from kiln.numpy import _ds_index, _util
from kiln.numpy import _indexing as _ix
from kiln.numpy._indexing import ARRAY, INT, SLICE, TRACED_INT

_OPS = ("set", "add", "sub", "mul", "min", "max", "apply")

_SCATTERS = {"set": lax.scatter, "add": lax.scatter_add, "sub": lax.scatter_sub,
             "mul": lax.scatter_mul, "min": lax.scatter_min, "max": lax.scatter_max}


def _combine(op, a, b, func=None):
    """The update ``op`` of region ``a`` by values ``b`` (one dtype; lax's dtype rules, so
    arithmetic on booleans raises TypeError as in JAX)."""
    if op == "set":
        return b
    if op == "add":
        return lax.add(a, b)
    if op == "sub":
        return lax.sub(a, b)
    if op == "mul":
        return lax.mul(a, b)
    if op == "min":
        return lax.min(a, b)
    if op == "max":
        return lax.max(a, b)
    return lax._convert_element_type(func(a), get_aval(a).dtype, get_aval(a).weak_type)


def _broadcast_values(values, shape):
    return _util.broadcast_to(values, tuple(shape))


# ----------------------------------------------------------------------------------------------
# region write-back


def _write_region(x, new, starts, counts, strides):
    """Write ``new`` (shape = counts) into ``x`` at the static strided box."""
    shape = get_aval(x).shape
    if any(c == 0 for c in counts):
        return x
    if tuple(counts) == tuple(shape) and all(s == 1 for s in strides):
        return new
    idt = dtypes.default_int_dtype()
    if all(s == 1 for s in strides):
        return lax.dynamic_update_slice(x, new, [_util.scalar_const(st, idt) for st in starts])
    config = [(lo, n - (lo + (c - 1) * st + 1), st - 1)
              for lo, n, c, st in zip(starts, shape, counts, strides)]
    dt = get_aval(x).dtype
    padded = lax.pad(new, _util.scalar_const(0, dt), config)
    mask = lax.pad(_util.full_const(tuple(counts), True, np.bool_),
                   _util.scalar_const(False, np.bool_), config)
    return lax.select(mask, padded, x)


# ----------------------------------------------------------------------------------------------
# static basic-index updates


def _basic_update(x, parsed, values, op, mode, func):
    shape = parsed.expanded_shape
    starts, counts, strides, rev, indexed = [], [], [], [], []
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
        else:  # INT
            i = v + n if v < 0 else v
            if not 0 <= i < n:
                if mode == GatherScatterMode.CLIP and n > 0:
                    i = min(max(i, 0), n - 1)
                else:
                    return None  # dropped: nothing changes
            starts.append(i)
            counts.append(1)
            strides.append(1)
    if any(c == 0 for c in counts):
        return None
    limits = [lo + (c - 1) * st + 1 for lo, c, st in zip(starts, counts, strides)]
    vals = None
    if op != "apply":
        vals = lax.reshape(_broadcast_values(values, tuple(indexed)), tuple(counts))
        if rev:
            vals = lax.rev(vals, tuple(rev))
    if op == "set":
        new = vals
    else:
        region = lax.slice(x, tuple(starts), tuple(limits),
                           None if all(s == 1 for s in strides) else tuple(strides))
        new = _combine(op, region, vals, func)
        if op == "apply":    # no derivative, as lax.scatter_apply
            new = lax.gather_scatter.scatter_apply_no_jvp(new)
    return _write_region(x, new, starts, counts, strides)


# ----------------------------------------------------------------------------------------------
# advanced-index updates (one scatter)


def _advanced_update(x, parsed, values, op, mode, func, indices_are_sorted, unique_indices,
                     wrap):
    plan = _ix.GatherPlan(x, parsed, wrap)
    if 0 in plan.indexed_shape:
        return None
    sdn = _scatter_dnums_of_gather(plan.dnums)
    # A single index position cannot collide with itself (cheaper, transposable rules).
    single = int(np.prod(plan.bshape, dtype=np.int64)) <= 1
    kw = dict(indices_are_sorted=indices_are_sorted or single,
              unique_indices=unique_indices or single, mode=mode)
    if op == "apply":
        new = lax.scatter_apply(plan.region, plan.indices, func, sdn,
                                update_shape=plan.indexed_shape, **kw)
    else:
        vals = _broadcast_values(values, plan.indexed_shape)
        new = _SCATTERS[op](plan.region, plan.indices, vals, sdn, **kw)
    if plan.rev:
        new = lax.rev(new, plan.rev)
    return _write_region(x, new, plan.starts, plan.counts, plan.strides)


_NP_AT = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum,
          "max": np.maximum}


def _numpy_update(xp, parsed, values, op, mode, wrap):
    """Eager update of a concrete Array at concrete indices with NumPy's ``ufunc.at`` /
    fancy assignment; None (use the scatter) when an update would be dropped or an indexed
    axis is empty."""
    if op == "apply" or any(k == ARRAY and not isinstance(v, np.ndarray)
                            for k, v in parsed.entries):
        return None
    if op in ("add", "sub", "mul") and xp.dtype == np.bool_:
        return None                                # lax raises JAX's TypeError
    shape = parsed.expanded_shape
    basic, adv, arrays = [], [], []
    for ax, (k, e) in enumerate(parsed.entries):
        if k == SLICE:
            basic.append(e)
            continue
        n = shape[ax]
        a = _ix._concrete_index(np.asarray(e), n, wrap)
        if mode == GatherScatterMode.CLIP:
            a = np.minimum(np.maximum(a, 0), n - 1)
        elif a.size and (a.min() < 0 or a.max() >= n):
            return None
        if n == 0:
            return None
        basic.append(slice(None))
        adv.append(ax)
        arrays.append(a)
    bshape = _util.broadcast_shapes(*[a.shape for a in arrays])
    out = np.array(xp._value, copy=True).reshape(shape)
    region = out[tuple(basic)]                     # a view: writes land in ``out``
    rest = [region.shape[ax] for ax in range(len(shape)) if ax not in adv]
    contiguous = adv == list(range(adv[0], adv[-1] + 1))
    p = adv[0] if contiguous else 0
    target = tuple(rest[:p]) + tuple(bshape) + tuple(rest[p:])
    vshape = get_aval(values).shape
    if len(vshape) > len(target) or any(d != 1 and d != t for d, t in
                                        zip(vshape[::-1], target[::-1])):
        raise ValueError(f"Incompatible shapes for broadcasting: {vshape} and requested "
                         f"shape {target}")
    if 0 in target:
        return xp
    vals = np.broadcast_to(values._value, target)
    full = [slice(None)] * len(shape)
    for ax, a in zip(adv, arrays):
        full[ax] = a
    if op == "set":
        region[tuple(full)] = vals
    elif out.dtype.kind in "fc":
        with np.errstate(all="ignore"):
            _NP_AT[op].at(region, tuple(full), vals)
    else:
        _NP_AT[op].at(region, tuple(full), vals)
    return make_array(out.reshape(get_aval(xp).shape), xp.weak_type)


# ----------------------------------------------------------------------------------------------
# driver


def _lone_mask(x, idx):
    """The boolean mask of an index made of one boolean array over leading axes, or None."""
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
    return idx


def _prepare_values(x, values, op):
    xa = get_aval(x)
    if op == "apply":
        return None
    if (type(values) is int and dtypes.issubdtype(xa.dtype, np.integer)
            and dtypes.iinfo(xa.dtype).min <= values <= dtypes.iinfo(xa.dtype).max):
        return make_array(np.asarray(values, xa.dtype))
    if isinstance(values, (list, tuple)):
        from kiln.numpy._creation import asarray
        values = asarray(values)
    _util.check_arraylike(f"scatter_{op}", values)
    values = _util.as_operand(values)
    if not dtypes.safe_to_cast(values, x):
        warnings.warn(
            "scatter inputs have incompatible types: cannot safely cast value from "
            f"dtype={np.dtype(get_aval(values).dtype).name} to "
            f"dtype={np.dtype(xa.dtype).name} with jax_numpy_dtype_promotion=standard. In "
            "future JAX releases this will result in an error.", FutureWarning, stacklevel=4)
    return values


def scatter(x, idx, values, op, mode=None, *, indices_are_sorted=False, unique_indices=False,
            wrap_negative_indices=True, func=None):
    """The functional update ``x.at[idx].<op>(values)`` (``op`` in set, add, sub, mul, min,
    max, apply — ``apply`` takes ``func`` instead of values); returns the new array."""
    if op not in _OPS:
        raise ValueError(f"unknown update {op}")
    smode = GatherScatterMode.from_any(mode)
    x = _util.as_operand(x)
    xa = get_aval(x)
    if isinstance(xa.dtype, dtypes.ExtendedDType) and (
            op != "set" or getattr(values, "dtype", None) != xa.dtype):
        # Typed keys take only ``set`` of keys (JAX's TypeError otherwise).
        raise TypeError(f"Cannot interpret '{xa.dtype}' as a data type")
    values = _prepare_values(x, values, op)
    if values is not None:
        xp, values = _util.promote_dtypes(x, values)
    else:
        xp = x
    mask = _lone_mask(x, idx)
    if mask is not None and (values is None or get_aval(values).size == 1):
        m = _util.as_operand(mask) if not isinstance(mask, np.ndarray) else make_array(mask)
        m = lax.broadcast_in_dim(m, xa.shape, tuple(range(get_aval(m).ndim)))
        v = None if values is None else _util.broadcast_to(
            lax.reshape(values, ()), xa.shape)
        out = lax.select(m, _combine(op, xp, v, func), xp)
        return lax._convert_element_type(out, xa.dtype, xa.weak_type)
    parsed = _ix.parse_index(xa.shape, idx)
    xe = _ix.insert_newaxes(xp, parsed)
    has_traced = any(k == TRACED_INT for k, _ in parsed.entries)
    has_int = any(k == INT for k, _ in parsed.entries)
    if parsed.has_array and not has_traced and type(xp) is Array and type(values) is Array:
        out = _numpy_update(xp, parsed, values, op, smode, wrap_negative_indices)
        if out is not None:
            return lax._convert_element_type(out, xa.dtype, xa.weak_type)
    if parsed.has_array or has_traced or (has_int and not wrap_negative_indices):
        out = _advanced_update(xe, parsed, values, op, smode, func, indices_are_sorted,
                               unique_indices, wrap_negative_indices)
    else:
        out = _basic_update(xe, parsed, values, op, smode, func)
    if out is None:
        return x
    if parsed.newaxes:
        out = lax.reshape(out, xa.shape)
    return lax._convert_element_type(out, xa.dtype, xa.weak_type)


class _IndexUpdateRef:
    """``x.at[idx]``: call ``get``, ``set``, ``add``, ... to get an updated copy."""

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array = array
        self.index = index

    def __repr__(self):
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None, out_sharding=None, wrap_negative_indices=True):
        """``x[idx]``; ``mode='fill'`` returns ``fill_value`` for out-of-bound indices,
        ``'clip'``/``'promise_in_bounds'``/None clamp them."""
        return _ix._rewriting_take(self.array, self.index, indices_are_sorted=indices_are_sorted,
                                   unique_indices=unique_indices, mode=mode,
                                   fill_value=fill_value,
                                   wrap_negative_indices=wrap_negative_indices)

    def _update(self, values, op, indices_are_sorted, unique_indices, mode,
                wrap_negative_indices, func=None):
        def apply(x, index):
            return scatter(x, index, values, op, mode, indices_are_sorted=indices_are_sorted,
                           unique_indices=unique_indices,
                           wrap_negative_indices=wrap_negative_indices, func=func)
        if _ds_index.has_slice_objects(self.index):     # jax.ds slices (see _ds_index)
            return _ds_index.update_slices(self.array, self.index, mode, apply)
        return apply(self.array, self.index)

    def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        """``x[idx] = values``, functionally (repeated indices: the last value wins)."""
        return self._update(values, "set", indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def add(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        """``x[idx] += values`` (repeated indices accumulate)."""
        return self._update(values, "add", indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def subtract(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 out_sharding=None, wrap_negative_indices=True):
        """``x[idx] -= values`` (repeated indices accumulate)."""
        return self._update(values, "sub", indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def multiply(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 out_sharding=None, wrap_negative_indices=True):
        """``x[idx] *= values`` (repeated indices accumulate)."""
        return self._update(values, "mul", indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    mul = multiply

    def divide(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
               out_sharding=None, wrap_negative_indices=True):
        """``x[idx] /= values`` (``x / ones.at[idx].multiply(values)``, as JAX)."""
        from kiln.numpy._creation import ones_like
        from kiln.numpy._ufuncs import divide
        den = scatter(ones_like(self.array), self.index, values, "mul", mode,
                      indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                      wrap_negative_indices=wrap_negative_indices)
        return divide(self.array, den)

    def power(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
              out_sharding=None, wrap_negative_indices=True):
        """``x[idx] **= values`` (``x ** ones.at[idx].multiply(values)``, as JAX)."""
        from kiln.numpy._creation import ones_like
        from kiln.numpy._ufuncs import power
        ex = scatter(ones_like(self.array), self.index, values, "mul", mode,
                     indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                     wrap_negative_indices=wrap_negative_indices)
        return power(self.array, ex)

    def min(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        """``x[idx] = minimum(x[idx], values)``."""
        return self._update(values, "min", indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def max(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None, wrap_negative_indices=True):
        """``x[idx] = maximum(x[idx], values)``."""
        return self._update(values, "max", indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None,
              wrap_negative_indices=True):
        """``x[idx] = func(x[idx])`` for an elementwise ``func``; a repeated index applies it
        once per occurrence."""
        return self._update(None, "apply", indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices, func)


class _IndexUpdateHelper:
    """The object behind ``x.at``: index it to choose the elements to update."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return _IndexUpdateRef(self.array, index)

    def __repr__(self):
        return f"_IndexUpdateHelper({self.array!r})"


_ = (ARRAY,)
