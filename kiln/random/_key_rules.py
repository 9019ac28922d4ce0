"""``lax`` primitives applied to typed key arrays: each rule applies the primitive to the
keys' raw data.

A typed key array (``PRNGKeyArray``, dtype ``key<fry>``) of shape ``S`` holds raw data of
shape ``S + impl.key_shape``. ``Primitive.bind`` hands every primitive applied to a key
array to :func:`extended_bind` (the hook ``kiln.core.trace.extended_bind``), which looks
the primitive up in :data:`key_rules`. A rule rewrites the primitive's parameters for the
trailing key-data axes (JAX does the same when it lowers these primitives for extended
dtypes), binds it on the data and wraps the result as keys. So keys reshape, broadcast,
transpose, slice, index, gather, scatter (``.at[].set``), select and compare under every
transformation, and the core only ever sees ``uint32`` data.

Primitives without a rule (arithmetic, reductions, sorting, ``pad``, ...) raise JAX's
``TypeError``: ``add does not accept dtype key<fry> at position 0. ...``.

What this module must not hold: key creation or derivation (``_keys``).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.core import trace as _core
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval

#: ``{primitive: rule(*args, **params)}``; ``args`` hold at least one key array.
key_rules: dict = {}


def _keys():
    from kiln.random import _keys
    return _keys


def _is_key(x) -> bool:
    return type(x) in _core.extended_types


def _ntrail(k) -> int:
    return len(k._impl.key_shape)


def _wrap(like, data):
    return _keys().PRNGKeyArray(like._impl, data)


def _same_impl(name: str, keys) -> None:
    impl = keys[0]._impl
    for k in keys[1:]:
        if k._impl != impl:
            raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                            f"{', '.join(str(x.dtype) for x in keys)}.")


def _dtype_name(x) -> str:
    dt = x.dtype if _is_key(x) else get_aval(x).dtype
    return str(dt) if not isinstance(dt, np.dtype) else dt.name


def _all_keys(name: str, args) -> None:
    """JAX's error for an operation mixing keys with arrays of a NumPy dtype."""
    if not all(_is_key(a) for a in args):
        raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                        f"{', '.join(_dtype_name(a) for a in args)}.")
    _same_impl(name, list(args))


def _jax_kinds(kinds) -> str:
    names = list(kinds)
    if "signedinteger" in names and "unsignedinteger" in names:
        i = names.index("signedinteger")
        names[i] = "integer"
        names.remove("unsignedinteger")
    return ", ".join(names)


# JAX's own wording where its error comes from elsewhere than a dtype rule.
_REJECT_MESSAGES = {
    "sort": (TypeError, "lt_to does not accept dtype {dt} at position 0. Accepted dtypes at "
             "position 0 are subtypes of integer, floating, bool."),
    "reduce_max": (ValueError, "Unsupported dtype for max: {dt}"),
    "reduce_min": (ValueError, "Unsupported dtype for min: {dt}"),
}


def _reject(prim, args):
    kinds = getattr(prim, "accepted_dtype_kinds", None)
    pos = next(i for i, a in enumerate(args) if _is_key(a))
    dt = args[pos].dtype
    special = _REJECT_MESSAGES.get(prim.name)
    if special is not None:
        return special[0](special[1].format(dt=dt))
    if kinds is not None and getattr(prim, "nary", False):
        return TypeError(f"{prim.name} does not accept dtype {dt} at position {pos}. "
                         f"Accepted dtypes at position {pos} are subtypes of "
                         f"{_jax_kinds(kinds)}.")
    if kinds is not None:
        return TypeError(f"{prim.name} does not accept dtype {dt}. Accepted dtypes are "
                         f"subtypes of {_jax_kinds(kinds)}.")
    return TypeError(f"{prim.name} does not accept dtype {dt} at position {pos}: typed PRNG "
                     "key arrays support only structural operations (reshape, slicing, "
                     "indexing, concatenation, select, comparison for equality).")


def extended_bind(prim, args, params):
    """``prim.bind(*args, **params)`` where some of ``args`` are typed key arrays."""
    rule = key_rules.get(prim)
    if rule is None:
        raise _reject(prim, args)
    return rule(*args, **params)


_core.extended_bind[0] = extended_bind


def _register(prim, rule: Callable) -> None:
    key_rules[prim] = rule


def _trail(k, n: int) -> tuple:
    """The positions of the key-data axes after ``n`` leading axes."""
    return tuple(range(n, n + _ntrail(k)))


# ----------------------------------------------------------------------------------------------
# Rules.

def _install() -> None:
    from kiln.lax import gather_scatter as gs
    from kiln.lax import slicing as sl
    from kiln.lax import structural as st
    from kiln.lax.arith import eq_p, ne_p
    from kiln.lax.autodiff_ops import stop_gradient_p

    def broadcast_in_dim(x, *, shape, broadcast_dimensions, sharding=None):
        ks = tuple(x._impl.key_shape)
        data = st.broadcast_in_dim_p.bind(
            x._base_array, shape=tuple(shape) + ks,
            broadcast_dimensions=tuple(broadcast_dimensions) + _trail(x, len(shape)),
            sharding=sharding)
        return _wrap(x, data)
    _register(st.broadcast_in_dim_p, broadcast_in_dim)

    def reshape(x, *, new_sizes, dimensions, sharding=None):
        if dimensions is not None:
            dimensions = tuple(dimensions) + _trail(x, x.ndim)
        data = st.reshape_p.bind(x._base_array,
                                 new_sizes=tuple(new_sizes) + tuple(x._impl.key_shape),
                                 dimensions=dimensions, sharding=sharding)
        return _wrap(x, data)
    _register(st.reshape_p, reshape)

    def transpose(x, *, permutation):
        perm = tuple(permutation) + _trail(x, x.ndim)
        return _wrap(x, st.transpose_p.bind(x._base_array, permutation=perm))
    _register(st.transpose_p, transpose)

    def squeeze(x, *, dimensions):
        dims = tuple(int(d) % x.ndim for d in dimensions) if x.ndim else tuple(dimensions)
        return _wrap(x, st.squeeze_p.bind(x._base_array, dimensions=dims))
    _register(st.squeeze_p, squeeze)

    def rev(x, *, dimensions):
        return _wrap(x, sl.rev_p.bind(x._base_array, dimensions=tuple(dimensions)))
    _register(sl.rev_p, rev)

    def concatenate(*xs, dimension):
        _all_keys("concatenate", xs)
        return _wrap(xs[0], sl.concatenate_p.bind(*[x._base_array for x in xs],
                                                  dimension=dimension))
    _register(sl.concatenate_p, concatenate)

    def slice_(x, *, start_indices, limit_indices, strides):
        ks = tuple(x._impl.key_shape)
        starts = tuple(start_indices) + (0,) * len(ks)
        limits = tuple(limit_indices) + ks
        st_ = None if strides is None else tuple(strides) + (1,) * len(ks)
        return _wrap(x, sl.slice_p.bind(x._base_array, start_indices=starts,
                                        limit_indices=limits, strides=st_))
    _register(sl.slice_p, slice_)

    def split(x, *, sizes, axis):
        return [_wrap(x, d) for d in sl.split_p.bind(x._base_array, sizes=sizes, axis=axis)]
    _register(sl.split_p, split)

    def _zero_indices(k, idx):
        dt = get_aval(idx[0]).dtype if idx else np.dtype(np.int32)
        from kiln.array import make_array
        return [make_array(np.zeros((), dt))] * _ntrail(k)

    def dynamic_slice(x, *idx, slice_sizes):
        if any(_is_key(i) for i in idx):
            raise _reject(sl.dynamic_slice_p, idx)
        data = sl.dynamic_slice_p.bind(
            x._base_array, *idx, *_zero_indices(x, idx),
            slice_sizes=tuple(slice_sizes) + tuple(x._impl.key_shape))
        return _wrap(x, data)
    _register(sl.dynamic_slice_p, dynamic_slice)

    def dynamic_update_slice(x, u, *idx):
        _all_keys("dynamic_update_slice", (x, u))
        if any(_is_key(i) for i in idx):
            raise _reject(sl.dynamic_update_slice_p, idx)
        data = sl.dynamic_update_slice_p.bind(x._base_array, u._base_array, *idx,
                                              *_zero_indices(x, idx))
        return _wrap(x, data)
    _register(sl.dynamic_update_slice_p, dynamic_update_slice)

    def gather(x, indices, *, dimension_numbers, slice_sizes, fill_value=None, **params):
        if _is_key(indices) or not _is_key(x):
            raise _reject(gs.gather_p, (x, indices) if _is_key(indices) else (indices,))
        dn = dimension_numbers
        out_rank = len(get_aval(indices).shape) - 1 + len(dn.offset_dims)
        dn = dn._replace(offset_dims=tuple(dn.offset_dims) + _trail(x, out_rank))
        if _is_key(fill_value):
            raise TypeError("unhashable type: 'PRNGKeyArray'")
        data = gs.gather_p.bind(x._base_array, indices, dimension_numbers=dn,
                                slice_sizes=tuple(slice_sizes) + tuple(x._impl.key_shape),
                                fill_value=fill_value, **params)
        return _wrap(x, data)
    _register(gs.gather_p, gather)

    def scatter(x, indices, updates, *, dimension_numbers, **params):
        if _is_key(indices):
            raise _reject(gs.scatter_p, (indices,))
        _all_keys("scatter", (x, updates))
        dn = dimension_numbers
        u_rank = updates.ndim
        dn = dn._replace(update_window_dims=tuple(dn.update_window_dims) +
                         _trail(x, u_rank))
        data = gs.scatter_p.bind(x._base_array, indices, updates._base_array,
                                 dimension_numbers=dn, **params)
        return _wrap(x, data)
    _register(gs.scatter_p, scatter)

    def select_n(which, *cases):
        if _is_key(which):
            raise TypeError(f"select_n `which` must be boolean or integer type, got "
                            f"{which.dtype}.")
        if not all(_is_key(c) for c in cases):
            raise TypeError("select_n cases must have the same dtypes, got "
                            f"{[_dtype_name(c) for c in cases]}.")
        _same_impl("select_n", list(cases))
        shapes = [c.shape for c in cases]
        if any(s != shapes[0] for s in shapes[1:]):
            raise TypeError(f"select_n cases must have the same shapes, got {shapes}.")
        w = get_aval(which)
        k0 = cases[0]
        if w.shape:
            if w.shape != k0.shape:
                raise TypeError("select_n `which` must be scalar or have the same shape as "
                                f"cases, got `which` shape {w.shape} but case shape "
                                f"{k0.shape}.")
            full = tuple(k0.shape) + tuple(k0._impl.key_shape)
            which = st.broadcast_in_dim_p.bind(which, shape=full,
                                               broadcast_dimensions=tuple(range(w.ndim)),
                                               sharding=None)
        return _wrap(k0, st.select_n_p.bind(which, *[c._base_array for c in cases]))
    _register(st.select_n_p, select_n)

    def convert_element_type(x, *, new_dtype, weak_type, sharding=None):
        if new_dtype == x.dtype:
            return x
        name = new_dtype.name if hasattr(new_dtype, "name") else str(new_dtype)
        raise ValueError(f"Cannot convert_element_type from {x.dtype} to {name}")
    _register(st.convert_element_type_p, convert_element_type)

    def compare(prim, reduce_all):
        def rule(x, y):
            if not (_is_key(x) and _is_key(y)):
                raise TypeError(f"{prim.name} does not accept dtypes "
                                f"{_dtype_name(x)}, {_dtype_name(y)}.")
            _same_impl(prim.name, [x, y])
            from kiln.lax import monoid_reductions as mr
            dx, dy = x._base_array, y._base_array
            if x.shape != y.shape:      # rank-0 operands broadcast, as for lax.eq
                if x.shape and y.shape:
                    raise TypeError(f"{prim.name} got incompatible shapes for "
                                    f"broadcasting: {x.shape}, {y.shape}.")
                shape = x.shape or y.shape
                dx = _broadcast_data(x, shape)
                dy = _broadcast_data(y, shape)
            out = prim.bind(dx, dy)
            axes = _trail(x, len(x.shape or y.shape))
            return (mr.reduce_and if reduce_all else mr.reduce_or)(out, axes)
        return rule
    _register(eq_p, compare(eq_p, True))
    _register(ne_p, compare(ne_p, False))

    def identity(prim):
        def rule(x, **params):
            return _wrap(x, prim.bind(x._base_array, **params))
        return rule
    _register(stop_gradient_p, identity(stop_gradient_p))
    from kiln.parallel.constraint import sharding_constraint_p
    _register(sharding_constraint_p, identity(sharding_constraint_p))


def _broadcast_data(k, shape):
    from kiln.lax import structural as st
    ks = tuple(k._impl.key_shape)
    if k.shape == tuple(shape):
        return k._base_array
    nd = len(shape)
    return st.broadcast_in_dim_p.bind(k._base_array, shape=tuple(shape) + ks,
                                      broadcast_dimensions=tuple(range(nd - k.ndim, nd)) +
                                      _trail(k, nd), sharding=None)


def key_aval(k) -> ShapedArray:
    """``get_aval`` of a key array: its key-typed abstract value."""
    return k.aval


_install()
