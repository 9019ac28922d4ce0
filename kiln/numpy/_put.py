"""``put`` and ``put_along_axis``: NumPy's in-place writers, as JAX has them.

Arrays are immutable, so both return an updated copy and insist on ``inplace=False`` (the
default ``True`` is an error that names the fix, as in JAX). Both lower to ``x.at[idx].set``
and so to the ``scatter`` primitive: they work under ``jit``, ``grad`` and ``vmap``.
"""
from __future__ import annotations

from kiln.core.trace import get_aval
from kiln.numpy import _util


def _jnp():
    import kiln.numpy as jnp
    return jnp


def put(a, ind, v, mode: str | None = None, *, inplace: bool = True):
    """Put elements into an array at given indices of its flattened view.

    JAX implementation of :func:`numpy.put`: returns a modified copy, so ``inplace=False``
    must be passed.

    Args:
      a: array into which values are placed.
      ind: indices into the flattened ``a``.
      v: values to put; repeated (tiled) to the number of indices.
      mode: ``None`` (out-of-bound indices are dropped), ``"clip"`` (clamped to the last
        index) or ``"wrap"`` (taken modulo ``a.size``). ``"raise"`` is not supported.
      inplace: must be ``False``.

    Returns:
      A copy of ``a`` with the given entries replaced.
    """
    if inplace:
        raise ValueError(
            "jax.numpy.put cannot modify arrays in-place, because JAX arrays are immutable. "
            "Pass inplace=False to instead return an updated array.")
    jnp = _jnp()
    arr, ind_arr, v_arr = _util.ensure_arraylike("put", a, ind, v)
    ind_arr = jnp.ravel(ind_arr)
    v_arr = jnp.ravel(v_arr)
    size = get_aval(arr).size
    n_ind, n_v = get_aval(ind_arr).size, get_aval(v_arr).size
    if not size or not n_ind or not n_v:
        return arr
    if n_v != n_ind:   # NumPy repeats the values cyclically up to the number of indices
        v_arr = jnp.tile(v_arr, -(-n_ind // n_v))[:n_ind]
    if mode is None:
        scatter_mode = "drop"
    elif mode == "clip":
        ind_arr = jnp.clip(ind_arr, 0, size - 1)
        scatter_mode = "promise_in_bounds"
    elif mode == "wrap":
        ind_arr = ind_arr % size
        scatter_mode = "promise_in_bounds"
    elif mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.put is not supported.")
    else:
        raise ValueError(f"mode should be one of 'wrap' or 'clip'; got {mode=}")
    idx = jnp.unravel_index(ind_arr, get_aval(arr).shape)
    return arr.at[idx].set(v_arr, mode=scatter_mode)


def put_along_axis(arr, indices, values, axis: int | None, inplace: bool = True, *,
                   mode: str | None = None):
    """Put values into ``arr`` at ``indices`` along ``axis`` (the inverse of
    :func:`take_along_axis`).

    JAX implementation of :func:`numpy.put_along_axis`: returns a modified copy, so
    ``inplace=False`` must be passed.

    Args:
      arr: the array to update.
      indices: integer array with the same number of dimensions as ``arr`` (when ``axis``
        is None, ``arr`` is flattened first).
      values: broadcast to ``indices.shape``.
      axis: the axis along which to put, or None for the flattened array.
      inplace: must be ``False``.
      mode: out-of-bound handling, as for ``x.at[...].set`` (default: drop).

    Returns:
      A copy of ``arr`` with the given entries replaced.
    """
    if inplace:
        raise ValueError(
            "jax.numpy.put_along_axis cannot modify arrays in-place, because JAX arrays "
            "are immutable. Pass inplace=False to instead return an updated array.")
    jnp = _jnp()
    arr, indices, values = _util.ensure_arraylike("put_along_axis", arr, indices, values)
    original_shape = get_aval(arr).shape
    flat = axis is None
    if flat:
        arr = jnp.ravel(arr)
        axis = 0
    nd = get_aval(arr).ndim
    ishape = get_aval(indices).shape
    if nd != len(ishape):
        raise ValueError(
            "put_along_axis arguments 'arr' and 'indices' must have same ndim. Got "
            f"arr.ndim={nd} and indices.ndim={len(ishape)}.")
    try:
        values = jnp.broadcast_to(values, ishape)
    except ValueError:
        raise ValueError(
            "put_along_axis argument 'values' must be broadcastable to 'indices'. Got "
            f"values.shape={get_aval(values).shape} and indices.shape={ishape}.") from None
    axis = _util.canonicalize_axis(axis, nd)
    # Index arrays for every axis: ``indices`` on ``axis``, broadcasting aranges elsewhere
    # (length-1 index axes broadcast against ``arr``, as in NumPy's _make_along_axis_idx).
    idx = []
    for d in range(nd):
        if d == axis:
            idx.append(indices)
        else:
            shape = [1] * nd
            shape[d] = get_aval(arr).shape[d]
            idx.append(jnp.arange(shape[d]).reshape(shape))
    out = arr.at[tuple(idx)].set(values, mode=mode)
    return out.reshape(original_shape) if flat else out


__all__ = ["put", "put_along_axis"]
