"""``jax.custom_batching``: ``custom_vmap`` and ``sequential_vmap``.

A ``custom_vmap`` function behaves as the function it wraps except under ``vmap``, where
its rule ``rule(axis_size, in_batched, *args) -> (out, out_batched)`` runs instead:
``in_batched`` is a list (one entry per positional argument) of pytrees of bools, batched
arguments have their batch axis at the front, and ``out_batched`` is a pytree of bools of
``out``'s structure saying which outputs carry the batch axis (at the front). Forward mode
works (the JVP of the rule is used under ``vmap``); reverse mode needs a ``custom_vjp``
around the function, as in JAX.

The primitive (``custom_vmap_call``) and its rules are in
:mod:`kiln.interpreters.custom_vmap`; this module flattens the user's pytrees around them.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kiln._physical_tree import tree_flatten, tree_map, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln.core.trace import get_aval
from kiln.custom_derivatives import _fn_name, _resolve_kwargs
from kiln.interpreters.custom_vmap import custom_vmap_call_p, trace_call

__all__ = ["custom_vmap", "sequential_vmap"]


class custom_vmap:
    """Customize how ``vmap`` batches a function (``jax.custom_batching.custom_vmap``)."""

    fun: Callable[..., Any]
    vmap_rule: Callable[..., tuple[Any, Any]] | None

    def __init__(self, fun: Callable[..., Any]):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.vmap_rule = None

    def __getattr__(self, name):
        # As JAX: attributes this object lacks (``defjvp`` of a wrapped ``custom_jvp``, ...)
        # are the wrapped function's.
        if name == "fun":
            raise AttributeError(name)
        return getattr(self.fun, name)

    def def_vmap(self, vmap_rule: Callable[..., tuple[Any, Any]]):
        """Set the rule ``rule(axis_size, in_batched, *args) -> (out, out_batched)``;
        returns it unchanged."""
        self.vmap_rule = vmap_rule
        return vmap_rule

    @api_boundary
    def __call__(self, *args, **kwargs):
        name = _fn_name(self.fun)
        args = _resolve_kwargs(self.fun, args, kwargs, "custom_vmap")
        if not self.vmap_rule:
            raise AttributeError(
                f"No batching rule defined for custom_vmap function {name} using def_vmap.")
        flat, in_tree = tree_flatten(args)
        store = {}
        fun = self.fun

        def flat_fun(*xs):
            out = fun(*tree_unflatten(in_tree, list(xs)))
            leaves, store["tree"] = tree_flatten(out)
            return leaves

        closed, tconsts = trace_call(flat_fun, [get_aval(x) for x in flat])
        out_tree = store["tree"]
        rule = _flat_rule(self.vmap_rule, len(tconsts), in_tree, out_tree)
        outs = custom_vmap_call_p.bind(*tconsts, *flat, call=closed, rule=rule,
                                       name=_fn_name(self.vmap_rule))
        return tree_unflatten(out_tree, list(outs))


def _rule_name(rule) -> str:
    return getattr(rule, "__name__", "<unnamed rule>")


def _check_trees(rule, out_tree, tree, batched_tree):
    if tree != batched_tree:
        raise ValueError(
            "structure of output value and output batching specification returned by "
            f"custom vmap rule ({_rule_name(rule)}) do not match.\n"
            f"Output values: {tree}\nBatching spec: {batched_tree}")
    if tree != out_tree:
        raise ValueError(
            f"structure of output returned by custom vmap rule ({_rule_name(rule)}) does "
            "not match that of original custom-vmapped function.\n"
            f"Original output: {out_tree}\nRule output: {tree}")


def _flat_rule(user_rule, n_consts: int, in_tree, out_tree):
    """The user's pytree rule as the primitive's flat rule ``(size, batched, args)``."""

    def rule(axis_size, batched, args):
        if any(batched[:n_consts]):
            raise NotImplementedError(
                f"custom_vmap function with rule {_rule_name(user_rule)} closes over a value "
                "batched by vmap: pass it as an argument instead")
        in_batched = tree_unflatten(in_tree, list(batched[n_consts:]))
        user_args = tree_unflatten(in_tree, list(args[n_consts:]))
        out, out_batched = user_rule(int(axis_size), list(in_batched), *user_args)
        leaves, tree = tree_flatten(out)
        b_leaves, b_tree = tree_flatten(out_batched)
        _check_trees(user_rule, out_tree, tree, b_tree)
        return leaves, [bool(b) for b in b_leaves]

    functools.update_wrapper(rule, user_rule)
    return rule


def _tree_split(mask, tree):
    lhs = tree_map(lambda m, x: x if m else None, mask, tree)
    rhs = tree_map(lambda m, x: None if m else x, mask, tree)
    return lhs, rhs


def _tree_merge(mask, lhs, rhs):
    return tree_map(lambda m, a, b: a if m else b, mask, lhs, rhs)


def sequential_vmap(f):
    """A ``custom_vmap`` whose rule runs ``f`` once per batch element, with ``lax.map``
    over the batched arguments (the unbatched ones are passed to every call)."""
    from kiln.lax.control.loops import map as _lax_map

    f = custom_vmap(f)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        del axis_size

        def to_map(mapped_args):
            return f(*_tree_merge(in_batched, mapped_args, bcast_args))

        mapped_args, bcast_args = _tree_split(in_batched, list(args))
        out = _lax_map(to_map, mapped_args)
        return out, tree_map(lambda _: True, out)

    return f

