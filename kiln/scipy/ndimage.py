"""``kiln.scipy.ndimage`` (``jax.scipy.ndimage``): ``map_coordinates``.

Interpolation of order 0 (nearest: coordinates rounded half away from zero) or 1 (linear),
with ``mode`` ``'constant'`` (``cval`` outside the array), ``'nearest'``, ``'wrap'``,
``'mirror'`` or ``'reflect'``, as JAX's. The result is the sum, over the ``2**ndim`` (order
1) corner combinations in row-major order, of the product of the per-axis weights times the
input value there (``cval`` where any index is outside, for ``'constant'``), computed in
that order under ``jit`` (JAX's operation order, so JAX's values); integer inputs round the
result half away from zero. Built from ``kiln.numpy`` operations: ``jit``, ``grad`` (in the
input and the coordinates) and ``vmap`` work.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

import kiln
from kiln import dtypes, lax
from kiln import numpy as jnp


def _fold_mirror(i, size: int):
    """``i`` reflected about both ends with the edge elements not repeated (``mirror``)."""
    if size == 1:
        return jnp.zeros_like(i)
    period = 2 * (size - 1)
    return jnp.abs((i + (size - 1)) % period - (size - 1))


def _fold_reflect(i, size: int):
    """``i`` reflected about both ends with the edge elements repeated (``reflect``): the
    mirror fold of ``2 i + 1`` over ``2 size + 1`` points, halved."""
    return jnp.floor_divide(_fold_mirror(2 * i + 1, 2 * size + 1) - 1, 2)


_FOLDS = {
    "constant": lambda i, size: i,
    "nearest": lambda i, size: jnp.clip(i, 0, size - 1),
    "wrap": lambda i, size: i % size,
    "mirror": _fold_mirror,
    "reflect": _fold_reflect,
}


def _round_away(a):
    return a if dtypes.issubdtype(a.dtype, np.integer) else lax.round(a)


def _nodes(c, order: int) -> list:
    """``(index, weight)`` of the points of one axis a coordinate interpolates between."""
    if order == 0:
        return [(_round_away(c).astype(np.int32), c.dtype.type(1))]
    lo = jnp.floor(c)
    w_hi = c - lo
    i = lo.astype(np.int32)
    return [(i, 1 - w_hi), (i + 1, w_hi)]


def _product(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out * x
    return out


@kiln.jit(static_argnums=(2, 3, 4))
def _map_coordinates(x, coordinates, order, mode, cval):
    x = jnp.asarray(x)
    cs = [jnp.asarray(c) for c in coordinates]
    cval = jnp.asarray(cval, x.dtype)
    if len(cs) != x.ndim:
        raise ValueError("coordinates must be a sequence of length input.ndim, but "
                         f"{len(cs)} != {x.ndim}")
    fold = _FOLDS.get(mode)
    if fold is None:
        raise NotImplementedError(
            f"jax.scipy.ndimage.map_coordinates does not yet support mode {mode}. "
            f"Currently supported modes are {set(_FOLDS)}.")
    if order not in (0, 1):
        raise NotImplementedError(
            "jax.scipy.ndimage.map_coordinates currently requires order<=1")
    per_axis = []
    for c, size in zip(cs, x.shape):
        per_axis.append([(fold(i, size), (0 <= i) & (i < size) if mode == "constant" else None,
                          w) for i, w in _nodes(c, order)])
    terms = []
    for corner in itertools.product(*per_axis):
        idx = tuple(i for i, _, _ in corner)
        ok = [v for _, v, _ in corner if v is not None]
        value = x[idx]
        if ok:
            inside = ok[0]
            for v in ok[1:]:
                inside = inside & v
            value = jnp.where(inside, value, cval)
        terms.append(_product([w for _, _, w in corner]) * value)
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    if dtypes.issubdtype(x.dtype, np.integer):
        out = _round_away(out)
    return out.astype(x.dtype)


def map_coordinates(input, coordinates: Sequence, order: int, mode: str = "constant",  # noqa: A002
                    cval=0.0):
    """Map the input array to new coordinates by interpolation (``scipy.ndimage``'s).

    Args:
      input: N-dimensional array to interpolate.
      coordinates: a sequence of N arrays (of one shape), the coordinates along each axis.
      order: 0 (nearest neighbour) or 1 (linear).
      mode: how points outside the array are found: ``'constant'`` (``cval``),
        ``'nearest'``, ``'wrap'``, ``'mirror'`` or ``'reflect'``.
      cval: the value outside the array for ``mode='constant'``.

    Returns:
      The interpolated values, of the coordinates' shape and the input's dtype.
    """
    return _map_coordinates(input, list(coordinates), order, mode, cval)


__all__ = ["map_coordinates"]
