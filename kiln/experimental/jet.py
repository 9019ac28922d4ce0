"""``kiln.experimental.jet``: Taylor-mode derivatives of a function along a curve
(``jax.experimental.jet``).

``jet(f, primals, series)`` returns the Taylor coefficients of ``f(x(t))`` at ``t = 0``
for the curve ``x(t) = x + x_1 t + x_2 t^2/2! + ...`` given by ``primals`` and ``series``.

How kiln computes them: ``g(t) = f(x(t))`` is a function of one real variable, and
``K`` nested forward-mode derivatives of it at ``t = 0`` give ``g, g', ..., g^(K)`` at
once (Faà di Bruno's formula carried out by the chain rule itself). This works for every
primitive kiln can differentiate in forward mode, under ``jit`` and ``vmap`` too; the work
grows as ``2^K`` evaluations of ``f`` (JAX propagates truncated polynomials through
per-primitive rules instead, ``O(K^2)``), which is what low orders (``K`` up to ~6) cost
either way in practice. Functions with a ``custom_jvp`` rule are expanded with that rule
(JAX's ``jet`` looks through such rules to the primal function).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

__all__ = ["fact", "jet", "jet2", "zero_series", "zero_term", "ZeroSeries", "ZeroTerm"]


class ZeroTerm:
    """A term of a series known to be zero (``zero_term``)."""

    def __repr__(self):
        return "zero_term"


class ZeroSeries:
    """A whole series known to be zero (``zero_series``): the argument is held fixed."""

    def __repr__(self):
        return "zero_series"


zero_term = ZeroTerm()
zero_series = ZeroSeries()


def _register():
    from kiln.tree_util import register_pytree_node
    register_pytree_node(ZeroTerm, lambda z: ((), None), lambda _, xs: zero_term)
    register_pytree_node(ZeroSeries, lambda z: ((), None), lambda _, xs: zero_series)


_register()


def fact(n):
    """``n!`` as a float (``exp(lgamma(n + 1))``, as JAX computes it)."""
    from kiln import lax
    return lax.exp(lax.lgamma(n + 1.0))


def _is_leaf(x) -> bool:
    from kiln.tree_util import tree_structure, treedef_is_leaf
    return treedef_is_leaf(tree_structure(x))


def _all_derivatives(g: Callable, order: int, t0):
    """``[g(t0), g'(t0), ..., g^(order)(t0)]`` (each a list of arrays) for ``g`` of one
    scalar variable returning a flat list of arrays."""
    from kiln.numpy import ones_like
    from kiln.transformations import jvp

    def nest(h):
        # blocks of h, then the derivative of each block: 2^(L+1) blocks from 2^L
        def hd(t):
            outs, touts = jvp(h, (t,), (ones_like(t),))
            return list(outs) + list(touts)
        return hd

    h = g
    for _ in range(order):
        h = nest(h)
    flat = h(t0)
    n_leaves = len(flat) >> order
    # Block b (binary digits: which nesting levels differentiated it) holds the
    # derivative of order popcount(b); the block 2^m - 1 is the m-th derivative.
    return [flat[((1 << m) - 1) * n_leaves:((1 << m) * n_leaves)] for m in range(order + 1)]


def _weak(x) -> bool:
    from kiln.core.trace import get_aval
    return bool(get_aval(x).weak_type)


def jet(fun: Callable, primals: Any, series: Any, factorial_scaled: bool = True,
        **_: Any) -> tuple[Any, Any]:
    """Taylor-mode higher-order differentiation of ``fun`` along a curve.

    Args:
      fun: the function; its arguments are arrays or scalars (one per entry of
        ``primals``) and it returns an array, a scalar or a pytree of them.
      primals: the point: a tuple or list with one array per positional argument.
      series: for each argument, a list of its curve's coefficients ``[x_1, ..., x_K]``
        (all of the same length ``K``, the order), or ``zero_series``; a single term may
        be ``zero_term``.
      factorial_scaled: with ``True`` (the default) the ``k``-th input and output terms
        are ``k``-th derivatives along the curve; with ``False`` they are the plain
        polynomial coefficients (derivatives divided by ``k!``).

    Returns:
      ``(primals_out, series_out)``: ``fun(*primals)`` and, with its tree structure,
      lists of the ``K`` output terms of each leaf.
    """
    import kiln.numpy as jnp
    from kiln import dtypes
    from kiln.interpreters.lax_ops import convert_element_type
    from kiln.tree_util import tree_flatten, tree_unflatten

    if not isinstance(primals, (tuple, list)):
        raise TypeError(f"primal values must be a tuple or a list, got {type(primals)}")
    if not isinstance(series, (tuple, list)):
        raise TypeError(f"jet series must be a tuple or a list, got {type(series)}")
    if len(primals) != len(series):
        raise ValueError(f"jet got {len(primals)} primal values but {len(series)} series")
    lengths = {len(s) for s in series if s is not zero_series}
    if len(lengths) > 1:
        raise ValueError("jet terms have inconsistent lengths for different arguments")
    order = lengths.pop() if lengths else 0
    for i, (x, terms) in enumerate(zip(primals, series)):
        if not _is_leaf(x):
            raise ValueError(f"primal value at position {i} is not an array")
        if terms is not zero_series:
            for j, t in enumerate(terms):
                if t is not zero_term and not _is_leaf(t):
                    raise ValueError(f"term {j} for argument {i} is not an array")

    xs = [jnp.asarray(x) for x in primals]
    # Each argument's curve as derivative terms d_k (x(t) = x + sum_k d_k t^k / k!).
    curves = []
    for x, terms in zip(xs, series):
        if terms is zero_series or not dtypes.issubdtype(x.dtype, np.inexact):
            curves.append([])
            continue
        ds = []
        for k, t in enumerate(terms, start=1):
            if t is zero_term:
                continue
            t = convert_element_type(jnp.asarray(t), x.dtype, _weak(x))
            ds.append((k, t if factorial_scaled else t * math.factorial(k)))
        curves.append(ds)

    store = {}

    def g(t):
        args = []
        for x, ds in zip(xs, curves):
            for k, d in ds:
                x = x + (t ** k / math.factorial(k)) * d
            args.append(x)
        out = fun(*args)
        leaves, tree = tree_flatten(out)
        store["tree"] = tree
        return [jnp.asarray(o) for o in leaves]

    t0 = jnp.asarray(0.0)       # weak: the curve's terms keep each argument's type
    if order == 0 or not any(curves):
        outs = g(t0)
        derivs = [outs] + [[None] * len(outs)] * order
    else:
        derivs = _all_derivatives(g, order, t0)
    outs = derivs[0]
    terms_out = []
    for i, p in enumerate(outs):
        per_leaf = []
        for k in range(1, order + 1):
            d = derivs[k][i]
            if d is None or not dtypes.issubdtype(p.dtype, np.inexact) or d.dtype != p.dtype:
                d = jnp.zeros_like(p)       # no dependence on the curve (or not inexact)
            per_leaf.append(d if factorial_scaled else d / math.factorial(k))
        terms_out.append(per_leaf)
    tree = store["tree"]
    return tree_unflatten(tree, list(outs)), tree_unflatten(tree, terms_out)


#: ``jet`` with plain Taylor coefficients in and out (``factorial_scaled=False``).
jet2 = partial(jet, factorial_scaled=False)
