"""``sparsify``'s jaxpr interpreter: ``eval_sparse`` runs a jaxpr on ``SparsifyValue``s,
``sparsify_raw`` traces a function and runs it so, and ``sparsify_jaxpr`` turns a jaxpr of
dense values into a function of the flattened buffers of sparse ones (what the rules of
``jit`` and the loops bind).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kiln.experimental.sparse._sparsify_env import (
    SparsifyEnv,
    SparsifyValue,
    arrays_to_spvalues,
    is_spvalue,
    spvalues_to_arrays,
    spvalues_to_avals,
)
from kiln.experimental.sparse._sparsify_rules import (
    raise_unimplemented_primitive,
    sparse_rules_bcoo,
    sparse_rules_bcsr,
)

__all__ = ["apply_sparse_rule", "eval_sparse", "n_leaves", "sparsify_jaxpr", "sparsify_raw"]


def apply_sparse_rule(spenv: SparsifyEnv, prim, invals: Sequence[SparsifyValue],
                      params: dict) -> list:
    """The result handles of ``prim`` applied to ``invals``, at least one of them sparse:
    the BCSR rule when an operand is BCSR, else the BCOO rule."""
    table = sparse_rules_bcsr if any(v.is_bcsr() for v in invals) else sparse_rules_bcoo
    rule = table.get(prim)
    if rule is None:
        raise_unimplemented_primitive(prim)
    return list(rule(spenv, *invals, **params))


def eval_sparse(jaxpr, consts: Sequence[Any], spvalues: Sequence[SparsifyValue],
                spenv: SparsifyEnv) -> list:
    """Evaluate ``jaxpr`` on handles into ``spenv``.

    Args:
      jaxpr: an open jaxpr (``kiln.core.jaxpr.Jaxpr``).
      consts: dense values of its constvars.
      spvalues: handles of its arguments (dense or sparse).
      spenv: the environment the handles point into; results are pushed onto it.

    Returns:
      The handles of the jaxpr's outputs.
    """
    from kiln.core.jaxpr import DropVar, Literal
    env: dict = {}

    def read(v):
        if isinstance(v, Literal):
            return spenv.dense(v.val)
        return env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = spenv.dense(c)
    if len(spvalues) != len(jaxpr.invars):
        raise TypeError(f"jaxpr expects {len(jaxpr.invars)} arguments, got {len(spvalues)}")
    for v, x in zip(jaxpr.invars, spvalues):
        env[v] = x
    for eqn in jaxpr.eqns:
        prim = eqn.primitive
        invals = [read(v) for v in eqn.invars]
        if any(x.is_sparse() for x in invals):
            outs = apply_sparse_rule(spenv, prim, invals, eqn.params)
        else:
            bufs = prim.bind(*[spenv.data(x) for x in invals], **eqn.params)
            bufs = bufs if prim.multiple_results else [bufs]
            outs = [None if isinstance(v, DropVar) else spenv.dense(b)
                    for v, b in zip(eqn.outvars, bufs)]
        for v, x in zip(eqn.outvars, outs):
            if not isinstance(v, DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


def trace_for_sparsify(f: Callable, avals: Sequence, in_tree, params: dict):
    """Trace ``f(*tree_unflatten(in_tree, args), **params)`` at ``avals``; returns
    ``(jaxpr, consts, out_tree)``."""
    from kiln.interpreters.staging import trace_to_jaxpr
    from kiln.tree_util import tree_flatten, tree_unflatten
    store: dict = {}

    def flat(*xs):
        out = f(*tree_unflatten(in_tree, list(xs)), **params)
        leaves, store["tree"] = tree_flatten(out)
        return leaves
    jaxpr, consts = trace_to_jaxpr(flat, list(avals))
    return jaxpr, consts, store["tree"]


def sparsify_raw(f: Callable) -> Callable:
    """``f`` as a function of handles: ``sparsify_raw(f)(spenv, *spvalues, **params)``
    returns ``(out_spvalues, out_tree)``, ``f`` traced at the handles' abstract values and
    its jaxpr evaluated with :func:`eval_sparse`."""
    from kiln.tree_util import tree_flatten

    def wrapped(spenv: SparsifyEnv, *spvalues: SparsifyValue, **params):
        flat, in_tree = tree_flatten(spvalues, is_leaf=is_spvalue)
        avals = spvalues_to_avals(spenv, flat)
        jaxpr, consts, out_tree = trace_for_sparsify(f, avals, in_tree, params)
        result = eval_sparse(jaxpr, consts, flat, spenv)
        if len(result) != out_tree.num_leaves:
            raise RuntimeError("Internal: eval_sparse does not return the expected number of "
                               f"outputs: got {len(result)} for {out_tree.num_leaves}")
        return result, out_tree
    return wrapped


def n_leaves(spvalue: SparsifyValue) -> int:
    """The number of buffers of the array ``spvalue`` stands for when flattened."""
    if spvalue.is_bcsr():
        return 3
    return 2 if spvalue.is_bcoo() else 1


def sparsify_jaxpr(spenv: SparsifyEnv, closed, spvalues: Sequence[SparsifyValue],
                   avals: Sequence | None = None, split: int | None = None):
    """``closed`` (a ClosedJaxpr of dense values) as a function of the flattened buffers of
    ``spvalues``' arrays.

    Args:
      spenv: the environment of ``spvalues``.
      closed: the jaxpr.
      spvalues: handles of its arguments.
      avals: the abstract values the function will be traced at (default: the buffers').
      split: when given, the outputs' first ``split`` handles and the rest are flattened as
        two groups (a scan's carry and its stacked outputs).

    Returns:
      ``(fun, flat_args, store)``: ``fun(*flat)`` returns the flat output buffers and
      records the output trees in ``store["trees"]`` (one, or two with ``split``) and the
      output handles in ``store["outs"]``; ``store["avals"]`` holds the input avals.
    """
    from kiln.core.trace import get_aval
    from kiln.tree_util import tree_flatten, tree_unflatten
    args = spvalues_to_arrays(spenv, list(spvalues))
    flat, in_tree = tree_flatten(args)
    store: dict = {"avals": list(avals) if avals is not None else
                   [get_aval(a) for a in flat]}

    def fun(*xs):
        env = SparsifyEnv()
        vals = arrays_to_spvalues(env, tree_unflatten(in_tree, list(xs)))
        outs = eval_sparse(closed.jaxpr, closed.consts, vals, env)
        groups = [outs] if split is None else [outs[:split], outs[split:]]
        leaves, trees = [], []
        for g in groups:
            ls, t = tree_flatten(spvalues_to_arrays(env, g))
            leaves += ls
            trees.append(t)
        store["trees"] = trees
        store["outs"] = outs
        return leaves
    return fun, flat, store
