"""``jax.sharding.auto_axes`` and ``explicit_axes``: run a function with some mesh axes of
the context mesh switched to ``Auto`` (the compiler chooses how values are split along
them) or ``Explicit`` (the split is part of each value's type).

``auto_axes(f, axes=, out_sharding=)``: the arguments lose those axes from their types'
shardings, ``f`` runs under the abstract mesh with them ``Auto``, and its results are
laid out as ``out_sharding`` (over the outer mesh). ``explicit_axes(f, axes=,
in_sharding=)``: the arguments are laid out as ``in_sharding`` under the mesh with those
axes ``Explicit``, and the results keep only the outer mesh's ``Explicit`` axes. kiln
computes the same values either way; what changes is the results' layout and the
types inside ``f`` (``get_abstract_mesh()``, ``typeof(x).sharding``).
"""
from __future__ import annotations

import functools

from kiln import sharding as _sharding
from kiln._abstract_mesh import EMPTY_ABSTRACT_MESH, AxisType
from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln.parallel.placement import reshard, typeof
from kiln.sharding import NamedSharding, PartitionSpec, get_abstract_mesh, use_abstract_mesh


def _sharding_mesh(shardings, name: str):
    """The abstract mesh of the ``NamedSharding`` leaves of ``shardings`` (all the same:
    JAX's ValueError otherwise), or the empty mesh."""
    leaves, _ = tree_flatten(shardings, is_leaf=lambda s: isinstance(s, (NamedSharding,
                                                                          PartitionSpec)))
    found = EMPTY_ABSTRACT_MESH
    for s in leaves:
        if isinstance(s, NamedSharding):
            am = s.mesh.abstract_mesh
            if not found.empty and found != am:
                raise ValueError(f"Shardings passed to {name} should have the same mesh. "
                                 f"Got one mesh {found} and another {s.mesh}")
            found = am
    return found


def _new_mesh(axes, axis_type: AxisType, name: str, shardings=None):
    """``(outer abstract mesh, the mesh with ``axes`` of ``axis_type``, axes)``, or None
    when there is no mesh (neither a context nor one in ``shardings``)."""
    cur = get_abstract_mesh()
    from_shardings = _sharding_mesh(shardings, name)
    if cur.empty and from_shardings.empty:
        return None
    if not cur.empty and not from_shardings.empty:
        if (cur.axis_names, cur.axis_sizes, cur.axis_types) != (
                from_shardings.axis_names, from_shardings.axis_sizes,
                from_shardings.axis_types):
            raise ValueError(f"Context mesh {cur} must match the mesh passed to shardings "
                             f"{from_shardings}. Recommended approach is to use "
                             "`jax.set_mesh` context manager.")
    mesh = from_shardings if cur.empty else cur
    if axes is None:
        axes = mesh.axis_names
    if not isinstance(axes, tuple):
        axes = (axes,)
    types = mesh._name_to_type
    for a in axes:
        if a not in types:
            raise ValueError(f"{name}: axis {a!r} is not an axis of the mesh {mesh}")
        if types[a] == AxisType.Manual:
            raise NotImplementedError(
                "Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is not "
                "allowed. Please file a bug at https://github.com/jax-ml/jax/issues with "
                "your use case")
    return mesh, mesh.update_axis_types({a: axis_type for a in axes}), axes


def _type_spec(x, mesh) -> NamedSharding:
    """``x``'s type's sharding restricted to the ``Explicit`` axes of ``mesh``, over it."""
    return NamedSharding(mesh, _sharding.modify_spec_for_auto_manual(typeof(x).sharding.spec,
                                                                  mesh))


def _over(shardings, mesh):
    """A tree prefix of shardings with its ``PartitionSpec`` leaves made
    ``NamedSharding``s over ``mesh`` (so that they take its axis types)."""
    leaves, tree = tree_flatten(shardings, is_leaf=lambda s: isinstance(
        s, (NamedSharding, PartitionSpec)) or s is None)
    return tree_unflatten(tree, [NamedSharding(mesh, s) if isinstance(s, PartitionSpec)
                                 else s for s in leaves])


def _map_leaves(fn, tree):
    leaves, treedef = tree_flatten(tree)
    return tree_unflatten(treedef, [fn(x) for x in leaves])


def _pop(kwargs: dict, given, key: str):
    if given is not None:
        return given
    if key not in kwargs:
        raise TypeError(f"Missing required keyword argument: '{key}'")
    return kwargs.pop(key)


def auto_axes(f=None, /, *, axes=None, out_sharding=None):
    """``f`` run with the mesh ``axes`` (default: all) of the context mesh ``Auto``, its
    results laid out as ``out_sharding`` (given here or as a keyword argument of the
    call). Without any mesh (no context, no ``NamedSharding`` in ``out_sharding``) it
    is ``f``."""
    if f is None:
        return lambda g: auto_axes(g, axes=axes, out_sharding=out_sharding)

    @functools.wraps(f)
    def call(*args, **kwargs):
        out_sh = _pop(kwargs, out_sharding, "out_sharding")
        info = _new_mesh(axes, AxisType.Auto, "auto_axes", shardings=out_sh)
        if info is None:
            return f(*args, **kwargs)
        prev, new, names = info
        if set(prev.auto_axes) == set(names):
            return f(*args, **kwargs)
        with use_abstract_mesh(new):
            args = reshard(args, _map_leaves(lambda a: _type_spec(a, new), args))
            out = f(*args, **kwargs)
        return reshard(out, out_sh)
    return call


def explicit_axes(f=None, /, *, axes=None, in_sharding=None):
    """``f`` run with the mesh ``axes`` (default: all) of the context mesh ``Explicit``,
    its arguments laid out as ``in_sharding`` (given here or as a keyword argument of the
    call); its results keep only the outer mesh's ``Explicit`` axes in their types."""
    if f is None:
        return lambda g: explicit_axes(g, axes=axes, in_sharding=in_sharding)

    @functools.wraps(f)
    def call(*args, **kwargs):
        in_sh = _pop(kwargs, in_sharding, "in_sharding")
        info = _new_mesh(axes, AxisType.Explicit, "explicit_axes")
        if info is None:
            raise ValueError("Context mesh cannot be empty. Please use `jax.set_mesh` API "
                             "to enter into a mesh context when using `explicit_axes` API.")
        prev, new, _ = info
        with use_abstract_mesh(new):
            args = reshard(args, _over(in_sh, new))
            out = f(*args, **kwargs)
        return reshard(out, _map_leaves(lambda o: _type_spec(o, prev), out))
    return call


_sharding.set_axis_type_fns(auto_axes, explicit_axes)
