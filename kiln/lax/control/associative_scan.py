"""``lax.associative_scan``: a parallel prefix scan built from slicing ops.

No primitive of its own: the scan is unrolled at trace time into ``O(log n)`` rounds of
strided slices, calls of the user's combining function on whole arrays, concatenations
and reshapes. Every transformation (jit, grad, vmap, ...) therefore works through the
rules of those ops, and the staged program has ``O(log n)`` equations, each vectorized
over the scanned axis.

The recursion (odd/even, as in Blelloch's and JAX's formulation):

* combine neighbours ``p[k] = x[2k] (+) x[2k+1]`` (half as many elements);
* scan ``p`` recursively: ``s[k]`` is the prefix ending at odd position ``2k+1``;
* the prefix at even position ``2k`` (k >= 1) is ``s[k-1] (+) x[2k]``; position 0 is ``x[0]``;
* interleave the even and odd results.

``fn`` is applied as ``fn(earlier, later)``, so it need only be associative, not
commutative.
"""
from __future__ import annotations

from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln.core.trace import get_aval


@api_boundary
def associative_scan(fn, elems, reverse: bool = False, axis: int = 0):
    """Inclusive scan of ``elems`` (a pytree of arrays) along ``axis`` with the associative
    binary function ``fn`` (which must act elementwise along ``axis``, on pytrees shaped
    like ``elems``). ``reverse=True`` scans from the end. Equivalent to
    ``[x0, fn(x0, x1), fn(fn(x0, x1), x2), ...]`` but with logarithmic depth."""
    from kiln import lax
    if not callable(fn):
        raise TypeError("lax.associative_scan: fn argument should be callable.")
    leaves, tree = tree_flatten(elems)
    if not leaves:
        return elems
    ndim = get_aval(leaves[0]).ndim
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    axis = axis % ndim
    n = get_aval(leaves[0]).shape[axis]
    if not all(get_aval(x).ndim > axis and get_aval(x).shape[axis] == n for x in leaves[1:]):
        raise ValueError("Array inputs to associative_scan must have the same first dimension. "
                         f"(saw: {[get_aval(x).shape for x in leaves]})")
    if reverse:
        leaves = [lax.rev(x, (axis,)) for x in leaves]

    def combine(a, b):
        out = fn(tree_unflatten(tree, a), tree_unflatten(tree, b))
        out_leaves, out_tree = tree_flatten(out)
        if out_tree != tree:
            raise TypeError("lax.associative_scan: fn must return a pytree with the structure "
                            f"of its inputs {tree}, got {out_tree}.")
        return out_leaves

    def sl(xs, start, stop, stride=1):
        return [lax.slice_in_dim(x, start, stop, stride, axis) for x in xs]

    def scan(xs):
        m = get_aval(xs[0]).shape[axis]
        if m < 2:
            return xs
        odd = scan(combine(sl(xs, 0, m - 1, 2), sl(xs, 1, m, 2)))
        n_even_tail = (m - 1) // 2          # even positions 2, 4, ... below m
        tail = combine(sl(odd, 0, n_even_tail), sl(xs, 2, m, 2)) if n_even_tail else None
        out = []
        for i, x in enumerate(xs):
            head = lax.slice_in_dim(x, 0, 1, 1, axis)
            even = head if tail is None else lax.concatenate([head, tail[i]], axis)
            out.append(_interleave(even, odd[i], axis))
        return out

    result = scan(list(leaves))
    if reverse:
        result = [lax.rev(x, (axis,)) for x in result]
    return tree_unflatten(tree, result)


def _interleave(a, b, axis):
    """``[a0, b0, a1, b1, ...]`` along ``axis``; ``a`` has as many elements as ``b`` or
    one more."""
    from kiln import lax
    sa, sb = get_aval(a).shape, get_aval(b).shape
    na, nb = sa[axis], sb[axis]
    head = a if na == nb else lax.slice_in_dim(a, 0, nb, 1, axis)
    pairs = lax.concatenate([lax.expand_dims(head, (axis + 1,)),
                             lax.expand_dims(b, (axis + 1,))], axis + 1)
    merged = lax.reshape(pairs, sa[:axis] + (2 * nb,) + sa[axis + 1:])
    if na == nb:
        return merged
    return lax.concatenate([merged, lax.slice_in_dim(a, nb, na, 1, axis)], axis)


__all__ = ["associative_scan"]
