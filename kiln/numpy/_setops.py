"""Data-dependent selections and set operations: ``nonzero``/``where(cond)``/``argwhere``/
``flatnonzero``/``extract``/``place``/``mask_indices`` and ``unique*``, ``union1d``,
``intersect1d``, ``setdiff1d``, ``setxor1d``.

Their output shapes depend on the values, so under ``jit``/``vmap`` they need a static
``size=`` (results are truncated or padded with ``fill_value``); without one a traced input
raises ``ConcretizationTypeError`` naming ``size=``. Padded selections are computed as JAX
does: positions of the true entries come from ``cumsum(bincount(cumsum(mask)))``, and
sorted unique values from ``lax.sort`` with the row index as a payload, so ties keep the
first occurrence.

This module must not sort by itself: every ordering goes through ``lax.sort``.
"""
from __future__ import annotations

import math
import operator
from typing import NamedTuple

import numpy as np

from kiln import dtypes, lax
from kiln.array import Array, make_array
from kiln.core.trace import Tracer, get_aval
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _eager, _util

__all__ = ["nonzero", "where", "flatnonzero", "argwhere", "extract", "place", "mask_indices",
           "unique", "unique_values", "unique_counts", "unique_inverse", "unique_all",
           "union1d", "intersect1d", "setdiff1d", "setxor1d"]

_SIZE_HINT = ("Pass a static `size=` argument (results are then padded with `fill_value` or "
              "truncated) to use {name} inside jit, vmap or other transformations.")


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _int_dtype():
    return dtypes.default_int_dtype()


def _require_concrete(x, name):
    """ConcretizationTypeError naming ``size=`` when ``x`` is traced (a tracer whose value is
    known, under grad, passes and its value is returned: as in JAX, the result is then
    computed from that value, outside differentiation)."""
    known = _util.concretize(x)
    if isinstance(known, Tracer):
        raise ConcretizationTypeError(
            x, f"The error arose in jnp.{name}(): its output shape depends on the values of "
               "its input. " + _SIZE_HINT.format(name=f"jnp.{name}()"))
    return known


def _static_size(size, name):
    size = _util.concretize(size)
    if isinstance(size, Tracer):
        raise ConcretizationTypeError(size, f"The size argument of jnp.{name} must be static.")
    size = operator.index(size)
    if size < 0:
        raise ValueError(f"jnp.{name}: size must be non-negative, got {size}")
    return size


# ----------------------------------------------------------------------------------------------
# nonzero and friends


def _positions(mask, size):
    """Flat positions of the first ``size`` true entries of a 1-D bool ``mask``; the
    positions past the count of true entries hold ``mask.size``."""
    jnp = _jnp()
    cs = jnp.cumsum(mask)
    n = get_aval(cs).shape[0]
    # counts[k] = #{i : cs[i] == k}; its running sum at k is #{i : cs[i] <= k}: the flat
    # position of the (k+1)-th true entry. (cs >= 0, so no index normalization is needed.)
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,))
    counts = lax.scatter_add(jnp.zeros((size,), get_aval(cs).dtype), lax.reshape(cs, (n, 1)),
                             jnp.ones((n,), get_aval(cs).dtype), dnums,
                             indices_are_sorted=True, mode=lax.GatherScatterMode.FILL_OR_DROP)
    return jnp.cumsum(counts)


def nonzero(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements, one array per axis.

    With a static ``size`` the result has exactly ``size`` entries per axis (padded with
    ``fill_value``, default 0), which works under ``jit``; without it ``a`` must be concrete.
    """
    a = _util.ensure_arraylike("nonzero", a)
    if isinstance(get_aval(a).dtype, dtypes.ExtendedDType):     # typed keys: JAX's error
        raise TypeError(f"not_equal does not accept dtypes {get_aval(a).dtype}, int32.")
    shape = get_aval(a).shape
    if len(shape) == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use "
                         "jnp.atleast_1d(scalar).nonzero() instead.")
    idt = _int_dtype()
    if size is None:
        _require_concrete(a, "nonzero")
        v = _util.concretize(a)._value
        return tuple(make_array(np.asarray(i, idt)) for i in np.nonzero(np.asarray(v)))
    size = _static_size(size, "nonzero")
    if fill_value is not None:
        fills = fill_value if isinstance(fill_value, tuple) else (fill_value,) * len(shape)
        if len(fills) != len(shape) or any(np.shape(f) != () for f in fills):
            raise ValueError(f"fill_value must be a scalar or a tuple of length {len(shape)}; "
                             f"got {fill_value}")
    jnp = _jnp()
    n = math.prod(shape)
    if n == 0 or size == 0:
        return tuple(jnp.zeros((size,), idt) for _ in shape)
    if type(a) is Array:
        # Concrete: NumPy finds the positions, padding as the traced path does.
        v = np.asarray(a._value)
        flat = np.flatnonzero(v)[:size]
        count = len(flat)
        flat = np.concatenate([flat, np.full(size - count, n)]).astype(idt)
        out = [make_array((flat // st) % d) for st, d in zip(_strides(shape), shape)]
        if fill_value is None:
            return tuple(out)
        pad = make_array(np.arange(size) >= count)
    else:
        mask = a if get_aval(a).dtype == np.bool_ else jnp.not_equal(a, 0)
        mask = lax.reshape(mask, (n,))
        flat = _positions(mask, size).astype(idt)
        # flat is in [0, n] (n for padding, which unravels to all zeros); all non-negative,
        # so truncating division and remainder are floor division and modulo.
        out = [lax.rem(lax.div(flat, _util.scalar_const(st, idt)) if st > 1 else flat,
                       _util.scalar_const(d, idt)) for st, d in zip(_strides(shape), shape)]
        if fill_value is None:
            return tuple(out)
        pad = jnp.arange(size) >= jnp.sum(mask)
    return tuple(jnp.where(pad, f, o) for f, o in zip(fills, out))


def _strides(shape):
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """``x`` where ``condition`` else ``y``; with one argument, ``nonzero(condition)``
    (``size=``/``fill_value=`` as in :func:`nonzero`)."""
    if type(condition) is Array and size is None and fill_value is None:
        out = _eager.where3(condition, x, y)
        if out is not None:
            return out
    if x is None and y is None:
        return nonzero(_util.ensure_arraylike("where", condition), size=size,
                       fill_value=fill_value)
    if x is None or y is None or size is not None or fill_value is not None:
        # As JAX: the operands are checked first (a missing x or y is a TypeError there).
        _util.check_arraylike("where", condition, x, y)
    if size is not None or fill_value is not None:
        raise ValueError("size and fill_value arguments cannot be used in three-term where "
                         "function.")
    from kiln.numpy._ufuncs import where as _where3
    return _where3(condition, x, y)


def flatnonzero(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements of the flattened array."""
    a = _util.ensure_arraylike("flatnonzero", a)
    return nonzero(lax.reshape(a, (get_aval(a).size,)), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements, one row per element (shape ``(count, a.ndim)``)."""
    a = _util.ensure_arraylike("argwhere", a)
    nd = get_aval(a).ndim
    res = nonzero(lax.reshape(a, (1,)) if nd == 0 else a, size=size, fill_value=fill_value)
    m = get_aval(res[0]).shape[0]
    if nd == 0:
        return _jnp().zeros((m, 0), get_aval(res[0]).dtype)
    return lax.concatenate([lax.reshape(r, (m, 1)) for r in res], 1)


def extract(condition, arr, *, size=None, fill_value=0):
    """The elements of ``ravel(arr)`` where ``ravel(condition)`` is true."""
    _util.check_arraylike("extract", condition, arr, fill_value)
    jnp = _jnp()
    cond = jnp.ravel(condition)
    arr = jnp.ravel(arr)
    if get_aval(cond).dtype != np.bool_:
        cond = jnp.not_equal(cond, 0)
    n = min(get_aval(cond).size, get_aval(arr).size)
    cond, arr = cond[:n], arr[:n]
    if size is None:
        _require_concrete(cond, "extract")
        return arr[cond]
    size = _static_size(size, "extract")
    if n == 0:
        return jnp.full((size,), fill_value, get_aval(arr).dtype)
    idx = nonzero(cond, size=size, fill_value=n)[0]
    fill = jnp.asarray(fill_value).astype(get_aval(arr).dtype)
    return jnp.where(idx < n, arr.at[idx].get(mode="fill", fill_value=0), fill)


def place(arr, mask, vals, *, inplace=True):
    """A copy of ``arr`` whose elements where ``mask`` is true take the successive values of
    ``vals`` (repeated as needed). ``inplace=True`` is an error: arrays are immutable."""
    jnp = _jnp()
    data, mask, vals = _util.ensure_arraylike("place", arr, mask, vals)
    if inplace:
        raise ValueError(
            "jax.numpy.place cannot modify arrays in-place, because JAX arrays are immutable. "
            "Pass inplace=False to instead return an updated array.")
    shape = get_aval(data).shape
    n = get_aval(data).size
    if n != get_aval(mask).size:
        raise ValueError("place: arr and mask must be the same size")
    vals = jnp.ravel(vals)
    if get_aval(vals).size == 0:
        raise ValueError("Cannot place values from an empty array")
    if n == 0:
        return data
    idx = nonzero(jnp.ravel(mask), size=n, fill_value=n)[0]
    m = get_aval(vals).size
    if m < n:
        vals = jnp.tile(vals, -(-n // m))
    vals = vals[:n].astype(get_aval(data).dtype)
    return jnp.ravel(data).at[idx].set(vals, mode="drop").reshape(shape)


def mask_indices(n, mask_func, k=0, *, size=None):
    """Indices ``(i, j)`` where ``mask_func(ones((n, n)), k)`` is nonzero."""
    n = _util.core_int(n, "The n argument of jnp.mask_indices must be static.")
    return nonzero(mask_func(_jnp().ones((n, n)), k), size=size)


# ----------------------------------------------------------------------------------------------
# unique


def _sorted_rows(aux, equal_nan):
    """Sort the rows of ``aux`` (shape (n, ...)) lexicographically; returns the sorted rows,
    the permutation and the mask of rows that differ from their predecessor."""
    jnp = _jnp()
    n = get_aval(aux).shape[0]
    idt = _int_dtype()
    if dtypes.issubdtype(get_aval(aux).dtype, np.complexfloating):
        aux = jnp.where(jnp.isnan(aux), np.nan, aux)   # one NaN, whatever its parts
    rest = math.prod(get_aval(aux).shape[1:])
    iota = lax.iota(idt, n)
    if rest == 0:
        perm = iota
    elif get_aval(aux).ndim == 1:
        aux, perm = lax.sort((aux, iota), dimension=0, num_keys=1)
    else:
        cols = jnp.reshape(aux, (n, rest))
        keys = [cols[:, j] for j in range(rest)]
        perm = lax.sort((*keys, iota), dimension=0, num_keys=rest)[-1]
        aux = aux[perm]
    if n == 0:
        return aux, perm, jnp.zeros((0,), bool)
    a, b = aux[1:], aux[:-1]
    neq = jnp.not_equal(a, b)
    if equal_nan and dtypes.issubdtype(get_aval(aux).dtype, np.inexact):
        neq = neq & ~(jnp.isnan(a) & jnp.isnan(b))
    if get_aval(neq).ndim > 1:
        neq = jnp.any(neq, axis=tuple(range(1, get_aval(neq).ndim)))
    mask = jnp.concatenate([jnp.ones((1,), bool), neq])
    return aux, perm, mask


def _unique(ar, axis, return_index=False, return_inverse=False, return_counts=False,
            equal_nan=True, size=None, fill_value=None):
    jnp = _jnp()
    shape = get_aval(ar).shape
    n = shape[axis]
    if n == 0 and size and fill_value is None:
        raise ValueError("jnp.unique: for zero-sized input with nonzero size argument, "
                         "fill_value must be specified")
    aux, perm, mask = _sorted_rows(jnp.moveaxis(ar, axis, 0), equal_nan)
    idt = _int_dtype()
    if size is None:
        ind = nonzero(mask)[0] if n else jnp.zeros((0,), idt)
    else:
        ind = nonzero(mask, size=size)[0] if n else jnp.zeros((size,), idt)
    result = aux[ind] if n else jnp.zeros((get_aval(ind).shape[0],) + shape[:axis]
                                          + shape[axis + 1:], get_aval(ar).dtype)
    if size is not None and fill_value is not None:
        fill = jnp.asarray(fill_value).astype(get_aval(result).dtype)
        valid = jnp.arange(size) < jnp.sum(mask)
        valid = jnp.expand_dims(valid, tuple(range(1, get_aval(result).ndim)))
        result = jnp.where(valid, result, fill)
    result = jnp.moveaxis(result, 0, axis)
    ret = [result]
    if return_index:
        ret.append(perm[ind] if n else jnp.zeros(get_aval(ind).shape, idt))
    if return_inverse:
        if n:
            imask = (jnp.cumsum(mask) - 1).astype(idt)
            ret.append(jnp.zeros((n,), idt).at[perm].set(imask))
        else:
            ret.append(jnp.zeros((0,), idt))
    if return_counts:
        if n == 0:
            ret.append(jnp.zeros((size or 0,), idt))
        elif size is None:
            idx = jnp.concatenate([nonzero(mask)[0], jnp.full((1,), n, idt)])
            ret.append(jnp.diff(idx))
        else:
            idx = nonzero(mask, size=size + 1)[0]
            tail = idx[1:]
            idx = jnp.concatenate([idx[:1], jnp.where(tail != 0, tail, n)])
            ret.append(jnp.diff(idx).astype(idt))
    return ret[0] if len(ret) == 1 else tuple(ret)


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, size=None, fill_value=None, sorted=True):  # noqa: A002
    """The sorted unique elements (or slices along ``axis``), optionally with the index of
    each one's first occurrence, the inverse mapping and the counts.

    ``size=`` fixes the number of results (padded with ``fill_value``, by default the
    smallest value) so that it works under ``jit``."""
    del sorted
    arr = _util.ensure_arraylike("unique", ar)
    if size is None:
        arr = _require_concrete(arr, "unique")
    else:
        size = _static_size(size, "unique")
    shape = get_aval(arr).shape
    if axis is None:
        arr = lax.reshape(arr, (math.prod(shape),))
        ax = 0
    else:
        ax = _util.canonicalize_axis(axis, len(shape))
    out = _unique(arr, ax, return_index, return_inverse, return_counts, equal_nan=equal_nan,
                  size=size, fill_value=fill_value)
    if return_inverse and axis is None:
        k = 2 if return_index else 1
        out = (*out[:k], lax.reshape(out[k], shape), *out[k + 1:])
    return out


class UniqueAllResult(NamedTuple):
    values: object
    indices: object
    inverse_indices: object
    counts: object


class UniqueCountsResult(NamedTuple):
    values: object
    counts: object


class UniqueInverseResult(NamedTuple):
    values: object
    inverse_indices: object


def unique_all(x, /, *, size=None, fill_value=None):
    """Array-API ``unique_all``: values, first indices, inverse indices and counts."""
    x = _util.ensure_arraylike("unique_all", x)
    v, i, inv, c = unique(x, return_index=True, return_inverse=True, return_counts=True,
                          equal_nan=False, size=size, fill_value=fill_value)
    return UniqueAllResult(v, i, inv, c)


def unique_counts(x, /, *, size=None, fill_value=None):
    """Array-API ``unique_counts``: values and counts."""
    x = _util.ensure_arraylike("unique_counts", x)
    v, c = unique(x, return_counts=True, equal_nan=False, size=size, fill_value=fill_value)
    return UniqueCountsResult(v, c)


def unique_inverse(x, /, *, size=None, fill_value=None):
    """Array-API ``unique_inverse``: values and inverse indices (shaped like ``x``)."""
    x = _util.ensure_arraylike("unique_inverse", x)
    v, inv = unique(x, return_inverse=True, equal_nan=False, size=size, fill_value=fill_value)
    return UniqueInverseResult(v, inv)


def unique_values(x, /, *, size=None, fill_value=None):
    """Array-API ``unique_values``."""
    x = _util.ensure_arraylike("unique_values", x)
    return unique(x, equal_nan=False, size=size, fill_value=fill_value)


# ----------------------------------------------------------------------------------------------
# set operations on flattened arrays


def _masked_unique(values, valid):
    """Sort ``values`` with the entries where ``valid`` is false last; returns the sorted
    values, their original positions and the mask of the first occurrence of each valid
    value (ties keep the earliest position)."""
    jnp = _jnp()
    n = get_aval(values).shape[0]
    key = lax.convert_element_type(jnp.logical_not(valid), np.int32)
    k, v, pos = lax.sort((key, values, lax.iota(_int_dtype(), n)), dimension=0, num_keys=2)
    ok = jnp.equal(k, 0)
    new = jnp.concatenate([jnp.ones((1,), bool), jnp.not_equal(v[1:], v[:-1])])
    return v, pos, ok & new


def _select(v, first, size, fill_value, default_fill_first):
    """The entries of ``v`` where ``first`` holds: all of them (concrete ``first``) or the
    first ``size`` padded with ``fill_value`` (default: the first result, or 0)."""
    jnp = _jnp()
    if size is None:
        return v[first], None
    n = get_aval(v).shape[0]
    idx = nonzero(first, size=size, fill_value=n)[0]
    count = jnp.sum(first)
    vals = v.at[idx].get(mode="fill", fill_value=0)
    valid = jnp.arange(size) < count
    if fill_value is None:
        fill = vals[0] if (default_fill_first and size) else jnp.zeros((), get_aval(v).dtype)
    else:
        fill = jnp.asarray(fill_value).astype(get_aval(v).dtype)
    return jnp.where(valid, vals, fill), idx


def _flat_pair(name, ar1, ar2, size):
    jnp = _jnp()
    ar1, ar2 = _util.ensure_arraylike(name, ar1, ar2)
    if size is None:
        ar1 = _require_concrete(ar1, name)
        ar2 = _require_concrete(ar2, name)
    else:
        size = _static_size(size, name)
    a1, a2 = _util.promote_dtypes(jnp.ravel(ar1), jnp.ravel(ar2))
    return a1, a2, size


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """The sorted unique values found in either array."""
    jnp = _jnp()
    a1, a2, size = _flat_pair("union1d", ar1, ar2, size)
    return unique(jnp.concatenate([a1, a2]), size=size, fill_value=fill_value)


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted unique values of ``ar1`` that are not in ``ar2``."""
    jnp = _jnp()
    ar1, ar2 = _util.ensure_arraylike("setdiff1d", ar1, ar2)
    if size is None:
        ar1 = _require_concrete(ar1, "setdiff1d")
    else:
        size = _static_size(size, "setdiff1d")
    a1, a2 = jnp.ravel(ar1), jnp.ravel(ar2)
    dt = get_aval(a1).dtype
    fill = jnp.asarray(0 if fill_value is None else fill_value).astype(dt)
    if get_aval(a1).size == 0:
        return jnp.full((size or 0,), fill, dt)
    keep = jnp.isin(a1, a2, invert=True)
    if size is None and _util.is_traced(keep):
        # ar2 is traced: the result's length depends on it.
        _require_concrete(keep, "setdiff1d")
    v, _, first = _masked_unique(a1, keep)
    out, _ = _select(v, first, size, fill, False)
    return out


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted unique values found in exactly one of the arrays."""
    jnp = _jnp()
    a1, a2, size = _flat_pair("setxor1d", ar1, ar2, size)
    both = jnp.concatenate([a1, a2])
    if get_aval(both).size == 0:
        return jnp.zeros((size or 0,), get_aval(both).dtype)
    keep = jnp.logical_xor(jnp.isin(both, a1), jnp.isin(both, a2))
    v, _, first = _masked_unique(both, keep)
    return _select(v, first, size, fill_value, True)[0]


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None,
                fill_value=None):
    """The sorted unique values found in both arrays; with ``return_indices``, also the
    index of each one's first occurrence in ``ar1`` and in ``ar2``."""
    jnp = _jnp()
    a1, a2, size = _flat_pair("intersect1d", ar1, ar2, size)
    n1, n2 = get_aval(a1).size, get_aval(a2).size
    idt = _int_dtype()
    if n1 == 0 or n2 == 0:
        empty = jnp.zeros((size or 0,), get_aval(a1).dtype)
        if fill_value is not None:
            empty = jnp.full((size or 0,), fill_value, get_aval(a1).dtype)
        if return_indices:
            return (empty, jnp.full((size or 0,), n1, idt), jnp.full((size or 0,), n2, idt))
        return empty
    v, pos, first = _masked_unique(a1, jnp.isin(a1, a2))
    vals, idx = _select(v, first, size, fill_value, True)
    if not return_indices:
        return vals
    if size is None:
        i1 = pos[first]
    else:
        valid = jnp.arange(size) < jnp.sum(first)
        i1 = jnp.where(valid, pos.at[idx].get(mode="fill", fill_value=0), n1)
    # First occurrence in ar2 of each result value.
    i2 = jnp.argmax(jnp.equal(vals[:, None], a2[None, :]), axis=1).astype(idt)
    if size is not None:
        i2 = jnp.where(valid, i2, n2)
    return vals, i1.astype(idt), i2
