"""Collectives over named axes: psum, pmean, pmax, pmin, all_gather, ppermute,
axis_index. Named axes are bound by ``vmap(axis_name=...)`` (and later pmap /
shard_map); the BatchTrace whose axis name matches performs the collective.
"""
from __future__ import annotations

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.trace import Primitive, get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.tree_util import tree_map


def _as_axes(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _check_bound(axes):
    for a in axes:
        batching.axis_size(a)


def _unbound_impl(name):
    def impl(*args, axes=None, **params):
        raise NameError(f"unbound axis name: {axes[0] if axes else params.get('axis_name')}. "
                        f"{name} must be called inside a transformation that binds the axis "
                        "name: vmap(..., axis_name=...), pmap or shard_map.")
    return impl


def _collective(name, abstract_eval):
    p = Primitive(name)
    p.impl = _unbound_impl(name)
    p.abstract_eval = abstract_eval
    p.weak_type_rule = lambda *w, **_: bool(w) and all(w)
    batching.collective_prims.add(p)
    return p


def _same_aval(x, *, axes, axis_index_groups=None):
    _check_bound(axes)
    return ShapedArray(x.shape, x.dtype, x.weak_type)


psum_p = _collective("psum", _same_aval)
pmax_p = _collective("pmax", _same_aval)
pmin_p = _collective("pmin", _same_aval)


def _reducer_batch(prim, reduce_fn, unbatched_fn):
    def rule(axis_data, vals, dims, *, axes, axis_index_groups=None):
        (x,), (d,) = vals, dims
        if axis_data.name not in axes:
            return prim.bind(x, axes=axes, axis_index_groups=axis_index_groups), d
        rest = tuple(a for a in axes if a != axis_data.name)
        y = unbatched_fn(x, axis_data.size) if d is None else reduce_fn(x, (d,))
        if rest:
            y = prim.bind(y, axes=rest, axis_index_groups=axis_index_groups)
        return y, None
    batching.batch_rules[prim] = rule


def _times_size(x, size):
    from kiln import lax
    a = get_aval(x)
    if a.dtype == np.bool_:
        return x
    return lax.mul(x, np.asarray(size, a.dtype).item() if a.dtype.kind != "V" else size)


def _identity(x, size):
    return x


def _rs(x, axes):
    from kiln import lax
    return lax.reduce_sum(x, axes)


def _rmax(x, axes):
    from kiln import lax
    return lax.reduce_max(x, axes)


def _rmin(x, axes):
    from kiln import lax
    return lax.reduce_min(x, axes)


_reducer_batch(psum_p, _rs, _times_size)
_reducer_batch(pmax_p, _rmax, _identity)
_reducer_batch(pmin_p, _rmin, _identity)

ad.deflinear(psum_p, lambda ct, x, *, axes, axis_index_groups=None: [
    Zero(x.aval) if type(ct) is Zero else
    psum_p.bind(ct, axes=axes, axis_index_groups=axis_index_groups)])


def _pminmax_jvp(prim):
    def rule(primals, tangents, *, axes, axis_index_groups=None):
        from kiln import lax
        (x,), (t,) = primals, tangents
        ans = prim.bind(x, axes=axes, axis_index_groups=axis_index_groups)
        if type(t) is Zero:
            return ans, Zero.from_primal_value(ans)
        loc = lax.convert_element_type(lax.eq(x, ans), get_aval(t).dtype)
        num = psum_p.bind(lax.mul(t, loc), axes=axes, axis_index_groups=None)
        den = psum_p.bind(loc, axes=axes, axis_index_groups=None)
        return ans, lax.div(num, den)
    ad.jvp_rules[prim] = rule


_pminmax_jvp(pmax_p)
_pminmax_jvp(pmin_p)


def _check_groups(axis_index_groups):
    if axis_index_groups is not None:
        raise NotImplementedError("axis_index_groups is not supported by kiln's collectives yet")


def psum(x, axis_name, *, axis_index_groups=None):
    """Sum ``x`` (a pytree) over the named axis/axes ``axis_name``."""
    _check_groups(axis_index_groups)
    axes = _as_axes(axis_name)
    return tree_map(lambda v: psum_p.bind(v, axes=axes, axis_index_groups=None), x)


def pmax(x, axis_name, *, axis_index_groups=None):
    """Maximum of ``x`` over the named axis/axes."""
    _check_groups(axis_index_groups)
    axes = _as_axes(axis_name)
    return tree_map(lambda v: pmax_p.bind(v, axes=axes, axis_index_groups=None), x)


def pmin(x, axis_name, *, axis_index_groups=None):
    """Minimum of ``x`` over the named axis/axes."""
    _check_groups(axis_index_groups)
    axes = _as_axes(axis_name)
    return tree_map(lambda v: pmin_p.bind(v, axes=axes, axis_index_groups=None), x)


def _axis_size_of(axes) -> int:
    n = 1
    for a in axes:
        n *= batching.axis_size(a)
    return n


def psum_size(axis_name) -> int:
    return _axis_size_of(_as_axes(axis_name))


def pmean(x, axis_name, *, axis_index_groups=None):
    """Mean of ``x`` over the named axis/axes."""
    from kiln import lax
    _check_groups(axis_index_groups)
    axes = _as_axes(axis_name)

    def mean(v):
        s = psum_p.bind(v, axes=axes, axis_index_groups=None)
        n = _axis_size_of(axes)
        a = get_aval(s)
        if a.dtype.kind in "iub":
            return lax.div(lax.convert_element_type(s, np.float32), float(n))
        return lax.div(s, np.asarray(n, a.dtype).item() if a.dtype.kind != "V" else float(n))
    return tree_map(mean, x)


# -- axis_index -------------------------------------------------------------------------------

def _axis_index_abstract_eval(*, axis_name):
    batching.axis_size(axis_name)
    return ShapedArray((), np.dtype(np.int32), False)


axis_index_p = _collective("axis_index", _axis_index_abstract_eval)
axis_index_p.weak_type_rule = lambda **_: False
axis_index_p.impl = lambda *, axis_name: _unbound_impl("axis_index")(axes=(axis_name,))
ad.defjvp_zero(axis_index_p)


def _axis_index_batch(axis_data, vals, dims, *, axis_name):
    if axis_data.name != axis_name:
        return axis_index_p.bind(axis_name=axis_name), None
    from kiln.array import make_array
    return make_array(np.arange(axis_data.size, dtype=np.int32)), 0


batching.batch_rules[axis_index_p] = _axis_index_batch


def axis_index(axis_name):
    """The index of the current position along the named axis ``axis_name``."""
    if isinstance(axis_name, (tuple, list)):
        from kiln import lax
        out = None
        for a in axis_name:
            i = axis_index_p.bind(axis_name=a)
            out = i if out is None else lax.add(lax.mul(out, batching.axis_size(a)), i)
        return out
    return axis_index_p.bind(axis_name=axis_name)


# -- all_gather --------------------------------------------------------------------------------

def _all_gather_abstract_eval(x, *, axis_name, axis, tiled, axis_size):
    _check_bound((axis_name,))
    shape = list(x.shape)
    if tiled:
        shape[axis] *= axis_size
    else:
        shape.insert(axis, axis_size)
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


all_gather_p = _collective("all_gather", _all_gather_abstract_eval)


def _all_gather_batch(axis_data, vals, dims, *, axis_name, axis, tiled, axis_size):
    (x,), (d,) = vals, dims
    if axis_data.name != axis_name:
        if d is None:
            return all_gather_p.bind(x, axis_name=axis_name, axis=axis, tiled=tiled,
                                     axis_size=axis_size), None
        # Gather over another axis: keep our batch dim in front.
        x = batching.moveaxis(x, d, 0)
        out = all_gather_p.bind(x, axis_name=axis_name, axis=axis + 1, tiled=tiled,
                                axis_size=axis_size)
        return out, 0
    from kiln import lax
    y = batching.matchaxis(x, d, axis, axis_data.size)
    if tiled:
        shape = list(get_aval(y).shape)
        n = shape.pop(axis)
        shape[axis] *= n
        y = lax.reshape(y, tuple(shape))
    return y, None


batching.batch_rules[all_gather_p] = _all_gather_batch


def _all_gather_transpose(ct, x, *, axis_name, axis, tiled, axis_size):
    from kiln import lax
    if type(ct) is Zero:
        return [Zero(x.aval)]
    summed = psum_p.bind(ct, axes=(axis_name,), axis_index_groups=None)
    idx = axis_index_p.bind(axis_name=axis_name)
    if tiled:
        n = x.aval.shape[axis]
        return [lax.dynamic_slice_in_dim(summed, lax.mul(idx, n), n, axis)]
    return [lax.dynamic_index_in_dim(summed, idx, axis, keepdims=False)]


ad.deflinear(all_gather_p, _all_gather_transpose)


def all_gather(x, axis_name, *, axis_index_groups=None, axis: int = 0, tiled: bool = False):
    """Gather ``x`` from every position of the named axis, stacked (or concatenated if
    ``tiled``) along ``axis``."""
    _check_groups(axis_index_groups)

    def gather(v):
        nd = get_aval(v).ndim
        limit = nd if tiled else nd + 1
        if not -limit <= axis < limit:
            raise ValueError(f"all_gather axis {axis} is out of bounds for an operand of rank "
                             f"{nd} (tiled={tiled}).")
        ax = axis % limit if limit else 0
        return all_gather_p.bind(v, axis_name=axis_name, axis=ax, tiled=tiled,
                                 axis_size=batching.axis_size(axis_name))
    return tree_map(gather, x)


# -- ppermute ------------------------------------------------------------------------------------

def _ppermute_abstract_eval(x, *, axis_name, perm):
    _check_bound((axis_name,))
    return ShapedArray(x.shape, x.dtype, x.weak_type)


ppermute_p = _collective("ppermute", _ppermute_abstract_eval)


def _ppermute_batch(axis_data, vals, dims, *, axis_name, perm):
    (x,), (d,) = vals, dims
    if axis_data.name != axis_name:
        return ppermute_p.bind(x, axis_name=axis_name, perm=perm), d
    from kiln import lax
    size = axis_data.size
    x = batching.bdim_at_front(x, d, size)
    src_for = {dst: src for src, dst in perm}
    pieces = []
    zero = None
    for dst in range(size):
        if dst in src_for:
            pieces.append(lax.slice_in_dim(x, src_for[dst], src_for[dst] + 1, axis=0))
        else:
            if zero is None:
                zero = lax.mul(lax.slice_in_dim(x, 0, 1, axis=0), 0)
            pieces.append(zero)
    return lax.concatenate(pieces, 0), 0


batching.batch_rules[ppermute_p] = _ppermute_batch
ad.deflinear(ppermute_p, lambda ct, x, *, axis_name, perm: [
    Zero(x.aval) if type(ct) is Zero else
    ppermute_p.bind(ct, axis_name=axis_name, perm=tuple((d, s) for s, d in perm))])


def ppermute(x, axis_name, perm):
    """Send ``x`` from position ``src`` to ``dst`` for each ``(src, dst)`` in ``perm``;
    positions receiving nothing get zeros."""
    perm = tuple((int(s), int(d)) for s, d in perm)
    return tree_map(lambda v: ppermute_p.bind(v, axis_name=axis_name, perm=perm), x)


__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "ppermute",
           "psum_p", "pmax_p", "pmin_p", "all_gather_p", "axis_index_p", "ppermute_p",
           "psum_size"]
