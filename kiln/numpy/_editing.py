"""Creating and editing arrays: ``geomspace``, ``insert``/``delete``, ``trim_zeros``, as ``jax.numpy``.

Semantics and dtypes are JAX's (which sometimes differ from NumPy's). Static arguments
(``axis``, ``N``, ``count``, ...) must be concrete; everything else may be traced.
"""
from __future__ import annotations

import operator

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util

__all__ = ["geomspace", "insert", "delete", "trim_zeros"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _shape(x):
    return get_aval(x).shape


def _dtype(x):
    return get_aval(x).dtype



# ----------------------------------------------------------------------------------------------
# creation and editing


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """``num`` numbers spaced evenly on a log scale from ``start`` to ``stop``."""
    jnp = _jnp()
    num = _util.core_int(num, "'num' argument of jnp.geomspace")
    axis = _util.core_int(axis, "'axis' argument of jnp.geomspace")
    _util.check_arraylike("geomspace", start, stop)
    if dtype is None:
        dt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(dtypes.result_type(start, stop)))
    else:
        dt = _util.user_dtype(dtype, "geomspace")
    cdt = dtypes.canonicalize_dtype(dtypes.to_inexact_dtype(dt))
    start = jnp.asarray(start).astype(cdt)
    stop = jnp.asarray(stop).astype(cdt)
    sign = jnp.sign(start)
    res = sign * jnp.logspace(jnp.log10(start / sign), jnp.log10(stop / sign), num,
                              endpoint=endpoint, base=10.0, dtype=cdt, axis=0)
    ax = _util.canonicalize_axis(axis, get_aval(res).ndim)
    if ax:
        res = jnp.moveaxis(res, 0, ax)
    return lax.convert_element_type(res, dt)


def insert(arr, obj, values, axis=None):
    """``arr`` with ``values`` inserted before the indices ``obj`` along ``axis``."""
    jnp = _jnp()
    a, _, vals = _util.ensure_arraylike("insert", arr, 0 if isinstance(obj, slice) else obj,
                                        values)
    if axis is None:
        a = jnp.ravel(a)
        axis = 0
    axis = _util.concretize(axis)
    if isinstance(axis, Tracer):
        raise ConcretizationTypeError(axis, "axis argument of jnp.insert()")
    axis = _util.canonicalize_axis(axis, get_aval(a).ndim)
    n_in = _shape(a)[axis]
    if isinstance(obj, slice):
        idx = jnp.arange(*obj.indices(n_in))
    else:
        idx = jnp.asarray(obj)
    if get_aval(idx).ndim > 1:
        raise ValueError(f"jnp.insert(): obj must be a slice, a one-dimensional array, or a "
                         f"scalar; got {obj}")
    if not dtypes.issubdtype(_dtype(idx), np.integer):
        if get_aval(idx).size == 0 and not isinstance(obj, (Array, Tracer)):
            idx = idx.astype(dtypes.default_int_dtype())
        else:
            raise ValueError(f"jnp.insert(): index array must be integer typed; got {obj}")
    vals = jnp.array(vals, ndmin=get_aval(a).ndim, dtype=_dtype(a), copy=False)
    if get_aval(idx).size == 1:
        index = jnp.ravel(idx)[0]
        if get_aval(idx).ndim == 0:
            vals = jnp.moveaxis(vals, 0, axis)
        idx = jnp.full((_shape(vals)[axis],), index)
    n_ins = _util.broadcast_shapes(_shape(idx), (_shape(vals)[axis],))[0]
    out_shape = list(_shape(a))
    out_shape[axis] += n_ins
    idx = jnp.clip(jnp.where(idx < 0, idx + n_in, idx), 0, n_in)
    # Final position of inserted element k: its index plus the number of inserted elements
    # that come before it (stable order: by index, then by k).
    k = jnp.arange(n_ins, dtype=_dtype(idx))
    idx = jnp.broadcast_to(idx, (n_ins,))
    before = jnp.sum((idx[None, :] < idx[:, None]) | ((idx[None, :] == idx[:, None])
                                                      & (k[None, :] < k[:, None])),
                     axis=1, dtype=_dtype(idx))
    vpos = idx + before
    keep = jnp.ones((n_in + n_ins,), bool).at[vpos].set(False)
    from kiln.numpy._setops import nonzero
    apos = nonzero(keep, size=n_in)[0]
    out = jnp.zeros(tuple(out_shape), _dtype(a))
    lead = (slice(None),) * axis
    vals = jnp.broadcast_to(vals, tuple(out_shape[:axis]) + (n_ins,)
                            + tuple(out_shape[axis + 1:]))
    out = out.at[lead + (vpos,)].set(vals)
    return out.at[lead + (apos,)].set(a)


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """``arr`` without the entries ``obj`` (an int, slice, index array or mask) along
    ``axis``; index arrays must be concrete unless ``assume_unique_indices``."""
    jnp = _jnp()
    a = _util.ensure_arraylike("delete", arr)
    if axis is None:
        a = jnp.ravel(a)
        axis = 0
    axis = _util.canonicalize_axis(axis, get_aval(a).ndim)
    n = _shape(a)[axis]
    lead = (slice(None),) * axis
    if not isinstance(obj, (Tracer, slice)):
        try:
            i = operator.index(obj)
        except TypeError:
            pass
        else:
            i = _util.canonicalize_axis(i, n)
            return jnp.concatenate([a[lead + (slice(0, i),)], a[lead + (slice(i + 1, None),)]],
                                   axis=axis)
    if isinstance(obj, slice):
        obj = np.arange(n)[obj]
        assume_unique_indices = True
    _util.check_arraylike("delete", a, obj)
    if dtypes.issubdtype(_util.dtype_of(obj), np.integer) and assume_unique_indices:
        o = jnp.ravel(jnp.asarray(obj))
        o = jnp.clip(jnp.where(o < 0, o + n, o), 0, n)
        # Kept position j of the output: j plus the number of deleted indices <= it.
        m = get_aval(o).size
        o = jnp.sort(o) - jnp.arange(m, dtype=_dtype(o))
        j = jnp.arange(n - m, dtype=_dtype(o))
        j = j + jnp.sum(j[None, :] >= o[:, None], axis=0, dtype=_dtype(j))
        return a[lead + (j,)]
    obj = _util.concretize(obj)
    if isinstance(obj, Tracer):
        raise ConcretizationTypeError(obj, "'obj' array argument of jnp.delete(); pass "
                                           "assume_unique_indices=True to use traced indices.")
    o = np.asarray(obj._value if type(obj) is Array else obj)
    if dtypes.issubdtype(o.dtype, np.integer):
        mask = np.ones(n, bool)
        mask[o] = False
    elif o.dtype == bool:
        if o.shape != (n,):
            raise ValueError("np.delete(arr, obj): for boolean indices, obj must be "
                             "one-dimensional with length matching specified axis.")
        mask = ~o
    else:
        raise ValueError(f"np.delete(arr, obj): got obj.dtype={o.dtype}; must be integer or "
                         "bool.")
    return a[lead + (np.nonzero(mask)[0],)]


def trim_zeros(filt, trim="fb", axis=None):
    """``filt`` without its leading ('f') and/or trailing ('b') zeros (needs a concrete
    input: the result's shape depends on the values)."""
    filt = _util.ensure_arraylike("trim_zeros", filt)
    known = _util.concretize(filt)     # the slice bounds need values; the slice keeps filt
    if isinstance(known, Tracer):
        raise ConcretizationTypeError(filt, "Error arose in the `filt` argument of "
                                            "trim_zeros()")
    v = np.asarray(known._value)
    axes = set(_util.canonicalize_axes(axis, v.ndim))
    t = trim.lower()
    if not axes or ("f" not in t and "b" not in t):
        return filt
    idx = []
    for ax in range(v.ndim):
        if ax not in axes:
            idx.append(slice(None))
            continue
        nz = np.any(v != 0, axis=tuple(i for i in range(v.ndim) if i != ax))
        if not nz.any():
            idx.append(slice(0, 0))
            continue
        start = int(nz.argmax()) if "f" in t else None
        stop = v.shape[ax] - int(nz[::-1].argmax()) if "b" in t else None
        idx.append(slice(start, stop))
    return filt[tuple(idx)]


