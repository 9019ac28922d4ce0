"""Functional helpers: ``piecewise``, ``apply_along_axis``/``apply_over_axes``,
``fromfunction``, ``fill_diagonal``, as ``jax.numpy``.

Semantics and dtypes are JAX's (which sometimes differ from NumPy's). Static arguments
(``axis``, ``N``, ``count``, ...) must be concrete; everything else may be traced.
"""
from __future__ import annotations

import numpy as np

from kiln import lax
from kiln.array import Array
from kiln.core.trace import Tracer, get_aval
from kiln.numpy import _util

__all__ = ["piecewise", "apply_along_axis", "apply_over_axes", "fromfunction", "fill_diagonal"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _shape(x):
    return get_aval(x).shape


def _dtype(x):
    return get_aval(x).dtype



# ----------------------------------------------------------------------------------------------
# functional helpers


def piecewise(x, condlist, funclist, *args, **kw):
    """``funclist[i](x)`` (or the constant ``funclist[i]``) where ``condlist[i]`` holds,
    the last true condition winning; an extra function is the default."""
    jnp = _jnp()
    from kiln.numpy._vectorize import vectorize
    x = _util.ensure_arraylike("piecewise", x)
    nc, nf = len(condlist), len(funclist)
    if nf == nc + 1:
        funclist = list(funclist[-1:]) + list(funclist[:-1])
    elif nf == nc:
        funclist = [0] + list(funclist)
    else:
        raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are "
                         f"expected; got {nf}")
    conds = jnp.asarray(condlist, dtype=bool)
    if get_aval(conds).ndim == get_aval(x).ndim and nc == 1 and get_aval(x).ndim == 0:
        conds = conds.reshape((1,))
    conds = jnp.concatenate([jnp.zeros_like(conds[:1]), conds], axis=0)
    # Index of the last true condition (0: the default branch).
    which = jnp.argmax(jnp.cumsum(conds, axis=0), axis=0)
    dt = _dtype(x)

    def branch(f):
        if callable(f):
            return lambda v: jnp.asarray(f(v, *args, **kw)).astype(dt)
        return lambda v: jnp.asarray(f, dtype=dt)

    branches = [branch(f) for f in funclist]
    return vectorize(lambda i, v: lax.switch(i, branches, v))(which, x)


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``func1d`` applied to every 1-D slice of ``arr`` along ``axis`` (via ``vmap``)."""
    from kiln.transformations import vmap
    _util.check_arraylike("apply_along_axis", arr)
    nd = np.ndim(arr) if not isinstance(arr, (Array, Tracer)) else get_aval(arr).ndim
    axis = _util.canonicalize_axis(axis, nd)

    def func(a):
        return func1d(a, *args, **kwargs)

    for i in range(1, nd - axis):
        func = vmap(func, in_axes=i, out_axes=-1)
    for _ in range(axis):
        func = vmap(func, in_axes=0, out_axes=0)
    return func(arr)


def apply_over_axes(func, a, axes):
    """``func(a, axis)`` applied repeatedly over ``axes``, keeping the rank."""
    jnp = _jnp()
    a = _util.ensure_arraylike("apply_over_axes", a)
    for axis in axes:
        b = func(a, axis)
        if get_aval(b).ndim == get_aval(a).ndim:
            a = b
        elif get_aval(b).ndim == get_aval(a).ndim - 1:
            a = jnp.expand_dims(b, axis)
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function(i0, i1, ...)`` evaluated on the index grids of ``shape`` (via ``vmap``,
    so ``function`` sees scalar indices)."""
    from kiln.transformations import vmap
    jnp = _jnp()
    shape = _util.canonicalize_shape(shape, "shape argument of jnp.fromfunction()")
    f = function
    for i in range(len(shape)):
        in_axes = [0 if i == j else None for j in range(len(shape))]
        f = vmap(f, in_axes=tuple(in_axes[::-1]))
    return f(*(jnp.arange(s, dtype=dtype) for s in shape), **kwargs)


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """A copy of ``a`` with its main diagonal set to ``val`` (repeated as needed); only
    ``inplace=False`` is supported since arrays are immutable."""
    jnp = _jnp()
    if inplace:
        raise NotImplementedError("JAX arrays are immutable, must use inplace=False")
    if wrap:
        raise NotImplementedError("wrap=True is not implemented, must use wrap=False")
    a, val = _util.ensure_arraylike("fill_diagonal", a, val)
    nd = get_aval(a).ndim
    if nd < 2:
        raise ValueError("array must be at least 2-d")
    if nd > 2 and not all(d == _shape(a)[0] for d in _shape(a)[1:]):
        raise ValueError("All dimensions of input must be of equal length")
    n = min(_shape(a))
    idx = jnp.diag_indices(n, nd)
    if get_aval(val).ndim:
        v = jnp.ravel(val)
        m = get_aval(v).size
        if m < n:
            v = jnp.tile(v, -(-n // m))
        val = v[:n]
    return a.at[idx].set(val)


