"""``kiln.scipy.interpolate`` (``jax.scipy.interpolate``): ``RegularGridInterpolator``.

Linear or nearest interpolation on a rectangular grid whose axes are strictly increasing
(as JAX, a decreasing axis is not supported). For each query point and axis: the cell
``i`` is ``searchsorted(grid, x) - 1`` kept within ``[0, len(grid) - 2]`` (so points
outside extrapolate from the edge cell), ``t = (x - g[i]) / (g[i + 1] - g[i])``; linear
sums, over the cell's ``2**N`` corners in row-major order, ``values[corner] * weight``
(the weight a product of ``1 - t`` or ``t`` per axis); nearest takes ``i`` where ``t <=
0.5``, else ``i + 1``. Points outside the grid on any axis give ``fill_value`` (NaN by
default; ``None`` extrapolates). ``bounds_error=True`` is JAX's ``NotImplementedError``.
The interpolator is a pytree (grid, values and fill value are its leaves), so it can be
passed through ``jit``, and built from ``kiln.numpy`` operations (``grad``, ``vmap``).
"""
from __future__ import annotations

import itertools

import numpy as np

from kiln import dtypes
from kiln import numpy as jnp
from kiln.numpy._util import check_arraylike, promote_dtypes_inexact
from kiln.tree_util import register_pytree_node


def _query_points(xi, ndim):
    """Query points as a ``(..., ndim)`` array: a tuple of coordinate arrays is broadcast
    and stacked on a last axis; a 1-D array is ``(-1, ndim)`` points."""
    if isinstance(xi, tuple) and len(xi) == 1:
        xi = xi[0]
    if isinstance(xi, tuple):
        parts = jnp.broadcast_arrays(*xi)
        return jnp.stack([jnp.asarray(p, dtype=float) for p in parts], axis=-1)
    check_arraylike("_ndim_coords_from_arrays", xi)
    xi = jnp.asarray(xi)
    if xi.ndim == 1:
        xi = xi.reshape(-1, ndim)
    return xi


class RegularGridInterpolator:
    """Interpolation on a regular rectangular grid (``scipy.interpolate``'s).

    Args:
      points: N arrays, the strictly increasing grid coordinates of each axis.
      values: the values on the grid: N (or more, trailing) dimensions.
      method: ``"linear"`` or ``"nearest"``.
      bounds_error: must be False (JAX's NotImplementedError under jit otherwise).
      fill_value: the value for points outside the grid (NaN); None extrapolates.
    """

    def __init__(self, points, values, method="linear", bounds_error=False,
                 fill_value=np.nan):
        if method not in ("linear", "nearest"):
            raise ValueError(f"method {method!r} is not defined")
        self.method = method
        self.bounds_error = bounds_error
        if bounds_error:
            raise NotImplementedError("`bounds_error` takes no effect under JIT")
        check_arraylike("RegularGridInterpolator", values)
        if len(points) > np.ndim(values):
            raise ValueError(f"there are {len(points)} point arrays, but values has "
                             f"{np.ndim(values)} dimensions")
        (values,) = promote_dtypes_inexact(values)
        if fill_value is not None:
            check_arraylike("RegularGridInterpolator", fill_value)
            fill_value = jnp.asarray(fill_value)
            if not dtypes.can_cast(fill_value.dtype, values.dtype, casting="same_kind"):
                raise ValueError("fill_value must be either 'None' or of a type compatible "
                                 "with values")
        self.fill_value = fill_value
        check_arraylike("RegularGridInterpolator", *points)
        self.grid = tuple(jnp.asarray(p) for p in points)
        self.values = values

    def __call__(self, xi, method=None):
        method = self.method if method is None else method
        if method not in ("linear", "nearest"):
            raise ValueError(f"method {method!r} is not defined")
        n = len(self.grid)
        xi = _query_points(xi, n)
        if xi.shape[-1] != n:
            raise ValueError(f"the requested sample points xi have dimension {xi.shape[1]}, "
                             f"but this RegularGridInterpolator has dimension {n}")
        lead = xi.shape[:-1]
        cells, ts, outside = self._locate(xi.reshape(-1, n).T)
        out = (self._linear(cells, ts) if method == "linear" else
               self.values[tuple(jnp.where(t <= 0.5, i, i + 1) for i, t in zip(cells, ts))])
        if self.fill_value is not None:
            mask = outside.reshape(out.shape[:1] + (1,) * (out.ndim - 1))
            out = jnp.where(mask, self.fill_value, out)
        return out.reshape(lead + self.values.shape[n:])

    def _locate(self, xs):
        cells, ts = [], []
        outside = jnp.zeros((xs.shape[1],), dtype=bool)
        for x, g in zip(xs, self.grid):
            i = jnp.clip(jnp.searchsorted(g, x) - 1, 0, g.size - 2)
            cells.append(i)
            ts.append((x - g[i]) / (g[i + 1] - g[i]))
            outside = outside | (x < g[0]) | (x > g[-1])
        return cells, ts, outside

    def _linear(self, cells, ts):
        trail = (slice(None),) + (None,) * (self.values.ndim - len(cells))
        total = jnp.asarray(0.0)
        for corner in itertools.product(*[(i, i + 1) for i in cells]):
            w = jnp.asarray(1.0)
            for c, i, t in zip(corner, cells, ts):
                w = w * jnp.where(c == i, 1 - t, t)
            total = total + self.values[corner] * w[trail]
        return total


register_pytree_node(
    RegularGridInterpolator,
    lambda r: ((r.grid, r.values, r.fill_value), (r.method, r.bounds_error)),
    lambda aux, ch: RegularGridInterpolator(ch[0], ch[1], aux[0], aux[1], ch[2]))


__all__ = ["RegularGridInterpolator"]
