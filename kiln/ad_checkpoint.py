"""``jax.ad_checkpoint``: ``checkpoint``/``remat``, ``checkpoint_name`` and the
``checkpoint_policies`` namespace.

A policy is a predicate ``policy(prim, *avals, **params)`` saying whether the output of an
equation may be saved as a residual for the backward pass (``True``), or must be
recomputed (``False``). The policies here answer exactly as JAX's do, so a user's policy
combinators (``save_from_both_policies``) and hand-written policies work unchanged.

kiln's ``checkpoint`` consults the policy when it is differentiated
(``kiln.interpreters.remat``): the outputs of equations the policy saves are residuals of
the forward pass, everything else the backward pass needs is recomputed (no policy:
everything, JAX's ``nothing_saveable``). ``checkpoint_name`` binds the ``name`` primitive,
the identity on values that policies recognise by its name. Offloading policies (``offload_dot_with_no_batch_dims``,
``save_and_offload_only_these_names``) name memory spaces that kiln's single CPU device
does not have; their predicates answer as JAX's, returning :data:`Recompute`,
:data:`Saveable` or an :class:`Offloadable`.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any

from kiln._physical_tree import tree_map
from kiln.core.trace import Primitive
from kiln.custom_derivatives import checkpoint, remat
from kiln.interpreters import ad, batching

__all__ = ["checkpoint", "remat", "checkpoint_name", "checkpoint_policies", "Recompute",
           "saved_residuals", "name_p",
           "Saveable", "Offloadable"]


class _Marker:
    """A named singleton answer of a policy (``Recompute``/``Saveable``)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: A policy's answer: recompute this value in the backward pass.
Recompute = _Marker("Recompute")
#: A policy's answer: save this value as a residual.
Saveable = _Marker("Saveable")


@dataclasses.dataclass(frozen=True)
class Offloadable:
    """A policy's answer: save this value in memory space ``dst`` (moved from ``src``)."""
    src: str
    dst: str


def _name_jvp(primals, tangents, *, name):
    return name_p.bind(primals[0], name=name), tangents[0]


#: ``checkpoint_name``'s primitive (``name`` in jaxprs, as JAX's): the identity, which
#: policies (``save_only_these_names`` ...) recognise by its ``name`` parameter. The
#: compiler treats it as the identity; its tangent is the input's, unnamed.
name_p = Primitive("name")
name_p.impl = lambda x, *, name: x
name_p.abstract_eval = lambda aval, *, name: aval
name_p.weak_type_rule = lambda w, *, name: w
ad.jvp_rules[name_p] = _name_jvp
batching.vectorized_batcher(name_p)


def checkpoint_name(x: Any, name: str) -> Any:
    """Name the value(s) ``x`` for checkpoint policies (``save_only_these_names`` ...).

    Args:
      x: an array or a pytree of arrays.
      name: the name policies see.

    Returns:
      ``x`` unchanged (kiln's ``checkpoint`` recomputes every intermediate, so the name
      does not change what is saved).
    """
    if not isinstance(name, str):
        raise TypeError(f"checkpoint_name expects a string name, got {name!r}")
    return tree_map(lambda v: name_p.bind(v, name=name), x)


def _is_prim(prim, name: str) -> bool:
    return getattr(prim, "name", None) == name


def everything_saveable(*_args, **_params) -> bool:
    """Save every intermediate (no recomputation)."""
    return True


def nothing_saveable(*_args, **_params) -> bool:
    """Save nothing: recompute every intermediate."""
    return False


def _no_batch_dims(params) -> bool:
    (_, _), (lhs_b, rhs_b) = params["dimension_numbers"]
    return not lhs_b and not rhs_b


@dataclasses.dataclass(frozen=True)
class DotsSaveable:
    """Save the outputs of matrix multiplications (``dot_general``, and convolutions
    unless ``only_if_no_batch_dims``); with ``only_if_no_batch_dims`` only the
    ``dot_general`` s without batch dimensions."""
    only_if_no_batch_dims: bool

    def __call__(self, prim, *args, **params) -> bool:
        if self.only_if_no_batch_dims:
            return _is_prim(prim, "dot_general") and _no_batch_dims(params)
        return _is_prim(prim, "dot_general") or _is_prim(prim, "conv_general_dilated")


dots_saveable = DotsSaveable(False)
dots_with_no_batch_dims_saveable = DotsSaveable(True)


def offload_dot_with_no_batch_dims(offload_src: str, offload_dst: str):
    """Offload the outputs of batch-free ``dot_general`` s from ``offload_src`` to
    ``offload_dst``; recompute everything else."""
    def policy(prim, *_args, **params):
        if _is_prim(prim, "dot_general") and _no_batch_dims(params):
            return Offloadable(src=offload_src, dst=offload_dst)
        return Recompute
    return policy


@dataclasses.dataclass(frozen=True)
class SaveOnlyTheseNames:
    """Save only the values named (``checkpoint_name``) with one of ``saveable_names``."""
    saveable_names: frozenset

    def __call__(self, prim, *_args, **params) -> bool:
        return _is_prim(prim, "name") and params["name"] in self.saveable_names


@dataclasses.dataclass(frozen=True)
class SaveAnyNamesButThese:
    """Save every named value except those named with one of ``names``."""
    names: frozenset

    def __call__(self, prim, *_args, **params) -> bool:
        return _is_prim(prim, "name") and params["name"] not in self.names


def save_only_these_names(*names_which_can_be_saved: str) -> SaveOnlyTheseNames:
    """Policy: save only values named with one of these names."""
    return SaveOnlyTheseNames(frozenset(names_which_can_be_saved))


def save_any_names_but_these(*names_not_to_save: str) -> SaveAnyNamesButThese:
    """Policy: save the named values, except those with one of these names."""
    return SaveAnyNamesButThese(frozenset(names_not_to_save))


def save_anything_except_these_names(*names_not_to_save: str):
    """Policy as JAX 0.10.2 defines it: save everything (the names are not consulted)."""
    del names_not_to_save
    return everything_saveable


def save_and_offload_only_these_names(*, names_which_can_be_saved,
                                      names_which_can_be_offloaded, offload_src, offload_dst):
    """Policy: save the values with the first names, offload those with the second,
    recompute the rest. The two name sets must not intersect (ValueError)."""
    saved, offloaded = set(names_which_can_be_saved), set(names_which_can_be_offloaded)
    both = saved & offloaded
    if both:
        raise ValueError("names_which_can_be_saved and names_which_can_be_offloaded must "
                         f"not intersect; both contain {both}")

    def policy(prim, *_args, **params):
        if _is_prim(prim, "name") and params["name"] in saved:
            return Saveable
        if _is_prim(prim, "name") and params["name"] in offloaded:
            return Offloadable(src=offload_src, dst=offload_dst)
        return Recompute
    return policy


def save_from_both_policies(policy_1, policy_2):
    """Policy: save what either boolean policy saves (ValueError if one answers other
    than a bool)."""
    def policy(prim, *args, **params):
        a, b = policy_1(prim, *args, **params), policy_2(prim, *args, **params)
        if not (isinstance(a, bool) and isinstance(b, bool)):
            raise ValueError(f"save_from_both_policies needs policies that return booleans; "
                             f"got {a} and {b}. Write a custom policy function instead.")
        return a or b
    return policy


checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable,
    nothing_saveable=nothing_saveable,
    dots_saveable=dots_saveable,
    checkpoint_dots=dots_saveable,
    dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=dots_with_no_batch_dims_saveable,
    offload_dot_with_no_batch_dims=offload_dot_with_no_batch_dims,
    save_anything_except_these_names=save_anything_except_these_names,
    save_any_names_but_these=save_any_names_but_these,
    save_only_these_names=save_only_these_names,
    save_from_both_policies=save_from_both_policies,
    save_and_offload_only_these_names=save_and_offload_only_these_names,
)


def saved_residuals(f, *args, **kwargs) -> list:
    """The values reverse-mode differentiation of ``f`` at ``args`` saves for the
    backward pass (``jax.ad_checkpoint.saved_residuals``): a list of ``(aval, source)``,
    ``source`` saying where each comes from: ``"from a literal"``, ``"from a constant"``,
    ``"from the argument NAME"``, ``"named 'N' from FILE:LINE"`` (a ``checkpoint_name``),
    ``"output of jitted function 'F' from ..."``, or ``"output of PRIM from ..."``. The
    residuals are the leaves of the function ``vjp`` returns, staged by ``make_jaxpr``
    (so a ``checkpoint`` policy decides them as in a real backward pass)."""
    from kiln._physical_tree import tree_flatten, tree_unflatten
    from kiln.core.jaxpr import Literal
    from kiln.jitting import make_jaxpr
    from kiln.transformations import _arg_names, vjp
    leaves, in_tree = tree_flatten((args, kwargs))

    def f_(*xs):
        a, k = tree_unflatten(in_tree, list(xs))
        return f(*a, **k)

    closed, shapes = make_jaxpr(lambda *xs: vjp(f_, *xs), return_shape=True)(*leaves)
    jaxpr = closed.jaxpr
    n_res = len(tree_flatten(shapes[1])[0])
    outs = jaxpr.outvars[len(jaxpr.outvars) - n_res:]
    names = _arg_paths(f, args, kwargs, _arg_names)
    lits = [x for x in outs if isinstance(x, Literal)]
    res = {x for x in outs if not isinstance(x, Literal)}
    results = [(x.aval, "from a literal") for x in lits]
    results += [(v.aval, "from a constant") for v in jaxpr.constvars if v in res]
    for i, v in enumerate(jaxpr.invars):
        if v in res:
            results.append((v.aval, f"from the argument {names[i]}" if names[i] else
                            f"from the argument at flattened index {i}"))
    for eqn in jaxpr.eqns:
        src = str(eqn.source_info) if eqn.source_info is not None else "unknown"
        for v in eqn.outvars:
            if v not in res:
                continue
            if eqn.primitive is name_p:
                results.append((v.aval, f"named '{eqn.params['name']}' from {src}"))
            elif eqn.primitive.name == "jit":
                results.append((v.aval, f"output of jitted function "
                                f"'{eqn.params.get('name')}' from {src}"))
            else:
                results.append((v.aval, f"output of {eqn.primitive.name} from {src}"))
    return results


def _arg_paths(f, args, kwargs, arg_names) -> list:
    """Per leaf of ``(args, kwargs)``, its name as JAX prints it (``x[0]``, ``y``)."""
    from kiln.tree_util import keystr, tree_flatten_with_path
    try:
        import inspect
        bound = inspect.signature(f).bind(*args, **kwargs)
        named = dict(bound.arguments)
    except (TypeError, ValueError):
        named = None
    out = []
    pos = arg_names(f, len(args))
    for group, tree in ((0, tuple(args)), (1, kwargs)):
        for path, _ in tree_flatten_with_path(tree)[0]:
            head = path[0]
            first = pos[head.idx] if group == 0 else str(head.key)
            if named is not None and group == 1 and first not in named:
                first = ""
            out.append(first + keystr(tuple(path[1:])) if first else "")
    return out
