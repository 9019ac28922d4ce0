"""Collectives over named axes, as ``jax.lax``'s: ``psum``, ``pmean``, ``pmax``, ``pmin``,
``all_gather``, ``psum_scatter``, ``all_to_all``, ``ppermute``, ``pshuffle``, ``pswapaxes``,
``pbroadcast``, ``axis_index`` and ``axis_size``.

Named axes are bound by ``vmap(axis_name=...)`` (and by pmap / shard_map); the BatchTrace
whose axis name matches performs the collective in its batching rule, so every collective
works inside nested vmaps with several names, under ``jit``, ``grad`` and ``vmap`` again.
A collective over several names ``('i', 'j')`` acts on the flattened position
``index_i * size_j + index_j`` (the first name is the most major), as in JAX.
``axis_index_groups`` split the (flattened) positions into groups that each perform the
collective on their own; a position's rank is its place in its group's list.

Primitives and their params (``axis_index_groups`` is ``None`` or a tuple of tuples of ints;
names are hashable axis names):

- ``psum``, ``pmax``, ``pmin``: ``axes`` (tuple of names), ``axis_index_groups``.
  Every position gets the sum/max/min over its group (all positions when no groups).
- ``axis_index``: ``axis_name`` (one name). The int32 index of the position.
- ``all_gather``: ``all_gather_dimension`` (int >= 0, an axis of the *output*),
  ``axis_name`` (tuple of names), ``axis_index_groups``, ``axis_size`` (the group size, or
  the product of the axes' sizes without groups), ``tiled`` (bool). The group's operands are
  stacked in group order along a new axis ``all_gather_dimension`` (``tiled=False``) or
  concatenated along that existing axis (``tiled=True``).
- ``reduce_scatter`` (``lax.psum_scatter``): ``axis_name`` (tuple of names),
  ``scatter_dimension`` (int >= 0, an axis of the operand), ``axis_index_groups``,
  ``axis_size`` (as for all_gather), ``tiled`` (bool). The group sum is split into
  ``axis_size`` chunks along ``scatter_dimension``; the position of rank ``r`` keeps chunk
  ``r`` (``tiled=True``) or, for ``tiled=False`` (that axis has size ``axis_size``), entry
  ``r`` with the axis removed.
- ``all_to_all``: ``axis_name`` (a name or a tuple of names, as given to
  ``lax.all_to_all``), ``split_axis``, ``concat_axis`` (ints >= 0), ``axis_index_groups``,
  ``tiled`` (bool, informational). Whatever ``tiled`` says, the primitive splits
  ``split_axis`` into ``S`` (the group size) chunks, sends chunk ``r`` to the group member of
  rank ``r``, and concatenates what it receives along ``concat_axis`` in group order: the
  output has ``shape[split_axis] // S`` and ``shape[concat_axis] * S``. ``lax.all_to_all``
  with ``tiled=False`` adds the size-1 axis before and squeezes it after, as JAX does.
- ``ppermute``: ``axis_name`` (tuple of names), ``perm`` (tuple of ``(src, dst)`` int pairs,
  unique sources and destinations). Position ``dst`` receives the operand of ``src``;
  positions that are no destination get zeros.
- ``pbroadcast``: ``axis_name`` (a name or a tuple of names, as given), ``source`` (int).
  Every position gets the operand of position ``source``.

Transposes: psum -> psum, all_gather <-> reduce_scatter, all_to_all -> all_to_all with
``split_axis`` and ``concat_axis`` swapped, ppermute -> the inverse permutation, pbroadcast ->
psum kept at ``source`` (zeros elsewhere); all with the same axes and groups.
"""
from __future__ import annotations

import numpy as np

from kiln._physical_tree import tree_flatten, tree_map, tree_unflatten
from kiln.core.avals import ShapedArray
from kiln.core.trace import Primitive, Tracer, get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero

# ================================================================================================
# Axis names, sizes and groups
# ================================================================================================

def _as_axes(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def skip_size_one(axes: tuple) -> tuple:
    """``axes`` without the mesh axes of size 1 under the option
    ``jax_remove_size_one_mesh_axis_from_type`` (JAX's: they are left out of types, and
    collectives and pcasts over them are no-ops); ``axes`` otherwise."""
    from kiln.config import config
    if not config.jax_remove_size_one_mesh_axis_from_type:
        return axes
    from kiln.sharding import get_abstract_mesh
    mesh = get_abstract_mesh()
    sizes = {} if mesh.empty else dict(zip(mesh.axis_names, mesh.axis_sizes))
    out = []
    for a in axes:
        n = sizes.get(a)
        if n is None:
            try:
                n = batching.axis_size(a)
            except NameError:
                n = None
        if n != 1:
            out.append(a)
    return tuple(out)


def _bound(name) -> bool:
    try:
        batching.axis_size(name)
        return True
    except NameError:
        return False


def _check_bound(axes):
    for a in axes:
        batching.axis_size(a)


def _axis_size_of(axes) -> int:
    n = 1
    for a in axes:
        n *= batching.axis_size(a)
    return n


def _unbound_impl(name):
    def impl(*args, axes=None, **params):
        axis = axes[0] if axes else params.get("axis_name")
        if isinstance(axis, (tuple, list)):
            axis = axis[0]
        raise NameError(f"Found an unbound axis name: {axis}. To fix this, please call "
                        f"{name} under `jax.shard_map` (or inside a vmap(..., "
                        "axis_name=...) or pmap that binds it).")
    return impl


def _unbound_message(e: NameError, name: str) -> NameError:
    """JAX's message for a collective over a name no transformation binds."""
    msg = str(e)
    if msg.startswith("Found an unbound axis name: "):
        axis = msg[len("Found an unbound axis name: "):].split(". ", 1)[0]
        return NameError(f"Found an unbound axis name: {axis}. To fix this, please call "
                         f"{name} under `jax.shard_map` (or inside a vmap(..., axis_name=...) "
                         "or pmap that binds it).")
    return e


def _collective(name, abstract_eval):
    p = Primitive(name)
    p.impl = _unbound_impl(name)

    def checked_abstract_eval(*args, **params):
        try:
            return abstract_eval(*args, **params)
        except NameError as e:
            raise _unbound_message(e, name) from None
    p.abstract_eval = checked_abstract_eval
    p.weak_type_rule = lambda *w, **_: bool(w) and all(w)
    batching.collective_prims.add(p)
    return p


def _canonicalize_groups(axis_index_groups):
    if axis_index_groups is None:
        return None
    return tuple(tuple(int(i) for i in g) for g in axis_index_groups)


def _validate_groups(groups):
    """JAX's check: the groups cover ``range(total)`` exactly once."""
    if groups is None:
        return
    total = sum(len(g) for g in groups)
    if sorted(i for g in groups for i in g) != list(range(total)):
        raise ValueError("axis_index_groups must cover all indices exactly once")


def _check_groups_fit(groups, axes, api, equal_sizes):
    """kiln's checks when the axes are bound: the groups partition all positions, and (for
    the collectives that need it) have equal sizes."""
    if groups is None:
        return
    total = _axis_size_of(axes)
    if sum(len(g) for g in groups) != total:
        raise ValueError(f"axis_index_groups {groups} must cover all {total} indices of the "
                         f"axis {axes if len(axes) > 1 else axes[0]!r} exactly once "
                         f"(in {api}).")
    if equal_sizes and len({len(g) for g in groups}) != 1:
        raise ValueError(f"axis_index_groups must all be the same size for {api}, "
                         f"got {groups}.")


def _group_tables(groups, total):
    """``members[k]``: the group of flattened position ``k``; ``rank[k]``: its place there."""
    gs = groups if groups is not None else (tuple(range(total)),)
    members, rank = [None] * total, [0] * total
    for g in gs:
        for r, k in enumerate(g):
            members[k] = g
            rank[k] = r
    return gs, members, rank


# ================================================================================================
# Array helpers for the batching rules (static shapes, lax operations)
# ================================================================================================

def _lax():
    from kiln import lax
    return lax


def _shape(x):
    return get_aval(x).shape


def _take0(x, idx):
    """Rows ``idx`` (static ints) of ``x`` along axis 0."""
    lax = _lax()
    idx = [int(i) for i in idx]
    shape = _shape(x)
    if idx == list(range(shape[0])):
        return x
    from kiln.array import make_array
    from kiln.lax.gather_scatter import GatherDimensionNumbers, GatherScatterMode
    dn = GatherDimensionNumbers(offset_dims=tuple(range(1, len(shape))),
                                collapsed_slice_dims=(0,), start_index_map=(0,))
    ind = make_array(np.asarray(idx, np.int32).reshape(-1, 1))
    return lax.gather(x, ind, dn, (1,) + tuple(shape[1:]),
                      indices_are_sorted=idx == sorted(idx),
                      unique_indices=len(set(idx)) == len(idx),
                      mode=GatherScatterMode.PROMISE_IN_BOUNDS)


def _split(x, axis, n):
    """Split ``axis`` into ``(n, size // n)``."""
    shape = list(_shape(x))
    shape[axis:axis + 1] = [n, shape[axis] // n]
    return _lax().reshape(x, tuple(shape))


def _fold(x, axis):
    """Merge ``axis`` and ``axis + 1`` (major, minor)."""
    shape = list(_shape(x))
    shape[axis:axis + 2] = [shape[axis] * shape[axis + 1]]
    return _lax().reshape(x, tuple(shape))


def _zeros(shape, dtype):
    return _lax().full(tuple(shape), 0, dtype)


def _gather_all(x, d, axis_data, names):
    """In the frame of ``axis_data`` (one of ``names``): the operands of every position over
    ``names``, stacked along a new leading axis in flattened (row-major) order. The other
    names are gathered by binding ``all_gather`` for the enclosing frames."""
    pos = names.index(axis_data.name)
    major, minor = names[:pos], names[pos + 1:]
    y = batching.bdim_at_front(x, d, axis_data.size)
    if minor:
        y = all_gather_p.bind(y, all_gather_dimension=1, axis_name=minor,
                              axis_index_groups=None, axis_size=_axis_size_of(minor),
                              tiled=False)
        y = _fold(y, 0)
    if major:
        y = all_gather_p.bind(y, all_gather_dimension=0, axis_name=major,
                              axis_index_groups=None, axis_size=_axis_size_of(major),
                              tiled=False)
        y = _fold(y, 0)
    return y


def _pick_own(r, axis_data, names):
    """``r`` holds, along axis 0, the result of every flattened position over ``names``;
    returns this frame's rows (batched at 0), picking the other names' own positions."""
    pos = names.index(axis_data.name)
    major, minor = names[:pos], names[pos + 1:]
    if not major and not minor:
        return r, 0
    lax = _lax()
    big, small = _axis_size_of(major), _axis_size_of(minor)
    rest = tuple(_shape(r)[1:])
    r = lax.reshape(r, (big, axis_data.size, small) + rest)
    if minor:
        r = lax.dynamic_index_in_dim(r, axis_index(minor), 2, keepdims=False)
    else:
        r = lax.squeeze(r, (2,))
    if major:
        r = lax.dynamic_index_in_dim(r, axis_index(major), 0, keepdims=False)
    else:
        r = lax.squeeze(r, (0,))
    return r, 0


def _pick_pairs(f, pairs):
    """``f`` is ``[P, S, ...]``; returns ``out[p, t] = f[pairs[p][t]]`` (``pairs`` of static
    ``(row, column)`` indices) as ``[P, S', ...]``."""
    lax = _lax()
    p_, s_ = _shape(f)[:2]
    rows = len(pairs)
    cols = len(pairs[0])
    if all(pairs[p][t] == (p, t) for p in range(rows) for t in range(cols)) and \
            (rows, cols) == (p_, s_):
        return f
    if all(pairs[p][t] == (t, p) for p in range(rows) for t in range(cols)) and \
            (rows, cols) == (s_, p_):
        return batching.moveaxis(f, 0, 1)
    rest = tuple(_shape(f)[2:])
    flat = lax.reshape(f, (p_ * s_,) + rest)
    out = _take0(flat, [q * s_ + c for row in pairs for q, c in row])
    return lax.reshape(out, (rows, cols) + rest)


# ================================================================================================
# psum, pmax, pmin
# ================================================================================================

def _same_aval(x, *, axes, axis_index_groups=None):
    _check_bound(axes)
    return ShapedArray(x.shape, x.dtype, x.weak_type)


# params: axes (tuple of names), axis_index_groups (None or tuple of tuples of ints)
psum_p = _collective("psum", _same_aval)
pmax_p = _collective("pmax", _same_aval)
pmin_p = _collective("pmin", _same_aval)


def _times_size(x, size):
    a = get_aval(x)
    if a.dtype == np.bool_:
        return x
    return _lax().mul(x, np.asarray(size, a.dtype).item() if a.dtype.kind != "V" else size)


def _identity(x, size):
    return x


def _grouped_reduce(full, groups, reducer):
    """Row ``k`` of the result: the reduction of the rows of ``full`` in ``k``'s group."""
    lax = _lax()
    total = _shape(full)[0]
    gs, members, _ = _group_tables(groups, total)
    sizes = {len(g) for g in gs}
    if len(sizes) == 1:
        s = sizes.pop()
        y = _take0(full, [i for g in gs for i in g])
        y = lax.reshape(y, (len(gs), s) + tuple(_shape(full)[1:]))
        red = reducer(y, (1,))
    else:
        red = lax.concatenate([lax.expand_dims(reducer(_take0(full, g), (0,)), (0,))
                               for g in gs], 0)
    group_of = {g: n for n, g in enumerate(gs)}
    return _take0(red, [group_of[members[k]] for k in range(total)])


def _reducer_batch(prim, reduce_fn, unbatched_fn):
    def rule(axis_data, vals, dims, *, axes, axis_index_groups=None):
        (x,), (d,) = vals, dims
        if axis_data.name not in axes:
            return prim.bind(x, axes=axes, axis_index_groups=axis_index_groups), d
        if axis_index_groups is None:
            rest = tuple(a for a in axes if a != axis_data.name)
            y = unbatched_fn(x, axis_data.size) if d is None else reduce_fn(x, (d,))
            if rest:
                y = prim.bind(y, axes=rest, axis_index_groups=None)
            return y, None
        full = _gather_all(x, d, axis_data, axes)
        return _pick_own(_grouped_reduce(full, axis_index_groups, reduce_fn), axis_data, axes)
    batching.batch_rules[prim] = rule


def _rs(x, axes):
    return _lax().reduce_sum(x, axes)


def _rmax(x, axes):
    return _lax().reduce_max(x, axes)


def _rmin(x, axes):
    return _lax().reduce_min(x, axes)


_reducer_batch(psum_p, _rs, _times_size)
_reducer_batch(pmax_p, _rmax, _identity)
_reducer_batch(pmin_p, _rmin, _identity)

ad.deflinear2(psum_p, lambda ct, x, *, axes, axis_index_groups=None: [
    Zero(x.aval) if type(ct) is Zero else
    psum_p.bind(ct, axes=axes, axis_index_groups=axis_index_groups)])


def _pminmax_jvp(prim):
    def rule(primals, tangents, *, axes, axis_index_groups=None):
        lax = _lax()
        (x,), (t,) = primals, tangents
        ans = prim.bind(x, axes=axes, axis_index_groups=axis_index_groups)
        if type(t) is Zero:
            return ans, Zero.from_primal_value(ans)
        loc = lax.convert_element_type(lax.eq(x, ans), get_aval(t).dtype)
        num = psum_p.bind(lax.mul(t, loc), axes=axes, axis_index_groups=axis_index_groups)
        den = psum_p.bind(loc, axes=axes, axis_index_groups=axis_index_groups)
        return ans, lax.div(num, den)
    ad.jvp_rules[prim] = rule


_pminmax_jvp(pmax_p)
_pminmax_jvp(pmin_p)


def _reduction_axes(axis_name, axis_index_groups):
    axes = _as_axes(axis_name)
    if axis_index_groups is None:
        axes = skip_size_one(axes)
    if any(isinstance(a, int) and not isinstance(a, bool) for a in axes):
        if axis_index_groups is not None:
            raise ValueError("axis_index_groups only supported for sums over just named axes")
        raise NotImplementedError(
            f"integer (positional) axes in collectives are not supported by kiln: {axes}")
    groups = _canonicalize_groups(axis_index_groups)
    _validate_groups(groups)
    return axes, groups


def _const_like(leaf, val):
    """``val`` in ``leaf``'s type: a Python scalar stays a Python scalar, a NumPy value a
    NumPy value of its dtype."""
    if type(leaf) in (int, float, complex):
        return type(leaf)(val)
    return np.asarray(val, np.result_type(leaf))


# Set while a ``shard_map`` body with ``check_vma`` is staged as one equation
# (``kiln.parallel.shard_map._stage``): a collective's operand that does not vary along
# all of its axes is first ``pvary``-ed along the others (JAX's implicit pcast), so the
# body's jaxpr shows the type change as JAX's does.
auto_pvary: list = [False]


def _implicit_pvary(v, axes):
    if not auto_pvary[0] or not isinstance(v, Tracer):
        return v
    varying = get_aval(v).mat.varying
    missing = tuple(a for a in axes if a not in varying)
    return pvary_p.bind(v, axes=missing) if missing else v


def psum(x, axis_name, *, axis_index_groups=None):
    """Compute an all-reduce sum on ``x`` over the mapped axis ``axis_name``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``. Booleans are summed
        as int32.
      axis_name: a hashable axis name, or a tuple of names to sum over all of them.
      axis_index_groups: optional list of lists of axis indices (e.g. ``[[0, 1], [2, 3]]``
        for an axis of size 4) that each sum separately. Groups must cover all axis indices
        exactly once.

    Returns:
      Array(s) of the shape of ``x``: the sum over the axis (or group). When no leaf of
      ``x`` is traced (e.g. ``psum(1, 'i')``), the result is ``x`` times the axis (group)
      size, computed without a collective: ``psum(1, 'i')`` is the axis size as an int.
    """
    axes, groups = _reduction_axes(axis_name, axis_index_groups)
    if not axes:
        return x
    lax = _lax()
    leaves, tree = tree_flatten(x)
    leaves = [lax.convert_element_type(v, np.int32) if get_aval(v).dtype == np.dtype(np.bool_)
              else v for v in leaves]
    if all(not isinstance(v, Tracer) for v in leaves):
        size = len(groups[0]) if groups is not None else _axis_size_of(axes)
        out = []
        for v in leaves:
            if isinstance(v, (int, float, complex, np.ndarray, np.generic)):
                out.append(_const_like(v, size) * v)
            else:
                out.append(lax.mul(v, np.asarray(size, get_aval(v).dtype)))
        return tree_unflatten(tree, out)
    _check_groups_fit(groups, axes, "psum", equal_sizes=False)

    def bind(v):
        if isinstance(v, Tracer) and groups is None and _unreduced_on(v, axes, "psum"):
            return unreduced_psum_p.bind(v, axes=axes, axis_index_groups=None)
        if groups is None:
            v = _implicit_pvary(v, axes)
        return psum_p.bind(v, axes=axes, axis_index_groups=groups)
    return tree_unflatten(tree, [bind(v) for v in leaves])


def pmax(x, axis_name, *, axis_index_groups=None):
    """Compute an all-reduce max on ``x`` over the mapped axis ``axis_name``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names.
      axis_index_groups: optional list of lists of axis indices that each reduce
        separately; they must cover all axis indices exactly once.

    Returns:
      Array(s) of the shape of ``x``: the maximum over the axis (or group).
    """
    axes, groups = _reduction_axes(axis_name, axis_index_groups)
    if not axes:
        return x
    _check_groups_fit(groups, axes, "pmax", equal_sizes=False)
    return tree_map(lambda v: pmax_p.bind(v if groups is not None else _implicit_pvary(v, axes),
                                          axes=axes, axis_index_groups=groups), x)


def pmin(x, axis_name, *, axis_index_groups=None):
    """Compute an all-reduce min on ``x`` over the mapped axis ``axis_name``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names.
      axis_index_groups: optional list of lists of axis indices that each reduce
        separately; they must cover all axis indices exactly once.

    Returns:
      Array(s) of the shape of ``x``: the minimum over the axis (or group).
    """
    axes, groups = _reduction_axes(axis_name, axis_index_groups)
    if not axes:
        return x
    _check_groups_fit(groups, axes, "pmin", equal_sizes=False)
    return tree_map(lambda v: pmin_p.bind(v if groups is not None else _implicit_pvary(v, axes),
                                          axes=axes, axis_index_groups=groups), x)


def _axis_size(axis_name, axis_index_groups=None) -> int:
    return psum(1, axis_name, axis_index_groups=_canonicalize_groups(axis_index_groups))


def axis_size(axis_name) -> int:
    """Return the size of the mapped axis ``axis_name`` (a Python int).

    Args:
      axis_name: a hashable axis name, or a tuple of names (the product of their sizes).

    Returns:
      The size, as ``psum(1, axis_name)``.
    """
    return _axis_size(axis_name)


def psum_size(axis_name) -> int:
    """kiln helper: the product of the sizes of the named axes ``axis_name``."""
    return _axis_size_of(_as_axes(axis_name))


def pmean(x, axis_name, *, axis_index_groups=None):
    """Compute an all-reduce mean on ``x`` over the mapped axis ``axis_name``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``. Integers give floats.
      axis_name: a hashable axis name, or a tuple of names.
      axis_index_groups: optional list of lists of axis indices that each reduce
        separately; they must cover all axis indices exactly once. As in JAX, the sum is
        divided by the size of the *first* group.

    Returns:
      Array(s) of the shape of ``x``: the mean over the axis (or group).
    """
    x = psum(x, axis_name, axis_index_groups=axis_index_groups)
    n = _axis_size(axis_name, axis_index_groups)
    return tree_map(lambda v: v / n, x)


# ================================================================================================
# axis_index
# ================================================================================================

def _axis_index_abstract_eval(*, axis_name):
    batching.axis_size(axis_name)
    return ShapedArray((), np.dtype(np.int32), False)


# params: axis_name (one name)
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
    """Return the index along the mapped axis ``axis_name``.

    Args:
      axis_name: a hashable axis name, or a tuple of names: then the flattened index
        ``index_0 * size_1 * ... + ... + index_last`` (the first name is the most major).

    Returns:
      An int32 scalar.
    """
    if isinstance(axis_name, (tuple, list)):
        lax = _lax()
        out = None
        for a in axis_name:
            i = axis_index_p.bind(axis_name=a)
            out = i if out is None else lax.add(lax.mul(out, np.int32(batching.axis_size(a))),
                                                i)
        if out is None:
            from kiln.array import make_array
            return make_array(np.asarray(0, np.int32), weak_type=True)
        return out
    return axis_index_p.bind(axis_name=axis_name)


# ================================================================================================
# all_gather
# ================================================================================================

def _all_gather_abstract_eval(x, *, all_gather_dimension, axis_name, axis_index_groups,
                              axis_size, tiled):
    _check_bound(axis_name)
    shape = list(x.shape)
    if tiled:
        shape[all_gather_dimension] *= axis_size
    else:
        shape.insert(all_gather_dimension, axis_size)
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


# params: all_gather_dimension, axis_name (tuple), axis_index_groups, axis_size, tiled
all_gather_p = _collective("all_gather", _all_gather_abstract_eval)


def _all_gather_batch(axis_data, vals, dims, *, all_gather_dimension, axis_name,
                      axis_index_groups, axis_size, tiled):
    (x,), (d,) = vals, dims
    a = all_gather_dimension
    if axis_data.name not in axis_name:
        if d is not None:
            if d <= a:
                a += 1
            elif not tiled:
                d += 1
        return all_gather_p.bind(x, all_gather_dimension=a, axis_name=axis_name,
                                 axis_index_groups=axis_index_groups, axis_size=axis_size,
                                 tiled=tiled), d
    if axis_index_groups is None:
        if axis_name == (axis_data.name,):
            y = batching.matchaxis(x, d, a, axis_data.size)
        else:
            y = batching.moveaxis(_gather_all(x, d, axis_data, axis_name), 0, a)
        return (_fold(y, a) if tiled else y), None
    full = _gather_all(x, d, axis_data, axis_name)
    total = _shape(full)[0]
    _, members, _ = _group_tables(axis_index_groups, total)
    s = len(members[0])
    r = _take0(full, [m for k in range(total) for m in members[k]])
    r = _lax().reshape(r, (total, s) + tuple(_shape(full)[1:]))
    r = batching.moveaxis(r, 1, a + 1)
    if tiled:
        r = _fold(r, a + 1)
    return _pick_own(r, axis_data, axis_name)


batching.batch_rules[all_gather_p] = _all_gather_batch


def _all_gather_transpose(ct, x, *, all_gather_dimension, axis_name, axis_index_groups,
                          axis_size, tiled):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    return [reduce_scatter_p.bind(ct, axis_name=axis_name,
                                  scatter_dimension=all_gather_dimension,
                                  axis_index_groups=axis_index_groups, axis_size=axis_size,
                                  tiled=tiled)]


ad.deflinear2(all_gather_p, _all_gather_transpose)


# ``all_gather(..., to='invarying')`` (JAX's ``all_gather_invariant``): the same values,
# but typed the same on every device (inside shard_map), so its cotangent is too and the
# transpose takes this position's chunk instead of a psum_scatter.
# params: all_gather_dimension, axis_name (tuple), axis_size, tiled
def _all_gather_invariant_abstract_eval(x, *, all_gather_dimension, axis_name, axis_size,
                                        tiled):
    return _all_gather_abstract_eval(x, all_gather_dimension=all_gather_dimension,
                                     axis_name=axis_name, axis_index_groups=None,
                                     axis_size=axis_size, tiled=tiled)


all_gather_invariant_p = _collective("all_gather_invariant",
                                     _all_gather_invariant_abstract_eval)


def _all_gather_invariant_batch(axis_data, vals, dims, **params):
    return _all_gather_batch(axis_data, vals, dims, axis_index_groups=None, **params)


def _all_gather_invariant_transpose(ct, x, *, all_gather_dimension, axis_name, axis_size,
                                    tiled):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    lax = _lax()
    idx = axis_index(axis_name)
    d = all_gather_dimension
    if tiled:
        n = x.aval.shape[d]
        return [lax.dynamic_slice_in_dim(ct, lax.mul(idx, np.int32(n)), n, d)]
    return [lax.dynamic_index_in_dim(ct, idx, d, keepdims=False)]


batching.batch_rules[all_gather_invariant_p] = _all_gather_invariant_batch
ad.deflinear2(all_gather_invariant_p, _all_gather_invariant_transpose)


def _canonical_axis(axis, ndim):
    import operator
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis + ndim if axis < 0 else axis


def all_gather(x, axis_name, *, axis_index_groups=None, axis: int = 0, tiled: bool = False,
               to: str = "varying"):
    """Gather values of ``x`` across all positions of the mapped axis ``axis_name``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names (gathered in flattened order).
      axis_index_groups: optional list of lists of axis indices that each gather
        separately (in the order listed); they must cover all axis indices exactly once
        and all have the same size.
      axis: the positional axis of the output that holds the gathered chunks.
      tiled: when ``False`` the chunks are stacked along a new axis ``axis``; when
        ``True`` they are concatenated along the existing axis ``axis``.
      to: the output's manual axis type inside ``shard_map``: ``'varying'`` (default) or
        ``'invarying'`` (the same on every device: JAX's ``all_gather_invariant``, whose
        transpose takes each position's chunk) or ``'reduced'`` (the same on every device,
        typed reduced: its transpose is a psum_scatter of the unreduced cotangent).

    Returns:
      Array(s) of ``x``'s shape with a new axis of the axis (group) size at ``axis``
      (``tiled=False``), or with dimension ``axis`` multiplied by it (``tiled=True``).
    """
    if to not in {"varying", "reduced", "invarying"}:
        raise ValueError("Got unexpected `to` value for `jax.lax.all_gather`. Allowed `to` "
                         "values are: {'varying', 'reduced', 'invarying'}")
    if to in ("invarying", "reduced") and axis_index_groups is not None:
        raise ValueError("all_gather(..., to='invarying') does not take axis_index_groups")
    axes = _as_axes(axis_name)
    if not axes:
        return x
    groups = _canonicalize_groups(axis_index_groups)
    size = _axis_size(axes, groups)
    _check_groups_fit(groups, axes, "all_gather", equal_sizes=True)

    def gather(v):
        nd = get_aval(v).ndim
        dim = _canonical_axis(axis, nd if tiled else nd + 1)
        if to == "reduced":
            _check_gather_reduced(get_aval(v), axes)
            return all_gather_reduced_p.bind(v, all_gather_dimension=dim, axis_name=axes,
                                             axis_size=size, tiled=bool(tiled))
        if to == "invarying":
            return all_gather_invariant_p.bind(v, all_gather_dimension=dim, axis_name=axes,
                                               axis_size=size, tiled=bool(tiled))
        if groups is None:
            v = _implicit_pvary(v, axes)
        return all_gather_p.bind(v, all_gather_dimension=dim, axis_name=axes,
                                 axis_index_groups=groups, axis_size=size, tiled=bool(tiled))
    return tree_map(gather, x)


# ================================================================================================
# psum_scatter (the reduce_scatter primitive)
# ================================================================================================

def _check_scatter_shape(shape, scatter_dimension, axis_size, tiled):
    n = shape[scatter_dimension]
    if tiled:
        if n % axis_size != 0:
            raise ValueError(f"tiled reduce_scatter operand scatter dimension size {n} must "
                             f"be divisible by shard_count {axis_size}")
    elif n != axis_size:
        raise ValueError(f"reduce_scatter operand scatter dimension size {n} must match "
                         f"shard count {axis_size}")


def _reduce_scatter_abstract_eval(x, *, axis_name, scatter_dimension, axis_index_groups,
                                  axis_size, tiled):
    _check_bound(axis_name)
    _check_scatter_shape(x.shape, scatter_dimension, axis_size, tiled)
    shape = list(x.shape)
    if tiled:
        shape[scatter_dimension] //= axis_size
    else:
        del shape[scatter_dimension]
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


# params: axis_name (tuple), scatter_dimension, axis_index_groups, axis_size, tiled
reduce_scatter_p = _collective("reduce_scatter", _reduce_scatter_abstract_eval)


def _reduce_scatter_batch(axis_data, vals, dims, *, axis_name, scatter_dimension,
                          axis_index_groups, axis_size, tiled):
    (x,), (d,) = vals, dims
    sd = scatter_dimension
    lax = _lax()
    if axis_data.name not in axis_name:
        out_d = d
        if d is not None:
            if d <= sd:
                sd += 1
            elif not tiled:
                out_d = d - 1
        return reduce_scatter_p.bind(x, axis_name=axis_name, scatter_dimension=sd,
                                     axis_index_groups=axis_index_groups,
                                     axis_size=axis_size, tiled=tiled), out_d
    if axis_index_groups is None and axis_name == (axis_data.name,):
        y = _times_size(x, axis_data.size) if d is None else lax.reduce_sum(x, (d,))
        if tiled:
            y = _split(y, sd, axis_data.size)
        return y, sd
    full = _gather_all(x, d, axis_data, axis_name)
    total = _shape(full)[0]
    gs, _, rank = _group_tables(axis_index_groups, total)
    s = len(gs[0])
    if axis_index_groups is None:
        # position k keeps chunk k of the total: the chunks, moved to the front
        r = batching.moveaxis(_split(lax.reduce_sum(full, (0,)), sd, s), sd, 0)
    else:
        f = _split(_grouped_reduce(full, axis_index_groups, _rs), sd + 1, s)
        f = batching.moveaxis(f, sd + 1, 1)                # [total, s, ..., chunk, ...]
        r = lax.squeeze(_pick_pairs(f, [[(k, rank[k])] for k in range(total)]), (1,))
    if not tiled:
        r = lax.squeeze(r, (sd + 1,))
    return _pick_own(r, axis_data, axis_name)


batching.batch_rules[reduce_scatter_p] = _reduce_scatter_batch


def _reduce_scatter_transpose(ct, x, *, axis_name, scatter_dimension, axis_index_groups,
                              axis_size, tiled):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    return [all_gather_p.bind(ct, all_gather_dimension=scatter_dimension, axis_name=axis_name,
                              axis_index_groups=axis_index_groups, axis_size=axis_size,
                              tiled=tiled)]


ad.deflinear2(reduce_scatter_p, _reduce_scatter_transpose)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    """Like ``psum(x, axis_name)``, but each position keeps only its part of the result.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names (flattened order).
      scatter_dimension: the positional axis along which the sum is scattered.
      axis_index_groups: optional list of lists of axis indices that each reduce-scatter
        separately (a position's part is its rank in its group); they must cover all axis
        indices exactly once and all have the same size.
      tiled: when ``False``, ``x.shape[scatter_dimension]`` must equal the axis (group)
        size and that axis is removed from the result; when ``True`` it must be divisible
        by it and is divided by it.

    Returns:
      Array(s): the position's part of the sum over the axis (or group).
    """
    axes = _as_axes(axis_name)
    if not axes:
        return x
    groups = _canonicalize_groups(axis_index_groups)
    size = _axis_size(axes, groups)
    _check_groups_fit(groups, axes, "psum_scatter", equal_sizes=True)

    def scatter(v):
        shape = get_aval(v).shape
        sd = _canonical_axis(scatter_dimension, len(shape))
        _check_scatter_shape(shape, sd, size, tiled)
        if (isinstance(v, Tracer) and groups is None
                and _unreduced_on(v, axes, "psum_scatter")):
            return unreduced_reduce_scatter_p.bind(
                v, axis_name=axes, scatter_dimension=sd, axis_index_groups=None,
                axis_size=size, tiled=bool(tiled))
        return reduce_scatter_p.bind(v, axis_name=axes, scatter_dimension=sd,
                                     axis_index_groups=groups, axis_size=size,
                                     tiled=bool(tiled))
    return tree_map(scatter, x)


# ================================================================================================
# all_to_all
# ================================================================================================

def _all_to_all_group_size(axis_name, axis_index_groups):
    if axis_index_groups is not None:
        return len(axis_index_groups[0])
    return _axis_size_of(_as_axes(axis_name))


def _all_to_all_abstract_eval(x, *, axis_name, split_axis, concat_axis, axis_index_groups,
                              tiled):
    _check_bound(_as_axes(axis_name))
    s = _all_to_all_group_size(axis_name, axis_index_groups)
    shape = list(x.shape)
    if shape[split_axis] % s:
        raise ValueError(f"The size of all_to_all split_axis ({shape[split_axis]}) has to be "
                         f"divisible by the size of the named axis {axis_name} ({s})")
    shape[split_axis] //= s
    shape[concat_axis] *= s
    return ShapedArray(tuple(shape), x.dtype, False)


# params: axis_name (name or tuple, as given), split_axis, concat_axis, axis_index_groups,
# tiled (informational: the primitive always splits/concatenates, see the module docstring)
all_to_all_p = _collective("all_to_all", _all_to_all_abstract_eval)


def _all_to_all_batch(axis_data, vals, dims, *, axis_name, split_axis, concat_axis,
                      axis_index_groups, tiled):
    (x,), (d,) = vals, dims
    names = _as_axes(axis_name)
    params = dict(axis_name=axis_name, axis_index_groups=axis_index_groups, tiled=tiled)
    if axis_data.name not in names:
        if d is None:
            return all_to_all_p.bind(x, split_axis=split_axis, concat_axis=concat_axis,
                                     **params), None
        return all_to_all_p.bind(x, split_axis=split_axis + (d <= split_axis),
                                 concat_axis=concat_axis + (d <= concat_axis), **params), d
    full = _gather_all(x, d, axis_data, names)             # [total, ...]
    total = _shape(full)[0]
    gs, members, rank = _group_tables(axis_index_groups, total)
    s = len(gs[0])
    f = batching.moveaxis(_split(full, split_axis + 1, s), split_axis + 1, 1)
    # f[q, c] = chunk c of position q's operand; position p receives chunk rank[p] of each
    # member of its group, in group order.
    r = _pick_pairs(f, [[(q, rank[p]) for q in members[p]] for p in range(total)])
    r = _fold(batching.moveaxis(r, 1, concat_axis + 1), concat_axis + 1)
    return _pick_own(r, axis_data, names)


batching.batch_rules[all_to_all_p] = _all_to_all_batch


def _all_to_all_transpose(ct, x, *, axis_name, split_axis, concat_axis, axis_index_groups,
                          tiled):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    return [all_to_all_p.bind(ct, axis_name=axis_name, split_axis=concat_axis,
                              concat_axis=split_axis, axis_index_groups=axis_index_groups,
                              tiled=tiled)]


ad.deflinear2(all_to_all_p, _all_to_all_transpose)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    """Materialize the mapped axis and map a different axis.

    In the output, the mapped axis ``axis_name`` of the input is materialized at position
    ``concat_axis``, and the input axis ``split_axis`` is mapped with the name
    ``axis_name``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names (flattened order).
      split_axis: the positional axis of ``x`` that is split among the positions.
      concat_axis: the positional axis of the output that holds what is received.
      axis_index_groups: optional list of lists of axis indices that each exchange
        separately; they must cover all axis indices exactly once and all have the same
        size.
      tiled: when ``False``, ``x.shape[split_axis]`` must equal the axis (group) size, that
        axis is removed and a new one of that size is inserted at ``concat_axis``; when
        ``True`` it must be divisible by it, and ``split_axis`` is divided and
        ``concat_axis`` multiplied by it.

    Returns:
      Array(s) of the shape described under ``tiled``.
    """
    if isinstance(axis_name, list):
        axis_name = tuple(axis_name)
    groups = _canonicalize_groups(axis_index_groups)
    group_size = _axis_size(axis_name, groups)
    _check_groups_fit(groups, _as_axes(axis_name), "all_to_all", equal_sizes=True)
    lax = _lax()

    def bind(v):
        shape = get_aval(v).shape
        nd = len(shape)
        sa = _canonical_axis(split_axis, nd)
        ca = _canonical_axis(concat_axis, nd)
        if tiled:
            if shape[sa] % group_size != 0:
                raise ValueError(f"The size of all_to_all split_axis ({shape[sa]}) has to be "
                                 f"divisible by the size of the named axis {axis_name} "
                                 f"({group_size})")
        else:
            if group_size != shape[sa]:
                raise ValueError("all_to_all requires the size of the mapped axis axis_name "
                                 "to equal x.shape[split_axis], but they are "
                                 f"{group_size} and {shape[sa]} respectively.")
            if sa < ca:
                ca += 1
                v = lax.expand_dims(v, (ca,))
            elif sa > ca:
                v = lax.expand_dims(v, (ca,))
                sa += 1
        out = all_to_all_p.bind(v, axis_name=axis_name, split_axis=sa, concat_axis=ca,
                                axis_index_groups=groups, tiled=bool(tiled))
        if not tiled and sa != ca:
            out = lax.squeeze(out, (sa,))
        return out
    return tree_map(bind, x)


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """Swap the mapped axis ``axis_name`` with the positional axis ``axis``:
    ``all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names.
      axis: the positional axis to swap; its size must equal the axis (group) size.
      axis_index_groups: optional groups, as for ``all_to_all``.

    Returns:
      Array(s) of the shape of ``x``.
    """
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)


# ================================================================================================
# ppermute, pshuffle
# ================================================================================================

def _ppermute_abstract_eval(x, *, axis_name, perm):
    _check_bound(axis_name)
    return ShapedArray(x.shape, x.dtype, x.weak_type)


# params: axis_name (tuple), perm (tuple of (src, dst) pairs of ints)
ppermute_p = _collective("ppermute", _ppermute_abstract_eval)


def _permuted_rows(full, perm):
    """Row ``dst`` gets row ``src`` of ``full``; rows that are no destination get zeros."""
    lax = _lax()
    total = _shape(full)[0]
    src_for = dict((dst, src) for src, dst in perm)
    y = _take0(full, [src_for.get(k, k) for k in range(total)])
    if len(src_for) == total:
        return y
    shape = _shape(y)
    mask = np.array([k in src_for for k in range(total)]).reshape((-1,) + (1,) * (len(shape) - 1))
    from kiln.array import make_array
    pred = make_array(np.broadcast_to(mask, shape))
    return lax.select(pred, y, _zeros(shape, get_aval(y).dtype))


def _ppermute_batch(axis_data, vals, dims, *, axis_name, perm):
    (x,), (d,) = vals, dims
    if axis_data.name not in axis_name:
        return ppermute_p.bind(x, axis_name=axis_name, perm=perm), d
    if axis_name == (axis_data.name,):
        if d is None and len(perm) == axis_data.size:
            return x, None
        return _permuted_rows(batching.bdim_at_front(x, d, axis_data.size), perm), 0
    full = _gather_all(x, d, axis_data, axis_name)
    return _pick_own(_permuted_rows(full, perm), axis_data, axis_name)


batching.batch_rules[ppermute_p] = _ppermute_batch
ad.deflinear2(ppermute_p, lambda ct, x, *, axis_name, perm: [
    Zero(x.aval) if type(ct) is Zero else
    ppermute_p.bind(ct, axis_name=axis_name, perm=tuple((d, s) for s, d in perm))])


def ppermute(x, axis_name, perm):
    """Perform a collective permutation according to ``perm``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names (flattened positions).
      perm: ``(source_index, destination_index)`` pairs; no two pairs share a source or a
        destination. Positions that are no destination receive zeros.

    Returns:
      Array(s) of the shape of ``x``: position ``dst`` holds ``x`` of position ``src``.
    """
    axes = _as_axes(axis_name)
    perm = tuple((int(s), int(d)) for s, d in perm)
    srcs, dsts = [s for s, _ in perm], [d for _, d in perm]
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise ValueError(f"ppermute sources and destinations must be unique, got {perm}.")
    total = _axis_size_of(axes)
    if any(not 0 <= i < total for i in srcs + dsts):
        raise ValueError(f"ppermute indices must be in [0, {total}) for the axis "
                         f"{axis_name!r} of size {total}, got {perm}.")
    return tree_map(lambda v: ppermute_p.bind(v, axis_name=axes, perm=perm), x)


def pshuffle(x, axis_name, perm):
    """``ppermute`` with the permutation given as sources: position ``i`` of the output
    gets ``x`` from position ``perm[i]``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names.
      perm: a permutation of ``range(axis_size)``.

    Returns:
      Array(s) of the shape of ``x``.
    """
    if set(perm) != set(range(len(perm))):
        raise ValueError(f"`perm` does not represent a permutation: {perm}")
    return ppermute(x, axis_name, list(zip(perm, range(len(perm)))))


# ================================================================================================
# pbroadcast
# ================================================================================================

def _pbroadcast_abstract_eval(x, *, axis_name, source):
    _check_bound(_as_axes(axis_name))
    return ShapedArray(x.shape, x.dtype, x.weak_type)


# params: axis_name (name or tuple, as given), source (int)
pbroadcast_p = _collective("pbroadcast", _pbroadcast_abstract_eval)


def _pbroadcast_batch(axis_data, vals, dims, *, axis_name, source):
    (x,), (d,) = vals, dims
    names = _as_axes(axis_name)
    if axis_data.name not in names:
        return pbroadcast_p.bind(x, axis_name=axis_name, source=source), d
    if names == (axis_data.name,):
        if d is None:
            return x, None
        return _lax().index_in_dim(x, source, d, keepdims=False), None
    full = _gather_all(x, d, axis_data, names)
    return _lax().index_in_dim(full, source, 0, keepdims=False), None


def _pbroadcast_transpose(ct, x, *, axis_name, source):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    lax = _lax()
    total = psum_p.bind(ct, axes=_as_axes(axis_name), axis_index_groups=None)
    is_source = lax.eq(axis_index(axis_name), np.int32(source))
    shape = _shape(total)
    pred = lax.broadcast_in_dim(is_source, shape, ())
    return [lax.select(pred, total, _zeros(shape, get_aval(total).dtype))]


batching.batch_rules[pbroadcast_p] = _pbroadcast_batch
ad.deflinear2(pbroadcast_p, _pbroadcast_transpose)


def pbroadcast(x, axis_name, source):
    """Broadcast ``x`` from position ``source`` of the mapped axis to every position.

    Equivalent to ``psum(where(axis_index(axis_name) == source, x, 0), axis_name)``.

    Args:
      x: array(s) (a pytree) with a mapped axis named ``axis_name``.
      axis_name: a hashable axis name, or a tuple of names (flattened positions).
      source: the index of the position whose value is copied.

    Returns:
      Array(s) of the shape of ``x``.
    """
    if isinstance(axis_name, list):
        axis_name = tuple(axis_name)
    total = _axis_size_of(_as_axes(axis_name))
    source = int(source)
    if not 0 <= source < total:
        raise ValueError(f"pbroadcast source {source} is out of range for the axis "
                         f"{axis_name!r} of size {total}")
    return tree_map(lambda v: pbroadcast_p.bind(v, axis_name=axis_name, source=source), x)


# ================================================================================================
# pvary / pcast
# ================================================================================================

def _pvary_abstract_eval(x, *, axes):
    _check_bound(axes)
    return ShapedArray(x.shape, x.dtype, x.weak_type)


# params: axes (tuple of names). The value becomes varying along ``axes``: the identity
# on every device; under shard_map's vmap emulation an unmapped operand is broadcast
# along the axis (it is then mapped, i.e. ``aval.mat.varying`` names the axis).
pvary_p = _collective("pvary", _pvary_abstract_eval)
pvary_p.impl = lambda x, *, axes: (_check_bound(axes), x)[1]


def _pvary_batch(axis_data, vals, dims, *, axes):
    (x,), (d,) = vals, dims
    if axis_data.name not in axes:
        return pvary_p.bind(x, axes=axes), d
    if d is None:
        x = _lax().broadcast_in_dim(x, (axis_data.size,) + tuple(_shape(x)),
                                    tuple(range(1, len(_shape(x)) + 1)))
        d = 0
    rest = tuple(a for a in axes if a != axis_data.name)
    return (pvary_p.bind(x, axes=rest) if rest else x), d


def _pvary_transpose(ct, x, *, axes):
    if type(ct) is Zero:
        return [Zero(x.aval)]
    return [psum_p.bind(ct, axes=axes, axis_index_groups=None)]


batching.batch_rules[pvary_p] = _pvary_batch
ad.deflinear2(pvary_p, _pvary_transpose)

_PCAST_TO = ("varying", "reduced", "unreduced")


def pcast(x, axis_name, *, to: str):
    """Change how ``x`` varies over the manual mesh axes ``axis_name`` inside
    ``shard_map`` (JAX's ``lax.pcast``). ``to='varying'``: the value (the same on every
    device along those axes) becomes device-varying (its type says so; no data moves),
    e.g. to be a loop carry that is updated per device. ``'reduced'`` (from invarying:
    the same value, whose cotangent is unreduced), ``'unreduced'`` (from varying: the
    per-device values become partials of their sum); ``'varying'`` from reduced.

    Args:
      x: array(s) (a pytree).
      axis_name: a mesh axis name or a tuple of names.
      to: ``'varying'``, ``'reduced'`` or ``'unreduced'``.
    """
    if isinstance(axis_name, (set, frozenset)):
        raise TypeError(f"axis_name={axis_name} must be a tuple or a str. Got {axis_name}")
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    if not axis_name:
        return x
    if to not in _PCAST_TO:
        raise ValueError("Got unexpected `to` value. Allowed `to` values are: "
                         f"{set(_PCAST_TO)}")
    axes = skip_size_one(axes)
    if not axes:
        return x
    from kiln.sharding import get_abstract_mesh
    try:
        _check_bound(axes)
    except NameError:
        if not get_abstract_mesh().manual_axes:     # outside any shard_map: JAX's error
            raise ValueError("pvary should be called under jax.shard_map (lax.pcast(..., "
                             f"to='varying') over the mesh axes {axes}).") from None
        raise _unbound_message(NameError(f"Found an unbound axis name: "
                                         f"{[a for a in axes if not _bound(a)][0]}. "),
                               "pvary") from None
    casts = {("invarying", "varying"): pvary_p, ("invarying", "reduced"): preduced_p,
             ("varying", "unreduced"): vary_unreduced_cast_p,
             ("reduced", "varying"): reduced_vary_cast_p}

    def one(v):
        src = manual_state(get_aval(v), axes, "jax.lax.pcast")
        prim = casts.get((src, to))
        if prim is None:
            raise ValueError(f"Unsupported pcast from={src}, to={to!r}")
        return prim.bind(v, axes=axes)
    return tree_map(one, x)


# ``pargmax``/``pargmin`` live in JAX's ``jax._src.lax.parallel`` only (not in ``jax.lax``),
# so they are left out of ``__all__``.

def _axis_index_of_val(x, val, axis_name):
    """Per element, the smallest index along ``axis_name`` whose ``x`` equals ``val``."""
    lax = _lax()
    idx = axis_index(axis_name)
    mask = lax.eq(val, x)
    big = np.iinfo(np.dtype(idx.dtype)).max
    valid = lax.select(mask, lax.full(mask.shape, idx, idx.dtype),
                       lax.full(mask.shape, big, idx.dtype))
    return pmin(valid, axis_name)


def pargmax(x, axis_name):
    """The index along the mapped axis ``axis_name`` of the largest ``x``, per element (the
    first one on ties); int32."""
    if isinstance(axis_name, (tuple, list)):
        raise TypeError(f"pargmax only accepts a single axis, got {axis_name}")
    return _axis_index_of_val(x, pmax(x, axis_name), axis_name)


def pargmin(x, axis_name):
    """The index along the mapped axis ``axis_name`` of the smallest ``x``, per element
    (the first one on ties); int32."""
    if isinstance(axis_name, (tuple, list)):
        raise TypeError(f"pargmin only accepts a single axis, got {axis_name}")
    return _axis_index_of_val(x, pmin(x, axis_name), axis_name)


__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "axis_size",
           "ppermute", "pshuffle", "pswapaxes", "all_to_all", "psum_scatter", "pbroadcast",
           "psum_p", "pmax_p", "pmin_p", "all_gather_p", "axis_index_p", "ppermute_p",
           "reduce_scatter_p", "all_to_all_p", "pbroadcast_p", "psum_size", "pcast", "pvary_p"]


# ================================================================================================
# reduced / unreduced types (JAX's ``preduced``, ``vary_unreduced_cast``,
# ``reduced_vary_cast``, ``unreduced_psum``, ``unreduced_reduce_scatter``,
# ``all_gather_reduced``)
#
# Inside a shard_map, a value *unreduced* along a manual axis holds one partial value per
# device; its value is their sum. A value *reduced* along an axis is the same on every
# device, but its cotangent is unreduced there (it is the transpose of the unreduced
# type). The casts move no data; on a device they are the identity. Under the vmap
# emulation of shard_map an unreduced value is mapped along the axis (its partials), a
# reduced one unmapped (``kiln.interpreters.batching`` records the type on the tracer).
# ================================================================================================

def _cast_prim(name, batch_broadcast: bool):
    p = _collective(name, _pvary_abstract_eval)
    p.impl = lambda x, *, axes: (_check_bound(axes), x)[1]

    def batch(axis_data, vals, dims, *, axes):
        (x,), (d,) = vals, dims
        if axis_data.name not in axes:
            return p.bind(x, axes=axes), d
        if d is None and batch_broadcast:
            x = _lax().broadcast_in_dim(x, (axis_data.size,) + tuple(_shape(x)),
                                        tuple(range(1, len(_shape(x)) + 1)))
            d = 0
        rest = tuple(a for a in axes if a != axis_data.name)
        return (p.bind(x, axes=rest) if rest else x), d
    batching.batch_rules[p] = batch
    return p


# Invariant -> Reduced; Varying -> Unreduced; Reduced -> Varying (no data moves)
preduced_p = _cast_prim("preduced", False)
vary_unreduced_cast_p = _cast_prim("vary_unreduced_cast", False)
reduced_vary_cast_p = _cast_prim("reduced_vary_cast", True)

# Unreduced -> Invariant: the sum of the partials (the values of psum)
unreduced_psum_p = _collective("unreduced_psum", _same_aval)
_reducer_batch(unreduced_psum_p, _rs, _times_size)


def _zero_or(ct, x, f):
    return [Zero(x.aval)] if type(ct) is Zero else [f(ct)]


ad.deflinear2(preduced_p, lambda ct, x, *, axes: _zero_or(
    ct, x, lambda c: unreduced_psum_p.bind(c, axes=axes, axis_index_groups=None)))
ad.deflinear2(unreduced_psum_p, lambda ct, x, *, axes, axis_index_groups=None: _zero_or(
    ct, x, lambda c: preduced_p.bind(c, axes=axes)))
ad.deflinear2(vary_unreduced_cast_p, lambda ct, x, *, axes: _zero_or(
    ct, x, lambda c: reduced_vary_cast_p.bind(c, axes=axes)))
ad.deflinear2(reduced_vary_cast_p, lambda ct, x, *, axes: _zero_or(
    ct, x, lambda c: vary_unreduced_cast_p.bind(c, axes=axes)))

# Unreduced -> Varying: each device keeps its chunk of the sum (reduce_scatter's values)
unreduced_reduce_scatter_p = _collective("unreduced_reduce_scatter",
                                         _reduce_scatter_abstract_eval)
# Varying -> Reduced: the gathered value, the same on every device, typed reduced
all_gather_reduced_p = _collective("all_gather_reduced", _all_gather_invariant_abstract_eval)


def _urs_rule(axis_data, vals, dims, *, axis_name, scatter_dimension, axis_index_groups,
              axis_size, tiled):
    (x,), (d,) = vals, dims
    if axis_data.name not in axis_name:
        sd, out_d = scatter_dimension, d
        if d is not None:
            if d <= sd:
                sd += 1
            elif not tiled:
                out_d = d - 1
        return unreduced_reduce_scatter_p.bind(
            x, axis_name=axis_name, scatter_dimension=sd, axis_index_groups=None,
            axis_size=axis_size, tiled=tiled), out_d
    return _reduce_scatter_batch(axis_data, vals, dims, axis_name=axis_name,
                                 scatter_dimension=scatter_dimension,
                                 axis_index_groups=axis_index_groups, axis_size=axis_size,
                                 tiled=tiled)


def _agr_rule(axis_data, vals, dims, *, all_gather_dimension, axis_name, axis_size, tiled):
    (x,), (d,) = vals, dims
    if axis_data.name not in axis_name:
        a = all_gather_dimension
        if d is not None:
            if d <= a:
                a += 1
            elif not tiled:
                d += 1
        return all_gather_reduced_p.bind(x, all_gather_dimension=a, axis_name=axis_name,
                                         axis_size=axis_size, tiled=tiled), d
    return _all_gather_batch(axis_data, vals, dims, all_gather_dimension=all_gather_dimension,
                             axis_name=axis_name, axis_index_groups=None,
                             axis_size=axis_size, tiled=tiled)


batching.batch_rules[unreduced_reduce_scatter_p] = _urs_rule
batching.batch_rules[all_gather_reduced_p] = _agr_rule
ad.deflinear2(unreduced_reduce_scatter_p, lambda ct, x, *, axis_name, scatter_dimension,
              axis_index_groups, axis_size, tiled: _zero_or(
                  ct, x, lambda c: all_gather_reduced_p.bind(
                      c, all_gather_dimension=scatter_dimension, axis_name=axis_name,
                      axis_size=axis_size, tiled=tiled)))
ad.deflinear2(all_gather_reduced_p, lambda ct, x, *, all_gather_dimension, axis_name,
              axis_size, tiled: _zero_or(
                  ct, x, lambda c: unreduced_reduce_scatter_p.bind(
                      c, axis_name=axis_name, scatter_dimension=all_gather_dimension,
                      axis_index_groups=None, axis_size=axis_size, tiled=tiled)))


def _mat_of(v):
    from kiln.core.avals import empty_mat
    return getattr(get_aval(v), "mat", None) or empty_mat


def manual_state(aval, axes, name: str) -> str:
    """How a value is typed along the manual axes ``axes``: ``'varying'``,
    ``'unreduced'``, ``'reduced'`` or ``'invarying'`` (JAX's ``_get_from``; all of
    ``axes`` must agree)."""
    from kiln.core.avals import empty_mat
    mat = getattr(aval, "mat", None) or empty_mat
    out = set()
    for a in axes:
        out.add("varying" if a in mat.varying else "unreduced" if a in mat.unreduced
                else "reduced" if a in mat.reduced else "invarying")
    if len(out) > 1:
        raise ValueError(
            f"{name} can only accept axis_name which corresponds to one of varying, "
            f"unreduced, reduced or invarying state of the input. Got input type: {aval}, "
            f"axes: {axes} and input state: {out}")
    return out.pop()


def _unreduced_on(v, axes, name: str) -> bool:
    """Whether ``v`` is unreduced along ``axes`` (then a sum over them is JAX's
    ``unreduced_psum``/``unreduced_psum_scatter``); a value unreduced along only some
    of them is JAX's ValueError."""
    aval = get_aval(v)
    mat = getattr(aval, "mat", None)
    if mat is None or not (mat.unreduced & set(axes)):
        return False
    return manual_state(aval, axes, f"jax.lax.{name}") == "unreduced"


def _check_gather_reduced(aval, axes) -> None:
    """JAX's checks of ``all_gather(..., to='reduced')``: a Varying -> Reduced
    collective (inside a shard_map whose manual axes include ``axes``)."""
    mat = getattr(aval, "mat", None)
    varying = mat.varying if mat is not None else frozenset()
    if not varying:
        raise ValueError("all_gather_reduced only accepts inputs that are varying. Got "
                         f"{aval.str_short()}")
    if not varying & set(axes):
        raise ValueError("all_gather_reduced is a Varying -> Reduced collective. This means "
                         f"that the axis_name={axes} passed to `all_gather_reduced` must be "
                         f"present in jax.typeof(x).mat.varying={varying}")
    if mat.reduced & set(axes):
        raise ValueError("all_gather_reduced's input cannot be reduced across the axis_name "
                         f"provided. Got x={aval.str_short()} and axis_name={axes}")
