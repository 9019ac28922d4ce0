"""Index-trick objects: ``mgrid``/``ogrid`` (dense/open grids from slices) and ``r_``/``c_``
(concatenation along rows/columns from slices, arrays and directives).

A slice ``start:stop:step`` means ``arange(start, stop, step)``; an imaginary step ``5j``
means ``linspace(start, stop, 5)``. Slice bounds must be concrete.
"""
from __future__ import annotations

import numpy as np

from kiln.core.trace import Tracer
from kiln.errors import ConcretizationTypeError
from kiln.numpy import _util

__all__ = ["mgrid", "ogrid", "r_", "c_"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _concrete(v, what):
    from kiln.core.trace import concretize
    v = concretize(v)
    if isinstance(v, Tracer):
        raise ConcretizationTypeError(v, f"The {what} must be concrete.")
    return v


def _grid_1d(s, op):
    jnp = _jnp()
    start = _concrete(s.start, f"slice start of jnp.{op}") or 0
    stop = _concrete(s.stop, f"slice stop of jnp.{op}")
    step = _concrete(s.step, f"slice step of jnp.{op}") or 1
    if np.iscomplex(step):
        return jnp.linspace(start, stop, int(abs(step)))
    return jnp.arange(start, stop, step)


def _grids(key, op):
    return _util.promote_dtypes(*(_grid_1d(k, op) for k in key))


class _Mgrid:
    """``jnp.mgrid[0:3, 0:4]``: a dense (stacked, 'ij'-indexed) mesh grid."""

    def __getitem__(self, key):
        jnp = _jnp()
        if isinstance(key, slice):
            return _grid_1d(key, "mgrid")
        grids = _grids(key, "mgrid")
        if not grids:
            return jnp.arange(0)
        return jnp.stack(jnp.meshgrid(*grids, indexing="ij", sparse=False), 0)


class _Ogrid:
    """``jnp.ogrid[0:3, 0:4]``: an open mesh grid (a list of broadcastable arrays)."""

    def __getitem__(self, key):
        jnp = _jnp()
        if isinstance(key, slice):
            return _grid_1d(key, "ogrid")
        return jnp.meshgrid(*_grids(key, "ogrid"), indexing="ij", sparse=True)


class _AxisConcat:
    """Concatenation of the items of the index along ``axis`` after promoting each to
    ``ndmin`` dimensions; a leading string directive ('r', 'c' or 'axis,ndmin,trans1d')
    changes the parameters."""

    axis = 0
    ndmin = 1
    trans1d = -1
    op_name = "r_"

    def __getitem__(self, key):
        jnp = _jnp()
        items = key if isinstance(key, tuple) else (key,)
        params = [self.axis, self.ndmin, self.trans1d, -1]
        if items and isinstance(items[0], str):
            directive, items = items[0], items[1:]
            if directive == "r":
                params[-1] = 0
            elif directive == "c":
                params[-1] = 1
            else:
                vec = directive.split(",")
                vec = vec + params[len(vec):] if len(vec) < 4 else vec[:3] + [params[-1]]
                try:
                    params = [int(v) for v in vec]
                except ValueError as err:
                    raise ValueError(f"could not understand directive {directive!r}") from err
        axis, ndmin, trans1d, matrix = params
        out = []
        for item in items:
            if isinstance(item, slice):
                obj, item_nd = _grid_1d(item, self.op_name), 0
            elif isinstance(item, str):
                raise ValueError("string directive must be placed at the beginning")
            else:
                obj = jnp.array(item, copy=False)
                item_nd = obj.ndim
            obj = jnp.array(obj, copy=False, ndmin=ndmin)
            if trans1d != -1 and ndmin - item_nd > 0:
                order = tuple(range(ndmin))
                k = ndmin - abs(ndmin + trans1d + 1) % ndmin
                obj = jnp.transpose(obj, order[k:] + order[:k])
            out.append(obj)
        res = jnp.concatenate(out, axis=axis)
        if matrix != -1 and res.ndim == 1:
            res = jnp.expand_dims(res, matrix)
        return res

    def __len__(self):
        return 0


class RClass(_AxisConcat):
    """``jnp.r_[...]``: concatenation along the first axis."""

    axis, ndmin, trans1d, op_name = 0, 1, -1, "r_"


class CClass(_AxisConcat):
    """``jnp.c_[...]``: concatenation along the last axis, 1-D items as columns."""

    axis, ndmin, trans1d, op_name = -1, 2, 0, "c_"


mgrid = _Mgrid()
ogrid = _Ogrid()
r_ = RClass()
c_ = CClass()
