"""``jax.api_util``: helpers for writing transformations on :class:`WrappedFun` s.

``flatten_fun``/``flatten_fun_nokwargs`` turn a function of pytrees into one of flat
arguments and results (the output structure is read afterwards from a thunk);
``debug_info`` describes a function for error messages; ``shaped_abstractify`` gives the
abstract value of an argument; ``argnums_partial``, ``donation_vector``,
``rebase_donate_argnums`` and ``flatten_axes`` handle static, donated and axis arguments
as ``jit`` and ``vmap`` do.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from kiln._physical_tree import (
    broadcast_prefix,
    keystr,
    tree_flatten,
    tree_flatten_with_path,
    tree_structure,
    tree_unflatten,
)
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.extend.linear_util import DebugInfo, WrappedFun, transformation_with_aux2

__all__ = [
    "argnums_partial", "debug_info", "donation_vector", "flatten_axes", "flatten_fun",
    "flatten_fun_nokwargs", "rebase_donate_argnums", "safe_map", "shaped_abstractify",
]


def safe_map(f: Callable, *args) -> list:
    """``list(map(f, *args))`` that requires all ``args`` to have the same length."""
    args = [list(a) for a in args]
    n = len(args[0])
    for a in args[1:]:
        if len(a) != n:
            raise ValueError(f"length mismatch: {[len(a) for a in args]}")
    return list(map(f, *args))


def _flatten_fun(f, store, in_tree, *args_flat):
    args, kwargs = tree_unflatten(in_tree, args_flat)
    ans = f(*args, **kwargs)
    leaves, out_tree = tree_flatten(ans)
    store.store(out_tree)
    return leaves


def flatten_fun(f: WrappedFun, in_tree) -> tuple[WrappedFun, Callable[[], Any]]:
    """``f`` as a function of the leaves of ``(args, kwargs)`` (structure ``in_tree``)
    returning a flat list; the thunk gives the output treedef after a call."""
    return transformation_with_aux2(_flatten_fun)(f, in_tree)


def _flatten_fun_nokwargs(f, store, in_tree, *args_flat):
    args = tree_unflatten(in_tree, args_flat)
    ans = f(*args)
    leaves, out_tree = tree_flatten(ans)
    store.store(out_tree)
    return leaves


def flatten_fun_nokwargs(f: WrappedFun, in_tree) -> tuple[WrappedFun, Callable[[], Any]]:
    """:func:`flatten_fun` for positional arguments only (``in_tree`` is the args tuple's
    structure)."""
    return transformation_with_aux2(_flatten_fun_nokwargs)(f, in_tree)


def _source_info(fun: Callable) -> str:
    name = getattr(fun, "__name__", type(fun).__name__)
    try:
        target = inspect.unwrap(fun)
        filename = inspect.getsourcefile(target)
        _, lineno = inspect.getsourcelines(target)
    except (TypeError, OSError, ValueError):
        return name
    return f"{name} at {filename}:{lineno}"


def debug_info(traced_for: str, fun: Callable, args: Sequence[Any], kwargs: dict[str, Any],
               *, static_argnums: Sequence[int] = (), static_argnames: Sequence[str] = (),
               result_paths_thunk: Callable[[], tuple[str, ...]] | None = None,
               sourceinfo: str | None = None, signature: inspect.Signature | None = None
               ) -> DebugInfo:
    """Describe ``fun`` traced for ``traced_for`` on ``args``/``kwargs``: its name and
    source location and the names of its flattened non-static arguments."""
    src = sourceinfo if sourceinfo is not None else _source_info(fun)
    static = {i % len(args) if args else i for i in static_argnums}
    names: list[str] | None = []
    try:
        sig = signature if signature is not None else inspect.signature(fun)
        bound = sig.bind_partial(*args, **kwargs)
        arguments = bound.arguments
        positional = [p for p in sig.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for i, a in enumerate(args):
            if i in static:
                continue
            pname = positional[i].name if i < len(positional) else f"args[{i}]"
            for path, _ in tree_flatten_with_path(a)[0]:
                names.append(pname + keystr(path))
        for k in sorted(kwargs):
            if k in static_argnames or k not in arguments:
                continue
            for path, _ in tree_flatten_with_path(kwargs[k])[0]:
                names.append(k + keystr(path))
    except (TypeError, ValueError):
        names = None
    return DebugInfo(traced_for, src, None if names is None else tuple(names),
                     result_paths_thunk)


def shaped_abstractify(x) -> ShapedArray:
    """The abstract value of an argument: an array, tracer, scalar, NumPy value or
    ``ShapeDtypeStruct``."""
    aval = getattr(x, "aval", None)
    if isinstance(aval, ShapedArray):
        return aval
    if hasattr(x, "shape") and hasattr(x, "dtype") and not hasattr(x, "__array__"):
        return ShapedArray(x.shape, x.dtype, getattr(x, "weak_type", False))
    return get_aval(x)


class _Static:
    """The static arguments of :func:`argnums_partial`, compared by value (by identity
    when some are unhashable)."""

    __slots__ = ("val", "hashable")

    def __init__(self, val: tuple, hashable: bool):
        self.val = val
        self.hashable = hashable

    def __hash__(self):
        return hash(self.val) if self.hashable else id(self.val)

    def __eq__(self, other):
        if not isinstance(other, _Static):
            return False
        return self.val == other.val if self.hashable else self.val is other.val


def _argnums_partial(f, dyn_argnums, statics, *dyn_args, **kwargs):
    args = list(statics.val)
    for i, a in zip(dyn_argnums, dyn_args):
        args[i] = a
    return f(*args, **kwargs)


def argnums_partial(f: WrappedFun, dyn_argnums: int | Sequence[int], args: Sequence[Any],
                    require_static_args_hashable: bool = True) -> tuple[WrappedFun, tuple]:
    """Fix the arguments of ``f`` not in ``dyn_argnums`` to their values in ``args``.
    Returns ``(wrapped, dyn_args)``: call ``wrapped`` with the dynamic arguments only."""
    dyn_argnums = (dyn_argnums,) if isinstance(dyn_argnums, int) else tuple(dyn_argnums)
    dyn_argnums = tuple(i % len(args) for i in dyn_argnums)
    statics = []
    hashable = True
    for i, a in enumerate(args):
        if i in dyn_argnums:
            statics.append(None)
            continue
        try:
            hash(a)
        except TypeError:
            if require_static_args_hashable:
                raise ValueError(f"Non-hashable static arguments are not supported. An error "
                                 f"occurred while trying to hash an object of type "
                                 f"{type(a)}, {a}.") from None
            hashable = False
        statics.append(a)
    dyn_args = tuple(args[i] for i in dyn_argnums)
    wrapped = f.wrap(_argnums_partial, (dyn_argnums, _Static(tuple(statics), hashable)), None)
    return wrapped, dyn_args


def rebase_donate_argnums(donate_argnums: Sequence[int], static_argnums: Sequence[int]
                          ) -> tuple[int, ...]:
    """Donated argument numbers renumbered as if the static arguments were removed."""
    static = sorted(set(static_argnums))
    donate = sorted(set(donate_argnums))
    if set(static) & set(donate):
        raise ValueError(f"static_argnums {static} and donate_argnums {donate} cannot "
                         "intersect.")
    out = []
    for d in donate:
        out.append(d - sum(1 for s in static if s < d))
    return tuple(out)


def donation_vector(donate_argnums: Sequence[int], donate_argnames: Sequence[str],
                    in_tree, kws: bool = True) -> tuple[bool, ...]:
    """One flag per leaf of ``in_tree`` (the structure of ``(args, kwargs)``, or of
    ``args`` when ``kws`` is False): whether that leaf is donated."""
    if kws:
        args_tree, kwargs_tree = in_tree.children()
    else:
        args_tree, kwargs_tree = in_tree, None
    flags: list[bool] = []
    for i, sub in enumerate(args_tree.children()):
        flags.extend([i in donate_argnums] * sub.num_leaves)
    if kwargs_tree is not None:
        kw = tree_unflatten(kwargs_tree, list(range(kwargs_tree.num_leaves)))
        for k in sorted(kw):
            flags.extend([k in donate_argnames] * tree_structure(kw[k]).num_leaves)
    return tuple(flags)


def flatten_axes(name: str, treedef, axis_tree, *, kws: bool = False,
                 tupled_args: bool = False) -> list:
    """Broadcast ``axis_tree`` (a prefix of the tree ``treedef`` describes, ``None`` a
    leaf) to one entry per leaf of ``treedef``."""
    del tupled_args
    proxy = tree_unflatten(treedef, [object()] * treedef.num_leaves)
    if kws:
        axis_tree = (axis_tree, {})
    try:
        return broadcast_prefix(axis_tree, proxy, is_leaf=lambda x: x is None)
    except ValueError:
        raise ValueError(f"{name} specification must be a tree prefix of the corresponding "
                         f"value, got specification {axis_tree} for value tree "
                         f"{treedef}.") from None
